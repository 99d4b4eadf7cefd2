//! Loop replays (rule 30), the runtime's half: the stop flag a window names (checked as
//! each launch naming it is recorded, before anything is recorded), what a loop body may
//! not hold (checked as each copy or work is recorded, in either order), the flag a
//! sealed graph keeps (`loop_data.rs`), and the loop replay itself, ordered, pinned and
//! claimed as any replay is, with the iteration counter the library keeps as one more
//! output. The user's call, `Device::replay_until`, sits beside `replay` in
//! `lifecycle.rs`.

use super::buffer::{Arg, ArgKind, Buffer};
use super::inner::Inner;
use super::launch::Job;
use super::loop_data::{BodyItem, StopFlag};
use super::pooled::PooledStream;
use super::scratch::BoundArg;
use crate::driver::{Backend, DeviceResource, DeviceStream, GraphDriver, LaunchParam};
use crate::error::ServerError;
use crate::ids::{GraphId, StreamId};
use crate::memory::ClaimKey;
use crate::op::Op;
use crate::stop_flag::{DeviceLoops, LoopMismatch, LoopRefused, STOP_FLAG_BYTES};
use crate::subject::Subject;
use crate::trace::Event;

pub(crate) fn refused(subject: Subject, mismatch: LoopMismatch) -> ServerError {
    LoopRefused { subject, mismatch }.into()
}

impl<B: Backend> Inner<B> {
    /// Checks the stop flag a launch (or work) names, before anything is recorded: a
    /// refused flag changes nothing and does not doom the window. Work naming a flag is
    /// refused in every mode; outside a window a flag does nothing. Returns the flag's
    /// bytes when the launch, recorded, names the window's flag.
    pub(super) fn check_stop_flag(
        &self,
        ps: &PooledStream<B>,
        stream: StreamId,
        job: &Job<'_, B>,
        args: &[Arg],
        bound: &[BoundArg],
        recording: bool,
    ) -> Result<Option<ClaimKey>, ServerError> {
        let subject = || Subject::Stream(stream);
        if matches!(job, Job::Work { .. }) {
            return Err(refused(subject(), LoopMismatch::Work));
        }
        if !recording {
            return Ok(None);
        }
        let mut named: Option<ClaimKey> = None;
        for (i, arg) in args.iter().enumerate().filter(|(_, a)| a.2) {
            let ArgKind::Buffer(a) = &arg.0 else {
                return Err(refused(subject(), LoopMismatch::NotWritten));
            };
            if !a.access.writes() {
                return Err(refused(subject(), LoopMismatch::NotWritten));
            }
            if arg.1.is_some() {
                return Err(refused(subject(), LoopMismatch::Slotted));
            }
            let key = bound
                .iter()
                .find(|b| b.arg == i)
                .map(|b| b.key)
                .expect("every buffer argument is bound");
            if key.range.len() != STOP_FLAG_BYTES {
                return Err(refused(
                    subject(),
                    LoopMismatch::Size {
                        bytes: key.range.len(),
                    },
                ));
            }
            match named {
                Some(first) if first != key => {
                    return Err(refused(
                        subject(),
                        LoopMismatch::Second {
                            memory: first.memory,
                            range: first.range,
                        },
                    ));
                }
                _ => named = Some(key),
            }
        }
        let Some(key) = named else {
            return Ok(None);
        };
        if let DeviceLoops::Unsupported(why) = self.limits.loops() {
            return Err(refused(subject(), LoopMismatch::Unsupported(why)));
        }
        let window = ps.graphs.window_loop();
        if let Some(first) = &window.flag
            && first.key != key
        {
            return Err(refused(
                subject(),
                LoopMismatch::Second {
                    memory: first.key.memory,
                    range: first.key.range,
                },
            ));
        }
        if let Some((op, reason)) = &window.blocker {
            return Err(refused(
                subject(),
                LoopMismatch::Body {
                    op: op.clone(),
                    reason,
                },
            ));
        }
        Ok(Some(key))
    }

    /// Keeps the stop flag a recorded launch named: `params` are the launch's, in
    /// argument order, as the backend was given them.
    pub(super) fn keep_stop_flag(
        ps: &mut PooledStream<B>,
        key: ClaimKey,
        args: &[Arg],
        params: &[LaunchParam<DeviceResource<B::Stream>>],
    ) {
        if ps.graphs.window_loop().flag.is_some() {
            return;
        }
        let at = args
            .iter()
            .position(|a| a.2)
            .expect("the launch names a flag");
        if let Some(LaunchParam::Buffer(b)) = params.get(at) {
            ps.graphs.window_loop_mut().flag = Some(StopFlag {
                key,
                resource: b.resource.clone(),
            });
        }
    }

