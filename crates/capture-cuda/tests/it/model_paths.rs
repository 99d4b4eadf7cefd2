//! What the CUDA driver model shows of the backend's CUDA paths that no other test
//! reaches (issue 45, item 7), each on the model alone (a GPU says `SKIP:`): a graph's
//! nodes run in an order its edges allow and the recording's does not suggest, so an
//! edge left out shows as wrong bytes; `cuStreamGetCaptureInfo` answers for the stream
//! asked, not the capture; a programmatic launch of code that never waits for its grid
//! dependency faults; and a driver older than CUDA 12.3 runs no programmatic launch.

use std::ffi::{CString, c_int, c_void};
use std::sync::{Arc, Mutex};

use capture_core::{Arg, Device, DeviceConfig, ProgrammaticLaunch, ServerError, StreamId};
use capture_cuda::CudaWork;

use crate::support;

const S: StreamId = StreamId::new(0);

/// The launch-model tests' kernels (`kernels/user.cu`), NVRTC's PTX: `scale(x, y, n, a)`
/// is `y = a * x` over `n` elements.
const PTX: &str = include_str!("kernels/user.compute_80.ptx");

type Handle = *mut c_void;

/// cuda.h's entry points these tests call, as the model exports them.
struct Driver {
    _lib: libloading::Library,
    // SAFETY: function-pointer types only; each call below says why it is sound.
    stream_create: unsafe extern "C" fn(*mut Handle, u32) -> c_int,
    // SAFETY: as above, a type.
    stream_destroy: unsafe extern "C" fn(Handle) -> c_int,
    // SAFETY: as above, a type.
    stream_sync: unsafe extern "C" fn(Handle) -> c_int,
    // SAFETY: as above, a type.
    event_create: unsafe extern "C" fn(*mut Handle, u32) -> c_int,
    // SAFETY: as above, a type.
    event_destroy: unsafe extern "C" fn(Handle) -> c_int,
    // SAFETY: as above, a type.
    event_record: unsafe extern "C" fn(Handle, Handle) -> c_int,
    // SAFETY: as above, a type.
    wait_event: unsafe extern "C" fn(Handle, Handle, u32) -> c_int,
    // SAFETY: as above, a type.
    begin: unsafe extern "C" fn(Handle, c_int) -> c_int,
    // SAFETY: as above, a type.
    end: unsafe extern "C" fn(Handle, *mut Handle) -> c_int,
    // SAFETY: as above, a type.
    capture_info: unsafe extern "C" fn(
        Handle,
        *mut c_int,
        *mut u64,
        *mut Handle,
        *mut *const Handle,
        *mut usize,
    ) -> c_int,
    // SAFETY: as above, a type.
    instantiate: unsafe extern "C" fn(*mut Handle, Handle, u64) -> c_int,
    // SAFETY: as above, a type.
    graph_launch: unsafe extern "C" fn(Handle, Handle) -> c_int,
    // SAFETY: as above, a type.
    exec_destroy: unsafe extern "C" fn(Handle) -> c_int,
    // SAFETY: as above, a type.
    graph_destroy: unsafe extern "C" fn(Handle) -> c_int,
    // SAFETY: as above, a type.
    module_load: unsafe extern "C" fn(*mut Handle, *const c_void) -> c_int,
    // SAFETY: as above, a type.
    module_unload: unsafe extern "C" fn(Handle) -> c_int,
    // SAFETY: as above, a type.
    get_function: unsafe extern "C" fn(*mut Handle, Handle, *const i8) -> c_int,
    // SAFETY: as above, a type.
    launch: unsafe extern "C" fn(
        Handle,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        u32,
        Handle,
        *mut Handle,
        *mut Handle,
    ) -> c_int,
    // SAFETY: as above, a type.
    launch_ex: unsafe extern "C" fn(*const Config, Handle, *mut Handle, *mut Handle) -> c_int,
    // SAFETY: as above, a type.
    ctx_current: unsafe extern "C" fn(*mut Handle) -> c_int,
    // SAFETY: as above, a type.
    ctx_set_current: unsafe extern "C" fn(Handle) -> c_int,
    // SAFETY: as above, a type.
    ctx_create: unsafe extern "C" fn(*mut Handle, u32, c_int) -> c_int,
    // SAFETY: as above, a type.
    ctx_destroy: unsafe extern "C" fn(Handle) -> c_int,
    // SAFETY: as above, a type.
    mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> c_int,
    // SAFETY: as above, a type.
    mem_free: unsafe extern "C" fn(u64) -> c_int,
}

