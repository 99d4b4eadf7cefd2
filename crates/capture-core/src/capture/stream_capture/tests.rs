//! Unit tests of the capture lifecycle.

use rstest::rstest;

use super::*;
use crate::memory::{
    Access, ComputeStorage, ExternalPlace, ManagedMemoryHandle, MemoryConfig, MemoryKind,
    MemoryManagement, PoolKind, StorageId,
};
use crate::range::ByteRange;

const S0: StreamId = StreamId::new(0);
const S1: StreamId = StreamId::new(1);
const S2: StreamId = StreamId::new(2);

/// A storage that hands out numbered pages and nothing else.
struct Pages(u64);

impl ComputeStorage for Pages {
    type Resource = ();
    type External = std::convert::Infallible;

    fn adopt(&mut self, external: Self::External) -> Result<(StorageId, u64), ServerError> {
        match external {}
    }

    fn place(&self, external: &Self::External) -> Result<ExternalPlace, ServerError> {
        match *external {}
    }

    fn alloc(&mut self, _size: u64) -> Result<StorageId, ServerError> {
        self.0 += 1;
        Ok(StorageId(self.0))
    }

    fn dealloc(&mut self, _id: StorageId) {}

    fn resource(&mut self, _id: StorageId, _bytes: ByteRange) {}
}

type Memory = MemoryManagement<Pages>;

fn memory() -> Memory {
    MemoryManagement::new(Pages(0), MemoryKind::Device, MemoryConfig::unlimited())
}

fn alloc(m: &mut Memory, size: u64) -> ManagedMemoryHandle {
    m.reserve(size, S0, PageUpdate::Free).unwrap()
}

/// `len` bytes at `offset` of `h`, owned by S0.
fn bind(h: &ManagedMemoryHandle, offset: u64, len: u64, access: Access) -> BufferBinding {
    BufferBinding::new(&h.binding(), S0, offset, len, access).unwrap()
}

fn key(h: &ManagedMemoryHandle, offset: u64, len: u64) -> ClaimKey {
    bind(h, offset, len, Access::Read).claim_key()
}

/// Page `page` of `pool` in device memory.
fn at(pool: PoolKind, page: u64) -> MemoryLocation {
    MemoryLocation {
        pool: PoolName {
            memory: MemoryKind::Device,
            pool,
        },
        page: PageId::new(page),
        slice: 0,
        bytes: ByteRange::from_bounds(0, 256),
    }
}

/// One stream's capture of a device whose capture breaks on allocation.
fn capture() -> StreamCapture {
    StreamCapture::new(&DeviceCaptures::new(true))
}

fn prepared(c: &mut StreamCapture) {
    c.prepare(S0).unwrap();
}

fn recording(c: &mut StreamCapture) {
    c.prepare(S0).unwrap();
    c.begin().unwrap();
}

/// Fill every part of the recording: a recorded launch, a touched page, a recorded host
/// copy, a failure and held staging.
fn busy(c: &mut StreamCapture, h: &ManagedMemoryHandle) {
    c.record([bind(h, 0, 16, Access::Read)]);
    c.touch(S0, at(PoolKind::Persistent, 0));
    c.record_copy([bind(h, 16, 16, Access::Write)]);
    c.fail(ServerError::graph_state("launch", "the first failure"));
    c.hold(&h.binding());
}

fn op_of(e: &ServerError) -> Option<&'static str> {
    match e {
        ServerError::GraphState { op, .. } => Some(op),
        _ => None,
    }
}

/// Everything a caller can observe of a capture without taking from it.
#[derive(Debug, PartialEq)]
struct Snapshot {
    state: State,
    owner: Option<StreamId>,
    active: bool,
    recording: bool,
    cache: CacheMode,
    launches: u64,
    copies: u64,
    doomed: bool,
    inputs: Vec<ClaimKey>,
    device_recording: Vec<StreamId>,
    page_update: PageUpdate,
    /// Counts of recorded claims, touched pages, recorded copies, primed and held
    /// staging.
    debug: String,
}

