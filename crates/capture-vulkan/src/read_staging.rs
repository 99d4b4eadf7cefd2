//! `ReadStaging`: the host-visible page a stream reads device-only memory back through,
//! kept and reused from one read to the next instead of a page made and freed per read
//! (on a discrete GPU a `vkAllocateMemory`, a map and a free each time).
//!
//! The page grows to the largest read as the core's [`read_staging_size`] says (a power
//! of two from 64 KiB to 16 MiB); a larger read gets a page of its own, freed when the read is
//! done, so one huge read does not pin its size in host memory for the stream's life.
//! The stream reports what it keeps ([`capture_core::StreamReport::read_staging_bytes`]).

use crate::memory::MemoryUse;
use crate::raw::{self, Gpu, Page};
use capture_core::ServerError;
use capture_core::backend::read_staging_size;

/// A stream's kept read-back page, if it has made one yet.
#[derive(Default)]
pub(crate) struct ReadStaging {
    kept: Option<(Page, u64)>,
}

/// The page a read goes through: the kept one, or one of its own to free after.
pub(crate) enum Staged<'a> {
    Kept(&'a Page),
    Own(Page),
}

impl Staged<'_> {
    pub(crate) fn page(&self) -> &Page {
        match self {
            Staged::Kept(page) => page,
            Staged::Own(page) => page,
        }
    }

    /// Frees a page of the read's own (the kept one stays).
    pub(crate) fn done(self, gpu: &Gpu) {
        if let Staged::Own(page) = self {
            raw::destroy_page(gpu, page);
        }
    }
}

impl ReadStaging {
    /// The bytes the kept page holds (0 before the first staged read).
    pub(crate) fn bytes(&self) -> u64 {
        self.kept.as_ref().map_or(0, |(_, size)| *size)
    }

    /// A page for reading `len` bytes, of the memory `use_` names. No read of the stream
    /// is pending (reads wait for their copy before returning), so the kept page is free
    /// to reuse, or to replace by a larger one.
    pub(crate) fn page_for(
        &mut self,
        gpu: &Gpu,
        len: u64,
        use_: &MemoryUse,
    ) -> Result<Staged<'_>, ServerError> {
        let Some(size) = read_staging_size(len) else {
            return raw::create_page(gpu, len, use_).map(Staged::Own);
        };
        if self.bytes() < len {
            // The new page first: if it cannot be made, the old one stays kept.
            let page = raw::create_page(gpu, size, use_)?;
            if let Some((old, _)) = self.kept.replace((page, size)) {
                raw::destroy_page(gpu, old);
            }
        }
        let (page, _) = self.kept.as_ref().expect("a page is kept now");
        Ok(Staged::Kept(page))
    }

    /// Frees the kept page; the stream's work must be done with it.
    pub(crate) fn free(&mut self, gpu: &Gpu) {
        if let Some((page, _)) = self.kept.take() {
            raw::destroy_page(gpu, page);
        }
    }
}
