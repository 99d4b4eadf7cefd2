//! The runner's forks and joins (rules 28 and 29): each predicted from the model's
//! windows and branches before the call, and the device's answer held to it: a fork
//! accepted exactly when the model says the stream can be a branch (the same lane
//! number), refused with the reason the model gives otherwise; a join accepted, stale
//! or refused for a parent joined first (which dooms a recording window).

use std::sync::Arc;

use capture_core::{BranchReason, Builtins, Chain, ServerError, StreamId};
use capture_mock::FaultOp;

use super::super::forks::Refusal;
use super::super::span::Span;
use super::token::Token;
use super::{Kind, Run, relative};

/// What the model predicts of a fork.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    /// Accepted outside any window.
    Outside,
    /// Accepted as a branch of the window on this pooled stream.
    Inside(usize),
    /// Refused with this reason.
    Reason(Refusal),
    /// Refused as a neighbour of a window (or of a branch), or as a joined branch.
    Neighbour,
}

fn reason_of(reason: &BranchReason) -> Option<Refusal> {
    Some(match reason {
        BranchReason::SamePooledStream { .. } => Refusal::SamePooled,
        BranchReason::HasWindow { .. } => Refusal::HasWindow,
        BranchReason::Lent { .. } => Refusal::Lent,
        BranchReason::AlreadyBranch { .. } => Refusal::AlreadyBranch,
        BranchReason::Stale => Refusal::Stale,
        BranchReason::ParentJoined => Refusal::ParentJoined,
        _ => return None,
    })
}

impl<B: Builtins> Run<B> {
    /// The pooled stream `s` folds onto, whatever window it is a branch of.
    pub(super) fn home(&self, s: u8) -> usize {
        s as usize % self.pooled
    }

    /// The pooled stream of the window `s` is a branch of now (joined or not).
    pub(super) fn route_of(&self, s: u8) -> Option<usize> {
        self.model
            .windows
            .iter()
            .position(|w| w.as_ref().is_some_and(|w| w.forks.is_branch(s)))
    }

    /// Whether `s` is an unjoined branch of the window on `pooled`.
    pub(super) fn branch_open(&self, pooled: usize, s: u8) -> bool {
        matches!(&self.model.windows[pooled], Some(w) if w.owner != s && w.forks.lane_of(s).is_some())
    }

    /// The owner of the window pooled stream `home` is lent to as a branch's.
    pub(super) fn lent_to(&self, home: usize) -> Option<u8> {
        self.model
            .windows
            .iter()
            .flatten()
            .find(|w| w.forks.lends(home, None))
            .map(|w| w.owner)
    }

    /// The stream a capture closure's op runs on: the branch it switched to, or `s`.
    pub(super) fn on_stream(&self, s: u8) -> u8 {
        self.closure.as_ref().and_then(|c| c.on).unwrap_or(s)
    }

    fn expect_fork(&self, parent: u8, branch: u8) -> Expect {
        let pp = self.pooled_of(parent);
        let home = self.home(branch);
        match &self.model.windows[pp] {
            Some(w) => {
                if w.owner != parent && w.forks.lane_of(parent).is_none() {
                    Expect::Neighbour
                } else if home == pp {
                    Expect::Reason(Refusal::SamePooled)
                } else if self.route_of(branch).is_some_and(|q| q != pp) {
                    Expect::Reason(Refusal::Lent)
                } else if w.forks.is_branch(branch) {
                    if w.forks.lane_of(branch).is_some() {
                        Expect::Reason(Refusal::AlreadyBranch)
                    } else {
                        Expect::Inside(pp)
                    }
                } else if self.lent_to(home).is_some() {
                    Expect::Reason(Refusal::Lent)
                } else if self.model.windows[home].is_some() {
                    Expect::Reason(Refusal::HasWindow)
                } else {
                    Expect::Inside(pp)
                }
            }
            None if self.lent_to(pp).is_some() => Expect::Neighbour,
            None if home == pp => Expect::Reason(Refusal::SamePooled),
            None if self.route_of(branch).is_some() => Expect::Reason(Refusal::Lent),
            None if self.model.windows[home].is_some() => Expect::Reason(Refusal::HasWindow),
            None => Expect::Outside,
        }
    }

