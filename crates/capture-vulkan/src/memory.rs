//! The memory choice: which memory type a device's pages, its upload staging and its
//! read-back staging use, decided from the device's memory properties alone (a pure
//! function, unit-tested over made-up property tables) and the [`MemoryMode`] asked for.
//!
//! - Pages (`MemoryMode::Auto`, the default): device-local memory the host can map when
//!   such a type lives on the device's largest device-local heap (unified memory, or a
//!   discrete GPU with resizable BAR); else device-local memory with every transfer
//!   staged (a discrete GPU without it: its small BAR heap is left alone); host-visible
//!   memory only on a device with no device-local type.
//! - Upload staging: host-visible coherent memory, preferring a type that is not
//!   device-local (system memory; device-local host-visible memory is kept for pages).
//! - Read-back staging: host-visible cached memory, coherent when offered; a cached type
//!   that is not coherent is invalidated before the host reads it (the whole mapping, so
//!   `nonCoherentAtomSize` is respected); uncached coherent memory as a last resort.

use std::fmt;

use ash::vk;

/// Where device pages live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MemoryMode {
    /// The best placement this device offers (see [`MemoryChoice`]): device-local pages
    /// the host maps where the device has them (unified memory, resizable BAR), else
    /// device-local pages with staged transfers.
    #[default]
    Auto,
    /// Pages the host maps: device-local host-visible memory when the device has it for
    /// all of its memory, else host-visible memory (system memory on a discrete GPU).
    HostVisible,
    /// Pages are treated as device-only: never mapped, so every read and write goes
    /// through a staging copy (as on a discrete GPU without resizable BAR).
    ForcedStaging,
}

/// Where the pages ended up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagePlacement {
    /// Device-local memory the host maps: reads map the page after a wait.
    DeviceMapped,
    /// Device-local memory that is never mapped: reads and writes are staged.
    DeviceStaged,
    /// Host-visible memory that is not device-local, mapped.
    HostMapped,
}

/// One use of memory: the type chosen, its flags, and whether it is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MemoryUse {
    /// The memory type's index.
    pub(crate) index: u32,
    /// The chosen type's property flags.
    pub(crate) flags: vk::MemoryPropertyFlags,
    /// What any type used instead must have (a buffer whose requirements rule the
    /// chosen type out gets the first allowed type with these).
    pub(crate) required: vk::MemoryPropertyFlags,
    /// Whether the memory is mapped.
    pub(crate) map: bool,
}

impl MemoryUse {
    /// Whether host reads of mapped memory of this use need an invalidate first.
    pub(crate) fn needs_invalidate(&self) -> bool {
        self.map && !self.flags.contains(vk::MemoryPropertyFlags::HOST_COHERENT)
    }
}

/// The memory a device's streams use: pages, upload staging, read-back staging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryChoice {
    placement: PagePlacement,
    pub(crate) pages: MemoryUse,
    pub(crate) upload: MemoryUse,
    pub(crate) readback: MemoryUse,
}

impl MemoryChoice {
    /// Where the pages live.
    pub fn placement(&self) -> PagePlacement {
        self.placement
    }

    /// Whether reads of pages go through a staging copy.
    pub fn staged(&self) -> bool {
        !self.pages.map
    }
}

const DL: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::DEVICE_LOCAL;
const HV: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_VISIBLE;
const HC: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_COHERENT;
const CACHED: vk::MemoryPropertyFlags = vk::MemoryPropertyFlags::HOST_CACHED;