fn snapshot(c: &StreamCapture) -> Snapshot {
    Snapshot {
        state: c.state,
        owner: c.owner(),
        active: c.is_active(),
        recording: c.is_recording(),
        cache: c.cache_mode(),
        launches: c.launches(),
        copies: c.copies(),
        doomed: c.is_doomed(),
        inputs: c.recorded_inputs(),
        device_recording: c.device().recording(),
        page_update: c.page_update(),
        debug: format!("{c:?}"),
    }
}

/// Whether the capture holds nothing from any window, and is out of every window.
fn assert_idle_and_empty(c: &mut StreamCapture) {
    assert_eq!(c.state, State::NoCapture);
    assert_eq!(c.owner(), None);
    assert!(!c.is_active() && !c.is_recording());
    assert_eq!(c.cache_mode(), CacheMode::Normal);
    assert!(c.device().recording().is_empty());
    assert_eq!(c.page_update(), PageUpdate::Free);
    assert_eq!(c.launches(), 0);
    assert!(!c.is_doomed());
    assert!(c.recorded_inputs().is_empty());
    assert!(c.take_failure().is_none());
    assert!(c.take_recorded().is_empty());
    assert!(c.take_touched().is_empty());
    assert_eq!(c.copies(), 0);
    let debug = format!("{c:?}");
    for part in ["primed: 0", "held: 0"] {
        assert!(debug.contains(part), "{debug}");
    }
}

type Setup = fn(&mut StreamCapture, &ManagedMemoryHandle);
type Call = fn(&mut StreamCapture) -> Result<(), ServerError>;

#[rstest]
#[case::begin_without_prepare(
    |_: &mut StreamCapture, _: &ManagedMemoryHandle| {},
    |c: &mut StreamCapture| c.begin(),
    "begin"
)]
#[case::second_prepare(
    |c: &mut StreamCapture, h: &ManagedMemoryHandle| {
        prepared(c);
        c.prime(&h.binding());
    },
    |c: &mut StreamCapture| c.prepare(S1),
    "prepare"
)]
#[case::prepare_while_recording(
    |c: &mut StreamCapture, h: &ManagedMemoryHandle| {
        recording(c);
        busy(c, h);
    },
    |c: &mut StreamCapture| c.prepare(S0),
    "prepare"
)]
#[case::second_begin(
    |c: &mut StreamCapture, h: &ManagedMemoryHandle| {
        recording(c);
        busy(c, h);
    },
    |c: &mut StreamCapture| c.begin(),
    "begin"
)]
#[case::end_with_nothing(
    |_: &mut StreamCapture, _: &ManagedMemoryHandle| {},
    |c: &mut StreamCapture| c.end(S0).map(drop),
    "end"
)]
#[case::end_after_end(
    |c: &mut StreamCapture, h: &ManagedMemoryHandle| {
        recording(c);
        busy(c, h);
        assert_eq!(c.end(S0).unwrap(), CaptureEnd::Owned);
    },
    |c: &mut StreamCapture| c.end(S0).map(drop),
    "end"
)]
fn a_rejected_transition_changes_nothing(
    #[case] setup: Setup,
    #[case] call: Call,
    #[case] op: &str,
) {
    let mut m = memory();
    let h = alloc(&mut m, 64);
    let mut c = capture();
    setup(&mut c, &h);
    let before = snapshot(&c);
    let err = call(&mut c).unwrap_err();
    assert_eq!(op_of(&err), Some(op), "{err:?}");
    assert_eq!(snapshot(&c), before);
}

