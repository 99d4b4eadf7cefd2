//! What a backend adds to a model run beyond its builtins: the [`UserKernel`]s (a kernel
//! that writes only part of what it declares, kernels that fault) and a count of the
//! pages its driver holds. The mock provides both ([`mock_extras`]); a backend that
//! provides neither runs the model without them ([`Extras::none`]).

use capture_core::backend::Backend;
use capture_core::{KernelSignature, MemoryKind};
use capture_mock::{Mock, MockKernel};

use super::program::UserKernel;

/// A backend's user kernels and page count, for [`check_with`](super::check_with).
pub struct Extras<B: Backend> {
    /// The kernel source of each user kernel the backend has.
    pub user: Box<dyn Fn(UserKernel) -> Option<B::KernelSource>>,
    /// The pages the driver holds for every device on one backend value, when the
    /// backend can count them.
    pub live_pages: Option<fn(&B) -> usize>,
}

impl<B: Backend> Extras<B> {
    /// No user kernels (their launches do nothing) and no page count.
    pub fn none() -> Self {
        Self {
            user: Box::new(|_| None),
            live_pages: None,
        }
    }
}

fn f32_at(b: &[u8], i: usize) -> [u8; 4] {
    b[i * 4..i * 4 + 4].try_into().expect("4 bytes")
}

/// `y[i] = x[i]` for the first half of `n` elements (`n` the first info word): the rest
/// of `y`, though declared written, is left as it was.
const PARTIAL: MockKernel = MockKernel {
    name: "partial_copy",
    signature: KernelSignature::new(2, 2),
    f: |b, info| {
        let n = info.first().copied().unwrap_or(0) as usize;
        let (x, y) = b.split_at_mut(1);
        let n = n.min(x[0].len() / 4).min(y[0].len() / 4);
        for i in 0..n / 2 {
            let v = f32_at(&x[0], i);
            y[0][i * 4..i * 4 + 4].copy_from_slice(&v);
        }
    },
};

/// Panics: its work faults when it runs.
const PANICS: MockKernel = MockKernel {
    name: "panics",
    signature: KernelSignature::new(2, 2),
    f: |_, _| std::panic::resume_unwind(Box::new("a user kernel that faults")),
};

/// Shortens its output by a word: a kernel that breaks its contract, which faults like
/// one that panics.
const RESIZES: MockKernel = MockKernel {
    name: "resizes",
    signature: KernelSignature::new(2, 2),
    f: |b, _| {
        let len = b[1].len().saturating_sub(4);
        b[1].truncate(len);
    },
};

/// The mock's user kernels, and its page count.
pub fn mock_extras<const AFFINE: bool>() -> Extras<Mock<AFFINE>> {
    Extras {
        user: Box::new(|kernel| {
            Some(match kernel {
                UserKernel::Partial => PARTIAL,
                UserKernel::Panics => PANICS,
                UserKernel::Resizes => RESIZES,
            })
        }),
        live_pages: Some(|backend| {
            backend.live_pages(MemoryKind::Device) + backend.live_pages(MemoryKind::Host)
        }),
    }
}
