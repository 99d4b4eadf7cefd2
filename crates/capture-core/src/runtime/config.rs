//! `DeviceConfig`: how many pooled streams a device has, and its memory, drop-queue,
//! info-cache and trace settings.

use crate::drop_queue::FlushingPolicy;
use crate::error::ServerError;
use crate::info_cache::CachePolicy;
use crate::memory::MemoryConfig;

/// Settings of a [`Device`](super::Device).
#[derive(Clone, Copy, Debug)]
pub struct DeviceConfig {
    pub(crate) streams: usize,
    pub(crate) device_memory: MemoryConfig,
    pub(crate) host_memory: MemoryConfig,
    pub(crate) drop_policy: FlushingPolicy,
    pub(crate) cache_policy: CachePolicy,
    pub(crate) trace: bool,
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            streams: 4,
            device_memory: MemoryConfig::unlimited(),
            host_memory: MemoryConfig::unlimited(),
            drop_policy: FlushingPolicy::default(),
            cache_policy: CachePolicy::default(),
            trace: false,
        }
    }
}

impl DeviceConfig {
    /// Four pooled streams, no memory limit, default policies, no trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// `count` pooled streams; logical stream `n` runs on pooled stream `n % count`.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] naming the count when it is zero or above 64.
    pub fn streams(mut self, count: usize) -> Result<Self, ServerError> {
        if count == 0 || count > 64 {
            return Err(ServerError::invalid(
                "stream count",
                count,
                "a device pools 1 to 64 streams",
            ));
        }
        self.streams = count;
        Ok(self)
    }

    /// The limit of each pooled stream's device memory.
    pub fn device_memory(mut self, config: MemoryConfig) -> Self {
        self.device_memory = config;
        self
    }

    /// The limit of each pooled stream's pinned host (staging) memory.
    pub fn host_memory(mut self, config: MemoryConfig) -> Self {
        self.host_memory = config;
        self
    }

    /// When each stream's drop queue asks for a flush.
    pub fn drop_policy(mut self, policy: FlushingPolicy) -> Self {
        self.drop_policy = policy;
        self
    }

    /// The info cache's capacity and entry-size limit.
    pub fn cache_policy(mut self, policy: CachePolicy) -> Self {
        self.cache_policy = policy;
        self
    }

    /// Whether the device keeps its event log (for tests, and [`Device::trace`](super::Device::trace)). Off by
    /// default: a long-running program would grow it without bound.
    pub fn trace(mut self, enabled: bool) -> Self {
        self.trace = enabled;
        self
    }

    /// The number of pooled streams.
    pub fn stream_count(&self) -> usize {
        self.streams
    }

    /// The device memory settings.
    pub fn device_memory_config(&self) -> MemoryConfig {
        self.device_memory
    }

    /// The host memory settings.
    pub fn host_memory_config(&self) -> MemoryConfig {
        self.host_memory
    }

    /// The drop-queue policy.
    pub fn drop_policy_config(&self) -> FlushingPolicy {
        self.drop_policy
    }

    /// The info-cache policy.
    pub fn cache_policy_config(&self) -> CachePolicy {
        self.cache_policy
    }
}