#[rstest]
#[case::allocation_breaks_capture(true)]
#[case::capture_survives_allocation(false)]
fn transitions_follow_the_capture_order(#[case] breaks: bool) {
    let device = DeviceCaptures::new(breaks);
    let mut a = StreamCapture::new(&device);
    let b = StreamCapture::new(&device);
    assert_eq!((a.index(), b.index()), (0, 1));
    assert!(std::ptr::eq(a.device(), device.status()));
    assert_eq!(device.status().allocation_breaks_capture(), breaks);

    // NoCapture
    assert_eq!(a.state, State::NoCapture);
    assert_eq!(a.cache_mode(), CacheMode::Normal);
    assert!(a.device().recording().is_empty());
    assert_eq!(
        (a.page_update(), b.page_update()),
        (PageUpdate::Free, PageUpdate::Free)
    );

    // Prepare: armed, not recording.
    a.prepare(S2).unwrap();
    assert_eq!(a.state, State::Prepare { owner: S2 });
    assert_eq!(a.owner(), Some(S2));
    assert!(a.is_active() && !a.is_recording());
    assert_eq!(a.cache_mode(), CacheMode::Capture);
    assert!(a.device().recording().is_empty());
    assert!(!device.status().is_any_recording());
    assert_eq!(
        (a.page_update(), b.page_update()),
        (PageUpdate::Free, PageUpdate::Free)
    );

    // Capture: recording; the device sees it from either stream.
    a.begin().unwrap();
    assert_eq!(a.state, State::Capture { owner: S2 });
    assert!(a.is_active() && a.is_recording());
    assert_eq!(a.cache_mode(), CacheMode::Capture);
    assert_eq!(a.device().recording(), vec![S2]);
    assert_eq!(b.device().recording(), vec![S2]);
    assert!(device.status().is_any_recording());
    assert_eq!(a.page_update(), PageUpdate::Freeze { recording: S2 });
    let other = if breaks {
        PageUpdate::Freeze { recording: S2 }
    } else {
        PageUpdate::Hold { recording: S2 }
    };
    assert_eq!(b.page_update(), other);

    // NoCapture again; the device sees the stream record until the driver capture is
    // closed (rule 20).
    assert_eq!(a.end(S2).unwrap(), CaptureEnd::Owned);
    assert_eq!(a.state, State::NoCapture);
    assert_eq!(a.owner(), None);
    assert!(!a.is_active() && !a.is_recording());
    assert_eq!(a.cache_mode(), CacheMode::Normal);
    assert_eq!(a.device().recording(), vec![S2]);
    a.driver_closed();
    assert!(a.device().recording().is_empty());
    assert_eq!(
        (a.page_update(), b.page_update()),
        (PageUpdate::Free, PageUpdate::Free)
    );
}

#[rstest]
#[case::no_capture(|_: &mut StreamCapture| {})]
#[case::prepare(prepared)]
#[case::after_end(|c: &mut StreamCapture| {
    recording(c);
    c.end(S0).unwrap();
})]
#[case::after_abandon(|c: &mut StreamCapture| {
    recording(c);
    c.end(S1).unwrap();
})]
#[case::after_abort(|c: &mut StreamCapture| {
    recording(c);
    c.abort();
})]
fn a_launch_outside_a_window_is_not_recorded(#[case] setup: fn(&mut StreamCapture)) {
    let mut m = memory();
    let h = alloc(&mut m, 64);
    let probe = bind(&h, 0, 16, Access::ReadWrite);
    let mut c = capture();
    setup(&mut c);
    c.record([probe.clone()]);
    c.touch(S0, at(PoolKind::Dynamic, 0));
    c.record_copy([probe.clone()]);
    c.fail(ServerError::graph_state("launch", "outside"));
    c.hold(&h.binding());
    assert_eq!(c.launches(), 0);
    assert!(!c.is_doomed());
    assert!(c.recorded_inputs().is_empty());
    assert!(!c.writes_before(probe.claim_key()));
    assert!(c.take_failure().is_none());
    assert!(c.take_recorded().is_empty());
    assert!(c.take_touched().is_empty());
    assert_eq!(c.copies(), 0);
    // Nothing held the staging: it goes back to its pool once its handle is dropped.
    let id = h.id();
    drop(h);
    m.reclaim();
    assert!(!m.is_live(id) && !probe.is_live());
}

