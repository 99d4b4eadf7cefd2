//! What every command's parsing shares: its options one by one (`--name value` or
//! `--name=value`), whole numbers in a range, `--log` directives, file names and the
//! device `--device` names, and the [`UsageError`] any of them gives. (The backends
//! `--backend` names are the program's `backends` module.)

// Every error here is the one kind, a `UsageError` naming the option and the value.
#![allow(clippy::missing_errors_doc)]

use std::fmt;
use std::path::PathBuf;

/// Arguments that cannot be run: what is wrong, naming the option or value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The device `--device` names: anything but blank.
pub fn device_name(v: String) -> Result<String, UsageError> {
    if v.trim().is_empty() {
        return Err(UsageError(format!("invalid value {v:?} for --device")));
    }
    Ok(v)
}

/// `--log`'s value: a directive list, checked when the subscriber is built.
pub fn log(name: &str, value: String) -> Result<String, UsageError> {
    if value.trim().is_empty() {
        return Err(UsageError(format!("invalid value {value:?} for {name}")));
    }
    Ok(value)
}

/// A file name option's value.
pub fn path(name: &str, value: String) -> Result<PathBuf, UsageError> {
    if value.is_empty() {
        return Err(UsageError(format!("invalid value {value:?} for {name}")));
    }
    Ok(PathBuf::from(value))
}

/// A command's arguments, option by option: `--name value` or `--name=value`.
pub struct Options<'a>(pub std::slice::Iter<'a, String>);

impl<'a> Options<'a> {
    /// The next option's name, and its value when given inline.
    pub fn next_option(&mut self) -> Option<(&'a str, Option<String>)> {
        let arg = self.0.next()?;
        Some(match arg.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value.to_owned())),
            _ => (arg.as_str(), None),
        })
    }

    /// Option `name`'s value: the inline one, else the next argument.
    pub fn value(&mut self, name: &str, inline: Option<String>) -> Result<String, UsageError> {
        inline
            .or_else(|| self.0.next().cloned())
            .ok_or_else(|| UsageError(format!("{name} needs a value")))
    }
}

/// `value` of option `name` as a whole number within `range` (inclusive).
pub fn number(name: &str, value: &str, range: (u64, u64), what: &str) -> Result<u64, UsageError> {
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

/// A value that parsed but does not fit this machine (a count past `usize`).
pub fn out_of_range(name: &str, value: &str) -> UsageError {
    UsageError(format!(
        "invalid value {value:?} for {name}: too large for this machine"
    ))
}
