//! Unit tests of the info cache: modes, eviction, window pins and graph pins.

use rstest::rstest;

use super::*;

type Cache = MetadataInfoCache<u32>;

fn policy(max_entries: usize, max_cached_bytes: usize) -> CachePolicy {
    CachePolicy::new(max_entries, max_cached_bytes).expect("valid policy")
}

fn g(index: u64) -> GraphId {
    GraphId::new(index)
}

/// Inserts and expects the value cached; returns what was evicted.
fn cached(cache: &mut Cache, words: &[u64], value: u32) -> Vec<u32> {
    match cache.insert(words, value).expect("insert") {
        Inserted::Cached { evicted } => evicted,
        refused => panic!("{words:?} not cached: {refused:?}"),
    }
}

/// `n` words (8 bytes each), all `seed`.
fn words(n: usize, seed: u64) -> Vec<u64> {
    vec![seed; n]
}

fn commit(cache: &mut Cache, graph: GraphId) -> usize {
    cache.capture_commit(graph).expect("commit")
}

fn release(cache: &mut Cache, graph: GraphId) -> Vec<u32> {
    let mut freed = cache.graph_release(graph).expect("release");
    freed.sort_unstable();
    freed
}

#[test]
fn normal_mode_evicts_the_least_recently_used_beyond_capacity() {
    let mut c = Cache::new(policy(3, 2048));
    assert!(cached(&mut c, &[1], 10).is_empty());
    assert!(cached(&mut c, &[2], 20).is_empty());
    assert!(cached(&mut c, &[3], 30).is_empty());
    assert_eq!(c.get(&[1]), Some(&10), "1 is now the most recently used");

    assert_eq!(cached(&mut c, &[4], 40), [20], "2 was least recently used");
    assert_eq!(c.len(), 3);
    assert_eq!(c.get(&[2]), None);
    assert_eq!(cached(&mut c, &[5], 50), [30]);
    assert!(c.contains(&[1]) && c.contains(&[4]) && c.contains(&[5]));
    assert!(!c.is_pinned(&[1]), "Normal mode pins nothing");
    assert_eq!(c.window_len(), 0);
}

#[test]
fn normal_mode_refuses_large_entries() {
    let mut c = Cache::default();
    let largest = words(256, 1); // 2048 bytes
    let too_large = words(257, 2);
    assert!(c.should_cache(&largest));
    assert!(!c.should_cache(&too_large));

    assert!(cached(&mut c, &largest, 1).is_empty());
    let refused = c.insert(&too_large, 2).expect("insert");
    assert_eq!(
        refused,
        Inserted::Refused {
            value: 2,
            reason: Refusal::TooLarge
        }
    );
    assert!(!refused.is_cached());
    assert_eq!(refused.into_values(), [2], "handed back for freeing");
    assert!(!c.contains(&too_large));
    assert_eq!(c.len(), 1);
}

#[test]
fn capture_mode_caches_any_size_and_evicts_nothing() {
    let mut c = Cache::new(policy(2, 16));
    c.set_mode(CacheMode::Capture);
    assert_eq!(c.mode(), CacheMode::Capture);
    for seed in 0..5_u32 {
        let w = words(1000, seed.into());
        assert!(c.should_cache(&w));
        assert!(cached(&mut c, &w, seed).is_empty(), "nothing evicted");
    }
    assert_eq!(c.len(), 5, "beyond max_entries");
    assert_eq!(c.window_len(), 5, "every insert pinned to the window");
    assert!(c.is_pinned(&words(1000, 0)));
}

#[test]
fn a_capture_hit_on_a_normal_mode_entry_pins_it() {
    let mut c = Cache::default();
    assert!(cached(&mut c, &[7, 8], 1).is_empty());
    assert!(!c.is_pinned(&[7, 8]));

    c.set_mode(CacheMode::Capture);
    assert_eq!(c.get(&[7, 8]), Some(&1));
    assert!(c.is_pinned(&[7, 8]));
    assert_eq!(c.pins(&[7, 8]), 1);
    assert_eq!(commit(&mut c, g(0)), 1);
    assert_eq!(c.pinned_by(g(0)), Some(1));
}

