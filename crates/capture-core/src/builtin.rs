//! The builtin kernel set every backend provides: [`Builtin`] (names, signatures, info
//! layout), its host model to check results against, and the [`Builtins`] trait a
//! backend implements to hand out its source for each.
//!
//! It lives in the core, not in a test crate, so a backend and the programs built on it
//! depend on no test tooling to reach it.

use std::fmt;
use std::str::FromStr;

use crate::driver::Backend;
use crate::error::ServerError;
use crate::kernel::{KernelSignature, Param};

/// The kernels every backend provides, elementwise over `f32`. Each reads how many
/// elements it covers (and its scalar) from its info words, so shapes live in metadata
/// as in a real runtime.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Builtin {
    /// `out[i] = a`. Buffers: out (write). Info: `[n, a]`.
    Fill,
    /// `y[i] = x[i] + a`. Buffers: x (read), y (write). Info: `[n, a]`.
    AddScalar,
    /// `y[i] = x[i] * a`. Buffers: x (read), y (write). Info: `[n, a]`.
    MulScalar,
    /// `y[i] = a * x[i] + y[i]`. Buffers: x (read), y (read-write). Info: `[n, a]`.
    Axpy,
    /// `y[i] = x[i]`. Buffers: x (read), y (write). Info: `[n, 0]`.
    Copy,
    /// `y[r * cols + c] = x[r * cols + c] + r`: the shape comes from the info words.
    /// Buffers: x (read), y (write). Info: `[rows, cols]`.
    RowBias,
}

impl Builtin {
    /// Every builtin.
    pub const ALL: [Builtin; 6] = [
        Builtin::Fill,
        Builtin::AddScalar,
        Builtin::MulScalar,
        Builtin::Axpy,
        Builtin::Copy,
        Builtin::RowBias,
    ];

    /// How many info words every builtin takes.
    pub const INFO_WORDS: usize = 2;

    /// The kernel's name, the same on every backend.
    pub const fn name(self) -> &'static str {
        match self {
            Builtin::Fill => "fill",
            Builtin::AddScalar => "add_scalar",
            Builtin::MulScalar => "mul_scalar",
            Builtin::Axpy => "axpy",
            Builtin::Copy => "copy",
            Builtin::RowBias => "row_bias",
        }
    }

    /// The builtin named `name` (as [`name`](Self::name) spells it), if there is one.
    pub fn from_name(name: &str) -> Option<Builtin> {
        Self::ALL.into_iter().find(|b| b.name() == name)
    }

    /// Its position in [`ALL`](Self::ALL).
    pub(crate) const fn index(self) -> usize {
        self as usize
    }

    /// What the kernel takes: its buffers and its [`INFO_WORDS`](Self::INFO_WORDS) info
    /// words.
    pub const fn signature(self) -> KernelSignature {
        let params: &[Param] = match self {
            Builtin::Fill => &[Param::WRITE],
            Builtin::Axpy => &[Param::READ, Param::READ_WRITE],
            _ => &[Param::READ, Param::WRITE],
        };
        KernelSignature::of(params).with_info(Self::INFO_WORDS)
    }

    /// The info words of a launch over `n` elements with scalar `a` (for `RowBias`,
    /// `n` rows of `a as u64` columns: [`Builtin::row_bias_info`] takes the column count
    /// as the integer it is).
    pub fn info(self, n: u64, a: f32) -> [u64; 2] {
        match self {
            Builtin::RowBias => [n, a as u64],
            _ => [n, u64::from(a.to_bits())],
        }
    }

    /// The info words of a `RowBias` launch over `rows` rows of `cols` columns.
    pub const fn row_bias_info(rows: u64, cols: u64) -> [u64; 2] {
        [rows, cols]
    }

    /// The host model: what the kernel computes, on `f32` buffers in argument order.
    pub fn model(self, bufs: &mut [Vec<f32>], info: &[u64]) {
        let n = info.first().copied().unwrap_or(0) as usize;
        let a = f32::from_bits(info.get(1).copied().unwrap_or(0) as u32);
        match self {
            Builtin::Fill => bufs[0].iter_mut().take(n).for_each(|v| *v = a),
            Builtin::AddScalar | Builtin::MulScalar | Builtin::Copy => {
                let (x, y) = bufs.split_at_mut(1);
                for (o, i) in y[0].iter_mut().zip(&x[0]).take(n) {
                    *o = match self {
                        Builtin::AddScalar => i + a,
                        Builtin::MulScalar => i * a,
                        _ => *i,
                    };
                }
            }
            Builtin::Axpy => {
                let (x, y) = bufs.split_at_mut(1);
                for (o, i) in y[0].iter_mut().zip(&x[0]).take(n) {
                    *o += a * i;
                }
            }
            Builtin::RowBias => {
                let cols = info.get(1).copied().unwrap_or(0) as usize;
                let (x, y) = bufs.split_at_mut(1);
                for (k, (o, i)) in y[0]
                    .iter_mut()
                    .zip(&x[0])
                    .take(n.saturating_mul(cols))
                    .enumerate()
                {
                    *o = i + (k / cols.max(1)) as f32;
                }
            }
        }
    }
}

