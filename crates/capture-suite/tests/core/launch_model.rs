//! The launch model (issue 24): scalars by value, declared accesses, block and shared
//! memory, programmatic dependent launch (issue 35), the user's own work inside the
//! rules, one stream per capture closure, and memory the caller imports. On the mock
//! (wrapped in `Faulty`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use capture_core::{
    Arg, Chain, Dims, KernelSignature, Param, ProgrammaticLaunch, ServerError, StreamId,
};
use capture_mock::{FaultOp, MockBackend, MockKernel, MockWork};

use crate::{Dev, S0, S1, device, filled, read, suite_lock};

fn text(e: &ServerError) -> String {
    Chain(e).to_string()
}

/// `y[i] = x[i] * k + b` over u32s, `k` and `b` scalars (`u32`, `[u32; 2]` as (b, _)).
const AXPB: MockKernel = MockKernel {
    name: "axpb",
    signature: KernelSignature::of(&[
        Param::READ,
        Param::WRITE,
        Param::scalar::<u32>(),
        Param::scalar::<[u32; 2]>(),
    ]),
    f: |b, words| {
        let (k, b0) = (words[0] as u32, words[1] as u32);
        let (x, y) = b.split_at_mut(1);
        for (o, i) in y[0].chunks_exact_mut(4).zip(x[0].chunks_exact(4)) {
            let v = u32::from_le_bytes(i.try_into().unwrap());
            o.copy_from_slice(&(v.wrapping_mul(k).wrapping_add(b0)).to_le_bytes());
        }
    },
};

fn axpb(
    dev: &Dev,
    kernel: &capture_core::KernelHandle,
    s: StreamId,
    x: &capture_core::Buffer,
    y: &capture_core::Buffer,
    k: u32,
    b: u32,
) -> Result<(), ServerError> {
    dev.launch(
        s,
        kernel,
        [1, 1, 1],
        &[
            Arg::read(x),
            Arg::write(y),
            Arg::scalar(k),
            Arg::scalar([b, 0u32]),
        ],
        &[],
    )
}

#[test]
fn scalars_reach_the_kernel_and_are_fixed_at_capture() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = filled(&dev, S0, &[1, 2, 3]);
    let y = dev.alloc(S0, 12).unwrap();
    let k = dev.kernel(AXPB);
    axpb(&dev, &k, S0, &x, &y, 10, 5).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), [15, 25, 35]);
    let g = dev.capture(S0, |d| axpb(d, &k, S0, &x, &y, 2, 1)).unwrap();
    dev.write_values(S0, &x, 0, &[7u32, 8, 9]).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(
        read(&dev, S0, &y).unwrap(),
        [15, 17, 19],
        "the replay uses the scalars it recorded, over the new input"
    );
}

#[test]
fn an_access_other_than_the_declared_one_is_refused_before_the_backend() {
    let _suite = suite_lock();
    let (dev, world) = device();
    let x = filled(&dev, S0, &[1, 2, 3]);
    let y = dev.alloc(S0, 12).unwrap();
    let kernel = dev.kernel(AXPB);
    let launches = world.calls(FaultOp::Launch);
    for args in [
        // Writing through a read parameter.
        [Arg::write(&x), Arg::write(&y)],
        // Reading what the kernel only writes: taint would check bytes it never reads.
        [Arg::read(&x), Arg::read_write(&y)],
        // A write parameter given as read: order would think nothing was written.
        [Arg::read(&x), Arg::read(&y)],
    ] {
        let full = [
            args[0].clone(),
            args[1].clone(),
            Arg::scalar(1u32),
            Arg::scalar([0u32, 0]),
        ];
        let err = dev.launch(S0, &kernel, [1, 1, 1], &full, &[]).unwrap_err();
        assert!(
            matches!(
                err,
                ServerError::InvalidArgument {
                    what: "argument access",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            text(&err).contains("of kernel axpb (kernel#0): it declares"),
            "{}",
            text(&err)
        );
    }
    assert_eq!(
        world.calls(FaultOp::Launch),
        launches,
        "no launch reached the backend"
    );
    // Nothing was claimed: y is still only never written, x still reads.
    assert_eq!(read(&dev, S0, &x).unwrap(), [1, 2, 3]);
}

#[test]
fn a_scalar_of_the_wrong_size_or_in_a_buffers_place_is_refused() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    let kernel = dev.kernel(AXPB);
    let wrong_size = [
        Arg::read(&x),
        Arg::write(&y),
        Arg::scalar(1u64),
        Arg::scalar([0u32, 0]),
    ];
    let err = dev
        .launch(S0, &kernel, [1, 1, 1], &wrong_size, &[])
        .unwrap_err();
    assert!(
        text(&err)
            .contains("8 bytes for argument 2 of kernel axpb (kernel#0): it takes a 4-byte scalar"),
        "{}",
        text(&err)
    );
    let swapped = [
        Arg::read(&x),
        Arg::scalar(1u32),
        Arg::write(&y),
        Arg::scalar([0u32, 0]),
    ];
    assert!(dev.launch(S0, &kernel, [1, 1, 1], &swapped, &[]).is_err());
    let too_big = [
        Arg::read(&x),
        Arg::write(&y),
        Arg::scalar(1u32),
        Arg::scalar([0u64; 10]),
    ];
    assert!(dev.launch(S0, &kernel, [1, 1, 1], &too_big, &[]).is_err());
    // The stream goes on.
    axpb(&dev, &kernel, S0, &x, &y, 3, 0).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), [3]);
}