#[rstest]
#[case::read_then_write(Access::Read, Access::Write, Access::ReadWrite)]
#[case::write_then_read(Access::Write, Access::Read, Access::ReadWrite)]
#[case::read_and_read(Access::Read, Access::Read, Access::Read)]
#[case::write_and_write(Access::Write, Access::Write, Access::Write)]
#[case::read_write_and_read(Access::ReadWrite, Access::Read, Access::ReadWrite)]
fn take_recorded_names_each_claim_once_write_winning(
    #[case] first: Access,
    #[case] second: Access,
    #[case] merged: Access,
) {
    let mut m = memory();
    let x = alloc(&mut m, 64);
    let gone = alloc(&mut m, 64);
    let mut c = capture();
    recording(&mut c);
    c.record([bind(&x, 0, 16, first), bind(&gone, 0, 64, Access::Write)]);
    c.record([bind(&x, 16, 16, Access::Read)]);
    c.record([bind(&x, 0, 16, second)]);
    assert_eq!(c.launches(), 3);
    assert_eq!(c.end(S0).unwrap(), CaptureEnd::Owned);
    // Every handle and binding of `gone` dropped, and its pool took it back.
    let gone_id = gone.id();
    drop(gone);
    m.reclaim();
    assert!(!m.is_live(gone_id));
    let taken: Vec<_> = c
        .take_recorded()
        .iter()
        .map(|b| (b.claim_key(), b.access()))
        .collect();
    assert_eq!(
        taken,
        vec![(key(&x, 0, 16), merged), (key(&x, 16, 16), Access::Read),]
    );
    assert!(c.take_recorded().is_empty(), "taken once");
}

/// A recorded launch: (allocation index, offset, len, access) per buffer it was given.
type Launch = Vec<(usize, u64, u64, Access)>;

#[rstest]
#[case::read_write_read(
    vec![vec![(0, 0, 64, Access::Read)], vec![(1, 0, 64, Access::Write)], vec![(1, 0, 64, Access::Read)]],
    vec![(0, 0, 64)]
)]
#[case::a_covering_write_excludes_the_read(
    vec![vec![(1, 0, 32, Access::Write)], vec![(1, 8, 16, Access::Read)]],
    vec![]
)]
#[case::a_partly_covering_write_leaves_the_rest_an_input(
    vec![vec![(1, 0, 16, Access::Write)], vec![(1, 8, 16, Access::Read)]],
    vec![(1, 16, 8)]
)]
#[case::a_write_inside_the_read_leaves_both_ends_inputs(
    vec![vec![(1, 8, 8, Access::Write)], vec![(1, 0, 32, Access::Read)]],
    vec![(1, 0, 8), (1, 16, 16)]
)]
#[case::writes_covering_together_exclude_the_read(
    vec![vec![(1, 0, 12, Access::Write)], vec![(1, 12, 20, Access::Write)], vec![(1, 8, 16, Access::Read)]],
    vec![]
)]
#[case::a_wider_write_excludes_the_read(
    vec![vec![(1, 0, 64, Access::Write)], vec![(1, 16, 16, Access::Read)]],
    vec![]
)]
#[case::an_adjacent_write_does_not(
    vec![vec![(1, 0, 16, Access::Write)], vec![(1, 16, 16, Access::Read)]],
    vec![(1, 16, 16)]
)]
#[case::a_write_of_another_allocation_does_not(
    vec![vec![(0, 0, 16, Access::Write)], vec![(1, 0, 16, Access::Read)]],
    vec![(1, 0, 16)]
)]
#[case::read_before_written_is_named_once(
    vec![vec![(1, 0, 16, Access::Read)], vec![(1, 0, 16, Access::Write)], vec![(1, 0, 16, Access::Read)]],
    vec![(1, 0, 16)]
)]
#[case::read_write_in_place_reads_first(
    vec![vec![(1, 0, 16, Access::ReadWrite)], vec![(1, 0, 16, Access::Read)]],
    vec![(1, 0, 16)]
)]
#[case::a_write_of_the_same_launch_is_not_before(
    vec![vec![(1, 0, 16, Access::Write), (1, 0, 16, Access::Read)]],
    vec![(1, 0, 16)]
)]
#[case::an_overlapping_write_of_the_same_launch_is_not_before(
    vec![vec![(1, 0, 16, Access::Write), (1, 8, 16, Access::Read)]],
    vec![(1, 8, 16)]
)]
#[case::a_later_overlapping_write_is_not_before(
    vec![vec![(1, 8, 16, Access::Read)], vec![(1, 0, 16, Access::Write)], vec![(1, 8, 16, Access::Read)]],
    vec![(1, 8, 16)]
)]
#[case::in_first_read_order(
    vec![vec![(1, 0, 16, Access::Read)], vec![(0, 0, 16, Access::Read)], vec![(1, 0, 16, Access::Read)]],
    vec![(1, 0, 16), (0, 0, 16)]
)]
fn recorded_inputs_are_ranges_read_before_the_window_wrote_them(
    #[case] launches: Vec<Launch>,
    #[case] inputs: Vec<(usize, u64, u64)>,
) {
    let mut m = memory();
    let x = [alloc(&mut m, 64), alloc(&mut m, 64)];
    let mut c = capture();
    recording(&mut c);
    for launch in &launches {
        c.record(launch.iter().map(|&(i, o, l, a)| bind(&x[i], o, l, a)));
    }
    let want: Vec<_> = inputs.iter().map(|&(i, o, l)| key(&x[i], o, l)).collect();
    assert_eq!(c.recorded_inputs(), want);
    // The recording survives the window's close for the seal to read.
    c.end(S0).unwrap();
    assert_eq!(c.recorded_inputs(), want);
}

