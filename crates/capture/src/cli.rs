//! The command line: the program's and each command's help, and the parsing of
//! `capture demo`'s options into [`DemoArgs`] or a [`UsageError`].

use std::fmt;

/// The program's help: its commands.
pub(crate) const USAGE: &str = "usage: capture <command> [options]

commands:
  demo    a decode-shaped kernel chain, run eagerly and as a replayed graph

options:
  -h, --help   this help

Run `capture <command> --help` for a command's options.";

/// `capture demo`'s help: what it runs, its options and its exit statuses.
pub(crate) const DEMO_HELP: &str =
    "usage: capture demo [--backend mock|vulkan|cuda] [--device D] [--kernels N] [--replays R]

Runs a decode-shaped chain of N small dependent kernels (add_scalar, mul_scalar, axpy,
row_bias and copy over ping-pong f32 buffers of 1024 elements) eagerly for R steps, then
captures it once as a graph and replays that graph for R steps. Checks that both give
bit-identical output (and that it equals the kernels' host model), then prints the cost
per kernel of each mode, their ratio, the capture time and the graph's ledger.

options:
  --backend NAME   mock (default), vulkan or cuda (builds with `--features vulkan`,
                   `--features cuda`)
  --device D       with --backend vulkan: the device to open, an index in the driver's
                   enumeration or a piece of its name (default: CAPTURE_VULKAN_DEVICE,
                   else the best-ranked device: discrete, integrated, virtual, CPU)
  --kernels N      kernels in the chain, 2 to 100000 (default 512; a decode step is
                   500 or more, fewer is allowed for quick checks)
  --replays R      timed steps per mode, 1 to 100000 (default 20), each mode after one
                   untimed warmup step
  -h, --help       this help

Options also take the form --name=value.

exit status: 0 when the outputs match; 1 when they differ or the runtime fails;
2 for a usage error or a backend this build was made without.";

/// Kernels in the chain when `--kernels` is not given.
pub(crate) const DEFAULT_KERNELS: usize = 512;

/// Timed steps per mode when `--replays` is not given.
pub(crate) const DEFAULT_REPLAYS: u32 = 20;

const KERNELS: (u64, u64) = (2, 100_000);
const REPLAYS: (u64, u64) = (1, 100_000);

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

/// `capture demo`'s options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct DemoArgs {
    /// The backend to run on.
    pub(crate) backend: BackendName,
    /// The Vulkan device to open (an index or a piece of its name), if named.
    pub(crate) device: Option<String>,
    /// Kernels in the chain.
    pub(crate) kernels: usize,
    /// Timed steps per mode.
    pub(crate) replays: u32,
}

impl Default for DemoArgs {
    fn default() -> Self {
        Self {
            backend: BackendName::Mock,
            device: None,
            kernels: DEFAULT_KERNELS,
            replays: DEFAULT_REPLAYS,
        }
    }
}

/// What `capture demo`'s arguments ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Demo {
    /// Print the help.
    Help,
    /// Run the demo.
    Run(DemoArgs),
}

/// Arguments that cannot be run: what is wrong, naming the option or value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses `capture demo`'s arguments (those after `demo`).
pub(crate) fn parse_demo(args: &[String]) -> Result<Demo, UsageError> {
    let mut parsed = DemoArgs::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        };
        let mut value = |name: &str| {
            inline
                .clone()
                .or_else(|| rest.next().cloned())
                .ok_or_else(|| UsageError(format!("{name} needs a value")))
        };
        match name {
            "-h" | "--help" => return Ok(Demo::Help),
            "--backend" => {
                let v = value(name)?;
                parsed.backend = match v.as_str() {
                    "mock" => BackendName::Mock,
                    "vulkan" => BackendName::Vulkan,
                    "cuda" => BackendName::Cuda,
                    _ => {
                        return Err(UsageError(format!(
                            "unknown backend {v:?} for --backend (mock, vulkan or cuda)"
                        )));
                    }
                };
            }
            "--device" => {
                let v = value(name)?;
                if v.trim().is_empty() {
                    return Err(UsageError(format!("invalid value {v:?} for --device")));
                }
                parsed.device = Some(v);
            }
            "--kernels" => {
                let v = value(name)?;
                let n = number(name, &v, KERNELS, "kernels in the chain")?;
                parsed.kernels = usize::try_from(n).map_err(|_| out_of_range(name, &v))?;
            }
            "--replays" => {
                let v = value(name)?;
                let n = number(name, &v, REPLAYS, "timed steps per mode")?;
                parsed.replays = u32::try_from(n).map_err(|_| out_of_range(name, &v))?;
            }
            other => return Err(UsageError(format!("unknown option {other:?}"))),
        }
    }
    if parsed.device.is_some() && parsed.backend != BackendName::Vulkan {
        return Err(UsageError(format!(
            "--device is for --backend vulkan, not {}",
            parsed.backend
        )));
    }
    Ok(Demo::Run(parsed))
}

