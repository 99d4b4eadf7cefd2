//! What a backend author needs beyond the user's view at the crate root: the traits a
//! driver implements ([`Backend`], [`GraphDriver`], [`DeviceStream`]), the per-stream
//! state it embeds ([`StreamState`], built from a [`StreamSetup`]), its storages and
//! fences, the device limits it declares, and the lifecycle pieces its own tests can
//! drive directly.
//!
//! A backend translates: it never adds or bends a rule. Every launch reaching
//! [`Backend::launch`] has already been checked against the kernel's signature and the
//! device's [`LaunchLimits`].

pub use crate::builtin::Builtins;
pub use crate::capture::{
    CaptureDomain, CaptureEnd, CaptureStatus, DeviceCaptures, Graph, Lane, Refused, StreamCapture,
    TouchedPage, Window,
};
pub use crate::driver::{
    Backend, DeviceExternal, DeviceResource, DeviceStream, GraphDriver, HostResource, LaunchBuffer,
    LaunchParam,
};
pub use crate::drop_queue::{Fence, FlushingPolicy, Pending, PendingDropQueue};
pub use crate::id_hash::{IdHasher, IdMap, IdSet, KeyedMap};
pub use crate::info_cache::{
    CacheMode, CachePolicy, InfoHit, Inserted, MetadataInfoCache, Refusal,
};
pub use crate::kernel::{
    Dims, Grid, KernelSignature, LaunchLimits, MAX_KERNEL_PARAMS, MAX_LAUNCH_BUFFERS,
    MAX_SCALAR_BYTES, Param, ProgrammaticLaunch, ScalarValue,
};
pub use crate::memory::{
    AllocGate, BufferBinding, ClaimKey, ComputeStorage, DYNAMIC_PAGE_BYTES, ExternalPlace,
    ManagedMemoryBinding, ManagedMemoryHandle, MemoryIds, MemoryLocation, MemoryManagement,
    PERSISTENT_PAGE_BYTES, PageUpdate, StorageId,
};
pub use crate::read_staging::{READ_STAGING_MAX, READ_STAGING_MIN, read_staging_size};
pub use crate::stream_state::{StreamSetup, StreamState};
