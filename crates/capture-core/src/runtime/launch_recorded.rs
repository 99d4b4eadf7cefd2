//! The recorded half of a launch: inside a window nothing runs, so the ledger is left
//! alone. An input's bytes the window did not write first must be readable, or the
//! window is doomed (rule 14); the launch's buffers are recorded for the graph's pins
//! and order (rules 7 and 18, checked at each replay instead), and what the user's work
//! references stays with the graph.

use super::buffer::{Arg, ArgKind};
use super::inner::Inner;
use super::launch::Job;
use super::launch_path::Remotes;
use super::pooled::PooledStream;
use super::scratch::LaunchScratch;
use crate::branch_refusal::BranchRace;
use crate::driver::{Backend, DeviceResource, DeviceStream};
use crate::error::ServerError;
use crate::ids::StreamId;
use crate::memory::{Access, ClaimKey};
use crate::op::{Op, ReadBy};
use crate::slot_table::SlotName;

impl<B: Backend> Inner<B> {
    /// Checks an operation about to be recorded on the current lane of `ps`'s window
    /// against what its unjoined siblings recorded (rule 29), and notes its uses.
    pub(crate) fn check_race(
        &self,
        ps: &mut PooledStream<B>,
        stream: StreamId,
        op: Op,
        uses: impl Iterator<Item = (ClaimKey, Access, Option<SlotName>)> + Clone,
    ) -> Result<(), ServerError> {
        let capture = ps.stream.capturing();
        let node = capture.ops();
        let window = capture.owner().unwrap_or(stream);
        match capture.lanes().check(uses, stream, op, node) {
            Ok(()) => Ok(()),
            Err(race) => Err(BranchRace {
                window,
                first: race.0.first,
                second: race.1,
                memory: race.0.key.memory,
                label: None,
                range: race.0.key.range,
            }
            .into()),
        }
    }

    /// Records `job` over the arguments `s` resolved into `ps`'s open window.
    ///
    /// # Errors
    ///
    /// Every failure dooms the window (rule 11; the caller claims the outputs): an
    /// input the window cannot read ([`ServerError::Unwritten`]), a first load, the
    /// info upload's or the driver's error.
    pub(super) fn launch_recorded(
        &self,
        ps: &mut PooledStream<B>,
        s: &mut LaunchScratch<DeviceResource<B::Stream>>,
        stream: StreamId,
        job: Job<'_, B>,
        args: &[Arg],
        remote: Remotes<'_, B::Stream>,
    ) -> Result<(), ServerError> {
        let result = self.record_job(ps, s, stream, &job, args, remote);
        if let Err(error) = result {
            // Rule 11: whatever failed inside the window dooms it (a doomed window
            // keeps its first failure). The launch's outputs are claimed too: the
            // window's recording never names a launch that failed.
            self.claim(&s.outputs, &error);
            if matches!(error, ServerError::Doomed(_)) {
                return Err(error);
            }
            let op = self.trace.ran_op(job.ran());
            return Err(self.doom(ps, stream, op, error));
        }
        Ok(())
    }

    fn record_job(
        &self,
        ps: &mut PooledStream<B>,
        s: &mut LaunchScratch<DeviceResource<B::Stream>>,
        stream: StreamId,
        job: &Job<'_, B>,
        args: &[Arg],
        remote: Remotes<'_, B::Stream>,
    ) -> Result<(), ServerError> {
        let (loaded, op) = self.job_code(ps, stream, job)?;
        // The bytes of an input the window did not write itself must be readable; bytes
        // it wrote first are rewritten by every replay before the read.
        for i in 0..s.inputs.len() {
            s.unwritten.clear();
            ps.stream
                .capturing()
                .unwritten_parts(s.inputs[i], &mut s.unwritten);
            for &part in &s.unwritten {
                if let Err(mut error) = self.taint().check_read(part) {
                    if let ServerError::Unwritten(u) = &mut error {
                        u.by = Some(ReadBy {
                            op: op.clone(),
                            stream,
                            recorded: true,
                        });
                    }
                    return Err(self.doom(ps, stream, op, error));
                }
            }
        }
        let remote = remote?;
        let info = match job {
            Job::Kernel { info, .. } => self.info_buffer(ps, stream, info)?,
            Job::Work { .. } => None,
        };
        self.gather(ps, s, job, args, remote)?;
        // Rule 29: nothing on an unjoined branch touches bytes a sibling writes, or
        // writes bytes a sibling touches.
        if let Err(error) = self.check_race(
            ps,
            stream,
            op.clone(),
            s.args.iter().map(|b| (b.key, b.access, args[b.arg].1)),
        ) {
            return Err(self.doom(ps, stream, op, error));
        }
        let slotted = args.iter().any(|a| a.1.is_some()) || job.grid_slotted();
        if let Err(error) = Self::run_job(ps, s, job, loaded.as_deref(), info.as_ref(), slotted) {
            return Err(self.doom(ps, stream, op, error));
        }
        self.trace.launch(
            stream,
            job.ran(),
            s.args.iter().map(|b| (b.key, b.access)),
            true,
        );
        if let Job::Work { work, .. } = job
            && !B::EXECUTABLE_HOLDS_WORK
        {
            // What the work references stays with the graph (rule 7's twin for the
            // user's objects), unless its executable holds it.
            ps.stream.capturing().keep(Box::new((*work).clone()));
        }
        // The recording keeps each buffer's binding: its memory's pin, its bytes, its
        // access, for the graph's pins and each replay's order.
        let buffers = args.iter().filter_map(|arg| match &arg.0 {
            ArgKind::Buffer(a) => Some(a),
            ArgKind::Scalar(_) => None,
        });
        let node = ps.stream.capturing().launches();
        let bindings = buffers.zip(&s.args).map(|(a, b)| {
            let slot = args[b.arg].1;
            (a.buffer.binding(b.key.range, b.access), slot)
        });
        ps.stream.capturing().record_slotted(bindings);
        if slotted && let (Job::Kernel { dims, .. }, Some(kernel)) = (job, &loaded) {
            // Rule 26: what the backend is given again when one of its slots changes.
            Self::note_slots(ps, s, node, kernel, dims, args, info.as_ref());
        }
        Ok(())
    }
}
