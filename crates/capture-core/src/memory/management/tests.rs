//! Unit tests of the memory manager: pools, handles and bindings, capture arming,
//! `PageUpdate` obedience, and bad input.

use std::sync::{Arc, Mutex};

use rstest::rstest;

use super::*;
use crate::memory::{
    Access, BufferBinding, ComputeStorage, DYNAMIC_PAGE_BYTES, ExternalPlace,
    PERSISTENT_PAGE_BYTES, StorageId,
};

/// What the test storage saw.
#[derive(Debug, Default)]
struct Log {
    allocs: Vec<u64>,
    deallocs: Vec<StorageId>,
    released: Vec<(StorageId, ByteRange)>,
}

/// A storage that numbers its pages, logs every call, and refuses pages past `refuse_after`.
struct TestStorage {
    next: u64,
    refuse_after: Option<usize>,
    log: Arc<Mutex<Log>>,
}

impl ComputeStorage for TestStorage {
    type Resource = (StorageId, ByteRange);
    /// The size of memory the caller owns.
    type External = u64;

    fn alloc(&mut self, size: u64) -> Result<StorageId, ServerError> {
        let mut log = self.log.lock().unwrap();
        if self.refuse_after.is_some_and(|n| log.allocs.len() >= n) {
            return Err(ServerError::OutOfMemory(Box::new(OutOfMemory {
                requested: size,
                pool: PoolName {
                    memory: MemoryKind::Device,
                    pool: PoolKind::Dynamic,
                },
                reason: "the test storage is full".into(),
                pools: Vec::new(),
                graphs: Vec::new(),
            })));
        }
        log.allocs.push(size);
        self.next += 1;
        Ok(StorageId(self.next - 1))
    }

    fn dealloc(&mut self, id: StorageId) {
        self.log.lock().unwrap().deallocs.push(id);
    }

    fn adopt(&mut self, size: u64) -> Result<(StorageId, u64), ServerError> {
        self.next += 1;
        Ok((StorageId(self.next - 1), size))
    }

    fn place(&self, size: &u64) -> Result<ExternalPlace, ServerError> {
        // Every import of the test storage is memory of its own.
        ExternalPlace::new(self.next, 0, (*size).max(1))
    }

    fn resource(&mut self, id: StorageId, bytes: ByteRange) -> Self::Resource {
        (id, bytes)
    }

    fn slice_released(&mut self, id: StorageId, bytes: ByteRange) {
        self.log.lock().unwrap().released.push((id, bytes));
    }
}

const S0: StreamId = StreamId::new(0);
const S1: StreamId = StreamId::new(1);

fn manager() -> (MemoryManagement<TestStorage>, Arc<Mutex<Log>>) {
    manager_with(None, MemoryConfig::unlimited())
}

fn manager_with(
    refuse_after: Option<usize>,
    config: MemoryConfig,
) -> (MemoryManagement<TestStorage>, Arc<Mutex<Log>>) {
    let log = Arc::new(Mutex::new(Log::default()));
    let storage = TestStorage {
        next: 0,
        refuse_after,
        log: Arc::clone(&log),
    };
    (
        MemoryManagement::new(storage, MemoryKind::Device, config),
        log,
    )
}

fn reserve(m: &mut MemoryManagement<TestStorage>, size: u64) -> ManagedMemoryHandle {
    m.reserve(size, S0, PageUpdate::Free).unwrap()
}

fn pool(m: &MemoryManagement<TestStorage>, kind: PoolKind) -> crate::memory::PoolUsage {
    m.report()
        .pools
        .into_iter()
        .find(|p| p.pool.pool == kind)
        .unwrap()
}

#[test]
fn dynamic_pool_buckets_by_powers_of_two() {
    let (mut m, _) = manager();
    let a = reserve(&mut m, 300);
    drop(a);
    // 300 and 500 share the 512-byte bucket, so the freed slice is reused.
    let b = reserve(&mut m, 500);
    let loc = m.location(b.id()).unwrap();
    assert_eq!(loc.pool.pool, PoolKind::Dynamic);
    assert_eq!((loc.bytes.start(), loc.bytes.len()), (0, 512));
    assert_eq!(pool(&m, PoolKind::Dynamic).reserved, DYNAMIC_PAGE_BYTES);
}

