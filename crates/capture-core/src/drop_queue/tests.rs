//! Unit tests of the drop queue: nothing is freed before the fence behind it is waited.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Mutex};

use rstest::rstest;

use super::*;
use crate::ids::MemoryId;

/// What happened, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Recorded(u32),
    Waited(u32),
    Dropped(&'static str),
}

type Log = Arc<Mutex<Vec<Event>>>;

fn log_push(log: &Log, event: Event) {
    log.lock().expect("log poisoned").push(event);
}

fn events(log: &Log) -> Vec<Event> {
    log.lock().expect("log poisoned").clone()
}

/// Records when it is waited on; fails the wait when `fail` is set.
struct TestFence {
    id: u32,
    fail: bool,
    log: Log,
}

impl Fence for TestFence {
    fn wait(self) -> Result<(), ServerError> {
        log_push(&self.log, Event::Waited(self.id));
        if self.fail {
            Err(ServerError::driver(
                "cuEventSynchronize",
                std::io::Error::other(format!("device fault behind fence {}", self.id)),
            ))
        } else {
            Ok(())
        }
    }
}

/// A value whose drop is logged.
struct Tracked {
    name: &'static str,
    log: Log,
}

impl Drop for Tracked {
    fn drop(&mut self) {
        log_push(&self.log, Event::Dropped(self.name));
    }
}

/// A log, and fences numbered in recording order.
struct Stream {
    log: Log,
    next: u32,
}

impl Stream {
    fn new() -> Self {
        Self {
            log: Log::default(),
            next: 0,
        }
    }

    fn item(&self, name: &'static str, bytes: u64) -> Pending {
        Pending::other(
            Tracked {
                name,
                log: Arc::clone(&self.log),
            },
            bytes,
        )
    }

    /// A closure recording the next fence; its wait fails when `fail` is set.
    fn fence(&mut self, fail: bool) -> impl FnOnce() -> TestFence + use<> {
        let id = self.next;
        self.next += 1;
        let log = Arc::clone(&self.log);
        move || {
            log_push(&log, Event::Recorded(id));
            TestFence { id, fail, log }
        }
    }

    fn ok(&mut self) -> impl FnOnce() -> TestFence + use<> {
        self.fence(false)
    }

    fn events(&self) -> Vec<Event> {
        events(&self.log)
    }
}

use Event::{Dropped, Recorded, Waited};

#[test]
fn values_are_freed_only_after_the_fence_recorded_behind_them_is_waited() {
    let mut s = Stream::new();
    let mut q = PendingDropQueue::<TestFence>::default();

    q.push(s.item("a", 1));
    q.flush(s.ok()).expect("flush");
    assert_eq!(
        s.events(),
        [Recorded(0)],
        "a moves to pending; nothing waited"
    );
    assert_eq!((q.staged_len(), q.pending_len()), (0, 1));

    q.push(s.item("b", 1));
    q.flush(s.ok()).expect("flush");
    assert_eq!(
        s.events(),
        [Recorded(0), Waited(0), Dropped("a"), Recorded(1)],
        "a freed behind fence 0; b moves to pending behind fence 1"
    );

    q.flush(s.ok()).expect("flush");
    assert_eq!(
        s.events(),
        [
            Recorded(0),
            Waited(0),
            Dropped("a"),
            Recorded(1),
            Waited(1),
            Dropped("b")
        ],
        "nothing staged: no fence recorded"
    );
    assert!(q.is_empty());
}

#[test]
fn a_flush_never_waits_on_the_fence_it_records() {
    let mut s = Stream::new();
    let mut q = PendingDropQueue::<TestFence>::default();
    let names = ["a", "b", "c", "d", "e", "f"];
    for (round, name) in names.into_iter().enumerate() {
        q.push(s.item(name, 8));
        let before = s.events().len();
        q.flush(s.ok()).expect("flush");
        let during = s.events().split_off(before);
        let recorded: Vec<u32> = during
            .iter()
            .filter_map(|e| match e {
                Recorded(id) => Some(*id),
                _ => None,
            })
            .collect();
        assert_eq!(recorded, [u32::try_from(round).expect("small")]);
        assert!(
            !during.contains(&Waited(recorded[0])),
            "flush {round} waited on its own fence: {during:?}"
        );
        // Every value dropped during this flush was moved to pending by the one before,
        // and its fence was waited earlier in this flush.
        for (i, e) in during.iter().enumerate() {
            if let Dropped(n) = e {
                assert_eq!(Some(*n), round.checked_sub(1).map(|r| names[r]));
                assert!(during[..i].contains(&Waited(recorded[0] - 1)));
            }
        }
    }
    assert_eq!((q.pending_len(), q.staged_len()), (1, 0));
}

