//! `capture decode`: its help, the parsing of its options into [`DecodeArgs`], and its
//! run: opens the backend named, runs [`capture_decode::run`] (or, with `--buckets`,
//! [`capture_decode::run_ladder`]), prints its report and turns the checks into the exit
//! status.

use std::path::PathBuf;
use std::process::ExitCode;

use capture_graphs::Chain;

use crate::args::{Options, UsageError, device_name, log, number};
use crate::args::{out_of_range, path};
use crate::backends::{BackendName, OnBackend, backend_name, device_for, run_on};
use crate::exit::{finish, usage};
use crate::logging;
use capture_decode::{Check, DecodeBackend, Mode};

/// `capture decode`'s help: what it runs, its options and its exit statuses.
pub(crate) const DECODE_HELP: &str =
    "usage: capture decode [--backend mock|vulkan|cuda] [--device D] [--tokens T] [--dim D]
       [--layers L] [--heads H] [--vocab V] [--context C] [--seed S]
       [--buckets B1,B2,... [--steps N] [--replays R] [--block-rows K]]
       [--until-eos [--eos ID] [--every K]] [--log LEVEL] [--timeline PATH]

A llama-shaped decoder with seeded random weights (no download): prefills a short
prompt eagerly, generates T tokens eagerly, then captures the decode step once and
generates them again by replaying it, the position and token advancing on the device.
Then the host chooses the position: a slotted step (its position and attention grid
graph slots) captured once and updated per token, against the same step captured per
token. Prints tokens/s and µs per token for each mode, their ratio, update + replay
against re-capture + replay, kernels per step, the capture time, the graph's ledger
and the generated ids. Checks that every mode gives the same ids and bit-identical
logits at every step, and that the logits match a plain-Rust reference of the model
within the stated tolerance.

With --buckets, a batch of sequences steps at once over a paged KV cache (blocks of
K rows, a block table per sequence in device memory), its step captured once per
bucket into one graph pool; each step runs the smallest bucket that holds the live
batch, padding the rest. Over N steps (up the buckets and back down, sequences
starting and ending, tables changing) it checks the replayed logits bit for bit
against eager and against a ladder of separate pools, that the shared pool holds at
most 1.05x its largest bucket captured alone (captured ascending and descending),
and that R further replays leave the memory report unchanged; it prints tokens/s per
bucket eager and replayed, and the ladder's memory shared against separate pools.

With --until-eos, the step ends with a kernel that sets a stop flag on the end token
(or when the context is full) and the sequence is decoded until it stops, at most T
tokens: eagerly with the flag read on the host after every token, by one replay per
token with the same check, by replays of K with a check every K (past the end token,
the overshoot thrown away), and by one loop replay the device ends (rule 30). Prints
tokens/s for each; checks every mode's ids against eager, the loop's iteration count,
and the logits against the host reference.

options:
  --backend NAME   mock (default), vulkan or cuda (builds with `--features vulkan`,
                   `--features cuda`)
  --device D       with --backend vulkan: the device to open (index or piece of its name)
  --tokens T       tokens generated per mode, 1 to 65536 (default 64)
  --dim D          model width, 2 to 8192 (default 256)
  --layers L       transformer layers, 1 to 256 (default 4)
  --heads H        attention heads, 1 to 256, dividing dim into even widths (default 4)
  --vocab V        vocabulary size, 2 to 1048576 (default 512)
  --context C      KV-cache rows, 2 to 65536 (default 256); the 4-token prompt and T
                   tokens need T + 3 rows
  --seed S         the weights' and prompt's seed (default 14)
  --buckets LIST   batch-size buckets, ascending (e.g. 1,2,4,8; 1 to 64 slots): run
                   the batched ladder (model default: dim 64, 1 layer, 2 heads,
                   vocab 128, context 64)
  --steps N        with --buckets: decode steps, 32 to 4096 (default 40)
  --replays R      with --buckets: further replays the memory must not move over,
                   0 to 1000000 (default 1000)
  --block-rows K   with --buckets: rows per KV-cache block (default 8)
  --until-eos      decode until the end token, the loop ended on the device
  --eos ID         with --until-eos: the end token (default: the one the eager run
                   emits at three quarters of T)
  --every K        with --until-eos: replays per host check in the replay x K mode,
                   1 to 65536 (default 8)
  --log LEVEL      log the core's spans and events to stderr, as `capture demo --log`
  --timeline PATH  write the run's timeline to PATH as Chrome trace-event JSON
  -h, --help       this help

