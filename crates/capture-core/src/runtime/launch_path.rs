//! The launch path under its pooled stream's lock: the one resolution both halves share
//! (each buffer argument checked and named once, the buffers of other pooled streams
//! resolved on their own streams, the driver's parameters gathered), then the split
//! into the eager half (`launch_eager`) and the recorded half (`launch_recorded`).

use super::buffer::{Arg, ArgKind};
use super::inner::Inner;
use super::launch::Job;
use super::loop_data::BodyItem;
use super::pooled::PooledStream;
use super::scratch::{BoundArg, LaunchScratch};
use crate::arg_value::ArgValue;
use crate::driver::{Backend, DeviceResource, DeviceStream, LaunchBuffer, LaunchParam};
use crate::error::ServerError;
use crate::ids::StreamId;
use crate::memory::{ClaimKey, MemoryLocation};
use crate::range::ByteRange;
use crate::subject::Subject;
use crate::trace::Ran;

/// A buffer of another pooled stream, resolved there before the launch.
pub(crate) struct Remote<R> {
    pub(crate) arg: usize,
    pub(crate) resource: R,
    pub(crate) location: MemoryLocation,
}

/// What a launch was handed for the buffers of other pooled streams: resolved, or the
/// error resolving them met (reported once the launch knows what it would have run).
pub(crate) type Remotes<'r, S> = Result<&'r [Remote<DeviceResource<S>>], ServerError>;

impl<B: Backend> Inner<B> {
    /// Launches `job` over `args` on `stream`'s pooled stream `ps`: the arguments
    /// resolved once, the neighbour checked, then the eager or the recorded half. The
    /// scratch is taken out of `ps` for the call and put back after it.
    pub(crate) fn launch_on(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        job: Job<'_, B>,
        args: &[Arg],
        remote: Remotes<'_, B::Stream>,
    ) -> Result<(), ServerError> {
        let mut s = ps.scratch.take().unwrap_or_default();
        let launched = self.bind_args(&mut s, args).and_then(|()| {
            self.admit(ps, stream, "launch")?;
            let recording = ps.stream.capturing().is_recording();
            if args.iter().any(|a| a.1.is_some()) || job.grid_slotted() {
                // A refused slot changes nothing: checked before anything is recorded.
                self.check_slots(ps, stream, &job, args, &s.args, recording)?;
            }
            // Rule 30, as refused slots are: before anything is recorded.
            let flag = if args.iter().any(|a| a.2) {
                self.check_stop_flag(ps, stream, &job, args, &s.args, recording)?
            } else {
                None
            };
            if recording {
                let work = match &job {
                    Job::Work { id, .. } => Some(*id),
                    Job::Kernel { .. } => None,
                };
                if let Some(id) = work {
                    self.loop_body(
                        ps,
                        stream,
                        || self.trace.ran_op(Ran::Work(id)),
                        BodyItem::Work,
                    )?;
                }
                self.launch_recorded(ps, &mut s, stream, job, args, remote)?;
                if let Some(id) = work {
                    // Rule 30: a flag named later is refused, naming this work.
                    self.recorded_in_body(ps, || self.trace.ran_op(Ran::Work(id)), BodyItem::Work);
                }
                if let Some(key) = flag {
                    Self::keep_stop_flag(ps, key, args, &s.params);
                }
                Ok(())
            } else {
                self.launch_eager(ps, &mut s, stream, job, args, remote)
            }
        });
        ps.scratch = Some(s);
        launched
    }

    /// The shared resolution: each buffer argument's device, range and binding limits
    /// checked, and its bytes, access and owner named once in `s.args`, its bytes in
    /// `s.inputs` when read and `s.outputs` when written.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidBinding`] for a buffer of another device, a range outside
    /// its buffer, or one the device cannot bind. Nothing has run or been claimed.
    fn bind_args(
        &self,
        s: &mut LaunchScratch<DeviceResource<B::Stream>>,
        args: &[Arg],
    ) -> Result<(), ServerError> {
        s.clear();
        for (i, arg) in args.iter().enumerate() {
            let ArgKind::Buffer(a) = &arg.0 else {
                continue;
            };
            self.check_buffer(&a.buffer)?;
            let range = a.buffer.range(a.offset, a.len)?;
            self.limits.check_binding(
                a.buffer.id(),
                range.start(),
                range.len(),
                a.buffer.size(),
            )?;
            let key = ClaimKey {
                memory: a.buffer.id(),
                range,
            };
            if a.access.reads() {
                s.inputs.push(key);
            }
            if a.access.writes() {
                s.outputs.push(key);
            }
            s.args.push(BoundArg {
                arg: i,
                key,
                access: a.access,
                owner: a.buffer.owner,
                pooled: a.buffer.pooled,
            });
        }
        Self::check_aliases(s, args)
    }

