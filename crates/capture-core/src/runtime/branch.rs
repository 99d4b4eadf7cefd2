//! Fork and join (rule 28): [`Device::fork`] makes another pooled stream a branch of the
//! window its parent records in, and [`Device::join`] orders what the parent does next
//! after everything the branch did. Between the two, the branch's work goes into the
//! window on a lane of its own, checked against its siblings for races (rule 29).

use super::device::Device;
use super::inner::Inner;
use super::pooled::PooledStream;
use crate::branch_refusal::{BranchReason, BranchRefused};
use crate::capture::Lane;
use crate::driver::{Backend, DeviceStream};
use crate::error::ServerError;
use crate::ids::StreamId;
use crate::op::Op;
use crate::trace::Event;

use super::branch_table::BranchEntry;

/// A stream forked off another by [`Device::fork`]: what [`Device::join`] consumes to
/// order the parent's later work after the branch's. A window whose branch is never
/// joined is doomed when it ends, naming the branch (rule 28).
#[must_use = "a branch is joined with `Device::join` before its window ends, or the window is doomed"]
#[derive(Debug)]
pub struct Branch {
    device: u64,
    parent: StreamId,
    stream: StreamId,
    window: Option<Forked>,
}

/// Where a branch forked inside a window lives.
#[derive(Clone, Copy, Debug)]
struct Forked {
    origin: StreamId,
    pooled: usize,
    phase: u64,
    lane: Lane,
}

impl Branch {
    /// The stream that was forked.
    pub fn stream(&self) -> StreamId {
        self.stream
    }

    /// The stream it was forked from, which it joins back into.
    pub fn parent(&self) -> StreamId {
        self.parent
    }

    /// The origin of the window it is a branch of; `None` for a fork outside any
    /// window (where the cross-stream order of rule 18 already orders every buffer's
    /// uses, and the join has nothing to add).
    pub fn window(&self) -> Option<StreamId> {
        self.window.map(|w| w.origin)
    }

    /// Its lane in the window's recording.
    pub fn lane(&self) -> Option<Lane> {
        self.window.map(|w| w.lane)
    }
}

impl<B: Backend> Device<B> {
    /// Makes `branch` a branch of the window `parent` records in (its origin, or an
    /// unjoined branch of it), from this point on (rule 28). Its work then goes into
    /// the window on a lane of its own, which may run beside the parent's until
    /// [`join`](Self::join); two unjoined branches that touch the same bytes, one
    /// writing, are refused when the second is recorded (rule 29). Until the window
    /// ends the branch belongs to it: the other streams of its pooled stream are refused
    /// as neighbours (rule 13), and it opens, ends or replays no window of its own.
    ///
    /// ```
    /// # use capture_graphs::{Arg, Builtin, Device, DeviceConfig, StreamId};
    /// # use capture_graphs::mock::MockBackend;
    /// # let dev = Device::new(MockBackend::new(), DeviceConfig::new())?;
    /// let (s, side) = (StreamId::new(0), StreamId::new(1));
    /// let (a, b) = (dev.alloc(s, 16)?, dev.alloc(s, 16)?);
    /// let fill = dev.builtin(Builtin::Fill);
    /// let graph = dev.capture(s, |d| {
    ///     let branch = d.fork(s, side)?;
    ///     d.launch(side, &fill, [1, 1, 1], &[Arg::write(&a)], &Builtin::Fill.info(4, 1.0))?;
    ///     d.launch(s, &fill, [1, 1, 1], &[Arg::write(&b)], &Builtin::Fill.info(4, 2.0))?;
    ///     d.join(branch)
    /// })?;
    /// dev.replay(s, &graph, 1)?;
    /// assert_eq!(dev.read_values::<f32>(s, &a)?, [1.0; 4]);
    /// assert_eq!(dev.read_values::<f32>(s, &b)?, [2.0; 4]);
    /// # Ok::<(), capture_graphs::ServerError>(())
    /// ```
    ///
    /// Outside any window the token only checks the two streams: the cross-stream order
    /// (rule 18) orders every buffer's uses already.
    ///
    /// # Errors
    ///
    /// [`ServerError::BranchRefused`] naming both streams and why: `branch` shares a
    /// pooled stream with the window, has a window of its own, is a branch of another
    /// window or already of this one, the window holds
    /// [`MAX_WINDOW_LANES`](crate::MAX_WINDOW_LANES) lanes; rule 22's and 13's refusals
    /// for a `parent` outside this thread's closure or a neighbour. Nothing is changed.
    /// The driver's refusal to fork a recording dooms the window.
    pub fn fork(&self, parent: StreamId, branch: StreamId) -> Result<Branch, ServerError> {
        let forked = self.inner.fork(parent, branch);
        self.inner.labels.named(forked)
    }

