//! What a launch must fit, checked by the core before any backend sees it: the kernel's
//! [`KernelSignature`] (declared when it is registered), the device's [`LaunchLimits`]
//! (declared by the backend once), and [`MAX_LAUNCH_BUFFERS`] for every backend.

use crate::error::ServerError;
use crate::memory::SLICE_ALIGNMENT;

/// How many workgroups (blocks) a launch runs, per dimension.
pub type Grid = [u32; 3];

/// The most buffers one launch binds, on every backend.
pub const MAX_LAUNCH_BUFFERS: usize = 8;

/// What a kernel takes: how many buffers (in launch order) and how many 64-bit info
/// words. A kernel declares it when it is registered; every launch of it must match.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct KernelSignature {
    buffers: usize,
    info_words: usize,
}

impl KernelSignature {
    /// A kernel over `buffers` buffers and `info_words` info words (0 for none: the
    /// kernel then gets no info buffer).
    pub const fn new(buffers: usize, info_words: usize) -> Self {
        Self {
            buffers,
            info_words,
        }
    }

    /// How many buffers the kernel binds.
    pub const fn buffers(&self) -> usize {
        self.buffers
    }

    /// How many info words the kernel reads.
    pub const fn info_words(&self) -> usize {
        self.info_words
    }

    /// Whether the kernel gets an info buffer.
    pub const fn has_info(&self) -> bool {
        self.info_words > 0
    }

    /// Checks a launch with `buffers` buffers, `info_words` info words and `grid`
    /// against this signature and `limits`; `name` names the kernel, asked only for an
    /// error.
    pub(crate) fn check_launch<N: std::fmt::Display>(
        &self,
        name: impl FnOnce() -> N,
        limits: &LaunchLimits,
        grid: Grid,
        buffers: usize,
        info_words: usize,
    ) -> Result<(), ServerError> {
        if buffers > MAX_LAUNCH_BUFFERS {
            return Err(ServerError::invalid(
                "buffer count",
                buffers,
                format!("a launch binds at most {MAX_LAUNCH_BUFFERS} buffers"),
            ));
        }
        if buffers != self.buffers {
            return Err(ServerError::invalid(
                "buffer count",
                buffers,
                format!("kernel {} takes {} buffers", name(), self.buffers),
            ));
        }
        if info_words != self.info_words {
            return Err(ServerError::invalid(
                "info words",
                info_words,
                format!("kernel {} takes {} info words", name(), self.info_words),
            ));
        }
        if grid.contains(&0) {
            return Err(ServerError::invalid(
                "grid",
                format!("{grid:?}"),
                "every dimension runs at least one workgroup",
            ));
        }
        if grid.iter().zip(limits.max_grid).any(|(&g, max)| g > max) {
            return Err(ServerError::invalid(
                "grid",
                format!("{grid:?}"),
                format!(
                    "this device runs at most {:?} workgroups per dimension",
                    limits.max_grid
                ),
            ));
        }
        Ok(())
    }
}

/// What a device can bind and run, declared by the backend once per device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchLimits {
    binding_alignment: u64,
    max_binding_bytes: u64,
    max_grid: Grid,
}

impl LaunchLimits {
    /// A device that binds ranges starting at multiples of `binding_alignment` bytes
    /// and at most `max_binding_bytes` long, and runs at most `max_grid` workgroups per
    /// dimension.
    ///
    /// # Errors
    ///
    /// [`ServerError::InvalidArgument`] for an alignment that is not a power of two
    /// dividing [`SLICE_ALIGNMENT`] (every slice must start bindable), a zero maximum
    /// range, or a zero grid dimension.
    pub fn new(
        binding_alignment: u64,
        max_binding_bytes: u64,
        max_grid: Grid,
    ) -> Result<Self, ServerError> {
        if !binding_alignment.is_power_of_two()
            || !SLICE_ALIGNMENT.is_multiple_of(binding_alignment)
        {
            return Err(ServerError::invalid(
                "binding alignment",
                binding_alignment,
                format!("it must be a power of two dividing the slice alignment {SLICE_ALIGNMENT}"),
            ));
        }
        if max_binding_bytes == 0 {
            return Err(ServerError::invalid(
                "binding range",
                0,
                "a device binds at least one byte",
            ));
        }
        if max_grid.contains(&0) {
            return Err(ServerError::invalid(
                "grid limit",
                format!("{max_grid:?}"),
                "a device runs at least one workgroup per dimension",
            ));
        }
        Ok(Self {
            binding_alignment,
            max_binding_bytes,
            max_grid,
        })
    }

