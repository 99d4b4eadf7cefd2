//! How large a read-back page a backend keeps for a stream's reads
//! ([`DeviceStream::read_staging_bytes`](crate::backend::DeviceStream::read_staging_bytes)):
//! one sizing policy for every backend that keeps one (Vulkan's staged memory, CUDA's
//! pinned page), so their memory reports agree.

/// The smallest page kept: reads of a few logits share one.
pub const READ_STAGING_MIN: u64 = 64 << 10;

/// The largest page kept: a larger read stages on its own and keeps nothing, so one
/// huge read does not pin its size in host memory for the stream's life.
pub const READ_STAGING_MAX: u64 = 16 << 20;

/// The page to keep for a read of `len` bytes: `len` rounded up to a power of two, at
/// least [`READ_STAGING_MIN`]; `None` past [`READ_STAGING_MAX`].
pub fn read_staging_size(len: u64) -> Option<u64> {
    (len <= READ_STAGING_MAX).then(|| {
        len.next_power_of_two()
            .clamp(READ_STAGING_MIN, READ_STAGING_MAX)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_powers_of_two_between_the_bounds() {
        assert_eq!(read_staging_size(0), Some(64 << 10));
        assert_eq!(read_staging_size(4096), Some(64 << 10));
        assert_eq!(read_staging_size((64 << 10) + 1), Some(128 << 10));
        assert_eq!(read_staging_size(1 << 20), Some(1 << 20));
        assert_eq!(read_staging_size(16 << 20), Some(16 << 20));
        assert_eq!(read_staging_size((16 << 20) + 1), None);
    }
}