    /// Joins `branch` into the stream it was forked from: what that stream records from
    /// here on follows everything the branch recorded, and the branch records nothing
    /// more in this window (rule 28).
    ///
    /// # Errors
    ///
    /// [`ServerError::BranchRefused`]: a token of another device, or of another window
    /// or phase (each of a capture's two calls forks its own); a parent joined already,
    /// which dooms the window (the branch can never be joined now). The driver's refusal
    /// dooms the window.
    pub fn join(&self, branch: Branch) -> Result<(), ServerError> {
        let joined = self.inner.join(branch);
        self.inner.labels.named(joined)
    }
}

impl<B: Backend> Inner<B> {
    /// A refused fork or join of `branch` off `parent`, traced on `parent`.
    fn refuse_branch(
        &self,
        op: &'static str,
        parent: StreamId,
        branch: StreamId,
        reason: BranchReason,
    ) -> ServerError {
        let error: ServerError = BranchRefused {
            op,
            branch,
            parent,
            reason,
        }
        .into();
        self.refused(parent, op, &error);
        error
    }

    /// Forks `branch` off `parent` in four steps: the parent admitted and its window
    /// read ([`fork_window`](Self::fork_window)); the refusals that need no
    /// reservation; the branch and its home reserved in the branch table
    /// ([`reserve_branch`](Self::reserve_branch)); the lane opened in the window
    /// ([`open_lane`](Self::open_lane)), the reservation given back if it was not.
    fn fork(&self, parent: StreamId, branch: StreamId) -> Result<Branch, ServerError> {
        self.closure_check(parent, "fork")?;
        let refuse = |reason| self.refuse_branch("fork", parent, branch, reason);
        let p = self.pooled(parent);
        let home = self.home(branch);
        let window = self.fork_window(p, parent)?;
        let token = |window| Branch {
            device: self.serial,
            parent,
            stream: branch,
            window,
        };
        let origin = window.map_or(parent, |(o, _)| o);
        if home == p {
            return Err(refuse(BranchReason::SamePooledStream { origin }));
        }
        let existing = self.entry(branch);
        if let Some(r) = existing
            && (window.is_none() || r.origin != origin || r.pooled != p)
        {
            return Err(refuse(BranchReason::Lent { origin: r.origin }));
        }
        let Some((origin, phase)) = window else {
            // Outside any window: the branch is checked, nothing else.
            return match self.window_owner(home) {
                Some(owner) => Err(refuse(BranchReason::HasWindow { owner })),
                None => Ok(token(None)),
            };
        };
        let entry = BranchEntry {
            branch,
            origin,
            pooled: p,
            home,
        };
        if existing.is_none() {
            self.reserve_branch(entry).map_err(refuse)?;
        }
        match self.open_lane(entry, parent, phase) {
            Ok(lane) => Ok(token(Some(Forked {
                origin,
                pooled: p,
                phase,
                lane,
            }))),
            Err((reason, doomed)) => {
                if existing.is_none() {
                    self.cells[p].run(|ps| self.unreserve_unless_forked(ps, entry));
                }
                Err(doomed.unwrap_or_else(|| refuse(reason)))
            }
        }
    }

    /// Admits `parent`'s fork on its pooled stream `p` (rules 13 and 28) and reads the
    /// window recording there: its origin and phase, or none.
    fn fork_window(
        &self,
        p: usize,
        parent: StreamId,
    ) -> Result<Option<(StreamId, u64)>, ServerError> {
        self.cells[p].run(|ps| {
            self.admit(ps, parent, "fork")?;
            let capture = ps.stream.capturing();
            Ok(capture.owner().map(|o| (o, capture.phase())))
        })
    }

