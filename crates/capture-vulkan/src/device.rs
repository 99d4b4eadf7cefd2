//! Device choice: which physical device to open. Enumeration order is unspecified, so
//! the devices are ranked (discrete GPU, integrated GPU, virtual GPU, CPU, other) and
//! tried in that order; a [`DeviceSelector`] (from [`crate::VulkanOptions::device`] or
//! `CAPTURE_VULKAN_DEVICE`) names one by index or by a piece of its name instead. Pure
//! functions over what enumeration saw, unit-tested here.

use std::fmt;

use ash::vk;

/// Which device to open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSelector {
    /// The device at this index in the driver's enumeration (as `vulkaninfo` numbers
    /// them: `GPU0`, `GPU1`, …).
    Index(usize),
    /// The best-ranked device whose name contains this text (ignoring case).
    Name(String),
}

impl DeviceSelector {
    /// A selector from text: a whole number is an index, anything else a name.
    pub fn parse(text: &str) -> Self {
        let text = text.trim();
        match text.parse::<usize>() {
            Ok(i) => DeviceSelector::Index(i),
            Err(_) => DeviceSelector::Name(text.to_owned()),
        }
    }
}

impl fmt::Display for DeviceSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceSelector::Index(i) => write!(f, "index {i}"),
            DeviceSelector::Name(n) => write!(f, "name {n:?}"),
        }
    }
}

/// A device enumeration saw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) name: String,
    pub(crate) kind: vk::PhysicalDeviceType,
}

/// A kind's rank: lower is preferred.
fn rank(kind: vk::PhysicalDeviceType) -> u8 {
    match kind {
        vk::PhysicalDeviceType::DISCRETE_GPU => 0,
        vk::PhysicalDeviceType::INTEGRATED_GPU => 1,
        vk::PhysicalDeviceType::VIRTUAL_GPU => 2,
        vk::PhysicalDeviceType::CPU => 3,
        _ => 4,
    }
}

/// A kind in words.
pub(crate) fn kind_name(kind: vk::PhysicalDeviceType) -> &'static str {
    match kind {
        vk::PhysicalDeviceType::DISCRETE_GPU => "discrete GPU",
        vk::PhysicalDeviceType::INTEGRATED_GPU => "integrated GPU",
        vk::PhysicalDeviceType::VIRTUAL_GPU => "virtual GPU",
        vk::PhysicalDeviceType::CPU => "CPU",
        _ => "other",
    }
}

/// The devices seen, for an error: `0: name (kind), 1: …`.
pub(crate) fn listing(seen: &[Seen]) -> String {
    seen.iter()
        .enumerate()
        .map(|(i, d)| format!("{i}: {} ({})", d.name, kind_name(d.kind)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The indices of `seen` to try, best first: every device ranked by kind (ties keep
/// enumeration order), or those `selector` names; or why none is named.
pub(crate) fn order(
    seen: &[Seen],
    selector: Option<&DeviceSelector>,
) -> Result<Vec<usize>, String> {
    let mut picked: Vec<usize> = match selector {
        None => (0..seen.len()).collect(),
        Some(DeviceSelector::Index(i)) => (*i < seen.len()).then_some(*i).into_iter().collect(),
        Some(DeviceSelector::Name(n)) => {
            let n = n.to_lowercase();
            (0..seen.len())
                .filter(|&i| seen[i].name.to_lowercase().contains(&n))
                .collect()
        }
    };
    if picked.is_empty() {
        return Err(match selector {
            Some(s) => format!(
                "no Vulkan device matches the device {s}; devices seen: {}",
                listing(seen)
            ),
            None => "no Vulkan device".into(),
        });
    }
    picked.sort_by_key(|&i| rank(seen[i].kind));
    Ok(picked)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(list: &[(&str, vk::PhysicalDeviceType)]) -> Vec<Seen> {
        list.iter()
            .map(|&(name, kind)| Seen {
                name: name.into(),
                kind,
            })
            .collect()
    }

    fn machine() -> Vec<Seen> {
        seen(&[
            (
                "llvmpipe (LLVM 15.0.6, 256 bits)",
                vk::PhysicalDeviceType::CPU,
            ),
            (
                "Intel(R) UHD Graphics 770",
                vk::PhysicalDeviceType::INTEGRATED_GPU,
            ),
            ("Virtio-GPU Venus", vk::PhysicalDeviceType::VIRTUAL_GPU),
            ("NVIDIA H200", vk::PhysicalDeviceType::DISCRETE_GPU),
        ])
    }

    #[test]
    fn devices_rank_discrete_integrated_virtual_cpu() {
        assert_eq!(order(&machine(), None).unwrap(), [3, 1, 2, 0]);
    }

    #[test]
    fn equal_kinds_keep_enumeration_order() {
        let two = seen(&[
            ("GPU A", vk::PhysicalDeviceType::DISCRETE_GPU),
            ("GPU B", vk::PhysicalDeviceType::DISCRETE_GPU),
        ]);
        assert_eq!(order(&two, None).unwrap(), [0, 1]);
    }

    #[test]
    fn a_name_or_index_selects_one_device() {
        let m = machine();
        let name = DeviceSelector::parse("LLVMpipe");
        assert_eq!(name, DeviceSelector::Name("LLVMpipe".into()));
        assert_eq!(order(&m, Some(&name)).unwrap(), [0]);
        let index = DeviceSelector::parse(" 1 ");
        assert_eq!(index, DeviceSelector::Index(1));
        assert_eq!(order(&m, Some(&index)).unwrap(), [1]);
    }

    #[test]
    fn an_unknown_name_or_index_lists_the_devices_seen() {
        let m = machine();
        for (selector, shown) in [
            (DeviceSelector::parse("radeon"), "name \"radeon\""),
            (DeviceSelector::parse("7"), "index 7"),
        ] {
            let why = order(&m, Some(&selector)).unwrap_err();
            assert!(why.contains(shown), "{why}");
            assert!(
                why.contains("devices seen: 0: llvmpipe (LLVM 15.0.6, 256 bits) (CPU), 1: Intel"),
                "{why}"
            );
            assert!(why.contains("3: NVIDIA H200 (discrete GPU)"), "{why}");
        }
    }
}