#[test]
fn writes_before_needs_every_byte_written() {
    let mut m = memory();
    let x = alloc(&mut m, 64);
    let y = alloc(&mut m, 64);
    let mut c = capture();
    recording(&mut c);
    c.record([
        bind(&x, 0, 16, Access::Read),
        bind(&y, 16, 16, Access::Write),
    ]);
    assert!(!c.writes_before(key(&x, 0, 16)), "a read is not a write");
    assert!(c.writes_before(key(&y, 16, 16)));
    assert!(c.writes_before(key(&y, 20, 4)), "inside the written range");
    assert!(
        !c.writes_before(key(&y, 0, 17)),
        "only partly written: still an input"
    );
    assert!(!c.writes_before(key(&y, 0, 16)), "adjacent");
    assert!(!c.writes_before(key(&x, 16, 16)), "another allocation");
}

#[test]
fn take_touched_names_each_page_once() {
    let mut c = capture();
    recording(&mut c);
    let page = |stream, pool, page| TouchedPage {
        stream,
        pool: PoolName {
            memory: MemoryKind::Device,
            pool,
        },
        page: PageId::new(page),
    };
    let mut second_slice = at(PoolKind::Persistent, 1);
    second_slice.slice = 3;
    second_slice.bytes = ByteRange::from_bounds(256, 512);
    c.touch(S1, at(PoolKind::Persistent, 1));
    c.touch(S0, at(PoolKind::Persistent, 1));
    c.touch(S0, second_slice);
    c.touch(S0, at(PoolKind::Dynamic, 1));
    c.touch(S0, at(PoolKind::Persistent, 0));
    c.touch(S0, at(PoolKind::Persistent, 1));
    assert_eq!(
        c.take_touched(),
        vec![
            page(S0, PoolKind::Dynamic, 1),
            page(S0, PoolKind::Persistent, 0),
            page(S0, PoolKind::Persistent, 1),
            page(S1, PoolKind::Persistent, 1),
        ]
    );
    assert!(c.take_touched().is_empty(), "taken once");
}

#[test]
fn the_first_failure_wins() {
    let mut c = capture();
    recording(&mut c);
    assert!(!c.is_doomed());
    c.fail(ServerError::graph_state("launch", "the first"));
    c.fail(ServerError::graph_state("write", "the second"));
    assert!(c.is_doomed());
    // The failure outlives the close, for the seal to take.
    assert_eq!(c.end(S0).unwrap(), CaptureEnd::Owned);
    assert!(c.is_doomed());
    let failure = c.take_failure().map(|e| e.to_string());
    assert_eq!(failure.as_deref(), Some("launch: the first"));
    assert!(!c.is_doomed());
    assert!(c.take_failure().is_none());
}

