//! The trace: every transition, refusal, taint, pin and release of a device, as events
//! with logical ids only, rendered one event per line.
//!
//! No pointers, native handles, thread ids, times or durations ever enter an event, so
//! a scenario's trace is the same on every backend and every run, and snapshots of it
//! need no filters. Hot-path events (launch, write, replay) allocate nothing beyond the
//! log's own amortised growth: their bindings go to a shared arena and kernel names are
//! interned.
//!
//! Every event is mirrored to `tracing` (target `capture`, the rendered line in field
//! `event`). Outcomes a caller is told about through an error as well (refusals,
//! dooms, windows that sealed nothing, taints, skips, asynchronous faults) are mirrored
//! at `info`, so `info` shows what went wrong without the routine; everything else
//! (transitions, launches, replays, pins, graph drops) at `debug`. `warn` stays for
//! leaks and teardown failures. The notable events (those at `info`, and pins and graph
//! drops) also carry a `kind` field and their logical ids as fields (`stream`, `graph`,
//! `memory`, `op`, `failure`), so a subscriber can place them without parsing the line.
//!
//! A label the user gives a buffer or a graph is an event too; [`Trace::render`] shows
//! it beside the id on every later line (a mirrored `tracing` line shows the bare id).

use std::borrow::Cow;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use crate::error::{ALLOC_ADVICE, Chain, ServerError, Why};
use crate::ids::{FailureId, GraphId, GraphPoolId, MemoryId, StreamId};
pub use crate::ids::{KernelId, WorkId};
use crate::label::RenderLabels;
use crate::lock_order::{Level, Ordered};
use crate::memory::{Access, ClaimKey, PoolName};
use crate::op::Op;
use crate::slot_table::SlotName;
use crate::subject::Subject;

/// What a launch line ran: a registered kernel, or the user's own work.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ran {
    Kernel(KernelId),
    Work(WorkId),
}

/// What a slot update set, as the trace shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum SlotChange {
    /// A scalar's new bytes.
    Scalar(Vec<u8>),
    /// A buffer slot moved from one buffer's bytes to another's.
    Rebind {
        /// The bytes it named.
        from: ClaimKey,
        /// The bytes it names now.
        to: ClaimKey,
    },
    /// A grid slot's new grid.
    Grid([u32; 3]),
}

