//! The demo's workload: a decode-shaped chain of small dependent kernels over ping-pong
//! `f32` buffers, and its host model.
//!
//! The chain starts with `copy(input -> a)` and then repeats a cycle of ten launches
//! over the ping-pong pair `a`/`b` (mixing `add_scalar`, `mul_scalar`, `axpy`,
//! `row_bias` and `copy`). Every value stays a small integer or half-integer, so each
//! result is exactly representable in `f32` whatever the chain's length: each cycle
//! returns to its start value plus a drift that sums to zero over four cycles. The
//! scalars vary across cycles from a fixed small set, so launches carry several
//! distinct info entries and the info cache reuses each of them across the chain.

use capture_graphs::Builtin;

/// Elements in each buffer of the chain.
pub(crate) const ELEMENTS: usize = 1024;

/// Rows of `row_bias`'s view of a buffer; `ROWS * COLS == ELEMENTS`.
const ROWS: u64 = 8;

/// Columns of `row_bias`'s view of a buffer.
const COLS: f32 = 128.0;

/// Launches in one cycle of the chain, after the leading copy.
const CYCLE: usize = 10;

/// The scalars cycle `j` adds (`S[j % 4]`) and later subtracts (`S[(j + 1) % 4]`).
const SCALARS: [f32; 4] = [1.0, 2.0, 3.0, 4.0];

/// One of the chain's three buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// The input, reset by a host write before every step; only read by the chain.
    Input,
    /// The first ping-pong buffer.
    A,
    /// The second ping-pong buffer.
    B,
}

impl Slot {
    /// The slot's index into a `[input, a, b]` array.
    pub(crate) const fn index(self) -> usize {
        match self {
            Slot::Input => 0,
            Slot::A => 1,
            Slot::B => 2,
        }
    }
}

/// One launch of the chain: `kernel` reads `x` and writes `y` (`axpy` also reads `y`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    /// The builtin kernel.
    pub(crate) kernel: Builtin,
    /// The buffer it reads.
    pub(crate) x: Slot,
    /// The buffer it writes (reads and writes, for `axpy`).
    pub(crate) y: Slot,
    /// Its info words, from [`Builtin::info`].
    pub(crate) info: [u64; 2],
}

impl Step {
    fn new(kernel: Builtin, x: Slot, y: Slot, a: f32) -> Self {
        let info = match kernel {
            Builtin::RowBias => kernel.info(ROWS, COLS),
            _ => kernel.info(ELEMENTS as u64, a),
        };
        Self { kernel, x, y, info }
    }
}

/// The first `kernels` launches of the chain.
pub(crate) fn plan(kernels: usize) -> Vec<Step> {
    use Builtin::{AddScalar, Axpy, Copy, MulScalar, RowBias};
    use Slot::{A, B, Input};
    let mut steps = Vec::with_capacity(kernels + CYCLE);
    steps.push(Step::new(Copy, Input, A, 0.0));
    let mut cycle = 0;
    while steps.len() < kernels {
        let s = SCALARS[cycle % SCALARS.len()];
        let t = SCALARS[(cycle + 1) % SCALARS.len()];
        // With v in `a` at the start of the cycle and r an element's row:
        steps.extend([
            Step::new(AddScalar, A, B, s),   // b = v + s
            Step::new(MulScalar, B, A, 2.0), // a = 2v + 2s
            Step::new(Axpy, B, A, -1.0),     // a = v + s
            Step::new(MulScalar, A, B, 0.5), // b = (v + s) / 2
            Step::new(MulScalar, B, A, 2.0), // a = v + s
            Step::new(RowBias, A, B, 0.0),   // b = v + s + r
            Step::new(Axpy, B, A, -1.0),     // a = -r
            Step::new(Axpy, B, A, 1.0),      // a = v + s
            Step::new(AddScalar, A, B, -t),  // b = v + s - t
            Step::new(Copy, B, A, 0.0),      // a = v + s - t
        ]);
        cycle += 1;
    }
    steps.truncate(kernels.max(1));
    steps
}

/// The buffer the chain's last launch writes: what a step's output is read from.
pub(crate) fn output(steps: &[Step]) -> Slot {
    steps.last().map_or(Slot::Input, |s| s.y)
}

/// The input every step starts from: small integers in `-8..8`.
pub(crate) fn input() -> Vec<f32> {
    (0..ELEMENTS).map(|i| (i % 16) as f32 - 8.0).collect()
}

/// `f32` values as the little-endian bytes a device buffer holds.
pub(crate) fn to_bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The element at `index` of little-endian `f32` bytes, if there is one.
pub(crate) fn element(bytes: &[u8], index: usize) -> Option<f32> {
    let word = bytes.get(index * 4..index * 4 + 4)?;
    Some(f32::from_le_bytes(word.try_into().ok()?))
}

/// What the chain computes from `input`, by each builtin's host model: the bytes of its
/// output buffer.
pub(crate) fn model(steps: &[Step], input: &[f32]) -> Vec<u8> {
    let mut bufs = [input.to_vec(), vec![0.0; ELEMENTS], vec![0.0; ELEMENTS]];
    for step in steps {
        let mut args = vec![bufs[step.x.index()].clone(), bufs[step.y.index()].clone()];
        step.kernel.model(&mut args, &step.info);
        bufs[step.y.index()] = args.swap_remove(1);
    }
    to_bytes(&bufs[output(steps).index()])
}

/// How many distinct info-word pairs the launches carry: the info entries a graph of
/// the chain pins.
pub(crate) fn distinct_info(steps: &[Step]) -> usize {
    let mut seen: Vec<[u64; 2]> = steps.iter().map(|s| s.info).collect();
    seen.sort_unstable();
    seen.dedup();
    seen.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_has_the_asked_length_and_starts_from_the_input() {
        for n in [2, 3, 11, 12, 64, 512, 513] {
            let steps = plan(n);
            assert_eq!(steps.len(), n);
            assert_eq!(steps[0].x, Slot::Input);
            assert!(
                steps[1..]
                    .iter()
                    .all(|s| s.x != Slot::Input && s.y != Slot::Input)
            );
        }
    }

    #[test]
    fn plan_mixes_builtins_and_reuses_a_bounded_set_of_info_entries() {
        let steps = plan(512);
        for kernel in [
            Builtin::AddScalar,
            Builtin::MulScalar,
            Builtin::Axpy,
            Builtin::RowBias,
            Builtin::Copy,
        ] {
            assert!(
                steps.iter().any(|s| s.kernel == kernel),
                "{kernel:?} unused"
            );
        }
        let distinct = distinct_info(&steps);
        assert!(distinct > 4, "{distinct} distinct info entries");
        assert_eq!(distinct, distinct_info(&plan(5120)));
    }

    #[test]
    fn values_stay_small_exact_numbers_over_a_long_chain() {
        for n in [2, 40, 512, 4001] {
            let out = model(&plan(n), &input());
            for i in 0..ELEMENTS {
                let v = element(&out, i).expect("an element");
                assert!(v.abs() < 64.0, "element {i} of a {n}-kernel chain is {v}");
                assert_eq!((v * 2.0).fract(), 0.0, "element {i} is {v}");
            }
        }
    }

    #[test]
    fn every_forty_kernels_after_the_copy_return_to_the_input() {
        assert_eq!(model(&plan(41), &input()), to_bytes(&input()));
    }
}
