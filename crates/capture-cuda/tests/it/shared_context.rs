//! A cudarc context handed to the backend (`CudaBackend::from_cudarc`, feature `cudarc`):
//! the backend captures and replays a chain of builtins in the caller's context, and
//! after the backend is gone the context (and a stream lent to pooled stream 0) is still
//! the caller's to use. Needs a GPU: without a driver or a device each test says `SKIP:`
//! and passes, unless `CAPTURE_REQUIRE_CUDA=1`.

use std::sync::Arc;

use capture_core::{Arg, Builtin, StreamId};
use capture_cuda::CudaBackend;
use capture_suite::scenarios::{Harness, N, map, ramp, splat, suite_lock};
use cudarc::driver::CudaContext;

const S0: StreamId = StreamId::new(0);

/// cudarc's context on device 0, or `None` after a `SKIP:` line naming `test`. The
/// driver library is checked first: without it every cudarc driver call panics.
fn context(test: &str) -> Option<Arc<CudaContext>> {
    let why = if !culib_present() {
        "no CUDA driver library for cudarc".to_owned()
    } else {
        match CudaContext::device_count() {
            Ok(n) if n > 0 => return Some(CudaContext::new(0).expect("cudarc's context")),
            Ok(_) => "no CUDA device".to_owned(),
            Err(e) => format!("cuDeviceGetCount failed: {e}"),
        }
    };
    assert!(
        !crate::support::cuda_required(),
        "CAPTURE_REQUIRE_CUDA=1 and {why}"
    );
    println!("SKIP: {test}: {why}");
    None
}

/// Whether cudarc finds the driver library (it panics on any call otherwise).
fn culib_present() -> bool {
    // SAFETY: the check only tries to load the library; it calls no driver function.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The chain `y = x + 1, z = 2y, w += z` on stream 0, captured once and replayed three
/// times; checks `w = 4z = 8(x + 1)` (warmup wrote it once).
fn capture_and_replay(backend: CudaBackend) {
    let h = Harness::new(backend).expect("device");
    let x = h.buffer(S0, &ramp(0.0)).expect("x");
    let y = h.dev.alloc(S0, N * 4).expect("y");
    let z = h.dev.alloc(S0, N * 4).expect("z");
    let w = h.buffer(S0, &splat(0.0)).expect("w");
    let g = h
        .dev
        .capture(S0, |d| {
            let launch = |k: Builtin, args: &[Arg], a| {
                d.launch(S0, h.kernel(k), [1, 1, 1], args, &k.info(N, a))
            };
            launch(Builtin::AddScalar, &[Arg::read(&x), Arg::write(&y)], 1.0)?;
            launch(Builtin::MulScalar, &[Arg::read(&y), Arg::write(&z)], 2.0)?;
            launch(Builtin::Axpy, &[Arg::read(&z), Arg::read_write(&w)], 1.0)
        })
        .expect("graph");
    h.dev.replay(S0, &g, 3).expect("replay");
    h.expect(S0, &w, &map(&ramp(0.0), |v| 8.0 * (v + 1.0)));
    h.dev.drop_graph(g).expect("drop");
}

/// cudarc work on `stream` after the backend: a copy there and back.
fn still_usable(stream: &Arc<cudarc::driver::CudaStream>) {
    let host = [1.0f32, 2.0, 3.0, 4.0];
    let device = stream
        .clone_htod(&host)
        .expect("cudarc copies to the device");
    let back = stream.clone_dtoh(&device).expect("cudarc copies back");
    assert_eq!(back, host);
}

#[test]
fn a_cudarc_context_handed_over_captures_and_replays_and_stays_the_callers() {
    let _suite = suite_lock();
    let Some(ctx) = context("shared_context") else {
        return;
    };
    let backend = CudaBackend::from_cudarc(Arc::clone(&ctx)).expect("the shared context");
    assert!(backend.context_is_callers());
    assert_eq!(backend.ordinal(), ctx.ordinal() as i32);
    capture_and_replay(backend);
    // Everything over the backend is gone: the context is still cudarc's.
    still_usable(&ctx.new_stream().expect("a cudarc stream"));
    still_usable(&ctx.default_stream());
}

#[test]
fn a_lent_cudarc_stream_runs_pooled_stream_0_and_is_handed_back() {
    let _suite = suite_lock();
    let Some(ctx) = context("shared_context") else {
        return;
    };
    let stream = ctx.new_stream().expect("a cudarc stream");
    // SAFETY: nothing of the test's enqueues on `stream` until the backend is gone.
    let backend = unsafe { CudaBackend::from_cudarc_stream(Arc::clone(&stream)) }.expect("lent");
    // Two devices one after the other: each one's pooled stream 0 runs on the stream.
    capture_and_replay(backend.clone());
    capture_and_replay(backend.clone());
    drop(backend);
    still_usable(&stream);
}

#[test]
fn a_default_or_blocking_stream_is_refused() {
    use cudarc::driver::result::stream::{self, StreamKind};
    let _suite = suite_lock();
    let Some(ctx) = context("shared_context") else {
        return;
    };
    ctx.bind_to_thread().expect("current");
    let blocking = stream::create(StreamKind::Default).expect("a blocking stream");
    // SAFETY: the stream is the test's, of this context, destroyed below after the
    // wrapper is gone; nothing else enqueues on it.
    let wrapped = unsafe { ctx.wrap_borrowed_stream(blocking) };
    for (what, stream, expected) in [
        ("legacy", ctx.default_stream(), "is a default stream"),
        ("per-thread", ctx.per_thread_stream(), "is a default stream"),
        ("blocking", wrapped, "is a blocking stream"),
    ] {
        // SAFETY: refused before the stream is used.
        let err = unsafe { CudaBackend::from_cudarc_stream(stream) }.unwrap_err();
        assert!(err.why().contains(expected), "{what}: {err}");
    }
    // SAFETY: the only wrapper of the stream was dropped with the refusal, and the
    // stream has no work.
    unsafe { stream::destroy(blocking) }.expect("destroyed");
    still_usable(&ctx.default_stream());
}
