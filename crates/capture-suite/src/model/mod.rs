//! The reference model and the model-based tests' runner, generic over a backend so
//! every backend's tests can run it.
//!
//! A [`Program`] is a random list of ops over 2 to 6 logical streams on 1 to 4 pooled
//! streams (allocate, drop, write and read partial ranges, launch any builtin or a user
//! kernel that writes only part of its output, faults, or takes scalars (`y = a·x + b`
//! with an f32, an i16 and a u32), over buffers of any stream, as a kernel launch or as
//! the same kernel run by foreign work on the raw stream, a launch with a wrong-sized
//! scalar that must be refused changing nothing, caller memory imported and declared
//! written, sync, cleanup at any point, the explicit lifecycle and the capture closure,
//! replay ×K, drop a graph, a fault on the Nth call of any driver operation, device-side
//! waits included), with motifs that line up what single random ops rarely do (a buffer
//! dropped under queued work, a foreign buffer dropped in a window, an input of the
//! window's own stream (imported, dynamic or persistent) dropped inside the window, info
//! words recorded in an aborted window and met again, cleanup around a window), and a
//! second device on
//! the same backend value, built, used (capturing too) and dropped at any point.
//! [`check_with`] runs one on a fresh `Device<Faulty<B>>` beside a plain-Rust model that
//! keeps, per byte, its value, "unwritten", "either" (a fault may or may not have
//! claimed it) or "any" (a kernel declared it written and did not write it), and after
//! every op checks what the rules promise:
//!
//! - a read returns exactly the model's bytes, or `Unwritten` where the model allows it,
//!   never other bytes; a launch or replay over an unwritten input is skipped, and its
//!   refusal names it as fields (`Unwritten::by`: the kernel launched, the work, or the
//!   graph replayed, on its stream);
//! - no public call panics;
//! - `captures().recording()` names exactly the windows the model has recording, on each
//!   device;
//! - at the end, after a failure too, a fresh capture works on every stream, after
//!   dropping everything every pool reports nothing in use and no graph lives, imported
//!   caller memory holds exactly the bytes the model predicts, and (where
//!   the backend can count them) the driver holds exactly the pages the live devices
//!   report: a device dropped mid-window gave its pages back once the window closed.
//!
//! [`check_threads`] is the threaded variant: 4 to 8 threads, each on its own logical
//! stream with its own buffers and shared read-only inputs, capturing concurrently on
//! different pooled streams, each checked against its own model, under a watchdog.
//!
//! The model follows the device only where the rules leave the outcome open (an injected
//! fault fired, a call was refused with a typed error), and predicts it everywhere else.

mod drive;
mod forks;
mod kernels;
mod program;
mod reference;
mod runner;
mod span;
mod threads;

pub use drive::{cases_from_env, drive};
pub use kernels::{
    ElsewhereFn, ExternalFn, Extras, ImportFn, Imported, SizedFn, UserFn, WorkFn, WorkOf,
    colliding_word, mock_extras, scalar_of, scalar_param,
};
pub use program::{
    ArgSpec, BodyOp, Form, GRID_MAX, INFO_COUNTS, LATEST, LaunchSpec, MAX_ELEMENTS, MAX_OPS, Op,
    PREVIOUS, Program, SCALAR_SIZES, UpdateSpec, UserKernel, any_launch, launch_spec, op, program,
};
pub use runner::Violation;
pub use threads::{ThreadsProgram, check_threads, threads_program};

use std::sync::Arc;

use capture_core::{Builtins, Chain, Device, DeviceConfig};
use capture_mock::Faulty;

use runner::Run;

fn setup_violation(what: String) -> Violation {
    Violation {
        step: 0,
        op: "setup".to_string(),
        what,
    }
}

/// Runs `program` on a fresh device over the backend `make` builds (wrapped in
/// [`Faulty`], so the program's faults can be injected), checking it against the
/// reference model after every op and at the end, with no user kernels (their launches
/// do nothing) and no count of the driver's pages: [`check_with`] for those.
///
/// # Errors
///
/// The first [`Violation`]: the op, and what the device did that the rules forbid.
pub fn check<B: Builtins + Clone>(
    make: impl Fn() -> B,
    program: &Program,
) -> Result<(), Violation> {
    check_with(make, program, &Extras::none())
}

