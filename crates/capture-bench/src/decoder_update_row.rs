//! `capture bench`'s update row, its decoder part: `capture decode`'s slotted step (the
//! position and the attention grid graph slots, rule 26) generating tokens with the
//! host choosing each position, two ways: the slots set and one replay
//! ([`DeviceModel::update`]), against the step captured at that position (prepare,
//! begin, record, end), replayed once and dropped. Each round's tokens start from the
//! same eager prefill, and every token's logits are checked bit for bit against the same
//! tokens generated eagerly. Rounds alternate the modes; the ratio is paired round by
//! round.

// Without a backend the program measures nothing: the row is unused.
#![cfg_attr(not(feature = "any-backend"), allow(dead_code))]

use std::time::Instant;

use capture_graphs::{Chain, Device, DeviceConfig, Result, ServerError, StreamId};

use crate::bench::{Paired, median, paired_values};
use capture_decode::{
    Config, DecodeBackend, DecodeOptions, DeviceModel, Generation, Weights, collect, prefill,
    record,
};

/// The decoder's sizes: small enough that a capture per token on a CPU driver ends in
/// seconds.
pub(crate) const CONFIG: Config = Config {
    dim: 64,
    layers: 2,
    heads: 4,
    vocab: 256,
    context: 64,
};

/// Tokens per round and mode.
pub(crate) const TOKENS: u32 = 16;

const S: StreamId = StreamId::new(0);

/// The decoder part's figures.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DecoderUpdateRow {
    /// Rounds measured.
    pub(crate) rounds: usize,
    /// Launches of the slotted step.
    pub(crate) launches: u64,
    /// µs per token, the slots set and the graph replayed: the median over rounds.
    pub(crate) update_us: f64,
    /// µs per token, the step captured at its position and replayed: the median.
    pub(crate) recapture_us: f64,
    /// Re-capture's time over the update's, round by round.
    pub(crate) recapture_over_update: Paired,
    /// The first token whose logits differed from eager, in either mode.
    pub(crate) failed: Option<String>,
}

/// Where `got`'s logits first differ from `eager`'s, named by `mode`.
fn differs(eager: &Generation, got: &Generation, mode: &str) -> Option<String> {
    let vocab = CONFIG.vocab as usize;
    (0..eager.logits.len().max(got.logits.len()))
        .find(|&i| {
            eager.logits.get(i).map(|v| v.to_bits()) != got.logits.get(i).map(|v| v.to_bits())
        })
        .map(|i| {
            format!(
                "{mode}: token {} logit {} differs from the eager step's",
                i / vocab,
                i % vocab
            )
        })
}

/// Runs the decoder part of the update row on `backend`: `rounds` rounds of
/// [`TOKENS`] tokens per mode.
///
/// # Errors
///
/// The device's error, as text.
pub(crate) fn decoder_update_row<B: DecodeBackend>(
    backend: B,
    rounds: usize,
) -> std::result::Result<DecoderUpdateRow, String> {
    let measure = || -> Result<DecoderUpdateRow> {
        let options = DecodeOptions {
            config: CONFIG,
            tokens: TOKENS,
            ..DecodeOptions::default()
        };
        options.check()?;
        let weights = Weights::random(&CONFIG, options.seed);
        let prompt = Weights::prompt(&CONFIG, options.seed, options.prompt);
        let dev = Device::new(backend, DeviceConfig::new())?;
        let model = DeviceModel::new(&dev, S, CONFIG, &weights)?;
        let first = options.first_position();
        // The reference: the same tokens, eager, the position from the slotted step.
        prefill(&dev, &model, &prompt)?;
        for i in 0..TOKENS {
            model.slotted_step(&dev, first + i, false)?;
        }
        dev.sync(S)?;
        let eager = collect(&dev, &model, &options, (0.0, None))?;
        let graph = dev.capture(S, |d| model.slotted_step(d, first, true))?;
        let launches = dev
            .graph(&graph)
            .ok_or(ServerError::UnknownGraph(graph.id()))?
            .launches;
        let (mut updates, mut recaptures) = (Vec::new(), Vec::new());
        let mut failed = None;
        let timed = |run: &dyn Fn(u32) -> Result<()>| -> Result<(f64, Generation)> {
            prefill(&dev, &model, &prompt)?;
            let start = Instant::now();
            for i in 0..TOKENS {
                run(first + i)?;
            }
            dev.sync(S)?;
            let us = start.elapsed().as_secs_f64() * 1e6 / f64::from(TOKENS);
            Ok((us, collect(&dev, &model, &options, (0.0, None))?))
        };
        for _ in 0..rounds.max(1) {
            let (us, got) = timed(&|pos| {
                model.update(&graph, pos)?;
                dev.replay(S, &graph, 1)
            })?;
            updates.push(us);
            failed = failed.or(differs(&eager, &got, "update"));
            let (us, got) = timed(&|pos| {
                let g = record(&dev, || model.slotted_step(&dev, pos, false))?;
                dev.replay(S, &g, 1)?;
                dev.drop_graph(g)
            })?;
            recaptures.push(us);
            failed = failed.or(differs(&eager, &got, "re-capture"));
        }
        dev.drop_graph(graph)?;
        Ok(DecoderUpdateRow {
            rounds: updates.len(),
            launches,
            recapture_over_update: paired_values(&recaptures, &updates),
            update_us: median(&mut updates.clone()),
            recapture_us: median(&mut recaptures.clone()),
            failed,
        })
    };
    measure().map_err(|e| Chain(&e).to_string())
}
