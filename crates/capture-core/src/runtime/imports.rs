//! `Imports`: the device's live imports of memory the caller owns, by where each lies
//! ([`ExternalPlace`]). The rules key memory by allocation, so two imports of the same
//! bytes would be two unrelated buffers to every rule (no order between a write through
//! one and a read through the other, no race between two branches writing them, no
//! taint from one to the other): a second import of bytes a live import covers is
//! refused, naming the first. An import stays live until its pool takes it back (its
//! handle and every graph's pin gone, and a cleanup or reclaim ran).

use crate::ids::MemoryId;
use crate::memory::ExternalPlace;

/// The live imports of one device.
#[derive(Debug, Default)]
pub(crate) struct Imports {
    live: Vec<(ExternalPlace, MemoryId)>,
}

impl Imports {
    /// The live import that covers bytes of `place`, if any.
    pub(crate) fn covering(&self, place: &ExternalPlace) -> Option<MemoryId> {
        self.live
            .iter()
            .find(|(p, _)| p.overlaps(place))
            .map(|&(_, id)| id)
    }

    /// Notes import `id` of `place`.
    pub(crate) fn add(&mut self, place: ExternalPlace, id: MemoryId) {
        self.live.push((place, id));
    }

    /// Forgets the imports among `ids`, which their pools took back.
    pub(crate) fn forget(&mut self, ids: &[MemoryId]) {
        if !self.live.is_empty() {
            self.live.retain(|(_, id)| !ids.contains(id));
        }
    }

    /// Whether any import is live.
    pub(crate) fn is_empty(&self) -> bool {
        self.live.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::range::ByteRange;

    fn place(space: u64, start: u64, end: u64) -> ExternalPlace {
        ExternalPlace {
            space,
            range: ByteRange::from_bounds(start, end),
        }
    }

    #[test]
    fn an_import_covers_exactly_its_own_bytes_of_its_own_space() {
        let mut imports = Imports::default();
        imports.add(place(1, 0, 64), MemoryId::new(7));
        assert_eq!(imports.covering(&place(1, 16, 32)), Some(MemoryId::new(7)));
        assert_eq!(imports.covering(&place(1, 63, 80)), Some(MemoryId::new(7)));
        assert_eq!(imports.covering(&place(1, 64, 80)), None);
        assert_eq!(imports.covering(&place(2, 0, 64)), None);
        imports.forget(&[MemoryId::new(7)]);
        assert!(imports.is_empty());
        assert_eq!(imports.covering(&place(1, 0, 64)), None);
    }
}
