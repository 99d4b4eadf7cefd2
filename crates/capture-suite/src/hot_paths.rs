//! The hot paths every backend must run without a heap allocation per call: a steady-state
//! eager launch, a recorded launch, a replay, and a decode loop's host I/O (a typed write
//! from a borrowed slice, a replay, a read into the caller's buffer).
//!
//! Each check builds what it needs on a fresh device, warms the path up (so vectors,
//! pools and caches have grown), then counts the allocations of 1,000 (or 2,000) more
//! calls with the counter the test binary gives it: a counting global allocator sees
//! every allocation in the process, so only a binary of its own, with no test threads,
//! can host these checks (`harness = false`). The backend's own work counts too (the
//! mock's queue and kernels' scratch, Vulkan's command recording and submissions,
//! CUDA's launches): only allocations the driver's own C code makes are invisible.
//!
//! The verdict allows [`BUDGET`] allocations per check (amortised growth of a vector
//! that has not yet reached its steady size), never one per call, with one exception a
//! check names: a host write reserves a staging slice, whose handle is two reference
//! counted cells ([`STAGING_HANDLE`] per write); the bytes themselves come from the host
//! pool, and a read allocates nothing at all.

use capture_core::{Arg, Builtin, Builtins, Device, KernelHandle, ServerError, StreamId};

/// Counts the allocations (and reallocations) the closure makes.
pub type Counter<'a> = &'a dyn Fn(&mut dyn FnMut()) -> usize;

/// The most allocations a check's steady-state calls may make: amortised growth only.
pub const BUDGET: usize = 8;

/// Allocations one host write's staging slice makes: its handle and its binding.
pub const STAGING_HANDLE: usize = 2;

/// Calls each check makes while counting.
pub const CALLS: usize = 1_000;

/// One hot path measured: what, how many calls, how many allocations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Measured {
    /// The path, as the verdict names it.
    pub what: &'static str,
    /// Calls counted.
    pub calls: usize,
    /// Allocations and reallocations among them.
    pub allocations: usize,
    /// Allocations each call may make on top of [`BUDGET`]: [`STAGING_HANDLE`] for a
    /// call that writes host bytes, else 0.
    pub per_call: usize,
}

impl Measured {
    /// The most allocations the calls may make.
    pub fn budget(&self) -> usize {
        BUDGET + self.per_call * self.calls
    }

    /// Whether the allocations are within [`budget`](Self::budget).
    pub fn amortised(&self) -> bool {
        self.allocations <= self.budget()
    }
}

impl std::fmt::Display for Measured {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} allocations over {} calls (budget {BUDGET}",
            self.what, self.allocations, self.calls
        )?;
        if self.per_call > 0 {
            write!(
                f,
                " + {} per call, the staging slice's handle",
                self.per_call
            )?;
        }
        write!(f, ")")
    }
}

const S: StreamId = StreamId::new(0);
/// Elements of every buffer.
const E: u64 = 64;
/// AddScalar's info words: 64 elements, plus 1.0.
const ONE: [u64; 2] = [E, 0x3f80_0000];

fn zeros<B: Builtins>(dev: &Device<B>) -> Result<[capture_core::Buffer; 2], ServerError> {
    let a = dev.alloc(S, E * 4)?;
    let b = dev.alloc(S, E * 4)?;
    dev.write(S, &a, 0, vec![0u8; (E * 4) as usize])?;
    dev.write(S, &b, 0, vec![0u8; (E * 4) as usize])?;
    Ok([a, b])
}

fn add_one<B: Builtins>(dev: &Device<B>) -> KernelHandle {
    dev.kernel(B::builtin(Builtin::AddScalar))
}

/// Eager launches of two builtins ping-ponging between two buffers (each launch enters
/// and settles a taint scope, hits the info cache, binds its buffers and, on a backend
/// with a submission cadence, submits now and then).
///
/// # Errors
///
/// The device's error, from any call.
pub fn eager_launches<B: Builtins>(
    dev: &Device<B>,
    count: Counter<'_>,
) -> Result<Measured, ServerError> {
    let add_one = add_one(dev);
    let axpy = dev.kernel(B::builtin(Builtin::Axpy));
    let [a, b] = zeros(dev)?;
    let axpy_info = Builtin::Axpy.info(E, 0.5);
    let step = |i: usize| -> Result<(), ServerError> {
        let (x, y) = if i.is_multiple_of(2) {
            (&a, &b)
        } else {
            (&b, &a)
        };
        dev.launch(S, &add_one, [1, 1, 1], &[Arg::read(x), Arg::write(y)], &ONE)?;
        dev.launch(
            S,
            &axpy,
            [1, 1, 1],
            &[Arg::read(x), Arg::read_write(y)],
            &axpy_info,
        )
    };
    for i in 0..CALLS {
        step(i)?;
    }
    dev.sync(S)?;
    let mut result = Ok(());
    let allocations = count(&mut || {
        for i in 0..CALLS {
            if result.is_ok() {
                result = step(i);
            }
        }
    });
    result?;
    dev.sync(S)?;
    Ok(Measured {
        what: "Device::launch (eager)",
        calls: 2 * CALLS,
        allocations,
        per_call: 0,
    })
}

