//! The program's `tracing` subscriber: `--log`, else `RUST_LOG`.
//!
//! `--log LEVEL` takes any env-filter directive list (`debug`, `capture=trace`,
//! `info,capture=debug`) and prints the matching spans' events to stderr, so the tables
//! on stdout stay clean. Without `--log`, a non-empty `RUST_LOG` is used. The core logs
//! under target `capture`: its spans and routine events at `debug`, refusals, dooms,
//! taints, skips and faults at `info`.
//!
//! With neither, no subscriber is installed: the core's spans stay disabled handles.

use tracing_subscriber::filter::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{Layer, fmt};

/// Installs the subscriber `log` (else `RUST_LOG`) asks for, if any.
///
/// # Errors
///
/// A message naming the directive when `log` is not an env-filter directive list (a
/// bad `RUST_LOG` is only reported, on stderr, and ignored), or when a subscriber was
/// already installed.
pub(crate) fn start(log: Option<&str>) -> Result<(), String> {
    let filter = match log {
        Some(directives) => EnvFilter::try_new(directives)
            .map_err(|e| format!("invalid value {directives:?} for --log: {e}"))?,
        None => match std::env::var("RUST_LOG") {
            Ok(directives) if !directives.trim().is_empty() => {
                match EnvFilter::try_new(&directives) {
                    Ok(filter) => filter,
                    Err(e) => {
                        eprintln!("capture: RUST_LOG={directives:?} ignored: {e}");
                        return Ok(());
                    }
                }
            }
            _ => return Ok(()),
        },
    };
    let printed = fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    let subscriber = tracing_subscriber::registry().with(printed);
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| format!("cannot install the log subscriber: {e}"))
}
