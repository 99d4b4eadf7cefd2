//! What every scenario drives: [`Harness`], a device over a backend wrapped in
//! [`Faulty`] with the builtins registered, the streams and sizes scenarios share, and the
//! host-side helpers that build and check their float buffers.

use std::collections::HashMap;
use std::sync::Arc;

use capture_core::{
    Arg, Buffer, Builtin, Builtins, Chain, Device, DeviceConfig, KernelHandle, ServerError,
    StreamId,
};
use capture_mock::{FaultPlan, Faulty};

/// Elements of the buffers most scenarios use.
pub const N: u64 = 16;

/// The logical streams scenarios use: S0 and S2 share pooled stream 0; S1 is on pooled
/// stream 1.
pub const S0: StreamId = StreamId::new(0);
/// See [`S0`].
pub const S1: StreamId = StreamId::new(1);
/// See [`S0`].
pub const S2: StreamId = StreamId::new(2);

/// What a scenario drives: a device over the backend wrapped in [`Faulty`], the fault
/// plan, and the builtin kernels, registered in [`Builtin::ALL`] order.
pub struct Harness<B: Builtins> {
    /// The device.
    pub dev: Device<Faulty<B>>,
    /// The faults to inject, and the calls counted.
    pub plan: Arc<FaultPlan>,
    kernels: HashMap<Builtin, KernelHandle>,
}

impl<B: Builtins> Harness<B> {
    /// A harness over `backend` with two pooled streams and the trace on.
    ///
    /// # Errors
    ///
    /// The backend's refusal to create its streams.
    pub fn new(backend: B) -> Result<Self, ServerError> {
        Self::with_config(backend, DeviceConfig::new())
    }

    /// A harness over `backend` with `config` (two pooled streams and the trace on are
    /// forced).
    ///
    /// # Errors
    ///
    /// The backend's refusal to create its streams.
    pub fn with_config(backend: B, config: DeviceConfig) -> Result<Self, ServerError> {
        let faulty = Faulty::new(backend);
        let plan = Arc::clone(faulty.plan());
        let dev = Device::new(faulty, config.streams(2)?.trace(true))?;
        let kernels = Builtin::ALL
            .iter()
            .map(|&b| (b, dev.kernel(B::builtin(b))))
            .collect();
        Ok(Self { dev, plan, kernels })
    }

    /// The handle of a builtin kernel.
    pub fn kernel(&self, kernel: Builtin) -> &KernelHandle {
        &self.kernels[&kernel]
    }

    /// Launches `kernel` over `args` on `stream`, over `n` elements with scalar `a`.
    ///
    /// # Errors
    ///
    /// The device's refusal.
    pub fn launch(
        &self,
        stream: StreamId,
        kernel: Builtin,
        args: &[Arg],
        n: u64,
        a: f32,
    ) -> Result<(), ServerError> {
        self.dev.launch(
            stream,
            self.kernel(kernel),
            [1, 1, 1],
            args,
            &kernel.info(n, a),
        )
    }

    /// `y = x + a` over [`N`] elements.
    ///
    /// # Errors
    ///
    /// The device's refusal.
    pub fn add(&self, stream: StreamId, x: &Buffer, y: &Buffer, a: f32) -> Result<(), ServerError> {
        self.launch(
            stream,
            Builtin::AddScalar,
            &[Arg::read(x), Arg::write(y)],
            N,
            a,
        )
    }

    /// `y = x` over [`N`] elements.
    ///
    /// # Errors
    ///
    /// The device's refusal.
    pub fn copy(&self, stream: StreamId, x: &Buffer, y: &Buffer) -> Result<(), ServerError> {
        self.launch(
            stream,
            Builtin::Copy,
            &[Arg::read(x), Arg::write(y)],
            N,
            0.0,
        )
    }

    /// A buffer on `stream` holding `values`, written and settled.
    ///
    /// # Errors
    ///
    /// The device's refusal.
    pub fn buffer(&self, stream: StreamId, values: &[f32]) -> Result<Buffer, ServerError> {
        let b = self.dev.alloc(stream, values.len() as u64 * 4)?;
        self.dev.write(stream, &b, 0, bytes(values))?;
        Ok(b)
    }

    /// Writes `values` into `buffer`.
    ///
    /// # Errors
    ///
    /// The device's refusal.
    pub fn write(
        &self,
        stream: StreamId,
        buffer: &Buffer,
        values: &[f32],
    ) -> Result<(), ServerError> {
        self.dev.write(stream, buffer, 0, bytes(values))
    }

    /// The values of `buffer`, read on `stream`.
    ///
    /// # Errors
    ///
    /// The device's refusal ([`ServerError::Unwritten`] for a claimed buffer).
    pub fn floats(&self, stream: StreamId, buffer: &Buffer) -> Result<Vec<f32>, ServerError> {
        Ok(floats(&self.dev.read(stream, buffer)?))
    }

    /// Panics unless `buffer` holds `expected`.
    #[track_caller]
    pub fn expect(&self, stream: StreamId, buffer: &Buffer, expected: &[f32]) {
        match self.floats(stream, buffer) {
            Ok(got) => assert_eq!(got, expected, "bytes of {}", buffer.id()),
            Err(e) => panic!("reading {} failed: {}", buffer.id(), Chain(&e)),
        }
    }

    /// Panics unless reading `buffer` fails with an error whose text has `needle`.
    #[track_caller]
    pub fn expect_unreadable(&self, stream: StreamId, buffer: &Buffer, needle: &str) {
        match self.floats(stream, buffer) {
            Ok(got) => panic!(
                "{} read as {got:?}; expected a refusal naming {needle:?}",
                buffer.id()
            ),
            Err(e) => assert_contains(&e, needle),
        }
    }
}

/// Panics unless `error` (with its sources) mentions `needle`.
#[track_caller]
pub fn assert_contains(error: &ServerError, needle: &str) {
    let text = Chain(error).to_string();
    assert!(
        text.contains(needle),
        "error {text:?} does not mention {needle:?}"
    );
}

/// Panics unless `result` is a refusal that mentions `needle`; `what` names the call
/// refused.
#[track_caller]
pub fn assert_refused<T>(result: Result<T, ServerError>, what: &str, needle: &str) {
    match result {
        Ok(_) => panic!("{what} succeeded; expected a refusal naming {needle:?}"),
        Err(e) => assert_contains(&e, needle),
    }
}

/// [`N`] copies of `v`.
pub fn splat(v: f32) -> Vec<f32> {
    vec![v; N as usize]
}

/// `[start, start + 1, ...]`, [`N`] values.
pub fn ramp(start: f32) -> Vec<f32> {
    (0..N).map(|i| start + i as f32).collect()
}

/// Little-endian bytes of `values`.
pub fn bytes(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// The `f32` values of `bytes`.
pub fn floats(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes")))
        .collect()
}

/// `values` with `f` applied to each.
pub fn map(values: &[f32], f: impl Fn(f32) -> f32) -> Vec<f32> {
    values.iter().map(|&v| f(v)).collect()
}
