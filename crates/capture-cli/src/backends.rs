//! The backends `--backend` names, and the one place the program opens them: a command
//! says what it runs on an opened backend ([`OnBackend`]) and [`run_on`] opens the
//! backend named, prints its device line, and hands it over, or says why it could not
//! (a build without the backend, a driver that cannot open). A new backend is a variant
//! here and an arm of [`run_on`]; no command changes.

use std::fmt;
use std::process::ExitCode;

use capture_decode::DecodeBackend;
use capture_graphs::Builtins;

use crate::args::UsageError;
use crate::exit::USAGE_EXIT;

/// The backends `--backend` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BackendName {
    /// The deterministic mock backend.
    Mock,
    /// The Vulkan backend.
    Vulkan,
    /// The CUDA backend.
    Cuda,
}

impl BackendName {
    /// The name as `--backend` takes it.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            BackendName::Mock => "mock",
            BackendName::Vulkan => "vulkan",
            BackendName::Cuda => "cuda",
        }
    }
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The backend `--backend` names.
pub(crate) fn backend_name(v: &str) -> Result<BackendName, UsageError> {
    match v {
        "mock" => Ok(BackendName::Mock),
        "vulkan" => Ok(BackendName::Vulkan),
        "cuda" => Ok(BackendName::Cuda),
        _ => Err(UsageError(format!(
            "unknown backend {v:?} for --backend (mock, vulkan or cuda)"
        ))),
    }
}

/// Refuses `--device` for a backend that opens no device by name (all but Vulkan).
pub(crate) fn device_for(backend: BackendName, device: Option<&str>) -> Result<(), UsageError> {
    match (backend, device) {
        (BackendName::Vulkan, _) | (_, None) => Ok(()),
        (other, Some(_)) => Err(UsageError(format!(
            "--device is for --backend vulkan, not {other}"
        ))),
    }
}

/// What a command runs on the backend its `--backend` names.
#[cfg_attr(not(all(feature = "vulkan", feature = "cuda")), allow(dead_code))]
pub(crate) trait OnBackend {
    /// The command, as `capture COMMAND` names it.
    const COMMAND: &'static str;
    /// Whether the device line names the memory the backend chose (Vulkan).
    const MEMORY_IN_DEVICE_LINE: bool;
    /// Whether a CUDA that cannot open is `SKIP:` and success (unless
    /// `CAPTURE_REQUIRE_CUDA=1`), as the other CUDA paths do, rather than a failure.
    const SKIP_WITHOUT_CUDA: bool;

    /// Runs on an opened backend; `host_only` says its figures measure host cost only
    /// (the mock's).
    fn run<B: Builtins + DecodeBackend>(self, backend: B, host_only: bool) -> ExitCode;
}

/// Opens `backend` (on Vulkan the device `device` names, else `CAPTURE_VULKAN_DEVICE`,
/// else the best-ranked one; on CUDA device 0) and runs `command` on it.
#[cfg_attr(
    not(all(feature = "mock", feature = "vulkan", feature = "cuda")),
    allow(unused_variables)
)]
pub(crate) fn run_on<C: OnBackend>(
    backend: BackendName,
    device: Option<&str>,
    command: C,
) -> ExitCode {
    match backend {
        #[cfg(feature = "mock")]
        BackendName::Mock => command.run(capture_graphs::mock::MockBackend::new(), true),
        #[cfg(feature = "vulkan")]
        BackendName::Vulkan => {
            use capture_graphs::vulkan::{DeviceSelector, VulkanBackend, VulkanOptions};
            let mut options = VulkanOptions::from_env();
            if let Some(device) = device {
                options.device = Some(DeviceSelector::parse(device));
            }
            match VulkanBackend::new(options) {
                Ok(b) => {
                    let (major, minor, patch) = b.api_version();
                    let (name, kind) = (b.device_name(), b.device_kind());
                    if C::MEMORY_IN_DEVICE_LINE {
                        let (mode, choice) = (b.memory_mode(), b.memory_choice());
                        println!(
                            "device: {name} ({kind}, Vulkan {major}.{minor}.{patch}), \
                             {mode:?} memory: {choice}"
                        );
                    } else {
                        println!("device: {name} ({kind}, Vulkan {major}.{minor}.{patch})");
                    }
                    command.run(b, false)
                }
                Err(e) => not_opened::<C>(backend, &e),
            }
        }
        #[cfg(feature = "cuda")]
        BackendName::Cuda => match capture_graphs::cuda::CudaBackend::new(0) {
            Ok(b) => {
                let (major, minor) = b.compute_capability();
                println!(
                    "device: {} (compute {major}.{minor}), driver CUDA {}",
                    b.device_name(),
                    b.driver_version()
                );
                command.run(b, false)
            }
            Err(e) if !C::SKIP_WITHOUT_CUDA => not_opened::<C>(backend, &e),
            Err(e) if std::env::var("CAPTURE_REQUIRE_CUDA").is_ok_and(|v| v == "1") => {
                eprintln!(
                    "capture {} --backend cuda: CAPTURE_REQUIRE_CUDA=1 and {e}",
                    C::COMMAND
                );
                ExitCode::FAILURE
            }
            Err(e) => {
                println!("SKIP: capture {} --backend cuda: {e}", C::COMMAND);
                ExitCode::SUCCESS
            }
        },
        #[allow(unreachable_patterns)]
        _ => not_built::<C>(backend),
    }
}

/// A backend that would not open: why, and nothing run.
#[cfg(any(feature = "vulkan", feature = "cuda"))]
fn not_opened<C: OnBackend>(backend: BackendName, error: &dyn fmt::Display) -> ExitCode {
    eprintln!(
        "capture {} --backend {backend}: {error}. Nothing was run.",
        C::COMMAND
    );
    ExitCode::FAILURE
}

/// A backend this build was made without: says which feature brings it, runs nothing.
#[cfg_attr(
    all(feature = "mock", feature = "vulkan", feature = "cuda"),
    allow(dead_code)
)]
fn not_built<C: OnBackend>(backend: BackendName) -> ExitCode {
    let (feature, command) = (backend.as_str(), C::COMMAND);
    eprintln!(
        "capture {command}: this build has no {feature} backend; build with `--features \
         {feature}` (`cargo run --release -p capture-cli --features {feature} -- {command} \
         --backend {feature}`). Nothing was run."
    );
    ExitCode::from(USAGE_EXIT)
}