/// Issue 32, item 7: the page size is a setting; both pools grow by it, and a larger
/// allocation still gets a page of its own size.
#[test]
fn pools_grow_by_the_configured_page_size() {
    let config = MemoryConfig::unlimited().with_page_bytes(64 << 10).unwrap();
    let (mut m, log) = manager_with(None, config);
    let _a = reserve(&mut m, 300);
    assert_eq!(pool(&m, PoolKind::Dynamic).reserved, 64 << 10);
    m.set_mode(AllocationMode::Persistent);
    let _b = reserve(&mut m, 1000);
    assert_eq!(pool(&m, PoolKind::Persistent).reserved, 64 << 10);
    let _c = reserve(&mut m, 100 << 10);
    assert_eq!(
        log.lock().unwrap().allocs,
        vec![64 << 10, 64 << 10, 100 << 10]
    );
    for bad in [0, 100, (1 << 40) + 256] {
        assert!(
            MemoryConfig::unlimited().with_page_bytes(bad).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn persistent_pool_reuses_only_an_identical_padded_size() {
    let (mut m, _) = manager();
    m.set_mode(AllocationMode::Persistent);
    let a = reserve(&mut m, 512);
    drop(a);
    let b = reserve(&mut m, 768);
    let c = reserve(&mut m, 500);
    let (lb, lc) = (m.location(b.id()).unwrap(), m.location(c.id()).unwrap());
    assert_eq!(lb.pool.pool, PoolKind::Persistent);
    // 768 could not reuse the 512-byte slice; 500 pads to 512 and does.
    assert_eq!(lb.bytes, ByteRange::from_bounds(512, 1280));
    assert_eq!(lc.bytes, ByteRange::from_bounds(0, 512));
}

#[test]
fn a_large_slice_gets_a_page_of_its_own_padded_size() {
    let (mut m, log) = manager();
    let _big = reserve(&mut m, DYNAMIC_PAGE_BYTES * 3 + 1);
    assert_eq!(log.lock().unwrap().allocs, vec![DYNAMIC_PAGE_BYTES * 4]);
}

#[test]
fn a_handle_counts_towards_ownership_and_a_binding_does_not() {
    let (mut m, _) = manager();
    let h = reserve(&mut m, 64);
    assert!(h.can_mut());
    let b = h.binding();
    assert!(h.can_mut(), "a binding is not an owner");
    let h2 = h.clone();
    assert!(!h.can_mut() && !h2.can_mut());
    drop(h2);
    assert!(h.can_mut());
    drop(h);
    // The binding alone keeps the slice out of its pool.
    m.reclaim();
    assert!(m.is_live(b.id()));
    drop(b);
    m.reclaim();
    assert!(!m.is_live(ManagedMemoryHandle::fresh(MemoryId::new(0), 1).id()));
}

#[test]
fn a_binding_knows_whether_a_handle_still_owns_its_allocation() {
    let (mut m, _) = manager();
    let h = reserve(&mut m, 64);
    let b = h.binding();
    assert!(b.user_held(), "the handle the manager handed out");
    let h2 = h.clone();
    drop(h);
    assert!(
        b.user_held() && b.clone().user_held(),
        "a clone still owns it"
    );
    drop(h2);
    assert!(!b.user_held(), "only the manager's own handle is left");
    m.reclaim();
    assert!(
        m.is_live(b.id()) && !b.user_held(),
        "the binding alone keeps it"
    );

    // A placeholder pinned for a slice nobody holds was never handed out.
    m.capture_begin();
    m.capture_priming_end();
    let tmp = reserve(&mut m, 1024);
    m.bind(tmp.id()).unwrap();
    drop(tmp);
    m.reclaim();
    let retained = m.capture_end();
    assert_eq!(retained.len(), 1);
    assert!(!retained[0].user_held());
    let ids = [b.id(), retained[0].id()];
    drop((retained, b));
    m.reclaim();
    assert!(ids.iter().all(|&id| !m.is_live(id)));
}

#[test]
fn a_slice_goes_back_to_its_pool_only_when_nothing_holds_it() {
    let (mut m, log) = manager();
    let h = reserve(&mut m, 64);
    let id = h.id();
    let b = h.binding();
    drop(h);
    m.reclaim();
    assert!(m.is_live(id));
    assert!(log.lock().unwrap().released.is_empty());
    drop(b);
    m.reclaim();
    assert!(!m.is_live(id));
    assert_eq!(
        log.lock().unwrap().released,
        vec![(StorageId(0), ByteRange::from_bounds(0, 256))]
    );
    // The slice handed out again gets a new id.
    let again = reserve(&mut m, 64);
    assert_ne!(again.id(), id);
    assert_eq!(m.location(again.id()).unwrap().bytes.start(), 0);
}

#[test]
fn priming_keeps_the_working_set_not_the_peak() {
    // Slices of a whole page each, so every distinct slice is a page of storage.
    let size = PERSISTENT_PAGE_BYTES;
    let (mut m, _) = manager();
    m.capture_begin();
    // Warmup: three sequential reserve/drop cycles. Without priming they would share one
    // slice (peak 1); priming holds each, so the pool grows to the working set (3).
    for _ in 0..3 {
        drop(m.reserve(size, S0, PageUpdate::Free).unwrap());
    }
    let warm = pool(&m, PoolKind::Persistent);
    assert_eq!(warm.pages, 3);
    m.capture_priming_end();
    // The recording holds three at once, and may not grow a pool: all three fit.
    let frozen = PageUpdate::Freeze { recording: S0 };
    let held: Vec<_> = (0..3)
        .map(|_| m.reserve(size, S0, frozen).unwrap())
        .collect();
    assert_eq!(pool(&m, PoolKind::Persistent).reserved, warm.reserved);
    drop(held);
    drop(m.capture_end());
}

#[test]
fn without_priming_the_pool_only_reaches_the_peak() {
    // The control for the test above: the same warmup, unarmed, leaves one page and the
    // held run has to grow, which a recording may not.
    let size = PERSISTENT_PAGE_BYTES;
    let (mut m, _) = manager();
    m.set_mode(AllocationMode::Persistent);
    for _ in 0..3 {
        drop(m.reserve(size, S0, PageUpdate::Free).unwrap());
    }
    assert_eq!(pool(&m, PoolKind::Persistent).pages, 1);
    let frozen = PageUpdate::Freeze { recording: S0 };
    let first = m.reserve(size, S0, frozen).unwrap();
    let second = m.reserve(size, S0, frozen);
    assert!(matches!(second, Err(ServerError::AllocInWindow { .. })));
    drop(first);
}

#[test]
fn priming_holds_dropped_slices_until_priming_ends() {
    let (mut m, _) = manager();
    m.capture_begin();
    let id = reserve(&mut m, 64).id();
    m.reclaim();
    assert!(m.is_live(id), "primed slices stay allocated");
    m.capture_priming_end();
    m.reclaim();
    assert!(!m.is_live(id), "and go back to the pool when priming ends");
    drop(m.capture_end());
}

#[test]
fn priming_does_not_make_a_buffer_look_shared() {
    let (mut m, _) = manager();
    m.capture_begin();
    let h = reserve(&mut m, 64);
    assert!(
        h.can_mut(),
        "warmup must make the same in-place decisions as the recording"
    );
    drop(m.capture_end());
}

#[test]
fn capture_end_releases_primed_slices_when_priming_never_ended() {
    let (mut m, _) = manager();
    m.capture_begin();
    let id = reserve(&mut m, 64).id();
    let retained = m.capture_end();
    // Retained for the graph (it was handed out while armed), but the priming hold is
    // gone: dropping the graph's binding frees it.
    assert_eq!(
        retained.iter().map(|b| b.id()).collect::<Vec<_>>(),
        vec![id]
    );
    drop(retained);
    m.reclaim();
    assert!(!m.is_live(id));
    assert!(!m.is_priming() && !m.is_armed());
}

#[test]
fn a_preexisting_slice_freed_and_reused_while_armed_is_retained() {
    let (mut m, _) = manager();
    m.set_mode(AllocationMode::Persistent);
    let before = reserve(&mut m, 1024);
    let before_location = m.location(before.id()).unwrap();
    m.capture_begin();
    m.capture_priming_end();
    drop(before);
    // Inside the window the freed slice is reused: a snapshot taken at arming would
    // miss it; touching on hand-out does not.
    let reused = reserve(&mut m, 1024);
    assert_eq!(
        m.location(reused.id()).unwrap().bytes,
        before_location.bytes
    );
    let retained = m.capture_end();
    assert_eq!(
        retained.iter().map(|b| b.id()).collect::<Vec<_>>(),
        vec![reused.id()]
    );
    drop(reused);
    m.reclaim();
    assert_eq!(
        pool(&m, PoolKind::Persistent).slices_in_use,
        1,
        "the graph's binding keeps the slice from being handed out over it"
    );
}

#[test]
fn untouched_free_slices_are_not_retained() {
    let (mut m, _) = manager();
    m.set_mode(AllocationMode::Persistent);
    drop(reserve(&mut m, 1024));
    let untouched_live = reserve(&mut m, 2048);
    m.capture_begin();
    m.capture_priming_end();
    let used = reserve(&mut m, 4096);
    let retained = m.capture_end();
    assert_eq!(
        retained.iter().map(|b| b.id()).collect::<Vec<_>>(),
        vec![used.id()]
    );
    drop(untouched_live);
}

#[test]
fn a_preexisting_buffer_stays_updatable_in_place_after_arming_and_disarming() {
    let (mut m, _) = manager();
    let weight = reserve(&mut m, 4096);
    m.capture_begin();
    // A recorded launch reads the weight: it is bound, so touched, so retained.
    m.bind(weight.id()).unwrap();
    assert!(weight.can_mut());
    m.capture_priming_end();
    let retained = m.capture_end();
    assert_eq!(retained.len(), 1);
    assert!(
        weight.can_mut(),
        "the graph holds a binding, which is not an owner"
    );
    drop(retained);
    assert!(weight.can_mut());
}

#[test]
fn allocations_go_to_the_persistent_pool_while_armed_and_the_mode_is_restored() {
    let (mut m, _) = manager();
    m.capture_begin();
    m.set_mode(AllocationMode::Dynamic);
    let h = reserve(&mut m, 64);
    assert_eq!(m.location(h.id()).unwrap().pool.pool, PoolKind::Persistent);
    m.set_mode(AllocationMode::Persistent);
    drop(m.capture_end());
    assert_eq!(m.mode(), AllocationMode::Persistent);
    m.set_mode(AllocationMode::Dynamic);
    let d = reserve(&mut m, 64);
    assert_eq!(m.location(d.id()).unwrap().pool.pool, PoolKind::Dynamic);
}

#[test]
fn capture_begin_is_reentrant() {
    let (mut m, _) = manager();
    m.capture_begin();
    let a = reserve(&mut m, 64);
    m.capture_begin();
    let retained = m.capture_end();
    assert_eq!(retained.len(), 1, "the second begin kept the touched set");
    drop(a);
}

#[rstest]
#[case::freeze(PageUpdate::Freeze { recording: S1 })]
#[case::hold(PageUpdate::Hold { recording: S1 })]
fn cleanup_refused_by_page_update_changes_nothing(#[case] update: PageUpdate) {
    let (mut m, log) = manager();
    let a = reserve(&mut m, 64);
    let b = reserve(&mut m, DYNAMIC_PAGE_BYTES * 2);
    drop(b);
    let before = m.report();
    let err = m.cleanup(update).unwrap_err();
    assert!(err.to_string().contains("stream#1"), "{err}");
    assert_eq!(m.report(), before);
    assert!(log.lock().unwrap().deallocs.is_empty());
    let err = m.renumber(update).unwrap_err();
    assert!(err.to_string().contains("stream#1"), "{err}");
    assert!(m.is_live(a.id()));
}

#[test]
fn cleanup_releases_empty_pages_and_renumber_closes_the_holes() {
    let (mut m, log) = manager();
    let first = reserve(&mut m, DYNAMIC_PAGE_BYTES);
    let second = reserve(&mut m, DYNAMIC_PAGE_BYTES);
    let third = reserve(&mut m, DYNAMIC_PAGE_BYTES);
    assert_eq!(m.location(third.id()).unwrap().page, PageId::new(2));
    drop((first, second));
    let report = m.cleanup(PageUpdate::Free).unwrap();
    assert_eq!(report.pages_released, 2);
    assert_eq!(report.bytes_released, 2 * DYNAMIC_PAGE_BYTES);
    assert_eq!(
        log.lock().unwrap().deallocs,
        vec![StorageId(0), StorageId(1)]
    );
    // Released pages leave holes; the survivor keeps its number until renumbering.
    assert_eq!(m.location(third.id()).unwrap().page, PageId::new(2));
    m.renumber(PageUpdate::Free).unwrap();
    assert_eq!(m.location(third.id()).unwrap().page, PageId::new(0));
    let key = BufferBinding::whole(&third.binding(), S0, Access::Read).claim_key();
    assert_eq!(m.resource(key).unwrap().0, StorageId(2));
}

#[rstest]
#[case::frozen_by_own_window(PageUpdate::Freeze { recording: S0 }, S0)]
#[case::frozen_by_a_neighbour(PageUpdate::Freeze { recording: S1 }, S0)]
fn growth_refused_names_size_pool_and_streams(
    #[case] update: PageUpdate,
    #[case] stream: StreamId,
) {
    let (mut m, _) = manager();
    m.capture_begin();
    let err = m.reserve(4096, stream, update).unwrap_err();
    match &err {
        ServerError::AllocInWindow {
            size,
            pool,
            stream: s,
            recording,
        } => {
            assert_eq!(*size, 4096);
            assert_eq!(pool.to_string(), "device.persistent");
            assert_eq!(*s, stream);
            assert_eq!(Some(*recording), update.recording());
        }
        other => panic!("unexpected {other}"),
    }
    assert_eq!(m.report().reserved(), 0, "nothing grew");
}

#[test]
fn growth_is_allowed_while_a_neighbour_holds_pages() {
    let (mut m, _) = manager();
    let h = m
        .reserve(64, S0, PageUpdate::Hold { recording: S1 })
        .unwrap();
    assert_eq!(m.report().reserved(), DYNAMIC_PAGE_BYTES);
    drop(h);
}

#[test]
fn a_limit_refuses_growth_with_every_pool_figure() {
    let (mut m, _) = manager_with(None, MemoryConfig::limited(DYNAMIC_PAGE_BYTES).unwrap());
    let _a = reserve(&mut m, 64);
    let err = m
        .reserve(DYNAMIC_PAGE_BYTES, S0, PageUpdate::Free)
        .unwrap_err();
    let ServerError::OutOfMemory(oom) = &err else {
        panic!("unexpected {err}")
    };
    assert_eq!(oom.requested, DYNAMIC_PAGE_BYTES);
    assert_eq!(oom.pools.len(), 2);
    assert_eq!(oom.pools[0].reserved, DYNAMIC_PAGE_BYTES);
    assert!(err.to_string().contains("limit"), "{err}");
}

#[test]
fn a_storage_refusal_gets_every_pool_figure() {
    let (mut m, _) = manager_with(Some(1), MemoryConfig::unlimited());
    let _a = reserve(&mut m, DYNAMIC_PAGE_BYTES);
    let err = m
        .reserve(DYNAMIC_PAGE_BYTES, S0, PageUpdate::Free)
        .unwrap_err();
    let ServerError::OutOfMemory(oom) = &err else {
        panic!("unexpected {err}")
    };
    assert_eq!(oom.pools[0].in_use, DYNAMIC_PAGE_BYTES);
    // The manager is still usable: a free slice is still handed out.
    drop(_a);
    assert!(m.reserve(DYNAMIC_PAGE_BYTES, S0, PageUpdate::Free).is_ok());
}

#[test]
fn the_report_counts_reserved_and_in_use_per_pool() {
    let (mut m, _) = manager();
    let _a = reserve(&mut m, 100);
    m.set_mode(AllocationMode::Persistent);
    let _b = reserve(&mut m, 1000);
    let report = m.report();
    assert_eq!(
        report.to_string(),
        "device.dynamic: 1 pages, 1048576 B reserved, 256 B in use in 1 slices; 1 driver allocations, 0 freed\n\
         device.persistent: 1 pages, 1048576 B reserved, 1024 B in use in 1 slices; 1 driver allocations, 0 freed"
    );
    assert_eq!(report.in_use(), 1280);
    assert_eq!(
        (report.pages(), report.allocations(), report.frees()),
        (2, 2, 0)
    );
    // Freed and cleaned up, every page goes back, and the counts say so.
    drop((_a, _b));
    m.cleanup(PageUpdate::Free).unwrap();
    let report = m.report();
    assert_eq!(
        (
            report.pages(),
            report.slices_in_use(),
            report.allocations(),
            report.frees()
        ),
        (0, 0, 2, 2)
    );
}

#[test]
fn resource_resolves_a_sub_range_within_the_slice() {
    let (mut m, _) = manager();
    let _pad = reserve(&mut m, 256);
    let h = reserve(&mut m, 256);
    let key = BufferBinding::new(&h.binding(), S0, 16, 32, Access::Read)
        .unwrap()
        .claim_key();
    assert_eq!(
        m.resource(key).unwrap(),
        (StorageId(0), ByteRange::from_bounds(272, 304))
    );
}

fn unknown_key() -> ClaimKey {
    ClaimKey {
        memory: MemoryId::new(99),
        range: ByteRange::from_bounds(0, 4),
    }
}

#[rstest]
#[case::reserve_zero(|m: &mut MemoryManagement<TestStorage>| m.reserve(0, S0, PageUpdate::Free).map(|_| ()), "allocation size 0")]
#[case::reserve_too_large(|m: &mut MemoryManagement<TestStorage>| m.reserve(MAX_ALLOCATION_BYTES + 1, S0, PageUpdate::Free).map(|_| ()), "allocation size 1099511627777")]
#[case::bind_unknown(|m: &mut MemoryManagement<TestStorage>| m.bind(MemoryId::new(99)).map(|_| ()), "unknown memory buf#99")]
#[case::location_unknown(|m: &mut MemoryManagement<TestStorage>| m.location(MemoryId::new(99)).map(|_| ()), "unknown memory buf#99")]
#[case::resource_unknown(|m: &mut MemoryManagement<TestStorage>| m.resource(unknown_key()).map(|_| ()), "unknown memory buf#99")]
#[case::resource_past_end(|m: &mut MemoryManagement<TestStorage>| {
    let h = m.reserve(8, S0, PageUpdate::Free).unwrap();
    let key = ClaimKey { memory: h.id(), range: ByteRange::from_bounds(4, 12) };
    m.resource(key).map(|_| ())
}, "invalid binding buf#0[4+8] (8 B)")]
fn bad_input_is_a_typed_error_naming_the_value(
    #[case] call: fn(&mut MemoryManagement<TestStorage>) -> Result<(), ServerError>,
    #[case] names: &str,
) {
    let (mut m, _) = manager();
    let err = call(&mut m).unwrap_err();
    assert!(err.to_string().contains(names), "{err}");
    // The manager stays usable.
    assert!(m.reserve(64, S0, PageUpdate::Free).is_ok());
}