    /// `Device::fork(parent, branch)`, held to the model's prediction.
    pub(super) fn fork(&mut self, parent: u8, branch: u8) {
        let (parent, branch) = (self.stream(parent), self.stream(branch));
        let expect = self.expect_fork(parent, branch);
        let dev = Arc::clone(&self.dev);
        let Some((result, fired)) =
            self.guarded(|| dev.fork(StreamId::new(parent.into()), StreamId::new(branch.into())))
        else {
            return;
        };
        let home = self.home(branch);
        match (result, expect) {
            (Ok(token), Expect::Outside) => {
                if token.window().is_some() {
                    self.fail("a fork outside any window made a branch of one");
                }
                self.tokens.push(Some(Token {
                    branch: Some(token),
                    stream: branch,
                    parent,
                    window: None,
                }));
            }
            (Ok(token), Expect::Inside(p)) => {
                let Some(w) = self.model.windows[p].as_mut() else {
                    return;
                };
                let lane = w.forks.fork(parent, branch, home);
                let phase = w.forks.phase;
                match lane {
                    Ok(lane) => {
                        let owner = w.owner;
                        if token.window() != Some(StreamId::new(owner.into()))
                            || token.lane().map(|l| l.index()) != Some(lane)
                        {
                            self.fail(format!(
                                "a fork made {:?} of {:?}, the model has lane {lane} of stream#{owner}",
                                token.lane(),
                                token.window()
                            ));
                        }
                        self.tokens.push(Some(Token {
                            branch: Some(token),
                            stream: branch,
                            parent,
                            window: Some((p, phase, lane)),
                        }));
                    }
                    Err(r) => self.fail(format!("the model refused a fork it expected: {r:?}")),
                }
            }
            (Ok(_), other) => {
                self.fail(format!("a fork was accepted, the model expects {other:?}"))
            }
            (Err(e), expect) => {
                let (kind, _) = self.classify(&e, &fired);
                let refused = match e.root_cause() {
                    ServerError::BranchRefused(r) => reason_of(&r.reason),
                    _ => None,
                };
                match expect {
                    _ if self.fixed.is_some() && kind == Kind::Refused => {}
                    Expect::Reason(r) if refused == Some(r) => {}
                    Expect::Neighbour if kind == Kind::Refused => {}
                    Expect::Inside(p) if fired.contains(&FaultOp::Lane) => {
                        // The driver refused the fork of a recording: the lane is open,
                        // and the window doomed.
                        if let Some(w) = self.model.windows[p].as_mut() {
                            let _ = w.forks.fork(parent, branch, home);
                            w.must_doom = true;
                            w.may_doom = true;
                        }
                    }
                    other => self.fail(format!(
                        "a fork failed, the model expects {other:?}: {}",
                        Chain(&e)
                    )),
                }
            }
        }
    }