impl Driver {
    fn load() -> Self {
        // SAFETY: the process's CUDA driver model, already loaded by the backend; each
        // symbol is cuda.h's entry point of that name and signature.
        unsafe {
            let lib = libloading::Library::new("libcuda.so.1").unwrap();
            Self {
                stream_create: *lib.get(b"cuStreamCreate\0").unwrap(),
                stream_destroy: *lib.get(b"cuStreamDestroy_v2\0").unwrap(),
                stream_sync: *lib.get(b"cuStreamSynchronize\0").unwrap(),
                event_create: *lib.get(b"cuEventCreate\0").unwrap(),
                event_destroy: *lib.get(b"cuEventDestroy_v2\0").unwrap(),
                event_record: *lib.get(b"cuEventRecord\0").unwrap(),
                wait_event: *lib.get(b"cuStreamWaitEvent\0").unwrap(),
                begin: *lib.get(b"cuStreamBeginCapture_v2\0").unwrap(),
                end: *lib.get(b"cuStreamEndCapture\0").unwrap(),
                capture_info: *lib.get(b"cuStreamGetCaptureInfo_v2\0").unwrap(),
                instantiate: *lib.get(b"cuGraphInstantiateWithFlags\0").unwrap(),
                graph_launch: *lib.get(b"cuGraphLaunch\0").unwrap(),
                exec_destroy: *lib.get(b"cuGraphExecDestroy\0").unwrap(),
                graph_destroy: *lib.get(b"cuGraphDestroy\0").unwrap(),
                module_load: *lib.get(b"cuModuleLoadData\0").unwrap(),
                module_unload: *lib.get(b"cuModuleUnload\0").unwrap(),
                get_function: *lib.get(b"cuModuleGetFunction\0").unwrap(),
                launch: *lib.get(b"cuLaunchKernel\0").unwrap(),
                launch_ex: *lib.get(b"cuLaunchKernelEx\0").unwrap(),
                ctx_current: *lib.get(b"cuCtxGetCurrent\0").unwrap(),
                ctx_set_current: *lib.get(b"cuCtxSetCurrent\0").unwrap(),
                ctx_create: *lib.get(b"cuCtxCreate_v2\0").unwrap(),
                ctx_destroy: *lib.get(b"cuCtxDestroy_v2\0").unwrap(),
                mem_alloc: *lib.get(b"cuMemAlloc_v2\0").unwrap(),
                mem_free: *lib.get(b"cuMemFree_v2\0").unwrap(),
                _lib: lib,
            }
        }
    }
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
    stream: Handle,
    attrs: *mut Attribute,
    count: u32,
}

/// The model, or `None` after a `SKIP:` line (no driver, or a GPU's).
fn on_model(test: &str) -> Option<support::Cuda> {
    let cuda = support::open(test)?;
    if !support::on_model(&cuda) {
        println!("SKIP: {test}: what it shows is the driver model's, this is a GPU");
        return None;
    }
    Some(cuda)
}

/// What the two-stream capture saw: each stream's frontier after the branch's launch,
/// and the codes of the calls.
#[derive(Debug, Default)]
struct Seen {
    origin_frontier: usize,
    branch_frontier: usize,
    different_nodes: bool,
    codes: Vec<c_int>,
}