/// The memory choice for a device with memory properties `props`, in `mode`; or why the
/// device's memory does not fit this backend.
pub(crate) fn choose(
    props: &vk::PhysicalDeviceMemoryProperties,
    mode: MemoryMode,
) -> Result<MemoryChoice, String> {
    let count = (props.memory_type_count as usize).min(props.memory_types.len());
    let types = &props.memory_types[..count];
    let heap = |t: &vk::MemoryType| props.memory_heaps.get(t.heap_index as usize);
    let largest_device_heap = props.memory_heaps
        [..(props.memory_heap_count as usize).min(props.memory_heaps.len())]
        .iter()
        .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .max()
        .unwrap_or(0);
    let first = |pred: &dyn Fn(&vk::MemoryType) -> bool| {
        types
            .iter()
            .position(pred)
            .map(|i| (i as u32, types[i].property_flags))
    };
    let has = |t: &vk::MemoryType, f| t.property_flags.contains(f);
    // Device-local memory the host maps, on a heap as large as the device's memory.
    let mapped_device =
        first(&|t| has(t, DL | HV | HC) && heap(t).is_some_and(|h| h.size >= largest_device_heap));
    let device_only = first(&|t| has(t, DL) && !has(t, HV)).or_else(|| first(&|t| has(t, DL)));
    let host = first(&|t| has(t, HV | HC) && !has(t, DL)).or_else(|| first(&|t| has(t, HV | HC)));
    let readback = first(&|t| has(t, HV | HC | CACHED))
        .map(|c| (c, HV | HC))
        .or_else(|| first(&|t| has(t, HV | CACHED)).map(|c| (c, HV)))
        .or_else(|| host.map(|c| (c, HV | HC)));
    let use_of = |(index, flags): (u32, vk::MemoryPropertyFlags), required, map| MemoryUse {
        index,
        flags,
        required,
        map,
    };
    let Some(host) = host else {
        return Err("the device offers no host-visible coherent memory for staging".into());
    };
    let Some((readback, readback_required)) = readback else {
        return Err("the device offers no host-visible memory to read back through".into());
    };
    let device_staged = |chosen| (PagePlacement::DeviceStaged, use_of(chosen, DL, false));
    let host_mapped = (PagePlacement::HostMapped, use_of(host, HV | HC, true));
    let (placement, pages) = match mode {
        MemoryMode::Auto => match (mapped_device, device_only) {
            (Some(m), _) => (PagePlacement::DeviceMapped, use_of(m, HV | HC, true)),
            (None, Some(d)) => device_staged(d),
            (None, None) => host_mapped,
        },
        MemoryMode::HostVisible => match mapped_device {
            Some(m) => (PagePlacement::DeviceMapped, use_of(m, HV | HC, true)),
            None => host_mapped,
        },
        MemoryMode::ForcedStaging => match device_only {
            Some(d) => device_staged(d),
            None => return Err("the device offers no device-local memory".into()),
        },
    };
    Ok(MemoryChoice {
        placement,
        pages,
        upload: use_of(host, HV | HC, true),
        readback: use_of(readback, readback_required, true),
    })
}

impl fmt::Display for PagePlacement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PagePlacement::DeviceMapped => "device-local host-visible pages",
            PagePlacement::DeviceStaged => "device-local pages with staging",
            PagePlacement::HostMapped => "host-visible pages",
        })
    }
}

