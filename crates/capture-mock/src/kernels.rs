//! Kernels: the mock's are Rust functions over copies of their buffers and their info
//! words. The builtin set every backend provides (`Builtin`, behind the `Builtins`
//! trait the scenarios use), and a host model of each, to check results against.

use std::fmt;

use capture_core::driver::Backend;

/// A mock kernel: a Rust function over copies of its buffers (in argument order) and its
/// info words. The buffers it writes are copied back after it runs.
#[derive(Clone, Copy)]
pub struct MockKernel {
    /// The kernel's name, in traces and errors.
    pub name: &'static str,
    /// What it computes.
    pub f: fn(&mut [Vec<u8>], &[u64]),
}

impl fmt::Debug for MockKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MockKernel({})", self.name)
    }
}

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

    /// The info words of a launch over `n` elements with scalar `a` (for `RowBias`,
    /// `n` rows of `a as u64` columns).
    pub fn info(self, n: u64, a: f32) -> [u64; 2] {
        match self {
            Builtin::RowBias => [n, a as u64],
            _ => [n, u64::from(a.to_bits())],
        }
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
                for (k, (o, i)) in y[0].iter_mut().zip(&x[0]).take(n * cols).enumerate() {
                    *o = i + (k / cols.max(1)) as f32;
                }
            }
        }
    }

    /// The mock's implementation.
    pub fn mock(self) -> MockKernel {
        MockKernel {
            name: self.name(),
            f: match self {
                Builtin::Fill => fill,
                Builtin::AddScalar => add_scalar,
                Builtin::MulScalar => mul_scalar,
                Builtin::Axpy => axpy,
                Builtin::Copy => copy,
                Builtin::RowBias => row_bias,
            },
        }
    }
}

/// A backend that provides the builtin kernels: what the scenario suite and the demo
/// need of a backend.
pub trait Builtins: Backend {
    /// The backend's source for `kernel`.
    fn builtin(kernel: Builtin) -> Self::KernelSource;
}

fn get(b: &[u8], i: usize) -> f32 {
    f32::from_le_bytes(b[i * 4..i * 4 + 4].try_into().expect("4 bytes"))
}

fn set(b: &mut [u8], i: usize, v: f32) {
    b[i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
}

fn n_and_a(info: &[u64], len: usize) -> (usize, f32) {
    let n = (info.first().copied().unwrap_or(0) as usize).min(len / 4);
    (n, f32::from_bits(info.get(1).copied().unwrap_or(0) as u32))
}

fn fill(b: &mut [Vec<u8>], info: &[u64]) {
    let (n, a) = n_and_a(info, b[0].len());
    for i in 0..n {
        set(&mut b[0], i, a);
    }
}

fn unary(b: &mut [Vec<u8>], info: &[u64], op: fn(f32, f32, f32) -> f32) {
    let (x, y) = b.split_at_mut(1);
    let (n, a) = n_and_a(info, x[0].len().min(y[0].len()));
    for i in 0..n {
        let v = op(get(&x[0], i), a, get(&y[0], i));
        set(&mut y[0], i, v);
    }
}

fn add_scalar(b: &mut [Vec<u8>], info: &[u64]) {
    unary(b, info, |x, a, _| x + a);
}

fn mul_scalar(b: &mut [Vec<u8>], info: &[u64]) {
    unary(b, info, |x, a, _| x * a);
}

fn axpy(b: &mut [Vec<u8>], info: &[u64]) {
    unary(b, info, |x, a, y| y + a * x);
}

fn copy(b: &mut [Vec<u8>], info: &[u64]) {
    unary(b, info, |x, _, _| x);
}

fn row_bias(b: &mut [Vec<u8>], info: &[u64]) {
    let rows = info.first().copied().unwrap_or(0) as usize;
    let cols = info.get(1).copied().unwrap_or(0) as usize;
    let (x, y) = b.split_at_mut(1);
    let n = (rows * cols).min(x[0].len() / 4).min(y[0].len() / 4);
    for k in 0..n {
        let v = get(&x[0], k) + (k / cols.max(1)) as f32;
        set(&mut y[0], k, v);
    }
}
