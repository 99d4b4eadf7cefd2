//! The launch model on CUDA (the driver model in every test run; a GPU where one is):
//! a kernel as an engine writes it (plain pointers, dimensions and a factor as scalars,
//! a 256-thread block, a reduction in dynamic shared memory), and the user's own work
//! launching a kernel of its own on the raw stream, each run eagerly, captured and
//! replayed with new inputs written in place, bit for bit; programmatic dependent
//! launch reaching the driver, eagerly and as a captured graph's edge, on every replay;
//! the shipped PTX is what the pinned NVRTC makes of the source.

use std::ffi::{CString, c_int, c_void};
use std::sync::{Arc, OnceLock};

use capture_core::{
    Arg, Builtin, Device, DeviceConfig, Dims, GraphUpdates, KernelSignature, Param,
    ProgrammaticLaunch, ServerError, StreamId,
};
use capture_cuda::{CudaKernelSource, CudaWork, NVRTC_RELEASE, compile_ptx, nvrtc_version};

use crate::driver_model;
use crate::support::{self, nvrtc_required};

const S: StreamId = StreamId::new(0);
const SOURCE: &str = include_str!("kernels/user.cu");
const PTX: &str = include_str!("kernels/user.compute_80.ptx");

/// `(const float*, float*, unsigned, float)`: both kernels' parameter list.
const SIGNATURE: KernelSignature = KernelSignature::of(&[
    Param::READ,
    Param::WRITE,
    Param::scalar::<u32>(),
    Param::scalar::<f32>(),
]);

/// Sums of 256-element blocks of `x * scale`, in the kernel's order (a tree over
/// strides 128, 64, …), so the host and the device agree to the bit.
fn tree_sums(x: &[f32], scale: f32) -> Vec<f32> {
    x.chunks(256)
        .map(|c| {
            let mut p: Vec<f32> = (0..256)
                .map(|t| c.get(t).map_or(0.0, |v| v * scale))
                .collect();
            let mut stride = 128;
            while stride > 0 {
                for t in 0..stride {
                    p[t] += p[t + stride];
                }
                stride /= 2;
            }
            p[0]
        })
        .collect()
}

#[test]
fn a_kernel_with_scalars_a_256_thread_block_and_dynamic_shared_memory_captures_and_replays() {
    let Some(cuda) = support::open("launch model: block_sum") else {
        return;
    };
    let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
    let source = CudaKernelSource::ptx("block_sum", PTX.to_owned(), "block_sum", SIGNATURE)
        .unwrap()
        .with_block([256, 1, 1]);
    let k = dev.kernel(source);
    let n = 1000u32;
    let x = dev.alloc(S, u64::from(n) * 4).unwrap();
    let sums = dev.alloc(S, 16).unwrap();
    let input: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.25).collect();
    dev.write_values(S, &x, 0, &input).unwrap();
    let dims = Dims::grid([4, 1, 1])
        .block([256, 1, 1])
        .shared_bytes(256 * 4);
    let launch = |d: &Device<capture_cuda::CudaBackend>, scale: f32| {
        d.launch(
            S,
            &k,
            dims,
            &[
                Arg::read(&x),
                Arg::write(&sums),
                Arg::scalar(n),
                Arg::scalar(scale),
            ],
            &[],
        )
    };
    launch(&dev, 2.0).unwrap();
    let eager = dev.read_values::<f32>(S, &sums).unwrap();
    assert_eq!(eager, tree_sums(&input, 2.0));
    let g = dev.capture(S, |d| launch(d, 2.0)).unwrap();
    let next: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.5).collect();
    dev.write_values(S, &x, 0, &next).unwrap();
    dev.replay(S, &g, 1).unwrap();
    let replayed = dev.read_values::<f32>(S, &sums).unwrap();
    assert_eq!(replayed, tree_sums(&next, 2.0));
    // Back to the first input: the replay gives the eager launch's bits.
    dev.write_values(S, &x, 0, &input).unwrap();
    dev.replay(S, &g, 1).unwrap();
    let again = dev.read_values::<f32>(S, &sums).unwrap();
    assert_eq!(
        again.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        eager.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        "bit for bit"
    );
    dev.drop_graph(g).unwrap();
    // A signature that disagrees with the image (a length the kernel does not take) is
    // refused at the first launch, naming both lists.
    let wrong = dev.kernel(
        CudaKernelSource::ptx(
            "block_sum",
            PTX.to_owned(),
            "block_sum",
            KernelSignature::of(&[
                Param::READ,
                Param::WRITE,
                Param::scalar::<u64>(),
                Param::scalar::<f32>(),
            ]),
        )
        .unwrap(),
    );
    let err = dev
        .launch(
            S,
            &wrong,
            dims,
            &[
                Arg::read(&x),
                Arg::write(&sums),
                Arg::scalar(u64::from(n)),
                Arg::scalar(1.0f32),
            ],
            &[],
        )
        .unwrap_err();
    assert!(err.to_string().contains("block_sum"), "{err}");
}