#[test]
fn a_block_or_shared_memory_past_the_devices_limits_is_refused_naming_the_limit() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    let kernel = dev.kernel(AXPB);
    let args = [
        Arg::read(&x),
        Arg::write(&y),
        Arg::scalar(1u32),
        Arg::scalar([0u32, 0]),
    ];
    dev.launch(
        S0,
        &kernel,
        Dims::grid([1, 1, 1]).block([256, 4, 1]).shared_bytes(1024),
        &args,
        &[],
    )
    .unwrap();
    for (dims, needle) in [
        (
            Dims::grid([1, 1, 1]).block([2048, 1, 1]),
            "block [2048, 1, 1]",
        ),
        (
            Dims::grid([1, 1, 1]).block([64, 64, 1]),
            "at most 1024 in all",
        ),
        (
            Dims::grid([1, 1, 1]).shared_bytes(1 << 20),
            "at most 49152 bytes",
        ),
    ] {
        let err = dev.launch(S0, &kernel, dims, &args, &[]).unwrap_err();
        assert!(text(&err).contains(needle), "{needle}: {}", text(&err));
    }
}

/// AXPB, declaring that it waits for its grid dependency first (as a CUDA kernel calling
/// `cudaGridDependencySynchronize` would).
const AXPB_WAITS: MockKernel = MockKernel {
    name: "axpb_waits",
    signature: AXPB.signature.with_grid_dependency_wait(),
    f: AXPB.f,
};

fn is_programmatic_refusal(e: &ServerError) -> bool {
    matches!(
        e,
        ServerError::InvalidArgument {
            what: "programmatic launch",
            ..
        }
    )
}

#[test]
fn a_programmatic_launch_is_refused_on_the_mock_naming_the_kernel_and_why() {
    let _suite = suite_lock();
    let (dev, world) = device();
    let ProgrammaticLaunch::Unsupported(why) = dev.programmatic_launch() else {
        panic!("the mock runs no programmatic dependent launch");
    };
    assert!(why.contains("the mock"), "{why}");
    let x = filled(&dev, S0, &[1, 2, 3]);
    let y = dev.alloc(S0, 12).unwrap();
    let kernel = dev.kernel(AXPB_WAITS);
    let args = [
        Arg::read(&x),
        Arg::write(&y),
        Arg::scalar(2u32),
        Arg::scalar([1u32, 0]),
    ];
    let pdl = Dims::grid([1, 1, 1]).programmatic(true);
    let launches = world.calls(FaultOp::Launch);
    let err = dev.launch(S0, &kernel, pdl, &args, &[]).unwrap_err();
    assert!(is_programmatic_refusal(&err), "{err:?}");
    assert!(
        text(&err).contains(&format!(
            "programmatic launch kernel axpb_waits (kernel#{}): {why}",
            kernel.id().index()
        )),
        "{}",
        text(&err)
    );
    assert_eq!(
        world.calls(FaultOp::Launch),
        launches,
        "nothing reached the mock"
    );
    // Nothing claimed: y is still never written, x reads.
    assert!(matches!(read(&dev, S0, &y), Err(ServerError::Unwritten(_))));
    assert_eq!(read(&dev, S0, &x).unwrap(), [1, 2, 3]);
    // Inside a window the refusal records nothing and dooms nothing: the graph holds the
    // launch in stream order only.
    let g = dev
        .capture(S0, |d| {
            let refused = d.launch(S0, &kernel, pdl, &args, &[]).unwrap_err();
            assert!(is_programmatic_refusal(&refused), "{refused:?}");
            d.launch(S0, &kernel, [1, 1, 1], &args, &[])
        })
        .unwrap();
    dev.write_values(S0, &x, 0, &[5u32, 6, 7]).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), [11, 13, 15]);
    assert_eq!(
        world.calls(FaultOp::Launch),
        launches + 2,
        "warmup's launch and the recording's, both in stream order"
    );
}

