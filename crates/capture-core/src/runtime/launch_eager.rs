//! The eager half of a launch: the work runs now. A claimed input skips it (rule 14's
//! eager twin), its outputs are claimed as unfinished while it is enqueued and settled
//! once it is (rules 12–13), other streams' uses of its buffers come first on the
//! device (rule 18), and what it used is held until a fence after it (rule 19).

use super::buffer::Arg;
use super::inner::Inner;
use super::launch::Job;
use super::launch_path::Remotes;
use super::pooled::PooledStream;
use super::scratch::LaunchScratch;
use crate::driver::{Backend, DeviceResource};
use crate::drop_queue::Pending;
use crate::error::ServerError;
use crate::ids::StreamId;
use crate::op::ReadBy;
use crate::trace::Event;

impl<B: Backend> Inner<B> {
    /// Runs `job` over the arguments `s` resolved, on `ps` outside any window.
    ///
    /// # Errors
    ///
    /// [`ServerError::Unwritten`] when an input is claimed (the launch is skipped, its
    /// outputs claimed with the input's failure); the load's, the ordering's, the info
    /// upload's or the driver's error otherwise, with the outputs claimed by it.
    pub(super) fn launch_eager(
        &self,
        ps: &mut PooledStream<B>,
        s: &mut LaunchScratch<DeviceResource<B::Stream>>,
        stream: StreamId,
        job: Job<'_, B>,
        args: &[Arg],
        remote: Remotes<'_, B::Stream>,
    ) -> Result<(), ServerError> {
        let (loaded, op) = match self.job_code(ps, stream, &job) {
            Ok(code) => code,
            Err(error) => {
                self.claim(&s.outputs, &error);
                return Err(error);
            }
        };
        // One ledger call checks the inputs and opens the outputs' scope.
        let admitted = self
            .taint()
            .admit(op.clone(), stream, &s.inputs, &s.outputs);
        let scope = match admitted {
            Ok(scope) => scope,
            Err(mut error) => {
                if let ServerError::Unwritten(u) = &mut error {
                    self.trace.push(Event::Skip {
                        stream,
                        op: op.clone(),
                        failure: u.failure,
                    });
                    u.by = Some(ReadBy {
                        op,
                        stream,
                        recorded: false,
                    });
                }
                return Err(error);
            }
        };
        // A launch repeating uses its stream stamped since the tracks last changed has
        // its ordering and stamps done already (`use_memo.rs`).
        let repeats = self.memo_covers(ps, &s.inputs, &s.outputs);
        let enqueued = remote
            .and_then(|remote| {
                // Rule 18: after every other stream's use of these buffers, on the device.
                if !repeats {
                    self.order_device(ps, &s.inputs, &s.outputs)?;
                }
                let info = match &job {
                    Job::Kernel { info, .. } => self.info_buffer(ps, stream, info)?,
                    Job::Work { .. } => None,
                };
                self.gather(ps, s, &job, args, remote)?;
                Ok(info)
            })
            .and_then(|info| Self::run_job(ps, s, &job, loaded.as_deref(), info.as_ref(), false));
        if let Err(error) = enqueued {
            self.fail_scope(scope, &s.outputs, &error);
            return Err(error);
        }
        self.taint().settle(scope);
        self.trace.launch(
            stream,
            job.ran(),
            s.args.iter().map(|b| (b.key, b.access)),
            false,
        );
        if !repeats {
            self.used(
                ps,
                &s.inputs,
                &s.outputs,
                args.iter()
                    .filter_map(Arg::as_buffer)
                    .map(|a| &a.buffer.handle),
            );
            ps.memo.note(&s.inputs, &s.outputs);
        }
        if let Job::Work { work, .. } = &job {
            // The device may still run it: what it references waits for a fence.
            ps.drops.push(Pending::other((*work).clone(), 0));
        }
        self.maybe_flush(ps, stream);
        Ok(())
    }
}
