//! What `cargo test` reported, test binary by test binary.
//!
//! cargo writes `Running tests/mock/main.rs (target/debug/deps/mock-1a2b…)` (or
//! `Running unittests src/lib.rs (…)`, or `Doc-tests capture_core`) before each binary,
//! and libtest ends each with `test result: ok. 12 passed; 0 failed; 1 ignored; …`.
//! cargo's JSON messages before the runs say which package and target each executable
//! is (two packages' `it` binaries both print `tests/it/main.rs`), so every count is
//! attributed to the binary that printed it.

use std::collections::HashMap;
use std::fmt;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result};

use crate::cargo::{Executable, Target, cargo, executable, label, parse_message};

/// A binary's `test result:` line (or a harness-less binary's `<name>: N passed, M
/// failed`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Totals {
    pub(crate) passed: u64,
    pub(crate) failed: u64,
    pub(crate) ignored: u64,
}

impl fmt::Display for Totals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Totals {
            passed,
            failed,
            ignored,
        } = self;
        write!(f, "{passed} passed, {failed} failed, {ignored} ignored")
    }
}

/// One test binary's run: who it is, its result line, and everything it printed.
#[derive(Debug, Clone, Default)]
pub(crate) struct Binary {
    /// The package; empty when cargo's messages did not name this executable.
    pub(crate) package: String,
    /// `lib`, `test`, `bin` or `doctest`.
    pub(crate) kind: String,
    pub(crate) name: String,
    /// `None` when the binary stopped without its result line (it crashed).
    pub(crate) totals: Option<Totals>,
    /// How long its tests ran, from libtest's `finished in 1.84s` (none for a
    /// harness-less binary).
    pub(crate) seconds: Option<f64>,
    lines: Vec<String>,
}

impl fmt::Display for Binary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&label(&self.package, &self.kind, &self.name))
    }
}

impl Binary {
    fn new(package: String, kind: &str, name: &str) -> Self {
        let (kind, name) = (kind.to_string(), name.to_string());
        Self {
            package,
            kind,
            name,
            ..Self::default()
        }
    }

    fn is(&self, target: &Target) -> bool {
        target.is(&self.package, &self.kind, &self.name)
    }

    /// Failed tests; a binary without its result line counts as one failure.
    pub(crate) fn failed(&self) -> u64 {
        self.totals.map_or(1, |t| t.failed)
    }

    pub(crate) fn passed(&self) -> u64 {
        self.totals.map_or(0, |t| t.passed)
    }

    /// The names of the tests that passed (`test <name> ... ok`).
    fn passed_tests(&self) -> impl Iterator<Item = &str> {
        (self.lines.iter()).filter_map(|l| l.strip_prefix("test ")?.strip_suffix(" ... ok"))
    }

    /// How many tests of module `module` (`suite`, `cuda`, …) passed.
    pub(crate) fn passed_in(&self, module: &str) -> usize {
        self.passed_tests()
            .filter(|name| name.split("::").next() == Some(module))
            .count()
    }

    /// Whether the test `name` (`nvrtc::every_builtin_compiles_to_the_shipped_ptx_and_cubins`) passed.
    pub(crate) fn passed_test(&self, name: &str) -> bool {
        self.passed_tests().any(|n| n == name)
    }

    /// The `SKIP:` lines its tests printed (shown with `--show-output`), in order.
    pub(crate) fn skips(&self) -> impl Iterator<Item = &str> {
        self.lines
            .iter()
            .map(String::as_str)
            .filter(|l| l.starts_with("SKIP:"))
    }

    /// The rest of the first line starting with `prefix` (`cuda device: `).
    pub(crate) fn line_after(&self, prefix: &str) -> Option<&str> {
        self.lines.iter().find_map(|l| l.strip_prefix(prefix))
    }
}

/// Every binary one `cargo test` ran, and what failed outside any binary.
#[derive(Debug, Default, Clone)]
pub(crate) struct Results {
    pub(crate) binaries: Vec<Binary>,
    /// Failures no result line counts: the build failing, or cargo exiting non-zero
    /// though every binary reported success.
    pub(crate) other_failures: Vec<String>,
}

impl Results {
    /// The binary `target`, if it ran.
    pub(crate) fn get(&self, target: &Target) -> Option<&Binary> {
        self.binaries.iter().find(|b| b.is(target))
    }

    /// How long the tests of `targets` ran, in seconds (what libtest reported).
    pub(crate) fn seconds(&self, targets: &[&Target]) -> f64 {
        self.binaries
            .iter()
            .filter(|b| targets.iter().any(|t| b.is(t)))
            .filter_map(|b| b.seconds)
            .sum()
    }

