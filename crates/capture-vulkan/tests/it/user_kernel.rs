//! A user's own SPIR-V kernel, with its binding layout, runs like a builtin.

use capture_core::{Arg, Chain, Device, DeviceConfig, KernelSignature, StreamId};
use capture_suite::scenarios::{bytes, floats, suite_lock};
use capture_vulkan::{MemoryMode, VulkanKernelSource};

use crate::support;

const TRIPLE: &str = "
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn triple(@builtin(global_invocation_id) gid: vec3<u32>) {
    if gid.x < arrayLength(&y) {
        y[gid.x] = 3.0 * x[gid.x];
    }
}
";

fn spirv(source: &str) -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(source).expect("valid WGSL");
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .expect("valid module");
    naga::back::spv::write_vec(&module, &info, &naga::back::spv::Options::default(), None)
        .expect("SPIR-V")
}

#[test]
fn a_users_spirv_kernel_runs_eagerly_and_in_a_graph() {
    let _suite = suite_lock();
    let backend = match support::backend(MemoryMode::HostVisible) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: user kernel: {why}");
            return;
        }
    };
    let handle = backend.clone();
    let s = StreamId::new(0);
    {
        let dev = Device::new(backend, DeviceConfig::new().streams(1).unwrap()).unwrap();
        let source = VulkanKernelSource::spirv(
            "triple",
            spirv(TRIPLE),
            "triple",
            KernelSignature::new(2, 0),
        )
        .unwrap();
        let k = dev.kernel(source);
        let values: Vec<f32> = (0..100).map(|i| i as f32).collect();
        let x = dev.alloc(s, 400).unwrap();
        let y = dev.alloc(s, 400).unwrap();
        dev.write(s, &x, 0, bytes(&values)).unwrap();
        let launch =
            |d: &Device<_>| d.launch(s, &k, [2, 1, 1], &[Arg::read(&x), Arg::write(&y)], &[]);
        launch(&dev).unwrap();
        let tripled: Vec<f32> = values.iter().map(|v| v * 3.0).collect();
        assert_eq!(floats(&dev.read(s, &y).unwrap()), tripled);
        let g = dev.capture(s, launch).unwrap();
        dev.write(s, &x, 0, bytes(&vec![2.0; 100])).unwrap();
        dev.replay(s, g, 1).unwrap();
        assert_eq!(floats(&dev.read(s, &y).unwrap()), vec![6.0; 100]);
        // A launch that does not match the kernel's signature is refused by the core,
        // naming it.
        let err = dev
            .launch(s, &k, [1, 1, 1], &[Arg::read(&x)], &[])
            .unwrap_err();
        assert!(
            Chain(&err)
                .to_string()
                .contains("kernel triple takes 2 buffers"),
            "{err}"
        );
    }
    support::assert_no_validation_messages(&handle);
}
