//! `IdMap` and `IdSet`: hash maps keyed by the runtime's own integer ids (memory, graph,
//! failure and storage ids), hashed by a multiply-rotate word hasher instead of the
//! standard library's SipHash; and `KeyedMap`, for keys a user chooses (info words, the
//! ranges of a claim), hashed by SipHash under a random key.
//!
//! A launch looks ids up in a dozen maps (the memory manager's live slots, the taint
//! ledger, the cross-stream tracks, the info cache, the storage's pages), and SipHash,
//! built to resist keys an attacker chooses, was 14% of an eager launch's host time on
//! lavapipe. These keys are counters the runtime hands out itself, never a user's
//! choice, so a hasher without that resistance is safe here, and costs one multiply a
//! word.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};

/// A hash map keyed by the runtime's own ids.
pub type IdMap<K, V> = HashMap<K, V, BuildHasherDefault<IdHasher>>;

/// A hash map whose keys a user chooses, in whole or in part (info words, a claim's byte
/// range): the standard library's SipHash under a key drawn per map, so no choice of
/// keys can make them collide and a lookup degrade to a scan. [`IdHasher`] is one
/// multiply a word and no key: 4,000 info word pairs chosen to collide under it made
/// launches 6.7 times slower.
pub type KeyedMap<K, V> = HashMap<K, V, std::hash::RandomState>;

/// A hash set of the runtime's own ids.
pub type IdSet<K> = HashSet<K, BuildHasherDefault<IdHasher>>;

/// The word hasher of [`IdMap`]: each word rotated in and multiplied by an odd constant
/// (the scheme of rustc's `FxHasher`). Not for keys an adversary picks.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdHasher {
    hash: u64,
}

/// An odd constant with bits spread through the word.
const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

impl IdHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(5) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for IdHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            self.add(u64::from_le_bytes(w.try_into().expect("8 bytes")));
        }
        let rest = words.remainder();
        if !rest.is_empty() {
            let mut last = [0u8; 8];
            last[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(last));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.hash
    }
}

#[cfg(test)]
mod tests {
    use std::hash::{BuildHasher, Hash};

    use super::*;

    fn hash<T: Hash + ?Sized>(v: &T) -> u64 {
        BuildHasherDefault::<IdHasher>::default().hash_one(v)
    }

    #[test]
    fn distinct_ids_and_slices_hash_apart() {
        let ids: HashSet<u64> = (0..10_000u64).map(|i| hash(&i)).collect();
        assert_eq!(ids.len(), 10_000);
        // Word slices that differ in length or in a trailing zero differ.
        assert_ne!(hash(&[1u64, 0][..]), hash(&[1u64][..]));
        assert_ne!(hash(&[1u64, 2][..]), hash(&[2u64, 1][..]));
        // A tail shorter than a word counts.
        let mut a = IdHasher::default();
        a.write(&[1, 2, 3, 4, 5, 6, 7, 8, 9]);
        let mut b = IdHasher::default();
        b.write(&[1, 2, 3, 4, 5, 6, 7, 8, 10]);
        assert_ne!(a.finish(), b.finish());
    }

    #[test]
    fn a_map_of_ids_works_as_any_map() {
        let mut m: IdMap<(u64, u32), usize> = IdMap::default();
        for i in 0..1000u64 {
            m.insert((i, (i % 7) as u32), i as usize);
        }
        assert_eq!(m.len(), 1000);
        assert_eq!(m.get(&(500, 3)), Some(&500));
        assert_eq!(m.remove(&(999, 5)), Some(999));
        assert!(!m.contains_key(&(999, 5)));
    }
}