#[test]
fn a_kernel_that_does_not_declare_the_wait_is_refused_for_overlap() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = filled(&dev, S0, &[1]);
    let y = dev.alloc(S0, 4).unwrap();
    let kernel = dev.kernel(AXPB);
    assert!(!kernel.signature().waits_for_grid_dependency());
    let args = [
        Arg::read(&x),
        Arg::write(&y),
        Arg::scalar(1u32),
        Arg::scalar([0u32, 0]),
    ];
    // The kernel is asked first: the answer names it, whatever the device can do.
    let err = dev
        .launch(
            S0,
            &kernel,
            Dims::grid([1, 1, 1]).programmatic(true),
            &args,
            &[],
        )
        .unwrap_err();
    assert!(is_programmatic_refusal(&err), "{err:?}");
    assert!(
        text(&err).contains("the kernel does not declare that it waits for its grid dependency"),
        "{}",
        text(&err)
    );
    // In stream order (the same launch, `programmatic(false)`), it runs.
    dev.launch(
        S0,
        &kernel,
        Dims::grid([1, 1, 1]).programmatic(false),
        &args,
        &[],
    )
    .unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), [1]);
}

/// `y = x` reversed, as a "library call" of the caller's own; counts its runs.
fn reverse(runs: &Arc<AtomicU32>) -> MockWork {
    let runs = Arc::clone(runs);
    MockWork::new("reverse", move |ranges| {
        runs.fetch_add(1, Ordering::SeqCst);
        let (x, y) = ranges.split_at_mut(1);
        let n = x[0].len().min(y[0].len());
        y[0][..n].copy_from_slice(&x[0][..n]);
        y[0][..n].reverse();
        Ok(())
    })
}

#[test]
fn foreign_work_runs_eagerly_in_warmup_and_every_replay() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let runs = Arc::new(AtomicU32::new(0));
    let x = filled(&dev, S0, &[1, 2]);
    let y = dev.alloc(S0, 8).unwrap();
    let work = reverse(&runs);
    dev.foreign_work(S0, &[Arg::read(&x), Arg::write(&y)], work.clone())
        .unwrap();
    dev.sync(S0).unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let g = dev
        .capture(S0, |d| {
            d.foreign_work(S0, &[Arg::read(&x), Arg::write(&y)], work.clone())
        })
        .unwrap();
    dev.sync(S0).unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "warmup ran it; the window recorded it"
    );
    dev.write_values(S0, &x, 0, &[3u32, 4]).unwrap();
    dev.replay(S0, &g, 2).unwrap();
    let got = dev.read(S0, &y).unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 4, "each replay runs it");
    let mut want: Vec<u8> = [3u32, 4].iter().flat_map(|v| v.to_le_bytes()).collect();
    want.reverse();
    assert_eq!(got, want);
    let trace = dev.trace().render();
    assert!(trace.contains("work reverse"), "{trace}");
}

#[test]
fn foreign_work_over_an_unwritten_input_is_skipped_and_passes_the_failure_on() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let runs = Arc::new(AtomicU32::new(0));
    let x = dev.alloc(S0, 8).unwrap();
    let y = dev.alloc(S0, 8).unwrap();
    let err = dev
        .foreign_work(S0, &[Arg::read(&x), Arg::write(&y)], reverse(&runs))
        .unwrap_err();
    assert!(
        matches!(&err, ServerError::Unwritten(u) if u.by.as_ref().is_some_and(|b| b.stream == S0
            && !b.recorded
            && matches!(&b.op, capture_core::Op::Work { name, .. } if name == "reverse"))),
        "{}",
        text(&err)
    );
    dev.sync(S0).unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 0, "never ran");
    assert!(matches!(dev.read(S0, &y), Err(ServerError::Unwritten(_))));
}

