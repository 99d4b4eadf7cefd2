//! The third pass (issue 32): breaks a review written from the docs alone found in the
//! launch model, foreign work, imported memory and nested captures. Each test is named
//! after its item and failed on the main it was found on.

use capture_core::{
    Arg, Builtin, Chain, Device, DeviceConfig, KernelHandle, KernelSignature, MAX_SCALAR_BYTES,
    Param, ServerError,
};
use capture_mock::{MockBackend, MockKernel, MockWork};

use crate::{Dev, S0, S1, device, device_on, filled, read, suite_lock};

/// A mock kernel writing `$value` into every word of its one buffer.
macro_rules! set_kernel {
    ($name:literal, $value:literal) => {
        MockKernel {
            name: $name,
            signature: KernelSignature::new(1, 0),
            f: |b, _| {
                for c in b[0].chunks_exact_mut(4) {
                    c.copy_from_slice(&($value as u32).to_le_bytes());
                }
            },
        }
    };
}

const SETS: [MockKernel; 3] = [
    set_kernel!("set_a", 101),
    set_kernel!("set_b", 102),
    set_kernel!("set_c", 103),
];

/// What one step of a registration order does.
#[derive(Clone, Copy, Debug)]
enum Step {
    /// `dev.kernel(SETS[i])`.
    Register(usize),
    /// `dev.builtin(b)`, lazily registered at its first use.
    Builtin(Builtin),
    /// Foreign work of a name never used before.
    Work(&'static str),
}

/// The handles an order made, and what each must compute.
enum Made {
    Set(KernelHandle, u32),
    Fill(KernelHandle),
    Copy(KernelHandle),
}

fn permutations(items: &[Step]) -> Vec<Vec<Step>> {
    if items.len() <= 1 {
        return vec![items.to_vec()];
    }
    let mut out = Vec::new();
    for i in 0..items.len() {
        let mut rest = items.to_vec();
        let first = rest.remove(i);
        for mut tail in permutations(&rest) {
            tail.insert(0, first);
            out.push(tail);
        }
    }
    out
}

/// Launches what `made` names over `buf` (and `src` for a copy) and checks it ran its
/// own code.
fn check_made(
    dev: &Dev,
    made: &Made,
    buf: &capture_core::Buffer,
    src: &capture_core::Buffer,
    order: &[Step],
) {
    match made {
        Made::Set(k, value) => {
            dev.launch(S0, k, [1, 1, 1], &[Arg::write(buf)], &[])
                .unwrap_or_else(|e| panic!("{order:?}: {}", Chain(&e)));
            assert_eq!(read(dev, S0, buf).unwrap(), [*value; 4], "{order:?}");
        }
        Made::Fill(k) => {
            dev.launch(
                S0,
                k,
                [1, 1, 1],
                &[Arg::write(buf)],
                &Builtin::Fill.info(4, 7.0),
            )
            .unwrap_or_else(|e| panic!("{order:?}: {}", Chain(&e)));
            let got: Vec<f32> = dev.read_values(S0, buf).unwrap();
            assert_eq!(got, [7.0; 4], "{order:?}");
        }
        Made::Copy(k) => {
            dev.launch(
                S0,
                k,
                [1, 1, 1],
                &[Arg::read(src), Arg::write(buf)],
                &Builtin::Copy.info(4, 0.0),
            )
            .unwrap_or_else(|e| panic!("{order:?}: {}", Chain(&e)));
            let got: Vec<f32> = dev.read_values(S0, buf).unwrap();
            assert_eq!(got, [2.5; 4], "{order:?}");
        }
    }
}

/// Item 1: kernel ids come from the registry's one counter. Registrations, lazy builtins
/// and foreign work of new names, in every order: each handle runs its own code, right
/// after it is made and after everything else, and a builtin asked for again is the
/// same handle.
#[test]
fn i32_01_kernel_ids_survive_foreign_work_in_every_order() {
    let _suite = suite_lock();
    let steps = [
        Step::Register(0),
        Step::Work("first_work"),
        Step::Register(1),
        Step::Builtin(Builtin::Fill),
        Step::Work("second_work"),
        Step::Register(2),
        Step::Builtin(Builtin::Copy),
    ];
    for order in permutations(&steps) {
        let (dev, _) = device();
        let buf = dev.alloc(S0, 16).unwrap();
        let src = dev.alloc(S0, 16).unwrap();
        dev.write_values(S0, &src, 0, &[2.5f32; 4]).unwrap();
        let mut made = Vec::new();
        for step in &order {
            match *step {
                Step::Register(i) => {
                    let k = dev.kernel(SETS[i]);
                    assert_eq!(dev.kernel_name(&k), SETS[i].name, "{order:?}");
                    made.push(Made::Set(k, 101 + i as u32));
                }
                Step::Builtin(b) => {
                    let k = dev.builtin(b);
                    assert_eq!(dev.kernel_name(&k), b.name(), "{order:?}");
                    made.push(match b {
                        Builtin::Fill => Made::Fill(k),
                        _ => Made::Copy(k),
                    });
                }
                Step::Work(name) => {
                    let work = MockWork::new(name, |r| {
                        r[0].fill(9);
                        Ok(())
                    });
                    dev.foreign_work(S0, &[Arg::write(&buf)], work)
                        .unwrap_or_else(|e| panic!("{order:?}: {}", Chain(&e)));
                    assert_eq!(read(&dev, S0, &buf).unwrap(), [0x0909_0909; 4]);
                }
            }
            if let Some(last) = made.last()
                && !matches!(step, Step::Work(_))
            {
                check_made(&dev, last, &buf, &src, &order);
            }
        }
        for m in &made {
            check_made(&dev, m, &buf, &src, &order);
        }
        // A builtin asked for again is the handle it got first.
        let fill = dev.builtin(Builtin::Fill);
        assert_eq!(dev.builtin(Builtin::Fill), fill, "{order:?}");
        check_made(&dev, &Made::Fill(fill), &buf, &src, &order);
    }
}

/// Item 2: the same memory of the caller's imported again (refused while the first
/// import lives, issue 45 item 4; adopted anew once it is gone), every import dropped
/// and cleaned up: the caller's memory is never freed (each import is its own
/// adoption).
#[test]
fn i32_02_memory_imported_twice_is_never_freed_by_the_library() {
    let _suite = suite_lock();
    let mock = MockBackend::new();
    let memory = mock.external_memory(16);
    memory.write(0, &[3; 16]);
    let (dev, _) = device_on(mock.clone());
    let a = dev.import(S0, memory.external()).unwrap();
    let refused = dev.import(S0, memory.external()).unwrap_err();
    assert_eq!(refused.subject().and_then(|s| s.memory()), Some(a.id()));
    dev.assume_written(S0, &a).unwrap();
    assert_eq!(dev.read(S0, &a).unwrap(), [3; 16]);
    dev.cleanup().unwrap();
    // The first import still reads the caller's bytes.
    assert_eq!(dev.read(S0, &a).unwrap(), [3; 16]);
    drop(a);
    dev.sync(S0).unwrap();
    dev.cleanup().unwrap();
    assert_eq!(memory.read(), [3; 16], "the caller's memory was freed");
    // And it can be imported again.
    let c = dev.import(S0, memory.external()).unwrap();
    dev.assume_written(S0, &c).unwrap();
    assert_eq!(dev.read(S0, &c).unwrap(), [3; 16]);
}

/// Item 2: memory of another `MockBackend` value is refused, naming it, and the stream
/// stays usable.
#[test]
fn i32_02_memory_of_another_backend_value_is_refused() {
    let _suite = suite_lock();
    // Memory of the caller's on each value, each the first page there: told apart by
    // page number alone, theirs would pass as ours (with their size).
    let mock = MockBackend::new();
    let mine = mock.external_memory(16);
    let elsewhere = MockBackend::new();
    let theirs = elsewhere.external_memory(4096);
    let (dev, _) = device_on(mock);
    let ours = filled(&dev, S0, &[1, 2, 3, 4]);
    let refused = dev.import(S0, theirs.external()).unwrap_err();
    assert!(
        matches!(
            refused,
            ServerError::InvalidArgument {
                what: "imported memory",
                ..
            }
        ),
        "{}",
        Chain(&refused)
    );
    assert!(
        Chain(&refused)
            .to_string()
            .contains("another backend value")
    );
    assert_eq!(read(&dev, S0, &ours).unwrap(), [1, 2, 3, 4]);
    // The caller's own memory of this value still imports, at its own size.
    let own = dev.import(S0, mine.external()).unwrap();
    assert_eq!(own.size(), 16);
}

/// Item 3: rule 22 holds for a nested capture: `capture` (and `prepare`, `begin`, `end`)
/// of another stream inside a capture closure is refused naming both streams, runs
/// nothing, and the outer capture's graph is whole.
#[test]
fn i32_03_a_nested_capture_on_another_stream_is_refused() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let fill = dev.builtin(Builtin::Fill);
    let y0 = dev.alloc(S0, 16).unwrap();
    let y1 = dev.alloc(S1, 16).unwrap();
    dev.write_values(S1, &y1, 0, &[1.0f32; 4]).unwrap();
    let mut inner = Vec::new();
    let graph = dev
        .capture(S0, |d| {
            d.launch(
                S0,
                &fill,
                [1, 1, 1],
                &[Arg::write(&y0)],
                &Builtin::Fill.info(4, 5.0),
            )?;
            let nested = d.device().capture(S1, |d1| {
                d1.launch(
                    S1,
                    &fill,
                    [1, 1, 1],
                    &[Arg::write(&y1)],
                    &Builtin::Fill.info(4, 9.0),
                )
            });
            inner.push(nested.map(drop));
            inner.push(d.device().prepare(S1));
            inner.push(d.device().begin(S1));
            inner.push(d.device().end(S1).map(drop));
            Ok::<(), ServerError>(())
        })
        .unwrap();
    assert_eq!(inner.len(), 8, "the closure ran twice");
    for refused in &inner {
        match refused {
            Err(ServerError::OtherStreamInCapture { window, other, .. }) => {
                assert_eq!((*window, *other), (S0, S1));
            }
            other => panic!("not refused: {other:?}"),
        }
    }
    assert!(dev.captures().active().is_empty());
    dev.sync(S1).unwrap();
    let y1_now: Vec<f32> = dev.read_values(S1, &y1).unwrap();
    assert_eq!(y1_now, [1.0; 4], "the nested capture's work ran");
    dev.replay(S0, &graph, 1).unwrap();
    let y0_now: Vec<f32> = dev.read_values(S0, &y0).unwrap();
    assert_eq!(y0_now, [5.0; 4]);
    // S1 captures on its own afterwards.
    let own = dev
        .capture(S1, |d| {
            d.launch(
                S1,
                &fill,
                [1, 1, 1],
                &[Arg::write(&y1)],
                &Builtin::Fill.info(4, 9.0),
            )
        })
        .unwrap();
    dev.replay(S1, &own, 1).unwrap();
}

