//! What a backend adds to a model run beyond its builtins: the [`UserKernel`]s (a kernel
//! that writes only part of what it declares, kernels that fault, a kernel taking
//! scalars by value), the user's own work computing what a launch would, memory of the
//! caller's own to import, and a count of the pages its driver holds. The mock provides
//! them all ([`mock_extras`]); a backend that provides none runs the model without them
//! ([`Extras::none`]).

use std::sync::Arc;

use capture_core::backend::{Backend, Builtins, DeviceExternal, GraphDriver};
use capture_core::{Arg, Builtin, KernelSignature, MemoryKind, Param};
use capture_mock::{Mock, MockKernel, MockMemory, MockWork};

use super::program::{SCALAR_SIZES, UserKernel};

/// The computation a launch spec names, for the backend's own work to run: the builtin
/// or user kernel, and the words its function sees (info words, then each scalar).
#[derive(Clone, Debug)]
pub struct WorkOf {
    /// The builtin (when `user` is `None`).
    pub builtin: Builtin,
    /// The user kernel, if it is one.
    pub user: Option<UserKernel>,
    /// Info words, then scalars, one word each.
    pub words: Vec<u64>,
}

/// Memory of the caller's own, as the runner holds it: filled before the import, and
/// read at the end (the library must never have freed or reused it).
pub trait Imported: Send {
    /// Writes `bytes` at `offset`, outside the library.
    fn write(&self, offset: u64, bytes: &[u8]);
    /// Its bytes now.
    fn read(&self) -> Vec<u8>;
}

impl Imported for MockMemory {
    fn write(&self, offset: u64, bytes: &[u8]) {
        MockMemory::write(self, offset, bytes);
    }
    fn read(&self) -> Vec<u8> {
        MockMemory::read(self)
    }
}

/// Builds the backend's own work for a computation (`None`: it has no form of it).
pub type WorkFn<B> = Arc<dyn Fn(&WorkOf) -> Option<<B as Backend>::Work> + Send + Sync>;

/// What `Device::import` takes for one piece of the caller's memory, as often as asked
/// (the same memory imported again).
pub type ExternalFn<B> = Arc<dyn Fn() -> DeviceExternal<<B as GraphDriver>::Stream> + Send + Sync>;

/// Makes `size` bytes of the caller's own memory on the backend: what `Device::import`
/// takes, and the caller's handle of it.
pub type ImportFn<B> = Arc<dyn Fn(&B, u64) -> (ExternalFn<B>, Box<dyn Imported>) + Send + Sync>;

/// Makes `size` bytes of memory of another backend value than the device's, after
/// `skip` other pieces there: what `Device::import` must refuse.
pub type ElsewhereFn<B> = Arc<dyn Fn(u64, u8) -> (ExternalFn<B>, Box<dyn Imported>) + Send + Sync>;

/// The kernel source of each user kernel a backend has.
pub type UserFn<B> = Arc<dyn Fn(UserKernel) -> Option<<B as Backend>::KernelSource> + Send + Sync>;

/// The source of a kernel taking no buffers, one scalar of the given bytes (one of
/// [`SCALAR_SIZES`], declared with [`scalar_param`]) and the given info words: the
/// model's `Sized` launches.
pub type SizedFn<B> = Arc<dyn Fn(u32, u32) -> Option<<B as Backend>::KernelSource> + Send + Sync>;

/// Maps each of [`SCALAR_SIZES`] to an expression over the array type of that size.
macro_rules! by_size {
    ($bytes:expr, $make:ident) => {
        match $bytes {
            1 => $make!(1),
            2 => $make!(2),
            3 => $make!(3),
            4 => $make!(4),
            8 => $make!(8),
            60 => $make!(60),
            64 => $make!(64),
            65 => $make!(65),
            68 => $make!(68),
            65535 => $make!(65535),
            65536 => $make!(65536),
            65540 => $make!(65540),
            other => unreachable!("{other} is not one of SCALAR_SIZES"),
        }
    };
}

/// A scalar parameter of `bytes` bytes (one of [`SCALAR_SIZES`]) as a program declares
/// one: `Param::scalar_struct` of a byte array that size, past 16 bits too.
pub fn scalar_param(bytes: u32) -> Param {
    debug_assert!(SCALAR_SIZES.contains(&bytes), "{bytes} B");
    macro_rules! param {
        ($n:literal) => {
            Param::scalar_struct::<[u8; $n]>()
        };
    }
    by_size!(bytes, param)
}

/// The second info word that gives `[n, word]` one fixed hash under the runtime's
/// unkeyed id hasher ([`IdHasher`](capture_core::backend::IdHasher): its last step is
/// invertible, so the last word can be solved for any hash): every launch given such
/// words collides with every other under that hasher, whatever `n`.
pub fn colliding_word(n: u64) -> u64 {
    // The id hasher's steps and constant (`id_hash.rs`); checked against it below.
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    const TARGET: u64 = 0x0123_4567_89ab_cdef;
    let step = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(SEED);
    let mut inverse = SEED;
    for _ in 0..6 {
        inverse = inverse.wrapping_mul(2u64.wrapping_sub(SEED.wrapping_mul(inverse)));
    }
    // `[u64]` hashes its length, then its words.
    let word = step(step(0, 2), n).rotate_left(5) ^ TARGET.wrapping_mul(inverse);
    debug_assert_eq!(
        std::hash::BuildHasher::hash_one(
            &std::hash::BuildHasherDefault::<capture_core::backend::IdHasher>::default(),
            [n, word].as_slice()
        ),
        TARGET
    );
    word
}

