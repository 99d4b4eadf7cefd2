//! `StreamCell`: where a pooled stream lives and how its driver calls are made: behind a
//! lock on the caller's thread, or, for a thread-affine backend, on the stream's own
//! worker thread, so a capture begun from one user thread can end from another.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use super::pooled::PooledStream;
use crate::driver::Backend;
use crate::error::ServerError;
use crate::lock_order::{Held, Level, Ordered};

type Job<B> = Box<dyn FnOnce(&mut PooledStream<B>) + Send>;

/// How long a waiting side spins before it parks: a launch loop hands calls over faster
/// than a thread wakes up, so both sides stay awake between back-to-back calls.
const SPIN: Duration = Duration::from_micros(50);

/// One pooled stream and the way to reach it.
// A device builds its cells once, in a vector; a direct stream's state inline saves
// the lock a pointer chase on every call.
#[allow(clippy::large_enum_variant)]
pub(crate) enum StreamCell<B: Backend> {
    /// Reached by locking it, from any thread.
    Direct(Mutex<PooledStream<B>>),
    /// Owned by a worker thread that makes every driver call of the stream.
    Worker(Worker<B>),
}

/// Calls waiting for a worker, and how to wake it.
struct Mailbox<B: Backend> {
    jobs: Mutex<VecDeque<Job<B>>>,
    ready: AtomicBool,
    closed: AtomicBool,
    worker: OnceLock<Thread>,
}

/// A call's result, and the caller to wake when it is in.
struct Reply<R> {
    done: AtomicBool,
    value: Mutex<Option<std::thread::Result<R>>>,
    caller: Thread,
}

pub(crate) struct Worker<B: Backend> {
    mailbox: Arc<Mailbox<B>>,
    thread: Option<JoinHandle<()>>,
}

/// Spins (checking the clock now and then) until `ready` holds or [`SPIN`] passes.
fn spin_until(ready: impl Fn() -> bool) -> bool {
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if ready() {
                return true;
            }
            std::hint::spin_loop();
        }
        if start.elapsed() > SPIN {
            return ready();
        }
    }
}

impl<B: Backend> StreamCell<B> {
    /// Runs `f` on the stream: under its lock, or on its worker.
    pub(crate) fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut PooledStream<B>) -> R + Send + 'static,
    ) -> R {
        match self {
            Self::Direct(m) => f(&mut Ordered::lock(m, Level::Stream)),
            Self::Worker(w) => {
                // The caller holds the stream while its call runs on the worker.
                let _held = Held::enter(Level::Stream);
                w.run(f)
            }
        }
    }

    /// The stream's lock, for a direct cell; `None` for a worker cell.
    pub(crate) fn direct(&self) -> Option<Ordered<'_, PooledStream<B>>> {
        match self {
            Self::Direct(m) => Some(Ordered::lock(m, Level::Stream)),
            Self::Worker(_) => None,
        }
    }

    /// A worker thread owning the stream `create` makes on it.
    pub(crate) fn spawn(
        index: usize,
        create: impl FnOnce() -> Result<PooledStream<B>, ServerError> + Send + 'static,
    ) -> Result<Self, ServerError> {
        let mailbox = Arc::new(Mailbox {
            jobs: Mutex::new(VecDeque::new()),
            ready: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            worker: OnceLock::new(),
        });
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Result<(), ServerError>>(1);
        let inbox = Arc::clone(&mailbox);
        let thread = std::thread::Builder::new()
            .name(format!("capture-stream-{index}"))
            .spawn(move || {
                let _ = inbox.worker.set(std::thread::current());
                let mut stream = match create() {
                    Ok(s) => {
                        let _ = ready_tx.send(Ok(()));
                        s
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                serve(&inbox, &mut stream);
            })
            .map_err(|e| ServerError::driver("spawn stream worker", e))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self::Worker(Worker {
                mailbox,
                thread: Some(thread),
            })),
            Ok(Err(e)) => {
                let _ = thread.join();
                Err(e)
            }
            Err(_) => {
                let _ = thread.join();
                Err(ServerError::graph_state(
                    "create stream",
                    "the stream's worker thread ended before creating it",
                ))
            }
        }
    }
}

/// The worker's loop: take calls in order; between calls, spin briefly, then park.
fn serve<B: Backend>(mailbox: &Mailbox<B>, stream: &mut PooledStream<B>) {
    loop {
        let job = {
            let mut jobs = lock(&mailbox.jobs);
            let job = jobs.pop_front();
            if jobs.is_empty() {
                mailbox.ready.store(false, Ordering::Release);
            }
            job
        };
        if let Some(job) = job {
            let _held = Held::enter(Level::Stream);
            job(stream);
            continue;
        }
        if mailbox.closed.load(Ordering::Acquire) {
            return;
        }
        let woke =
            || mailbox.ready.load(Ordering::Acquire) || mailbox.closed.load(Ordering::Acquire);
        if !spin_until(woke) {
            // A caller that queues after this check unparks us; the token makes this
            // park return at once.
            std::thread::park();
        }
    }
}

impl<B: Backend> Worker<B> {
    fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut PooledStream<B>) -> R + Send + 'static,
    ) -> R {
        let reply = Arc::new(Reply {
            done: AtomicBool::new(false),
            value: Mutex::new(None),
            caller: std::thread::current(),
        });
        let answer = Arc::clone(&reply);
        let job: Job<B> = Box::new(move |stream| {
            let result = catch_unwind(AssertUnwindSafe(|| f(stream)));
            *lock(&answer.value) = Some(result);
            answer.done.store(true, Ordering::Release);
            answer.caller.unpark();
        });
        {
            let mut jobs = lock(&self.mailbox.jobs);
            jobs.push_back(job);
            self.mailbox.ready.store(true, Ordering::Release);
        }
        if let Some(worker) = self.mailbox.worker.get() {
            worker.unpark();
        }
        let done = || reply.done.load(Ordering::Acquire);
        if !spin_until(done) {
            while !done() {
                std::thread::park();
            }
        }
        match lock(&reply.value).take() {
            Some(Ok(r)) => r,
            Some(Err(panic)) => resume_unwind(panic),
            None => panic!("a stream worker answered without a result"),
        }
    }
}

impl<B: Backend> Drop for Worker<B> {
    fn drop(&mut self) {
        self.mailbox.closed.store(true, Ordering::Release);
        if let Some(worker) = self.mailbox.worker.get() {
            worker.unpark();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Locks `m`; a panic under a stream lock leaves state every path keeps consistent
/// (transitions are single stores), so the data is recovered rather than poisoned.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