impl fmt::Display for MemoryChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let read = if self.readback.flags.contains(HC) {
            "coherent"
        } else {
            "invalidated"
        };
        let cached = if self.readback.flags.contains(CACHED) {
            "cached"
        } else {
            "uncached"
        };
        write!(
            f,
            "{} (memory type {}), upload staging in type {}, read-back in type {} ({cached}, \
             {read})",
            self.placement, self.pages.index, self.upload.index, self.readback.index
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    /// A property table from (heap size, heap is device-local) and (flags, heap) lists.
    fn table(
        heaps: &[(u64, bool)],
        types: &[(vk::MemoryPropertyFlags, u32)],
    ) -> vk::PhysicalDeviceMemoryProperties {
        let mut p = vk::PhysicalDeviceMemoryProperties {
            memory_type_count: types.len() as u32,
            memory_heap_count: heaps.len() as u32,
            ..Default::default()
        };
        for (i, &(size, local)) in heaps.iter().enumerate() {
            p.memory_heaps[i] = vk::MemoryHeap {
                size,
                flags: if local {
                    vk::MemoryHeapFlags::DEVICE_LOCAL
                } else {
                    vk::MemoryHeapFlags::empty()
                },
            };
        }
        for (i, &(flags, heap_index)) in types.iter().enumerate() {
            p.memory_types[i] = vk::MemoryType {
                property_flags: flags,
                heap_index,
            };
        }
        p
    }

    /// A discrete GPU: 8 GiB of VRAM (heap 0), 16 GiB of system memory (heap 1); with
    /// resizable BAR the host-visible device-local type is on heap 0, without it on a
    /// 256 MiB heap 2.
    fn discrete(bar: bool) -> vk::PhysicalDeviceMemoryProperties {
        let bar_heap = if bar { 0 } else { 2 };
        table(
            &[(8 * GIB, true), (16 * GIB, false), (256 * MIB, true)],
            &[
                (DL, 0),
                (HV | HC, 1),
                (HV | HC | CACHED, 1),
                (DL | HV | HC, bar_heap),
            ],
        )
    }

    fn integrated() -> vk::PhysicalDeviceMemoryProperties {
        table(
            &[(4 * GIB, true)],
            &[(DL, 0), (DL | HV | HC, 0), (DL | HV | HC | CACHED, 0)],
        )
    }

    fn lavapipe() -> vk::PhysicalDeviceMemoryProperties {
        table(&[(2 * GIB, true)], &[(DL | HV | HC | CACHED, 0)])
    }

    #[test]
    fn a_discrete_gpu_without_resizable_bar_gets_device_pages_with_staging() {
        let c = choose(&discrete(false), MemoryMode::Auto).unwrap();
        assert_eq!(c.placement(), PagePlacement::DeviceStaged);
        assert_eq!((c.pages.index, c.pages.map), (0, false));
        assert_eq!(c.upload.index, 1, "system memory, not the BAR heap");
        assert_eq!(c.readback.index, 2, "cached system memory");
        assert!(!c.readback.needs_invalidate());
        assert_eq!(
            c.to_string(),
            "device-local pages with staging (memory type 0), upload staging in type 1, \
             read-back in type 2 (cached, coherent)"
        );
    }

    #[test]
    fn a_discrete_gpu_with_resizable_bar_maps_device_local_pages() {
        let c = choose(&discrete(true), MemoryMode::Auto).unwrap();
        assert_eq!(c.placement(), PagePlacement::DeviceMapped);
        assert_eq!((c.pages.index, c.pages.map), (3, true));
        assert_eq!(c.upload.index, 1);
        assert_eq!(c.readback.index, 2);
    }

    #[test]
    fn host_visible_mode_without_resizable_bar_maps_system_memory() {
        let c = choose(&discrete(false), MemoryMode::HostVisible).unwrap();
        assert_eq!(c.placement(), PagePlacement::HostMapped);
        assert_eq!((c.pages.index, c.pages.map), (1, true));
    }

    #[test]
    fn an_integrated_gpu_maps_its_memory_and_reads_back_cached() {
        let c = choose(&integrated(), MemoryMode::Auto).unwrap();
        assert_eq!(c.placement(), PagePlacement::DeviceMapped);
        assert_eq!(c.pages.index, 1, "the first device-local host-visible type");
        assert_eq!(c.readback.index, 2, "the cached one");
        let forced = choose(&integrated(), MemoryMode::ForcedStaging).unwrap();
        assert_eq!(forced.placement(), PagePlacement::DeviceStaged);
        assert_eq!((forced.pages.index, forced.pages.map), (0, false));
    }

    #[test]
    fn lavapipe_uses_its_one_type_for_everything() {
        for mode in [MemoryMode::Auto, MemoryMode::HostVisible] {
            let c = choose(&lavapipe(), mode).unwrap();
            assert_eq!(c.placement(), PagePlacement::DeviceMapped, "{mode:?}");
            assert_eq!([c.pages.index, c.upload.index, c.readback.index], [0; 3]);
        }
        let forced = choose(&lavapipe(), MemoryMode::ForcedStaging).unwrap();
        assert_eq!((forced.pages.index, forced.pages.map), (0, false));
        assert!(forced.staged());
    }

    #[test]
    fn cached_memory_that_is_not_coherent_is_invalidated_before_reading() {
        let p = table(
            &[(8 * GIB, true), (16 * GIB, false)],
            &[(DL, 0), (HV | HC, 1), (HV | CACHED, 1)],
        );
        let c = choose(&p, MemoryMode::Auto).unwrap();
        assert_eq!(c.readback.index, 2);
        assert!(c.readback.needs_invalidate());
        assert!(c.to_string().ends_with("(cached, invalidated)"), "{c}");
    }

    #[test]
    fn a_device_without_host_visible_coherent_memory_is_refused() {
        let p = table(&[(GIB, true)], &[(DL, 0)]);
        let why = choose(&p, MemoryMode::Auto).unwrap_err();
        assert!(why.contains("host-visible coherent"), "{why}");
    }
}
