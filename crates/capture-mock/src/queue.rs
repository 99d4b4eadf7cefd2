//! A mock stream's queue: nothing runs at enqueue. Queued work runs at a fence wait, a
//! sync or read, or an explicit `step(n)`, so ordering and lifetime bugs show. While the
//! stream records, work goes into the recording instead.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use capture_core::backend::Fence;
use capture_core::{Access, ByteRange, ServerError};

use crate::context::Context;
use crate::exec::{Engine, run_kernel, run_work};
use crate::kernels::{MOCK_MAX_BUFFERS, MockKernel, MockWork};
use crate::lock::lock;
use crate::recording;

/// A sealed graph of this queue's operations.
pub(crate) type Recording = recording::Recording<Op>;

/// Compacts the operations a stream recorded, in order, into a sealed graph.
///
/// A recording that forked lanes (rule 28) holds each lane's operations as their own
/// queue: a lane's operations run in their order, a branch after what its parent did
/// before the fork, and a parent's operations after a join after everything the branch
/// did. The graph runs each branch as late as that allows, at its join, so a dependency
/// the joins do not state shows as wrong bytes. A lane never joined is refused, as
/// CUDA refuses an unjoined capture.
pub(crate) fn compile(ops: Vec<Op>) -> Result<Recording, String> {
    let mut graph = Recording::with_capacity(ops.len());
    if !ops
        .iter()
        .any(|op| matches!(op, Op::Lane(_) | Op::Join { .. }))
    {
        for op in ops {
            step(&mut graph, op);
        }
        return Ok(graph.seal());
    }
    // Each lane's queue: its operations (by index into `ops`; a launch or work with its
    // place in the recording, for updates), and the joins into it, in order.
    enum Item {
        Op(Option<u32>, usize),
        Join(usize),
    }
    let mut ops: Vec<Option<Op>> = ops.into_iter().map(Some).collect();
    let mut lanes: Vec<Vec<Item>> = vec![Vec::new()];
    let mut joined = vec![true];
    let mut current = 0;
    let mut node = 0u32;
    for (i, op) in ops.iter().enumerate() {
        match op {
            Some(Op::Lane(lane)) => {
                current = *lane as usize;
                if lanes.len() <= current {
                    lanes.resize_with(current + 1, Vec::new);
                    joined.resize(current + 1, false);
                }
            }
            Some(Op::Join { from, into }) => {
                let (from, into) = (*from as usize, *into as usize);
                if lanes.len() <= from.max(into) {
                    lanes.resize_with(from.max(into) + 1, Vec::new);
                    joined.resize(from.max(into) + 1, false);
                }
                joined[from] = true;
                lanes[into].push(Item::Join(from));
                if current == from {
                    current = into;
                }
            }
            Some(Op::Kernel { .. } | Op::Work { .. }) => {
                lanes[current].push(Item::Op(Some(node), i));
                node += 1;
            }
            _ => lanes[current].push(Item::Op(None, i)),
        }
    }
    if let Some(lane) = joined.iter().position(|j| !j) {
        return Err(format!(
            "CUDA_ERROR_STREAM_CAPTURE_UNJOINED: lane {lane} forked and never joined"
        ));
    }
    // Lane 0 in order, each join running the joined lane's queue (its own joins
    // included) where it stands.
    let mut order = vec![0u32; node as usize];
    let mut lanes: Vec<std::vec::IntoIter<Item>> = lanes.into_iter().map(Vec::into_iter).collect();
    let mut stack = vec![0usize];
    let mut emitted = 0u32;
    while let Some(&lane) = stack.last() {
        match lanes[lane].next() {
            Some(Item::Op(at, i)) => {
                if let Some(at) = at {
                    order[at as usize] = emitted;
                    emitted += 1;
                }
                if let Some(op) = ops[i].take() {
                    step(&mut graph, op);
                }
            }
            Some(Item::Join(from)) => stack.push(from),
            None => {
                stack.pop();
            }
        }
    }
    graph.set_order(order);
    Ok(graph.seal())
}

fn step(graph: &mut Recording, op: Op) {
    match op {
        Op::Kernel {
            kernel,
            args,
            info,
            scalars,
            grid,
        } => graph.kernel(kernel, args.iter().flatten().copied(), info, &scalars, grid),
        Op::Work { work, args } => graph.work(work, args.iter().flatten().copied()),
        other => graph.other(other),
    }
}
use crate::storage::{MockResource, Pages};

static NEXT_STREAM: AtomicU64 = AtomicU64::new(0);
/// Every live queue, found by its signal (a copyable stream's index here).
static QUEUES: Mutex<Vec<Weak<Queue>>> = Mutex::new(Vec::new());

/// A process-unique number for a new mock stream.
fn next_stream_key() -> u64 {
    NEXT_STREAM.fetch_add(1, Ordering::Relaxed)
}