/// A scalar argument of `bytes` bytes (one of [`SCALAR_SIZES`]), zeroed: a byte array
/// of any length is plain old data with bytemuck's `min_const_generics`.
pub fn scalar_of(bytes: u32) -> Arg {
    macro_rules! arg {
        ($n:literal) => {
            Arg::scalar(<[u8; $n] as bytemuck::Zeroable>::zeroed())
        };
    }
    by_size!(bytes, arg)
}

/// A backend's user kernels, own work, imported memory and page count, for
/// [`check_with`](super::check_with).
pub struct Extras<B: Backend> {
    /// The kernel source of each user kernel the backend has.
    pub user: UserFn<B>,
    /// The backend's own work computing what a launch would, when it has one: the
    /// model's foreign-work ops run it.
    pub work: Option<WorkFn<B>>,
    /// Memory of the caller's own, when the backend can make it: the model's import
    /// ops use it.
    pub import: Option<ImportFn<B>>,
    /// Memory of another backend value, when the backend can make it and must refuse
    /// it: the model's `ImportElsewhere` ops use it.
    pub elsewhere: Option<ElsewhereFn<B>>,
    /// Kernels of any scalar and info size, when the backend can make them: the
    /// model's `Sized` launches use them.
    pub sized: Option<SizedFn<B>>,
    /// The pages the driver holds for every device on one backend value, when the
    /// backend can count them.
    pub live_pages: Option<fn(&B) -> usize>,
}

impl<B: Backend> Extras<B> {
    /// No user kernels (their launches do nothing), no work, no imports, no page count.
    pub fn none() -> Self {
        Self {
            user: Arc::new(|_| None),
            work: None,
            import: None,
            elsewhere: None,
            sized: None,
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

/// `y[i] = a * x[i] + b` for `i < n`: `a` an `f32`, `b` an `i16`, `n` a `u32`, each a
/// scalar passed by value (one word each, after no info words).
const AFFINE: MockKernel = MockKernel {
    name: "affine",
    signature: KernelSignature::of(&[
        Param::READ,
        Param::WRITE,
        Param::scalar::<f32>(),
        Param::scalar::<i16>(),
        Param::scalar::<u32>(),
    ]),
    f: |b, words| {
        let a = f32::from_bits(words[0] as u32);
        let bias = f32::from(words[1] as u16 as i16);
        let n = words[2] as usize;
        let (x, y) = b.split_at_mut(1);
        let n = n.min(x[0].len() / 4).min(y[0].len() / 4);
        for i in 0..n {
            let v = a * f32::from_le_bytes(f32_at(&x[0], i)) + bias;
            y[0][i * 4..i * 4 + 4].copy_from_slice(&v.to_le_bytes());
        }
    },
};

/// `flag = 1` (a `u32`) when `x[0] >= t`, `t` the `f32` of the second info word, the flag
/// left as it was otherwise: a decode step's stop flag (rule 30), set on the end token
/// only, as an engine's sampler sets it.
const STOP_AT: MockKernel = MockKernel {
    name: "stop_at",
    signature: KernelSignature::new(2, 2),
    f: |b, info| {
        let t = f32::from_bits(info.get(1).copied().unwrap_or(0) as u32);
        if b[0].len() < 4 || b[1].len() < 4 {
            return;
        }
        let x = f32::from_le_bytes(f32_at(&b[0], 0));
        if x >= t {
            b[1][..4].copy_from_slice(&1u32.to_le_bytes());
        }
    },
};

fn user_kernel(kernel: UserKernel) -> MockKernel {
    match kernel {
        UserKernel::Partial => PARTIAL,
        UserKernel::Panics => PANICS,
        UserKernel::Resizes => RESIZES,
        UserKernel::Affine => AFFINE,
        UserKernel::StopAt => STOP_AT,
    }
}

/// The mock's user kernels, its own work (a [`MockWork`] running the kernel's function
/// over the declared ranges), its memory of the caller's own ([`MockMemory`]), and its
/// page count.
pub fn mock_extras<const A: bool>() -> Extras<Mock<A>> {
    Extras {
        user: Arc::new(|kernel| Some(user_kernel(kernel))),
        work: Some(Arc::new(|of: &WorkOf| {
            let kernel = match of.user {
                Some(user) => user_kernel(user),
                None => <Mock<A> as Builtins>::builtin(of.builtin),
            };
            let words = of.words.clone();
            Some(MockWork::new(kernel.name, move |ranges| {
                (kernel.f)(ranges, &words);
                Ok(())
            }))
        })),
        import: Some(Arc::new(|backend: &Mock<A>, size| {
            let memory = backend.external_memory(size);
            let external = memory.external();
            (
                Arc::new(move || external) as ExternalFn<Mock<A>>,
                Box::new(memory) as Box<dyn Imported>,
            )
        })),
        sized: Some(Arc::new(|bytes, words| {
            Some(MockKernel {
                name: "sized",
                signature: KernelSignature::of(&[scalar_param(bytes)]).with_info(words as usize),
                f: |_, _| {},
            })
        })),
        elsewhere: Some(Arc::new(|size, skip| {
            // Memory of a backend value of its own, kept alive by the handle, numbered
            // `skip` there.
            let other = Mock::<A>::new();
            for _ in 0..skip {
                drop(other.external_memory(4));
            }
            let memory = other.external_memory(size);
            let external = memory.external();
            (
                Arc::new(move || external) as ExternalFn<Mock<A>>,
                Box::new(memory) as Box<dyn Imported>,
            )
        })),
        live_pages: Some(|backend| {
            backend.live_pages(MemoryKind::Device) + backend.live_pages(MemoryKind::Host)
        }),
    }
}
