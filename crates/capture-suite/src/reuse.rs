//! One backend value hosting devices one after another and side by side: what a
//! runtime that rebuilds its device (a new configuration, a test per case) relies on.
//! Every backend runs [`devices_one_after_another`].

use capture_core::{Arg, Builtin, Builtins, Device, DeviceConfig, ServerError, StreamId};

const S: StreamId = StreamId::new(0);

/// Builds `rounds` devices on clones of `backend`, one after another (each dropped
/// before the next), then two side by side; each captures, replays and reads an
/// `add_scalar`. Returns each device's result (3.0 when right).
///
/// # Errors
///
/// The first failure of any device.
pub fn devices_one_after_another<B: Builtins + Clone>(
    backend: &B,
    rounds: usize,
) -> Result<Vec<f32>, ServerError> {
    let config = || DeviceConfig::new().streams(2);
    let mut results = Vec::new();
    for _ in 0..rounds {
        let dev = Device::new(backend.clone(), config()?)?;
        results.push(add_three(&dev)?);
    }
    let a = Device::new(backend.clone(), config()?)?;
    let b = Device::new(backend.clone(), config()?)?;
    results.push(add_three(&a)?);
    results.push(add_three(&b)?);
    results.push(add_three(&a)?);
    Ok(results)
}

fn add_three<B: Builtins>(dev: &Device<B>) -> Result<f32, ServerError> {
    let add = dev.builtin(Builtin::AddScalar);
    let x = dev.alloc(S, 16)?;
    let y = dev.alloc(S, 16)?;
    dev.write(S, &x, 0, vec![0u8; 16])?;
    let g = dev.capture(S, |d| {
        d.launch(
            S,
            &add,
            [1, 1, 1],
            &[Arg::read(&x), Arg::write(&y)],
            &Builtin::AddScalar.info(4, 3.0),
        )
    })?;
    dev.write(S, &x, 0, vec![0u8; 16])?;
    dev.replay(S, &g, 1)?;
    let out = dev.read(S, &y)?;
    dev.drop_graph(g)?;
    Ok(f32::from_le_bytes([out[0], out[1], out[2], out[3]]))
}
