//! The program's `tracing` subscriber: `--log` (else `RUST_LOG`) and `--timeline`.
//!
//! - `--log LEVEL` takes any env-filter directive list (`debug`, `capture=trace`,
//!   `info,capture=debug`) and prints the matching spans' events to stderr, so the
//!   tables on stdout stay clean. Without `--log`, a non-empty `RUST_LOG` is used.
//!   The core logs under target `capture`: its spans and routine events at `debug`,
//!   refusals, dooms, taints, skips and faults at `info`.
//! - `--timeline PATH` records the core's spans and notable events with times and
//!   threads (the program's timeline layer), whatever `--log` says, and writes them as
//!   trace-event JSON when the command is done.
//!
//! With neither, no subscriber is installed: the core's spans stay disabled handles.

use std::path::{Path, PathBuf};

use tracing_subscriber::filter::{EnvFilter, filter_fn};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, fmt};

use crate::timeline::Recorder;
use crate::trace_event;

/// The subscriber a command runs under, and where its timeline goes.
#[derive(Debug)]
pub struct Session {
    timeline: Option<(PathBuf, Recorder)>,
}

/// Installs the subscriber `log` (else `RUST_LOG`) and `timeline` ask for, if any.
///
/// # Errors
///
/// A message naming the directive when `log` is not an env-filter directive list (a
/// bad `RUST_LOG` is only reported, on stderr, and ignored), or when a subscriber was
/// already installed.
pub fn start(log: Option<&str>, timeline: Option<&Path>) -> Result<Session, String> {
    let filter = match log {
        Some(directives) => Some(
            EnvFilter::try_new(directives)
                .map_err(|e| format!("invalid value {directives:?} for --log: {e}"))?,
        ),
        None => match std::env::var("RUST_LOG") {
            Ok(directives) if !directives.trim().is_empty() => {
                match EnvFilter::try_new(&directives) {
                    Ok(filter) => Some(filter),
                    Err(e) => {
                        eprintln!("capture: RUST_LOG={directives:?} ignored: {e}");
                        None
                    }
                }
            }
            _ => None,
        },
    };
    let recorder = timeline.map(|_| Recorder::new());
    if filter.is_none() && recorder.is_none() {
        return Ok(Session { timeline: None });
    }
    let printed = filter.map(|filter| {
        fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter)
    });
    let recorded = recorder
        .clone()
        .map(|r| r.with_filter(filter_fn(Recorder::wants)));
    let subscriber = tracing_subscriber::registry().with(printed).with(recorded);
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| format!("cannot install the log subscriber: {e}"))?;
    Ok(Session {
        timeline: timeline.map(Path::to_path_buf).zip(recorder),
    })
}

impl Session {
    /// Writes the timeline, if one was asked for.
    ///
    /// # Errors
    ///
    /// A message naming the file when it cannot be written.
    pub fn finish(self) -> Result<(), String> {
        let Some((path, recorder)) = self.timeline else {
            return Ok(());
        };
        let json = trace_event::chrome(&recorder.recording());
        std::fs::write(&path, trace_event::to_text(&json))
            .map_err(|e| format!("cannot write the timeline to {}: {e}", path.display()))
    }
}