    pub(crate) fn passed(&self) -> u64 {
        self.binaries.iter().map(Binary::passed).sum()
    }

    /// Failed tests over every binary, plus [`Results::other_failures`].
    pub(crate) fn failed(&self) -> u64 {
        self.binaries.iter().map(Binary::failed).sum::<u64>() + self.other_failures.len() as u64
    }

    pub(crate) fn ignored(&self) -> u64 {
        self.binaries
            .iter()
            .filter_map(|b| b.totals)
            .map(|t| t.ignored)
            .sum()
    }

    /// Every binary's output lines starting with `prefix`, in order.
    pub(crate) fn lines_starting(&self, prefix: &str) -> Vec<&str> {
        self.binaries
            .iter()
            .flat_map(|b| b.lines.iter())
            .map(|l| l.trim())
            .filter(|l| l.starts_with(prefix))
            .collect()
    }

    /// Adds `other`'s binaries and failures to these.
    pub(crate) fn absorb(&mut self, other: Results) {
        self.binaries.extend(other.binaries);
        self.other_failures.extend(other.other_failures);
    }

    /// Every binary's `SKIP:` lines.
    pub(crate) fn skips(&self) -> Vec<&str> {
        self.binaries.iter().flat_map(Binary::skips).collect()
    }
}

/// Attributes `cargo test` output lines to binaries as they arrive.
pub(crate) struct Reader {
    /// Executables by file name (`mock-1a2b…`), from cargo's messages.
    executables: HashMap<String, Executable>,
    results: Results,
}

impl Reader {
    /// A reader that names binaries after `executables` (and those cargo's messages
    /// name as it reads them).
    pub(crate) fn new(executables: Vec<Executable>) -> Self {
        let mut reader = Self {
            executables: HashMap::new(),
            results: Results::default(),
        };
        executables.into_iter().for_each(|e| reader.built(Some(e)));
        reader
    }

    /// Notes an executable cargo's messages name, if it is a test binary.
    fn built(&mut self, executable: Option<Executable>) {
        let test = executable.filter(|e| e.test);
        if let Some((file, e)) =
            test.and_then(|e| Some((e.path.file_name()?.to_str()?.to_string(), e)))
        {
            self.executables.insert(file, e);
        }
    }

    /// Reads one line of `cargo test`'s output (its stdout and stderr together).
    pub(crate) fn read(&mut self, line: &str) {
        if let Some(binary) = self.starts(line.trim()) {
            self.results.binaries.push(binary);
            return;
        }
        let Some(binary) = self.results.binaries.last_mut() else {
            return; // Build output before the first binary.
        };
        let result = line.strip_prefix("test result: ").or_else(|| {
            // A harness-less binary (`alloc_count`) prints its own `<name>: N passed, M failed`.
            line.strip_prefix(binary.name.as_str())?
                .strip_prefix(": ")
                .filter(|rest| rest.contains(" passed"))
        });
        if let Some(rest) = result {
            binary.totals = Some(Totals {
                passed: number_before(rest, "passed"),
                failed: number_before(rest, "failed"),
                ignored: number_before(rest, "ignored"),
            });
            binary.seconds = rest
                .split("finished in ")
                .nth(1)
                .and_then(|t| t.trim().strip_suffix('s'))
                .and_then(|t| t.parse().ok());
        }
        binary.lines.push(line.to_string());
    }

    /// The binary a `Running …` or `Doc-tests …` line starts.
    fn starts(&self, line: &str) -> Option<Binary> {
        if let Some(lib) = line.strip_prefix("Doc-tests ") {
            let package = self
                .executables
                .values()
                .find(|e| e.kind == "lib" && e.target == lib)
                .map(|e| e.package.clone())
                .unwrap_or_default();
            return Some(Binary::new(package, "doctest", lib));
        }
        let rest = line.strip_prefix("Running ")?;
        let (source, path) = rest.strip_suffix(')')?.rsplit_once(" (")?;
        let file = Path::new(path).file_name()?.to_str()?;
        Some(match self.executables.get(file) {
            Some(e) => Binary::new(e.package.clone(), &e.kind, &e.target),
            None => {
                // Not in cargo's messages: named after the file, `name-hash`.
                let name = file.rsplit_once('-').map_or(file, |(name, _)| name);
                let kind = match source.strip_prefix("unittests ") {
                    Some(src) if src.ends_with("lib.rs") => "lib",
                    Some(_) => "bin",
                    None => "test",
                };
                Binary::new(String::new(), kind, name)
            }
        })
    }

