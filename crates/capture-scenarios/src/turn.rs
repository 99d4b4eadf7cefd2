//! The fixed hand-over between two threads of a scenario: each side runs until it hands
//! the turn to the other, so the device calls of both go in one order on every run and
//! the scenario's trace is the same each time.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::mpsc::{Receiver, Sender, channel};

use capture_core::ServerError;

/// One side of a fixed hand-over between two threads.
pub struct Turn {
    go: Sender<()>,
    wait: Receiver<()>,
}

/// What a side of the hand-over unwinds with when the other side stopped (failed or
/// panicked) instead of handing back: no message of its own, since the other side's
/// failure is the one [`two_threads`] reports.
struct Stopped;

impl Turn {
    fn pair() -> (Turn, Turn) {
        let (a_tx, a_rx) = channel();
        let (b_tx, b_rx) = channel();
        (
            Turn {
                go: a_tx,
                wait: b_rx,
            },
            Turn {
                go: b_tx,
                wait: a_rx,
            },
        )
    }

    /// Hands over to the other side and waits until it hands back.
    pub fn hand_over(&self) {
        if self.go.send(()).is_err() {
            stopped();
        }
        self.wait();
    }

    fn wait(&self) {
        if self.wait.recv().is_err() {
            stopped();
        }
    }

    fn done(&self) {
        let _ = self.go.send(());
    }
}

/// Unwinds with [`Stopped`], past the panic hook (nothing is printed for it).
fn stopped() -> ! {
    resume_unwind(Box::new(Stopped))
}

fn is_stopped(payload: &(dyn Any + Send)) -> bool {
    payload.is::<Stopped>()
}

/// Runs `main` here and `worker` on a thread named `worker`, each given its side of the
/// hand-over; `worker` waits for the first turn. A side's panic is the scenario's (and
/// goes on unwinding here), else a side's error, `main`'s first when both sides failed;
/// a side's having stopped because the other failed is never what is reported.
///
/// # Errors
///
/// An unexpected error from the device, on either side.
pub fn two_threads(
    main: impl FnOnce(&Turn) -> Result<(), ServerError>,
    worker: impl FnOnce(&Turn) -> Result<(), ServerError> + Send,
) -> Result<(), ServerError> {
    let (here, there) = Turn::pair();
    std::thread::scope(|scope| {
        let joined = std::thread::Builder::new()
            .name("worker".into())
            .spawn_scoped(scope, move || {
                there.wait();
                let result = worker(&there);
                there.done();
                result
            })
            .expect("spawning the scenario's worker thread");
        let ours = catch_unwind(AssertUnwindSafe(|| main(&here)));
        drop(here);
        let theirs = joined.join();
        match (ours, theirs) {
            (Ok(Ok(())), Ok(Ok(()))) => Ok(()),
            (Err(panic), _) | (_, Err(panic)) if !is_stopped(&*panic) => resume_unwind(panic),
            (Ok(Err(e)), _) | (_, Ok(Err(e))) => Err(e),
            _ => panic!("a thread of the scenario stopped before handing the turn back"),
        }
    })
}