#[test]
fn foreign_work_that_fails_claims_its_outputs_and_dooms_a_window() {
    let _suite = suite_lock();
    let (dev, world) = device();
    let x = filled(&dev, S0, &[1, 2]);
    let y = dev.alloc(S0, 8).unwrap();
    let fails = MockWork::new("fails", |_| Err("the library said no".into()));
    // Eager: the work's failure is reported at the next wait, and its output is claimed.
    dev.foreign_work(S0, &[Arg::read(&x), Arg::write(&y)], fails.clone())
        .unwrap();
    let synced = dev.sync(S0).unwrap_err();
    assert!(
        text(&synced).contains("the library said no"),
        "{}",
        text(&synced)
    );
    assert!(matches!(dev.read(S0, &y), Err(ServerError::Unwritten(_))));
    // The report claimed what the stream wrote since its last good fence, x too
    // (rule 15): the host writes it again.
    dev.write_values(S0, &x, 0, &[1u32, 2]).unwrap();
    // Refused when enqueued inside the window (an injected fault): the window is doomed.
    let runs = Arc::new(AtomicU32::new(0));
    world.fail(FaultOp::Work, 2);
    let err = dev
        .capture(S0, |d| {
            d.foreign_work(S0, &[Arg::read(&x), Arg::write(&y)], reverse(&runs))
        })
        .unwrap_err();
    assert!(matches!(err, ServerError::Doomed(_)), "{}", text(&err));
    assert!(text(&err).contains("doomed by reverse"), "{}", text(&err));
    assert!(matches!(dev.read(S0, &y), Err(ServerError::Unwritten(_))));
}

#[test]
fn foreign_work_rejects_scalars_and_a_workspace_it_declares_is_the_graphs() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = filled(&dev, S0, &[1, 2]);
    let runs = Arc::new(AtomicU32::new(0));
    let err = dev
        .foreign_work(S0, &[Arg::read(&x), Arg::scalar(1u32)], reverse(&runs))
        .unwrap_err();
    assert!(text(&err).contains("takes buffers only"), "{}", text(&err));
    // A workspace the work declares read-write: the graph keeps it after the user drops
    // it, and no later allocation aliases it (rule 7).
    let workspace = dev.alloc(S0, 8).unwrap();
    dev.write_values(S0, &workspace, 0, &[0u32, 0]).unwrap();
    let scratch = MockWork::new("with_workspace", |ranges| {
        let (x, ws) = ranges.split_at_mut(1);
        ws[0].copy_from_slice(&x[0]);
        Ok(())
    });
    let ws_id = workspace.id();
    let g = dev
        .capture(S0, |d| {
            d.foreign_work(
                S0,
                &[Arg::read(&x), Arg::read_write(&workspace)],
                scratch.clone(),
            )
        })
        .unwrap();
    drop(workspace);
    let ledger = dev.graph(&g).unwrap();
    assert!(
        ledger.graph_only_bytes > 0,
        "the dropped workspace is the graph's: {ledger}"
    );
    let other = dev.alloc(S0, 8).unwrap();
    assert_ne!(other.id(), ws_id);
    dev.write_values(S0, &other, 0, &[9u32, 9]).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(
        read(&dev, S0, &other).unwrap(),
        [9, 9],
        "the replay's workspace is not it"
    );
}