/// A kernel taking one buffer and the scalars and info words a test gives it.
fn sized_kernel(signature: KernelSignature) -> MockKernel {
    MockKernel {
        name: "sized",
        signature,
        f: |_, _| {},
    }
}

/// Item 4: sizes in the launch model are never cut to 16 bits: a scalar past 64 KiB
/// and an info count past 65,535 are what they say, and a launch that does not fit
/// them is refused.
#[test]
fn i32_04_sizes_past_sixteen_bits_are_kept_and_checked() {
    let _suite = suite_lock();
    let (dev, _) = device();
    let buf = filled(&dev, S0, &[0; 4]);
    // A 65,540-byte scalar is not a 4-byte one.
    let huge = dev.kernel(sized_kernel(KernelSignature::of(&[
        Param::READ_WRITE,
        Param::scalar::<[u8; 65540]>(),
    ])));
    let refused = dev
        .launch(
            S0,
            &huge,
            [1, 1, 1],
            &[Arg::read_write(&buf), Arg::scalar(1u32)],
            &[],
        )
        .unwrap_err();
    assert!(
        matches!(
            refused,
            ServerError::InvalidArgument {
                what: "scalar size",
                ..
            }
        ),
        "{}",
        Chain(&refused)
    );
    // At the limit: accepted; one byte-step past it: refused by the signature.
    let at = dev.kernel(sized_kernel(KernelSignature::of(&[
        Param::READ_WRITE,
        Param::scalar::<[u32; MAX_SCALAR_BYTES / 4]>(),
    ])));
    dev.launch(
        S0,
        &at,
        [1, 1, 1],
        &[
            Arg::read_write(&buf),
            Arg::scalar([0u32; MAX_SCALAR_BYTES / 4]),
        ],
        &[],
    )
    .unwrap();
    let past = dev.kernel(sized_kernel(KernelSignature::of(&[
        Param::READ_WRITE,
        Param::scalar::<[u32; MAX_SCALAR_BYTES / 4 + 1]>(),
    ])));
    let refused = dev
        .launch(
            S0,
            &past,
            [1, 1, 1],
            &[
                Arg::read_write(&buf),
                Arg::scalar([0u32; MAX_SCALAR_BYTES / 4 + 1]),
            ],
            &[],
        )
        .unwrap_err();
    assert!(matches!(
        refused,
        ServerError::InvalidArgument {
            what: "scalar size",
            ..
        }
    ));
    // 65,536 info words are not 0.
    let signature = KernelSignature::new(1, 0).with_info(65536);
    assert_eq!(signature.info_words(), 65536);
    assert!(signature.has_info());
    let wide = dev.kernel(sized_kernel(signature));
    let refused = dev
        .launch(S0, &wide, [1, 1, 1], &[Arg::read_write(&buf)], &[])
        .unwrap_err();
    assert!(
        matches!(
            refused,
            ServerError::InvalidArgument {
                what: "info words",
                ..
            }
        ),
        "{}",
        Chain(&refused)
    );
    let words = vec![0u64; 65536];
    dev.launch(S0, &wide, [1, 1, 1], &[Arg::read_write(&buf)], &words)
        .unwrap();
    // The stream is usable after every refusal.
    dev.sync(S0).unwrap();
}

