//! `capture timeline-svg IN.json OUT.svg`: its help, the parsing of its two files into
//! [`SvgArgs`], and its run: the JSON read, drawn by [`crate::timeline_svg`], written.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::args::{UsageError, path};
use crate::exit::usage;

/// `capture timeline-svg`'s help.
pub(crate) const SVG_HELP: &str = "usage: capture timeline-svg IN.json OUT.svg

Draws a timeline that `--timeline` wrote (Chrome trace-event JSON) as an SVG picture:
a lane per track, spans as labelled boxes on one time axis (a nested span a row below
its parent), instants as ticks; every box and tick has a tooltip with its arguments.

exit status: 0 when the picture was written; 1 when IN.json cannot be read or drawn,
or OUT.svg cannot be written; 2 for a usage error.";

/// `capture timeline-svg`'s arguments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SvgArgs {
    /// The timeline JSON to read.
    pub(crate) input: PathBuf,
    /// The SVG file to write.
    pub(crate) output: PathBuf,
}

/// What `capture timeline-svg`'s arguments ask for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Svg {
    /// Print the help.
    Help,
    /// Draw the picture.
    Run(SvgArgs),
}

/// Parses `capture timeline-svg`'s arguments: `IN.json OUT.svg`.
pub(crate) fn parse_svg(args: &[String]) -> Result<Svg, UsageError> {
    let mut files = Vec::new();
    for arg in args {
        match arg.as_str() {
            "-h" | "--help" => return Ok(Svg::Help),
            other if other.starts_with('-') && other.len() > 1 => {
                return Err(UsageError(format!("unknown option {other:?}")));
            }
            other => files.push(path("a file name", other.to_owned())?),
        }
    }
    match <[PathBuf; 2]>::try_from(files) {
        Ok([input, output]) => Ok(Svg::Run(SvgArgs { input, output })),
        Err(files) => Err(UsageError(format!(
            "expected two files, IN.json and OUT.svg; got {}",
            files.len()
        ))),
    }
}

/// `capture timeline-svg IN.json OUT.svg`.
pub(super) fn command(args: &[String]) -> ExitCode {
    let args = match parse_svg(args) {
        Ok(Svg::Help) => {
            println!("{}", SVG_HELP);
            return ExitCode::SUCCESS;
        }
        Ok(Svg::Run(args)) => args,
        Err(error) => return usage("timeline-svg", SVG_HELP, &error),
    };
    let drawn = std::fs::read_to_string(&args.input)
        .map_err(|e| format!("cannot read {}: {e}", args.input.display()))
        .and_then(|text| {
            serde_json::from_str(&text)
                .map_err(|e| format!("{} is not JSON: {e}", args.input.display()))
        })
        .and_then(|json| {
            crate::timeline_svg::render(&json)
                .map_err(|e| format!("{} is not a timeline: {}", args.input.display(), e.0))
        })
        .and_then(|svg| {
            std::fs::write(&args.output, svg)
                .map_err(|e| format!("cannot write {}: {e}", args.output.display()))
        });
    match drawn {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("capture timeline-svg: {error}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests;
