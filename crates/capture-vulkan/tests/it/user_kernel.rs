//! A user's own SPIR-V kernel, with its binding layout, runs like a builtin; SPIR-V the
//! driver must not see (junk behind a valid magic number, bindings the declared signature
//! lacks) is refused with a typed error naming the kernel, and the device goes on.

use capture_core::{Arg, Chain, Device, DeviceConfig, KernelSignature, ServerError, StreamId};
use capture_suite::scenarios::{bytes, floats, suite_lock};
use capture_vulkan::{MemoryMode, VulkanKernelSource};

use crate::support;

pub(crate) const TRIPLE: &str = "
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn triple(@builtin(global_invocation_id) gid: vec3<u32>) {
    if gid.x < arrayLength(&y) {
        y[gid.x] = 3.0 * x[gid.x];
    }
}
";

pub(crate) fn spirv(source: &str) -> Vec<u32> {
    spirv_with(source, true)
}

/// SPIR-V of `source`, with its debug names (`OpName`) or without them, the same in
/// every build profile: naga's default writes them only in debug builds, and the
/// refusals below name what they can.
pub(crate) fn spirv_with(source: &str, names: bool) -> Vec<u32> {
    let module = naga::front::wgsl::parse_str(source).expect("valid WGSL");
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::empty(),
    )
    .validate(&module)
    .expect("valid module");
    let mut options = naga::back::spv::Options::default();
    options
        .flags
        .set(naga::back::spv::WriterFlags::DEBUG, names);
    naga::back::spv::write_vec(&module, &info, &options, None).expect("SPIR-V")
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
        let g = dev.capture(s, |d| launch(d)).unwrap();
        dev.write(s, &x, 0, bytes(&vec![2.0; 100])).unwrap();
        dev.replay(s, &g, 1).unwrap();
        assert_eq!(floats(&dev.read(s, &y).unwrap()), vec![6.0; 100]);
        // A launch that does not match the kernel's signature is refused by the core,
        // naming it.
        let err = dev
            .launch(s, &k, [1, 1, 1], &[Arg::read(&x)], &[])
            .unwrap_err();
        assert!(
            Chain(&err)
                .to_string()
                .contains("it takes 2 parameters (2 buffers, 0 scalars)"),
            "{err}"
        );
    }
    support::assert_no_validation_messages(&handle);
}

/// Panics unless `refused` is an invalid-argument error naming `kernel` and saying
/// `why`.
fn assert_refused(refused: Result<VulkanKernelSource, ServerError>, kernel: &str, why: &str) {
    match refused {
        Ok(_) => panic!("{kernel}: accepted"),
        Err(e @ ServerError::InvalidArgument { .. }) => {
            let text = e.to_string();
            assert!(text.contains(&format!("SPIR-V {kernel}")), "{text}");
            assert!(text.contains(why), "{text}");
        }
        Err(other) => panic!("{kernel}: not an invalid argument: {other:?}"),
    }
}

#[test]
fn junk_spirv_behind_a_valid_magic_number_is_refused_and_the_device_goes_on() {
    let _suite = suite_lock();
    let junk = vec![0x0723_0203, 0x0001_0000, 0, 9, 0, 0xdead_beef, 1, 2, 3];
    assert_refused(
        VulkanKernelSource::spirv("junk", junk, "main", KernelSignature::new(1, 0)),
        "junk",
        "naga's SPIR-V front end refused it",
    );
    // The device is untouched: a user kernel still runs under validation.
    let backend = match support::backend(MemoryMode::HostVisible) {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: user kernel: {why}");
            return;
        }
    };
    let handle = backend.clone();
    {
        let s = StreamId::new(0);
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
        let x = dev.alloc(s, 256).unwrap();
        let y = dev.alloc(s, 256).unwrap();
        dev.write(s, &x, 0, bytes(&[1.0; 64])).unwrap();
        dev.launch(s, &k, [1, 1, 1], &[Arg::read(&x), Arg::write(&y)], &[])
            .unwrap();
        assert_eq!(floats(&dev.read(s, &y).unwrap()), vec![3.0; 64]);
    }
    support::assert_no_validation_messages(&handle);
}

#[test]
fn valid_spirv_whose_bindings_the_signature_lacks_is_refused() {
    // `triple` binds two storage buffers; a signature of one has no binding 1.
    assert_refused(
        VulkanKernelSource::spirv("short", spirv(TRIPLE), "triple", KernelSignature::new(1, 0)),
        "short",
        "uses the storage buffer y at set 0 binding 1, which the signature does not declare",
    );
    // Without debug names (a release build's default), the binding is still named.
    assert_refused(
        VulkanKernelSource::spirv(
            "short",
            spirv_with(TRIPLE, false),
            "triple",
            KernelSignature::new(1, 0),
        ),
        "short",
        "at set 0 binding 1, which the signature does not declare",
    );
    // A buffer in set 1: the layout has set 0 only.
    let other_set = TRIPLE.replace("@group(0) @binding(1)", "@group(1) @binding(0)");
    assert_refused(
        VulkanKernelSource::spirv(
            "other-set",
            spirv(&other_set),
            "triple",
            KernelSignature::new(2, 0),
        ),
        "other-set",
        "at set 1 binding 0",
    );
    // A uniform buffer: the layout has storage buffers only.
    let uniform = TRIPLE
        .replace(
            "var<storage, read> x: array<f32>;",
            "var<uniform> x: array<vec4<f32>, 4>;",
        )
        .replace("3.0 * x[gid.x]", "3.0 * x[0].x");
    assert_refused(
        VulkanKernelSource::spirv(
            "uniform",
            spirv(&uniform),
            "triple",
            KernelSignature::new(2, 0),
        ),
        "uniform",
        "uses a uniform buffer (x at set 0 binding 0)",
    );
    // No such entry point.
    assert_refused(
        VulkanKernelSource::spirv("unnamed", spirv(TRIPLE), "main", KernelSignature::new(2, 0)),
        "unnamed",
        "no compute entry point named \"main\"",
    );
    // The same module with its real signature is accepted.
    VulkanKernelSource::spirv(
        "triple",
        spirv(TRIPLE),
        "triple",
        KernelSignature::new(2, 0),
    )
    .expect("accepted");
}
