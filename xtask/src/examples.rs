//! The examples step of `cargo xtask test`: builds the facade's examples with every
//! backend feature (`cudarc` for CUDA), runs each, and gives the summary its
//! `examples` row. An example that exits non-zero fails the row; one that says `SKIP:`
//! is skipped with its reason, unless it needs Vulkan, which the test command requires.

use std::process::Command;

use anyhow::{Result, bail};

use crate::cargo::{cargo, executables};
use crate::summary::Backend;

/// What an example needs beyond the mock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Needs {
    Nothing,
    Vulkan,
    Cuda,
}

/// Each run of an example of the facade (capture-graphs): the example and its arguments.
/// A run needs the backend its `--backend` names, else the one its name starts with
/// (`vulkan_user_kernel`), else the mock alone.
const RUNS: [(&str, &str); 17] = [
    ("quick_start", ""),
    ("decode_loop", "--tokens 32"),
    ("decode_loop", "--backend vulkan --tokens 32"),
    ("engine_step", "--tokens 16"),
    ("engine_step", "--backend vulkan --tokens 16 --validation"),
    ("engine_step", "--backend cuda --tokens 16"),
    ("moe_step", "--tokens 16"),
    ("moe_step", "--backend vulkan --tokens 16 --validation"),
    ("moe_step", "--backend cuda --tokens 16"),
    ("paged_step", "--tokens 12"),
    ("paged_step", "--backend vulkan --tokens 12 --validation"),
    ("paged_step", "--backend cuda --tokens 12"),
    ("decode_until", ""),
    ("decode_until", "--backend vulkan --validation"),
    ("decode_until", "--backend cuda"),
    ("vulkan_user_kernel", ""),
    ("cuda_user_kernel", ""),
];

/// The backend `args` name (`--backend vulkan`), if any.
fn backend(args: &str) -> Option<&str> {
    let mut words = args.split_whitespace();
    words.find(|w| *w == "--backend")?;
    words.next()
}

/// What the run of `example` with `args` needs.
fn needs(example: &str, args: &str) -> Needs {
    match backend(args).or(example.split('_').next()) {
        Some("vulkan") => Needs::Vulkan,
        Some("cuda") => Needs::Cuda,
        _ => Needs::Nothing,
    }
}

/// How one run went.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ran,
    Skipped(String),
    Failed(String),
}

/// Builds every example, runs each with `env` applied, and returns the `examples` row.
pub(crate) fn run(env: impl Fn(&mut Command)) -> Result<Backend> {
    let mut build = cargo(
        "build -p capture-graphs --features capture-graphs/vulkan,capture-graphs/cudarc \
         --examples",
    );
    env(&mut build);
    let (ok, built) = executables("cargo build --examples", build)?;
    if !ok {
        bail!("building the examples failed");
    }
    let mut outcomes = Vec::new();
    for (example, args) in RUNS {
        let label = match backend(args) {
            Some(backend) => format!("{example} ({backend})"),
            None => example.to_string(),
        };
        let built = built
            .iter()
            .find(|e| e.kind == "example" && e.package == "capture-graphs" && e.target == example);
        let Some(built) = built else {
            outcomes.push((label, Outcome::Failed("not built".into())));
            continue;
        };
        println!("xtask: example {label}");
        let mut command = Command::new(&built.path);
        command.args(args.split_whitespace());
        env(&mut command);
        let output = command.output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        print!("{stdout}");
        eprint!("{stderr}");
        let success = output.status.success();
        outcomes.push((
            label,
            judge(needs(example, args), success, &stdout, &stderr),
        ));
    }
    Ok(row(&outcomes))
}

/// An example's outcome from its exit status and output; Vulkan is required.
fn judge(needs: Needs, success: bool, stdout: &str, stderr: &str) -> Outcome {
    let skip = stdout.lines().find(|l| l.starts_with("SKIP:"));
    match (success, skip) {
        (false, _) => Outcome::Failed(
            stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("exited non-zero")
                .to_string(),
        ),
        (true, Some(why)) if needs == Needs::Vulkan => {
            Outcome::Failed(format!("Vulkan is required, but it said {why}"))
        }
        (true, Some(_)) if needs == Needs::Nothing => {
            Outcome::Failed("it said SKIP: but needs no device".into())
        }
        (true, Some(why)) => Outcome::Skipped(why.to_string()),
        (true, None) => Outcome::Ran,
    }
}

fn row(outcomes: &[(String, Outcome)]) -> Backend {
    let names = |keep: fn(&Outcome) -> bool| -> Vec<String> {
        outcomes
            .iter()
            .filter(|(_, o)| keep(o))
            .map(|(l, o)| match o {
                Outcome::Ran => l.clone(),
                Outcome::Skipped(why) | Outcome::Failed(why) => format!("{l}: {why}"),
            })
            .collect()
    };
    let failed = names(|o| matches!(o, Outcome::Failed(_)));
    if !failed.is_empty() {
        return Backend::failed("examples", failed.join("; "));
    }
    let ran = names(|o| *o == Outcome::Ran);
    let skipped = names(|o| matches!(o, Outcome::Skipped(_)));
    let mut what = format!("{} ran: {}", ran.len(), ran.join(", "));
    if !skipped.is_empty() {
        what.push_str(&format!("; skipped {}", skipped.join("; ")));
    }
    Backend::ran("examples", what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_needs_the_backend_its_arguments_or_its_name_say() {
        let all: Vec<Needs> = RUNS.iter().map(|(e, a)| needs(e, a)).collect();
        let count = |n: Needs| all.iter().filter(|m| **m == n).count();
        assert_eq!(
            (
                count(Needs::Nothing),
                count(Needs::Vulkan),
                count(Needs::Cuda)
            ),
            (6, 6, 5)
        );
        assert_eq!(
            needs("engine_step", "--backend cuda --tokens 16"),
            Needs::Cuda
        );
        assert_eq!(needs("vulkan_user_kernel", ""), Needs::Vulkan);
        assert_eq!(needs("decode_until", ""), Needs::Nothing);
    }

    #[test]
    fn an_example_fails_on_a_bad_exit_or_a_skip_it_may_not_make() {
        assert_eq!(judge(Needs::Nothing, true, "ok\n", ""), Outcome::Ran);
        assert_eq!(
            judge(Needs::Cuda, true, "SKIP: no driver\n", ""),
            Outcome::Skipped("SKIP: no driver".into())
        );
        assert!(matches!(
            judge(Needs::Vulkan, true, "SKIP: no device\n", ""),
            Outcome::Failed(_)
        ));
        assert!(matches!(
            judge(Needs::Nothing, true, "SKIP: why\n", ""),
            Outcome::Failed(_)
        ));
        assert_eq!(
            judge(Needs::Nothing, false, "", "thread panicked\n\n"),
            Outcome::Failed("thread panicked".into())
        );
    }

    #[test]
    fn the_row_names_what_ran_and_what_skipped_and_fails_on_any_failure() {
        let ran = row(&[
            ("quick_start".into(), Outcome::Ran),
            (
                "cuda_user_kernel".into(),
                Outcome::Skipped("SKIP: no GPU".into()),
            ),
        ]);
        assert_eq!(ran.status, "ran");
        assert_eq!(
            ran.why,
            "1 ran: quick_start; skipped cuda_user_kernel: SKIP: no GPU"
        );
        let failed = row(&[
            ("quick_start".into(), Outcome::Ran),
            ("floor".into(), Outcome::Failed("boom".into())),
        ]);
        assert!(failed.is_failed());
        assert_eq!(failed.why, "floor: boom");
    }
}
