//! `StreamCell`: where a pooled stream lives and how its driver calls are made: behind a
//! lock on the caller's thread, or, for a thread-affine backend, on the stream's own
//! worker thread, so a capture begun from one user thread can end from another.

use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::mpsc::{Receiver, Sender, channel, sync_channel};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;

use super::pooled::PooledStream;
use crate::driver::Backend;
use crate::error::ServerError;

type Job<B> = Box<dyn FnOnce(&mut PooledStream<B>) + Send>;

/// One pooled stream and the way to reach it.
pub(crate) enum StreamCell<B: Backend> {
    /// Reached by locking it, from any thread.
    Direct(Mutex<PooledStream<B>>),
    /// Owned by a worker thread that makes every driver call of the stream.
    Worker(Worker<B>),
}

pub(crate) struct Worker<B: Backend> {
    jobs: Mutex<Option<Sender<Job<B>>>>,
    thread: Option<JoinHandle<()>>,
}

impl<B: Backend> StreamCell<B> {
    /// Runs `f` on the stream: under its lock, or on its worker.
    pub(crate) fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut PooledStream<B>) -> R + Send + 'static,
    ) -> R {
        match self {
            Self::Direct(m) => f(&mut lock(m)),
            Self::Worker(w) => w.run(f),
        }
    }

    /// The stream's lock, for a direct cell; `None` for a worker cell.
    pub(crate) fn direct(&self) -> Option<MutexGuard<'_, PooledStream<B>>> {
        match self {
            Self::Direct(m) => Some(lock(m)),
            Self::Worker(_) => None,
        }
    }

    /// A worker thread owning the stream `create` makes on it.
    pub(crate) fn spawn(
        index: usize,
        create: impl FnOnce() -> Result<PooledStream<B>, ServerError> + Send + 'static,
    ) -> Result<Self, ServerError> {
        let (jobs_tx, jobs_rx): (Sender<Job<B>>, Receiver<Job<B>>) = channel();
        let (ready_tx, ready_rx) = sync_channel::<Result<(), ServerError>>(1);
        let thread = std::thread::Builder::new()
            .name(format!("capture-stream-{index}"))
            .spawn(move || {
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
                while let Ok(job) = jobs_rx.recv() {
                    job(&mut stream);
                }
            })
            .map_err(|e| ServerError::driver("spawn stream worker", e))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self::Worker(Worker {
                jobs: Mutex::new(Some(jobs_tx)),
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

impl<B: Backend> Worker<B> {
    fn run<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut PooledStream<B>) -> R + Send + 'static,
    ) -> R {
        let (tx, rx) = sync_channel(1);
        let job: Job<B> = Box::new(move |stream| {
            let _ = tx.send(catch_unwind(AssertUnwindSafe(|| f(stream))));
        });
        let sent = lock(&self.jobs)
            .as_ref()
            .map(|jobs| jobs.send(job).is_ok())
            .unwrap_or(false);
        assert!(sent, "a stream worker outlived its device");
        match rx.recv() {
            Ok(Ok(r)) => r,
            Ok(Err(panic)) => resume_unwind(panic),
            Err(_) => panic!("a stream worker died while running a call"),
        }
    }
}

impl<B: Backend> Drop for Worker<B> {
    fn drop(&mut self) {
        lock(&self.jobs).take();
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