/// Item 7: a user kernel that takes no info words launches without an info argument.
#[test]
fn i32_07_a_kernel_without_info_words_dispatches_without_an_info_argument() {
    let _suite = suite_lock();
    let dev = Device::new(MockBackend::new(), DeviceConfig::new()).unwrap();
    let k = dev.kernel(SETS[1]);
    let y = dev.alloc(S0, 16).unwrap();
    dev.dispatch(S0, &k, [1, 1, 1], &[Arg::write(&y)]).unwrap();
    assert_eq!(dev.read_values::<u32>(S0, &y).unwrap(), [102; 4]);
    let graph = dev
        .capture(S0, |d| d.dispatch(S0, &k, [1, 1, 1], &[Arg::write(&y)]))
        .unwrap();
    dev.write_values(S0, &y, 0, &[0u32; 4]).unwrap();
    dev.replay(S0, &graph, 1).unwrap();
    assert_eq!(dev.read_values::<u32>(S0, &y).unwrap(), [102; 4]);
    // A kernel that takes info words is refused, naming the count.
    let add = dev.builtin(Builtin::AddScalar);
    let refused = dev
        .dispatch(S0, &add, [1, 1, 1], &[Arg::read(&y), Arg::write(&y)])
        .unwrap_err();
    assert!(matches!(
        refused,
        ServerError::InvalidArgument {
            what: "info words",
            ..
        }
    ));
}
