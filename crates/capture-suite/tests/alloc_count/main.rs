//! Hot paths allocate nothing per call beyond amortised growth, on the mock in both of
//! its modes: direct (`MockBackend`, every call on the caller's thread) and thread-affine
//! (`AffineMock`, whose captures open and close on each stream's worker).
//!
//! A counting global allocator sees every allocation in the process, so this binary runs
//! single-threaded with its own `main` (no libtest threads) and runs each check of
//! [`capture_suite::hot_paths`] in turn: after a warmup, 1,000 steady-state calls may
//! allocate only a handful of times (vector growth), never once per call.
//!
//! It also bounds the heap a sealed graph keeps per recorded launch
//! ([`MAX_BYTES_PER_LAUNCH`]): builtin launches with info words, user launches with
//! scalars, and foreign work, each measured as the heap a graph of 2,000 such launches
//! holds beyond one of 1,000 (its executable included), per launch.

use std::alloc::System;

use capture_core::{Builtins, Device, DeviceConfig};
use capture_mock::{AffineMock, MockBackend};
use capture_suite::hot_paths;
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// How many allocations (and reallocations) `f` made.
fn allocations_during(f: &mut dyn FnMut()) -> usize {
    let region = Region::new(GLOBAL);
    f();
    let change = region.change();
    change.allocations + change.reallocations
}

/// Every check on fresh one-stream devices of `backend`.
fn run_all<B: Builtins + Clone>(label: &str, backend: B) -> (usize, usize) {
    let open = || {
        Device::new(backend.clone(), DeviceConfig::new().streams(1).unwrap())
            .expect("the device opens")
    };
    hot_paths::run_all(label, &open, &allocations_during)
}

/// The most heap a sealed graph may keep per recorded launch, in bytes.
const MAX_BYTES_PER_LAUNCH: f64 = 128.0;

/// Net heap bytes `f` leaves allocated.
fn bytes_kept_by(f: &mut dyn FnMut()) -> i64 {
    let region = Region::new(GLOBAL);
    f();
    let change = region.change();
    // A reallocation's growth counts in `bytes_allocated` (its shrinking in
    // `bytes_deallocated`) already; `bytes_reallocated` repeats it.
    change.bytes_allocated as i64 - change.bytes_deallocated as i64
}

/// `y = a * x + b` over `n` elements, its parameters scalars by value: a user kernel.
const AFFINE: capture_mock::MockKernel = capture_mock::MockKernel {
    name: "affine",
    signature: capture_core::KernelSignature::of(&[
        capture_core::Param::READ,
        capture_core::Param::WRITE,
        capture_core::Param::scalar::<f32>(),
        capture_core::Param::scalar::<f32>(),
        capture_core::Param::scalar::<u32>(),
    ]),
    f: |b, words| {
        let (a, c) = (
            f32::from_bits(words[0] as u32),
            f32::from_bits(words[1] as u32),
        );
        let n = (words[2] as usize).min(b[0].len() / 4);
        for i in 0..n {
            let x = f32::from_le_bytes(b[0][i * 4..i * 4 + 4].try_into().unwrap());
            b[1][i * 4..i * 4 + 4].copy_from_slice(&(a * x + c).to_le_bytes());
        }
    },
};

/// The heap a sealed graph keeps per recorded launch of `kind` on `backend`: what its
/// release gives back (its executable, recording and pins, behind its replay's fence),
/// for a graph of 2,000 launches beyond one of 1,000, divided by 1,000.
fn heap_per_launch(backend: MockBackend, kind: &str) -> f64 {
    use capture_core::{Arg, Buffer, Builtin, ServerError, StreamId};
    let s = StreamId::new(0);
    // The trace off: its log keeps an event per launch call, eager or recorded, which
    // is the log's, not the graph's.
    let config = DeviceConfig::new().streams(1).unwrap().trace(false);
    let dev = Device::new(backend, config).unwrap();
    let add = dev.builtin(Builtin::AddScalar);
    let affine = dev.kernel(AFFINE);
    let (a, b) = (dev.alloc(s, 256).unwrap(), dev.alloc(s, 256).unwrap());
    dev.write(s, &a, 0, vec![0u8; 256]).unwrap();
    dev.write(s, &b, 0, vec![0u8; 256]).unwrap();
    let info = Builtin::AddScalar.info(64, 1.0);
    let copy = capture_mock::MockWork::new("copy", |r| {
        let (x, y) = r.split_at_mut(1);
        y[0].copy_from_slice(&x[0]);
        Ok(())
    });
    let one = |d: &Device<MockBackend>, x: &Buffer, y: &Buffer| -> Result<(), ServerError> {
        match kind {
            "builtin" => d.launch(s, &add, [1, 1, 1], &[Arg::read(x), Arg::write(y)], &info),
            "user" => d.launch(
                s,
                &affine,
                [1, 1, 1],
                &[
                    Arg::read(x),
                    Arg::write(y),
                    Arg::scalar(2.0f32),
                    Arg::scalar(1.0f32),
                    Arg::scalar(64u32),
                ],
                &[],
            ),
            // The engine's library call, made once and handed to every launch (a
            // clone shares it), as an engine reuses its GEMV handle.
            _ => d.foreign_work(s, &[Arg::read(x), Arg::write(y)], copy.clone()),
        }
    };
    let mut kept = Vec::new();
    for n in [1000usize, 2000] {
        let chain = |d: &Device<MockBackend>| -> Result<(), ServerError> {
            for i in 0..n {
                let (x, y) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
                one(d, x, y)?;
            }
            Ok(())
        };
        // One capture to size what a capture reuses, then the measured one.
        dev.drop_graph(dev.capture(s, |d| chain(d)).unwrap())
            .unwrap();
        dev.sync(s).unwrap();
        let graph = dev.capture(s, |d| chain(d)).unwrap();
        dev.replay(s, &graph, 1).unwrap();
        dev.sync(s).unwrap();
        // What the graph held: the heap its release gives back.
        let mut graph = Some(graph);
        kept.push(-bytes_kept_by(&mut || {
            dev.drop_graph(graph.take().unwrap()).unwrap();
            dev.sync(s).unwrap();
        }));
    }
    (kept[1] - kept[0]) as f64 / 1000.0
}

fn main() {
    let mut over = 0;
    for kind in ["builtin", "user", "work"] {
        let per_launch = heap_per_launch(MockBackend::new(), kind);
        let verdict = if per_launch <= MAX_BYTES_PER_LAUNCH {
            "ok"
        } else {
            over += 1;
            "FAILED"
        };
        println!(
            "heap per recorded launch ({kind}): {per_launch:.1} B (bound {MAX_BYTES_PER_LAUNCH} B) {verdict}"
        );
    }
    let (direct, affine) = (
        run_all("mock", MockBackend::new()),
        run_all("affine_mock", AffineMock::new()),
    );
    let (passed, failed) = (direct.0 + affine.0 + 3 - over, direct.1 + affine.1 + over);
    println!();
    println!("alloc_count: {passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