/// The driver's entry points the user's own work calls, loaded as an engine would.
struct Driver {
    lib: libloading::Library,
    // SAFETY: function-pointer types only; each call below says why it is sound.
    module_load: unsafe extern "C" fn(*mut *mut c_void, *const c_void) -> c_int,
    // SAFETY: as above, a type; the call site holds the argument.
    get_function: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, *const i8) -> c_int,
    // SAFETY: as above, a type; the call site holds the argument.
    launch: unsafe extern "C" fn(
        *mut c_void,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        *mut c_void,
        *mut *mut c_void,
        *mut *mut c_void,
    ) -> c_int,
}

impl Driver {
    fn load() -> Self {
        // SAFETY: the process's CUDA driver (or its model), already loaded by the
        // backend; each symbol is cuda.h's entry point of that name and signature.
        unsafe {
            let lib = libloading::Library::new("libcuda.so.1").unwrap();
            let module_load = *lib.get(b"cuModuleLoadData\0").unwrap();
            let get_function = *lib.get(b"cuModuleGetFunction\0").unwrap();
            let launch = *lib.get(b"cuLaunchKernel\0").unwrap();
            Self {
                lib,
                module_load,
                get_function,
                launch,
            }
        }
    }
}

/// The user's module and its `scale` function, loaded on the first run (warmup's eager
/// call, never inside a window).
struct Module {
    function: usize,
}

#[test]
fn foreign_work_launches_the_users_own_kernel_on_the_raw_stream() {
    let Some(cuda) = support::open("launch model: foreign work") else {
        return;
    };
    let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
    let driver = Arc::new(Driver::load());
    let module: Arc<OnceLock<Module>> = Arc::new(OnceLock::new());
    let n = 300u32;
    let (x, y) = (
        dev.alloc(S, u64::from(n) * 4).unwrap(),
        dev.alloc(S, u64::from(n) * 4).unwrap(),
    );
    let input: Vec<f32> = (0..n).map(|i| i as f32).collect();
    dev.write_values(S, &x, 0, &input).unwrap();
    let ptx = CString::new(PTX).unwrap();
    let (d, m) = (Arc::clone(&driver), Arc::clone(&module));
    let body = move |call: &capture_cuda::CudaWorkCall<'_>| -> Result<(), String> {
        let module = m.get_or_init(|| {
            let (mut module, mut function) = (std::ptr::null_mut(), std::ptr::null_mut());
            // SAFETY: the backend made its context current for this call; the PTX is
            // NUL-terminated; both out-pointers are valid.
            unsafe {
                assert_eq!((d.module_load)(&mut module, ptx.as_ptr().cast()), 0);
                assert_eq!(
                    (d.get_function)(&mut function, module, c"scale".as_ptr()),
                    0
                );
            }
            Module {
                function: function as usize,
            }
        });
        let [x, y] = call.ranges() else {
            return Err("two ranges".into());
        };
        let (mut xp, mut yp, mut count, mut a) = (x.ptr, y.ptr, (x.bytes / 4) as u32, 3.0f32);
        let mut params = [
            (&mut xp as *mut u64).cast::<c_void>(),
            (&mut yp as *mut u64).cast(),
            (&mut count as *mut u32).cast(),
            (&mut a as *mut f32).cast(),
        ];
        // SAFETY: `scale(const float*, float*, unsigned, float)` takes exactly these
        // four values, which live across the call; the stream is the one given.
        let code = unsafe {
            (d.launch)(
                module.function as *mut c_void,
                count.div_ceil(128),
                1,
                1,
                128,
                1,
                1,
                0,
                call.stream(),
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        };
        if code == 0 {
            Ok(())
        } else {
            Err(format!("cuLaunchKernel: {code}"))
        }
    };
    // SAFETY: the work launches one kernel, on the stream it is given, over the two
    // declared ranges only (reading x, writing y, n elements); it loads its module on
    // its first run, eagerly, before any window; it synchronises nothing.
    let work = unsafe { CudaWork::new("users_scale", body) }.keep(driver);
    let args = [Arg::read(&x), Arg::write(&y)];
    dev.foreign_work(S, &args, work.clone()).unwrap();
    let tripled: Vec<f32> = input.iter().map(|v| v * 3.0).collect();
    assert_eq!(dev.read_values::<f32>(S, &y).unwrap(), tripled);
    let g = dev
        .capture(S, |d| d.foreign_work(S, &args, work.clone()))
        .unwrap();
    let next: Vec<f32> = (0..n).map(|i| (n - i) as f32 * 0.5).collect();
    dev.write_values(S, &x, 0, &next).unwrap();
    dev.replay(S, &g, 2).unwrap();
    let want: Vec<f32> = next.iter().map(|v| v * 3.0).collect();
    assert_eq!(
        dev.read_values::<f32>(S, &y).unwrap(),
        want,
        "the graph replayed the user's launch over the new input"
    );
    dev.drop_graph(g).unwrap();
}

