//! The CUDA driver model's conditional nodes (issue 46, item 3), called as cuda.h
//! documents them, on the model alone (a GPU says `SKIP:`): a WHILE node's body runs
//! while its handle is non-zero, the handle set to its default at each launch with
//! `CU_GRAPH_COND_ASSIGN_DEFAULT` (once, at instantiation, without), the loop setter
//! (`kernels/loop_setter.cu`, its sm_90 cubin) setting it from device code; and what
//! cuda.h refuses is refused with its codes: a node type a body does not allow, a child
//! graph holding a conditional node, a handle used twice or outside its graph, a handle
//! no node uses, a second instantiation, a body destroyed on its own; and a driver
//! claiming CUDA 12.2 has none.

use std::ffi::{c_int, c_void};
use std::sync::{Arc, Mutex};

use capture_core::{Arg, Device, DeviceConfig, StreamId};
use capture_cuda::{CudaWork, LOOP_SETTER_SM90_CUBIN};

use crate::support;

const S: StreamId = StreamId::new(0);

type Handle = *mut c_void;

/// `CUDA_SUCCESS`, `CUDA_ERROR_INVALID_VALUE`, `CUDA_ERROR_NOT_SUPPORTED`.
const OK: c_int = 0;
const INVALID_VALUE: c_int = 1;
const NOT_SUPPORTED: c_int = 801;

/// `CUgraphNodeType`: kernel, memset, host, child graph, event record, conditional.
const KERNEL: u64 = 0;
const MEMSET: u64 = 2;
const HOST: u64 = 3;
const GRAPH: u64 = 4;
const EVENT_RECORD: u64 = 7;
const CONDITIONAL: u64 = 13;

/// cuda.h's entry points these tests call, as the model exports them.
struct Driver {
    _lib: libloading::Library,
    // SAFETY: function-pointer types only; each call below says why it is sound.
    ctx_current: unsafe extern "C" fn(*mut Handle) -> c_int,
    // SAFETY: as above, a type.
    graph_create: unsafe extern "C" fn(*mut Handle, u32) -> c_int,
    // SAFETY: as above, a type.
    handle_create: unsafe extern "C" fn(*mut u64, Handle, Handle, u32, u32) -> c_int,
    // SAFETY: as above, a type.
    add_node: unsafe extern "C" fn(*mut Handle, Handle, *const Handle, usize, *mut Params) -> c_int,
    // SAFETY: as above, a type.
    instantiate: unsafe extern "C" fn(*mut Handle, Handle, u64) -> c_int,
    // SAFETY: as above, a type.
    graph_launch: unsafe extern "C" fn(Handle, Handle) -> c_int,
    // SAFETY: as above, a type.
    stream_sync: unsafe extern "C" fn(Handle) -> c_int,
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
    exec_kernel_set: unsafe extern "C" fn(Handle, Handle, *const [u64; 9]) -> c_int,
}

impl Driver {
    fn load() -> Self {
        // SAFETY: the process's CUDA driver model, already loaded by the backend; each
        // symbol is cuda.h's entry point of that name and signature.
        unsafe {
            let lib = libloading::Library::new("libcuda.so.1").unwrap();
            Self {
                ctx_current: *lib.get(b"cuCtxGetCurrent\0").unwrap(),
                graph_create: *lib.get(b"cuGraphCreate\0").unwrap(),
                handle_create: *lib.get(b"cuGraphConditionalHandleCreate\0").unwrap(),
                add_node: *lib.get(b"cuGraphAddNode\0").unwrap(),
                instantiate: *lib.get(b"cuGraphInstantiateWithFlags\0").unwrap(),
                graph_launch: *lib.get(b"cuGraphLaunch\0").unwrap(),
                stream_sync: *lib.get(b"cuStreamSynchronize\0").unwrap(),
                exec_destroy: *lib.get(b"cuGraphExecDestroy\0").unwrap(),
                graph_destroy: *lib.get(b"cuGraphDestroy\0").unwrap(),
                module_load: *lib.get(b"cuModuleLoadData\0").unwrap(),
                module_unload: *lib.get(b"cuModuleUnload\0").unwrap(),
                get_function: *lib.get(b"cuModuleGetFunction\0").unwrap(),
                exec_kernel_set: *lib.get(b"cuGraphExecKernelNodeSetParams_v2\0").unwrap(),
                _lib: lib,
            }
        }
    }
}

/// `CUgraphNodeParams` (cuda.h): 256 bytes, the type in the first four, the union from
/// byte 16 (word 2), every unused byte zero.
#[repr(C, align(8))]
struct Params([u64; 32]);

