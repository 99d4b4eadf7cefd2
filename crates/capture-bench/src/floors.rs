//! `capture bench`'s backends: which this build has, how each is opened and described,
//! and the hand-written floor each measures beside the library ([`crate::floor`]:
//! Vulkan, the chain recorded by hand with ash on the backend's device; CUDA, a bare
//! `cuLaunchKernel` loop).

use capture_graphs::Builtins;

use crate::bench::{self, BenchOptions, FloorMaker};
use crate::bench_table::{BackendRun, Problem};
#[cfg(feature = "any-backend")]
use crate::{decoder_update_row, fork_row, until_row, update_row};

/// A backend `capture bench` measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BenchBackend {
    /// The mock, every call on the caller's thread.
    Mock,
    /// The mock with thread-affine streams.
    AffineMock,
    /// Vulkan.
    Vulkan,
    /// CUDA.
    Cuda,
}

impl BenchBackend {
    /// Every backend, in the order `--backend`'s error lists them.
    const ALL: [BenchBackend; 4] = [Self::Mock, Self::AffineMock, Self::Vulkan, Self::Cuda];

    /// The backend `--backend` names, or why the name is none.
    pub(crate) fn named(name: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|b| b.as_str() == name)
            .ok_or_else(|| {
                format!(
                    "unknown backend {name:?} for --backend (mock, affine-mock, vulkan or cuda)"
                )
            })
    }

    /// Whether `--device` names the device it opens (Vulkan's).
    pub(crate) const fn takes_device(self) -> bool {
        matches!(self, Self::Vulkan)
    }

    /// The name as `--backend` takes it.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            Self::Mock => "mock",
            Self::AffineMock => "affine-mock",
            Self::Vulkan => "vulkan",
            Self::Cuda => "cuda",
        }
    }
}

/// The backends this build has, in the order a default run measures them.
pub(crate) fn built() -> Vec<BenchBackend> {
    let mut all = Vec::new();
    if cfg!(feature = "mock") {
        all.extend([BenchBackend::Mock, BenchBackend::AffineMock]);
    }
    if cfg!(feature = "vulkan") {
        all.push(BenchBackend::Vulkan);
    }
    if cfg!(feature = "cuda") {
        all.push(BenchBackend::Cuda);
    }
    all
}

/// A backend that could not be measured: skipped when it was not named, else failed.
fn missing(name: &'static str, named: bool, why: String) -> BackendRun {
    BackendRun {
        problem: Some(if named {
            Problem::Failed(why)
        } else {
            Problem::Skipped(why)
        }),
        ..BackendRun::new(name, "not opened".into(), false)
    }
}

/// Every row of `options` on `backend`, stopping at the first that fails.
#[cfg_attr(not(feature = "any-backend"), allow(dead_code))]
fn rows<B: Builtins + Clone>(
    backend: &B,
    mut run: BackendRun,
    floor: Option<FloorMaker<'_>>,
    options: &BenchOptions,
) -> BackendRun {
    for row in &options.rows {
        let name = run.name;
        let mut progress = |line: &str| eprintln!("bench: {name} {line}");
        match bench::bench_row(backend.clone(), *row, options, floor, &mut progress) {
            Ok(report) => run.rows.push(report),
            Err(e) => {
                run.problem = Some(Problem::Failed(e.0));
                break;
            }
        }
    }
    run
}

/// The rows of whole steps `options` asks for after the chain rows (decode, fork, until,
/// update and the decoder's update), on `backend`: on every backend but the
/// thread-affine mock.
#[cfg(feature = "any-backend")]
fn step_rows<B: capture_decode::DecodeBackend + Builtins + Clone>(
    backend: B,
    mut measured: BackendRun,
    options: &BenchOptions,
) -> BackendRun {
    if options.decode {
        measured.decode = Some(bench::decode_row(backend.clone(), options.rounds));
    }
    if options.fork {
        measured.fork = Some(fork_row::fork_row(backend.clone(), options.rounds));
    }
    if options.until {
        measured.until = Some(until_row::until_row(backend.clone(), options.rounds));
    }
    if options.update {
        measured.update = Some(update_row::update_row(backend.clone(), options.rounds));
        measured.decoder_update = Some(decoder_update_row::decoder_update_row(
            backend,
            options.rounds,
        ));
    }
    measured
}

