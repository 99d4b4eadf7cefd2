//! `capture trace`'s named scenarios: small multi-stream programs on the mock that
//! show the capture lifecycle's refusals, taints, pins and releases on a timeline.
//!
//! They are the program's own, not the shared suite's: `capture-suite` is test tooling
//! (`publish = false`, with insta and proptest), and this crate is published, so it
//! cannot depend on it. Each scenario checks its bytes and the refusals it expects, and
//! fails naming what was wrong; work handed between threads goes in a fixed order, so
//! each scenario's trace is the same on every run.
//!
//! Logical streams 0 and 2 share pooled stream 0, stream 1 is on pooled stream 1.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, channel};

use capture_graphs::mock::{FaultOp, FaultPlan, Faulty};
use capture_graphs::{
    Arg, Buffer, Builtin, Builtins, Chain, Device, DeviceConfig, KernelHandle, ServerError,
    StreamId,
};

/// A named scenario and what it shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Scenario {
    /// Its name on the command line.
    pub(crate) name: &'static str,
    /// One line on what it shows.
    pub(crate) about: &'static str,
    run: Program,
}

/// A scenario's body, generic over the backend under the fault wrapper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Program {
    TwoStreams,
    Fault,
    ForeignEnd,
    DropUnderReplay,
}

/// Every scenario, in `--list` order.
pub(crate) const ALL: &[Scenario] = &[
    Scenario {
        name: "two-streams",
        about: "two threads capture on two pooled streams at once; a neighbour of the \
                first window is refused; both graphs replay",
        run: Program::TwoStreams,
    },
    Scenario {
        name: "fault",
        about: "a launch failing inside a window dooms it; a replay failing to enqueue \
                taints its outputs until the next replay; a failed submit taints the stream",
        run: Program::Fault,
    },
    Scenario {
        name: "foreign-end",
        about: "another thread ends the window from a neighbour stream: abandoned, its \
                writes tainted; the owner is told and captures again",
        run: Program::ForeignEnd,
    },
    Scenario {
        name: "drop-under-replay",
        about: "a graph dropped right after its replay was enqueued waits behind the \
                replay's fence; memory allocated afterwards aliases nothing it used",
        run: Program::DropUnderReplay,
    },
];

/// The scenario called `name`.
pub(crate) fn find(name: &str) -> Option<Scenario> {
    ALL.iter().copied().find(|s| s.name == name)
}

/// Why a scenario failed: what it expected and what it saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Failed(pub(crate) String);

impl From<ServerError> for Failed {
    fn from(error: ServerError) -> Self {
        Failed(format!("unexpected error: {}", Chain(&error)))
    }
}

const S0: StreamId = StreamId::new(0);
const S1: StreamId = StreamId::new(1);
const S2: StreamId = StreamId::new(2);
/// Elements of every buffer.
const N: u64 = 16;

impl Scenario {
    /// Runs the scenario on `backend` (under the fault wrapper, with two pooled streams
    /// and the trace on) and returns the core's trace, one event per line.
    ///
    /// # Errors
    ///
    /// [`Failed`] naming the wrong byte, the missing refusal or the unexpected error.
    pub(crate) fn run<B: Builtins>(self, backend: B) -> Result<String, Failed> {
        let h = Harness::new(backend)?;
        match self.run {
            Program::TwoStreams => two_streams(&h)?,
            Program::Fault => fault(&h)?,
            Program::ForeignEnd => foreign_end(&h)?,
            Program::DropUnderReplay => drop_under_replay(&h)?,
        }
        let recording = h.dev.captures().recording();
        if !recording.is_empty() {
            return Err(Failed(format!("left recording: {recording:?}")));
        }
        Ok(h.dev.trace().render())
    }
}

struct Harness<B: Builtins> {
    dev: Device<Faulty<B>>,
    plan: Arc<FaultPlan>,
    add: KernelHandle,
    copy: KernelHandle,
}

impl<B: Builtins> Harness<B> {
    fn new(backend: B) -> Result<Self, ServerError> {
        let faulty = Faulty::new(backend);
        let plan = Arc::clone(faulty.plan());
        let dev = Device::new(faulty, DeviceConfig::new().streams(2)?.trace(true))?;
        let add = dev.kernel(B::builtin(Builtin::AddScalar));
        let copy = dev.kernel(B::builtin(Builtin::Copy));
        Ok(Self {
            dev,
            plan,
            add,
            copy,
        })
    }

    /// `y = x + a`.
    fn add(&self, s: StreamId, x: &Buffer, y: &Buffer, a: f32) -> Result<(), ServerError> {
        let info = Builtin::AddScalar.info(N, a);
        let args = [Arg::read(x), Arg::write(y)];
        self.dev.launch(s, &self.add, [1, 1, 1], &args, &info)
    }

    /// `y = x`.
    fn copy(&self, s: StreamId, x: &Buffer, y: &Buffer) -> Result<(), ServerError> {
        let info = Builtin::Copy.info(N, 0.0);
        let args = [Arg::read(x), Arg::write(y)];
        self.dev.launch(s, &self.copy, [1, 1, 1], &args, &info)
    }