#[test]
fn the_shipped_user_kernels_are_what_nvrtc_makes_of_their_source() {
    let (_, version) = match nvrtc_version() {
        Ok(found) => found,
        Err(why) => {
            assert!(!nvrtc_required(), "CAPTURE_REQUIRE_NVRTC=1 but {why}");
            println!("SKIP: user kernels' PTX: libnvrtc is not installed");
            return;
        }
    };
    if version != NVRTC_RELEASE && !nvrtc_required() {
        println!("SKIP: user kernels' PTX: NVRTC {version:?} is not the pinned release");
        return;
    }
    let ptx = compile_ptx(SOURCE, "user.cu", "compute_80").unwrap();
    assert_eq!(ptx, PTX, "tests/it/kernels/user.compute_80.ptx is stale");
}

#[test]
fn a_programmatic_launch_reaches_the_driver_eagerly_and_in_a_captured_graph() {
    let Some(cuda) = support::open("launch model: programmatic dependent launch") else {
        return;
    };
    let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
    let add = dev.builtin(Builtin::AddScalar);
    let n = 64u64;
    let (x, y) = (dev.alloc(S, n * 4).unwrap(), dev.alloc(S, n * 4).unwrap());
    dev.write_values(S, &x, 0, &vec![1.0f32; n as usize])
        .unwrap();
    let info = Builtin::AddScalar.info(n, 1.0);
    let pdl = Dims::grid([1, 1, 1]).programmatic(true);
    // x -> y -> x, each launch allowed to overlap the one before.
    let chain = |d: &Device<capture_cuda::CudaBackend>| -> Result<(), ServerError> {
        d.launch(S, &add, pdl, &[Arg::read(&x), Arg::write(&y)], &info)?;
        d.launch(S, &add, pdl, &[Arg::read(&y), Arg::write(&x)], &info)
    };
    if let ProgrammaticLaunch::Unsupported(why) = dev.programmatic_launch() {
        // A GPU older than compute capability 9.0: refused by the core, typed and named.
        assert!(
            !support::on_model(&cuda),
            "the model is compute capability 9.0"
        );
        let e = chain(&dev).unwrap_err();
        assert!(
            matches!(
                e,
                ServerError::InvalidArgument {
                    what: "programmatic launch",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(e.to_string().contains(why), "{e}");
        println!("SKIP: programmatic launch: {why}");
        return;
    }
    let before = driver_model::counts();
    chain(&dev).unwrap();
    assert_eq!(
        dev.read_values::<f32>(S, &x).unwrap(),
        vec![3.0; n as usize]
    );
    let eager = driver_model::counts();
    // A launch in stream order adds nothing to the programmatic count.
    dev.launch(S, &add, [1, 1, 1], &[Arg::read(&x), Arg::write(&y)], &info)
        .unwrap();
    assert_eq!(
        dev.read_values::<f32>(S, &y).unwrap(),
        vec![4.0; n as usize]
    );
    let in_order = driver_model::counts();
    // Warmup runs the chain (x = 5), the recording runs nothing; three replays, x = 11.
    let g = dev.capture(S, |d| chain(d)).unwrap();
    dev.replay(S, &g, 3).unwrap();
    assert_eq!(
        dev.read_values::<f32>(S, &x).unwrap(),
        vec![11.0; n as usize]
    );
    let replayed = driver_model::counts();
    // What the driver made of it (on a GPU as on the model): the second launch's
    // programmatic edge from the first.
    match cuda.backend.last_graph_shape() {
        Some(shape) => assert_eq!(
            (shape.nodes, shape.programmatic_edges()),
            (2, 1),
            "{shape:?}"
        ),
        None => println!("SKIP: the graph's edges: the driver has no cuGraphGetEdges_v2"),
    }
    dev.drop_graph(g).unwrap();
    if let (Some(b), Some(e), Some(o), Some(r)) = (before, eager, in_order, replayed) {
        let runs = |c: driver_model::Counts| c.programmatic_kernels_run;
        assert_eq!(
            runs(e) - runs(b),
            2,
            "both eager launches carried the attribute"
        );
        assert_eq!(runs(o), runs(e), "the launch in stream order did not");
        assert_eq!(
            runs(r) - runs(o),
            2 + 3 * 2,
            "warmup's two, then each replay's two graph nodes: the attribute is in the graph"
        );
        assert_eq!(r.graphs_launched - o.graphs_launched, 3);
    }
    // A user kernel that does not declare the wait is refused before the driver, and the
    // stream goes on.
    let k = dev.kernel(
        CudaKernelSource::ptx("block_sum", PTX.to_owned(), "block_sum", SIGNATURE)
            .unwrap()
            .with_block([256, 1, 1]),
    );
    let sums = dev.alloc(S, 16).unwrap();
    let args = [
        Arg::read(&x),
        Arg::write(&sums),
        Arg::scalar(n as u32),
        Arg::scalar(1.0f32),
    ];
    let dims = Dims::grid([1, 1, 1]).block([256, 1, 1]).shared_bytes(1024);
    let e = dev
        .launch(S, &k, dims.programmatic(true), &args, &[])
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("kernel block_sum (kernel#1): the kernel does not declare that it waits"),
        "{e}"
    );
    dev.launch(S, &k, dims, &args, &[]).unwrap();
    assert_eq!(dev.read_values::<f32>(S, &sums).unwrap()[0], 11.0 * 64.0);
}

/// `CUlaunchAttribute` (cuda.h): the id, 4 bytes of padding, a 64-byte union.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct Attribute {
    id: c_int,
    pad: c_int,
    value: [c_int; 16],
}

/// `CUlaunchConfig` (cuda.h).
#[repr(C)]
struct Config {
    grid: [u32; 3],
    block: [u32; 3],
    shared: u32,
    stream: *mut c_void,
    attrs: *mut Attribute,
    count: u32,
}

/// `cuLaunchKernelEx`.
// SAFETY: a type only; each call through it is an unsafe block with its own SAFETY line.
type LaunchEx =
    unsafe extern "C" fn(*const Config, *mut c_void, *mut *mut c_void, *mut *mut c_void) -> c_int;

#[test]
fn the_driver_model_checks_cu_launch_kernel_ex_as_cuda_h_documents_it() {
    let Some(cuda) = support::open("launch model: cuLaunchKernelEx on the driver model") else {
        return;
    };
    if !support::on_model(&cuda) {
        println!("SKIP: cuLaunchKernelEx's refusals: they are the driver model's, this is a GPU");
        return;
    }
    let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
    let driver = Arc::new(Driver::load());
    // SAFETY: the model exports cuLaunchKernelEx with cuda.h's signature.
    let launch_ex: LaunchEx = unsafe { *driver.lib.get(b"cuLaunchKernelEx\0").unwrap() };
    let n = 128u32;
    let (x, y) = (
        dev.alloc(S, u64::from(n) * 4).unwrap(),
        dev.alloc(S, u64::from(n) * 4).unwrap(),
    );
    dev.write_values(S, &x, 0, &vec![2.0f32; n as usize])
        .unwrap();
    // `scale` as a kernel that waits for its grid dependency (sm_90 PTX holding
    // griddepcontrol.wait): the model faults a programmatic launch of one that does not.
    let entry = PTX.find(".entry scale").expect("the scale entry");
    let open = entry + PTX[entry..].find('{').expect("its body");
    let waiting = format!(
        "{}{{\n\tgriddepcontrol.wait;{}",
        PTX[..open].replace(".target sm_80", ".target sm_90"),
        &PTX[open + 1..]
    );
    let ptx = CString::new(waiting).unwrap();
    let codes: Arc<std::sync::Mutex<Vec<c_int>>> = Arc::default();
    let (d, seen) = (Arc::clone(&driver), Arc::clone(&codes));
    let body = move |call: &capture_cuda::CudaWorkCall<'_>| -> Result<(), String> {
        let (mut module, mut function) = (std::ptr::null_mut(), std::ptr::null_mut());
        // SAFETY: the backend made its context current for this call; the PTX is
        // NUL-terminated; both out-pointers are valid. (Loaded eagerly, never in a
        // window; left loaded, as an engine's module would be.)
        unsafe {
            assert_eq!((d.module_load)(&mut module, ptx.as_ptr().cast()), 0);
            assert_eq!(
                (d.get_function)(&mut function, module, c"scale".as_ptr()),
                0
            );
        }
        let [x, y] = call.ranges() else {
            return Err("two ranges".into());
        };
        let (mut xp, mut yp, mut count, mut a) = (x.ptr, y.ptr, n, 3.0f32);
        let mut params = [
            (&mut xp as *mut u64).cast::<c_void>(),
            (&mut yp as *mut u64).cast(),
            (&mut count as *mut u32).cast(),
            (&mut a as *mut f32).cast(),
        ];
        let attribute = |id: c_int, first: c_int| {
            let mut value = [0; 16];
            value[0] = first;
            Attribute { id, pad: 0, value }
        };
        let mut launch = |attrs: Option<&mut [Attribute]>| {
            let (ptr, count) = match attrs {
                Some(a) => (a.as_mut_ptr(), a.len() as u32),
                None => (std::ptr::null_mut(), 1),
            };
            let config = Config {
                grid: [1, 1, 1],
                block: [n, 1, 1],
                shared: 0,
                stream: call.stream(),
                attrs: ptr,
                count,
            };
            // SAFETY: `scale(const float*, float*, unsigned, float)` takes exactly these
            // four values, which live across the call, on the stream given; `config`
            // and its attributes live across it too (a NULL list is the case checked).
            unsafe { launch_ex(&config, function, params.as_mut_ptr(), std::ptr::null_mut()) }
        };
        let mut seen = seen.lock().unwrap();
        // An id past cuda.h's enum; a list the count says is there but is NULL.
        seen.push(launch(Some(&mut [attribute(99, 1)])));
        seen.push(launch(None));
        // Cooperative launch: documented, not modelled.
        seen.push(launch(Some(&mut [attribute(2, 1)])));
        // Ignored entries, then programmatic stream serialization: accepted.
        seen.push(launch(Some(&mut [attribute(0, 7), attribute(6, 1)])));
        match seen.last() {
            Some(0) => Ok(()),
            other => Err(format!("cuLaunchKernelEx: {other:?}")),
        }
    };
    // SAFETY: the work launches `scale` on the stream it is given over the two declared
    // ranges only (reading x, writing y, n elements); the launches it expects to be
    // refused enqueue nothing; it loads its module eagerly; it synchronises nothing.
    let work = unsafe { CudaWork::new("launch_ex", body) }.keep(driver);
    let before = driver_model::counts().expect("the model");
    dev.foreign_work(S, &[Arg::read(&x), Arg::write(&y)], work)
        .unwrap();
    assert_eq!(
        dev.read_values::<f32>(S, &y).unwrap(),
        vec![6.0; n as usize]
    );
    let after = driver_model::counts().expect("the model");
    // CUDA_ERROR_INVALID_VALUE twice, CUDA_ERROR_NOT_SUPPORTED, CUDA_SUCCESS.
    assert_eq!(*codes.lock().unwrap(), [1, 1, 801, 0]);
    assert_eq!(
        after.kernels_run - before.kernels_run,
        1,
        "only the accepted one ran"
    );
    assert_eq!(
        after.programmatic_kernels_run - before.programmatic_kernels_run,
        1
    );
}