Options also take the form --name=value.

exit status: 0 when every check holds (or CUDA has no GPU: SKIP, unless
CAPTURE_REQUIRE_CUDA=1); 1 when a check fails or the runtime fails; 2 for a usage
error or a backend this build was made without.";

/// `capture decode`'s options.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct DecodeArgs {
    /// Where it runs.
    pub(crate) backend: BackendName,
    /// The Vulkan device to open.
    pub(crate) device: Option<String>,
    /// What it runs.
    pub(crate) options: capture_decode::DecodeOptions,
    /// With `--buckets`: the batched ladder instead.
    pub(crate) ladder: Option<capture_decode::LadderOptions>,
    /// With `--until-eos`: decode until the end token instead (rule 30).
    pub(crate) until: Option<capture_decode::UntilOptions>,
    /// `--log`'s directives.
    pub(crate) log: Option<String>,
    /// Where `--timeline` writes the timeline.
    pub(crate) timeline: Option<PathBuf>,
}

/// What `capture decode`'s arguments ask for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Decode {
    /// Print the help.
    Help,
    /// Run the decoder.
    Run(Box<DecodeArgs>),
}

/// Parses `capture decode`'s arguments (those after `decode`).
pub(crate) fn parse_decode(args: &[String]) -> Result<Decode, UsageError> {
    let mut parsed = DecodeArgs {
        backend: BackendName::Mock,
        device: None,
        options: capture_decode::DecodeOptions::default(),
        ladder: None,
        until: None,
        log: None,
        timeline: None,
    };
    let (mut until, mut eos, mut every) = (false, None, None);
    let (mut buckets, mut steps, mut replays, mut block_rows) = (None, None, None, None);
    let (mut size_given, mut tokens) = (false, false);
    let mut options = Options(args.iter());
    while let Some((name, inline)) = options.next_option() {
        match name {
            "--log" => {
                parsed.log = Some(log(name, options.value(name, inline)?)?);
                continue;
            }
            "--timeline" => {
                parsed.timeline = Some(path(name, options.value(name, inline)?)?);
                continue;
            }
            _ => {}
        }
        let mut value = |name: &str| options.value(name, inline.clone());
        let o = &mut parsed.options;
        let mut sized = |name: &str, range: (u64, u64), what: &str| -> Result<u32, UsageError> {
            let v = value(name)?;
            let n = number(name, &v, range, what)?;
            u32::try_from(n).map_err(|_| out_of_range(name, &v))
        };
        match name {
            "-h" | "--help" => return Ok(Decode::Help),
            "--backend" => parsed.backend = backend_name(&value(name)?)?,
            "--device" => parsed.device = Some(device_name(value(name)?)?),
            "--tokens" => {
                o.tokens = sized(name, (1, 65_536), "tokens")?;
                tokens = true;
            }
            "--dim" | "--layers" | "--heads" | "--vocab" | "--context" => {
                let (range, what, field) = match name {
                    "--dim" => ((2, 8192), "model width", &mut o.config.dim),
                    "--layers" => ((1, 256), "layers", &mut o.config.layers),
                    "--heads" => ((1, 256), "heads", &mut o.config.heads),
                    "--vocab" => ((2, 1 << 20), "vocabulary entries", &mut o.config.vocab),
                    _ => ((2, 65_536), "cache rows", &mut o.config.context),
                };
                *field = sized(name, range, what)?;
                size_given = true;
            }
            "--until-eos" => {
                if inline.is_some() {
                    return Err(UsageError("--until-eos takes no value".into()));
                }
                until = true;
            }
            "--eos" => eos = Some(sized(name, (0, u64::from(u32::MAX)), "token id")?),
            "--every" => every = Some(sized(name, (1, 65_536), "replays per check")?),
            "--buckets" => buckets = Some(bucket_list(name, &value(name)?)?),
            "--steps" => steps = Some(sized(name, (32, 4096), "steps")?),
            "--replays" => replays = Some(sized(name, (0, 1_000_000), "replays")?),
            "--block-rows" => block_rows = Some(sized(name, (1, 65_536), "rows per block")?),
            "--seed" => {
                let v = value(name)?;
                o.seed = number(name, &v, (0, u64::MAX), "seed")?;
            }
            other => return Err(UsageError(format!("unknown option {other:?}"))),
        }
    }
    match buckets {
        Some(buckets) => {
            if tokens {
                return Err(UsageError(
                    "--tokens is the single-sequence decoder's; with --buckets, --steps".into(),
                ));
            }
            let mut ladder = capture_decode::LadderOptions::new(buckets);
            if size_given {
                ladder.config = parsed.options.config;
            }
            ladder.seed = parsed.options.seed;
            ladder.steps = steps.unwrap_or(ladder.steps);
            ladder.replays = replays.unwrap_or(ladder.replays);
            ladder.block_rows = block_rows.unwrap_or(ladder.block_rows);
            ladder.check().map_err(|e| UsageError(e.to_string()))?;
            parsed.ladder = Some(ladder);
        }
        None if steps.is_some() || replays.is_some() || block_rows.is_some() => {
            return Err(UsageError(
                "--steps, --replays and --block-rows go with --buckets".into(),
            ));
        }
        None => {}
    }
    match (until, parsed.ladder.is_some()) {
        (true, true) => {
            return Err(UsageError(
                "--until-eos and --buckets are two runs: pick one".into(),
            ));
        }
        (true, false) => {
            let mut options = capture_decode::UntilOptions {
                decode: parsed.options,
                eos,
                ..Default::default()
            };
            options.every = every.unwrap_or(options.every);
            if eos.is_some_and(|e| e >= parsed.options.config.vocab) {
                return Err(UsageError(format!(
                    "--eos {} is not a token of a vocabulary of {}",
                    eos.unwrap_or(0),
                    parsed.options.config.vocab
                )));
            }
            parsed.until = Some(options);
        }
        (false, _) if eos.is_some() || every.is_some() => {
            return Err(UsageError("--eos and --every go with --until-eos".into()));
        }
        (false, _) => {}
    }
    device_for(parsed.backend, parsed.device.as_deref())?;
    if parsed.ladder.is_none() {
        parsed
            .options
            .check()
            .map_err(|e| UsageError(e.to_string()))?;
    }
    Ok(Decode::Run(Box::new(parsed)))
}