    fn alloc(&self, s: StreamId) -> Result<Buffer, ServerError> {
        self.dev.alloc(s, N * 4)
    }

    /// A buffer on `s` holding [`N`] copies of `v`.
    fn filled(&self, s: StreamId, v: f32) -> Result<Buffer, ServerError> {
        let b = self.alloc(s)?;
        self.fill(s, &b, v)?;
        Ok(b)
    }

    fn fill(&self, s: StreamId, b: &Buffer, v: f32) -> Result<(), ServerError> {
        self.dev.write_values(s, b, 0, &[v; N as usize])
    }

    /// Fails unless every element of `b`, read on `s`, is `v`.
    fn expect(&self, s: StreamId, b: &Buffer, v: f32) -> Result<(), Failed> {
        let got: Vec<f32> = self.dev.read_values(s, b)?;
        if got.iter().any(|x| *x != v) {
            return Err(Failed(format!("{} holds {got:?}, not {v}", b.id())));
        }
        Ok(())
    }

    /// Fails unless reading `b` on `s` fails with an error naming `needle`.
    fn expect_unreadable(&self, s: StreamId, b: &Buffer, needle: &str) -> Result<(), Failed> {
        refused(self.dev.read(s, b), needle, &format!("reading {}", b.id()))
    }

    fn arm(&self, op: FaultOp) -> Result<(), Failed> {
        Ok(self.plan.fail(op, 1)?)
    }
}

/// Fails unless `result` is an error naming `needle`.
fn refused<T>(result: Result<T, ServerError>, needle: &str, what: &str) -> Result<(), Failed> {
    match result {
        Ok(_) => Err(Failed(format!("{what} succeeded; expected {needle:?}"))),
        Err(e) if Chain(&e).to_string().contains(needle) => Ok(()),
        Err(e) => Err(Failed(format!(
            "{what} failed with {:?}; expected {needle:?}",
            Chain(&e).to_string()
        ))),
    }
}

/// One side of a fixed hand-over between two threads.
struct Turn {
    go: Sender<()>,
    wait: Receiver<()>,
}

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
    fn hand_over(&self) -> Result<(), Failed> {
        self.go.send(()).map_err(|_| stopped())?;
        self.wait()
    }

    fn wait(&self) -> Result<(), Failed> {
        self.wait.recv().map_err(|_| stopped())
    }

    fn done(&self) {
        let _ = self.go.send(());
    }
}

/// What a side of the hand-over sees when the other side has stopped (failed).
fn stopped() -> Failed {
    Failed("the other thread stopped".into())
}

/// Runs `main` here and `worker` on a thread named `worker`, each given its side of the
/// hand-over; `worker` waits for the first turn. Of two failures, the one that is not
/// the other side having stopped is reported.
fn two_threads(
    main: impl FnOnce(&Turn) -> Result<(), Failed>,
    worker: impl FnOnce(&Turn) -> Result<(), Failed> + Send,
) -> Result<(), Failed> {
    let (here, there) = Turn::pair();
    std::thread::scope(|scope| {
        let joined = std::thread::Builder::new()
            .name("worker".into())
            .spawn_scoped(scope, move || {
                let result = there.wait().and_then(|()| worker(&there));
                there.done();
                result
            })
            .map_err(|e| Failed(format!("spawning the worker: {e}")))?;
        let result = main(&here);
        drop(here);
        let theirs = joined
            .join()
            .unwrap_or_else(|_| Err(Failed("the worker panicked".into())));
        match (result, theirs) {
            (Err(e), Err(theirs)) if e == stopped() => Err(theirs),
            (Err(e), _) | (Ok(()), Err(e)) => Err(e),
            (Ok(()), Ok(())) => Ok(()),
        }
    })
}

fn two_streams<B: Builtins>(h: &Harness<B>) -> Result<(), Failed> {
    let (x0, y0) = (h.filled(S0, 1.0)?, h.alloc(S0)?);
    let (x1, y1) = (h.filled(S1, 10.0)?, h.alloc(S1)?);
    let n = h.filled(S2, 5.0)?;
    // Each stream loads its kernel and warms its info entry before any window opens.
    h.add(S0, &x0, &y0, 1.0)?;
    h.add(S1, &x1, &y1, 2.0)?;
    two_threads(
        |turn| {
            h.dev.prepare(S0)?;
            h.add(S0, &x0, &y0, 1.0)?;
            h.dev.begin(S0)?;
            h.add(S0, &x0, &y0, 1.0)?;
            // The worker is refused on stream 2 and captures on stream 1 meanwhile.
            turn.hand_over()?;
            let g0 = h.dev.end(S0)?;
            h.fill(S0, &x0, 3.0)?;
            h.dev.replay(S0, &g0, 1)?;
            h.expect(S0, &y0, 4.0)?;
            turn.hand_over()?;
            h.dev.drop_graph(g0)?;
            Ok(())
        },
        |turn| {
            refused(
                h.add(S2, &n, &n, 1.0),
                "stream#0 holds a capture window",
                "a launch on stream#2",
            )?;
            let g1 = h.dev.capture(S1, |_| h.add(S1, &x1, &y1, 2.0))?;
            turn.hand_over()?;
            h.fill(S1, &x1, 20.0)?;
            h.dev.replay(S1, &g1, 2)?;
            h.expect(S1, &y1, 22.0)?;
            h.dev.drop_graph(g1)?;
            Ok(())
        },
    )?;
    h.expect(S2, &n, 5.0)?;
    h.dev.sync(S1)?;
    h.dev.cleanup()?;
    Ok(())
}