    /// `Device::join` of token `name`, held to the model's prediction. `closure` is the
    /// capturing stream when a closure joins.
    pub(super) fn join(&mut self, name: u8, closure: Option<u8>) {
        let Some(at) = relative(name, self.tokens.len()) else {
            return;
        };
        let Some(Some(mut token)) = self.tokens.get_mut(at).map(Option::take) else {
            return;
        };
        let Some(branch) = token.branch.take() else {
            return;
        };
        // A closure joins only tokens whose parent is of its own window (rule 22
        // refuses the others before anything is looked at); another's token stays held.
        if let (Some(s), Some(_)) = (closure, token.window)
            && token.parent != s
            && self.route_of(token.parent) != Some(self.pooled_of(s))
        {
            token.branch = Some(branch);
            self.tokens[at] = Some(token);
            return;
        }
        let expect: Result<(), Refusal> = match token.window {
            None => Ok(()),
            Some((p, phase, lane)) => match &self.model.windows[p] {
                Some(w) if w.forks.token_lane(phase, lane).is_some() => {
                    let mut forks = w.forks.clone();
                    forks.join(lane)
                }
                _ => Err(Refusal::Stale),
            },
        };
        let dev = Arc::clone(&self.dev);
        let Some((result, fired)) = self.guarded(|| dev.join(branch)) else {
            return;
        };
        let window = token.window.map(|(p, _, _)| p);
        let recording =
            window.is_some_and(|p| self.model.windows[p].as_ref().is_some_and(|w| w.recording));
        match (result, expect) {
            (Ok(()), Ok(())) => {
                if let Some((p, _, lane)) = token.window
                    && let Some(w) = self.model.windows[p].as_mut()
                {
                    let _ = w.forks.join(lane);
                }
                if let Some(c) = &mut self.closure
                    && token.window.is_some()
                    && c.on == Some(token.stream)
                {
                    c.on = Some(token.parent);
                }
            }
            (Ok(()), Err(r)) => self.fail(format!("a join was accepted, the model expects {r:?}")),
            (Err(e), expect) => {
                let refused = match e.root_cause() {
                    ServerError::BranchRefused(r) => reason_of(&r.reason),
                    _ => None,
                };
                match expect {
                    Err(r) if refused == Some(r) => {
                        if r == Refusal::ParentJoined
                            && recording
                            && let Some(w) = window.and_then(|p| self.model.windows[p].as_mut())
                        {
                            // The branch can never be joined: the window is doomed.
                            w.must_doom = true;
                            w.may_doom = true;
                        }
                    }
                    Ok(()) if fired.contains(&FaultOp::Lane) => {
                        if let Some((p, _, lane)) = token.window
                            && let Some(w) = self.model.windows[p].as_mut()
                        {
                            let _ = w.forks.join(lane);
                            w.must_doom = true;
                            w.may_doom = true;
                        }
                    }
                    _ if self.fixed.is_some() => {}
                    other => self.fail(format!(
                        "a join failed, the model expects {other:?}: {}",
                        Chain(&e)
                    )),
                }
            }
        }
    }

    /// Rule 29 for an operation recorded on `s` in the window on `p`, using `uses`: a
    /// race the model sees must be refused as one (unless something else failed
    /// first), and a race the device reports the model must see, while nothing has
    /// put the window's fate out of the model's hands.
    pub(super) fn check_race(
        &mut self,
        p: usize,
        s: u8,
        uses: &[(Span, bool)],
        result: &Result<(), ServerError>,
    ) {
        let Some(w) = &self.model.windows[p] else {
            return;
        };
        if w.may_doom || w.must_doom {
            return;
        }
        let races = w.forks.races(s, uses);
        let reported = matches!(
            result.as_ref().err().map(ServerError::root_cause),
            Some(ServerError::BranchRace(_))
        );
        match (races, result) {
            (true, Ok(())) => self.fail("an operation racing an unjoined branch was recorded"),
            (false, Err(e)) if reported => self.fail(format!(
                "a race the model does not see was reported: {}",
                Chain(e)
            )),
            _ => {}
        }
    }

    /// A closure's `Switch`: its ops run on the stream of token `to` (back from the
    /// latest) when that stream was forked into its window, else on the capturing
    /// stream.
    pub(super) fn switch(&mut self, s: u8, to: u8) {
        let p = self.pooled_of(s);
        let stream = relative(super::super::program::LATEST - to, self.tokens.len())
            .and_then(|at| self.tokens[at].as_ref())
            .map(|t| t.stream)
            .filter(|&b| {
                self.model.windows[p]
                    .as_ref()
                    .is_some_and(|w| w.forks.is_branch(b))
            });
        if let Some(c) = &mut self.closure {
            c.on = stream;
        }
    }
}