/// `--buckets`' list: slot counts separated by commas.
fn bucket_list(name: &str, value: &str) -> Result<Vec<u32>, UsageError> {
    value
        .split(',')
        .map(|b| {
            b.trim().parse::<u32>().map_err(|_| {
                UsageError(format!(
                    "invalid value {value:?} for {name}: {b:?} is not a slot count"
                ))
            })
        })
        .collect()
}

/// Parses the arguments after `decode` and runs it.
pub(super) fn command(args: &[String]) -> ExitCode {
    match parse_decode(args) {
        Ok(Decode::Help) => {
            println!("{}", DECODE_HELP);
            ExitCode::SUCCESS
        }
        Ok(Decode::Run(args)) => {
            let session = match logging::start(args.log.as_deref(), args.timeline.as_deref()) {
                Ok(session) => session,
                Err(error) => return usage("decode", DECODE_HELP, &error),
            };
            let code = run_on(args.backend, args.device.as_deref(), &*args);
            finish("decode", session, code)
        }
        Err(error) => usage("decode", DECODE_HELP, &error),
    }
}

/// "all checks hold" and success, or each failed check on stderr and failure.
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

impl OnBackend for &DecodeArgs {
    const COMMAND: &'static str = "decode";
    const MEMORY_IN_DEVICE_LINE: bool = false;
    const SKIP_WITHOUT_CUDA: bool = true;

    /// Runs on an opened backend, prints the report, and fails when a check does.
    fn run<B: capture_graphs::Builtins + DecodeBackend>(self, backend: B, _: bool) -> ExitCode {
        let args = self;
        let mode = match (&args.ladder, &args.until) {
            (Some(ladder), _) => Mode::Ladder(ladder.clone()),
            (None, Some(until)) => Mode::Until(*until),
            (None, None) => Mode::Decode(args.options),
        };
        let option = mode.option();
        match mode.run(backend) {
            Ok((report, checks)) => {
                print!("{report}");
                verdict(checks)
            }
            Err(error) => {
                eprintln!(
                    "capture decode --backend {}{option}: the runtime failed: {}",
                    args.backend,
                    Chain(&error)
                );
                ExitCode::FAILURE
            }
        }
    }
}

#[cfg(test)]
mod tests;