    /// The results, given whether cargo exited successfully.
    pub(crate) fn finish(mut self, success: bool) -> Results {
        if !success && self.results.failed() == 0 {
            let what = if self.results.binaries.is_empty() {
                "cargo test failed before any test ran: the build failed (see above)"
            } else {
                "cargo test failed, though no test binary reported a failure (see above)"
            };
            self.results.other_failures.push(what.to_string());
        }
        self.results
    }
}

/// The number just before `label` in `text` (`3 passed` → 3), or 0.
fn number_before(text: &str, label: &str) -> u64 {
    text.split([';', ','])
        .find_map(|part| part.trim().strip_suffix(label))
        .and_then(|n| n.split_whitespace().last()?.parse().ok())
        .unwrap_or(0)
}

/// Runs `cargo test <cargo_args> -- --show-output` with the environment `configure`
/// sets, echoing its output, and returns each binary's results.
///
/// cargo's JSON messages (`--message-format`) say which executable it built for which
/// target, before any runs. stdout and stderr share one pipe, so cargo's `Running` lines
/// (stderr) stay in order with the binaries' output (stdout).
pub(crate) fn run_tests(cargo_args: &str, configure: impl Fn(&mut Command)) -> Result<Results> {
    run_tests_echoing(cargo_args, configure, true)
}

/// `run_tests`, echoing cargo's output only when `echo`: otherwise all of it (the build's
/// too) is only read, so nothing reaches this process's stdout or stderr (xtask's own
/// tests, whose output the outer `cargo xtask test` reads).
fn run_tests_echoing(
    cargo_args: &str,
    configure: impl Fn(&mut Command),
    echo: bool,
) -> Result<Results> {
    let name = format!("cargo test {cargo_args}");
    if echo {
        println!("xtask: {name}");
    }
    let mut command = cargo(&format!(
        "test {cargo_args} --message-format=json-render-diagnostics -- --show-output"
    ));
    configure(&mut command);
    let (output, input) = std::io::pipe().context("creating a pipe")?;
    command
        .stdout(input.try_clone().context("duplicating a pipe")?)
        .stderr(input);
    let mut child = command
        .spawn()
        .with_context(|| format!("starting {name}"))?;
    // The command holds the pipe's writing end; without dropping it, reading never ends.
    drop(command);
    let mut reader = Reader::new(Vec::new());
    let mut output = BufReader::new(output);
    let mut bytes = Vec::new();
    while output.read_until(b'\n', &mut bytes)? > 0 {
        let line = String::from_utf8_lossy(&bytes);
        let line = line.trim_end_matches(['\n', '\r']);
        if let Some(built) = line.starts_with('{').then(|| parse_message(line)) {
            reader.built(executable(&built?));
        } else {
            if echo {
                println!("{line}");
            }
            reader.read(line);
        }
        bytes.clear();
    }
    let status = child.wait()?;
    Ok(reader.finish(status.success()))
}