#[test]
fn a_zero_limit_is_refused() {
    let err = MemoryConfig::limited(0).unwrap_err();
    assert!(err.to_string().contains("memory limit 0"), "{err}");
}

#[rstest]
#[case::empty(0, 0)]
#[case::past_end(60, 8)]
#[case::overflow(u64::MAX, 2)]
fn a_binding_outside_its_allocation_is_refused(#[case] offset: u64, #[case] len: u64) {
    let (mut m, _) = manager();
    let h = reserve(&mut m, 64);
    let err = BufferBinding::new(&h.binding(), S0, offset, len, Access::Read).unwrap_err();
    assert!(
        err.to_string()
            .contains(&format!("invalid binding buf#0[{offset}+{len}]")),
        "{err}"
    );
}

#[test]
fn a_slice_used_dropped_and_taken_back_inside_the_window_is_still_pinned() {
    let (mut m, _) = manager();
    m.capture_begin();
    m.capture_priming_end();
    let tmp = reserve(&mut m, 1024);
    m.bind(tmp.id()).unwrap();
    let slot = m.location(tmp.id()).unwrap();
    drop(tmp);
    // Another size: the pool takes the dropped slice back, but does not reuse it.
    let other = reserve(&mut m, 4096);
    let retained = m.capture_end();
    assert_eq!(retained.len(), 2);
    // A later request of the dropped slice's size, in its pool, may not land on it.
    m.set_mode(AllocationMode::Persistent);
    let later = reserve(&mut m, 1024);
    let landed = m.location(later.id()).unwrap();
    assert_eq!(landed.pool, slot.pool);
    assert_ne!((landed.page, landed.bytes), (slot.page, slot.bytes));
    drop((retained, other));
}