/// `value` of option `name` as a whole number within `range` (inclusive).
fn number(name: &str, value: &str, range: (u64, u64), what: &str) -> Result<u64, UsageError> {
    let (min, max) = range;
    let n: u64 = value.trim().parse().map_err(|_| {
        UsageError(format!(
            "invalid value {value:?} for {name}: expected a whole number of {what}, \
             {min} to {max}"
        ))
    })?;
    if !(min..=max).contains(&n) {
        return Err(UsageError(format!(
            "invalid value {value:?} for {name}: {what} must be {min} to {max}"
        )));
    }
    Ok(n)
}

fn out_of_range(name: &str, value: &str) -> UsageError {
    UsageError(format!(
        "invalid value {value:?} for {name}: too large for this machine"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Demo, UsageError> {
        let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
        parse_demo(&args)
    }

    #[test]
    fn defaults_are_the_mock_512_kernels_and_20_replays() {
        assert_eq!(
            parse(&[]),
            Ok(Demo::Run(DemoArgs {
                backend: BackendName::Mock,
                device: None,
                kernels: 512,
                replays: 20,
            }))
        );
    }

    #[test]
    fn options_take_a_separate_or_inline_value() {
        assert_eq!(
            parse(&["--backend", "cuda", "--kernels=64", "--replays", "3"]),
            Ok(Demo::Run(DemoArgs {
                backend: BackendName::Cuda,
                device: None,
                kernels: 64,
                replays: 3,
            }))
        );
    }

    #[test]
    fn device_names_a_vulkan_device() {
        assert_eq!(
            parse(&["--backend", "vulkan", "--device=llvmpipe"]),
            Ok(Demo::Run(DemoArgs {
                backend: BackendName::Vulkan,
                device: Some("llvmpipe".into()),
                ..DemoArgs::default()
            }))
        );
        let error = parse(&["--device", "0"]).expect_err("refused");
        assert!(
            error
                .0
                .contains("--device is for --backend vulkan, not mock"),
            "{error}"
        );
    }

    #[test]
    fn help_wins_over_other_options() {
        assert_eq!(parse(&["--kernels", "64", "-h"]), Ok(Demo::Help));
        assert_eq!(parse(&["--help"]), Ok(Demo::Help));
    }

    #[test]
    fn bad_values_are_named() {
        for (args, named) in [
            (&["--kernels", "0"][..], "\"0\""),
            (&["--kernels", "1"], "\"1\""),
            (&["--kernels", "abc"], "\"abc\""),
            (&["--kernels", "-5"], "\"-5\""),
            (&["--kernels", "100001"], "\"100001\""),
            (&["--replays", "0"], "\"0\""),
            (&["--replays=x"], "\"x\""),
            (&["--backend", "metal"], "\"metal\""),
            (&["--frobnicate"], "\"--frobnicate\""),
            (&["--kernels"], "--kernels needs a value"),
            (&["--backend", "vulkan", "--device", ""], "--device"),
        ] {
            let error = parse(args).expect_err("refused");
            assert!(error.0.contains(named), "{args:?}: {error}");
        }
    }
}