/// Captures, on two streams of its own, `y = 2x` on the origin, then forks: `z = 3y` on
/// the branch, and `w = 5z` back on the origin, joined (`join_first`) before `w`'s
/// launch or only at the end (an edge left out: `w` does not follow `z`); launches the
/// graph on the work's stream. Notes each stream's capture frontier after `z`'s launch.
fn fork_step(d: &Driver, call: &capture_cuda::CudaWorkCall<'_>, join_first: bool, seen: &mut Seen) {
    let [x, y, z, w] = call.ranges() else {
        seen.codes.push(-1);
        return;
    };
    let n = (x.bytes / 4) as u32;
    let ptx = CString::new(PTX).unwrap();
    let mut code = |c: c_int| seen.codes.push(c);
    let (mut a, mut b, mut fork, mut join) = (
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
    );
    let (mut module, mut scale) = (std::ptr::null_mut(), std::ptr::null_mut());
    let (mut graph, mut exec) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: the backend made its context current for this call; the PTX is
    // NUL-terminated; both out-pointers are valid; the module is unloaded below.
    unsafe {
        code((d.module_load)(&mut module, ptx.as_ptr().cast()));
        code((d.get_function)(&mut scale, module, c"scale".as_ptr()));
    }
    let launch = |on: Handle, from: u64, to: u64, k: f32| -> c_int {
        let (mut from, mut to, mut count, mut k) = (from, to, n, k);
        let mut params = [
            (&mut from as *mut u64).cast::<c_void>(),
            (&mut to as *mut u64).cast(),
            (&mut count as *mut u32).cast(),
            (&mut k as *mut f32).cast(),
        ];
        // SAFETY: `scale(const float*, float*, unsigned, float)` takes exactly these
        // four values, which live across the call; the ranges are the work's, n floats.
        unsafe {
            (d.launch)(
                scale,
                1,
                1,
                1,
                n,
                1,
                1,
                0,
                on,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            )
        }
    };
    // SAFETY: the backend made its context current for this call; every out-pointer is
    // valid; the streams, events, module, graph and executable are this body's own,
    // destroyed before it returns; the graph launch goes on the work's stream, over the
    // work's declared ranges.
    unsafe {
        code((d.stream_create)(&mut a, 1));
        code((d.stream_create)(&mut b, 1));
        code((d.event_create)(&mut fork, 2));
        code((d.event_create)(&mut join, 2));
        code((d.begin)(a, 2));
        code(launch(a, x.ptr, y.ptr, 2.0));
        code((d.event_record)(fork, a));
        code((d.wait_event)(b, fork, 0));
        code(launch(b, y.ptr, z.ptr, 3.0));
        // Each stream's own frontier: the origin's is y's node, the branch's z's.
        let mut status = 0;
        let (mut deps_a, mut deps_b): (*const Handle, *const Handle) =
            (std::ptr::null(), std::ptr::null());
        let (mut count_a, mut count_b) = (0usize, 0usize);
        let mut id = 0u64;
        let mut g = std::ptr::null_mut();
        code((d.capture_info)(
            a,
            &mut status,
            &mut id,
            &mut g,
            &mut deps_a,
            &mut count_a,
        ));
        let node_a = if count_a == 1 {
            *deps_a
        } else {
            std::ptr::null_mut()
        };
        code((d.capture_info)(
            b,
            &mut status,
            &mut id,
            &mut g,
            &mut deps_b,
            &mut count_b,
        ));
        let node_b = if count_b == 1 {
            *deps_b
        } else {
            std::ptr::null_mut()
        };
        seen.origin_frontier = count_a;
        seen.branch_frontier = count_b;
        seen.different_nodes = !node_a.is_null() && !node_b.is_null() && node_a != node_b;
        if join_first {
            code((d.event_record)(join, b));
            code((d.wait_event)(a, join, 0));
        }
        code(launch(a, z.ptr, w.ptr, 5.0));
        if !join_first {
            // Joined only now, so the capture ends: `w`'s node has no edge from `z`'s.
            code((d.event_record)(join, b));
            code((d.wait_event)(a, join, 0));
        }
        code((d.end)(a, &mut graph));
        code((d.instantiate)(&mut exec, graph, 0));
        code((d.graph_launch)(exec, call.stream().cast()));
        code((d.stream_sync)(call.stream().cast()));
        code((d.exec_destroy)(exec));
        code((d.graph_destroy)(graph));
        code((d.event_destroy)(fork));
        code((d.event_destroy)(join));
        code((d.stream_destroy)(a));
        code((d.stream_destroy)(b));
        code((d.module_unload)(module));
    }
}