    /// The stream whose window pooled stream `q` holds, if any.
    fn window_owner(&self, q: usize) -> Option<StreamId> {
        self.cells[q].run(|ps| ps.stream.capturing().owner())
    }

    /// Reserves `entry`'s branch and home for its window: refused when either is lent
    /// to another window, or when a window opened on the home (checked after the
    /// reservation, so none opens there meanwhile; the reservation is then given back).
    fn reserve_branch(&self, entry: BranchEntry) -> Result<(), BranchReason> {
        if let Err(holder) = self.branches.add(entry) {
            return Err(BranchReason::Lent { origin: holder });
        }
        if let Some(owner) = self.window_owner(entry.home) {
            self.unreserve(entry);
            return Err(BranchReason::HasWindow { owner });
        }
        Ok(())
    }

    /// Opens the branch's lane in its window, still phase `phase` of `entry.origin`'s:
    /// the window's clocks forked off `parent`'s lane, the backend told while it
    /// records, the fork traced. Why not otherwise, with the error of a window the
    /// driver's refusal doomed.
    fn open_lane(
        &self,
        entry: BranchEntry,
        parent: StreamId,
        phase: u64,
    ) -> Result<Lane, (BranchReason, Option<ServerError>)> {
        self.cells[entry.pooled].run(|ps| {
            let capture = ps.stream.capturing();
            if capture.owner() != Some(entry.origin) || capture.phase() != phase {
                return Err((BranchReason::Stale, None));
            }
            let (from, to) = capture
                .lanes()
                .fork(entry.origin, parent, entry.branch)
                .map_err(|r| (r, None))?;
            if ps.stream.capturing().is_recording()
                && let Err(error) = B::fork_lane(&mut ps.stream, from, to)
            {
                return Err((
                    BranchReason::Stale,
                    Some(self.doom(ps, parent, Op::Call("fork"), error)),
                ));
            }
            self.trace.push(Event::Fork {
                stream: parent,
                branch: entry.branch,
                lane: to.index() as u32,
            });
            Ok(to)
        })
    }

    fn unreserve(&self, entry: BranchEntry) {
        self.branches.remove(entry);
    }

    /// Gives back a reservation whose fork failed, unless the window forked the stream
    /// meanwhile (another thread's fork of it, which holds the same entry).
    fn unreserve_unless_forked(&self, ps: &mut PooledStream<B>, entry: BranchEntry) {
        let capture = ps.stream.capturing();
        let forked = capture.owner() == Some(entry.origin)
            && capture.lanes_ref().branches().contains(&entry.branch);
        if !forked {
            self.unreserve(entry);
        }
    }

    fn join(&self, branch: Branch) -> Result<(), ServerError> {
        let refuse = |reason| self.refuse_branch("join", branch.parent, branch.stream, reason);
        if branch.device != self.serial {
            return Err(refuse(BranchReason::OtherDevice));
        }
        let Some(w) = branch.window else {
            return Ok(());
        };
        self.closure_check(branch.parent, "join")?;
        self.cells[w.pooled].run(|ps| {
            let capture = ps.stream.capturing();
            if capture.owner() != Some(w.origin) || capture.phase() != w.phase {
                return Err(refuse(BranchReason::Stale));
            }
            let Some(into) = capture.lanes_ref().lane_of(branch.parent, w.origin) else {
                let error = refuse(BranchReason::ParentJoined);
                return Err(self.doom(ps, branch.parent, Op::Call("join"), error));
            };
            capture.lanes().join(w.lane, into).map_err(&refuse)?;
            if ps.stream.capturing().is_recording()
                && let Err(error) = B::join_lane(&mut ps.stream, w.lane, into)
            {
                return Err(self.doom(ps, branch.parent, Op::Call("join"), error));
            }
            self.trace.push(Event::Join {
                stream: branch.parent,
                branch: branch.stream,
                lane: w.lane.index() as u32,
            });
            Ok(())
        })
    }
}