#[rstest]
#[case::items_reach_64(63, 1, 1)]
#[case::bytes_reach_64_mib(1, (64 << 20) - 1, 1)]
fn push_asks_for_a_flush_at_the_default_thresholds(
    #[case] before: usize,
    #[case] bytes_each: u64,
    #[case] last_bytes: u64,
) {
    let s = Stream::new();
    let mut q = PendingDropQueue::<TestFence>::default();
    for _ in 0..before {
        assert!(!q.push(s.item("x", bytes_each)), "asked too early");
    }
    assert!(!q.should_flush());
    assert!(q.push(s.item("last", last_bytes)), "threshold reached");
    assert!(q.should_flush());
}

#[test]
fn push_counts_the_bytes_of_host_bytes_bindings_and_handles() {
    let s = Stream::new();
    let handle = ManagedMemoryHandle::fresh(MemoryId::new(0), 32 << 20);
    let mut q = PendingDropQueue::<TestFence>::default();
    assert!(!q.push(Bytes::from_static(b"0123456789")));
    assert!(!q.push(handle.binding()));
    assert_eq!(q.bytes(), 10 + (32 << 20));
    assert!(!q.push(s.item("other", 5)));
    assert!(q.push(handle), "64 MiB reached");
    assert_eq!(q.bytes(), 10 + (64 << 20) + 5);
    assert_eq!(q.staged_bytes(), q.bytes());
    assert_eq!(q.len(), 4);
}

#[test]
fn a_small_policy_asks_at_its_own_limits() {
    let policy = FlushingPolicy::new(2, 100).expect("valid policy");
    let mut q = PendingDropQueue::<TestFence>::new(policy);
    assert_eq!(q.policy(), policy);
    assert!(!q.push(Bytes::from_static(b"a")));
    assert!(q.push(Bytes::from_static(b"b")), "2 values");
    let mut q = PendingDropQueue::<TestFence>::new(policy);
    assert!(q.push(Bytes::from_static(&[0; 100])), "100 bytes");
}

#[test]
fn drain_frees_everything() {
    let mut s = Stream::new();
    let mut q = PendingDropQueue::<TestFence>::default();
    q.push(s.item("a", 3));
    q.flush(s.ok()).expect("flush");
    q.push(s.item("b", 4));
    assert_eq!((q.len(), q.bytes()), (2, 7));

    q.drain(s.ok()).expect("drain");
    assert_eq!(
        s.events(),
        [
            Recorded(0),
            Waited(0),
            Dropped("a"),
            Recorded(1),
            Waited(1),
            Dropped("b")
        ]
    );
    assert!(q.is_empty());
    assert_eq!((q.len(), q.bytes()), (0, 0));

    // Nothing held: drain records no fence and waits on nothing.
    q.drain(s.ok()).expect("drain");
    assert_eq!(s.events().len(), 6);
}

#[test]
fn a_fence_error_keeps_the_values_it_guarded_behind_a_new_fence() {
    let mut s = Stream::new();
    let mut q = PendingDropQueue::<TestFence>::default();
    q.push(s.item("a", 1));
    q.flush(s.fence(true)).expect("recording does not wait");
    q.push(s.item("b", 1));

    let err = q.flush(s.ok()).expect_err("fence 0 failed");
    assert!(matches!(
        err,
        ServerError::Driver {
            op: "cuEventSynchronize",
            ..
        }
    ));
    assert_eq!(
        s.events(),
        [Recorded(0), Waited(0), Recorded(1)],
        "a wait that failed frees nothing: the device may still use a and b"
    );
    assert_eq!((q.staged_len(), q.pending_len()), (0, 2));
    q.flush(s.ok()).expect("fence 1 passes");
    assert!(s.events().contains(&Dropped("a")) && s.events().contains(&Dropped("b")));
}