/// 7(a) and 7(g): the model runs a graph's nodes in an order its edges allow (the ready
/// node recorded last first), so a join edge left out shows as wrong bytes, where the
/// recording's order would hide it; and `cuStreamGetCaptureInfo` gives each stream its
/// own frontier (the branch's launch is not the origin's dependency).
#[test]
fn the_model_runs_a_graph_in_an_order_its_edges_allow_and_answers_per_stream() {
    let Some(cuda) = on_model("model paths: graph order and capture info") else {
        return;
    };
    let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
    let n = 64usize;
    let x = dev.alloc(S, n as u64 * 4).unwrap();
    dev.write_values(S, &x, 0, &vec![1.0f32; n]).unwrap();
    let [y, z, w] = [0; 3].map(|_| {
        let b = dev.alloc(S, n as u64 * 4).unwrap();
        dev.write_values(S, &b, 0, &vec![0.0f32; n]).unwrap();
        b
    });
    let driver = Arc::new(Driver::load());
    for join_first in [true, false] {
        dev.write_values(S, &z, 0, &vec![0.0f32; n]).unwrap();
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (d, s) = (Arc::clone(&driver), Arc::clone(&seen));
        let body = move |call: &capture_cuda::CudaWorkCall<'_>| -> Result<(), String> {
            fork_step(&d, call, join_first, &mut s.lock().unwrap());
            Ok(())
        };
        // SAFETY: the work launches, and captures on streams of its own, only `scale`
        // over the four declared ranges (x read; y, z, w written); it synchronises only
        // the stream it is given, after launching its graph there, and allocates
        // nothing.
        let work = unsafe { CudaWork::new("fork_step", body) };
        let args = [
            Arg::read(&x),
            Arg::write(&y),
            Arg::write(&z),
            Arg::write(&w),
        ];
        dev.foreign_work(S, &args, work).unwrap();
        let seen = seen.lock().unwrap();
        assert!(seen.codes.iter().all(|&c| c == 0), "{seen:?}");
        assert_eq!(
            (
                seen.origin_frontier,
                seen.branch_frontier,
                seen.different_nodes
            ),
            (1, 1, true),
            "each stream's own frontier: {seen:?}"
        );
        let got: Vec<f32> = dev.read_values(S, &w).unwrap();
        if join_first {
            assert_eq!(got, vec![30.0; n], "with the join, w = 5 * 3 * 2 * x");
        } else {
            // No edge orders w after z: the model ran w's node first, over z's zeros.
            assert_eq!(got, vec![0.0; n], "the edge left out shows");
        }
    }
}