#[test]
fn a_window_pins_each_entry_once_however_many_hits() {
    let mut c = Cache::default();
    c.set_mode(CacheMode::Capture);
    assert!(cached(&mut c, &[1, 2], 1).is_empty());
    assert!(cached(&mut c, &[3], 2).is_empty());
    for _ in 0..10 {
        assert_eq!(c.get(&[1, 2]), Some(&1));
        assert_eq!(c.get(&[3]), Some(&2));
    }
    assert_eq!((c.pins(&[1, 2]), c.pins(&[3])), (1, 1));
    assert_eq!(c.window_len(), 2);
    assert_eq!(commit(&mut c, g(0)), 2);

    // The next window pins the same entries once more, once.
    for _ in 0..10 {
        assert_eq!(c.get(&[1, 2]), Some(&1));
    }
    assert_eq!(c.pins(&[1, 2]), 2, "graph#0 and the new window");
    assert_eq!(commit(&mut c, g(1)), 1);
}

#[test]
fn commit_files_the_window_pins_under_the_graph() {
    let mut c = Cache::default();
    assert!(cached(&mut c, &[9], 9).is_empty(), "a Normal entry, unused");
    c.set_mode(CacheMode::Capture);
    assert!(cached(&mut c, &[1], 1).is_empty());
    assert!(cached(&mut c, &[2], 2).is_empty());
    assert_eq!(c.pinned_by(g(0)), None);

    assert_eq!(commit(&mut c, g(0)), 2);
    assert_eq!(c.pinned_by(g(0)), Some(2));
    assert_eq!(c.window_len(), 0, "the window is closed");
    assert_eq!((c.pins(&[1]), c.pins(&[2]), c.pins(&[9])), (1, 1, 0));

    // An empty window files nothing but registers the graph.
    assert_eq!(commit(&mut c, g(1)), 0);
    assert_eq!(c.pinned_by(g(1)), Some(0));
    assert_eq!(release(&mut c, g(1)), Vec::<u32>::new());
}

#[rstest]
#[case::small_entry_stays_cached(1, false)]
#[case::large_entry_is_freed(300, true)]
fn a_pin_is_refcounted_across_graphs(#[case] n_words: usize, #[case] freed_at_last: bool) {
    let w = words(n_words, 5);
    let mut c = Cache::default();
    c.set_mode(CacheMode::Capture);
    assert!(cached(&mut c, &w, 5).is_empty());
    assert_eq!(commit(&mut c, g(0)), 1);
    assert_eq!(c.get(&w), Some(&5));
    assert_eq!(commit(&mut c, g(1)), 1);
    assert_eq!(c.pins(&w), 2);
    c.set_mode(CacheMode::Normal);

    assert!(release(&mut c, g(0)).is_empty(), "graph#1 still holds it");
    assert!(c.contains(&w) && c.is_pinned(&w));
    assert_eq!(c.pins(&w), 1);

    let freed = release(&mut c, g(1));
    assert!(!c.is_pinned(&w));
    if freed_at_last {
        assert_eq!(freed, [5], "Normal mode would not cache it");
        assert!(!c.contains(&w));
    } else {
        assert!(freed.is_empty());
        assert_eq!(c.get(&w), Some(&5), "an ordinary entry now");
    }
}

#[test]
fn release_keeps_entries_the_open_window_pins() {
    let w = words(300, 1);
    let mut c = Cache::default();
    c.set_mode(CacheMode::Capture);
    assert!(cached(&mut c, &w, 1).is_empty());
    assert_eq!(commit(&mut c, g(0)), 1);
    assert_eq!(c.get(&w), Some(&1), "the next window pins it too");
    assert!(release(&mut c, g(0)).is_empty());
    assert_eq!(c.pins(&w), 1);
    assert_eq!(commit(&mut c, g(1)), 1);
}

#[test]
fn release_evicts_down_to_capacity_in_normal_mode() {
    let mut c = Cache::new(policy(2, 2048));
    c.set_mode(CacheMode::Capture);
    for seed in 1..=4_u32 {
        assert!(cached(&mut c, &[seed.into()], seed).is_empty());
    }
    assert_eq!(c.get(&[1]), Some(&1), "1 is the most recently used");
    assert_eq!(commit(&mut c, g(0)), 4);
    c.set_mode(CacheMode::Normal);

    assert_eq!(release(&mut c, g(0)), [2, 3], "least recently used");
    assert_eq!(c.len(), 2);
    assert!(c.contains(&[1]) && c.contains(&[4]));
}

