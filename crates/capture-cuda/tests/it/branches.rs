//! Forked windows on CUDA (rules 28 and 29): a branch records on a CUDA stream of its
//! own, joined to the capture by an event recorded on its parent and joined back by one
//! recorded on it, the events kept with the graph and never reused by another capture;
//! and the driver model's capture across streams as cuda.h documents it (a stream that
//! waits on an event recorded in a capture joins it; the capture ends on its origin
//! alone, and only with every joined stream joined back).

use std::ffi::{c_int, c_void};

use capture_core::{Arg, Builtin, Builtins, Device, DeviceConfig, KernelHandle, StreamId};
use capture_cuda::{CudaBackend, CudaWork};

use crate::driver_model::{self, Counts};
use crate::support;

const S0: StreamId = StreamId::new(0);
const S1: StreamId = StreamId::new(1);
const N: u64 = 1024;

/// `CUDA_ERROR_STREAM_CAPTURE_INVALIDATED`, `_UNMATCHED`, `_UNJOINED` (cuda.h).
const INVALIDATED: c_int = 901;
const UNMATCHED: c_int = 903;
const UNJOINED: c_int = 904;
/// `CU_STREAM_CAPTURE_STATUS_NONE`, `_ACTIVE`, `_INVALIDATED`.
const NONE: c_int = 0;
const ACTIVE: c_int = 1;
const STATUS_INVALIDATED: c_int = 2;

/// Two halves of a step: `b = (x + 2) * 3` (on a branch when forked) beside
/// `a = x + 1`, then `out = a + b` after the join.
struct Step<'d> {
    dev: &'d Device<CudaBackend>,
    add: KernelHandle,
    mul: KernelHandle,
    copy: KernelHandle,
    axpy: KernelHandle,
    x: capture_core::Buffer,
    a: capture_core::Buffer,
    b: capture_core::Buffer,
    t: capture_core::Buffer,
    out: capture_core::Buffer,
}

impl<'d> Step<'d> {
    fn new(dev: &'d Device<CudaBackend>) -> Self {
        let k = |b| dev.kernel(CudaBackend::builtin(b));
        let f32s = || dev.alloc(S0, N * 4).unwrap();
        let x = f32s();
        let ramp: Vec<f32> = (0..N).map(|i| i as f32 * 0.5).collect();
        dev.write_values(S0, &x, 0, &ramp).unwrap();
        Self {
            add: k(Builtin::AddScalar),
            mul: k(Builtin::MulScalar),
            copy: k(Builtin::Copy),
            axpy: k(Builtin::Axpy),
            x,
            a: f32s(),
            b: f32s(),
            t: f32s(),
            out: f32s(),
            dev,
        }
    }

    fn launch(
        &self,
        s: StreamId,
        k: &KernelHandle,
        which: Builtin,
        args: &[Arg],
        a: f32,
    ) -> capture_core::Result<()> {
        self.dev.launch(s, k, [1, 1, 1], args, &which.info(N, a))
    }

    fn run(&self, forked: bool) -> capture_core::Result<()> {
        let side = if forked {
            Some(self.dev.fork(S0, S1)?)
        } else {
            None
        };
        let on = if forked { S1 } else { S0 };
        let (x, a, b, t, out) = (&self.x, &self.a, &self.b, &self.t, &self.out);
        self.launch(
            on,
            &self.add,
            Builtin::AddScalar,
            &[Arg::read(x), Arg::write(t)],
            2.0,
        )?;
        self.launch(
            on,
            &self.mul,
            Builtin::MulScalar,
            &[Arg::read(t), Arg::write(b)],
            3.0,
        )?;
        self.launch(
            S0,
            &self.add,
            Builtin::AddScalar,
            &[Arg::read(x), Arg::write(a)],
            1.0,
        )?;
        if let Some(side) = side {
            self.dev.join(side)?;
        }
        self.launch(
            S0,
            &self.copy,
            Builtin::Copy,
            &[Arg::read(a), Arg::write(out)],
            0.0,
        )?;
        self.launch(
            S0,
            &self.axpy,
            Builtin::Axpy,
            &[Arg::read(b), Arg::read_write(out)],
            1.0,
        )
    }

    fn want(&self) -> Vec<f32> {
        (0..N)
            .map(|i| {
                let v = i as f32 * 0.5;
                (v + 1.0) + (v + 2.0) * 3.0
            })
            .collect()
    }