#[test]
fn drain_keeps_what_no_passing_fence_covered() {
    let mut s = Stream::new();
    let mut q = PendingDropQueue::<TestFence>::default();
    q.push(s.item("a", 1));
    q.flush(s.fence(true)).expect("recording does not wait");
    q.push(s.item("b", 1));

    let err = q.drain(s.fence(true)).expect_err("both fences failed");
    assert!(
        err.to_string().contains("cuEventSynchronize")
            && std::error::Error::source(&err).is_some_and(|e| e.to_string().contains("fence 0")),
        "the first error: {err:?}"
    );
    assert_eq!(q.len(), 2, "nothing is freed behind a failed wait");
    assert!(!s.events().contains(&Dropped("a")));
    q.drain(s.ok()).expect("a later wait passes");
    assert!(q.is_empty());
    assert!(s.events().contains(&Dropped("a")) && s.events().contains(&Dropped("b")));
}

#[test]
fn drain_frees_everything_when_its_own_fence_passes_after_a_failed_one() {
    let mut s = Stream::new();
    let mut q = PendingDropQueue::<TestFence>::default();
    q.push(s.item("a", 1));
    q.flush(s.fence(true)).expect("recording does not wait");
    q.push(s.item("b", 1));
    q.drain(s.ok()).expect_err("fence 0 failed");
    assert!(q.is_empty(), "fence 1, recorded after both, passed");
}

#[test]
fn pending_values_without_a_fence_are_waited_for_at_once() {
    let mut s = Stream::new();
    let mut q = PendingDropQueue::<TestFence>::default();
    q.push(s.item("a", 1));
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        q.flush(|| -> TestFence { panic!("recording the fence failed") })
    }));
    assert!(panicked.is_err());
    assert_eq!(
        (q.staged_len(), q.pending_len()),
        (0, 1),
        "a pending, unfenced"
    );

    q.push(s.item("b", 1));
    q.flush(s.ok()).expect("flush");
    assert_eq!(
        s.events(),
        [Recorded(0), Waited(0), Dropped("a"), Dropped("b")],
        "the safety net records and waits at once; that fence covers b too"
    );
    assert!(q.is_empty());
}

#[test]
fn drain_waits_before_freeing_unfenced_pending_values() {
    let mut s = Stream::new();
    let mut q = PendingDropQueue::<TestFence>::default();
    q.push(s.item("a", 1));
    let panicked = catch_unwind(AssertUnwindSafe(|| {
        q.flush(|| -> TestFence { panic!("recording the fence failed") })
    }));
    assert!(panicked.is_err());

    q.drain(s.ok()).expect("drain");
    assert_eq!(s.events(), [Recorded(0), Waited(0), Dropped("a")]);
    assert!(q.is_empty());
}

#[test]
fn dropping_the_queue_waits_on_its_fence_first() {
    let mut s = Stream::new();
    let mut q = PendingDropQueue::<TestFence>::default();
    q.push(s.item("a", 1));
    q.flush(s.ok()).expect("flush");
    drop(q);
    assert_eq!(s.events(), [Recorded(0), Waited(0), Dropped("a")]);
}

#[rstest]
#[case::zero_items(0, 1, "drop queue max_items")]
#[case::zero_bytes(64, 0, "drop queue max_bytes")]
fn bad_policy_values_are_refused_naming_the_value(
    #[case] max_items: usize,
    #[case] max_bytes: u64,
    #[case] named: &str,
) {
    let err = FlushingPolicy::new(max_items, max_bytes).expect_err("zero refused");
    match err {
        ServerError::InvalidArgument { what, value, .. } => {
            assert_eq!(what, named);
            assert_eq!(value, crate::ArgValue::Number(0));
        }
        other => panic!("unexpected error {other:?}"),
    }
}

#[test]
fn default_policy_is_64_values_or_64_mib() {
    let p = FlushingPolicy::default();
    assert_eq!((p.max_items(), p.max_bytes()), (64, 64 << 20));
    assert_eq!(FlushingPolicy::new(64, 64 << 20).expect("valid"), p);
}

#[test]
fn the_queue_is_send_when_its_fence_is() {
    fn assert_send<T: Send>() {}
    assert_send::<PendingDropQueue<TestFence>>();
    assert_send::<Pending>();
}
