//! `StreamCell`: where a pooled stream lives and how its driver calls are made. Every
//! call runs on the caller's thread, under the stream's lock. A thread-affine backend
//! (one whose capture must end on the thread that began it) also gets a worker thread
//! per stream, which makes the only calls that must share a thread: opening and closing
//! the driver capture (`begin`, `end`, `abort`, teardown). Launches, replays, copies and
//! syncs never cross threads, so none of them waits on a scheduler.

use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::{JoinHandle, Thread};

use super::pooled::PooledStream;
use crate::driver::Backend;
use crate::error::ServerError;
use crate::lock_order::{Held, Level, Ordered};

type Job<B> = Box<dyn FnOnce(&Mutex<PooledStream<B>>) + Send>;

/// One pooled stream and the way to reach it.
pub(crate) struct StreamCell<B: Backend> {
    stream: Arc<Mutex<PooledStream<B>>>,
    /// The thread that opens and closes the stream's driver captures, for a
    /// thread-affine backend.
    worker: Option<Worker<B>>,
}

/// Calls waiting for a worker, and how to wake it.
struct Mailbox<B: Backend> {
    jobs: Mutex<VecDeque<Job<B>>>,
    closed: AtomicBool,
    worker: OnceLock<Thread>,
}

/// A call's result, and the caller to wake when it is in.
struct Reply<R> {
    done: AtomicBool,
    value: Mutex<Option<std::thread::Result<R>>>,
    caller: Thread,
}

struct Worker<B: Backend> {
    mailbox: Arc<Mailbox<B>>,
    thread: Option<JoinHandle<()>>,
}

impl<B: Backend> StreamCell<B> {
    /// A stream every call reaches under its lock, on the caller's thread.
    pub(crate) fn direct(stream: PooledStream<B>) -> Self {
        Self {
            stream: Arc::new(Mutex::new(stream)),
            worker: None,
        }
    }

    /// A stream created on a worker thread of its own, which then opens and closes its
    /// driver captures; `create` runs there.
    pub(crate) fn spawn(
        index: usize,
        create: impl FnOnce() -> Result<PooledStream<B>, ServerError> + Send + 'static,
    ) -> Result<Self, ServerError> {
        let mailbox = Arc::new(Mailbox {
            jobs: Mutex::new(VecDeque::new()),
            closed: AtomicBool::new(false),
            worker: OnceLock::new(),
        });
        type Created<B> = Result<Arc<Mutex<PooledStream<B>>>, ServerError>;
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel::<Created<B>>(1);
        let inbox = Arc::clone(&mailbox);
        let thread = std::thread::Builder::new()
            .name(format!("capture-stream-{index}"))
            .spawn(move || {
                let _ = inbox.worker.set(std::thread::current());
                let stream = match create() {
                    Ok(s) => Arc::new(Mutex::new(s)),
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(Arc::clone(&stream)));
                serve(&inbox, &stream);
            })
            .map_err(|e| ServerError::driver("spawn stream worker", e))?;
        match ready_rx.recv() {
            Ok(Ok(stream)) => Ok(Self {
                stream,
                worker: Some(Worker {
                    mailbox,
                    thread: Some(thread),
                }),
            }),
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

    /// The stream's lock, taken on the caller's thread.
    pub(crate) fn lock(&self) -> Ordered<'_, PooledStream<B>> {
        Ordered::lock(&self.stream, Level::Stream)
    }

    /// Runs `f` on the stream, under its lock, on the caller's thread.
    pub(crate) fn run<R>(&self, f: impl FnOnce(&mut PooledStream<B>) -> R) -> R {
        f(&mut self.lock())
    }

    /// Runs `f`, which may open or close the stream's driver capture, under the stream's
    /// lock on the thread that owns its captures: the worker for a thread-affine
    /// backend (the caller parks until the answer is in), else the caller's own.
    pub(crate) fn run_capture_call<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut PooledStream<B>) -> R + Send + 'static,
    ) -> R {
        match &self.worker {
            None => self.run(f),
            Some(w) => {
                // The caller holds the stream while its call runs on the worker.
                let _held = Held::enter(Level::Stream);
                w.run(f)
            }
        }
    }
}

/// The worker's loop: take calls in order; park while there are none.
fn serve<B: Backend>(mailbox: &Mailbox<B>, stream: &Mutex<PooledStream<B>>) {
    loop {
        let job = lock(&mailbox.jobs).pop_front();
        if let Some(job) = job {
            job(stream);
            continue;
        }
        if mailbox.closed.load(Ordering::Acquire) {
            return;
        }
        // A caller that queues after the pop above unparks this thread; the token makes
        // this park return at once. A spurious wakeup only loops.
        std::thread::park();
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
            let result = catch_unwind(AssertUnwindSafe(|| {
                f(&mut Ordered::lock(stream, Level::Stream))
            }));
            *lock(&answer.value) = Some(result);
            answer.done.store(true, Ordering::Release);
            answer.caller.unpark();
        });
        lock(&self.mailbox.jobs).push_back(job);
        if let Some(worker) = self.mailbox.worker.get() {
            worker.unpark();
        }
        while !reply.done.load(Ordering::Acquire) {
            std::thread::park();
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
