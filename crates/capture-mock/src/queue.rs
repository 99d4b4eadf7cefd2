//! A mock stream's queue: nothing runs at enqueue. Queued work runs at a fence wait, a
//! sync or read, or an explicit `step(n)`, so ordering and lifetime bugs show. While the
//! stream records, work goes into the recording instead.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use capture_core::backend::{Fence, MAX_LAUNCH_BUFFERS};
use capture_core::{Access, ServerError};

use crate::kernels::MockKernel;
use crate::storage::{MockResource, Pages};
use crate::world;

/// Locks `m`, recovering the data of a poisoned lock (every write under these locks is
/// a whole-value store or an append).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A recorded graph, shared by the executable and every replay still queued.
#[derive(Debug)]
pub(crate) struct Recording {
    pub(crate) ops: Vec<Op>,
    /// Set when the executable is destroyed: a replay still queued then fails.
    pub(crate) destroyed: AtomicBool,
}

// A launch carries its buffers inline (the core's most): boxing them would allocate on
// every launch.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// Copies pinned host staging to device memory; a recorded copy re-reads the staging
    /// on every replay.
    Copy {
        from: MockResource,
        to: MockResource,
    },
    Kernel {
        kernel: MockKernel,
        args: [Option<(MockResource, Access)>; MAX_LAUNCH_BUFFERS],
        info: Option<MockResource>,
    },
    Replay {
        graph: Arc<Recording>,
        times: u32,
    },
}

#[derive(Debug, Default)]
struct State {
    ops: VecDeque<(u64, Op)>,
    next: u64,
    recording: Option<Vec<Op>>,
    error: Option<ServerError>,
    scratch: Vec<Vec<u8>>,
    words: Vec<u64>,
}

/// One mock stream's queue.
#[derive(Debug)]
pub struct Queue {
    state: Mutex<State>,
    pub(crate) dev: Arc<Mutex<Pages>>,
    pub(crate) host: Arc<Mutex<Pages>>,
}

impl Queue {
    pub(crate) fn new(dev: Arc<Mutex<Pages>>, host: Arc<Mutex<Pages>>) -> Self {
        Self {
            state: Mutex::new(State::default()),
            dev,
            host,
        }
    }

    /// Enqueues (or records) `op`.
    pub(crate) fn push(&self, op: Op) {
        let mut q = lock(&self.state);
        if let Some(recording) = &mut q.recording {
            recording.push(op);
            return;
        }
        let seq = q.next;
        q.next += 1;
        q.ops.push_back((seq, op));
    }

    /// Whether the queue records.
    pub(crate) fn is_recording(&self) -> bool {
        lock(&self.state).recording.is_some()
    }

    pub(crate) fn start_recording(&self, capacity: usize) {
        lock(&self.state).recording = Some(Vec::with_capacity(capacity));
    }

    pub(crate) fn stop_recording(&self) -> Option<Vec<Op>> {
        lock(&self.state).recording.take()
    }

    /// The position the next enqueued work will have.
    pub(crate) fn mark(&self) -> u64 {
        lock(&self.state).next
    }

    /// How many operations wait to run.
    pub fn pending(&self) -> usize {
        lock(&self.state).ops.len()
    }

    /// Runs up to `n` queued operations; returns how many ran.
    pub(crate) fn step(&self, n: usize) -> usize {
        let mut q = lock(&self.state);
        let mut ran = 0;
        while ran < n {
            let Some((_, op)) = q.ops.pop_front() else {
                break;
            };
            ran += 1;
            self.run_one(&mut q, &op);
        }
        ran
    }

    /// Runs everything enqueued before `upto`, and reports (once) an asynchronous
    /// error one of them hit.
    pub(crate) fn run_until(&self, upto: u64) -> Result<(), ServerError> {
        let mut q = lock(&self.state);
        while q.ops.front().is_some_and(|(seq, _)| *seq < upto) {
            let (_, op) = q.ops.pop_front().expect("checked above");
            self.run_one(&mut q, &op);
        }
        q.error.take().map_or(Ok(()), Err)
    }

    /// Runs everything enqueued so far.
    pub(crate) fn run_all(&self) -> Result<(), ServerError> {
        let upto = self.mark();
        self.run_until(upto)
    }

    fn run_one(&self, q: &mut State, op: &Op) {
        let State {
            scratch,
            words,
            error,
            ..
        } = q;
        if let Err(e) = self.execute(op, scratch, words) {
            error.get_or_insert(e);
        }
    }

    fn execute(
        &self,
        op: &Op,
        scratch: &mut Vec<Vec<u8>>,
        words: &mut Vec<u64>,
    ) -> Result<(), ServerError> {
        match op {
            Op::Copy { from, to } => {
                let host = lock(&self.host);
                let mut dev = lock(&self.dev);
                dev.slice_mut(to.page, to.bytes)
                    .copy_from_slice(host.slice(from.page, from.bytes));
            }
            Op::Kernel { kernel, args, info } => {
                let mut dev = lock(&self.dev);
                let n = args.iter().flatten().count();
                while scratch.len() < n {
                    scratch.push(Vec::new());
                }
                for (i, (res, _)) in args.iter().flatten().enumerate() {
                    scratch[i].clear();
                    scratch[i].extend_from_slice(dev.slice(res.page, res.bytes));
                }
                words.clear();
                if let Some(info) = info {
                    words.extend(
                        dev.slice(info.page, info.bytes)
                            .chunks_exact(8)
                            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))),
                    );
                }
                (kernel.f)(&mut scratch[..n], words);
                for (i, (res, access)) in args.iter().flatten().enumerate() {
                    if access.writes() {
                        dev.slice_mut(res.page, res.bytes)
                            .copy_from_slice(&scratch[i]);
                    }
                }
            }
            Op::Replay { graph, times } => {
                if graph.destroyed.load(Ordering::SeqCst) {
                    return Err(ServerError::driver(
                        "graph launch",
                        crate::MockError::new(
                            "the graph executable was destroyed while a replay of it was queued",
                        ),
                    ));
                }
                for _ in 0..*times {
                    for op in &graph.ops {
                        self.execute(op, scratch, words)?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// A point on a mock stream's queue.
#[derive(Debug)]
pub struct MockFence {
    pub(crate) queue: Option<Arc<Queue>>,
    pub(crate) upto: u64,
}

impl MockFence {
    /// A fence on the queue `signal` names, after everything enqueued on it so far.
    pub(crate) fn on(signal: usize) -> Self {
        let queue = world::queue(signal);
        if let Some(q) = &queue
            && q.is_recording()
        {
            // An event recorded on a capturing stream would join the capture.
            world::unsafe_call("a fence recorded on a capturing stream");
        }
        let upto = queue.as_ref().map_or(0, |q| q.mark());
        Self { queue, upto }
    }
}

impl Fence for MockFence {
    fn wait(self) -> Result<(), ServerError> {
        let Some(queue) = self.queue else {
            return Ok(());
        };
        if queue.is_recording() {
            world::unsafe_call("a host wait on a capturing stream");
        }
        queue.run_until(self.upto)
    }
}