/// A node of type `kind` with the union's words from word 2 on.
fn params(kind: u64, union: &[u64]) -> Params {
    let mut p = Params([0; 32]);
    p.0[0] = kind;
    p.0[2..2 + union.len()].copy_from_slice(union);
    p
}

/// Two 32-bit fields in one word, the first in the low half.
fn pair(low: u32, high: u32) -> u64 {
    u64::from(low) | u64::from(high) << 32
}

/// What the driver calls returned, in order, with the counter's value read after a
/// launch among them.
#[derive(Debug, Default)]
struct Seen {
    codes: Vec<c_int>,
}

/// The WHILE graphs and the refusals, on the work's stream, over the work's three words
/// (flag, counter, max).
fn conditional_nodes(d: &Driver, call: &capture_cuda::CudaWorkCall<'_>, seen: &mut Seen) {
    let [flag, counter, max] = call.ranges() else {
        seen.codes.push(-1);
        return;
    };
    let (flag, counter, max) = (flag.ptr, counter.ptr, max.ptr);
    let stream: Handle = call.stream().cast();
    let mut code = |c: c_int| seen.codes.push(c);
    let null: Handle = std::ptr::null_mut();
    // SAFETY: the backend made its context current for this call; every out-pointer is
    // valid; each parameter block is cuda.h's layout with every unused byte zero, and
    // what it points at lives across the call; the graphs, executables and module are
    // this body's own, destroyed before it returns; the launches go on the work's
    // stream, over the work's declared words.
    unsafe {
        let mut ctx = null;
        code((d.ctx_current)(&mut ctx));
        let (mut module, mut setter) = (null, null);
        code((d.module_load)(
            &mut module,
            LOOP_SETTER_SM90_CUBIN.as_ptr().cast(),
        ));
        code((d.get_function)(
            &mut setter,
            module,
            c"capture_loop_setter".as_ptr(),
        ));
        let memset =
            |value: u32, at: u64| params(MEMSET, &[at, 0, pair(value, 4), 1, 1, ctx as u64]);
        // A WHILE loop: flag = 0, counter = 0, max = 5, then the body (the setter)
        // while the handle is non-zero; `assign` sets the handle's default at each launch.
        let looped =
            |assign: u32, default: u32, code: &mut dyn FnMut(c_int)| -> (Handle, Handle, Handle) {
                let (mut graph, mut exec, mut handle) = (null, null, 0u64);
                code((d.graph_create)(&mut graph, 0));
                code((d.handle_create)(&mut handle, graph, ctx, default, assign));
                let mut nodes = [null; 3];
                for (node, (value, at)) in nodes.iter_mut().zip([(0, flag), (0, counter), (5, max)])
                {
                    code((d.add_node)(
                        node,
                        graph,
                        std::ptr::null(),
                        0,
                        &mut memset(value, at),
                    ));
                }
                let (mut cond, mut body) = (null, null);
                let mut p = params(
                    CONDITIONAL,
                    &[
                        handle,
                        pair(1, 1),
                        (&mut body as *mut Handle) as u64,
                        ctx as u64,
                    ],
                );
                code((d.add_node)(&mut cond, graph, nodes.as_ptr(), 3, &mut p));
                let (mut h, mut f, mut c, mut m) = (handle, flag, counter, max);
                let mut args = [
                    (&mut h as *mut u64).cast::<c_void>(),
                    (&mut f as *mut u64).cast(),
                    (&mut c as *mut u64).cast(),
                    (&mut m as *mut u64).cast(),
                ];
                let mut kernel = null;
                let mut k = params(
                    KERNEL,
                    &[
                        setter as u64,
                        pair(1, 1),
                        pair(1, 1),
                        pair(1, 1),
                        0,
                        args.as_mut_ptr() as u64,
                    ],
                );
                code((d.add_node)(&mut kernel, body, std::ptr::null(), 0, &mut k));
                code((d.instantiate)(&mut exec, graph, 0));
                (graph, exec, kernel)
            };

        // 1. Default 1, assigned at each launch: five iterations, every launch.
        let (graph, exec, kernel) = looped(1, 1, &mut code);
        code((d.graph_launch)(exec, stream));
        code((d.stream_sync)(stream));
        seen_counter(&mut code, counter); // 5
        code((d.graph_launch)(exec, stream));
        code((d.stream_sync)(stream));
        seen_counter(&mut code, counter); // 5 again
        // A body's node is not a node of the graph the executable came from.
        let none = [0u64; 9];
        code((d.exec_kernel_set)(exec, kernel, &none)); // 1
        // A second instantiation of a graph with conditional nodes.
        let mut second = null;
        code((d.instantiate)(&mut second, graph, 0)); // 1
        code((d.exec_destroy)(exec));
        code((d.graph_destroy)(graph));

        // 2. Default 1 without CU_GRAPH_COND_ASSIGN_DEFAULT: applied at instantiation
        // only, so the second launch finds the handle the setter cleared.
        let (graph, exec, _) = looped(0, 1, &mut code);
        code((d.graph_launch)(exec, stream));
        code((d.stream_sync)(stream));
        seen_counter(&mut code, counter); // 5
        code((d.graph_launch)(exec, stream));
        code((d.stream_sync)(stream));
        seen_counter(&mut code, counter); // 0: the body never ran
        code((d.exec_destroy)(exec));
        code((d.graph_destroy)(graph));

        // 3. The refusals.
        let (mut outer, mut other, mut handle, mut unused) = (null, null, 0u64, 0u64);
        code((d.graph_create)(&mut outer, 0));
        code((d.graph_create)(&mut other, 0));
        code((d.handle_create)(&mut handle, outer, ctx, 1, 1));
        let (mut cond, mut body, mut node) = (null, null, null);
        let body_out = (&mut body as *mut Handle) as u64;
        code((d.add_node)(
            &mut cond,
            outer,
            std::ptr::null(),
            0,
            &mut params(CONDITIONAL, &[handle, pair(1, 1), body_out, ctx as u64]),
        ));
        // The handle again: one node per handle.
        let mut again = null;
        code((d.add_node)(
            &mut node,
            outer,
            std::ptr::null(),
            0,
            &mut params(
                CONDITIONAL,
                &[
                    handle,
                    pair(1, 1),
                    (&mut again as *mut Handle) as u64,
                    ctx as u64,
                ],
            ),
        )); // 1
        // A WHILE node of two bodies.
        let mut theirs = 0u64;
        code((d.handle_create)(&mut theirs, other, ctx, 1, 1));
        let mut two = [null; 2];
        code((d.add_node)(
            &mut node,
            other,
            std::ptr::null(),
            0,
            &mut params(
                CONDITIONAL,
                &[theirs, pair(1, 2), two.as_mut_ptr() as u64, ctx as u64],
            ),
        )); // 1
        // A handle of another graph.
        code((d.add_node)(
            &mut node,
            outer,
            std::ptr::null(),
            0,
            &mut params(
                CONDITIONAL,
                &[
                    theirs,
                    pair(1, 1),
                    (&mut again as *mut Handle) as u64,
                    ctx as u64,
                ],
            ),
        )); // 1
        // Node types a body does not allow: a host node, an event record node.
        code((d.add_node)(
            &mut node,
            body,
            std::ptr::null(),
            0,
            &mut params(HOST, &[1, 0]),
        )); // 801
        code((d.add_node)(
            &mut node,
            body,
            std::ptr::null(),
            0,
            &mut params(EVENT_RECORD, &[1]),
        )); // 801
        // A memset is allowed; a child graph holding a conditional node is not.
        code((d.add_node)(
            &mut node,
            body,
            std::ptr::null(),
            0,
            &mut memset(0, flag),
        ));
        code((d.add_node)(
            &mut node,
            other,
            std::ptr::null(),
            0,
            &mut params(GRAPH, &[outer as u64, 0]),
        )); // 1
        // A body belongs to its node.
        code((d.graph_destroy)(body)); // 1
        // A handle no node uses fails the instantiation.
        code((d.handle_create)(&mut unused, outer, ctx, 0, 0));
        let mut exec = null;
        code((d.instantiate)(&mut exec, outer, 0)); // 1
        code((d.graph_destroy)(outer));
        code((d.graph_destroy)(other));
        code((d.module_unload)(module));
    }
}

