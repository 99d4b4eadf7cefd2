//! `Gpu`: one opened device and its context, shared by every backend value on it. One
//! `Gpu` per device ordinal in the process holds the primary context it retained; a
//! context of the caller's gets a `Gpu` of its own that never releases it; every `Gpu`
//! on one context shares that context's capture domain.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use capture_core::backend::CaptureDomain;

use crate::error::{Unavailable, unavailable};
use crate::loops::LoopSupport;
use crate::raw;

/// What keeps a caller's context (and stream) alive while the backend uses them:
/// cudarc's handles, for [`CudaBackend::from_cudarc`].
pub(crate) type Keep = Box<dyn std::any::Any + Send + Sync>;

/// Who owns the context.
#[derive(Debug)]
enum Owner {
    /// [`CudaBackend::new`] retained the device's primary context once; the last handle
    /// releases it once.
    Retained { device: i32 },
    /// The caller's ([`CudaBackend::from_raw_context`]): never retained, released or
    /// destroyed by the backend.
    Caller,
}

/// An opened device: its context, what the driver says of it, and the capture domain
/// of every device the core builds on that context.
pub(crate) struct Gpu {
    pub(crate) context: usize,
    owner: Owner,
    ordinal: i32,
    name: String,
    pub(crate) compute: (i32, i32),
    /// The device's block and shared-memory limits.
    pub(crate) launch: raw::LaunchAttrs,
    driver: i32,
    domain: CaptureDomain,
    /// A stream of the caller's that pooled stream 0 of a device runs on: `Some` while
    /// no pooled stream holds it, `None` while one does or when none was handed over.
    pub(crate) lent: Mutex<Option<usize>>,
    /// Where its streams find their loop pool (rule 30).
    pub(crate) loops: LoopSupport,
    /// What keeps the caller's context and stream alive (cudarc's handles); dropped
    /// last, after everything the backend made in the context.
    _keep: Option<Keep>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu")
            .field("ordinal", &self.ordinal)
            .field("name", &self.name)
            .field("owner", &self.owner)
            .finish_non_exhaustive()
    }
}

/// The devices open in the process: a second backend on an ordinal shares the first
/// one's `Gpu` (the primary context is one per device anyway), and every `Gpu` on one
/// context (a primary context retained here and also handed over by a caller, say) shares
/// its capture domain.
static OPEN: Mutex<Vec<Weak<Gpu>>> = Mutex::new(Vec::new());

/// The open devices, the gone ones forgotten.
fn open_devices() -> MutexGuard<'static, Vec<Weak<Gpu>>> {
    let mut open = OPEN.lock().unwrap_or_else(|p| p.into_inner());
    open.retain(|gpu| gpu.strong_count() > 0);
    open
}

/// The capture domain of `context`: a live device's on it, else a new one.
fn domain_of(open: &[Weak<Gpu>], context: usize) -> CaptureDomain {
    open.iter()
        .filter_map(Weak::upgrade)
        .find(|gpu| gpu.context == context)
        .map_or_else(CaptureDomain::new, |gpu| gpu.domain.clone())
}

impl Drop for Gpu {
    fn drop(&mut self) {
        match self.owner {
            Owner::Retained { device } => raw::release(device),
            Owner::Caller => {}
        }
    }
}

impl Gpu {
    /// Device `ordinal` with its primary context retained: the `Gpu` already open on it
    /// in the process, if any, else a new one. Nothing calls into the driver before the
    /// driver library is known to load.
    pub(crate) fn retained(ordinal: i32) -> Result<Arc<Self>, Unavailable> {
        driver_present()?;
        let mut open = open_devices();
        if let Some(gpu) = open
            .iter()
            .filter_map(Weak::upgrade)
            .find(|gpu| matches!(gpu.owner, Owner::Retained { .. }) && gpu.ordinal == ordinal)
        {
            return Ok(gpu);
        }
        let opened = raw::open(ordinal)?;
        let gpu = Arc::new(Gpu {
            context: opened.context,
            owner: Owner::Retained {
                device: opened.device,
            },
            ordinal,
            name: opened.name,
            compute: opened.compute,
            launch: opened.launch,
            driver: opened.driver,
            domain: domain_of(&open, opened.context),
            lent: Mutex::new(None),
            loops: LoopSupport::default(),
            _keep: None,
        });
        open.push(Arc::downgrade(&gpu));
        Ok(gpu)
    }

    /// A context of the caller's, `opened` by `raw::external`, with `stream` (checked
    /// there) to lend to pooled stream 0, and what keeps them alive.
    pub(crate) fn callers(
        opened: raw::Opened,
        stream: Option<usize>,
        keep: Option<Keep>,
    ) -> Arc<Self> {
        let mut open = open_devices();
        let gpu = Arc::new(Gpu {
            context: opened.context,
            owner: Owner::Caller,
            ordinal: opened.ordinal,
            name: opened.name,
            compute: opened.compute,
            launch: opened.launch,
            driver: opened.driver,
            domain: domain_of(&open, opened.context),
            lent: Mutex::new(stream),
            loops: LoopSupport::default(),
            _keep: keep,
        });
        open.push(Arc::downgrade(&gpu));
        gpu
    }

    /// Whether the context is the caller's rather than retained here.
    pub(crate) fn is_callers(&self) -> bool {
        matches!(self.owner, Owner::Caller)
    }

    /// The device's ordinal.
    pub(crate) fn ordinal(&self) -> i32 {
        self.ordinal
    }

    /// The device's name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The CUDA version the driver supports, as the driver encodes it (1000 × major +
    /// 10 × minor).
    pub(crate) fn driver(&self) -> i32 {
        self.driver
    }

    /// The capture domain every device on this context shares.
    pub(crate) fn domain(&self) -> CaptureDomain {
        self.domain.clone()
    }
}

/// Refuses before any driver call when the driver library does not load.
pub(crate) fn driver_present() -> Result<(), Unavailable> {
    raw::present().map_err(|why| {
        unavailable(format!(
            "the CUDA driver library cannot be loaded (no NVIDIA driver?): {why}"
        ))
    })
}
