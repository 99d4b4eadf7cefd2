//! The threaded variant: 4 to 8 threads on a device with a pooled stream per thread,
//! each thread on its own logical (and pooled) stream, with its own buffers and two shared read-only inputs written before the threads
//! start. Each thread runs a random program of launches, writes, reads, captures,
//! replays and graph drops, checked against its own model; captures on different pooled
//! streams run concurrently. A watchdog fails the run if it is not done in 30 s.
//!
//! Each thread knows only its own windows, so a typed refusal (a neighbour's window, an
//! allocation refused while another thread records) is accepted; what the thread reads,
//! and whether its own captures seal, is checked as strictly as in the single-threaded
//! runner.

use std::sync::{Arc, mpsc};
use std::time::Duration;

use capture_core::{
    Arg, Buffer, Builtin, Builtins, Chain, Device, DeviceConfig, ServerError, StreamId,
};
use capture_mock::Faulty;
use proptest::prelude::*;

use super::program::{BodyOp, Op, launch_spec};
use super::runner::{Run, Violation};

/// Elements of every preallocated buffer.
const ELEMENTS: usize = 16;

/// How long a threaded run may take.
const WATCHDOG: Duration = Duration::from_secs(30);

/// Buffer names in each thread's program: 0 and 1 are the shared inputs, 2 to 4 the
/// thread's own, 5 and up what its `Alloc`s return.
const OWN: std::ops::Range<u8> = 2..5;

/// One program per thread.
#[derive(Clone, Debug)]
pub struct ThreadsProgram {
    /// Thread `t` runs on logical stream `t`.
    pub threads: Vec<Vec<Op>>,
}

fn thread_op() -> impl Strategy<Value = Op> {
    let own = || OWN;
    let values = || prop::collection::vec(-8i8..=8, 1..=8);
    prop_oneof![
        8 => launch_spec().prop_map(|launch| Op::Launch { stream: 0, launch }),
        3 => (own(), 0u8..ELEMENTS as u8, values())
            .prop_map(|(buf, offset, values)| Op::Write { stream: 0, buf, offset, values }),
        4 => (
            0u8..7,
            prop_oneof![
                1 => Just(None),
                1 => (0u8..ELEMENTS as u8, 1u8..=ELEMENTS as u8).prop_map(Some),
            ],
        )
            .prop_map(|(buf, range)| Op::Read { stream: 0, buf, range }),
        4 => prop::collection::vec(
            prop_oneof![
                4 => launch_spec().prop_map(BodyOp::Launch),
                1 => (own(), 0u8..ELEMENTS as u8, values())
                    .prop_map(|(buf, offset, values)| BodyOp::Write { buf, offset, values }),
            ],
            1..=4,
        )
        .prop_flat_map(|body| (Just(body), any::<bool>()))
        .prop_map(|(body, stop)| Op::Capture { stream: 0, body, stop, pool: None }),
        5 => (0u8..4, 1u8..=3).prop_map(|(graph, times)| Op::Replay { stream: 0, graph, times }),
        1 => (0u8..4, any::<bool>()).prop_map(|(graph, handle)| Op::DropGraph { graph, handle }),
        1 => Just(Op::Sync { stream: 0 }),
        1 => (1u32..=ELEMENTS as u32).prop_map(|e| Op::Alloc { stream: 0, bytes: e * 4 }),
        1 => own().prop_map(|buf| Op::Drop { buf }),
    ]
}

impl std::fmt::Display for ThreadsProgram {
    /// One op a line, per thread.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (t, ops) in self.threads.iter().enumerate() {
            writeln!(f, "thread {t} (stream#{t}):")?;
            for (i, op) in ops.iter().enumerate() {
                writeln!(f, "  {i:>2}: {op:?}")?;
            }
        }
        Ok(())
    }
}

/// 4 to 8 threads of 1 to 20 ops each.
pub fn threads_program() -> impl Strategy<Value = ThreadsProgram> {
    prop::collection::vec(prop::collection::vec(thread_op(), 1..=20), 4..=8)
        .prop_map(|threads| ThreadsProgram { threads })
}

fn floats(values: impl Iterator<Item = f32>) -> Vec<u8> {
    values.flat_map(f32::to_le_bytes).collect()
}

fn setup_violation(what: String) -> Violation {
    Violation {
        step: 0,
        op: "setup".to_string(),
        what,
    }
}

/// Runs `program`'s threads on a fresh device over the backend `make` builds, each
/// against its own model, then the final checks. Fails if it is not done in 30 s.
///
/// # Errors
///
/// The first [`Violation`] any thread (or the final checks) found, naming the thread.
pub fn check_threads<B: Builtins + Send + 'static>(
    make: impl Fn() -> B,
    program: &ThreadsProgram,
) -> Result<(), Violation> {
    let backend = make();
    let program = program.clone();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run_threads(backend, &program));
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(result) => result,
        Err(_) => Err(Violation {
            step: 0,
            op: "watchdog".to_string(),
            what: format!("the threads were not done in {} s", WATCHDOG.as_secs()),
        }),
    }
}

