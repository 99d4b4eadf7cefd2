//! Running cargo from xtask, and reading its `--message-format=json` messages with
//! serde_json: which executable cargo built for which package's target.

use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// `cargo <line>` (its words split at whitespace) in the workspace root (the `cargo` that
/// runs xtask, when known).
pub(crate) fn cargo(line: &str) -> Command {
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.args(line.split_whitespace())
        .current_dir(workspace_root());
    c
}

/// Runs one step of a command, naming it first; fails unless it succeeds.
pub(crate) fn step(name: &str, command: &mut Command) -> Result<()> {
    println!("xtask: {name}");
    let status = command
        .status()
        .with_context(|| format!("starting {name}"))?;
    if !status.success() {
        bail!("{name} failed ({status})");
    }
    Ok(())
}

/// Runs `command` (a cargo command), named first, with
/// `--message-format=json-render-diagnostics` appended: its diagnostics and progress go
/// to stderr as usual and stdout lines that are not JSON are echoed. Returns whether it
/// succeeded and its JSON messages.
pub(crate) fn json_messages(name: &str, mut command: Command) -> Result<(bool, Vec<Value>)> {
    println!("xtask: {name}");
    let mut child = command
        .arg("--message-format=json-render-diagnostics")
        .stdout(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    let stdout = child.stdout.take().context("cargo's stdout")?;
    let mut messages = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if line.starts_with('{') {
            messages.push(parse_message(&line)?);
        } else if !line.trim().is_empty() {
            println!("{line}");
        }
    }
    Ok((child.wait()?.success(), messages))
}

/// Runs `command` (a cargo build) as [`json_messages`] does, echoed: whether it
/// succeeded and the executables it built.
pub(crate) fn executables(name: &str, command: Command) -> Result<(bool, Vec<Executable>)> {
    let (ok, messages) = json_messages(name, command)?;
    Ok((ok, messages.iter().filter_map(executable).collect()))
}

/// One line of cargo's JSON output.
pub(crate) fn parse_message(line: &str) -> Result<Value> {
    serde_json::from_str(line).with_context(|| format!("reading cargo's message {line}"))
}

/// A target whose executable xtask looks for: a package's library unit tests, a test
/// target, or a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Target {
    pub(crate) package: &'static str,
    /// `lib` for the library's unit tests, `test` for a `tests/` target, `example` or
    /// `bin` for a program.
    pub(crate) kind: &'static str,
    pub(crate) name: &'static str,
}

impl Target {
    /// `package`'s `kind` target `name`.
    pub(crate) const fn new(package: &'static str, kind: &'static str, name: &'static str) -> Self {
        Self {
            package,
            kind,
            name,
        }
    }

    /// The unit tests of `package`'s library `name` (`capture_core`).
    pub(crate) const fn lib(package: &'static str, name: &'static str) -> Self {
        Self::new(package, "lib", name)
    }

    /// `package`'s test target `name` (`cargo test -p package --test name`).
    pub(crate) const fn test(package: &'static str, name: &'static str) -> Self {
        Self::new(package, "test", name)
    }

    /// Whether the binary of `package`'s `kind` target `name` is this one.
    pub(crate) fn is(&self, package: &str, kind: &str, name: &str) -> bool {
        self.package == package && self.kind == kind && self.name == name
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&label(self.package, self.kind, self.name))
    }
}

/// How a summary names a test binary: `capture-suite --test mock`, `capture-core unit
/// tests`, `capture-core doc tests` (`package` empty: named after the target alone).
pub(crate) fn label(package: &str, kind: &str, name: &str) -> String {
    let package = if package.is_empty() { name } else { package };
    match kind {
        "lib" => format!("{package} unit tests"),
        "doctest" => format!("{package} doc tests"),
        "test" | "bin" => format!("{package} --{kind} {name}"),
        _ => format!("{package} {name} ({kind})"),
    }
}

/// An executable cargo built: a test binary, a library's unit tests, or a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Executable {
    /// The package's name (`capture-suite`), not its directory's.
    pub(crate) package: String,
    /// The target's name (`mock`, `it`, or the library's `capture_core`).
    pub(crate) target: String,
    /// The target's first kind: `lib`, `test`, `bin`, ...
    pub(crate) kind: String,
    /// Whether it was built with the test harness (`cargo test`'s binaries).
    pub(crate) test: bool,
    pub(crate) path: PathBuf,
}