fn fault<B: Builtins>(h: &Harness<B>) -> Result<(), Failed> {
    let x = h.filled(S0, 1.0)?;
    let (y, z) = (h.alloc(S0)?, h.alloc(S0)?);
    h.add(S0, &x, &y, 1.0)?;
    h.copy(S0, &y, &z)?;
    h.dev.sync(S0)?;
    // A launch fails inside the window: doomed, what it would have written tainted.
    h.dev.prepare(S0)?;
    h.dev.begin(S0)?;
    h.add(S0, &x, &y, 1.0)?;
    h.arm(FaultOp::Launch)?;
    refused(h.copy(S0, &y, &z), "injected fault in launch", "the copy")?;
    refused(h.dev.end(S0), "doomed by copy on stream#0", "the seal")?;
    h.expect_unreadable(S0, &y, "injected fault in launch")?;
    // A replay fails to enqueue: its outputs carry the failure until one succeeds.
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 1.0))?;
    h.arm(FaultOp::Replay)?;
    refused(
        h.dev.replay(S0, &g, 1),
        "injected fault in replay",
        "replay",
    )?;
    h.expect_unreadable(S0, &y, "injected fault in replay")?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, 2.0)?;
    // A submit fails: what the stream wrote since its last good fence is tainted.
    h.copy(S0, &y, &z)?;
    h.arm(FaultOp::Submit)?;
    refused(h.dev.sync(S0), "injected fault in submit", "the sync")?;
    h.expect_unreadable(S0, &z, "injected fault in submit")?;
    h.dev.drop_graph(g)?;
    Ok(())
}

fn foreign_end<B: Builtins>(h: &Harness<B>) -> Result<(), Failed> {
    let (x, y) = (h.filled(S0, 1.0)?, h.alloc(S0)?);
    h.add(S0, &x, &y, 1.0)?;
    two_threads(
        |turn| {
            h.dev.prepare(S0)?;
            h.add(S0, &x, &y, 1.0)?;
            h.dev.begin(S0)?;
            h.add(S0, &x, &y, 1.0)?;
            // The worker ends the window from stream 2.
            turn.hand_over()?;
            match h.dev.end(S0) {
                Err(ServerError::Abandoned { owner, by }) if (owner, by) == (S0, S2) => {}
                other => {
                    return Err(Failed(format!(
                        "the owner's end: {:?}; expected abandoned by stream#2",
                        other.map_err(|e| Chain(&e).to_string())
                    )));
                }
            }
            Ok(())
        },
        |_| {
            refused(
                h.dev.end(S2),
                "capture window of stream#0 abandoned: ended by stream#2",
                "the foreign end",
            )
        },
    )?;
    h.expect_unreadable(S0, &y, "abandoned")?;
    let g = h.dev.capture(S0, |_| h.add(S0, &x, &y, 1.0))?;
    h.fill(S0, &x, 5.0)?;
    h.dev.replay(S0, &g, 1)?;
    h.expect(S0, &y, 6.0)?;
    h.dev.drop_graph(g)?;
    Ok(())
}

fn drop_under_replay<B: Builtins>(h: &Harness<B>) -> Result<(), Failed> {
    let (x, y) = (h.alloc(S0)?, h.alloc(S0)?);
    // The intermediate is allocated in the closure: warmup's slice, reused recording.
    let g = h.dev.capture(S0, |d| {
        h.fill(S0, &x, 1.0)?;
        let tmp = d.alloc(S0, N * 4)?;
        h.add(S0, &x, &tmp, 1.0)?;
        h.add(S0, &tmp, &y, 1.0)
    })?;
    h.fill(S0, &y, 0.0)?;
    h.dev.sync(S0)?;
    h.dev.replay(S0, &g, 2)?;
    // Dropped while its replay is queued: it waits behind the replay's fence.
    h.dev.drop_graph(g)?;
    let other = h.filled(S0, 77.0)?;
    let later: Vec<Buffer> = (0..4)
        .map(|i| h.filled(S0, 500.0 + i as f32))
        .collect::<Result<_, _>>()?;
    h.expect(S0, &y, 3.0)?;
    h.expect(S0, &x, 1.0)?;
    h.expect(S0, &other, 77.0)?;
    for (i, b) in later.iter().enumerate() {
        h.expect(S0, b, 500.0 + i as f32)?;
    }
    drop((other, later));
    h.dev.cleanup()?;
    Ok(())
}

#[cfg(test)]
mod tests;