/// Launches recorded inside a window, on a stream whose recording was sized by an
/// earlier capture of the same chain.
///
/// # Errors
///
/// The device's error, from any call.
pub fn recorded_launches<B: Builtins>(
    dev: &Device<B>,
    count: Counter<'_>,
) -> Result<Measured, ServerError> {
    let add_one = add_one(dev);
    let [a, b] = zeros(dev)?;
    let chain = |d: &Device<B>| -> Result<(), ServerError> {
        for i in 0..CALLS {
            let (x, y) = if i.is_multiple_of(2) {
                (&a, &b)
            } else {
                (&b, &a)
            };
            d.launch(S, &add_one, [1, 1, 1], &[Arg::read(x), Arg::write(y)], &ONE)?;
        }
        Ok(())
    };
    // One capture to size every vector, then count the recording pass of a second.
    let g = dev.capture(S, |d| chain(d))?;
    dev.drop_graph(g)?;
    dev.sync(S)?;
    dev.prepare(S)?;
    chain(dev)?;
    dev.begin(S)?;
    let mut result = Ok(());
    let allocations = count(&mut || result = chain(dev));
    result?;
    let g = dev.end(S)?;
    dev.drop_graph(g)?;
    dev.sync(S)?;
    Ok(Measured {
        what: "Device::launch (recorded)",
        calls: CALLS,
        allocations,
        per_call: 0,
    })
}

/// Replays of a captured two-launch graph, back to back, with a sync every 100 (each
/// replay claims and settles what the graph writes, orders its inputs and, on a GPU
/// backend, submits).
///
/// # Errors
///
/// The device's error, from any call.
pub fn replays<B: Builtins>(dev: &Device<B>, count: Counter<'_>) -> Result<Measured, ServerError> {
    let add_one = add_one(dev);
    let [a, b] = zeros(dev)?;
    let g = dev.capture(S, |d| {
        d.launch(
            S,
            &add_one,
            [1, 1, 1],
            &[Arg::read(&a), Arg::write(&b)],
            &ONE,
        )?;
        d.launch(
            S,
            &add_one,
            [1, 1, 1],
            &[Arg::read(&b), Arg::write(&a)],
            &ONE,
        )
    })?;
    let round = || -> Result<(), ServerError> {
        for i in 0..CALLS {
            dev.replay(S, &g, 1)?;
            if i % 100 == 99 {
                dev.sync(S)?;
            }
        }
        Ok(())
    };
    round()?;
    round()?;
    let mut result = Ok(());
    let allocations = count(&mut || result = round());
    result?;
    dev.sync(S)?;
    dev.drop_graph(g)?;
    dev.sync(S)?;
    Ok(Measured {
        what: "Device::replay",
        calls: CALLS,
        allocations,
        per_call: 0,
    })
}

/// A decode loop's host side, per token: a typed write of the input from a borrowed host
/// array, one replay, and a typed read of the output into another host array. Only the
/// staging slice's handle is allocated per write ([`STAGING_HANDLE`]); its bytes come
/// from the host pool and go back to it behind a fence.
///
/// # Errors
///
/// The device's error, from any call.
pub fn host_io<B: Builtins>(dev: &Device<B>, count: Counter<'_>) -> Result<Measured, ServerError> {
    let add_one = add_one(dev);
    let [a, b] = zeros(dev)?;
    let g = dev.capture(S, |d| {
        d.launch(
            S,
            &add_one,
            [1, 1, 1],
            &[Arg::read(&a), Arg::write(&b)],
            &ONE,
        )
    })?;
    let mut input = [0.0f32; E as usize];
    let mut output = [0.0f32; E as usize];
    let mut token = |i: usize| -> Result<(), ServerError> {
        input.fill(i as f32);
        dev.write_values(S, &a, 0, &input)?;
        dev.replay(S, &g, 1)?;
        dev.read_values_into(S, &b, 0, &mut output)?;
        if output[0] != i as f32 + 1.0 {
            return Err(ServerError::invalid(
                "host_io",
                format!("token {i}"),
                format!("read back {}, not {}", output[0], i as f32 + 1.0),
            ));
        }
        Ok(())
    };
    for i in 0..CALLS {
        token(i)?;
    }
    let mut result = Ok(());
    let allocations = count(&mut || {
        for i in 0..CALLS {
            if result.is_ok() {
                result = token(i);
            }
        }
    });
    result?;
    dev.sync(S)?;
    dev.drop_graph(g)?;
    dev.sync(S)?;
    Ok(Measured {
        what: "Device::write_values + replay + read_values_into",
        calls: CALLS,
        allocations,
        per_call: STAGING_HANDLE,
    })
}

/// A check: a name and what it runs on a device.
pub type Check<B> = (
    &'static str,
    fn(&Device<B>, Counter<'_>) -> Result<Measured, ServerError>,
);

/// Every hot path, for one backend.
pub fn checks<B: Builtins>() -> [Check<B>; 4] {
    [
        ("eager_launches", eager_launches::<B>),
        ("recorded_launches", recorded_launches::<B>),
        ("replays", replays::<B>),
        ("host_io", host_io::<B>),
    ]
}

/// Runs every check on a fresh device from `open`, printing each measurement and a
/// libtest-style `test {label}::{name} ... ok|FAILED` line; returns (passed, failed).
/// A check over budget, a device error and a panic each fail it.
pub fn run_all<B: Builtins>(
    label: &str,
    open: &dyn Fn() -> Device<B>,
    count: Counter<'_>,
) -> (usize, usize) {
    let (mut passed, mut failed) = (0, 0);
    for (name, check) in checks::<B>() {
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&open(), count)));
        let verdict = match outcome {
            Ok(Ok(measured)) if measured.amortised() => {
                println!("  {measured}");
                "ok"
            }
            Ok(Ok(measured)) => {
                println!("  {measured}: over budget");
                "FAILED"
            }
            Ok(Err(error)) => {
                println!(
                    "  {name}: the device failed: {}",
                    capture_core::Chain(&error)
                );
                "FAILED"
            }
            Err(_) => "FAILED (panicked)",
        };
        println!("test {label}::{name} ... {verdict}");
        if verdict == "ok" {
            passed += 1;
        } else {
            failed += 1;
        }
    }
    (passed, failed)
}