/// One thing that happened on a device.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Event {
    /// A buffer was allocated.
    Alloc {
        /// The stream that allocated it.
        stream: StreamId,
        /// The new buffer.
        memory: MemoryId,
        /// Its size.
        len: u64,
        /// The pool it came from.
        pool: PoolName,
    },
    /// A host write was enqueued (or recorded).
    Write {
        /// The stream.
        stream: StreamId,
        /// The bytes written.
        key: ClaimKey,
        /// Whether the write went into a recording.
        recorded: bool,
    },
    /// A host read completed.
    Read {
        /// The stream.
        stream: StreamId,
        /// The bytes read.
        key: ClaimKey,
    },
    /// A kernel was loaded.
    Load {
        /// The stream whose driver loaded it.
        stream: StreamId,
        /// The kernel.
        kernel: KernelId,
    },
    /// A kernel launch was enqueued (or recorded).
    Launch {
        /// The stream.
        stream: StreamId,
        /// The kernel.
        kernel: KernelId,
        /// Its bindings, in the trace's arena.
        args: Range<u32>,
        /// Whether the launch went into a recording.
        recorded: bool,
    },
    /// The user's own work ran (or was recorded) over its declared buffers.
    Work {
        /// The stream.
        stream: StreamId,
        /// Its name, interned in the trace.
        work: WorkId,
        /// Its bindings, in the trace's arena.
        args: Range<u32>,
        /// Whether it went into a recording.
        recorded: bool,
    },
    /// A launch or replay was skipped: an input carried a failure, passed on to its
    /// outputs.
    Skip {
        /// The stream.
        stream: StreamId,
        /// What was skipped: a kernel's launch, the program's work, a graph's replay.
        op: Op,
        /// The failure passed on.
        failure: FailureId,
    },
    /// A lifecycle transition.
    Lifecycle {
        /// The stream.
        stream: StreamId,
        /// `prepare`, `begin`, `abort` ...
        what: &'static str,
    },
    /// A window forked a branch (rule 28).
    Fork {
        /// The parent the branch was forked from.
        stream: StreamId,
        /// The branch.
        branch: StreamId,
        /// Its lane in the window's recording.
        lane: u32,
    },
    /// A branch joined back into its parent (rule 28).
    Join {
        /// The parent it joined into.
        stream: StreamId,
        /// The branch.
        branch: StreamId,
        /// Its lane.
        lane: u32,
    },
    /// A window closed into a graph.
    Sealed {
        /// The owner.
        stream: StreamId,
        /// The graph.
        graph: GraphId,
        /// Launches recorded.
        launches: u64,
        /// Host-to-device copies recorded (writes inside the window).
        copies: u64,
    },
    /// A graph pins memory for its life.
    Pin {
        /// The graph.
        graph: GraphId,
        /// Device buffers pinned, in id order.
        device: Vec<MemoryId>,
        /// Host staging buffers pinned, in id order.
        host: Vec<MemoryId>,
        /// Info-cache entries pinned.
        info: usize,
    },
    /// A call was refused; nothing it would have done happened.
    Refused {
        /// The stream.
        stream: StreamId,
        /// The refused call.
        op: &'static str,
        /// The refusal.
        error: ServerError,
    },
    /// A window was doomed: it will not seal.
    Doomed {
        /// The window's owner.
        stream: StreamId,
        /// The operation that doomed it.
        op: Op,
        /// Launches recorded before it.
        launches: u64,
    },
    /// A window closed without a graph.
    NotSealed {
        /// The stream that ended it.
        stream: StreamId,
        /// Why no graph was sealed.
        error: ServerError,
    },
    /// Bytes were claimed with a failure.
    Taint {
        /// The bytes.
        key: ClaimKey,
        /// The failure they carry.
        failure: FailureId,
    },
    /// A graph was replayed.
    Replay {
        /// The stream.
        stream: StreamId,
        /// The graph.
        graph: GraphId,
        /// How many times, in one submission.
        times: u32,
    },
    /// A loop replay of a graph was enqueued (rule 30): up to `max` iterations, ended
    /// on the device by its stop flag.
    Loop {
        /// The stream.
        stream: StreamId,
        /// The graph.
        graph: GraphId,
        /// The most iterations it runs.
        max: u32,
    },
    /// A slot of a sealed graph was updated (rule 26): replays enqueued from here on see
    /// the new value.
    Update {
        /// The stream the graph was captured on.
        stream: StreamId,
        /// The graph.
        graph: GraphId,
        /// The slot.
        slot: SlotName,
        /// What it holds now.
        change: SlotChange,
        /// How many recorded launches it changed.
        launches: usize,
    },
    /// A graph was dropped: its executable and pins wait in the drop queue behind its
    /// last replay.
    DropGraph {
        /// The stream the graph was captured on.
        stream: StreamId,
        /// The graph.
        graph: GraphId,
    },
    /// A graph pool was made (rule 23).
    GraphPool {
        /// The pool.
        pool: GraphPoolId,
        /// Its name.
        label: Arc<str>,
    },
    /// Work of a graph pool's member overwrote bytes of other allocations of the pool:
    /// they are claimed, naming the member and the replay (rule 23).
    Overwritten {
        /// The pool.
        pool: GraphPoolId,
        /// The member; `None` while its capture is open.
        graph: Option<GraphId>,
        /// Which of its replays; `None` for its warmup.
        replay: Option<u64>,
        /// The allocations whose bytes it took.
        memories: Vec<MemoryId>,
    },
    /// The host waited for a stream.
    Sync {
        /// The stream.
        stream: StreamId,
    },
    /// The user labelled a buffer: later lines show the label beside its id.
    LabelBuffer {
        /// The buffer.
        memory: MemoryId,
        /// Its label.
        label: Arc<str>,
    },
    /// The user labelled a graph: later lines show the label beside its id.
    LabelGraph {
        /// The graph.
        graph: GraphId,
        /// Its label.
        label: Arc<str>,
    },
    /// Writes since the stream's last good fence were tainted by an asynchronous error.
    Fault {
        /// The stream.
        stream: StreamId,
        /// The ranges tainted.
        ranges: usize,
        /// The failure.
        failure: FailureId,
    },
}

