//! `capture bench`'s update row: what a token costs when one thing of a captured step
//! changes per token (here the step's input, rebound between two buffers, as a moved KV
//! block is), changed through a graph slot (rule 26: `GraphHandle::rebind`, then one
//! replay) against capturing the step again (warmup, record, instantiate, then one
//! replay and the graph dropped). The step is [`LAUNCHES`] dependent `add_scalar`
//! launches; each token waits for its step (a sync), so both modes pay the device's time
//! alike. Rounds alternate the modes; every token's output is checked.

// Without a backend the program measures nothing: the row is unused.
#![cfg_attr(not(feature = "any-backend"), allow(dead_code))]

use std::time::Instant;

use capture_graphs::{
    Arg, Buffer, Builtin, Builtins, Chain, Device, DeviceConfig, ServerError, StreamId,
};

use crate::bench::{Paired, median, paired_values};

/// Launches per step.
pub(crate) const LAUNCHES: usize = 7;

/// Tokens per round and mode.
pub(crate) const TOKENS: u32 = 32;

/// Elements of every buffer.
const ELEMENTS: u64 = 64;

const S: StreamId = StreamId::new(0);

/// The update row's figures.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct UpdateRow {
    /// Rounds measured.
    pub(crate) rounds: usize,
    /// µs per token, the slot rebound and the graph replayed: the median over rounds.
    pub(crate) update_us: f64,
    /// µs per token, the step captured again and replayed: the median over rounds.
    pub(crate) recapture_us: f64,
    /// Re-capture's time over the update's, round by round (above 1: the update is
    /// faster).
    pub(crate) recapture_over_update: Paired,
    /// A token whose output was wrong, in either mode (none: every one checked).
    pub(crate) failed: Option<String>,
}

/// The step's buffers and kernel.
struct Step<'d, B: Builtins> {
    dev: &'d Device<B>,
    add: capture_graphs::KernelHandle,
    inputs: [Buffer; 2],
    chain: Vec<Buffer>,
}

impl<'d, B: Builtins> Step<'d, B> {
    fn new(dev: &'d Device<B>) -> Result<Self, ServerError> {
        let bytes = ELEMENTS * 4;
        let input = |v: f32| -> Result<Buffer, ServerError> {
            let b = dev.alloc(S, bytes)?;
            dev.write_values(S, &b, 0, &vec![v; ELEMENTS as usize])?;
            Ok(b)
        };
        let inputs = [input(1.0)?, input(100.0)?];
        let chain = (0..LAUNCHES)
            .map(|_| dev.alloc(S, bytes))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            dev,
            add: dev.builtin(Builtin::AddScalar),
            inputs,
            chain,
        })
    }

    /// The step over input `which`: each launch adds 1 to the one before's output; the
    /// first reads the input through slot `x`.
    fn record(&self, d: &Device<B>, which: usize) -> Result<(), ServerError> {
        let info = Builtin::AddScalar.info(ELEMENTS, 1.0);
        for (i, out) in self.chain.iter().enumerate() {
            let input = match i {
                0 => Arg::read(&self.inputs[which]).slot("x"),
                _ => Arg::read(&self.chain[i - 1]),
            };
            d.launch(S, &self.add, [1, 1, 1], &[input, Arg::write(out)], &info)?;
        }
        Ok(())
    }

    /// Whether the step's output is what input `which` gives.
    fn check(&self, which: usize, token: u32, mode: &str) -> Result<Option<String>, ServerError> {
        let want = [1.0f32, 100.0][which] + LAUNCHES as f32;
        let got: Vec<f32> = self.dev.read_values(S, &self.chain[LAUNCHES - 1])?;
        Ok((got.iter().any(|v| *v != want))
            .then(|| format!("{mode}, token {token}: {} where {want} was due", got[0])))
    }
}

/// Runs the update row on `backend`: `rounds` rounds of [`TOKENS`] tokens per mode.
///
/// # Errors
///
/// The device's error, as text.
pub(crate) fn update_row<B: Builtins>(backend: B, rounds: usize) -> Result<UpdateRow, String> {
    let measure = || -> Result<UpdateRow, ServerError> {
        let dev = Device::new(backend, DeviceConfig::new())?;
        let step = Step::new(&dev)?;
        let graph = dev.capture(S, |d| step.record(d, 0))?;
        let (mut updates, mut recaptures) = (Vec::new(), Vec::new());
        let mut failed = None;
        for _ in 0..rounds.max(1) {
            let start = Instant::now();
            for t in 0..TOKENS {
                let which = (t % 2) as usize;
                graph.rebind("x", &step.inputs[which])?;
                dev.replay(S, &graph, 1)?;
                failed = failed.or(step.check(which, t, "update")?);
            }
            updates.push(start.elapsed().as_secs_f64() * 1e6 / f64::from(TOKENS));
            let start = Instant::now();
            for t in 0..TOKENS {
                let which = (t % 2) as usize;
                let g = dev.capture(S, |d| step.record(d, which))?;
                dev.replay(S, &g, 1)?;
                drop(g);
                failed = failed.or(step.check(which, t, "re-capture")?);
            }
            recaptures.push(start.elapsed().as_secs_f64() * 1e6 / f64::from(TOKENS));
        }
        Ok(UpdateRow {
            rounds: updates.len(),
            recapture_over_update: paired_values(&recaptures, &updates),
            update_us: median(&mut updates.clone()),
            recapture_us: median(&mut recaptures.clone()),
            failed,
        })
    };
    measure().map_err(|e| Chain(&e).to_string())
}
