//! How a command ends: a usage error's message and status, and the session's timeline
//! written before the exit status is final.

use std::process::ExitCode;

use crate::logging;

/// Exit status of a usage error, or of a backend this build was made without.
pub const USAGE_EXIT: u8 = 2;

/// A usage error of `capture <command>`: the error, the usage line, where the help is.
pub fn usage(command: &str, help: &str, error: &dyn std::fmt::Display) -> ExitCode {
    let line = help.lines().next().unwrap_or_default();
    eprintln!(
        "capture {command}: {error}\n{line}\nRun `capture {command} --help` for the options."
    );
    ExitCode::from(USAGE_EXIT)
}

/// Writes the session's timeline (also after a failed run, which it may explain);
/// a timeline that cannot be written fails a run that succeeded.
pub fn finish(command: &str, session: logging::Session, code: ExitCode) -> ExitCode {
    match session.finish() {
        Ok(()) => code,
        Err(error) => {
            eprintln!("capture {command}: {error}");
            ExitCode::FAILURE
        }
    }
}
