//! Kernels: the mock's are Rust functions over copies of their buffers and their info
//! words, and its implementation of the core's builtin set.

use std::fmt;

use capture_core::{Builtin, KernelSignature};

/// A mock kernel: a Rust function over copies of its buffers (in argument order) and its
/// info words. The buffers it writes are copied back after it runs.
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