impl fmt::Display for Builtin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Builtin {
    type Err = ServerError;

    /// Parses a builtin's [`name`](Builtin::name); an unknown name is refused with the
    /// list of known ones.
    fn from_str(name: &str) -> Result<Self, ServerError> {
        Self::from_name(name).ok_or_else(|| {
            let known: Vec<&str> = Self::ALL.iter().map(|b| b.name()).collect();
            ServerError::invalid(
                "builtin",
                name,
                format!("no such builtin; known: {}", known.join(", ")),
            )
        })
    }
}

/// A backend that provides the builtin kernels: what the scenario suite and the demo
/// need of a backend.
pub trait Builtins: Backend {
    /// The backend's source for `kernel`; its signature is [`Builtin::signature`].
    fn builtin(kernel: Builtin) -> Self::KernelSource;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_of_add_scalar_adds_to_the_first_n_elements_only() {
        let mut bufs = vec![vec![1.0, 2.0, 3.0], vec![0.0; 3]];
        Builtin::AddScalar.model(&mut bufs, &Builtin::AddScalar.info(2, 0.5));
        assert_eq!(bufs[1], vec![1.5, 2.5, 0.0]);
    }

    #[test]
    fn row_bias_takes_its_shape_from_the_info_words() {
        let mut bufs = vec![vec![0.0; 6], vec![9.0; 6]];
        Builtin::RowBias.model(&mut bufs, &Builtin::RowBias.info(2, 3.0));
        assert_eq!(bufs[1], vec![0.0, 0.0, 0.0, 1.0, 1.0, 1.0]);
    }

    #[test]
    fn builtins_are_found_by_name_and_an_unknown_name_lists_the_known_ones() {
        for b in Builtin::ALL {
            assert_eq!(b.name().parse::<Builtin>().unwrap(), b);
            assert_eq!(Builtin::ALL[b.index()], b);
        }
        let err = "add".parse::<Builtin>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid builtin add: no such builtin; known: fill, add_scalar, mul_scalar, axpy, copy, row_bias"
        );
    }

    #[test]
    fn every_builtin_declares_its_buffers_with_their_access_and_two_info_words() {
        let with = |params: &[Param]| KernelSignature::of(params).with_info(2);
        assert_eq!(Builtin::Fill.signature(), with(&[Param::WRITE]));
        assert_eq!(
            Builtin::Axpy.signature(),
            with(&[Param::READ, Param::READ_WRITE])
        );
        for b in [
            Builtin::AddScalar,
            Builtin::MulScalar,
            Builtin::Copy,
            Builtin::RowBias,
        ] {
            assert_eq!(b.signature(), with(&[Param::READ, Param::WRITE]), "{b:?}");
        }
    }
}