/// 7(d): a programmatic launch of a kernel whose code never waits for its grid
/// dependency (no `griddepcontrol.wait`) faults on the model, naming it, where a GPU
/// would let it read its predecessor's outputs before they are written. In a context
/// of its own, so the sticky error stays there.
#[test]
fn the_model_faults_a_programmatic_launch_of_code_that_never_waits() {
    let Some(cuda) = on_model("model paths: programmatic launch without the wait") else {
        return;
    };
    let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
    let driver = Arc::new(Driver::load());
    let codes: Arc<Mutex<Vec<c_int>>> = Arc::default();
    let (d, seen) = (Arc::clone(&driver), Arc::clone(&codes));
    let body = move |_: &capture_cuda::CudaWorkCall<'_>| -> Result<(), String> {
        let mut seen = seen.lock().unwrap();
        let ptx = CString::new(PTX).unwrap();
        let (mut previous, mut ctx, mut module, mut scale, mut s) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        let (mut x, mut y) = (0u64, 0u64);
        // SAFETY: every out-pointer is valid; the context, its module, memory and
        // stream are this body's own, destroyed before it returns, and the backend's
        // context is made current again; the launch passes `scale` its four values,
        // live across the call, over the body's own allocations of 64 floats.
        unsafe {
            seen.push((d.ctx_current)(&mut previous));
            seen.push((d.ctx_create)(&mut ctx, 0, 0));
            seen.push((d.module_load)(&mut module, ptx.as_ptr().cast()));
            seen.push((d.get_function)(&mut scale, module, c"scale".as_ptr()));
            seen.push((d.mem_alloc)(&mut x, 256));
            seen.push((d.mem_alloc)(&mut y, 256));
            seen.push((d.stream_create)(&mut s, 1));
            let (mut xp, mut yp, mut count, mut a) = (x, y, 64u32, 2.0f32);
            let mut params = [
                (&mut xp as *mut u64).cast::<c_void>(),
                (&mut yp as *mut u64).cast(),
                (&mut count as *mut u32).cast(),
                (&mut a as *mut f32).cast(),
            ];
            let mut value = [0; 16];
            value[0] = 1;
            let mut attrs = [Attribute {
                id: 6,
                pad: 0,
                value,
            }];
            let config = Config {
                grid: [1, 1, 1],
                block: [64, 1, 1],
                shared: 0,
                stream: s,
                attrs: attrs.as_mut_ptr(),
                count: 1,
            };
            seen.push((d.launch_ex)(
                &config,
                scale,
                params.as_mut_ptr(),
                std::ptr::null_mut(),
            ));
            // The launch is accepted; its run faults.
            seen.push((d.stream_sync)(s));
            (d.stream_destroy)(s);
            (d.mem_free)(x);
            (d.mem_free)(y);
            (d.module_unload)(module);
            seen.push((d.ctx_destroy)(ctx));
            seen.push((d.ctx_set_current)(previous));
        }
        Ok(())
    };
    // SAFETY: the work touches no declared range and nothing of the backend's context:
    // everything it does happens in a context of its own, made and destroyed here.
    let work = unsafe { CudaWork::new("unwaiting", body) };
    dev.foreign_work(S, &[], work).unwrap();
    dev.sync(S).unwrap();
    // CUDA_ERROR_ILLEGAL_INSTRUCTION (715) at the synchronisation, everything else good.
    assert_eq!(*codes.lock().unwrap(), [0, 0, 0, 0, 0, 0, 0, 0, 715, 0, 0]);
}

/// 7(f): under a driver older than CUDA 12.3 (the model claiming 12.2, in a process of
/// its own, since the model reads its version once), a programmatic launch is refused
/// as on a device without them, naming the driver, and nothing reaches the driver.
#[test]
fn a_driver_before_cuda_12_3_runs_no_programmatic_launch() {
    const CHILD: &str = "CAPTURE_TEST_CHILD_DRIVER_12_2";
    if std::env::var(CHILD).is_ok() {
        let cuda = support::open("a driver before 12.3").expect("the model");
        assert_eq!(cuda.driver_version(), "12.2");
        let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
        let ProgrammaticLaunch::Unsupported(why) = dev.programmatic_launch() else {
            panic!("a CUDA 12.2 driver runs programmatic launches");
        };
        assert!(why.contains("CUDA 12.3"), "{why}");
        let add = dev.builtin(capture_core::Builtin::AddScalar);
        let (x, y) = (dev.alloc(S, 256).unwrap(), dev.alloc(S, 256).unwrap());
        dev.write_values(S, &x, 0, &[1.0f32; 64]).unwrap();
        let info = capture_core::Builtin::AddScalar.info(64, 1.0);
        let dims = capture_core::Dims::grid([1, 1, 1]).programmatic(true);
        let e = dev
            .launch(S, &add, dims, &[Arg::read(&x), Arg::write(&y)], &info)
            .unwrap_err();
        assert!(
            matches!(
                e,
                ServerError::InvalidArgument {
                    what: "programmatic launch",
                    ..
                }
            ),
            "{e}"
        );
        dev.launch(S, &add, [1, 1, 1], &[Arg::read(&x), Arg::write(&y)], &info)
            .unwrap();
        assert_eq!(dev.read_values::<f32>(S, &y).unwrap(), vec![2.0; 64]);
        return;
    }
    let Some(cuda) = on_model("model paths: a driver before 12.3") else {
        return;
    };
    drop(cuda);
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "model_paths::a_driver_before_cuda_12_3_runs_no_programmatic_launch",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("CAPTURE_CUDA_MODEL_VERSION", "12020")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