// A launch carries its buffers inline (the mock's most): boxing them would allocate on
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
        args: [Option<(MockResource, Access)>; MOCK_MAX_BUFFERS],
        info: Option<MockResource>,
        /// The launch's scalars, as the words after the info words (empty, unallocated,
        /// for a launch with none).
        scalars: Vec<u64>,
        /// Its grid, which the kernel sees ([`launch_grid`](crate::launch_grid)).
        grid: [u32; 3],
    },
    /// The user's own work over the declared ranges, run when the queue reaches it.
    Work {
        work: MockWork,
        args: [Option<(MockResource, Access)>; MOCK_MAX_BUFFERS],
    },
    Replay {
        graph: Arc<Recording>,
        times: u32,
    },
    /// A loop replay (rule 30): `graph` up to `max` times, stopped after the iteration
    /// that left the `u32` at `flag` non-zero, the iterations run counted at `counter`.
    Loop {
        graph: Arc<Recording>,
        max: u32,
        flag: MockResource,
        counter: MockResource,
    },
    /// A device-side wait: the rest of this queue runs only after everything enqueued on
    /// `queue` before `upto` has. A failure there fails the wait too, as an
    /// asynchronous error stays with every stream that depends on the failed work, unless
    /// the failure was reported before the wait was enqueued (`reports`, the waited-on
    /// queue's count of reported errors then): once a fence wait reported it, the core
    /// has claimed what the failed work wrote, and work enqueued after that is judged on
    /// its own (rule 15), whichever fence it waits on.
    Wait {
        queue: Arc<Queue>,
        upto: u64,
        reports: u64,
    },
    /// In a recording only: what follows goes to this lane (rule 28).
    Lane(u32),
    /// In a recording only: lane `into` goes on after everything lane `from` did.
    Join {
        from: u32,
        into: u32,
    },
}

#[derive(Debug, Default)]
struct State {
    ops: VecDeque<(u64, Op)>,
    next: u64,
    /// Everything before this position has run.
    ran: u64,
    recording: Option<Vec<Op>>,
    /// The asynchronous error the next fence wait reports.
    error: Option<ServerError>,
    /// The operations that failed, and how, with the number of reports made before each
    /// was reported (`None` while unreported): a device-side wait for a position past one
    /// fails too, if it was enqueued before that report.
    failed: Vec<Failed>,
    /// How many asynchronous errors a fence wait has reported.
    reports: u64,
}

/// One failed operation of a queue.
#[derive(Debug)]
struct Failed {
    seq: u64,
    error: ServerError,
    reported: Option<u64>,
}

static ENGINE: Mutex<Option<Engine>> = Mutex::new(None);

