//! `capture bench`'s fork row: a step with two independent halves (two "experts" of a
//! small MoE layer, each a chain of [`EXPERT_LAUNCHES`] dependent launches over its own
//! buffers, then a combine of both), captured forked (the second expert on a branch
//! stream, joined before the combine: rules 28 and 29) against the same work captured
//! on one stream. Each step is one replay and a read of its output (a wait), so both
//! graphs pay the device's time alike; rounds alternate the two; every step's output is
//! checked bit for bit against the eager run's.

// Without a backend the program measures nothing: the row is unused.
#![cfg_attr(not(feature = "any-backend"), allow(dead_code))]

use std::time::Instant;

use capture_graphs::{
    Arg, Buffer, Builtin, Builtins, Chain, Device, DeviceConfig, KernelHandle, ServerError,
    StreamId,
};

use crate::bench::{Paired, median, paired_values};

/// Dependent launches per expert.
pub(crate) const EXPERT_LAUNCHES: usize = 4;

/// Steps per round and graph.
pub(crate) const STEPS: u32 = 32;

/// Elements of every buffer.
pub(crate) const ELEMENTS: u64 = 4096;

const S: StreamId = StreamId::new(0);
const SIDE: StreamId = StreamId::new(1);

/// The fork row's figures.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ForkRow {
    /// Rounds measured.
    pub(crate) rounds: usize,
    /// µs per step, the forked graph replayed: the median over rounds.
    pub(crate) forked_us: f64,
    /// µs per step, the one-stream graph replayed: the median over rounds.
    pub(crate) single_us: f64,
    /// The one-stream graph's time over the forked one's, round by round (above 1: the
    /// forked graph is faster).
    pub(crate) single_over_forked: Paired,
    /// A step whose output differed from the eager run's (none: every one checked).
    pub(crate) failed: Option<String>,
}

/// The step's buffers and kernels.
struct Step<B: Builtins> {
    add: KernelHandle,
    mul: KernelHandle,
    copy: KernelHandle,
    axpy: KernelHandle,
    x: Buffer,
    /// Each expert's two ping-pong buffers.
    experts: [[Buffer; 2]; 2],
    out: Buffer,
    _backend: std::marker::PhantomData<B>,
}

impl<B: Builtins> Step<B> {
    fn new(dev: &Device<B>) -> Result<Self, ServerError> {
        let bytes = ELEMENTS * 4;
        let x = dev.alloc(S, bytes)?;
        let ramp: Vec<f32> = (0..ELEMENTS).map(|i| (i % 97) as f32 * 0.25).collect();
        dev.write_values(S, &x, 0, &ramp)?;
        let alloc = || dev.alloc(S, bytes);
        Ok(Self {
            add: dev.builtin(Builtin::AddScalar),
            mul: dev.builtin(Builtin::MulScalar),
            copy: dev.builtin(Builtin::Copy),
            axpy: dev.builtin(Builtin::Axpy),
            x,
            experts: [[alloc()?, alloc()?], [alloc()?, alloc()?]],
            out: alloc()?,
            _backend: std::marker::PhantomData,
        })
    }

    /// One expert on `stream`: alternately `+ k` and `* (1 + k/8)` down its chain.
    fn expert(&self, d: &Device<B>, stream: StreamId, e: usize) -> Result<(), ServerError> {
        let k = 1.0 + e as f32;
        let [a, b] = &self.experts[e];
        for i in 0..EXPERT_LAUNCHES {
            let (from, to) = match i {
                0 => (&self.x, a),
                _ if i % 2 == 1 => (a, b),
                _ => (b, a),
            };
            let (kernel, info) = if i % 2 == 0 {
                (&self.add, Builtin::AddScalar.info(ELEMENTS, k))
            } else {
                (&self.mul, Builtin::MulScalar.info(ELEMENTS, 1.0 + k / 8.0))
            };
            d.launch(
                stream,
                kernel,
                [1, 1, 1],
                &[Arg::read(from), Arg::write(to)],
                &info,
            )?;
        }
        Ok(())
    }

    /// The step: the second expert on a branch when `forked`, then the combine.
    fn record(&self, d: &Device<B>, forked: bool) -> Result<(), ServerError> {
        let side = forked.then(|| d.fork(S, SIDE)).transpose()?;
        self.expert(d, if forked { SIDE } else { S }, 1)?;
        self.expert(d, S, 0)?;
        if let Some(side) = side {
            d.join(side)?;
        }
        let last = |e: usize| &self.experts[e][EXPERT_LAUNCHES % 2];
        let info = Builtin::Copy.info(ELEMENTS, 0.0);
        d.launch(
            S,
            &self.copy,
            [1, 1, 1],
            &[Arg::read(last(0)), Arg::write(&self.out)],
            &info,
        )?;
        let info = Builtin::Axpy.info(ELEMENTS, 1.0);
        d.launch(
            S,
            &self.axpy,
            [1, 1, 1],
            &[Arg::read(last(1)), Arg::read_write(&self.out)],
            &info,
        )
    }
}

/// The launches a step makes: both experts and the combine.
pub(crate) const fn launches() -> usize {
    2 * EXPERT_LAUNCHES + 2
}

/// Runs the fork row on `backend`: `rounds` rounds of [`STEPS`] steps per graph.
///
/// # Errors
///
/// The device's error, as text.
pub(crate) fn fork_row<B: Builtins>(backend: B, rounds: usize) -> Result<ForkRow, String> {
    let measure = || -> Result<ForkRow, ServerError> {
        let dev = Device::new(backend, DeviceConfig::new())?;
        let step = Step::new(&dev)?;
        step.record(&dev, false)?;
        let eager = dev.read(S, &step.out)?;
        let forked = dev.capture(S, |d| step.record(d, true))?;
        let single = dev.capture(S, |d| step.record(d, false))?;
        let (mut forked_us, mut single_us) = (Vec::new(), Vec::new());
        let mut failed = None;
        for _ in 0..rounds.max(1) {
            for (graph, figures, mode) in [
                (&forked, &mut forked_us, "forked"),
                (&single, &mut single_us, "one stream"),
            ] {
                let start = Instant::now();
                for t in 0..STEPS {
                    dev.replay(S, graph, 1)?;
                    // Each step read back (a wait for it), both graphs alike.
                    let got = dev.read(S, &step.out)?;
                    if failed.is_none() && got != eager {
                        failed = Some(format!(
                            "{mode}, step {t}: the output differs from the eager run's"
                        ));
                    }
                }
                figures.push(start.elapsed().as_secs_f64() * 1e6 / f64::from(STEPS));
            }
        }
        Ok(ForkRow {
            rounds: forked_us.len(),
            single_over_forked: paired_values(&single_us, &forked_us),
            forked_us: median(&mut forked_us.clone()),
            single_us: median(&mut single_us.clone()),
            failed,
        })
    };
    measure().map_err(|e| Chain(&e).to_string())
}
