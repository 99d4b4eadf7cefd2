//! The closing summary of `cargo xtask test`: each backend's row, the `SKIP:` reasons,
//! each test binary's result line, and the totals.

use crate::results::{Results, skip_reason};

/// How one backend fared.
pub(crate) struct Backend {
    name: &'static str,
    pub(crate) status: &'static str,
    pub(crate) why: String,
    /// How long the row's tests ran.
    seconds: Option<f64>,
}

impl Backend {
    fn new(name: &'static str, status: &'static str, why: String) -> Self {
        Self {
            name,
            status,
            why,
            seconds: None,
        }
    }

    pub(crate) fn ran(name: &'static str, what: String) -> Self {
        Self::new(name, "ran", what)
    }

    pub(crate) fn failed(name: &'static str, why: String) -> Self {
        Self::new(name, "FAILED", why)
    }

    pub(crate) fn skipped(name: &'static str, why: String) -> Self {
        Self::new(name, "skipped", why)
    }

    /// `ran` with what ran, or FAILED with why.
    pub(crate) fn of(name: &'static str, row: Result<String, String>) -> Self {
        match row {
            Ok(what) => Self::ran(name, what),
            Err(why) => Self::failed(name, why),
        }
    }

    /// The row, with how long its tests ran.
    pub(crate) fn took(self, seconds: f64) -> Self {
        Self {
            seconds: Some(seconds),
            ..self
        }
    }

    pub(crate) fn name(&self) -> &str {
        self.name
    }

    pub(crate) fn is_failed(&self) -> bool {
        self.status == "FAILED"
    }
}

pub(crate) struct Summary {
    pub(crate) results: Results,
    pub(crate) backends: Vec<Backend>,
}

impl Summary {
    pub(crate) fn print(&self) {
        println!();
        println!("{}", self.render());
    }

    /// The summary's text; its last line is `N passed, M failed` alone.
    fn render(&self) -> String {
        let r = &self.results;
        let mut out = vec!["summary:".to_string()];
        for b in &self.backends {
            let time = b.seconds.map_or_else(String::new, |s| format!("{s:.1} s"));
            out.push(format!(
                "  {:<10} {:<8} {:>8}  {}",
                b.name, b.status, time, b.why
            ));
        }
        // The model-based tests name their case counts (`model: 2000 cases on …`).
        for line in r.lines_starting("model: ") {
            out.push(format!("  {line}"));
        }
        for skip in grouped_skips(&r.skips()) {
            out.push(format!("  {skip}"));
        }
        out.push(format!(
            "  {} test binaries, {} ignored, {} said SKIP:",
            r.binaries.len(),
            r.ignored(),
            r.skips().len()
        ));
        for b in &r.binaries {
            let result = b.totals.map_or_else(
                || "FAILED: no `test result:` line (it crashed or was killed)".to_string(),
                |t| t.to_string(),
            );
            out.push(format!("    {:<36} {result}", b.to_string()));
        }
        for failure in &r.other_failures {
            out.push(format!("  FAILED: {failure}"));
        }
        out.push(format!("{} passed, {} failed", r.passed(), r.failed()));
        out.join("\n")
    }
}

/// The `SKIP:` lines, those sharing a reason folded into one (the whole suite skipping
/// for want of a driver is one line, not thirty-three).
fn grouped_skips(skips: &[&str]) -> Vec<String> {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for &line in skips {
        let why = skip_reason(line);
        match groups.iter_mut().find(|(w, _)| *w == why) {
            Some((_, lines)) => lines.push(line),
            None => groups.push((why, vec![line])),
        }
    }
    groups
        .into_iter()
        .map(|(why, lines)| match lines.as_slice() {
            [one] => (*one).to_string(),
            many => format!("SKIP: {why} ({} tests)", many.len()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::tests::results;

    #[test]
    fn skips_sharing_a_reason_are_one_line() {
        let skips = [
            "SKIP: capture_replay: CUDA unavailable: libcuda.so not found",
            "SKIP: canary: the validation layer is not installed",
            "SKIP: input_rewrite: CUDA unavailable: libcuda.so not found",
        ];
        assert_eq!(
            grouped_skips(&skips),
            [
                "SKIP: CUDA unavailable: libcuda.so not found (2 tests)",
                "SKIP: canary: the validation layer is not installed",
            ]
        );
    }

    #[test]
    fn the_summary_lists_each_binary_and_ends_with_the_totals() {
        let summary = Summary {
            results: results(
                "
                Running tests/mock/main.rs (target/debug/deps/mock-33)
                test suite::capture_replay ... ok
                SKIP: capture_replay: no reason given
                model: 2000 cases on Faulty<MockBackend>, 0 violations
                test result: ok. 40 passed; 0 failed; 1 ignored
                Running tests/it/main.rs (target/debug/deps/it-66)
                test cuda::capture_replay ... FAILED
                ",
                false,
            ),
            backends: vec![
                Backend::failed("cuda", "it crashed".into()),
                Backend::ran("core", "fine".into()).took(12.25),
            ],
        };
        let text = summary.render();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "summary:",
                "  cuda       FAILED             it crashed",
                "  core       ran        12.2 s  fine",
                "  model: 2000 cases on Faulty<MockBackend>, 0 violations",
                "  SKIP: capture_replay: no reason given",
                "  2 test binaries, 1 ignored, 1 said SKIP:",
                "    capture-suite --test mock            40 passed, 0 failed, 1 ignored",
                "    capture-cuda --test it               FAILED: no `test result:` line (it crashed or was killed)",
                "40 passed, 1 failed",
            ]
        );
    }
}