/// The device a program runs on, and a run of the model beside it.
fn open<B: Builtins>(
    backend: B,
    pooled: usize,
    streams: u8,
    extras: &Extras<B>,
) -> Result<Run<B>, Violation> {
    let config = DeviceConfig::new()
        .streams(pooled)
        .map_err(|e| setup_violation(Chain(&e).to_string()))?;
    let dev = Device::new(Faulty::new(backend), config)
        .map_err(|e| setup_violation(format!("Device::new: {}", Chain(&e))))?;
    // Builtins and user kernels register lazily, at their first launch, as a program's
    // do: after foreign work of new names, other registrations, anything.
    let mut run = Run::new(Arc::new(dev), Vec::new(), streams, pooled, None);
    run.user_kernels(Arc::clone(&extras.user), extras.sized.clone());
    run.foreign(
        extras.work.clone(),
        extras.import.clone(),
        extras.elsewhere.clone(),
    );
    Ok(run)
}

/// As [`check`], with the user kernels and the page count `extras` gives. The program's
/// second device is built on a clone of the first device's backend value: one driver
/// context, one capture domain.
///
/// # Errors
///
/// The first [`Violation`]: the op (on the second device, `OnSecond(..)`), and what the
/// device did that the rules forbid.
pub fn check_with<B: Builtins + Clone>(
    make: impl Fn() -> B,
    program: &Program,
    extras: &Extras<B>,
) -> Result<(), Violation> {
    let pooled = program.pooled.clamp(1, 4);
    let streams = program.streams.clamp(1, 6);
    let backend = make();
    let mut run = open(backend.clone(), pooled, streams, extras)?;
    let mut second: Option<Run<B>> = None;
    for (step, op) in program.ops.iter().enumerate() {
        match op {
            Op::SecondDevice => match second.take() {
                // Dropped at any point: its windows, buffers and graphs with it.
                Some(device) => run.guarded_drop(step, device),
                None => second = Some(open(backend.clone(), pooled, streams, extras)?),
            },
            // Rule 24: a graph of one device replayed on the other is refused.
            Op::ReplayElsewhere { graph } => {
                if let Some(other) = second.as_ref() {
                    run.replay_elsewhere(*graph, &other.dev);
                }
            }
            Op::OnSecond(op) => {
                if let (Some(other), Op::ReplayElsewhere { graph }) = (second.as_mut(), &**op) {
                    other.replay_elsewhere(*graph, &run.dev);
                    if let Some(mut v) = other.violation.take() {
                        v.op = format!("OnSecond({})", v.op);
                        return Err(v);
                    }
                } else if let Some(other) = second.as_mut() {
                    other.elsewhere = run.records();
                    other.op(step, op);
                    if let Some(mut v) = other.violation.take() {
                        v.op = format!("OnSecond({})", v.op);
                        return Err(v);
                    }
                }
            }
            op => {
                run.elsewhere = second.as_ref().is_some_and(Run::records);
                run.op(step, op);
            }
        }
        if let Some(v) = run.violation.take() {
            return Err(v);
        }
    }
    // Both devices' windows close before either's final checks, so neither sees the
    // other recording.
    run.elsewhere = false;
    run.close_windows();
    if let Some(other) = second.as_mut() {
        other.elsewhere = false;
        other.close_windows();
        other.finish(program.ops.len());
        if let Some(mut v) = other.violation.take() {
            v.op = format!("OnSecond({})", v.op);
            return Err(v);
        }
    }
    run.finish(program.ops.len());
    if let Some(v) = run.violation.take() {
        return Err(v);
    }
    if let Some(count) = extras.live_pages {
        let reported: u64 = std::iter::once(&run)
            .chain(second.as_ref())
            .map(|r| r.dev.memory_report().pages())
            .sum();
        let held = count(&backend) as u64;
        if held != reported {
            return Err(Violation {
                step: program.ops.len(),
                op: "final checks".to_string(),
                what: format!(
                    "the driver holds {held} pages; the live devices report {reported} \
                     (a dropped device's pages were not given back)"
                ),
            });
        }
    }
    Ok(())
}

/// A way to shrink a [`Program`]: which ops (and ops of capture bodies) to leave out,
/// and how many pooled and logical streams to use. It renders as one line
/// (`p=1 s=2 r=0,3 b=5:1`) and parses back, so a shrink can be tried in another process
/// (one whose program aborts it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    /// Pooled streams, when changed.
    pub pooled: Option<usize>,
    /// Logical streams, when changed.
    pub streams: Option<u8>,
    /// Ops left out, by position.
    pub ops: Vec<usize>,
    /// Body ops left out: (op position, body position).
    pub body: Vec<(usize, usize)>,
}