#[test]
fn cleanup_and_renumber_are_refused_while_armed() {
    let (mut m, log) = manager();
    drop(reserve(&mut m, DYNAMIC_PAGE_BYTES));
    m.capture_begin();
    let err = m.cleanup(PageUpdate::Free).unwrap_err();
    assert!(err.to_string().contains("capture is armed"), "{err}");
    assert!(m.renumber(PageUpdate::Free).is_err());
    assert!(log.lock().unwrap().deallocs.is_empty());
    drop(m.capture_end());
    assert_eq!(m.cleanup(PageUpdate::Free).unwrap().pages_released, 1);
}

#[test]
fn an_import_is_a_page_of_its_own_never_reused_and_not_counted_as_the_librarys() {
    let (mut m, log) = manager();
    let imported = m.import(1000).unwrap();
    assert_eq!(imported.size(), 1000);
    let usage = pool(&m, PoolKind::Imported);
    assert_eq!((usage.pages, usage.slices_in_use), (1, 1));
    let report = m.report();
    assert_eq!(
        report.pages(),
        0,
        "not a driver allocation of the library's"
    );
    assert_eq!(report.allocations(), 0);
    assert!(log.lock().unwrap().allocs.is_empty(), "nothing allocated");
    // Freed by its holder: no other allocation ever lands in it.
    let page = m.location(imported.id()).unwrap();
    drop(imported);
    m.reclaim();
    let other = reserve(&mut m, 1000);
    assert_ne!(m.location(other.id()).unwrap().pool, page.pool);
    // A cleanup forgets the page (the storage is told, and frees nothing of its own).
    let released = m.cleanup(PageUpdate::Free).unwrap();
    assert_eq!(pool(&m, PoolKind::Imported).pages, 0);
    assert_eq!(
        released.pages_released, 0,
        "an imported page is not one of the library's pages released"
    );
    assert_eq!(log.lock().unwrap().deallocs.len(), 1);
    // A zero-sized import is refused, forgotten at once.
    assert!(m.import(0).is_err());
    assert_eq!(log.lock().unwrap().deallocs.len(), 2);
    drop(other);
}