#[test]
fn a_captured_launch_changes_through_its_slots_and_only_later_replays_see_it() {
    let Some(cuda) = support::open("launch model: slots") else {
        return;
    };
    let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
    assert_eq!(dev.graph_updates(), GraphUpdates::Supported);
    let source = CudaKernelSource::ptx("block_sum", PTX.to_owned(), "block_sum", SIGNATURE)
        .unwrap()
        .with_block([256, 1, 1]);
    let k = dev.kernel(source);
    let n = 1024u32;
    let x = dev.alloc(S, u64::from(n) * 4).unwrap();
    let (a, b) = (dev.alloc(S, 16).unwrap(), dev.alloc(S, 16).unwrap());
    let input: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.25).collect();
    dev.write_values(S, &x, 0, &input).unwrap();
    dev.write_values(S, &b, 0, &[0.0f32; 4]).unwrap();
    let dims = Dims::grid([4, 1, 1])
        .block([256, 1, 1])
        .shared_bytes(256 * 4)
        .slot("blocks");
    let asked = driver_model::counts();
    let g = dev
        .capture(S, |d| {
            d.launch(
                S,
                &k,
                dims,
                &[
                    Arg::read(&x),
                    Arg::write(&a).slot("sums"),
                    Arg::scalar(n),
                    Arg::scalar(2.0f32).slot("scale"),
                ],
                &[],
            )
        })
        .unwrap();
    assert_eq!(g.slots().unwrap().len(), 3);
    // Only a launch naming a slot asks the driver for the node it made (7(e)): the same
    // launch without slots, captured, asks nothing.
    let slotted = driver_model::counts();
    let plain = dev
        .capture(S, |d| {
            let fixed = Dims::grid([4, 1, 1])
                .block([256, 1, 1])
                .shared_bytes(256 * 4);
            let args = [
                Arg::read(&x),
                Arg::write(&a),
                Arg::scalar(n),
                Arg::scalar(2.0f32),
            ];
            d.launch(S, &k, fixed, &args, &[])?;
            d.launch(S, &k, fixed, &args, &[])
        })
        .unwrap();
    if let (Some(asked), Some(slotted), Some(plain)) = (asked, slotted, driver_model::counts()) {
        assert_eq!(slotted.capture_info_calls - asked.capture_info_calls, 1);
        assert_eq!(plain.capture_info_calls, slotted.capture_info_calls);
    }
    drop(plain);
    let before = driver_model::counts();
    g.set("scale", 3.0f32).unwrap();
    dev.replay(S, &g, 1).unwrap();
    // Queued, not run (the model runs at a wait): the next updates must not reach it.
    g.rebind("sums", &b).unwrap();
    g.set("scale", 5.0f32).unwrap();
    dev.replay(S, &g, 1).unwrap();
    assert_eq!(
        dev.read_values::<f32>(S, &a).unwrap(),
        tree_sums(&input, 3.0)
    );
    assert_eq!(
        dev.read_values::<f32>(S, &b).unwrap(),
        tree_sums(&input, 5.0)
    );
    // A shorter grid: only the first two blocks' sums are written.
    dev.write_values(S, &b, 0, &[-1.0f32; 4]).unwrap();
    g.set_grid("blocks", [2, 1, 1]).unwrap();
    dev.replay(S, &g, 1).unwrap();
    let sums = tree_sums(&input, 5.0);
    assert_eq!(
        dev.read_values::<f32>(S, &b).unwrap(),
        [sums[0], sums[1], -1.0, -1.0]
    );
    // Refused, changing nothing: past the grid's bound, another scalar size.
    assert!(matches!(
        g.set_grid("blocks", [5, 1, 1]),
        Err(ServerError::SlotRefused(_))
    ));
    assert!(matches!(
        g.set("scale", 1u64),
        Err(ServerError::SlotRefused(_))
    ));
    if let (Some(before), Some(after)) = (before, driver_model::counts()) {
        assert_eq!(
            after.kernel_node_updates - before.kernel_node_updates,
            4,
            "cuGraphExecKernelNodeSetParams once per accepted update"
        );
    }
}
