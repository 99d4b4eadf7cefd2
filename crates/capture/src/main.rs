//! The `capture` command-line program.
//!
//! `capture demo [--backend mock|vulkan|cuda]` will run a decode-shaped chain of kernels
//! eagerly and as a replayed graph. Until the mock backend lands it says so and runs
//! nothing: it prints no figure it did not measure.

use std::process::ExitCode;

const USAGE: &str = "usage: capture <command> [options]

commands:
  demo [--backend mock|vulkan|cuda]   a decode-shaped kernel chain, eager and replayed

Run `capture <command> --help` for a command's options.";

const DEMO_HELP: &str = "usage: capture demo [--backend mock|vulkan|cuda]

Runs a chain of at least 500 small dependent kernels eagerly and as a replayed graph,
checks the results are equal, and prints the cost per kernel of each and their ratio.

  --backend NAME   mock (default), vulkan or cuda";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("demo") => demo(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
        Some(other) => {
            eprintln!("capture: unknown command {other:?}\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn demo(args: &[String]) -> ExitCode {
    let mut backend = "mock";
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-h" | "--help" => {
                println!("{DEMO_HELP}");
                return ExitCode::SUCCESS;
            }
            "--backend" => match rest.next().map(String::as_str) {
                Some(name @ ("mock" | "vulkan" | "cuda")) => backend = name,
                Some(other) => {
                    eprintln!("capture demo: unknown backend {other:?} (mock, vulkan or cuda)");
                    return ExitCode::from(2);
                }
                None => {
                    eprintln!("capture demo: --backend needs a name (mock, vulkan or cuda)");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!("capture demo: unknown option {other:?}\n\n{DEMO_HELP}");
                return ExitCode::from(2);
            }
        }
    }
    println!(
        "capture demo --backend {backend}: not yet. The core (memory, drop queue, info cache, \
         taint ledger) exists; the {backend} backend and the demo land with their own issues. \
         Nothing was run and no figure is reported."
    );
    ExitCode::SUCCESS
}
