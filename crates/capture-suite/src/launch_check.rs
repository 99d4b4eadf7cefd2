//! The launch check, the same on every backend: a launch with one argument too many, an
//! empty grid, a range the device cannot bind, an access beyond the kernel's declared
//! one, a block or dynamic shared memory beyond the device's limits, a programmatic
//! dependent launch the device or the kernel cannot run is refused by the core, with the
//! same typed error, before the backend sees it; the stream stays usable.

use capture_core::{
    Arg, Builtin, Builtins, Chain, Device, DeviceConfig, Dims, ProgrammaticLaunch, ServerError,
    StreamId,
};
use capture_mock::{FaultOp, Faulty};

use crate::scenarios::{N, bytes, floats, splat, suite_lock};

/// What one refused launch returned.
#[derive(Debug)]
pub struct Refusal {
    /// Which launch: `one argument too many`, `empty grid`, `misaligned range`,
    /// `access beyond the declaration`, `block beyond the device`, `shared memory
    /// beyond the device` or `programmatic launch`.
    pub launch: &'static str,
    /// The error the core returned.
    pub error: ServerError,
}

/// Issues the launches every backend must refuse on a device over `backend`, and
/// returns each refusal. Panics if one of them reached the backend, was not refused, or
/// left the stream unusable.
///
/// The misaligned range starts half the device's binding alignment into its buffer; on
/// a device that binds at any byte the case is not reachable and is left out. The
/// programmatic launch is left out where the device runs them and the builtin declares
/// its wait (CUDA on compute capability 9.0 and later).
///
/// # Errors
///
/// The device's refusal of the valid work around the three launches.
pub fn refused_launches<B: Builtins>(backend: B) -> Result<Vec<Refusal>, ServerError> {
    let _suite = suite_lock();
    let faulty = Faulty::new(backend);
    let plan = std::sync::Arc::clone(faulty.plan());
    let limits = {
        use capture_core::backend::Backend;
        faulty.launch_limits()
    };
    let alignment = limits.binding_alignment();
    let dev = Device::new(faulty, DeviceConfig::new().streams(1)?)?;
    let s = StreamId::new(0);
    let k = dev.kernel(B::builtin(Builtin::AddScalar));
    let x = dev.alloc(s, N * 4 + 256)?;
    let y = dev.alloc(s, N * 4)?;
    dev.write(s, &x, 0, bytes(&vec![1.0; N as usize + 64]))?;
    let info = Builtin::AddScalar.info(N, 1.0);
    let launches_before = plan.calls(FaultOp::Launch);
    let mut refusals = Vec::new();
    let mut refuse = |launch: &'static str, result: Result<(), ServerError>| match result {
        Ok(()) => panic!("the launch with {launch} was accepted"),
        Err(error) => refusals.push(Refusal { launch, error }),
    };
    refuse(
        "one argument too many",
        dev.launch(
            s,
            &k,
            [1, 1, 1],
            &[Arg::read(&x), Arg::write(&y), Arg::read(&x)],
            &info,
        ),
    );
    // add_scalar declares its output write-only: an argument saying read-write would
    // have taint and order check bytes the kernel never reads.
    refuse(
        "access beyond the declaration",
        dev.launch(
            s,
            &k,
            [1, 1, 1],
            &[Arg::read(&x), Arg::read_write(&y)],
            &info,
        ),
    );
    let (max_block, max_threads) = limits.max_block();
    refuse(
        "block beyond the device",
        dev.launch(
            s,
            &k,
            Dims::grid([1, 1, 1]).block([max_block[0].min(max_threads) + 1, 1, 1]),
            &[Arg::read(&x), Arg::write(&y)],
            &info,
        ),
    );
    refuse(
        "shared memory beyond the device",
        dev.launch(
            s,
            &k,
            Dims::grid([1, 1, 1]).shared_bytes(limits.max_shared_bytes() + 1),
            &[Arg::read(&x), Arg::write(&y)],
            &info,
        ),
    );
    refuse(
        "empty grid",
        dev.launch(s, &k, [1, 0, 1], &[Arg::read(&x), Arg::write(&y)], &info),
    );
    if limits.programmatic() != ProgrammaticLaunch::Supported
        || !k.signature().waits_for_grid_dependency()
    {
        refuse(
            "programmatic launch",
            dev.launch(
                s,
                &k,
                Dims::grid([1, 1, 1]).programmatic(true),
                &[Arg::read(&x), Arg::write(&y)],
                &info,
            ),
        );
    }
    if alignment > 1 {
        let offset = alignment / 2;
        refuse(
            "misaligned range",
            dev.launch(
                s,
                &k,
                [1, 1, 1],
                &[Arg::read(&x).range(offset, N * 4), Arg::write(&y)],
                &info,
            ),
        );
    }
    assert_eq!(
        plan.calls(FaultOp::Launch),
        launches_before,
        "a refused launch reached the backend"
    );
    // The stream is usable: the same launch, fitting, runs.
    dev.launch(s, &k, [1, 1, 1], &[Arg::read(&x), Arg::write(&y)], &info)?;
    let got = floats(&dev.read(s, &y)?);
    assert_eq!(got, splat(2.0), "after the refusals");
    for r in &refusals {
        let text = Chain(&r.error).to_string();
        let expected = match r.launch {
            "one argument too many" => "argument count 3 of kernel add_scalar (kernel#".to_string(),
            "access beyond the declaration" => {
                "argument access ReadWrite for argument 1 of kernel add_scalar (kernel#".to_string()
            }
            "block beyond the device" => {
                format!("threads per dimension, at most {max_threads} in all")
            }
            "shared memory beyond the device" => {
                format!("{} bytes", limits.max_shared_bytes() + 1)
            }
            "empty grid" => "every dimension runs at least one workgroup".to_string(),
            "programmatic launch" => {
                "invalid programmatic launch kernel add_scalar (kernel#".to_string()
            }
            _ => format!(
                "offset {}: this device binds ranges at multiples of {alignment} bytes",
                alignment / 2
            ),
        };
        assert!(text.contains(&expected), "{}: {text}", r.launch);
    }
    Ok(refusals)
}