#[test]
fn discard_unpins_without_removing() {
    let mut c = Cache::new(policy(2, 16));
    assert!(cached(&mut c, &[1], 1).is_empty());
    c.set_mode(CacheMode::Capture);
    assert_eq!(c.get(&[1]), Some(&1));
    assert!(cached(&mut c, &words(100, 2), 2).is_empty());
    assert!(cached(&mut c, &[3], 3).is_empty());

    assert_eq!(c.capture_discard(), 3);
    assert_eq!(c.window_len(), 0);
    assert_eq!(c.len(), 3, "entries kept");
    for w in [&[1][..], &words(100, 2), &[3]] {
        assert!(c.contains(w) && !c.is_pinned(w), "{w:?}");
    }
    // A later commit files nothing from the discarded window.
    assert_eq!(commit(&mut c, g(0)), 0);
}

#[test]
fn eviction_skips_pinned_entries() {
    let mut c = Cache::new(policy(2, 2048));
    c.set_mode(CacheMode::Capture);
    assert!(cached(&mut c, &[1], 1).is_empty());
    assert_eq!(commit(&mut c, g(0)), 1);
    c.set_mode(CacheMode::Normal);

    assert!(cached(&mut c, &[2], 2).is_empty());
    assert_eq!(cached(&mut c, &[3], 3), [2], "1 is older but pinned");
    assert_eq!(cached(&mut c, &[4], 4), [3]);
    assert!(c.contains(&[1]));
}

#[test]
fn a_full_cache_of_pinned_entries_refuses_inserts() {
    let mut c = Cache::new(policy(1, 2048));
    c.set_mode(CacheMode::Capture);
    assert!(cached(&mut c, &[1], 1).is_empty());
    assert_eq!(commit(&mut c, g(0)), 1);
    c.set_mode(CacheMode::Normal);

    assert!(!c.should_cache(&[2]));
    assert_eq!(
        c.insert(&[2], 2).expect("insert"),
        Inserted::Refused {
            value: 2,
            reason: Refusal::Full
        }
    );
    assert!(release(&mut c, g(0)).is_empty());
    assert!(c.should_cache(&[2]));
    assert_eq!(cached(&mut c, &[2], 2), [1]);
}

#[test]
fn clear_unpinned_keeps_pinned_entries() {
    let mut c = Cache::default();
    assert!(cached(&mut c, &[1], 1).is_empty());
    assert!(cached(&mut c, &[2], 2).is_empty());
    c.set_mode(CacheMode::Capture);
    assert_eq!(c.get(&[2]), Some(&2));
    assert!(cached(&mut c, &[3], 3).is_empty());
    assert_eq!(commit(&mut c, g(0)), 2);
    assert!(
        cached(&mut c, &[4], 4).is_empty(),
        "pinned by the open window"
    );

    let mut cleared = c.clear_unpinned();
    cleared.sort_unstable();
    assert_eq!(cleared, [1]);
    assert_eq!(c.len(), 3);
    assert!(c.contains(&[2]) && c.contains(&[3]) && c.contains(&[4]));
}

#[test]
fn slots_are_reused_after_removal() {
    let mut c = Cache::new(policy(1, 2048));
    for seed in 0..10_u32 {
        let evicted = cached(&mut c, &[seed.into()], seed);
        assert_eq!(evicted, seed.checked_sub(1).into_iter().collect::<Vec<_>>());
    }
    assert_eq!(c.len(), 1);
    assert_eq!(c.slots.len(), 1, "the evicted slot is reused");
}

#[test]
fn a_lookup_never_takes_the_last_hit_of_a_slot_reused_since() {
    // One slot: every insert evicts the entry before and reuses its slot, so the slot
    // the last lookup found holds other words by the next lookup.
    let mut c = Cache::new(policy(1, 2048));
    cached(&mut c, &[1, 2], 10);
    let hit = c.lookup(&[1, 2]).expect("cached");
    assert_eq!((*hit.value, hit.uploaded, hit.recorded), (10, true, false));
    assert_eq!(*c.lookup(&[1, 2]).expect("the same words again").value, 10);
    assert_eq!(cached(&mut c, &[3, 4], 20), [10]);
    assert!(
        c.lookup(&[1, 2]).is_none(),
        "evicted: not the slot's new entry"
    );
    assert_eq!(*c.lookup(&[3, 4]).expect("cached").value, 20);
    // Words of the same slot sharing a prefix are other words.
    assert!(c.lookup(&[3]).is_none());
    assert!(c.lookup(&[3, 4, 5]).is_none());
    c.set_uploaded(&[3, 4], false);
    assert!(!c.lookup(&[3, 4]).expect("cached").uploaded);
}

#[test]
fn empty_words_are_never_cached() {
    let mut c = Cache::default();
    assert!(!c.should_cache(&[]));
    c.set_mode(CacheMode::Capture);
    assert!(!c.should_cache(&[]));
    assert_eq!(c.get(&[]), None);
}

