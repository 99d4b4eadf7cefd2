//! Hot-path allocation checks: info_cache. Every launch looks its info words up; a decode
//! step with stable shapes hits every time, in Normal mode and inside capture windows.

use capture_core::info_cache::{CacheMode, MetadataInfoCache};

use crate::{allocations_during, assert_amortised};

pub(crate) const CHECKS: &[crate::Check] = &[
    ("info_cache::hit_in_normal_mode", hit_in_normal_mode),
    (
        "info_cache::hit_pinned_in_capture_mode",
        hit_pinned_in_capture_mode,
    ),
];

/// Eight launches' info words: shapes and strides.
fn launches() -> Vec<Vec<u64>> {
    (0..8_u64)
        .map(|i| vec![1, 32, 4096 + i, 128, 4096 * 128, 128, 1])
        .collect()
}

/// A cache holding every launch's words; value `i` for launch `i`.
fn cache_of(launches: &[Vec<u64>]) -> MetadataInfoCache<usize> {
    let mut cache = MetadataInfoCache::default();
    for (i, words) in launches.iter().enumerate() {
        assert!(cache.insert(words, i).unwrap().is_cached());
    }
    cache
}

fn hits(cache: &mut MetadataInfoCache<usize>, launches: &[Vec<u64>], calls: usize) {
    for i in 0..calls {
        let l = i % launches.len();
        assert_eq!(cache.get(&launches[l]), Some(&l));
    }
}

fn hit_in_normal_mode() {
    let launches = launches();
    let mut cache = cache_of(&launches);
    hits(&mut cache, &launches, 100);
    let n = allocations_during(|| hits(&mut cache, &launches, 1_000));
    assert_amortised("MetadataInfoCache::get (Normal)", 1_000, n);
}

fn hit_pinned_in_capture_mode() {
    let launches = launches();
    let mut cache = cache_of(&launches);
    cache.set_mode(CacheMode::Capture);
    // Warmup: the window pins every entry once.
    hits(&mut cache, &launches, 100);
    assert_eq!(cache.window_len(), launches.len());
    let n = allocations_during(|| hits(&mut cache, &launches, 1_000));
    assert_amortised("MetadataInfoCache::get (Capture, pinned)", 1_000, n);
    assert_eq!(cache.window_len(), launches.len());
}
