//! `run_demo`: the chain run eagerly and as a replayed graph on any backend that
//! provides the builtin kernels, timed, with both outputs read back for comparison.
//!
//! Each step resets the input with a host write, runs the chain (eagerly: one launch
//! per kernel; replayed: one replay of the captured graph) and syncs. Each mode runs
//! one untimed warmup step, then the timed steps. After the timed steps, the ping-pong
//! buffers are overwritten with a sentinel and one more step runs: the output read back
//! is therefore that step's own, never a leftover of an earlier step or of the
//! capture's warmup.

use std::time::{Duration, Instant};

use capture_graphs::{
    Arg, Buffer, Builtin, Builtins, Device, DeviceConfig, GraphLedger, Grid, KernelHandle,
    ServerError, StreamId,
};

use crate::chain::{self, ELEMENTS, Slot, Step};

/// What to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct DemoOptions {
    /// Kernels in the chain (at least 2).
    pub(crate) kernels: usize,
    /// Timed steps per mode (at least 1).
    pub(crate) replays: u32,
}

/// Wall-clock time of one mode's timed steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Timing {
    /// The whole steps: input write, submission and sync.
    pub(crate) step: Duration,
    /// Submission only: the launches (eager) or the replay call (replayed).
    pub(crate) submit: Duration,
}

/// What a run measured and read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Report {
    /// What was run.
    pub(crate) options: DemoOptions,
    /// Distinct info-word pairs among the chain's launches.
    pub(crate) distinct_info: usize,
    /// The eager steps.
    pub(crate) eager: Timing,
    /// The replayed steps.
    pub(crate) replayed: Timing,
    /// `Device::capture` of the chain: its warmup run, the recording and the seal.
    pub(crate) capture: Duration,
    /// What the graph held while it lived.
    pub(crate) ledger: GraphLedger,
    /// The output bytes of the eager check step.
    pub(crate) eager_output: Vec<u8>,
    /// The output bytes of the replayed check step.
    pub(crate) replayed_output: Vec<u8>,
    /// The output bytes the builtins' host model computes.
    pub(crate) model_output: Vec<u8>,
}

/// Where two outputs first differ.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Difference {
    /// The element's index.
    pub(crate) index: usize,
    /// Its value in the first output (`None` past its end).
    pub(crate) left: Option<f32>,
    /// Its value in the second output.
    pub(crate) right: Option<f32>,
}

/// The first element where `left` and `right` differ bit for bit, if any.
pub(crate) fn first_difference(left: &[u8], right: &[u8]) -> Option<Difference> {
    if left == right {
        return None;
    }
    let elements = left.len().max(right.len()).div_ceil(4);
    (0..elements).find_map(|index| {
        let l = left.get(index * 4..(index * 4 + 4).min(left.len()));
        let r = right.get(index * 4..(index * 4 + 4).min(right.len()));
        (l != r).then(|| Difference {
            index,
            left: chain::element(left, index),
            right: chain::element(right, index),
        })
    })
}

/// Byte pattern written over the ping-pong buffers before a check step (a quiet NaN).
const SENTINEL: [u8; 4] = 0x7fc0_dead_u32.to_le_bytes();

/// The stream the demo runs on.
const STREAM: StreamId = StreamId::new(0);

/// The chain resolved on a device: each launch's kernel, arguments and info words.
struct Launches {
    steps: Vec<(KernelHandle, Vec<Arg>, [u64; 2])>,
    buffers: [Buffer; 3],
    output: Slot,
}

impl Launches {
    fn new<B: Builtins>(device: &Device<B>, steps: &[Step]) -> Result<Self, ServerError> {
        let bytes = (ELEMENTS * 4) as u64;
        let buffers = [
            device.alloc(STREAM, bytes)?,
            device.alloc(STREAM, bytes)?,
            device.alloc(STREAM, bytes)?,
        ];
        let mut kernels: Vec<(Builtin, KernelHandle)> = Vec::new();
        let mut resolved = Vec::with_capacity(steps.len());
        for step in steps {
            let handle = match kernels.iter().find(|(b, _)| *b == step.kernel) {
                Some((_, handle)) => *handle,
                None => {
                    let handle = device.kernel(B::builtin(step.kernel));
                    kernels.push((step.kernel, handle));
                    handle
                }
            };
            let x = &buffers[step.x.index()];
            let y = &buffers[step.y.index()];
            let args = match step.kernel {
                Builtin::Axpy => vec![Arg::read(x), Arg::read_write(y)],
                _ => vec![Arg::read(x), Arg::write(y)],
            };
            resolved.push((handle, args, step.info));
        }
        Ok(Self {
            steps: resolved,
            buffers,
            output: chain::output(steps),
        })
    }

    fn input(&self) -> &Buffer {
        &self.buffers[Slot::Input.index()]
    }

    fn output(&self) -> &Buffer {
        &self.buffers[self.output.index()]
    }

    /// Enqueues (or, inside a window, records) every launch of the chain.
    fn launch<B: Builtins>(&self, device: &Device<B>) -> Result<(), ServerError> {
        const GRID: Grid = [ELEMENTS.div_ceil(256) as u32, 1, 1];
        for (kernel, args, info) in &self.steps {
            device.launch(STREAM, kernel, GRID, args, info)?;
        }
        Ok(())
    }

    /// Overwrites the ping-pong buffers with [`SENTINEL`].
    fn clobber<B: Builtins>(&self, device: &Device<B>) -> Result<(), ServerError> {
        let sentinel: Vec<u8> = SENTINEL.repeat(ELEMENTS);
        for slot in [Slot::A, Slot::B] {
            device.write(STREAM, &self.buffers[slot.index()], 0, sentinel.clone())?;
        }
        Ok(())
    }
}