#[derive(Debug, Default)]
struct Log {
    enabled: bool,
    events: Vec<Event>,
    args: Vec<(ClaimKey, Access)>,
    /// Kernel names, indexed by [`KernelId`] (the registry's numbering).
    kernels: Vec<Cow<'static, str>>,
    /// Work names, indexed by [`WorkId`].
    works: Vec<Cow<'static, str>>,
}

/// A device's event log. Disabled, it records only kernel names (for errors).
#[derive(Debug, Default)]
pub struct Trace {
    log: Mutex<Log>,
    /// Whether it records: fixed when it is made, so a call that records nothing takes
    /// no lock.
    on: bool,
}

impl Trace {
    /// A log that records events when `enabled`.
    pub fn new(enabled: bool) -> Self {
        Self {
            log: Mutex::new(Log {
                enabled,
                ..Log::default()
            }),
            on: enabled,
        }
    }

    fn lock(&self) -> Ordered<'_, Log> {
        Ordered::lock(&self.log, Level::Trace)
    }

    /// Names kernel `id`, which the kernel registry just numbered.
    pub(crate) fn kernel(&self, id: KernelId, name: Cow<'static, str>) {
        let mut log = self.lock();
        let at = id.0 as usize;
        if log.kernels.len() <= at {
            log.kernels.resize(at + 1, Cow::Borrowed("?"));
        }
        log.kernels[at] = name;
    }

    /// The id of work name `name`, interned once: the user's work is named by it,
    /// however many times it runs.
    pub(crate) fn work(&self, name: Cow<'static, str>) -> WorkId {
        let mut log = self.lock();
        if let Some(i) = log.works.iter().rposition(|k| *k == name) {
            return WorkId(i as u32);
        }
        log.works.push(name);
        WorkId((log.works.len() - 1) as u32)
    }

    /// The name of a registered kernel.
    pub fn kernel_name(&self, kernel: KernelId) -> Cow<'static, str> {
        self.lock()
            .kernels
            .get(kernel.0 as usize)
            .cloned()
            .unwrap_or(Cow::Borrowed("?"))
    }

    /// The name of the user's work `work`.
    pub fn work_name(&self, work: WorkId) -> Cow<'static, str> {
        self.lock()
            .works
            .get(work.0 as usize)
            .cloned()
            .unwrap_or(Cow::Borrowed("?"))
    }

    /// What a launch line ran, as an error names it.
    pub(crate) fn ran_op(&self, ran: Ran) -> Op {
        match ran {
            Ran::Kernel(kernel) => Op::Launch {
                kernel,
                name: self.kernel_name(kernel),
            },
            Ran::Work(work) => Op::Work {
                work,
                name: self.work_name(work),
            },
        }
    }

    /// Appends an event (and mirrors it to `tracing`).
    pub(crate) fn push(&self, event: Event) {
        let mut log = self.lock();
        mirror(&log, &event);
        if log.enabled {
            log.events.push(event);
        }
    }

    /// Appends a launch (or the user's work) whose bindings are `args`.
    #[inline]
    pub(crate) fn launch(
        &self,
        stream: StreamId,
        ran: Ran,
        args: impl Iterator<Item = (ClaimKey, Access)>,
        recorded: bool,
    ) {
        if !self.on {
            return;
        }
        let mut log = self.lock();
        let start = log.args.len() as u32;
        log.args.extend(args);
        let end = log.args.len() as u32;
        let event = match ran {
            Ran::Work(work) => Event::Work {
                stream,
                work,
                args: start..end,
                recorded,
            },
            Ran::Kernel(kernel) => Event::Launch {
                stream,
                kernel,
                args: start..end,
                recorded,
            },
        };
        mirror(&log, &event);
        log.events.push(event);
    }

    /// Whether events are being recorded.
    pub fn is_enabled(&self) -> bool {
        self.on
    }

    /// How many events were recorded.
    pub fn len(&self) -> usize {
        self.lock().events.len()
    }

    /// Whether no event was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The log, one event per line, each numbered from 0. A buffer or graph the user
    /// labelled shows its label beside its id from the event that labelled it on; the
    /// text depends on the events alone, so it is the same on every run and backend.
    pub fn render(&self) -> String {
        let log = self.lock();
        let mut out = String::new();
        let mut labels = RenderLabels::default();
        for (i, event) in log.events.iter().enumerate() {
            match event {
                Event::LabelBuffer { memory, label } => labels.memory(*memory, label),
                Event::LabelGraph { graph, label } => labels.graph(*graph, label),
                _ => {}
            }
            let line = Line {
                log: &log,
                event,
                labels: &labels,
            };
            out.push_str(&format!("{i} {line}\n"));
        }
        out
    }

    /// Forgets every event (kernel names are kept).
    pub fn clear(&self) {
        let mut log = self.lock();
        log.events.clear();
        log.args.clear();
    }
}

