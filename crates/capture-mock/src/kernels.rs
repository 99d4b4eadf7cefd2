//! Kernels: the mock's are Rust functions over copies of their buffers and their words
//! (info words, then scalars), and its implementation of the core's builtin set; and
//! [`MockWork`], the user's own work as the mock runs it.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

use capture_core::{Builtin, KernelSignature};

/// The most buffers one mock launch (or work) binds: the mock's own limit, so a launch
/// carries its buffers inline and allocates nothing.
pub const MOCK_MAX_BUFFERS: usize = 8;

/// A mock kernel: a Rust function over copies of its buffers (in argument order) and its
/// words: its info words, then each scalar argument in order, its bytes little-endian
/// in one word (zero-extended), or in as many words as it needs (a struct over 8 bytes).
/// The buffers it writes are copied back after it runs.
///
/// ```
/// use capture_graphs::{Arg, Device, DeviceConfig, KernelSignature, Param, StreamId};
/// use capture_graphs::mock::{MockBackend, MockKernel};
///
/// // y = x * k, with k a scalar passed by value.
/// const SCALE: MockKernel = MockKernel {
///     name: "scale",
///     signature: KernelSignature::of(&[Param::READ, Param::WRITE, Param::scalar::<u32>()]),
///     f: |bufs, words| {
///         let k = words[0] as u8;
///         let (x, y) = bufs.split_at_mut(1);
///         for (o, i) in y[0].iter_mut().zip(&x[0]) {
///             *o = i * k;
///         }
///     },
/// };
/// let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
/// let s = StreamId::new(0);
/// let (x, y) = (dev.alloc(s, 4)?, dev.alloc(s, 4)?);
/// dev.write(s, &x, 0, [1u8, 2, 3, 4])?;
/// let k = dev.kernel(SCALE);
/// dev.launch(s, &k, [1, 1, 1], &[Arg::read(&x), Arg::write(&y), Arg::scalar(3u32)], &[])?;
/// assert_eq!(dev.read(s, &y)?, [3, 6, 9, 12]);
/// # Ok::<(), capture_graphs::ServerError>(())
/// ```
#[derive(Clone, Copy)]
pub struct MockKernel {
    /// The kernel's name, in traces and errors.
    pub name: &'static str,
    /// What it takes; the core checks every launch against it.
    pub signature: KernelSignature,
    /// What it computes.
    pub f: fn(&mut [Vec<u8>], &[u64]),
}

impl fmt::Debug for MockKernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MockKernel({})", self.name)
    }
}

/// The user's own work on the mock: a host function over copies of exactly the declared
/// ranges (in argument order), run when the stream's queue reaches it, on every replay
/// too; the ranges the arguments let it write are copied back. An `Err` (or a panic)
/// fails the work as a kernel's fault does: reported at a later wait.
#[derive(Clone)]
pub struct MockWork {
    name: Cow<'static, str>,
    #[allow(clippy::type_complexity)]
    f: Arc<dyn Fn(&mut [Vec<u8>]) -> Result<(), String> + Send + Sync>,
}

impl MockWork {
    /// Work named `name` (in traces and errors) running `f`.
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        f: impl Fn(&mut [Vec<u8>]) -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            f: Arc::new(f),
        }
    }

    /// Its name.
    pub fn name(&self) -> Cow<'static, str> {
        self.name.clone()
    }

    pub(crate) fn run(&self, ranges: &mut [Vec<u8>]) -> Result<(), String> {
        (self.f)(ranges)
    }
}

impl fmt::Debug for MockWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MockWork({})", self.name)
    }
}

/// The words a mock kernel sees for `scalars` (after its info words).
pub(crate) fn scalar_words(scalars: &[&[u8]], out: &mut Vec<u64>) {
    for bytes in scalars {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            out.push(u64::from_le_bytes(word));
        }
    }
}

/// The mock's implementation of a builtin.
pub(crate) fn builtin(kernel: Builtin) -> MockKernel {
    MockKernel {
        name: kernel.name(),
        signature: kernel.signature(),
        f: match kernel {
            Builtin::Fill => fill,
            Builtin::AddScalar => add_scalar,
            Builtin::MulScalar => mul_scalar,
            Builtin::Axpy => axpy,
            Builtin::Copy => copy,
            Builtin::RowBias => row_bias,
        },
    }
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
    let n = rows
        .saturating_mul(cols)
        .min(x[0].len() / 4)
        .min(y[0].len() / 4);
    for k in 0..n {
        let v = get(&x[0], k) + (k / cols.max(1)) as f32;
        set(&mut y[0], k, v);
    }
}