impl Cut {
    /// `program` with this cut applied.
    pub fn apply(&self, program: &Program) -> Program {
        let ops = program
            .ops
            .iter()
            .enumerate()
            .filter(|(i, _)| !self.ops.contains(i))
            .map(|(i, op)| match op {
                Op::Capture {
                    stream,
                    body,
                    stop,
                    pool,
                } => Op::Capture {
                    stream: *stream,
                    stop: *stop,
                    pool: *pool,
                    body: body
                        .iter()
                        .enumerate()
                        .filter(|(j, _)| !self.body.contains(&(i, *j)))
                        .map(|(_, b)| b.clone())
                        .collect(),
                },
                other => other.clone(),
            })
            .collect();
        Program {
            pooled: self.pooled.unwrap_or(program.pooled),
            streams: self.streams.unwrap_or(program.streams),
            ops,
        }
    }

    /// The cut from its one-line rendering.
    pub fn parse(text: &str) -> Option<Cut> {
        let mut cut = Cut::default();
        for field in text.split_whitespace() {
            let (key, value) = field.split_once('=')?;
            match key {
                "p" => cut.pooled = Some(value.parse().ok()?),
                "s" => cut.streams = Some(value.parse().ok()?),
                "r" => {
                    for v in value.split(',').filter(|v| !v.is_empty()) {
                        cut.ops.push(v.parse().ok()?);
                    }
                }
                "b" => {
                    for v in value.split(',').filter(|v| !v.is_empty()) {
                        let (i, j) = v.split_once(':')?;
                        cut.body.push((i.parse().ok()?, j.parse().ok()?));
                    }
                }
                _ => return None,
            }
        }
        Some(cut)
    }
}

impl std::fmt::Display for Cut {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let join = |v: Vec<String>| v.join(",");
        if let Some(p) = self.pooled {
            write!(f, "p={p} ")?;
        }
        if let Some(s) = self.streams {
            write!(f, "s={s} ")?;
        }
        write!(
            f,
            "r={} b={}",
            join(self.ops.iter().map(usize::to_string).collect()),
            join(self.body.iter().map(|(i, j)| format!("{i}:{j}")).collect())
        )
    }
}

/// Shrinks `program` greedily while `fails` holds of the cut program: leaves out ops
/// (and ops of capture bodies) one at a time, then tries one pooled stream and two
/// logical streams; returns the smallest cut found. What a survey of violations reports
/// beside proptest's own shrinking.
pub fn minimize_cut(program: &Program, mut fails: impl FnMut(&Cut) -> bool) -> Cut {
    let mut best = Cut::default();
    // Chunks first (halves, quarters, ...), as delta debugging does: most of a long
    // program is irrelevant to its violation.
    let mut chunk = program.ops.len() / 2;
    while chunk > 1 {
        let mut at = 0;
        while at < program.ops.len() {
            let left: Vec<usize> = (at..program.ops.len())
                .filter(|i| !best.ops.contains(i))
                .take(chunk)
                .collect();
            let Some(&last) = left.last() else { break };
            let mut candidate = best.clone();
            candidate.ops.extend(&left);
            if fails(&candidate) {
                best = candidate;
            }
            at = last + 1;
        }
        chunk /= 2;
    }
    loop {
        let mut changed = false;
        for i in 0..program.ops.len() {
            if best.ops.contains(&i) {
                continue;
            }
            let mut candidate = best.clone();
            candidate.ops.push(i);
            if fails(&candidate) {
                best = candidate;
                changed = true;
                continue;
            }
            if let Op::Capture { body, .. } = &program.ops[i] {
                for j in 0..body.len() {
                    let left = (0..body.len())
                        .filter(|k| !best.body.contains(&(i, *k)))
                        .count();
                    if left <= 1 || best.body.contains(&(i, j)) {
                        continue;
                    }
                    let mut candidate = best.clone();
                    candidate.body.push((i, j));
                    if fails(&candidate) {
                        best = candidate;
                        changed = true;
                    }
                }
            }
        }
        for (pooled, streams) in [(Some(1), best.streams), (best.pooled, Some(2))] {
            if (pooled, streams) != (best.pooled, best.streams) {
                let candidate = Cut {
                    pooled,
                    streams,
                    ..best.clone()
                };
                if fails(&candidate) {
                    best = candidate;
                    changed = true;
                }
            }
        }
        if !changed {
            return best;
        }
    }
}

/// [`minimize_cut`] in one process: the smallest program found for which `fails` holds.
pub fn minimize(program: &Program, fails: impl Fn(&Program) -> bool) -> Program {
    minimize_cut(program, |cut| fails(&cut.apply(program))).apply(program)
}