#[rstest]
#[case::no_capture(|_: &mut StreamCapture| {})]
#[case::prepare(prepared)]
#[case::after_end(|c: &mut StreamCapture| {
    recording(c);
    c.end(S0).unwrap();
})]
fn fail_outside_a_window_dooms_nothing(#[case] setup: fn(&mut StreamCapture)) {
    let mut c = capture();
    setup(&mut c);
    c.fail(ServerError::graph_state("launch", "outside"));
    assert!(!c.is_doomed());
    assert!(c.take_failure().is_none());
    // Nor the window that opens next.
    if !c.is_active() {
        c.prepare(S0).unwrap();
    }
    c.begin().unwrap();
    assert!(!c.is_doomed());
}

#[test]
fn end_from_prepare_disarms() {
    let mut m = memory();
    let h = alloc(&mut m, 64);
    let probe = bind(&h, 0, 64, Access::Read);
    let mut c = capture();
    prepared(&mut c);
    c.prime(&h.binding());
    drop(h);
    let err = c.end(S0).unwrap_err();
    assert_eq!(op_of(&err), Some("end"), "{err:?}");
    assert!(err.to_string().contains("stream#0"), "{err}");
    assert!(err.to_string().contains("disarmed"), "{err}");
    m.reclaim();
    assert!(!probe.is_live(), "the primed staging was released");
    assert_idle_and_empty(&mut c);
    // Disarmed, not abandoned: a second end has nothing to end, and prepare works.
    let again = c.end(S0).unwrap_err();
    assert_eq!(op_of(&again), Some("end"), "{again:?}");
    c.prepare(S0).unwrap();
    c.begin().unwrap();
    assert_eq!(c.end(S0).unwrap(), CaptureEnd::Owned);
}

#[test]
fn a_foreign_end_abandons_and_the_owner_later_hears_of_it() {
    let mut m = memory();
    let h = alloc(&mut m, 64);
    let mut c = capture();
    recording(&mut c);
    c.record([bind(&h, 0, 16, Access::Write)]);
    assert_eq!(
        c.end(S1).unwrap(),
        CaptureEnd::Abandoned { owner: S0, by: S1 }
    );
    assert_eq!(c.state, State::NoCapture);
    c.driver_closed();
    assert!(c.device().recording().is_empty());
    assert_eq!(c.cache_mode(), CacheMode::Normal);
    // The recording survives for the teardown to claim what it would have written.
    assert_eq!(c.launches(), 1);
    assert_eq!(c.take_recorded().len(), 1);
    // A third stream's end is not the owner's: it has nothing to end.
    let third = c.end(S2).unwrap_err();
    assert_eq!(op_of(&third), Some("end"), "{third:?}");
    // The owner hears of it, once.
    let err = c.end(S0).unwrap_err();
    assert!(
        matches!(err, ServerError::Abandoned { owner, by } if owner == S0 && by == S1),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "capture window of stream#0 abandoned: ended by stream#1"
    );
    let again = c.end(S0).unwrap_err();
    assert_eq!(op_of(&again), Some("end"), "{again:?}");
    // A new window works.
    c.prepare(S0).unwrap();
    c.begin().unwrap();
    assert_eq!(c.end(S0).unwrap(), CaptureEnd::Owned);
}

