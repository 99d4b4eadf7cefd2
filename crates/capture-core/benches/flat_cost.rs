//! The flat-cost benchmark: a producer/consumer pair on two pooled streams, the pattern
//! whose cost once grew without bound (issue 23, item 1). The producer writes a fresh
//! temporary on stream 0 every iteration and is never read or synced; the consumer, on
//! stream 1, accumulates each temporary into a buffer of its own (its launch waits for
//! the producer on the device) and reads its accumulator back every 1,000 iterations.
//!
//! Every call's bookkeeping must stay flat however long the pair runs: the benchmark
//! times 100,000 iterations in windows of 10,000 and fails (exit status 1) when the last
//! window takes more than 1.2 times the first. A benchmark, not a test: run it with
//! `cargo bench -p capture-core --bench flat_cost [-- --iterations N]` (release build;
//! `cargo xtask bench` runs it too). The figures: `docs/benchmarks.md`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use capture_graphs::mock::MockBackend;
use capture_graphs::{Arg, Builtin, Device, DeviceConfig, ServerError, StreamId};

const PRODUCER: StreamId = StreamId::new(0);
const CONSUMER: StreamId = StreamId::new(1);
/// Floats per temporary.
const N: u64 = 64;
/// Iterations per timed window.
const WINDOW: usize = 10_000;
/// The most the last window may take, as a multiple of the first.
const FLAT: f64 = 1.2;

fn run(iterations: usize) -> Result<Vec<Duration>, ServerError> {
    let dev = Device::new(MockBackend::new(), DeviceConfig::new().streams(2)?)?;
    let fill = dev.builtin(Builtin::Fill);
    let axpy = dev.builtin(Builtin::Axpy);
    let acc = dev.alloc(CONSUMER, N * 4)?;
    dev.write_values(CONSUMER, &acc, 0, &[0.0f32; N as usize])?;
    let (fill_info, axpy_info) = (Builtin::Fill.info(N, 1.0), Builtin::Axpy.info(N, 1.0));
    let mut host = [0.0f32; N as usize];
    let mut windows = Vec::with_capacity(iterations / WINDOW);
    let mut start = Instant::now();
    for i in 1..=iterations {
        // A fresh temporary each time, written on the producer's stream only.
        let temp = dev.alloc(PRODUCER, N * 4)?;
        dev.launch(PRODUCER, &fill, [1, 1, 1], &[Arg::write(&temp)], &fill_info)?;
        let args = [Arg::read(&temp), Arg::read_write(&acc)];
        dev.launch(CONSUMER, &axpy, [1, 1, 1], &args, &axpy_info)?;
        drop(temp);
        if i % 1_000 == 0 {
            dev.read_values_into(CONSUMER, &acc, 0, &mut host)?;
            if host[0] != i as f32 {
                return Err(ServerError::invalid(
                    "accumulator",
                    host[0],
                    format!("after {i} iterations it must hold {i}"),
                ));
            }
        }
        if i % WINDOW == 0 {
            windows.push(start.elapsed());
            start = Instant::now();
        }
    }
    Ok(windows)
}

fn main() -> ExitCode {
    let mut iterations = 100_000;
    let mut args = std::env::args().skip(1);
    // Cargo passes `--bench` to every bench target; any argument but ours is ignored.
    while let Some(arg) = args.next() {
        if arg != "--iterations" {
            continue;
        }
        match args.next().and_then(|n| n.parse::<usize>().ok()) {
            Some(n) if n >= 2 * WINDOW && n.is_multiple_of(WINDOW) => iterations = n,
            _ => {
                eprintln!("flat_cost: --iterations wants a multiple of {WINDOW}, at least two");
                return ExitCode::from(2);
            }
        }
    }
    let windows = match run(iterations) {
        Ok(windows) => windows,
        Err(e) => {
            eprintln!("flat_cost: {}", capture_graphs::Chain(&e));
            return ExitCode::FAILURE;
        }
    };
    println!("flat_cost: producer/consumer on two pooled streams (mock), {iterations} iterations");
    for (i, w) in windows.iter().enumerate() {
        let per = w.as_secs_f64() * 1e6 / WINDOW as f64;
        println!(
            "  iterations {:>7}..{:<7} {:8.1} ms  {per:6.2} µs/iteration",
            i * WINDOW,
            (i + 1) * WINDOW,
            w.as_secs_f64() * 1e3
        );
    }
    let (first, last) = (windows[0], windows[windows.len() - 1]);
    let ratio = last.as_secs_f64() / first.as_secs_f64();
    println!("  last window / first window: {ratio:.2} (at most {FLAT})");
    if ratio > FLAT {
        eprintln!("flat_cost: the cost per iteration grew by {ratio:.2}x over the run");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