/// The executable of a `compiler-artifact` message; `None` for any other message and for
/// an artifact with no executable (a library built as a dependency).
pub(crate) fn executable(message: &Value) -> Option<Executable> {
    if message.get("reason")?.as_str()? != "compiler-artifact" {
        return None;
    }
    let target = message.get("target")?;
    Some(Executable {
        package: package_name(message.get("package_id")?.as_str()?)?.to_string(),
        target: target.get("name")?.as_str()?.to_string(),
        kind: target
            .get("kind")?
            .as_array()?
            .first()?
            .as_str()?
            .to_string(),
        test: message.get("profile")?.get("test")?.as_bool()?,
        path: PathBuf::from(message.get("executable")?.as_str()?),
    })
}

/// The package name in a package id: `path+file:///w/crates/capture#capture-graphs@0.1.0`
/// names it after `#`; `path+file:///w/crates/capture-cuda#0.1.0` (a package named after
/// its directory) only in the path.
pub(crate) fn package_name(id: &str) -> Option<&str> {
    let (source, fragment) = id.rsplit_once('#')?;
    match fragment.split_once('@') {
        Some((name, _version)) => Some(name),
        None => source.rsplit('/').next().filter(|n| !n.is_empty()),
    }
}

/// The workspace root: the parent of this crate's manifest directory.
pub(crate) fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives one level below the workspace root")
        .to_path_buf()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A `compiler-artifact` message as cargo 1.95 prints it (one line).
    pub(crate) fn artifact_line(package_id: &str, kind: &str, name: &str, test: bool) -> String {
        format!(
            r#"{{"reason":"compiler-artifact","package_id":"{package_id}","manifest_path":"/w/x/Cargo.toml","target":{{"kind":["{kind}"],"crate_types":["bin"],"name":"{name}","src_path":"/w/x/tests/{name}/main.rs","edition":"2024","doc":false,"doctest":false,"test":true}},"profile":{{"opt_level":"3","debuginfo":0,"debug_assertions":false,"overflow_checks":false,"test":{test}}},"features":[],"filenames":["/w/target/release/deps/{name}-0123"],"executable":"/w/target/release/deps/{name}-0123","fresh":false}}"#
        )
    }

    #[test]
    fn a_cargo_artifact_line_names_its_package_target_and_executable() {
        let line = artifact_line(
            "path+file:///w/crates/capture-suite#0.1.0",
            "test",
            "mock",
            true,
        );
        assert_eq!(
            executable(&parse_message(&line).unwrap()),
            Some(Executable {
                package: "capture-suite".into(),
                target: "mock".into(),
                kind: "test".into(),
                test: true,
                path: PathBuf::from("/w/target/release/deps/mock-0123"),
            })
        );
    }

    #[test]
    fn messages_without_an_executable_are_not_executables() {
        let finished = parse_message(r#"{"reason":"build-finished","success":true}"#).unwrap();
        assert_eq!(executable(&finished), None);
        let lib = parse_message(
            r#"{"reason":"compiler-artifact","package_id":"registry+https://github.com/rust-lang/crates.io-index#anyhow@1.0.100","target":{"kind":["lib"],"name":"anyhow"},"profile":{"test":false},"executable":null}"#,
        )
        .unwrap();
        assert_eq!(executable(&lib), None);
    }

    #[test]
    fn the_package_is_named_by_its_id() {
        assert_eq!(
            package_name("path+file:///w/crates/capture#capture-graphs@0.1.0"),
            Some("capture-graphs")
        );
        assert_eq!(
            package_name("path+file:///w/crates/capture-cuda#0.1.0"),
            Some("capture-cuda")
        );
        assert_eq!(
            package_name("registry+https://github.com/rust-lang/crates.io-index#serde@1.0.0"),
            Some("serde")
        );
        assert_eq!(package_name("no fragment"), None);
    }

    #[test]
    fn a_cargo_line_is_split_into_its_words() {
        let command = cargo(" test --no-run  -p x\n --features a,b ");
        let args: Vec<_> = command.get_args().collect();
        assert_eq!(args, ["test", "--no-run", "-p", "x", "--features", "a,b"]);
    }

    #[test]
    fn malformed_messages_are_errors() {
        for bad in ["{", r#"{"reason":}"#, r#"{"a":1,}"#, "{} x"] {
            assert!(parse_message(bad).is_err(), "{bad:?} parsed");
        }
    }
}
