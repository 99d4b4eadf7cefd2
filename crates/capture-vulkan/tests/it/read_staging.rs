//! Reads of device-only pages (forced staging) go through one read-back page the stream
//! keeps: the first read makes it, later reads of no more bytes reuse it and allocate
//! nothing (shown by failing `vkAllocateMemory` under them), a larger read grows it, a
//! read past the kept size's cap stages through a page of its own and leaves the kept
//! one as it was, and the memory report shows what the stream keeps.

use capture_core::{Device, DeviceConfig, StreamId};
use capture_suite::scenarios::suite_lock;
use capture_vulkan::{MemoryMode, VulkanCall, ash::vk};

use crate::support;

const S: StreamId = StreamId::new(0);

fn kept(dev: &Device<capture_vulkan::VulkanBackend>) -> u64 {
    dev.memory_report().streams[0].read_staging_bytes
}

#[test]
fn reads_reuse_the_streams_read_back_page() {
    let _suite = suite_lock();
    let backend = match support::backend(MemoryMode::ForcedStaging) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: read staging: {why}");
            return;
        }
    };
    let keep = backend.clone();
    let dev = Device::new(backend, DeviceConfig::new()).expect("device");
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
    let ramp: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    let x = dev.alloc(S, bytes.len() as u64).expect("x");
    let y = dev.alloc(S, ramp.len() as u64).expect("y");
    dev.write(S, &x, 0, bytes.clone()).expect("write x");
    dev.write(S, &y, 0, ramp.clone()).expect("write y");
    assert_eq!(kept(&dev), 0, "no read yet");
    assert_eq!(dev.read(S, &x).expect("read"), bytes);
    assert_eq!(
        kept(&dev),
        64 << 10,
        "the first read keeps the smallest page"
    );
    let report = dev.memory_report().to_string();
    assert!(
        report.contains("read-back staging: 65536 B"),
        "the report names it:\n{report}"
    );

    // The next `vkAllocateMemory` fails: reads of up to the kept size never reach it.
    keep.fail_call(
        VulkanCall::AllocateMemory,
        0,
        vk::Result::ERROR_OUT_OF_DEVICE_MEMORY,
    );
    for offset in [0u64, 1, 100, 4000] {
        let got = dev
            .read_range(S, &x, offset, 96.min(4096 - offset))
            .expect("the kept page is reused");
        assert_eq!(got, bytes[offset as usize..][..got.len()]);
    }
    let mut into = vec![0u8; 4096];
    for _ in 0..100 {
        dev.read_into(S, &x, 0, &mut into)
            .expect("the kept page is reused");
    }
    assert_eq!(into, bytes);
    // A larger read needs a larger page, and meets the armed failure: an error, while
    // the kept page and the stream stay usable.
    let refused = dev
        .read(S, &y)
        .expect_err("the larger page's allocation fails");
    assert!(
        refused.to_string().contains("vkAllocateMemory"),
        "{refused}"
    );
    assert_eq!(
        kept(&dev),
        64 << 10,
        "the kept page stays when its successor fails"
    );
    assert_eq!(dev.read(S, &x).expect("the stream reads again"), bytes);
    // Now it grows to the read's size.
    assert_eq!(dev.read(S, &y).expect("read y"), ramp);
    assert_eq!(kept(&dev), 1 << 20);
    assert_eq!(dev.read(S, &x).expect("read x"), bytes);
    assert_eq!(kept(&dev), 1 << 20, "a smaller read keeps the larger page");
    // Past the cap (16 MiB) a read stages through a page of its own.
    let z = dev.alloc(S, 17 << 20).expect("z");
    let zeros = vec![0u8; 17 << 20];
    dev.write(S, &z, 0, zeros.clone()).expect("write z");
    assert_eq!(dev.read(S, &z).expect("read z"), zeros);
    assert_eq!(
        kept(&dev),
        1 << 20,
        "a read past the cap keeps nothing more"
    );
    drop((x, y, z));
    drop(dev);
    support::assert_no_validation_messages(&keep);
}