#[rstest]
#[case::aborted(StreamCapture::abort)]
#[case::ended_untaken(|c: &mut StreamCapture| assert_eq!(c.end(S0).unwrap(), CaptureEnd::Owned))]
#[case::abandoned_untaken(|c: &mut StreamCapture| {
    c.end(S1).unwrap();
})]
fn a_new_capture_starts_from_an_empty_recording(#[case] close: fn(&mut StreamCapture)) {
    let mut m = memory();
    let old = alloc(&mut m, 64);
    let probe = bind(&old, 0, 64, Access::Read);
    let mut c = capture();
    recording(&mut c);
    busy(&mut c, &old);
    c.record([bind(&old, 16, 16, Access::Write)]);
    close(&mut c);
    c.prepare(S0).unwrap();
    assert_eq!(c.launches(), 0);
    assert!(!c.is_doomed());
    assert!(c.recorded_inputs().is_empty());
    let debug = format!("{c:?}");
    for part in [
        "recorded: 0",
        "touched: 0",
        "copies: 0",
        "held: 0",
        "doomed: false",
    ] {
        assert!(debug.contains(part), "{debug}");
    }
    drop(old);
    m.reclaim();
    assert!(
        !probe.is_live(),
        "the old window's held staging was released"
    );
    // The new window records only its own launches.
    c.begin().unwrap();
    let new = alloc(&mut m, 64);
    c.record([bind(&new, 0, 8, Access::Read)]);
    assert_eq!(c.launches(), 1);
    assert_eq!(c.recorded_inputs(), vec![key(&new, 0, 8)]);
    assert_eq!(c.end(S0).unwrap(), CaptureEnd::Owned);
    assert!(c.take_failure().is_none());
    assert!(c.take_touched().is_empty());
    assert_eq!(c.copies(), 0);
    let taken: Vec<_> = c.take_recorded().iter().map(|b| b.claim_key()).collect();
    assert_eq!(taken, vec![key(&new, 0, 8)]);
}

#[rstest]
#[case::no_capture(|_: &mut StreamCapture, _: &ManagedMemoryHandle| {})]
#[case::prepare(|c: &mut StreamCapture, h: &ManagedMemoryHandle| {
    prepared(c);
    c.prime(&h.binding());
})]
#[case::capture(|c: &mut StreamCapture, h: &ManagedMemoryHandle| {
    recording(c);
    busy(c, h);
})]
#[case::after_end(|c: &mut StreamCapture, h: &ManagedMemoryHandle| {
    recording(c);
    busy(c, h);
    c.end(S0).unwrap();
})]
#[case::after_abandon(|c: &mut StreamCapture, h: &ManagedMemoryHandle| {
    recording(c);
    busy(c, h);
    c.end(S1).unwrap();
})]
fn abort_from_any_state_returns_to_no_capture(#[case] setup: Setup) {
    let mut m = memory();
    let h = alloc(&mut m, 64);
    let probe = bind(&h, 0, 64, Access::Read);
    let device = DeviceCaptures::new(true);
    let mut c = StreamCapture::new(&device);
    let other = StreamCapture::new(&device);
    setup(&mut c, &h);
    drop(h);
    c.abort();
    assert_eq!(other.page_update(), PageUpdate::Free);
    m.reclaim();
    assert!(!probe.is_live(), "nothing primed or held survives an abort");
    assert_idle_and_empty(&mut c);
    c.abort();
    assert_idle_and_empty(&mut c);
    c.prepare(S0).unwrap();
    c.begin().unwrap();
    assert_eq!(c.end(S0).unwrap(), CaptureEnd::Owned);
}

#[rstest]
#[case::no_capture(|_: &mut StreamCapture| {}, false, |_: &mut StreamCapture| {})]
#[case::prepare_until_begin(prepared, true, |c: &mut StreamCapture| c.begin().unwrap())]
#[case::prepare_until_end(prepared, true, |c: &mut StreamCapture| {
    c.end(S0).unwrap_err();
})]
#[case::prepare_until_abort(prepared, true, StreamCapture::abort)]
#[case::capture(recording, false, |_: &mut StreamCapture| {})]
fn prime_holds_only_while_preparing(
    #[case] setup: fn(&mut StreamCapture),
    #[case] holds: bool,
    #[case] release: fn(&mut StreamCapture),
) {
    let mut m = memory();
    let mut c = capture();
    setup(&mut c);
    let h = alloc(&mut m, 64);
    let id = h.id();
    let probe = bind(&h, 0, 64, Access::Read);
    c.prime(&h.binding());
    // A primed binding is not an owner.
    assert!(h.can_mut());
    drop(h);
    m.reclaim();
    assert_eq!(m.is_live(id), holds);
    assert_eq!(probe.is_live(), holds);
    release(&mut c);
    m.reclaim();
    assert!(!m.is_live(id) && !probe.is_live());
}
