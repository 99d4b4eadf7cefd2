//! `ReadStaging`: the pinned host page a stream reads device memory back through, kept
//! and reused from one read to the next. A copy into pageable memory (the caller's
//! vector) makes the driver stage it through pinned memory of its own, chunk by chunk;
//! a copy into a pinned page runs at full speed, and one `memcpy` hands it over.
//!
//! The page grows to the largest read as the core's [`read_staging_size`] says (a power
//! of two from 64 KiB to 16 MiB). Pinning memory is costly, so a larger read, a read while a
//! capture of the context records (a `cuMemHostAlloc` then would break it: rule 25), or
//! a refused `cuMemHostAlloc` copies straight into the caller's memory as before. A page
//! replaced by a larger one is freed once no capture of the context records; the kept
//! page goes with its stream, which the core drops only at rest (a device torn down
//! while another records leaves its streams to the domain until the window closes). The stream
//! reports what it keeps ([`capture_core::StreamReport::read_staging_bytes`]).

use std::sync::Arc;

use capture_core::backend::read_staging_size;
use capture_core::{MemoryKind, PoolKind, PoolName, ServerError};

use crate::gpu::Gpu;
use crate::raw;

/// A pinned page, freed (in its context) when dropped.
struct Pinned {
    gpu: Arc<Gpu>,
    addr: usize,
    size: u64,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        match raw::Current::enter(self.gpu.context) {
            Ok(_current) => raw::host_free(self.addr),
            Err(error) => {
                tracing::warn!(target: "capture", %error, "a read-back page could not be freed");
            }
        }
    }
}

/// A stream's kept read-back page, if it has made one yet.
#[derive(Default)]
pub(crate) struct ReadStaging {
    kept: Option<Pinned>,
}

impl ReadStaging {
    /// The bytes the kept page holds (0 before the first read that made it).
    pub(crate) fn bytes(&self) -> u64 {
        self.kept.as_ref().map_or(0, |p| p.size)
    }

    /// The kept page when it holds `len` bytes or a large enough one can be made now;
    /// `None` when the read should copy straight into the caller's memory.
    fn page_for(&mut self, gpu: &Arc<Gpu>, len: u64) -> Option<usize> {
        let size = read_staging_size(len)?;
        if self.bytes() < len {
            let pool = PoolName {
                memory: MemoryKind::Host,
                pool: PoolKind::Dynamic,
            };
            let made = gpu.domain().at_rest(|| raw::host_alloc(size, pool));
            let addr = match made {
                Some(Ok(addr)) => addr,
                Some(Err(error)) => {
                    tracing::debug!(target: "capture", %error, "no pinned read-back page; reading unstaged");
                    return None;
                }
                None => return None,
            };
            let page = Pinned {
                gpu: Arc::clone(gpu),
                addr,
                size,
            };
            if let Some(old) = self.kept.replace(page) {
                gpu.domain().release_at_rest(Box::new(old));
            }
        }
        self.kept.as_ref().map(|p| p.addr)
    }

    /// Copies `out.len()` bytes at `src` into `out` on `stream` (its context current),
    /// after everything enqueued before, and waits for it.
    pub(crate) fn read(
        &mut self,
        gpu: &Arc<Gpu>,
        stream: usize,
        src: u64,
        out: &mut [u8],
    ) -> Result<(), ServerError> {
        match self.page_for(gpu, out.len() as u64) {
            Some(at) => {
                raw::copy_to_pinned(at, src, out.len(), stream)?;
                raw::stream_sync(stream)?;
                raw::read_host(at, out);
                Ok(())
            }
            None => raw::copy_to_host(out, src, stream),
        }
    }
}
