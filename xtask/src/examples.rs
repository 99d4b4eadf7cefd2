//! The examples step of `cargo xtask test`: builds the facade's examples with every
//! backend feature (`cudarc` for CUDA), runs each, and gives the summary its
//! `examples` row. An example that exits non-zero fails the row; one that says `SKIP:`
//! is skipped with its reason, unless it needs Vulkan, which the test command requires.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Result, bail};

use crate::cargo::{cargo, executable, json_messages};
use crate::summary::Backend;

/// What an example needs beyond the mock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Needs {
    Nothing,
    Vulkan,
    Cuda,
}

/// One run of one example.
struct Run {
    package: &'static str,
    example: &'static str,
    args: &'static [&'static str],
    needs: Needs,
}

const RUNS: [Run; 17] = [
    Run {
        package: "capture-graphs",
        example: "quick_start",
        args: &[],
        needs: Needs::Nothing,
    },
    Run {
        package: "capture-graphs",
        example: "decode_loop",
        args: &["--tokens", "32"],
        needs: Needs::Nothing,
    },
    Run {
        package: "capture-graphs",
        example: "decode_loop",
        args: &["--backend", "vulkan", "--tokens", "32"],
        needs: Needs::Vulkan,
    },
    Run {
        package: "capture-graphs",
        example: "engine_step",
        args: &["--tokens", "16"],
        needs: Needs::Nothing,
    },
    Run {
        package: "capture-graphs",
        example: "engine_step",
        args: &["--backend", "vulkan", "--tokens", "16", "--validation"],
        needs: Needs::Vulkan,
    },
    Run {
        package: "capture-graphs",
        example: "engine_step",
        args: &["--backend", "cuda", "--tokens", "16"],
        needs: Needs::Cuda,
    },
    Run {
        package: "capture-graphs",
        example: "moe_step",
        args: &["--tokens", "16"],
        needs: Needs::Nothing,
    },
    Run {
        package: "capture-graphs",
        example: "moe_step",
        args: &["--backend", "vulkan", "--tokens", "16", "--validation"],
        needs: Needs::Vulkan,
    },
    Run {
        package: "capture-graphs",
        example: "moe_step",
        args: &["--backend", "cuda", "--tokens", "16"],
        needs: Needs::Cuda,
    },
    Run {
        package: "capture-graphs",
        example: "paged_step",
        args: &["--tokens", "12"],
        needs: Needs::Nothing,
    },
    Run {
        package: "capture-graphs",
        example: "paged_step",
        args: &["--backend", "vulkan", "--tokens", "12", "--validation"],
        needs: Needs::Vulkan,
    },
    Run {
        package: "capture-graphs",
        example: "paged_step",
        args: &["--backend", "cuda", "--tokens", "12"],
        needs: Needs::Cuda,
    },
    Run {
        package: "capture-graphs",
        example: "decode_until",
        args: &[],
        needs: Needs::Nothing,
    },
    Run {
        package: "capture-graphs",
        example: "decode_until",
        args: &["--backend", "vulkan", "--validation"],
        needs: Needs::Vulkan,
    },
    Run {
        package: "capture-graphs",
        example: "decode_until",
        args: &["--backend", "cuda"],
        needs: Needs::Cuda,
    },
    Run {
        package: "capture-graphs",
        example: "vulkan_user_kernel",
        args: &[],
        needs: Needs::Vulkan,
    },
    Run {
        package: "capture-graphs",
        example: "cuda_user_kernel",
        args: &[],
        needs: Needs::Cuda,
    },
];

/// How one run went.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Ran,
    Skipped(String),
    Failed(String),
}

/// Builds every example, runs each with `env` applied, and returns the `examples` row.
pub(crate) fn run(env: impl Fn(&mut Command)) -> Result<Backend> {
    let mut build = cargo(&[
        "build",
        "-p",
        "capture-graphs",
        "--features",
        "capture-graphs/vulkan,capture-graphs/cudarc",
        "--examples",
    ]);
    env(&mut build);
    let (ok, messages) = json_messages("cargo build --examples", build)?;
    if !ok {
        bail!("building the examples failed");
    }
    let built: Vec<(String, String, PathBuf)> = messages
        .iter()
        .filter_map(executable)
        .filter(|e| e.kind == "example")
        .map(|e| (e.package, e.target, e.path))
        .collect();
    let mut outcomes = Vec::new();
    for run in &RUNS {
        let label = label(run);
        let Some((_, _, path)) = built
            .iter()
            .find(|(p, t, _)| p == run.package && t == run.example)
        else {
            outcomes.push((label, Outcome::Failed("not built".into())));
            continue;
        };
        println!("xtask: example {label}");
        let mut command = Command::new(path);
        command.args(run.args);
        env(&mut command);
        let output = command.output()?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        print!("{stdout}");
        eprint!("{stderr}");
        outcomes.push((
            label,
            judge(run.needs, output.status.success(), &stdout, &stderr),
        ));
    }
    Ok(row(&outcomes))
}

fn label(run: &Run) -> String {
    match run.args.iter().position(|a| *a == "--backend") {
        Some(i) => format!("{} ({})", run.example, run.args[i + 1]),
        None => run.example.to_string(),
    }
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
        assert_eq!(ran.status(), "ran");
        assert_eq!(
            ran.why(),
            "1 ran: quick_start; skipped cuda_user_kernel: SKIP: no GPU"
        );
        let failed = row(&[
            ("quick_start".into(), Outcome::Ran),
            ("floor".into(), Outcome::Failed("boom".into())),
        ]);
        assert!(failed.is_failed());
        assert_eq!(failed.why(), "floor: boom");
    }
}
