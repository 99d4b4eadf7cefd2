//! `capture bench`'s until row: `capture decode --until-eos`'s decoder (the decode row's
//! sizes, at most [`DECODE_TOKENS`](crate::bench::DECODE_TOKENS) tokens, ending at its end token) decoded by one loop
//! replay the device ends (rule 30), against `replay(g, 8)` with a host check of the stop
//! flag after each call (the overshoot past the end token run and thrown away) and
//! against one replay per token with a host check each; every mode's ids checked against
//! the eager run's, the loop's iterations against the token count, the logits against
//! the host reference. One decoder run per round; the ratios paired round by round.

// Without a backend the program measures nothing: the row is unused.
#![cfg_attr(not(feature = "any-backend"), allow(dead_code))]

use capture_graphs::Chain;

use crate::bench::{Paired, decode_options, median, paired_values};
use capture_decode::{DecodeBackend, UNTIL_MODES, UntilOptions, run_until};

/// Replays per host check in the chunked mode.
pub(crate) const EVERY: u32 = 8;

/// The until row's figures.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct UntilRow {
    /// Rounds measured.
    pub(crate) rounds: usize,
    /// Tokens of the sequence (up to and including its end token).
    pub(crate) tokens: usize,
    /// Steps `replay(g, 8)` ran for them.
    pub(crate) chunk_steps: u32,
    /// Tokens/s, medians over rounds: the loop, replay x 8 with a check each, one
    /// replay per token with a check each, eager with a check each.
    pub(crate) loop_tps: f64,
    pub(crate) chunks_tps: f64,
    pub(crate) per_token_tps: f64,
    pub(crate) eager_tps: f64,
    /// The loop's tokens/s over replay x 8's, and over per-token replays', round by
    /// round.
    pub(crate) loop_over_chunks: Paired,
    pub(crate) loop_over_per_token: Paired,
    /// The checks that failed, in any round.
    pub(crate) failed: Option<String>,
}

/// Runs the until row on `backend`: `rounds` decoder runs.
///
/// # Errors
///
/// The decoder's runtime error, as text.
pub(crate) fn until_row<B: DecodeBackend + Clone>(
    backend: B,
    rounds: usize,
) -> Result<UntilRow, String> {
    let options = UntilOptions {
        decode: decode_options(),
        eos: None,
        every: EVERY,
    };
    let mut rates: [Vec<f64>; 4] = Default::default();
    let (mut tokens, mut chunk_steps, mut failed) = (0, 0, None);
    for _ in 0..rounds.max(1) {
        let report = run_until(backend.clone(), options).map_err(|e| Chain(&e).to_string())?;
        for (i, name) in UNTIL_MODES.iter().enumerate() {
            let mode = report.mode(name).ok_or("a mode is missing")?;
            rates[i].push(mode.tokens_per_second());
        }
        tokens = report.modes[0].ids.len();
        chunk_steps = report.mode(UNTIL_MODES[2]).map_or(0, |m| m.steps);
        if failed.is_none() {
            failed = report
                .checks()
                .into_iter()
                .find(|c| !c.passed)
                .map(|c| format!("{}: {}", c.name, c.detail));
        }
    }
    let [eager, per_token, chunks, looped] = rates;
    Ok(UntilRow {
        rounds: looped.len(),
        tokens,
        chunk_steps,
        loop_over_chunks: paired_values(&looped, &chunks),
        loop_over_per_token: paired_values(&looped, &per_token),
        loop_tps: median(&mut looped.clone()),
        chunks_tps: median(&mut chunks.clone()),
        per_token_tps: median(&mut per_token.clone()),
        eager_tps: median(&mut eager.clone()),
        failed,
    })
}