/// Runs the chain of `options.kernels` launches on `backend`: eagerly, then captured
/// once and replayed, `options.replays` timed steps each; reads back each mode's output.
///
/// The outputs are not compared here: the report holds them for the caller to compare.
///
/// # Errors
///
/// Any error of the device: creating it, allocating, writing, launching, capturing,
/// replaying, syncing or reading.
pub(crate) fn run_demo<B: Builtins>(
    backend: B,
    options: DemoOptions,
) -> Result<Report, ServerError> {
    let steps = chain::plan(options.kernels);
    let input = chain::to_bytes(&chain::input());
    let device = Device::new(backend, DeviceConfig::new())?;
    let launches = Launches::new(&device, &steps)?;

    // One step, of either mode; `submit` is what is timed as the submission.
    let step = |submit: &dyn Fn() -> Result<(), ServerError>| -> Result<Duration, ServerError> {
        device.write(STREAM, launches.input(), 0, input.clone())?;
        let start = Instant::now();
        submit()?;
        let submitted = start.elapsed();
        device.sync(STREAM)?;
        Ok(submitted)
    };
    let timed = |submit: &dyn Fn() -> Result<(), ServerError>| -> Result<Timing, ServerError> {
        step(submit)?;
        let mut timing = Timing::default();
        let start = Instant::now();
        for _ in 0..options.replays {
            timing.submit += step(submit)?;
        }
        timing.step = start.elapsed();
        Ok(timing)
    };
    let check = |submit: &dyn Fn() -> Result<(), ServerError>| -> Result<Vec<u8>, ServerError> {
        launches.clobber(&device)?;
        step(submit)?;
        device.read(STREAM, launches.output())
    };

    let eager_chain = || launches.launch(&device);
    let eager = timed(&eager_chain)?;
    let eager_output = check(&eager_chain)?;

    device.write(STREAM, launches.input(), 0, input.clone())?;
    let start = Instant::now();
    let graph = device.capture(STREAM, |d| launches.launch(d))?;
    let capture = start.elapsed();
    device.sync(STREAM)?;
    let ledger = device
        .graph(&graph)
        .ok_or(ServerError::UnknownGraph(graph.id()))?;

    let replay = || device.replay(STREAM, &graph, 1);
    let replayed = timed(&replay)?;
    let replayed_output = check(&replay)?;

    device.drop_graph(graph)?;
    device.sync(STREAM)?;
    device.cleanup()?;

    Ok(Report {
        options,
        distinct_info: chain::distinct_info(&steps),
        eager,
        replayed,
        capture,
        ledger,
        eager_output,
        replayed_output,
        model_output: chain::model(&steps, &chain::input()),
    })
}

#[cfg(all(test, feature = "mock"))]
mod tests {
    use std::sync::{Mutex, MutexGuard};

    use capture_graphs::Chain;
    use capture_graphs::mock::{FaultOp, Faulty, MockBackend};

    use super::*;

    /// The mock models CUDA's process-wide capture mode: one test's allocation would
    /// invalidate another's recording, so the tests that run devices take turns.
    fn serial() -> MutexGuard<'static, ()> {
        static DEVICES: Mutex<()> = Mutex::new(());
        DEVICES.lock().unwrap_or_else(|p| p.into_inner())
    }

    #[test]
    fn eager_and_replayed_outputs_are_bit_identical_and_match_the_model() {
        let _serial = serial();
        for kernels in [2, 64, 512] {
            let options = DemoOptions {
                kernels,
                replays: 2,
            };
            let report = run_demo(MockBackend::new(), options).expect("the demo runs");
            assert_eq!(report.eager_output.len(), ELEMENTS * 4);
            assert_eq!(
                first_difference(&report.eager_output, &report.replayed_output),
                None
            );
            assert_eq!(
                first_difference(&report.eager_output, &report.model_output),
                None
            );
            assert_eq!(report.ledger.launches, kernels as u64);
            assert_eq!(report.ledger.info_entries, report.distinct_info as u64);
            assert!(report.ledger.device_bytes >= 3 * (ELEMENTS as u64) * 4);
        }
    }

    #[test]
    fn a_driver_failure_comes_back_as_the_error() {
        let _serial = serial();
        for (op, nth) in [
            (FaultOp::Launch, 20),
            (FaultOp::Instantiate, 1),
            (FaultOp::Replay, 3),
        ] {
            let backend = Faulty::new(MockBackend::new());
            backend.plan().fail(op, nth).expect("the fault is armed");
            let options = DemoOptions {
                kernels: 16,
                replays: 2,
            };
            let error = match run_demo(backend, options) {
                Ok(_) => panic!("{op:?}: the injected fault went unnoticed"),
                Err(error) => Chain(&error).to_string(),
            };
            assert!(error.contains("injected fault"), "{op:?}: {error}");
        }
    }

    #[test]
    fn first_difference_names_the_element() {
        let a = chain::to_bytes(&[1.0, 2.0, 3.0]);
        let b = chain::to_bytes(&[1.0, 2.5, 3.0]);
        assert_eq!(first_difference(&a, &a), None);
        assert_eq!(
            first_difference(&a, &b),
            Some(Difference {
                index: 1,
                left: Some(2.0),
                right: Some(2.5),
            })
        );
        assert_eq!(
            first_difference(&a, &a[..8]),
            Some(Difference {
                index: 2,
                left: Some(3.0),
                right: None,
            })
        );
    }
}