#[test]
fn an_import_while_armed_is_touched_and_pinned_like_an_allocation() {
    let (mut m, _) = manager();
    m.capture_begin();
    let imported = m.import(512).unwrap();
    m.capture_priming_end();
    let pinned = m.capture_end();
    assert!(pinned.iter().any(|b| b.id() == imported.id()));
    drop(imported);
    m.reclaim();
    assert_eq!(
        pool(&m, PoolKind::Imported).slices_in_use,
        1,
        "the graph's binding keeps the import's slice"
    );
    drop(pinned);
    m.reclaim();
    assert_eq!(pool(&m, PoolKind::Imported).slices_in_use, 0);
}

/// `locate` keeps the last allocations it found (`recent.rs`): what it answers from
/// them is what the map and the pool say, after a renumbering and a reclaim too.
#[test]
fn a_located_allocation_is_found_where_it_is_after_renumbering_and_not_after_reclaim() {
    let (mut m, _) = manager();
    let first = reserve(&mut m, DYNAMIC_PAGE_BYTES);
    let kept = reserve(&mut m, DYNAMIC_PAGE_BYTES);
    let key = BufferBinding::new(&kept.binding(), S0, 16, 32, Access::Read)
        .unwrap()
        .claim_key();
    let (location, resource) = m.bind_resource(key).unwrap();
    assert_eq!(location.page, PageId::new(1));
    assert_eq!(resource, (StorageId(1), ByteRange::from_bounds(16, 48)));
    assert_eq!(
        m.bind_resource(key).unwrap(),
        (location, resource),
        "found again alike"
    );
    drop(first);
    m.cleanup(PageUpdate::Free).unwrap();
    assert_eq!(
        m.bind_resource(key).unwrap().0.page,
        PageId::new(1),
        "a hole before it"
    );
    m.renumber(PageUpdate::Free).unwrap();
    let (moved, resource) = m.bind_resource(key).unwrap();
    assert_eq!(
        moved.page,
        PageId::new(0),
        "the renumbered page, not the kept entry"
    );
    assert_eq!(resource, (StorageId(1), ByteRange::from_bounds(16, 48)));
    let id = kept.id();
    drop(kept);
    m.reclaim();
    assert!(
        matches!(m.bind_resource(key), Err(ServerError::UnknownMemory(gone)) if gone == id),
        "taken back: unknown, whatever was kept"
    );
}