/// Notes the counter's value as a code (the work reads its own declared word back).
fn seen_counter(code: &mut dyn FnMut(c_int), counter: u64) {
    // SAFETY: `counter` is the work's declared 4-byte word of device memory, which the
    // model keeps in host memory; the stream was synchronised before.
    code(unsafe { *(counter as *const u32) } as c_int);
}

#[test]
fn the_model_runs_while_nodes_as_cuda_h_documents_them_and_refuses_what_it_refuses() {
    let Some(cuda) = support::open("conditional model") else {
        return;
    };
    if !support::on_model(&cuda) {
        println!("SKIP: conditional model: what it shows is the driver model's, this is a GPU");
        return;
    }
    let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
    let words = [
        dev.alloc(S, 4).unwrap(),
        dev.alloc(S, 4).unwrap(),
        dev.alloc(S, 4).unwrap(),
    ];
    let d = Arc::new(Driver::load());
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (d2, seen2) = (Arc::clone(&d), Arc::clone(&seen));
    // SAFETY: the work touches only the three words it declares, on the stream it is
    // given, and waits for what it launched before it returns.
    let work = unsafe {
        CudaWork::new("conditional nodes", move |call| {
            conditional_nodes(&d2, call, &mut seen2.lock().unwrap());
            Ok(())
        })
    };
    dev.foreign_work(S, &words.each_ref().map(Arg::write), work)
        .unwrap();
    dev.sync(S).unwrap();
    let codes = seen.lock().unwrap().codes.clone();
    let expect: Vec<c_int> = [
        // the context, the setter's module and function
        vec![OK; 3],
        // 1: the graph, the handle, three memsets, the WHILE node, the setter, the
        // instantiation; two launches of five iterations each; a body's node refused,
        // a second instantiation refused; destroyed
        vec![OK; 8],
        vec![OK, OK, 5, OK, OK, 5],
        vec![INVALID_VALUE, INVALID_VALUE, OK, OK],
        // 2: as 1, the second launch finding the handle cleared
        vec![OK; 8],
        vec![OK, OK, 5, OK, OK, 0],
        vec![OK, OK],
        // 3: two graphs, a handle, the WHILE node; the handle again, two bodies, another
        // graph's handle; a host and an event node in the body; a memset in it; a child
        // holding a conditional; the body destroyed; an unused handle; the
        // instantiation; destroyed
        vec![OK; 4],
        vec![INVALID_VALUE, OK, INVALID_VALUE, INVALID_VALUE],
        vec![
            NOT_SUPPORTED,
            NOT_SUPPORTED,
            OK,
            INVALID_VALUE,
            INVALID_VALUE,
        ],
        vec![OK, INVALID_VALUE, OK, OK, OK],
    ]
    .concat();
    assert_eq!(codes, expect);
}