    /// One buffer passed twice: a read beside a write of the same bytes is one
    /// read-write access for every rule (an input checked for claims, an output
    /// claimed, ordered as a write), the in-place form `out = a + b` with `out` being
    /// `a`; two arguments writing common bytes are refused, since the device runs the
    /// two writes in no order.
    fn check_aliases(
        s: &LaunchScratch<DeviceResource<B::Stream>>,
        args: &[Arg],
    ) -> Result<(), ServerError> {
        if s.outputs.len() < 2 {
            return Ok(());
        }
        let writes = || s.args.iter().filter(|b| b.access.writes());
        for (n, a) in writes().enumerate() {
            for b in writes().skip(n + 1) {
                if a.key.memory != b.key.memory {
                    continue;
                }
                if let Some(common) = a.key.range.intersection(b.key.range) {
                    let size = args[a.arg].buffer().map_or(common.end(), |buf| buf.size());
                    return Err(ServerError::invalid_value_of(
                        "aliased arguments",
                        ArgValue::Arguments(a.arg, b.arg),
                        Subject::bytes(a.key.memory, common.start(), common.len(), size),
                        "both write these bytes, which the device writes in no order: pass \
                         them once (a buffer read and written in place is one read-write \
                         argument, or a read beside a write)",
                    ));
                }
            }
        }
        Ok(())
    }

    /// Gathers the driver's view of the launch into `s.params` (a kernel's buffers and
    /// scalars, in argument order) or `s.buffers` (the user's work's buffers): each
    /// buffer's resource, from `remote` for another pooled stream's (rule 7: a recording
    /// pins it for the graph's life), from this stream's memory otherwise; a recording
    /// notes each page it touches.
    pub(super) fn gather(
        &self,
        ps: &mut PooledStream<B>,
        s: &mut LaunchScratch<DeviceResource<B::Stream>>,
        job: &Job<'_, B>,
        args: &[Arg],
        remote: &[Remote<DeviceResource<B::Stream>>],
    ) -> Result<(), ServerError> {
        let kernel = matches!(job, Job::Kernel { .. });
        let recording = ps.stream.capturing().is_recording();
        let mut bound = s.args.iter();
        for arg in args {
            let a = match &arg.0 {
                ArgKind::Scalar(v) => {
                    if kernel {
                        s.params.push(LaunchParam::Scalar(*v));
                    }
                    continue;
                }
                ArgKind::Buffer(a) => a,
            };
            let Some(b) = bound.next() else {
                continue;
            };
            let here = b.pooled == ps.index;
            let (location, resource) = match remote.iter().find(|r| r.arg == b.arg) {
                Some(r) if !here => {
                    if recording {
                        ps.stream.capturing().pin_foreign(a.buffer.handle.binding());
                    }
                    (r.location, r.resource.clone())
                }
                _ => ps.stream.device_memory().bind_resource(b.key)?,
            };
            if recording {
                ps.stream.capturing().touch(b.owner, location);
            }
            let buffer = LaunchBuffer {
                resource,
                access: b.access,
            };
            if kernel {
                s.params.push(LaunchParam::Buffer(buffer));
            } else {
                s.buffers.push(buffer);
            }
        }
        Ok(())
    }

    /// Hands `job` to the backend, its parameters gathered in `s`: the kernel (loaded by
    /// [`job_code`](Self::job_code)) with its info buffer (`updatable`: a recorded launch
    /// naming a slot, rule 26), or the user's work.
    pub(super) fn run_job(
        ps: &mut PooledStream<B>,
        s: &LaunchScratch<DeviceResource<B::Stream>>,
        job: &Job<'_, B>,
        kernel: Option<&B::Kernel>,
        info: Option<&DeviceResource<B::Stream>>,
        updatable: bool,
    ) -> Result<(), ServerError> {
        let launch = if updatable {
            B::launch_updatable
        } else {
            B::launch
        };
        let lane = ps.lane();
        match job {
            Job::Kernel { dims, .. } => launch(
                &mut ps.stream,
                lane,
                kernel.expect("a kernel job has its kernel"),
                dims,
                &s.params,
                info,
            ),
            Job::Work { work, .. } => B::run_work(&mut ps.stream, lane, work, &s.buffers),
        }
    }

    /// Resolves the buffers of other pooled streams on their own streams. Their order
    /// is kept by the launch's stream, on the device (rule 18).
    pub(crate) fn resolve_remote(
        &self,
        index: usize,
        args: &[Arg],
    ) -> Result<Vec<Remote<DeviceResource<B::Stream>>>, ServerError> {
        let mut remote = Vec::new();
        let mut others: Vec<usize> = args
            .iter()
            .filter_map(Arg::as_buffer)
            .map(|a| a.buffer.pooled)
            .filter(|&p| p != index)
            .collect();
        others.sort_unstable();
        others.dedup();
        for other in others {
            let wanted: Vec<(usize, ClaimKey)> = args
                .iter()
                .enumerate()
                .filter_map(|(i, a)| a.as_buffer().map(|a| (i, a)))
                .filter(|(_, a)| a.buffer.pooled == other)
                .map(|(i, a)| {
                    // A range the launch refuses is refused under the launch's lock;
                    // here it only must not stop the others resolving.
                    let range = a
                        .buffer
                        .range(a.offset, a.len)
                        .unwrap_or(ByteRange::from_bounds(0, 1));
                    (
                        i,
                        ClaimKey {
                            memory: a.buffer.id(),
                            range,
                        },
                    )
                })
                .collect();
            let resolved = self.cells[other].run(move |ps| {
                let mut out = Vec::with_capacity(wanted.len());
                for (arg, key) in wanted {
                    let location = ps.stream.device_memory().location(key.memory)?;
                    let resource = ps.stream.device_memory().resource(key)?;
                    out.push(Remote {
                        arg,
                        resource,
                        location,
                    });
                }
                Ok::<_, ServerError>(out)
            })?;
            remote.extend(resolved);
        }
        Ok(remote)
    }
}