/// A floor's pass as the benchmark takes it, its error as text.
#[cfg(any(feature = "vulkan", feature = "cuda"))]
fn timed<P: Into<bench::Pass>, E: std::fmt::Display>(
    pass: Result<P, E>,
) -> Result<bench::Pass, String> {
    pass.map(Into::into).map_err(|e| e.to_string())
}

/// Measures `backend` (named on the command line, or one of [`built`]).
pub(crate) fn bench(
    backend: BenchBackend,
    named: bool,
    options: &BenchOptions,
    device: Option<&str>,
) -> BackendRun {
    match backend {
        BenchBackend::Mock | BenchBackend::AffineMock => mock(backend, named, options),
        BenchBackend::Vulkan => vulkan(named, options, device),
        BenchBackend::Cuda => cuda(named, options),
    }
}

#[cfg(feature = "mock")]
fn mock(backend: BenchBackend, _named: bool, options: &BenchOptions) -> BackendRun {
    let run = |device: &str| BackendRun::new(backend.as_str(), device.into(), true);
    if backend == BenchBackend::AffineMock {
        let device = "mock, thread-affine streams (captures open and close on each stream's \
                      worker; every other call on the caller's thread)";
        rows(
            &capture_graphs::mock::AffineMock::new(),
            run(device),
            None,
            options,
        )
    } else {
        let device = "mock, relaxed mode (every call on the caller's thread)";
        let backend = capture_graphs::mock::MockBackend::new();
        let measured = rows(&backend, run(device), None, options);
        step_rows(backend, measured, options)
    }
}

#[cfg(not(feature = "mock"))]
fn mock(backend: BenchBackend, named: bool, _options: &BenchOptions) -> BackendRun {
    missing(
        backend.as_str(),
        named,
        "this build has no mock backend (built without the `mock` feature)".into(),
    )
}

#[cfg(feature = "vulkan")]
fn vulkan(named: bool, options: &BenchOptions, device: Option<&str>) -> BackendRun {
    use capture_graphs::vulkan::{DeviceSelector, VulkanBackend, VulkanOptions};

    let mut vulkan = VulkanOptions::from_env();
    if let Some(device) = device {
        vulkan.device = Some(DeviceSelector::parse(device));
    }
    let backend = match VulkanBackend::new(vulkan.clone()) {
        Ok(b) => b,
        Err(e) => return missing("vulkan", named, e.to_string()),
    };
    let (major, minor, patch) = backend.api_version();
    let mut settings = vec![("submit_every", vulkan.submit_every.to_string())];
    if backend.device_name().contains("llvmpipe") {
        let threads = std::env::var("LP_NUM_THREADS").unwrap_or_else(|_| "unset".into());
        settings.push(("LP_NUM_THREADS", threads));
    }
    let run = BackendRun {
        settings,
        ..BackendRun::new(
            "vulkan",
            format!(
                "{} ({}, Vulkan {major}.{minor}.{patch}), {:?} memory: {}",
                backend.device_name(),
                backend.device_kind(),
                backend.memory_mode(),
                backend.memory_choice()
            ),
            false,
        )
    };
    let floor_backend = backend.clone();
    let make = move |row: &bench::Row| -> Result<Box<dyn bench::Floor>, String> {
        crate::floor::vulkan::Floor::new(&floor_backend, row.elements, row.kernels)
            .map(|f| Box::new(VulkanFloor(f)) as Box<dyn bench::Floor>)
            .map_err(|e| e.to_string())
    };
    let measured = rows(&backend, run, Some(&make), options);
    step_rows(backend, measured, options)
}