/// The rendered log ([`Trace::render`]).
impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

/// Mirrors `event` to `tracing`, at the level the module docs give its kind.
fn mirror(log: &Log, event: &Event) {
    let labels = RenderLabels::default();
    let line = Line {
        log,
        event,
        labels: &labels,
    };
    match event {
        Event::Refused { stream, op, .. } => {
            tracing::info!(target: "capture", kind = "refuse", %stream, op, event = %line);
        }
        Event::Doomed { stream, op, .. } => {
            tracing::info!(target: "capture", kind = "doom", %stream, op = %op, event = %line);
        }
        Event::NotSealed { stream, .. } => {
            tracing::info!(target: "capture", kind = "not sealed", %stream, event = %line);
        }
        Event::Taint { key, failure } => {
            tracing::info!(
                target: "capture", kind = "taint", memory = %key.memory, %failure, event = %line
            );
        }
        Event::Skip {
            stream, failure, ..
        } => {
            tracing::info!(target: "capture", kind = "skip", %stream, %failure, event = %line);
        }
        Event::Fault {
            stream, failure, ..
        } => {
            tracing::info!(target: "capture", kind = "fault", %stream, %failure, event = %line);
        }
        Event::Pin { graph, .. } => {
            tracing::debug!(target: "capture", kind = "pin", %graph, event = %line);
        }
        Event::DropGraph { stream, graph } => {
            tracing::debug!(target: "capture", kind = "drop", %stream, %graph, event = %line);
        }
        Event::Update { stream, graph, .. } => {
            tracing::debug!(target: "capture", kind = "update", %stream, %graph, event = %line);
        }
        Event::Overwritten { pool, .. } => {
            tracing::debug!(target: "capture", kind = "overwritten", %pool, event = %line);
        }
        Event::Alloc { .. }
        | Event::GraphPool { .. }
        | Event::Write { .. }
        | Event::Read { .. }
        | Event::Load { .. }
        | Event::Launch { .. }
        | Event::Work { .. }
        | Event::Lifecycle { .. }
        | Event::Fork { .. }
        | Event::Join { .. }
        | Event::Sealed { .. }
        | Event::Replay { .. }
        | Event::Loop { .. }
        | Event::Sync { .. }
        | Event::LabelBuffer { .. }
        | Event::LabelGraph { .. } => tracing::debug!(target: "capture", event = %line),
    }
}

