//! Project automation, run as `cargo xtask <command>`.
//!
//! - `test`: the README's test command: installs what the tests need when it is missing,
//!   runs the gate (fmt, clippy, docs, tidy), every test, and prints which backends ran
//!   and which were skipped and why.
//! - `tidy`: the project's own conventions (also run as a `#[test]`).

mod summary;
mod test;
mod tidy;
mod vulkan;

use std::path::PathBuf;

use std::process::ExitCode;

use anyhow::{Result, bail};

const USAGE: &str = "usage: cargo xtask <command>

commands:
  test   install what the tests need, run the gate and every test, print a summary
  tidy   check the project's conventions (headers, stubs, unsafe, snapshots, deps)";

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("test") => test::run(&args[1..]),
        Some("tidy") => {
            let problems = tidy::check(&workspace_root())?;
            if problems.is_empty() {
                println!("tidy: ok");
                Ok(())
            } else {
                for p in &problems {
                    eprintln!("tidy: {p}");
                }
                bail!("tidy found {} problem(s)", problems.len())
            }
        }
        Some("-h" | "--help" | "help") | None => {
            println!("{USAGE}");
            Ok(())
        }
        Some(other) => bail!("unknown command {other:?}\n\n{USAGE}"),
    }
}

/// The workspace root: the parent of this crate's manifest directory.
fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}