/// The Vulkan floor, as the benchmark drives it.
#[cfg(feature = "vulkan")]
struct VulkanFloor(crate::floor::vulkan::Floor);

#[cfg(any(feature = "vulkan", feature = "cuda"))]
impl From<crate::floor::FloorPass> for bench::Pass {
    fn from(p: crate::floor::FloorPass) -> Self {
        Self {
            enqueue: p.enqueue,
            total: p.total,
        }
    }
}

#[cfg(feature = "vulkan")]
impl bench::Floor for VulkanFloor {
    fn reset(&mut self, values: &[f32]) -> Result<(), String> {
        self.0.reset(values).map_err(|e| e.to_string())
    }
    /// The submission cadences: the whole pass in one submission, then every 256, 64
    /// and 16 dispatches where that is shorter.
    fn eager_variants(&self) -> Vec<String> {
        let whole = self.0.kernels();
        self.0
            .cadences()
            .into_iter()
            .map(|every| {
                if every >= whole {
                    "whole pass".to_string()
                } else {
                    format!("every {every}")
                }
            })
            .collect()
    }
    fn choose_eager(&mut self, variant: usize) -> Result<(), String> {
        let every = self.0.cadences()[variant];
        self.0.set_submit_every(every).map_err(|e| e.to_string())
    }
    fn eager_pass(&mut self) -> Result<bench::Pass, String> {
        timed(self.0.eager_pass())
    }
    fn replay_pass(&mut self) -> Option<Result<bench::Pass, String>> {
        Some(timed(self.0.replay_pass()))
    }
    fn output(&self) -> &[f32] {
        self.0.output()
    }
}

#[cfg(not(feature = "vulkan"))]
fn vulkan(named: bool, _options: &BenchOptions, _device: Option<&str>) -> BackendRun {
    missing(
        "vulkan",
        named,
        "this build has no vulkan backend; build with `--features vulkan`".into(),
    )
}

#[cfg(feature = "cuda")]
fn cuda(named: bool, options: &BenchOptions) -> BackendRun {
    use capture_graphs::cuda::CudaBackend;

    let backend = match CudaBackend::new(0) {
        Ok(b) => b,
        Err(e) => return missing("cuda", named, e.to_string()),
    };
    let (major, minor) = backend.compute_capability();
    let run = BackendRun::new(
        "cuda",
        format!(
            "{} (compute {major}.{minor}), driver CUDA {}",
            backend.device_name(),
            backend.driver_version()
        ),
        false,
    );
    let make = |row: &bench::Row| -> Result<Box<dyn bench::Floor>, String> {
        crate::floor::cuda::Floor::new(0, row.elements, row.kernels)
            .map(|f| Box::new(CudaFloor(f)) as Box<dyn bench::Floor>)
            .map_err(|e| e.to_string())
    };
    let measured = rows(&backend, run, Some(&make), options);
    step_rows(backend, measured, options)
}

/// The CUDA floor (eager only: replay is compared with PyTorch's CUDA graph instead).
#[cfg(feature = "cuda")]
struct CudaFloor(crate::floor::cuda::Floor);

#[cfg(feature = "cuda")]
impl bench::Floor for CudaFloor {
    fn reset(&mut self, values: &[f32]) -> Result<(), String> {
        self.0.reset(values).map_err(|e| e.to_string())
    }
    fn eager_pass(&mut self) -> Result<bench::Pass, String> {
        timed(self.0.eager_pass())
    }
    fn replay_pass(&mut self) -> Option<Result<bench::Pass, String>> {
        None
    }
    fn output(&self) -> &[f32] {
        self.0.output()
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda(named: bool, _options: &BenchOptions) -> BackendRun {
    missing(
        "cuda",
        named,
        "this build has no cuda backend; build with `--features cuda`".into(),
    )
}
