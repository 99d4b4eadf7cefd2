//! The one-stream rule while a capture closure runs ([`ClosureScope`]): work the
//! closure issues on another stream of the device, on the thread running it, would run
//! eagerly in both phases and be left out of the graph, so it is refused with
//! `ServerError::OtherStreamInCapture`, unless that stream is a branch the window
//! forked (rule 28), whose work goes into the graph. A capture's own lifecycle calls on
//! another stream (`prepare`, `begin`, `end`, and so `capture`) are work on it too, and
//! refused the same way (rule 22).

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::ServerError;
use crate::ids::StreamId;

thread_local! {
    /// The capture closures running on this thread: each one's device (its serial) and
    /// stream, innermost last.
    static CLOSURES: RefCell<Vec<(u64, StreamId)>> = const { RefCell::new(Vec::new()) };
}

/// How many capture closures run now, on every thread: while none does, the check
/// needs no look at this thread's list. A thread sees its own scope's count.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// While it lives, this thread runs the capture closure of `stream` on device `device`.
pub(crate) struct ClosureScope;

impl ClosureScope {
    pub(crate) fn enter(device: u64, stream: StreamId) -> Self {
        CLOSURES.with(|c| c.borrow_mut().push((device, stream)));
        OPEN.fetch_add(1, Ordering::Relaxed);
        ClosureScope
    }

    /// Refuses `op` on `stream` of device `device` when this thread runs a capture
    /// closure of another stream of that device, however deeply nested, unless `stream`
    /// is a branch of that closure's window (`branch_of` names the window's origin when
    /// it is a branch of one). Every enclosing closure is asked, not the innermost
    /// alone, so a capture of another stream nested in a closure (refused at its
    /// `prepare`) cannot open a scope that lets its stream's work through. Other
    /// threads, and other devices, are unaffected.
    #[inline]
    pub(crate) fn check(
        device: u64,
        stream: StreamId,
        branch_of: Option<StreamId>,
        op: &'static str,
    ) -> Result<(), ServerError> {
        if OPEN.load(Ordering::Relaxed) == 0 {
            return Ok(());
        }
        CLOSURES.with(|c| {
            let closures = c.borrow();
            match closures
                .iter()
                .find(|&&(d, window)| d == device && window != stream && branch_of != Some(window))
            {
                Some(&(_, window)) => Err(ServerError::OtherStreamInCapture {
                    op,
                    window,
                    other: stream,
                }),
                None => Ok(()),
            }
        })
    }
}

impl Drop for ClosureScope {
    fn drop(&mut self) {
        CLOSURES.with(|c| {
            c.borrow_mut().pop();
        });
        OPEN.fetch_sub(1, Ordering::Relaxed);
    }
}