struct Line<'a> {
    log: &'a Log,
    event: &'a Event,
    /// The labels the rendering has seen so far (none when mirrored to `tracing`).
    labels: &'a RenderLabels,
}

impl fmt::Display for Line<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kernel = |k: &KernelId| {
            self.log
                .kernels
                .get(k.0 as usize)
                .map_or("?", |n| n.as_ref())
        };
        let work = |w: &WorkId| self.log.works.get(w.0 as usize).map_or("?", |n| n.as_ref());
        let rec = |r: bool| if r { " (recorded)" } else { "" };
        let l = self.labels;
        match self.event {
            Event::Alloc {
                stream,
                memory,
                len,
                pool,
            } => write!(
                f,
                "{stream} alloc {} len={len} pool={pool}",
                l.of_memory(*memory)
            ),
            Event::Write {
                stream,
                key,
                recorded,
            } => write!(f, "{stream} write {}{}", l.of_key(*key), rec(*recorded)),
            Event::Read { stream, key } => write!(f, "{stream} read {}", l.of_key(*key)),
            Event::Load { stream, kernel: k } => write!(f, "{stream} load {}", kernel(k)),
            Event::Launch { .. } | Event::Work { .. } => {
                let (what, name, stream, args, recorded) = match self.event {
                    Event::Work {
                        stream,
                        work: w,
                        args,
                        recorded,
                    } => ("work", work(w), stream, args, recorded),
                    Event::Launch {
                        stream,
                        kernel: k,
                        args,
                        recorded,
                    } => ("launch", kernel(k), stream, args, recorded),
                    _ => return Ok(()),
                };
                write!(f, "{stream} {what} {name}")?;
                let args = self
                    .log
                    .args
                    .get(args.start as usize..args.end as usize)
                    .unwrap_or(&[]);
                let inputs = args.iter().filter(|(_, a)| a.reads());
                for (i, (key, _)) in inputs.enumerate() {
                    write!(f, "{}{}", if i == 0 { " " } else { ", " }, l.of_key(*key))?;
                }
                let outputs: Vec<_> = args.iter().filter(|(_, a)| a.writes()).collect();
                if !outputs.is_empty() {
                    f.write_str(" ->")?;
                    for (i, (key, _)) in outputs.iter().enumerate() {
                        write!(f, "{}{}", if i == 0 { " " } else { ", " }, l.of_key(*key))?;
                    }
                }
                f.write_str(rec(*recorded))
            }
            Event::Skip {
                stream,
                op,
                failure,
            } => write!(f, "{stream} skip {}: input carries {failure}", l.of_op(op)),
            Event::Lifecycle { stream, what } => write!(f, "{stream} {what}"),
            Event::Fork {
                stream,
                branch,
                lane,
            } => write!(f, "{stream} fork {branch} -> lane#{lane}"),
            Event::Join {
                stream,
                branch,
                lane,
            } => write!(f, "{stream} join {branch} (lane#{lane})"),
            Event::LabelBuffer { memory, label } => write!(f, "label {memory} \"{label}\""),
            Event::LabelGraph { graph, label } => write!(f, "label {graph} \"{label}\""),
            Event::Sealed {
                stream,
                graph,
                launches,
                copies,
            } => {
                write!(
                    f,
                    "{stream} end -> {} ({launches} launches",
                    l.of_graph(*graph)
                )?;
                match copies {
                    0 => {}
                    1 => write!(f, ", 1 copy")?,
                    n => write!(f, ", {n} copies")?,
                }
                write!(f, ")")
            }
            Event::Pin {
                graph,
                device,
                host,
                info,
            } => {
                write!(f, "{} pins", l.of_graph(*graph))?;
                for m in device {
                    write!(f, " {}", l.of_memory(*m))?;
                }
                write!(f, "; staging")?;
                for m in host {
                    write!(f, " {}", l.of_memory(*m))?;
                }
                write!(f, "; info {info}")
            }
            Event::Refused { stream, op, error } => {
                write!(f, "{stream} refuse {op}: ")?;
                refusal(f, *stream, op, &l.error(error))
            }
            Event::Doomed {
                stream,
                op,
                launches,
            } => write!(
                f,
                "{stream} doomed by {} after {launches} recorded launches",
                l.of_op(op)
            ),
            Event::NotSealed { stream, error } => {
                write!(f, "{stream} end -> refused (")?;
                refusal(f, *stream, "end", &l.error(error))?;
                f.write_str(")")
            }
            Event::Taint { key, failure } => write!(f, "taint {} {failure}", l.of_key(*key)),
            Event::Replay {
                stream,
                graph,
                times,
            } => write!(f, "{stream} replay {} x{times}", l.of_graph(*graph)),
            Event::Loop { stream, graph, max } => {
                write!(f, "{stream} loop {} up to x{max}", l.of_graph(*graph))
            }
            Event::DropGraph { stream, graph } => write!(f, "{stream} drop {}", l.of_graph(*graph)),
            Event::Update {
                stream,
                graph,
                slot,
                change,
                launches,
            } => {
                write!(f, "{stream} update {} slot {slot} ", l.of_graph(*graph))?;
                match change {
                    SlotChange::Scalar(bytes) => write!(f, "= {bytes:02x?}")?,
                    SlotChange::Rebind { from, to } => {
                        write!(f, "{} -> {}", l.of_key(*from), l.of_key(*to))?;
                    }
                    SlotChange::Grid(grid) => write!(f, "grid {grid:?}")?,
                }
                write!(f, " ({launches} launches)")
            }
            Event::GraphPool { pool, label } => write!(f, "graph pool {pool} \"{label}\""),
            Event::Overwritten {
                pool,
                graph,
                replay,
                memories,
            } => {
                match (graph, replay) {
                    (Some(g), Some(n)) => write!(f, "{pool}: replay {n} of {}", l.of_graph(*g))?,
                    (Some(g), None) => write!(f, "{pool}: warmup of {}", l.of_graph(*g))?,
                    (None, _) => write!(f, "{pool}: warmup of a capture")?,
                }
                f.write_str(" overwrote")?;
                for m in memories {
                    write!(f, " {}", l.of_memory(*m))?;
                }
                Ok(())
            }
            Event::Sync { stream } => write!(f, "{stream} sync"),
            Event::Fault {
                stream,
                ranges,
                failure,
            } => write!(
                f,
                "{stream} fault: {ranges} ranges written since the last good fence carry {failure}"
            ),
        }
    }
}