/// The reason of a `SKIP: <what>: <reason>` line ("CUDA unavailable: libcuda.so not
/// found"), or the whole line after `SKIP: ` when it names no test.
pub(crate) fn skip_reason(line: &str) -> &str {
    let rest = line.strip_prefix("SKIP:").unwrap_or(line).trim_start();
    match rest.split_once(": ") {
        Some((_, why)) if !why.is_empty() => why,
        _ => rest,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::PathBuf;

    use super::*;

    fn exe(package: &str, kind: &str, target: &str, file: &str) -> Executable {
        Executable {
            package: package.into(),
            target: target.into(),
            kind: kind.into(),
            test: true,
            path: PathBuf::from(format!("/w/target/debug/deps/{file}")),
        }
    }

    /// Results of `output` (`cargo test` as it prints, indented as the test likes),
    /// naming the executables of the workspace's new layout.
    pub(crate) fn results(output: &str, success: bool) -> Results {
        let mut reader = Reader::new(vec![
            exe("capture-core", "lib", "capture_core", "capture_core-11"),
            exe("capture-suite", "test", "core", "core-22"),
            exe("capture-suite", "test", "mock", "mock-33"),
            exe("capture-suite", "test", "alloc_count", "alloc_count-44"),
            exe("capture-vulkan", "test", "it", "it-55"),
            exe("capture-cuda", "test", "it", "it-66"),
            exe("capture-mock", "lib", "capture_mock", "capture_mock-77"),
            exe("capture-vulkan", "test", "alloc_count", "alloc_count-99"),
            exe(
                "capture-vulkan",
                "lib",
                "capture_vulkan",
                "capture_vulkan-88",
            ),
        ]);
        for line in output.lines() {
            reader.read(line.trim_start());
        }
        reader.finish(success)
    }

    const TWO_ITS: &str = "
        Running tests/it/main.rs (target/debug/deps/it-66)
        running 2 tests
        test cuda::capture_replay ... ok
        test nvrtc::every_builtin_compiles_to_the_shipped_ptx_and_cubins ... ok
        SKIP: capture_replay: CUDA unavailable: libcuda.so not found
        test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.01s
        Running tests/it/main.rs (target/debug/deps/it-55)
        running 3 tests
        test host_visible::capture_replay ... ok
        test forced_staging::capture_replay ... ok
        test canary::executing_a_non_simultaneous_secondary_twice_is_reported ... FAILED
        test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out
    ";

    #[test]
    fn binaries_of_the_same_name_are_told_apart_by_their_executable() {
        let r = results(TWO_ITS, false);
        let cuda = r.get(&Target::test("capture-cuda", "it")).unwrap();
        assert_eq!(
            cuda.totals,
            Some(Totals {
                passed: 2,
                failed: 0,
                ignored: 0
            })
        );
        assert_eq!(cuda.passed_in("cuda"), 1);
        assert!(cuda.passed_test("nvrtc::every_builtin_compiles_to_the_shipped_ptx_and_cubins"));
        assert_eq!(
            cuda.skips().collect::<Vec<_>>(),
            ["SKIP: capture_replay: CUDA unavailable: libcuda.so not found"]
        );
        let vulkan = r.get(&Target::test("capture-vulkan", "it")).unwrap();
        assert_eq!(
            (
                vulkan.passed_in("host_visible"),
                vulkan.passed_in("forced_staging"),
                vulkan.passed_in("canary"),
                vulkan.failed()
            ),
            (1, 1, 0, 1)
        );
        assert_eq!(vulkan.skips().count(), 0);
        assert_eq!((r.passed(), r.failed(), r.ignored()), (4, 1, 0));
        assert!(r.other_failures.is_empty(), "the failure is counted");
        assert_eq!(
            r.get(&Target::test("capture-suite", "mock")).map(|_| ()),
            None
        );
    }

    #[test]
    fn unit_doc_and_harnessless_binaries_are_read() {
        let r = results(
            "
            Compiling capture-core v0.1.0
            test result: ok. 99 passed; 0 failed; 0 ignored
            Running unittests src/lib.rs (target/debug/deps/capture_core-11)
            test result: ok. 30 passed; 0 failed; 2 ignored; 0 measured
            Running tests/alloc_count/main.rs (/tmp/t/debug/deps/alloc_count-44)
            test taint::mark ... ok
            alloc_count: 9 passed, 0 failed
            Doc-tests capture_core
            test result: ok. 1 passed; 0 failed; 0 ignored
            Running unittests src/main.rs (target/debug/deps/capture-99)
            test result: ok. 4 passed; 0 failed; 0 ignored
            ",
            true,
        );
        let names: Vec<String> = r.binaries.iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            [
                "capture-core unit tests",
                "capture-suite --test alloc_count",
                "capture-core doc tests",
                "capture --bin capture",
            ],
            "output before the first binary belongs to none"
        );
        let alloc = r
            .get(&Target::test("capture-suite", "alloc_count"))
            .unwrap();
        assert_eq!(alloc.passed(), 9);
        assert_eq!((r.passed(), r.failed(), r.ignored()), (44, 0, 2));
    }

    #[test]
    fn a_binary_without_its_result_line_failed() {
        let r = results(
            "
            Running tests/mock/main.rs (target/debug/deps/mock-33)
            running 40 tests
            test suite::capture_replay ... ok
            error: test failed, to rerun pass `-p capture-suite --test mock`
            ",
            false,
        );
        let mock = r.get(&Target::test("capture-suite", "mock")).unwrap();
        assert_eq!(
            (mock.totals, mock.failed(), mock.passed_in("suite")),
            (None, 1, 1)
        );
        assert_eq!(r.failed(), 1);
        assert!(r.other_failures.is_empty());
    }

    #[test]
    fn cargo_failing_with_nothing_failed_is_a_failure() {
        let r = results("error: could not compile `capture-core`", false);
        assert_eq!(r.failed(), 1);
        assert_eq!(r.other_failures.len(), 1);
        assert_eq!(results("", true).failed(), 0);
    }

    /// Writes `files` (path, text) under a fresh scratch directory.
    fn scratch(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("xtask-results-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        root
    }

    /// The real thing: cargo builds and runs a scratch workspace whose two packages both
    /// have an `it` test binary, and each count lands on the binary that printed it.
    #[test]
    fn a_real_cargo_test_is_attributed_binary_by_binary() {
        let package = |name: &str| {
            format!(
                "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\n\
                 [[test]]\nname = \"it\"\npath = \"tests/it/main.rs\"\n"
            )
        };
        let (alpha, beta) = (package("alpha"), package("beta-pkg"));
        let beta_manifest = format!(
            "{beta}\n[[test]]\nname = \"counted\"\npath = \"tests/counted.rs\"\nharness = false\n"
        );
        let root = scratch(
            "cargo",
            &[
                (
                    "Cargo.toml",
                    "[workspace]\nresolver = \"3\"\nmembers = [\"alpha\", \"beta\"]\n",
                ),
                ("alpha/Cargo.toml", &alpha),
                ("alpha/src/lib.rs", "#[test]\nfn unit() {}\n"),
                (
                    "alpha/tests/it/main.rs",
                    "mod suite {\n#[test]\nfn a() { println!(\"SKIP: a: no device\"); }\n\
                     #[test]\nfn b() {}\n#[test]\n#[ignore = \"slow\"]\nfn c() {}\n}\n",
                ),
                ("beta/Cargo.toml", &beta_manifest),
                ("beta/src/lib.rs", ""),
                (
                    "beta/tests/it/main.rs",
                    "#[test]\nfn fails() { panic!(\"no\") }\n#[test]\nfn passes() {}\n",
                ),
                (
                    "beta/tests/counted.rs",
                    "fn main() { println!(\"counted: 3 passed, 0 failed\"); }\n",
                ),
            ],
        );
        let target = root.join("target");
        // Not echoed: the outer `cargo xtask test` reads this binary's output, and the
        // scratch workspace's `Running` and `test result:` lines would pass for its own.
        let r = run_tests_echoing(
            "--workspace --no-fail-fast",
            |c| {
                c.current_dir(&root).env("CARGO_TARGET_DIR", &target);
            },
            false,
        )
        .unwrap();
        let alpha_it = r.get(&Target::test("alpha", "it")).expect("alpha's it ran");
        assert_eq!(
            alpha_it.totals,
            Some(Totals {
                passed: 2,
                failed: 0,
                ignored: 1
            })
        );
        assert_eq!(alpha_it.passed_in("suite"), 2);
        assert_eq!(alpha_it.skips().collect::<Vec<_>>(), ["SKIP: a: no device"]);
        let beta_it = r
            .get(&Target::test("beta-pkg", "it"))
            .expect("beta's it ran");
        assert_eq!((beta_it.passed(), beta_it.failed()), (1, 1));
        assert_eq!(beta_it.skips().count(), 0);
        let counted = r.get(&Target::test("beta-pkg", "counted")).unwrap();
        assert_eq!(counted.passed(), 3);
        assert_eq!(r.get(&Target::lib("alpha", "alpha")).unwrap().passed(), 1);
        assert!(
            r.binaries
                .iter()
                .any(|b| b.kind == "doctest" && b.package == "beta-pkg")
        );
        assert_eq!((r.passed(), r.failed(), r.ignored()), (7, 1, 1));
        assert!(r.other_failures.is_empty(), "{:?}", r.other_failures);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn numbers_are_read_before_their_labels() {
        let line =
            "ok. 12 passed; 1 failed; 3 ignored; 0 measured; 0 filtered out; finished in 0.01s";
        assert_eq!(number_before(line, "passed"), 12);
        assert_eq!(number_before(line, "failed"), 1);
        assert_eq!(number_before(line, "ignored"), 3);
        assert_eq!(number_before("FAILED. 2 passed; 7 failed", "failed"), 7);
        assert_eq!(number_before("2 passed, 0 failed", "passed"), 2);
        assert_eq!(number_before("2 passed, 0 failed", "ignored"), 0);
    }

    #[test]
    fn a_skip_reason_drops_the_test_name() {
        assert_eq!(
            skip_reason("SKIP: capture_replay: CUDA unavailable: no driver"),
            "CUDA unavailable: no driver"
        );
        assert_eq!(skip_reason("SKIP: no reason"), "no reason");
    }
}