/// A buffer and the bytes written to it before the threads start.
type Written = (Buffer, Vec<u8>);

/// The shared inputs and each thread's own buffers, written and settled, with every
/// kernel loaded.
fn prepare<B: Builtins>(
    dev: &Device<Faulty<B>>,
    kernels: &[capture_core::KernelHandle],
    threads: usize,
) -> Result<(Vec<Written>, Vec<Vec<Written>>), ServerError> {
    let write = |stream: u64, bytes: Vec<u8>| -> Result<Written, ServerError> {
        let b = dev.alloc(StreamId::new(stream), bytes.len() as u64)?;
        dev.write(StreamId::new(stream), &b, 0, bytes.clone())?;
        Ok((b, bytes))
    };
    let shared = vec![
        write(0, floats((0..ELEMENTS).map(|i| i as f32)))?,
        write(1, floats(std::iter::repeat_n(2.0, ELEMENTS)))?,
    ];
    let mut own = Vec::with_capacity(threads);
    for t in 0..threads {
        let mut bufs = Vec::new();
        for k in 0..OWN.len() {
            let v = (t * 3 + k) as f32;
            bufs.push(write(t as u64, floats(std::iter::repeat_n(v, ELEMENTS)))?);
        }
        own.push(bufs);
    }
    // Every kernel is loaded before the threads start (a load while another stream
    // records is refused, which would only make the threads' programs dull).
    let s0 = StreamId::new(0);
    let scratch = dev.alloc(s0, 16)?;
    let out = dev.alloc(s0, 16)?;
    for (b, k) in Builtin::ALL.iter().zip(kernels) {
        let args = match b {
            Builtin::Fill => vec![Arg::write(&scratch)],
            Builtin::Axpy => vec![Arg::read(&scratch), Arg::read_write(&out)],
            _ => vec![Arg::read(&scratch), Arg::write(&out)],
        };
        let info = match b {
            Builtin::RowBias => b.info(2, 2.0),
            _ => b.info(4, 1.0),
        };
        dev.launch(s0, k, [1, 1, 1], &args, &info)?;
    }
    for p in 0..threads {
        dev.sync(StreamId::new(p as u64))?;
    }
    Ok((shared, own))
}

fn run_threads<B: Builtins>(backend: B, program: &ThreadsProgram) -> Result<(), Violation> {
    let threads = program.threads.len().clamp(1, 8);
    // A pooled stream per thread: captures on different pooled streams run at once.
    let config = DeviceConfig::new()
        .streams(threads)
        .map_err(|e| setup_violation(Chain(&e).to_string()))?;
    let dev = Device::new(Faulty::new(backend), config)
        .map_err(|e| setup_violation(format!("Device::new: {}", Chain(&e))))?;
    let dev = Arc::new(dev);
    let kernels: Vec<_> = Builtin::ALL
        .iter()
        .map(|&b| dev.kernel(B::builtin(b)))
        .collect();
    let (shared, own) = prepare(&dev, &kernels, threads)
        .map_err(|e| setup_violation(format!("preparing the buffers: {}", Chain(&e))))?;
    let mut runs = Vec::with_capacity(threads);
    for (t, bufs) in own.into_iter().enumerate() {
        let mut run = Run::new(Arc::clone(&dev), kernels.clone(), 8, threads, Some(t as u8));
        for (b, bytes) in &shared {
            run.adopt(b.clone(), bytes, true);
        }
        for (b, bytes) in bufs {
            run.adopt(b, &bytes, false);
        }
        runs.push(run);
    }
    drop(shared);
    let programs = &program.threads;
    let results: Vec<(usize, Run<B>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .into_iter()
            .enumerate()
            .map(|(t, mut run)| {
                scope.spawn(move || {
                    for (step, op) in programs[t].iter().enumerate() {
                        run.op(step, op);
                        if run.violation.is_some() {
                            break;
                        }
                    }
                    (t, run)
                })
            })
            .collect();
        handles.into_iter().filter_map(|h| h.join().ok()).collect()
    });
    if results.len() != threads {
        return Err(setup_violation("a thread of the run panicked".to_string()));
    }
    let mut first = None;
    let mut runs = Vec::with_capacity(threads);
    for (t, mut run) in results {
        if let Some(mut v) = run.violation.take()
            && first.is_none()
        {
            v.op = format!("thread {t} on stream#{t}: {}", v.op);
            first = Some(v);
        }
        runs.push(run);
    }
    if let Some(v) = first {
        return Err(v);
    }
    for run in &mut runs {
        run.drop_all();
        if let Some(v) = run.violation.take() {
            return Err(v);
        }
    }
    drop(runs);
    let mut last = Run::new(dev, kernels, 8, threads, None);
    last.finish(0);
    match last.violation.take() {
        Some(v) => Err(v),
        None => Ok(()),
    }
}