#[test]
fn default_policy_is_4096_entries_of_2048_bytes() {
    let p = CachePolicy::default();
    assert_eq!((p.max_entries(), p.max_cached_bytes()), (4096, 2048));
    assert_eq!(Cache::default().policy(), p);
    assert_eq!(Cache::default().mode(), CacheMode::Normal);
}

#[test]
fn the_cache_is_send_and_sync_when_its_values_are() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Cache>();
}

type Call = fn(&mut Cache) -> Result<(), ServerError>;

#[rstest]
#[case::insert_empty_words(
    |c: &mut Cache| c.insert(&[], 0).map(drop),
    "invalid info words []: an info buffer holds at least one word"
)]
#[case::insert_duplicate(
    |c: &mut Cache| c.insert(&[1, 2], 0).map(drop),
    "invalid info words [1, 2]: already cached: look them up before inserting"
)]
#[case::commit_twice(
    |c: &mut Cache| c.capture_commit(GraphId::new(0)).map(drop),
    "invalid graph graph#0: already holds info cache pins"
)]
#[case::release_unknown_graph(
    |c: &mut Cache| c.graph_release(GraphId::new(9)).map(drop),
    "unknown graph graph#9"
)]
#[case::policy_zero_entries(
    |_: &mut Cache| CachePolicy::new(0, 2048).map(drop),
    "invalid info cache max_entries 0: the cache must hold at least one entry"
)]
fn bad_input_is_refused_with_a_typed_error(#[case] call: Call, #[case] message: &str) {
    let mut c = Cache::default();
    c.set_mode(CacheMode::Capture);
    assert!(cached(&mut c, &[1, 2], 12).is_empty());
    assert_eq!(commit(&mut c, g(0)), 1);

    let err = call(&mut c).expect_err("refused");
    assert!(
        matches!(
            err,
            ServerError::InvalidArgument { .. } | ServerError::UnknownGraph(_)
        ),
        "{err:?}"
    );
    assert_eq!(err.to_string(), message);
    // Nothing changed.
    assert_eq!(c.len(), 1);
    assert_eq!(c.pinned_by(g(0)), Some(1));
    assert_eq!(c.pins(&[1, 2]), 1);
}

/// Issue 32, item 5: the index hashes info words, which the caller chooses, with a keyed
/// hasher. 4,000 word pairs built to share one hash under the runtime's unkeyed id
/// hasher (its last word solved for a fixed hash) spread over distinct hashes in the
/// index, so no program's info words can turn a lookup into a scan.
#[test]
fn i32_05_info_words_chosen_to_collide_do_not_collide_in_the_index() {
    use std::hash::{BuildHasher, BuildHasherDefault};

    use crate::id_hash::IdHasher;

    // The id hasher's steps, as `id_hash.rs` defines them.
    const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    let step = |h: u64, w: u64| (h.rotate_left(5) ^ w).wrapping_mul(SEED);
    // SEED's inverse modulo 2^64, by Newton's iteration.
    let mut inverse = SEED;
    for _ in 0..6 {
        inverse = inverse.wrapping_mul(2u64.wrapping_sub(SEED.wrapping_mul(inverse)));
    }
    assert_eq!(SEED.wrapping_mul(inverse), 1);
    let target = 0x1234_5678_9abc_def0u64;
    let keys: Vec<Arc<[u64]>> = (0..4000u64)
        .map(|a| {
            // `[u64]` hashes its length, then its words.
            let h = step(step(0, 2), a);
            let b = h.rotate_left(5) ^ target.wrapping_mul(inverse);
            Arc::from([a, b].as_slice())
        })
        .collect();
    let id = BuildHasherDefault::<IdHasher>::default();
    assert!(
        keys.iter().all(|k| id.hash_one(k) == target),
        "the keys collide under the id hasher"
    );
    let index = Index::default();
    let mut hashes: Vec<u64> = keys.iter().map(|k| index.hasher().hash_one(k)).collect();
    hashes.sort_unstable();
    hashes.dedup();
    assert!(
        hashes.len() >= 3990,
        "the index's hasher gives {} distinct hashes of 4000 keys chosen to collide",
        hashes.len()
    );
    // And the cache keeps them apart.
    let mut cache = Cache::new(policy(8192, 64));
    for (i, k) in keys.iter().enumerate() {
        cached(&mut cache, k, i as u32);
    }
    for (i, k) in keys.iter().enumerate() {
        assert_eq!(cache.get(k).copied(), Some(i as u32));
    }
}
