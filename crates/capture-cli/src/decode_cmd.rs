//! `capture decode`: opens the backend named, runs [`crate::decode::run`],
//! prints its report and turns the checks into the exit status.

use std::process::ExitCode;

use crate::decode::{Check, DecodeBackend, render, render_ladder, run, run_ladder};
use capture_graphs::Chain;

use crate::cli::{self, BackendName, Decode, DecodeArgs};
use crate::exit::{finish, usage};
use crate::logging;

/// Parses the arguments after `decode` and runs it.
pub(crate) fn command(args: &[String]) -> ExitCode {
    match cli::parse_decode(args) {
        Ok(Decode::Help) => {
            println!("{}", cli::DECODE_HELP);
            ExitCode::SUCCESS
        }
        Ok(Decode::Run(args)) => {
            let session = match logging::start(args.log.as_deref(), args.timeline.as_deref()) {
                Ok(session) => session,
                Err(error) => return usage("decode", cli::DECODE_HELP, &error),
            };
            let code = match args.backend {
                BackendName::Mock => mock(&args),
                BackendName::Vulkan => vulkan(&args),
                BackendName::Cuda => cuda(&args),
            };
            finish("decode", session, code)
        }
        Err(error) => usage("decode", cli::DECODE_HELP, &error),
    }
}

/// Runs on an opened backend, prints the report, and fails when a check does.
#[cfg_attr(
    not(any(feature = "mock", feature = "vulkan", feature = "cuda")),
    allow(dead_code)
)]
fn decode<B: DecodeBackend>(backend: B, args: &DecodeArgs) -> ExitCode {
    if let Some(ladder) = &args.ladder {
        return match run_ladder(backend, ladder.clone()) {
            Ok(report) => {
                print!("{}", render_ladder(&report));
                verdict(report.checks())
            }
            Err(error) => {
                eprintln!(
                    "capture decode --backend {} --buckets: the runtime failed: {}",
                    args.backend,
                    Chain(&error)
                );
                ExitCode::FAILURE
            }
        };
    }
    match run(backend, args.options) {
        Ok(report) => {
            print!("{}", render(&report));
            verdict(report.checks())
        }
        Err(error) => {
            eprintln!(
                "capture decode --backend {}: the runtime failed: {}",
                args.backend,
                Chain(&error)
            );
            ExitCode::FAILURE
        }
    }
}

/// "all checks hold" and success, or each failed check on stderr and failure.
#[cfg_attr(
    not(any(feature = "mock", feature = "vulkan", feature = "cuda")),
    allow(dead_code)
)]
fn verdict(checks: Vec<Check>) -> ExitCode {
    let failed: Vec<_> = checks.into_iter().filter(|c| !c.passed).collect();
    if failed.is_empty() {
        println!("all checks hold");
        ExitCode::SUCCESS
    } else {
        for check in failed {
            eprintln!(
                "capture decode: check failed: {}: {}",
                check.name, check.detail
            );
        }
        ExitCode::FAILURE
    }
}

#[cfg(feature = "mock")]
fn mock(args: &DecodeArgs) -> ExitCode {
    decode(capture_graphs::mock::MockBackend::new(), args)
}

#[cfg(not(feature = "mock"))]
fn mock(args: &DecodeArgs) -> ExitCode {
    not_built(args, "mock")
}

#[cfg(feature = "vulkan")]
fn vulkan(args: &DecodeArgs) -> ExitCode {
    use capture_graphs::vulkan::{DeviceSelector, VulkanBackend, VulkanOptions};
    let mut options = VulkanOptions::from_env();
    if let Some(device) = &args.device {
        options.device = Some(DeviceSelector::parse(device));
    }
    match VulkanBackend::new(options) {
        Ok(backend) => {
            let (major, minor, patch) = backend.api_version();
            println!(
                "device: {} ({}, Vulkan {major}.{minor}.{patch})",
                backend.device_name(),
                backend.device_kind()
            );
            decode(backend, args)
        }
        Err(e) => {
            eprintln!("capture decode --backend vulkan: {e}. Nothing was run.");
            ExitCode::FAILURE
        }
    }
}

#[cfg(not(feature = "vulkan"))]
fn vulkan(args: &DecodeArgs) -> ExitCode {
    not_built(args, "vulkan")
}

/// CUDA device 0; without a driver or GPU, `SKIP:` and success, as the other CUDA
/// paths do, unless CUDA is required (`CAPTURE_REQUIRE_CUDA=1`, as the GPU bundle and
/// `cargo xtask test-gpu` set it): then a failure.
#[cfg(feature = "cuda")]
fn cuda(args: &DecodeArgs) -> ExitCode {
    match capture_graphs::cuda::CudaBackend::new(0) {
        Ok(backend) => {
            let (major, minor) = backend.compute_capability();
            println!(
                "device: {} (compute {major}.{minor}), driver CUDA {}",
                backend.device_name(),
                backend.driver_version()
            );
            decode(backend, args)
        }
        Err(e) if std::env::var("CAPTURE_REQUIRE_CUDA").is_ok_and(|v| v == "1") => {
            eprintln!("capture decode --backend cuda: CAPTURE_REQUIRE_CUDA=1 and {e}");
            ExitCode::FAILURE
        }
        Err(e) => {
            println!("SKIP: capture decode --backend cuda: {e}");
            ExitCode::SUCCESS
        }
    }
}

#[cfg(not(feature = "cuda"))]
fn cuda(args: &DecodeArgs) -> ExitCode {
    not_built(args, "cuda")
}

/// A backend this build was made without: says which feature brings it, runs nothing.
#[cfg(any(not(feature = "mock"), not(feature = "vulkan"), not(feature = "cuda")))]
fn not_built(args: &DecodeArgs, feature: &str) -> ExitCode {
    eprintln!(
        "capture decode: this build has no {} backend; build with `--features {feature}` \
         (`cargo run --release -p capture-cli --features {feature} -- decode --backend \
         {feature}`). Nothing was run.",
        args.backend
    );
    ExitCode::from(crate::exit::USAGE_EXIT)
}
