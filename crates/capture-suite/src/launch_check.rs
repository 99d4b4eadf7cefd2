//! The launch check, the same on every backend: a launch with one buffer too many, an
//! empty grid, or a range the device cannot bind is refused by the core, with the same
//! typed error, before the backend sees it; the stream stays usable.

use capture_core::{
    Arg, Builtin, Builtins, Chain, Device, DeviceConfig, MAX_LAUNCH_BUFFERS, ServerError, StreamId,
};
use capture_mock::{FaultOp, Faulty};

use crate::scenarios::{N, bytes, floats, splat, suite_lock};

/// What one refused launch returned.
#[derive(Debug)]
pub struct Refusal {
    /// Which launch: `too many buffers`, `empty grid` or `misaligned range`.
    pub launch: &'static str,
    /// The error the core returned.
    pub error: ServerError,
}

/// Issues the three launches every backend must refuse on a device over `backend`, and
/// returns each refusal. Panics if one of them reached the backend, was not refused, or
/// left the stream unusable.
///
/// The misaligned range starts half the device's binding alignment into its buffer; on
/// a device that binds at any byte the case is not reachable and is left out.
///
/// # Errors
///
/// The device's refusal of the valid work around the three launches.
pub fn refused_launches<B: Builtins>(backend: B) -> Result<Vec<Refusal>, ServerError> {
    let _suite = suite_lock();
    let faulty = Faulty::new(backend);
    let plan = std::sync::Arc::clone(faulty.plan());
    let alignment = {
        use capture_core::backend::Backend;
        faulty.launch_limits().binding_alignment()
    };
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
    let too_many: Vec<Arg> = (0..=MAX_LAUNCH_BUFFERS).map(|_| Arg::read(&x)).collect();
    refuse(
        "too many buffers",
        dev.launch(s, &k, [1, 1, 1], &too_many, &info),
    );
    refuse(
        "empty grid",
        dev.launch(s, &k, [1, 0, 1], &[Arg::read(&x), Arg::write(&y)], &info),
    );
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
            "too many buffers" => "buffer count 9: a launch binds at most 8 buffers".to_string(),
            "empty grid" => "every dimension runs at least one workgroup".to_string(),
            _ => format!(
                "offset {}: this device binds ranges at multiples of {alignment} bytes",
                alignment / 2
            ),
        };
        assert!(text.contains(&expected), "{}: {text}", r.launch);
    }
    Ok(refusals)
}