    /// The multiple of bytes a bound range starts at.
    pub fn binding_alignment(&self) -> u64 {
        self.binding_alignment
    }

    /// The longest range one binding may cover.
    pub fn max_binding_bytes(&self) -> u64 {
        self.max_binding_bytes
    }

    /// The most workgroups per dimension.
    pub fn max_grid(&self) -> Grid {
        self.max_grid
    }

    /// Checks one bound range (`offset` and `len` within buffer `binding`).
    pub(crate) fn check_binding(
        &self,
        binding: impl std::fmt::Display,
        offset: u64,
        len: u64,
    ) -> Result<(), ServerError> {
        if !offset.is_multiple_of(self.binding_alignment) {
            return Err(ServerError::InvalidBinding {
                binding: format!("{binding}[{offset}+{len}]"),
                reason: format!(
                    "offset {offset}: this device binds ranges at multiples of {} bytes",
                    self.binding_alignment
                )
                .into(),
            });
        }
        if len > self.max_binding_bytes {
            return Err(ServerError::InvalidBinding {
                binding: format!("{binding}[{offset}+{len}]"),
                reason: format!(
                    "{len} bytes: this device binds at most {} bytes per buffer",
                    self.max_binding_bytes
                )
                .into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> LaunchLimits {
        LaunchLimits::new(16, 1 << 20, [100, 10, 10]).unwrap()
    }

    #[test]
    fn a_launch_must_fit_its_signature() {
        let sig = KernelSignature::new(2, 2);
        let l = limits();
        sig.check_launch(|| "k", &l, [1, 1, 1], 2, 2).unwrap();
        let too_many = sig.check_launch(|| "k", &l, [1, 1, 1], 9, 2).unwrap_err();
        assert!(
            too_many.to_string().contains("at most 8 buffers"),
            "{too_many}"
        );
        let arity = sig.check_launch(|| "k", &l, [1, 1, 1], 1, 2).unwrap_err();
        assert!(
            arity.to_string().contains("kernel k takes 2 buffers"),
            "{arity}"
        );
        let info = sig.check_launch(|| "k", &l, [1, 1, 1], 2, 0).unwrap_err();
        assert!(info.to_string().contains("takes 2 info words"), "{info}");
        let empty = sig.check_launch(|| "k", &l, [1, 0, 1], 2, 2).unwrap_err();
        assert!(empty.to_string().contains("[1, 0, 1]"), "{empty}");
        let big = sig.check_launch(|| "k", &l, [101, 1, 1], 2, 2).unwrap_err();
        assert!(big.to_string().contains("at most [100, 10, 10]"), "{big}");
    }

    #[test]
    fn a_binding_must_start_aligned_and_fit_the_device() {
        let l = limits();
        l.check_binding("buf#0", 32, 64).unwrap();
        let e = l.check_binding("buf#0", 4, 64).unwrap_err();
        assert!(matches!(e, ServerError::InvalidBinding { .. }));
        assert!(e.to_string().contains("offset 4"), "{e}");
        let e = l.check_binding("buf#0", 0, (1 << 20) + 1).unwrap_err();
        assert!(e.to_string().contains("at most 1048576 bytes"), "{e}");
    }

    #[test]
    fn limits_refuse_an_alignment_slices_cannot_meet() {
        assert!(LaunchLimits::new(512, 1, [1, 1, 1]).is_err());
        assert!(LaunchLimits::new(24, 1, [1, 1, 1]).is_err());
        assert!(LaunchLimits::new(256, 0, [1, 1, 1]).is_err());
        assert!(LaunchLimits::new(256, 1, [0, 1, 1]).is_err());
    }
}