    fn out(&self) -> Vec<f32> {
        self.dev.read_values::<f32>(S0, &self.out).unwrap()
    }
}

fn delta(after: Counts, before: Counts) -> (isize, isize) {
    (
        after.streams as isize - before.streams as isize,
        after.events as isize - before.events as isize,
    )
}

#[test]
fn a_forked_window_records_its_branch_on_a_stream_of_its_own_joined_by_events_the_graph_keeps() {
    let Some(cuda) = support::open("branches: a forked window's streams and events") else {
        return;
    };
    let dev = Device::new(
        cuda.backend.clone(),
        DeviceConfig::new().streams(2).unwrap(),
    )
    .unwrap();
    let step = Step::new(&dev);
    step.run(false).unwrap();
    assert_eq!(step.out(), step.want(), "eager");

    let start = driver_model::counts();
    let single = dev.capture(S0, |_| step.run(false)).unwrap();
    let plain = driver_model::counts();
    let forked = dev.capture(S0, |_| step.run(true)).unwrap();
    let first = driver_model::counts();
    let again = dev.capture(S0, |_| step.run(true)).unwrap();
    let second = driver_model::counts();
    if let (Some(start), Some(plain), Some(first), Some(second)) = (start, plain, first, second) {
        let base = delta(plain, start);
        // The first forked window made its branch's stream and two events (the fork's
        // and the join's) beyond what a window on one stream makes.
        assert_eq!(delta(first, plain), (base.0 + 1, base.1 + 2), "{first:?}");
        // The next one reuses the stream, with events of its own.
        assert_eq!(delta(second, first), (base.0, base.1 + 2), "{second:?}");
    }
    // What the driver made of the forked window (on a GPU as on the model): the fork
    // lets the two halves run side by side (nodes no edge orders), the join orders the
    // combine after both (a node with two predecessors).
    if let Some(shape) = cuda.backend.last_graph_shape() {
        assert!(shape.has_unordered_nodes(), "no fork in {shape:?}");
        assert!(shape.widest_fan_in() >= 2, "no join in {shape:?}");
    } else {
        println!("SKIP: a forked graph's edges: the driver has no cuGraphGetEdges_v2");
    }
    for graph in [&forked, &single, &again, &forked] {
        dev.write_values(S0, &step.out, 0, &vec![0.0f32; N as usize])
            .unwrap();
        dev.replay(S0, graph, 1).unwrap();
        assert_eq!(step.out(), step.want(), "a replay gives the eager bytes");
    }
    // The graphs' events go with them.
    dev.sync(S0).unwrap();
    let held = driver_model::counts();
    drop((forked, again));
    dev.sync(S0).unwrap();
    dev.cleanup().unwrap();
    if let (Some(held), Some(gone)) = (held, driver_model::counts()) {
        assert_eq!(gone.graphs, held.graphs - 2, "{gone:?}");
        assert_eq!(gone.events, held.events - 4, "{gone:?}");
    }
}

/// cuda.h's entry points the driver-model test calls.
struct Driver {
    _lib: libloading::Library,
    // SAFETY: function-pointer types only; each call below says why it is sound.
    stream_create: unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int,
    // SAFETY: as above, a type.
    stream_destroy: unsafe extern "C" fn(*mut c_void) -> c_int,
    // SAFETY: as above, a type.
    event_create: unsafe extern "C" fn(*mut *mut c_void, u32) -> c_int,
    // SAFETY: as above, a type.
    event_destroy: unsafe extern "C" fn(*mut c_void) -> c_int,
    // SAFETY: as above, a type.
    event_record: unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int,
    // SAFETY: as above, a type.
    wait_event: unsafe extern "C" fn(*mut c_void, *mut c_void, u32) -> c_int,
    // SAFETY: as above, a type.
    begin: unsafe extern "C" fn(*mut c_void, c_int) -> c_int,
    // SAFETY: as above, a type.
    end: unsafe extern "C" fn(*mut c_void, *mut *mut c_void) -> c_int,
    // SAFETY: as above, a type.
    is_capturing: unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int,
    // SAFETY: as above, a type.
    graph_destroy: unsafe extern "C" fn(*mut c_void) -> c_int,
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
                event_create: *lib.get(b"cuEventCreate\0").unwrap(),
                event_destroy: *lib.get(b"cuEventDestroy_v2\0").unwrap(),
                event_record: *lib.get(b"cuEventRecord\0").unwrap(),
                wait_event: *lib.get(b"cuStreamWaitEvent\0").unwrap(),
                begin: *lib.get(b"cuStreamBeginCapture_v2\0").unwrap(),
                end: *lib.get(b"cuStreamEndCapture\0").unwrap(),
                is_capturing: *lib.get(b"cuStreamIsCapturing\0").unwrap(),
                graph_destroy: *lib.get(b"cuGraphDestroy\0").unwrap(),
                _lib: lib,
            }
        }
    }
}