    /// Why the device cannot put `item` in a loop body, where it cannot.
    fn unloopable(&self, item: BodyItem) -> Option<&'static str> {
        match self.limits.loops() {
            DeviceLoops::Supported { copies, work } => match item {
                BodyItem::Copy => copies,
                BodyItem::Work => work,
            },
            DeviceLoops::Unsupported(_) => None,
        }
    }

    /// Checks a copy or work about to be recorded in `ps`'s window against rule 30:
    /// refused, changing nothing, where the window named a stop flag and the device
    /// cannot put it in a loop body.
    pub(crate) fn loop_body(
        &self,
        ps: &PooledStream<B>,
        stream: StreamId,
        op: impl FnOnce() -> Op,
        item: BodyItem,
    ) -> Result<(), ServerError> {
        match self.unloopable(item) {
            Some(reason) if ps.graphs.window_loop().flag.is_some() => Err(refused(
                Subject::Stream(stream),
                LoopMismatch::Body { op: op(), reason },
            )),
            _ => Ok(()),
        }
    }

    /// Notes a copy or work `ps`'s window recorded (once it is recorded) that the device
    /// cannot put in a loop body, so a flag named later is refused naming it.
    pub(crate) fn recorded_in_body(
        &self,
        ps: &mut PooledStream<B>,
        op: impl FnOnce() -> Op,
        item: BodyItem,
    ) {
        if let Some(reason) = self.unloopable(item) {
            let blocker = &mut ps.graphs.window_loop_mut().blocker;
            blocker.get_or_insert_with(|| (op(), reason));
        }
    }

    /// Enqueues a loop replay of `graph` on `stream` (rule 30); the graph's counter.
    pub(crate) fn replay_loop_on(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        graph: GraphId,
        max: u32,
    ) -> Result<Buffer, ServerError> {
        if let DeviceLoops::Unsupported(why) = self.limits.loops() {
            return Err(refused(
                Subject::graph(graph),
                LoopMismatch::Unsupported(why),
            ));
        }
        self.replayable(ps, stream, graph)?;
        let Some(graph_loop) = ps.graphs.graph_loop(graph) else {
            return Err(refused(Subject::graph(graph), LoopMismatch::NoFlag));
        };
        // The counter the library keeps: made at the graph's first loop replay, on the
        // graph's stream, and the graph's for its life.
        let counter = match graph_loop.counter.clone() {
            Some(c) => c,
            None => {
                let c = self.alloc_on(ps, stream, STOP_FLAG_BYTES)?;
                let graph_loop = ps.graphs.graph_loop_mut(graph).expect("checked");
                graph_loop.counter = Some(c.clone());
                c
            }
        };
        let counter_key = ClaimKey {
            memory: counter.id(),
            range: crate::range::ByteRange::new(0, STOP_FLAG_BYTES).expect("4 bytes"),
        };
        let g = ps.graphs.get(graph).expect("replayable looked it up");
        let op = Op::replay(graph);
        // Rule 14: inputs first; a claimed one skips the loop and passes it on, to the
        // counter too.
        let skipped = self.taint().propagate(
            op.clone(),
            stream,
            g.inputs().iter().copied(),
            g.written()
                .iter()
                .copied()
                .chain(std::iter::once(counter_key)),
        );
        if let Err(error) = skipped {
            return Err(self.skipped_replay(stream, op, error));
        }
        let inputs: Vec<ClaimKey> = g.inputs().to_vec();
        let mut written: Vec<ClaimKey> = g.written().to_vec();
        written.push(counter_key);
        let scope = self.taint().enter(op, written.iter().copied())?;
        // Rule 23: a pool member's loop writes over the other members' bytes it shares,
        // as a replay does.
        let own = written.len();
        let mut taken = Vec::new();
        self.replay_takes(ps, graph, &mut taken);
        written.extend_from_slice(&taken);
        // Rule 18, and rule 30's fence: the loop follows every other stream's use of
        // what it touches, and what follows it waits for the whole loop, as the order
        // tracks stamp its writes at its own enqueue.
        let enqueued = self.order_device(ps, &inputs, &written).and_then(|()| {
            let (_, counter_resource) = ps.stream.device_memory().bind_resource(counter_key)?;
            let g = ps
                .graphs
                .get(graph)
                .ok_or(ServerError::UnknownGraph(graph))?;
            let flag = &ps.graphs.graph_loop(graph).expect("checked").flag.resource;
            <B as GraphDriver>::replay_loop(
                &mut ps.stream,
                g.executable(),
                max,
                flag,
                &counter_resource,
            )
        });
        match enqueued {
            Ok(()) => {
                self.taint().settle(scope);
                self.used(ps, &inputs, &written, [&counter.handle]);
                // Each iteration may overwrite what the other members placed: counted
                // as `max` replays, the most it runs.
                self.replayed_over(ps, stream, graph, max, &mut taken);
                self.trace.push(Event::Loop { stream, graph, max });
                self.maybe_flush(ps, stream);
                Ok(counter)
            }
            Err(error) => {
                self.refused(stream, "replay", &error);
                self.fail_scope(scope, &written[..own], &error);
                Err(error)
            }
        }
    }
}
