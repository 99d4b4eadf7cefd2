//! The command line: the program's help and the dispatch to each command's module,
//! which holds that command's help, the parsing of its options and its run; the parsing
//! helpers they share are in [`crate::args`], the backends they open in
//! [`crate::backends`]. `capture bench` is a program of its own (`capture-bench`).

mod bench;
mod decode;
mod demo;
mod timeline_svg;
mod trace;

use std::process::ExitCode;

use crate::exit::USAGE_EXIT;

/// The program's help: its commands.
pub(crate) const USAGE: &str = "usage: capture <command> [options]

commands:
  demo          a decode-shaped kernel chain, run eagerly and as a replayed graph
  decode        a llama-shaped decoder's step captured once and replayed per token
  bench         the benchmark matrix: launch-bound to execution-bound rows, eager
                against replayed, beside a hand-written floor where the backend has one
  trace         a named scenario on the mock: its trace lines, and its timeline
  timeline-svg  a timeline JSON file drawn as an SVG picture

options:
  -h, --help   this help

Run `capture <command> --help` for a command's options.";
/// Runs `capture ARGS` (the program's arguments, without its name) and returns its exit
/// status.
pub(crate) fn run(args: &[String]) -> ExitCode {
    match args.first().map(String::as_str) {
        Some("demo") => demo::command(&args[1..]),
        Some("bench") => bench::command(&args[1..]),
        Some("decode") => decode::command(&args[1..]),
        Some("trace") => trace::command(&args[1..]),
        Some("timeline-svg") => timeline_svg::command(&args[1..]),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        None => {
            eprintln!("{USAGE}");
            ExitCode::from(USAGE_EXIT)
        }
        Some(other) => {
            eprintln!("capture: unknown command {other:?}\n\n{USAGE}");
            ExitCode::from(USAGE_EXIT)
        }
    }
}

#[cfg(test)]
mod tests;
