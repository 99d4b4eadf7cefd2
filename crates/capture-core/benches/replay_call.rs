//! The replay call against graph length (issue 26, item 4): graphs of 1,000, 10,000 and
//! 100,000 launches over the same 16 buffers, on the mock. What the core does per
//! replay (the input check, claims, ordering, what queued work holds) is per distinct
//! range, 16 here, never per launch, so the host call must cost the same at every
//! length.
//!
//! Two figures per length, each the median of 301 calls (until the call returns; the
//! device work runs later):
//! - **back to back**: the last of eight replays in a row, the core's state warm. This
//!   is the call's own cost, and the check: it fails (exit status 1) when the
//!   100,000-launch call takes more than 1.2 times the 1,000-launch one.
//! - **after a read**: the first replay after a read of the last buffer, as a decode
//!   loop makes it. On the mock (as on lavapipe) the read runs the previous replay's
//!   kernels on this CPU, which evicts the core's state from the caches: this figure
//!   grows with the graph because the graph's own work grew, not the call's.
//!
//! A benchmark, not a test: `cargo bench -p capture-core --bench replay_call` (release
//! build). The figures: `docs/benchmarks.md`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use capture_graphs::mock::MockBackend;
use capture_graphs::{Arg, Buffer, Builtin, Device, DeviceConfig, ServerError, StreamId};

const S: StreamId = StreamId::new(0);
/// Distinct buffers every graph touches.
const BUFFERS: usize = 16;
/// Floats per buffer.
const N: u64 = 64;
/// Samples per length and mode.
const SAMPLES: usize = 301;
/// Replays between the one after the read and the timed one back to back.
const WARMING: usize = 6;
/// The most the longest graph's call may take, as a multiple of the shortest's.
const FLAT: f64 = 1.2;

/// The median replay call of a graph of `launches` launches: back to back, and right
/// after a read.
fn median_calls(launches: usize) -> Result<(Duration, Duration), ServerError> {
    let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    let add = dev.builtin(Builtin::AddScalar);
    let info = Builtin::AddScalar.info(N, 1.0);
    let buffers: Vec<Buffer> = (0..BUFFERS)
        .map(|_| {
            let b = dev.alloc(S, N * 4)?;
            dev.write_values(S, &b, 0, &[0.0f32; N as usize])?;
            Ok(b)
        })
        .collect::<Result<_, ServerError>>()?;
    let graph = dev.capture(S, |d| {
        for i in 0..launches {
            let (x, y) = (&buffers[i % BUFFERS], &buffers[(i + 1) % BUFFERS]);
            d.launch(S, &add, [1, 1, 1], &[Arg::read(x), Arg::write(y)], &info)?;
        }
        Ok::<(), ServerError>(())
    })?;
    let mut host = [0.0f32; N as usize];
    let (mut warm, mut after_read) = (Vec::new(), Vec::new());
    for _ in 0..SAMPLES {
        dev.read_values_into(S, &buffers[BUFFERS - 1], 0, &mut host)?;
        let started = Instant::now();
        dev.replay(S, &graph, 1)?;
        after_read.push(started.elapsed());
        for _ in 0..WARMING {
            dev.replay(S, &graph, 1)?;
        }
        let started = Instant::now();
        dev.replay(S, &graph, 1)?;
        warm.push(started.elapsed());
    }
    dev.sync(S)?;
    let median = |mut v: Vec<Duration>| {
        v.sort_unstable();
        v[v.len() / 2]
    };
    Ok((median(warm), median(after_read)))
}

fn main() -> ExitCode {
    let mut warm = Vec::new();
    for launches in [1_000, 10_000, 100_000] {
        match median_calls(launches) {
            Ok((back_to_back, after_read)) => {
                println!(
                    "replay_call: {launches:>7} launches over {BUFFERS} buffers: back to back \
                     {:.2} µs, after a read {:.2} µs (medians of {SAMPLES})",
                    back_to_back.as_secs_f64() * 1e6,
                    after_read.as_secs_f64() * 1e6
                );
                warm.push(back_to_back);
            }
            Err(e) => {
                eprintln!("replay_call: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    let ratio = warm[2].as_secs_f64() / warm[0].as_secs_f64();
    println!("replay_call: back to back, 100,000 / 1,000 launches = {ratio:.2} (at most {FLAT})");
    if ratio > FLAT {
        eprintln!("replay_call: the call grows with the graph's length");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
