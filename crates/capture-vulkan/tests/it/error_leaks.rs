//! Error paths leave nothing alive (the backend's fault hook at the failing call): a
//! kernel whose later create fails destroys what it made, a primary command buffer that
//! cannot begin is freed, a window whose secondary cannot end frees the secondary and its
//! descriptor pools. The validation layer reports objects still alive when the device is
//! destroyed, so each test reads the device's log after the device is gone.

use ash::vk;
use capture_core::{Arg, Device, DeviceConfig, KernelSignature, StreamId};
use capture_suite::scenarios::{Harness, N, assert_contains, bytes, floats, map, ramp, suite_lock};
use capture_vulkan::{MemoryMode, ValidationLog, VulkanCall, VulkanKernelSource};

use crate::support;
use crate::user_kernel::{TRIPLE, spirv};

const S: StreamId = StreamId::new(0);

/// Panics if the log holds any message (after the device is gone: leaks included).
fn assert_silent(log: &ValidationLog) {
    let messages = log.take();
    assert!(
        messages.is_empty(),
        "the validation layer reported {} message(s):\n{}",
        messages.len(),
        messages.join("\n")
    );
}

#[test]
fn a_kernel_whose_later_create_fails_leaves_nothing_alive() {
    let _suite = suite_lock();
    for (call, op) in [
        (
            VulkanCall::CreateDescriptorSetLayout,
            "vkCreateDescriptorSetLayout",
        ),
        (VulkanCall::CreatePipelineLayout, "vkCreatePipelineLayout"),
        (
            VulkanCall::CreateComputePipelines,
            "vkCreateComputePipelines",
        ),
    ] {
        let backend = match support::backend(MemoryMode::HostVisible) {
            Ok(b) => b,
            Err(why) => {
                println!("SKIP: error leaks: {why}");
                return;
            }
        };
        let log = backend.validation_log();
        let keep = backend.clone();
        let h = Harness::new(backend).expect("device");
        let x = h.buffer(S, &ramp(1.0)).expect("x");
        let y = h.dev.alloc(S, N * 4).expect("y");
        keep.fail_call(call, 0, vk::Result::ERROR_OUT_OF_HOST_MEMORY);
        let err = h.add(S, &x, &y, 1.0).unwrap_err();
        assert_contains(&err, op);
        h.add(S, &x, &y, 1.0)
            .expect("the kernel loads on the next launch");
        h.expect(S, &y, &map(&ramp(1.0), |v| v + 1.0));
        drop((x, y, h, keep));
        assert_silent(&log);
    }
}

#[test]
fn a_primary_command_buffer_that_cannot_begin_is_freed() {
    let _suite = suite_lock();
    let backend = match support::backend(MemoryMode::HostVisible) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: error leaks: {why}");
            return;
        }
    };
    let keep = backend.clone();
    let h = Harness::new(backend).expect("device");
    let x = h.buffer(S, &ramp(1.0)).expect("x");
    let y = h.dev.alloc(S, N * 4).expect("y");
    h.add(S, &x, &y, 1.0).expect("the kernel is loaded");
    h.dev.sync(S).expect("settled");
    let before = keep.live_command_buffers();
    keep.fail_call(
        VulkanCall::BeginCommandBuffer,
        0,
        vk::Result::ERROR_OUT_OF_HOST_MEMORY,
    );
    let err = h.add(S, &x, &y, 2.0).unwrap_err();
    assert_contains(&err, "vkBeginCommandBuffer");
    assert_eq!(
        keep.live_command_buffers(),
        before,
        "the command buffer that could not begin is still allocated"
    );
    h.add(S, &x, &y, 3.0).expect("launch");
    h.expect(S, &y, &map(&ramp(1.0), |v| v + 3.0));
    drop((x, y, h));
    support::assert_no_validation_messages(&keep);
}

#[test]
fn a_window_whose_secondary_cannot_end_frees_it_and_its_descriptor_pools() {
    let _suite = suite_lock();
    let backend = match support::backend(MemoryMode::HostVisible) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: error leaks: {why}");
            return;
        }
    };
    let log = backend.validation_log();
    let keep = backend.clone();
    {
        let dev = Device::new(backend, DeviceConfig::new().streams(1).unwrap()).unwrap();
        let k = dev.kernel(
            VulkanKernelSource::spirv(
                "triple",
                spirv(TRIPLE),
                "triple",
                KernelSignature::new(2, 0),
            )
            .unwrap(),
        );
        let x = dev.alloc(S, 256).unwrap();
        let y = dev.alloc(S, 256).unwrap();
        dev.write(S, &x, 0, bytes(&[1.0; 64])).unwrap();
        let launch = || dev.launch(S, &k, [1, 1, 1], &[Arg::read(&x), Arg::write(&y)], &[]);
        launch().expect("loaded eagerly");
        dev.sync(S).unwrap();
        let before = keep.live_command_buffers();
        dev.prepare(S).unwrap();
        dev.begin(S).unwrap();
        launch().expect("recorded");
        keep.fail_call(
            VulkanCall::EndCommandBuffer,
            0,
            vk::Result::ERROR_OUT_OF_HOST_MEMORY,
        );
        let err = dev.end(S).unwrap_err();
        assert_contains(&err, "vkEndCommandBuffer");
        assert_eq!(
            keep.live_command_buffers(),
            before,
            "the window's secondary is still allocated"
        );
        dev.write(S, &x, 0, bytes(&[2.0; 64])).unwrap();
        launch().expect("the stream goes on");
        assert_eq!(floats(&dev.read(S, &y).unwrap()), vec![6.0; 64]);
    }
    drop(keep);
    assert_silent(&log);
}