#[test]
fn work_on_another_stream_inside_a_capture_closure_is_refused_naming_both() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let x = filled(&dev, S0, &[1, 2]);
    let y = dev.alloc(S0, 8).unwrap();
    let other = filled(&dev, S1, &[5]);
    let add_one = dev.kernel(crate::ADD_ONE);
    // Through the closure's handle and through the device itself: both refused.
    let err = dev
        .capture(S0, |d| {
            d.launch(
                S0,
                &add_one,
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&y)],
                &[],
            )?;
            d.launch(
                S1,
                &add_one,
                [1, 1, 1],
                &[Arg::read(&other), Arg::write(&other)],
                &[],
            )
        })
        .unwrap_err();
    assert!(
        matches!(err, ServerError::OtherStreamInCapture { window, other: o, op: "launch" } if window == S0 && o == S1),
        "{err:?}"
    );
    let err = dev
        .capture(S0, |_| dev.write_values(S1, &other, 0, &[6u32]))
        .unwrap_err();
    assert!(
        matches!(err, ServerError::OtherStreamInCapture { op: "write", .. }),
        "{err:?}"
    );
    assert!(
        text(&err).contains("stream#1") && text(&err).contains("stream#0"),
        "{}",
        text(&err)
    );
    // Another thread's streams keep working while a closure runs.
    let g = std::thread::scope(|scope| {
        dev.capture(S0, |d| {
            scope
                .spawn(|| dev.write_values(S1, &other, 0, &[7u32]))
                .join()
                .unwrap()?;
            d.launch(
                S0,
                &add_one,
                [1, 1, 1],
                &[Arg::read(&x), Arg::write(&y)],
                &[],
            )
        })
    })
    .unwrap();
    assert_eq!(read(&dev, S1, &other).unwrap(), [7]);
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), [2, 3]);
}

#[test]
fn imported_memory_follows_the_rules_and_a_graph_keeps_it() {
    let _suite = suite_lock();
    let mock = MockBackend::new();
    let (dev, _) = crate::device_on(mock.clone());
    let weights = mock.external_memory(8);
    weights.write(
        0,
        &[2u32, 3]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>(),
    );
    let w = dev.import(S0, weights.external()).unwrap();
    assert_eq!(w.size(), 8);
    // Never written as far as the rules know, until the caller says it filled it.
    assert!(matches!(dev.read(S0, &w), Err(ServerError::Unwritten(_))));
    dev.assume_written(S0, &w).unwrap();
    assert_eq!(read(&dev, S0, &w).unwrap(), [2, 3]);
    // Not one of the library's pages.
    let pages = dev.memory_report().pages();
    let y = dev.alloc(S0, 8).unwrap();
    let add_one = dev.kernel(crate::ADD_ONE);
    let g = dev
        .capture(S0, |d| {
            d.launch(
                S0,
                &add_one,
                [1, 1, 1],
                &[Arg::read(&w), Arg::write(&y)],
                &[],
            )
        })
        .unwrap();
    // The user drops its handle: the graph keeps the import, and never frees it.
    drop(w);
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(read(&dev, S0, &y).unwrap(), [3, 4]);
    dev.drop_graph(g).unwrap();
    dev.sync(S0).unwrap();
    dev.cleanup().unwrap();
    assert_eq!(
        weights.read(),
        [2u32, 3]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect::<Vec<_>>(),
        "the caller's memory is untouched: not poisoned, not freed"
    );
    assert!(dev.memory_report().pages() >= pages.saturating_sub(1));
    // An import whose handle is dropped inside the window: only the graph holds it then,
    // through what the window touched; a cleanup while the graph lives forgets nothing
    // it holds.
    let w = dev.import(S0, weights.external()).unwrap();
    dev.assume_written(S0, &w).unwrap();
    dev.prepare(S0).unwrap();
    let launch = |w: &capture_core::Buffer| {
        dev.launch(
            S0,
            &add_one,
            [1, 1, 1],
            &[Arg::read(w), Arg::write(&y)],
            &[],
        )
    };
    launch(&w).unwrap();
    dev.begin(S0).unwrap();
    launch(&w).unwrap();
    drop(w);
    let g = dev.end(S0).unwrap();
    dev.sync(S0).unwrap();
    dev.cleanup().unwrap();
    dev.write(S0, &y, 0, [0u8; 8]).unwrap();
    dev.replay(S0, &g, 1).unwrap();
    assert_eq!(
        read(&dev, S0, &y).unwrap(),
        [3, 4],
        "the graph kept the import"
    );
    dev.drop_graph(g).unwrap();
    dev.sync(S0).unwrap();
    dev.cleanup().unwrap();
    // Memory the caller already freed is refused.
    let gone = mock.external_memory(8);
    let stale = gone.external();
    drop(gone);
    assert!(matches!(
        dev.import(S0, stale),
        Err(ServerError::InvalidArgument { .. })
    ));
}
