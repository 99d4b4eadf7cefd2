//! What every command's parsing shares: its options one by one (`--name value` or
//! `--name=value`), whole numbers in a range, `--log` directives, file names, the
//! backend `--backend` names and the device `--device` names, and the [`UsageError`]
//! any of them gives.

use std::fmt;
use std::path::PathBuf;

/// The backends `--backend` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BackendName {
    /// The deterministic mock backend.
    Mock,
    /// The Vulkan backend.
    Vulkan,
    /// The CUDA backend.
    Cuda,
}

impl BackendName {
    /// The name as `--backend` takes it.
    pub(crate) const fn as_str(self) -> &'static str {
        match self {
            BackendName::Mock => "mock",
            BackendName::Vulkan => "vulkan",
            BackendName::Cuda => "cuda",
        }
    }
}

impl fmt::Display for BackendName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Arguments that cannot be run: what is wrong, naming the option or value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UsageError(pub(crate) String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The backend `--backend` names.
pub(super) fn backend_name(v: &str) -> Result<BackendName, UsageError> {
    match v {
        "mock" => Ok(BackendName::Mock),
        "vulkan" => Ok(BackendName::Vulkan),
        "cuda" => Ok(BackendName::Cuda),
        _ => Err(UsageError(format!(
            "unknown backend {v:?} for --backend (mock, vulkan or cuda)"
        ))),
    }
}

/// The device `--device` names: anything but blank.
pub(super) fn device_name(v: String) -> Result<String, UsageError> {
    if v.trim().is_empty() {
        return Err(UsageError(format!("invalid value {v:?} for --device")));
    }
    Ok(v)
}

/// `--log`'s value: a directive list, checked when the subscriber is built.
pub(super) fn log(name: &str, value: String) -> Result<String, UsageError> {
    if value.trim().is_empty() {
        return Err(UsageError(format!("invalid value {value:?} for {name}")));
    }
    Ok(value)
}

/// A file name option's value.
pub(super) fn path(name: &str, value: String) -> Result<PathBuf, UsageError> {
    if value.is_empty() {
        return Err(UsageError(format!("invalid value {value:?} for {name}")));
    }
    Ok(PathBuf::from(value))
}

/// A command's arguments, option by option: `--name value` or `--name=value`.
pub(super) struct Options<'a>(pub(super) std::slice::Iter<'a, String>);

impl<'a> Options<'a> {
    /// The next option's name, and its value when given inline.
    pub(super) fn next_option(&mut self) -> Option<(&'a str, Option<String>)> {
        let arg = self.0.next()?;
        Some(match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        })
    }

    /// Option `name`'s value: the inline one, else the next argument.
    pub(super) fn value(
        &mut self,
        name: &str,
        inline: Option<String>,
    ) -> Result<String, UsageError> {
        inline
            .or_else(|| self.0.next().cloned())
            .ok_or_else(|| UsageError(format!("{name} needs a value")))
    }
}

/// `value` of option `name` as a whole number within `range` (inclusive).
pub(super) fn number(
    name: &str,
    value: &str,
    range: (u64, u64),
    what: &str,
) -> Result<u64, UsageError> {
    let (min, max) = range;
    let n: u64 = value.trim().parse().map_err(|_| {
        UsageError(format!(
            "invalid value {value:?} for {name}: expected a whole number of {what}, \
             {min} to {max}"
        ))
    })?;
    if !(min..=max).contains(&n) {
        return Err(UsageError(format!(
            "invalid value {value:?} for {name}: {what} must be {min} to {max}"
        )));
    }
    Ok(n)
}

pub(super) fn out_of_range(name: &str, value: &str) -> UsageError {
    UsageError(format!(
        "invalid value {value:?} for {name}: too large for this machine"
    ))
}