/// Under a driver claiming CUDA 12.2 (in a process of its own, as the model reads its
/// version once) neither a conditional handle nor a conditional node is made:
/// `CUDA_ERROR_NOT_SUPPORTED`.
#[test]
fn a_driver_before_cuda_12_3_makes_no_conditional_node() {
    const CHILD: &str = "CAPTURE_TEST_CHILD_CONDITIONAL_12_2";
    if std::env::var(CHILD).is_ok() {
        let cuda = support::open("conditional model: 12.2").expect("the model");
        assert_eq!(cuda.driver_version(), "12.2");
        let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
        let word = dev.alloc(S, 4).unwrap();
        let d = Driver::load();
        let codes = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&codes);
        let body = move |_: &capture_cuda::CudaWorkCall<'_>| -> Result<(), String> {
            let mut seen = seen.lock().unwrap();
            let null: Handle = std::ptr::null_mut();
            let (mut ctx, mut graph, mut handle, mut body, mut node) =
                (null, null, 0u64, null, null);
            // SAFETY: the backend made its context current for this call; every
            // out-pointer is valid; the parameter block is cuda.h's layout, every unused
            // byte zero; the graph is destroyed before the call returns.
            unsafe {
                seen.push((d.ctx_current)(&mut ctx));
                seen.push((d.graph_create)(&mut graph, 0));
                seen.push((d.handle_create)(&mut handle, graph, ctx, 1, 1));
                let body_out = (&mut body as *mut Handle) as u64;
                let mut p = params(CONDITIONAL, &[1, pair(1, 1), body_out, ctx as u64]);
                seen.push((d.add_node)(&mut node, graph, std::ptr::null(), 0, &mut p));
                seen.push((d.graph_destroy)(graph));
            }
            Ok(())
        };
        // SAFETY: the work touches nothing but driver objects of its own, destroyed
        // before it returns.
        let work = unsafe { CudaWork::new("conditional nodes under 12.2", body) };
        dev.foreign_work(S, &[Arg::write(&word)], work).unwrap();
        dev.sync(S).unwrap();
        assert_eq!(
            *codes.lock().unwrap(),
            [OK, OK, NOT_SUPPORTED, NOT_SUPPORTED, OK]
        );
        return;
    }
    let Some(cuda) = support::open("conditional model: 12.2") else {
        return;
    };
    if !support::on_model(&cuda) {
        println!("SKIP: conditional model: 12.2: the model claims the version");
        return;
    }
    drop(cuda);
    crate::loops::in_child(
        "conditional_model::a_driver_before_cuda_12_3_makes_no_conditional_node",
        CHILD,
        &[("CAPTURE_CUDA_MODEL_VERSION", "12020")],
    );
}