thread_local! {
    /// Whether this thread holds [`ENGINE`] (a wait running another queue's work).
    static RUNNING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// One mock stream's queue.
#[derive(Debug)]
pub struct Queue {
    state: Mutex<State>,
    pub(crate) dev: Arc<Mutex<Pages>>,
    pub(crate) host: Arc<Mutex<Pages>>,
    /// The stream's process-unique key, as its context knows it.
    pub(crate) key: u64,
    /// The driver context the stream belongs to.
    pub(crate) context: Arc<Context>,
}

impl Queue {
    pub(crate) fn new(
        dev: Arc<Mutex<Pages>>,
        host: Arc<Mutex<Pages>>,
        context: Arc<Context>,
    ) -> Self {
        Self {
            state: Mutex::new(State::default()),
            dev,
            host,
            key: next_stream_key(),
            context,
        }
    }

    /// A call that conflicts with this stream's capture, if it records, happened.
    pub(crate) fn conflict(&self, what: &str) {
        if self.is_recording() {
            self.context.conflicts_with(self.key, what);
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
        with_engine(|engine| {
            let mut ran = 0;
            while ran < n && self.run_next(u64::MAX, engine) {
                ran += 1;
            }
            ran
        })
    }

    /// Runs everything enqueued before `upto`, and reports (once) an asynchronous
    /// error one of them hit.
    pub(crate) fn run_until(&self, upto: u64) -> Result<(), ServerError> {
        with_engine(|engine| while self.run_next(upto, engine) {});
        let mut q = lock(&self.state);
        let error = q.error.take();
        if error.is_some() {
            let reports = q.reports;
            for f in q.failed.iter_mut().filter(|f| f.reported.is_none()) {
                f.reported = Some(reports);
            }
            q.reports += 1;
        }
        error.map_or(Ok(()), Err)
    }

    /// How many asynchronous errors a fence wait of this queue has reported so far.
    pub(crate) fn reports(&self) -> u64 {
        lock(&self.state).reports
    }

    /// Runs everything enqueued so far.
    pub(crate) fn run_all(&self) -> Result<(), ServerError> {
        let upto = self.mark();
        self.run_until(upto)
    }

    /// Runs the next operation if it was enqueued before `upto`; whether one ran.
    fn run_next(&self, upto: u64, engine: &mut Engine) -> bool {
        let (seq, op) = {
            let mut q = lock(&self.state);
            match q.ops.front() {
                Some((seq, _)) if *seq < upto => q.ops.pop_front().expect("checked above"),
                _ => return false,
            }
        };
        let result = self.execute(&op, engine);
        let mut q = lock(&self.state);
        q.ran = seq + 1;
        if let Err(e) = result {
            if !q.failed.iter().any(|f| f.reported.is_none()) {
                q.failed.push(Failed {
                    seq,
                    error: e.clone(),
                    reported: None,
                });
            }
            q.error.get_or_insert(e);
        }
        true
    }

    /// A device-side wait for this queue's work before `upto`, enqueued after `reports`
    /// reported errors: runs it, and fails if any of it failed and was not reported
    /// before the wait was enqueued.
    pub(crate) fn wait_until(
        &self,
        upto: u64,
        reports: u64,
        engine: &mut Engine,
    ) -> Result<(), ServerError> {
        while self.run_next(upto, engine) {}
        let q = lock(&self.state);
        match q
            .failed
            .iter()
            .find(|f| f.seq < upto && f.reported.is_none_or(|r| r >= reports))
        {
            Some(f) => Err(f.error.clone()),
            None => Ok(()),
        }
    }

    pub(crate) fn execute(&self, op: &Op, engine: &mut Engine) -> Result<(), ServerError> {
        match op {
            Op::Copy { from, to } => {
                let host = lock(&self.host);
                let mut dev = lock(&self.dev);
                dev.slice_mut(to.page, to.bytes)
                    .copy_from_slice(host.slice(from.page, from.bytes));
            }
            Op::Kernel {
                kernel,
                args,
                info,
                scalars,
                grid,
            } => run_kernel(
                &self.dev,
                engine,
                kernel,
                args.iter().flatten().copied(),
                *info,
                scalars,
                *grid,
            )?,
            Op::Work { work, args } => {
                run_work(&self.dev, engine, work, args.iter().flatten().copied())?;
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
                    graph.run(&self.dev, engine, &mut |op, engine| {
                        self.execute(op, engine)
                    })?;
                }
            }
            Op::Loop {
                graph,
                max,
                flag,
                counter,
            } => {
                if graph.destroyed.load(Ordering::SeqCst) {
                    return Err(ServerError::driver(
                        "graph launch",
                        crate::MockError::new(
                            "the graph executable was destroyed while a loop of it was queued",
                        ),
                    ));
                }
                let word = |r: &MockResource| ByteRange::new(r.bytes.start(), 4).expect("4 bytes");
                let (flag, counter) = (
                    MockResource {
                        page: flag.page,
                        bytes: word(flag),
                    },
                    MockResource {
                        page: counter.page,
                        bytes: word(counter),
                    },
                );
                {
                    let mut dev = lock(&self.dev);
                    dev.slice_mut(flag.page, flag.bytes).fill(0);
                    dev.slice_mut(counter.page, counter.bytes).fill(0);
                }
                for i in 1..=*max {
                    graph.run(&self.dev, engine, &mut |op, engine| {
                        self.execute(op, engine)
                    })?;
                    let mut dev = lock(&self.dev);
                    dev.slice_mut(counter.page, counter.bytes)
                        .copy_from_slice(&i.to_le_bytes());
                    if dev.slice(flag.page, flag.bytes) != [0; 4] {
                        break;
                    }
                }
            }
            Op::Wait {
                queue,
                upto,
                reports,
            } => queue.wait_until(*upto, *reports, engine)?,
            // Lanes exist in a recording alone, and `compile` orders them away.
            Op::Lane(_) | Op::Join { .. } => {}
        }
        Ok(())
    }
}

/// Runs `f` with the engine: taking its lock, or reusing it when this thread already
/// runs a queue (a device-side wait running another queue's work).
fn with_engine<R>(f: impl FnOnce(&mut Engine) -> R) -> R {
    if RUNNING.with(std::cell::Cell::get) {
        // Only a wait inside a running operation gets here, and it runs no scratch user
        // concurrently: a fresh engine for the nested run.
        return f(&mut Engine::default());
    }
    struct Running;
    impl Drop for Running {
        fn drop(&mut self) {
            RUNNING.with(|r| r.set(false));
        }
    }
    let mut guard = lock(&ENGINE);
    RUNNING.with(|r| r.set(true));
    let _running = Running;
    f(guard.get_or_insert_with(Engine::default))
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
        let queue = queue(signal);
        if let Some(q) = &queue {
            // An event recorded on a capturing stream would join the capture.
            q.conflict("a fence recorded on a capturing stream");
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
        queue.conflict("a host wait on a capturing stream");
        queue.run_until(self.upto)
    }
}

/// Registers a queue and returns the signal that finds it.
pub(crate) fn register(queue: &Arc<Queue>) -> usize {
    let mut queues = lock(&QUEUES);
    match queues.iter().position(|q| q.strong_count() == 0) {
        Some(free) => {
            queues[free] = Arc::downgrade(queue);
            free
        }
        None => {
            queues.push(Arc::downgrade(queue));
            queues.len() - 1
        }
    }
}

/// The queue a signal names, while it lives.
pub(crate) fn queue(signal: usize) -> Option<Arc<Queue>> {
    lock(&QUEUES).get(signal).and_then(Weak::upgrade)
}