/// A refusal on `stream` of `op`, saying what the trace line has not said already: the
/// call and the stream are the line's, so a refusal of that call for that stream gives
/// its reason alone, and a neighbour refusal who holds the window.
fn refusal(
    f: &mut fmt::Formatter<'_>,
    stream: StreamId,
    op: &str,
    error: &ServerError,
) -> fmt::Result {
    match error {
        ServerError::GraphState {
            op: refused,
            subject,
            window,
            reason,
        } if *refused == op && subject.as_ref().is_none_or(|s| s.stream() == Some(stream)) => {
            // The line names its stream first: the refusal's subject is that stream.
            let this = Some(Box::new(Subject::Stream(stream)));
            write!(f, "{}", Why::of(&this, *window, reason))
        }
        ServerError::NeighbourRefused {
            op: refused,
            neighbour,
            owner,
        } if *refused == op && *neighbour == stream => {
            write!(
                f,
                "{owner} holds a capture window on the same pooled stream"
            )
        }
        ServerError::AllocInWindow {
            size,
            pool,
            stream: asked,
            recording,
        } if op == "alloc" && *asked == stream => {
            let this = Some(Box::new(Subject::Stream(stream)));
            let why = Why::of(&this, Some(*recording), "is recording");
            write!(f, "{size} bytes in pool {pool}: {why} ({ALLOC_ADVICE})")
        }
        other => write!(f, "{}", Chain(other)),
    }
}