/// What the driver said to each step of the cross-stream captures.
#[derive(Debug, Default, PartialEq, Eq)]
struct Said {
    unjoined: (c_int, c_int, c_int, c_int),
    joined: (c_int, bool, c_int),
    unmatched: (c_int, c_int, c_int),
}

#[test]
fn the_driver_model_joins_a_stream_to_a_capture_by_its_events_as_cuda_h_documents_it() {
    let Some(cuda) = support::open("branches: the driver model's capture across streams") else {
        return;
    };
    if !support::on_model(&cuda) {
        println!("SKIP: the capture's refusals checked here are the driver model's, this is a GPU");
        return;
    }
    let dev = Device::new(cuda.backend.clone(), DeviceConfig::new()).unwrap();
    let d = Driver::load();
    let said = std::sync::Arc::new(std::sync::Mutex::new(Said::default()));
    let seen = std::sync::Arc::clone(&said);
    let body = move |_: &capture_cuda::CudaWorkCall<'_>| -> Result<(), String> {
        let mut said = seen.lock().unwrap();
        let (mut a, mut b, mut e) = (
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        );
        let mut status = -1;
        let mut graph = std::ptr::null_mut();
        // SAFETY: the backend made its context current for this call; every
        // out-pointer is valid; the two streams and the event are this body's own,
        // made here and destroyed before it returns; nothing it enqueues touches the
        // stream the work was given, and the captures hold no work.
        unsafe {
            (d.stream_create)(&mut a, 1);
            (d.stream_create)(&mut b, 1);
            (d.event_create)(&mut e, 2);
            // A fork never joined back: the origin's end refuses it, and the branch is
            // left in a capture of its own, invalidated (cuda.h documents no release of
            // a joined stream by the origin's end), until its own end.
            (d.begin)(a, 2);
            (d.event_record)(e, a);
            (d.wait_event)(b, e, 0);
            (d.is_capturing)(b, &mut status);
            let forked = status;
            said.unjoined.0 = (d.end)(a, &mut graph);
            (d.is_capturing)(b, &mut status);
            said.unjoined.1 = if forked == ACTIVE { status } else { -1 };
            said.unjoined.2 = (d.end)(b, &mut graph);
            (d.is_capturing)(b, &mut status);
            said.unjoined.3 = status;
            // Forked and joined back: a graph.
            (d.begin)(a, 2);
            (d.event_record)(e, a);
            (d.wait_event)(b, e, 0);
            (d.event_record)(e, b);
            (d.wait_event)(a, e, 0);
            said.joined.0 = (d.end)(a, &mut graph);
            said.joined.1 = !graph.is_null();
            if !graph.is_null() {
                said.joined.2 = (d.graph_destroy)(graph);
            }
            // Ended on the joined stream: refused, and the capture is invalidated.
            (d.begin)(a, 2);
            (d.event_record)(e, a);
            (d.wait_event)(b, e, 0);
            said.unmatched.0 = (d.end)(b, &mut graph);
            said.unmatched.1 = (d.end)(a, &mut graph);
            (d.is_capturing)(b, &mut status);
            said.unmatched.2 = status;
            (d.event_destroy)(e);
            (d.stream_destroy)(a);
            (d.stream_destroy)(b);
        }
        Ok(())
    };
    // SAFETY: the work enqueues nothing on its stream and touches no declared range; it
    // synchronises nothing (the captures it opens hold no work).
    let work = unsafe { CudaWork::new("cross_stream_captures", body) };
    let before = driver_model::counts().expect("the model");
    dev.foreign_work(S0, &[], work).unwrap();
    dev.sync(S0).unwrap();
    assert_eq!(
        *said.lock().unwrap(),
        Said {
            unjoined: (UNJOINED, STATUS_INVALIDATED, INVALIDATED, NONE),
            joined: (0, true, 0),
            unmatched: (UNMATCHED, INVALIDATED, NONE),
        }
    );
    let after = driver_model::counts().expect("the model");
    assert_eq!(
        after.live(),
        before.live(),
        "nothing of the captures is left"
    );
}
