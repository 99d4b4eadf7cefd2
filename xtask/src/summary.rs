//! The closing summary of `cargo xtask test`: totals, and each backend's status.

use crate::test::{Counts, skip_reason};

/// How one backend fared.
pub(crate) struct Backend {
    name: &'static str,
    status: &'static str,
    why: String,
}

impl Backend {
    pub(crate) fn ran(name: &'static str, what: String) -> Self {
        Self {
            name,
            status: "ran",
            why: what,
        }
    }

    pub(crate) fn failed(name: &'static str, why: &str) -> Self {
        Self {
            name,
            status: "FAILED",
            why: why.to_string(),
        }
    }

    pub(crate) fn skipped(name: &'static str, why: &str) -> Self {
        Self {
            name,
            status: "skipped",
            why: why.to_string(),
        }
    }
}

#[cfg(test)]
impl Backend {
    pub(crate) fn status(&self) -> &str {
        self.status
    }

    pub(crate) fn why(&self) -> &str {
        &self.why
    }
}

pub(crate) struct Summary {
    pub(crate) counts: Counts,
    pub(crate) backends: Vec<Backend>,
}

impl Summary {
    pub(crate) fn print(&self) {
        println!();
        println!("summary:");
        for b in &self.backends {
            println!("  {:<8} {:<10} {}", b.name, b.status, b.why);
        }
        for skip in grouped_skips(&self.counts.skips) {
            println!("  {skip}");
        }
        println!(
            "  {} test binaries, {} ignored",
            self.counts.binaries, self.counts.ignored
        );
        println!(
            "xtask: {} passed, {} failed",
            self.counts.passed, self.counts.failed
        );
    }
}

/// The `SKIP:` lines, those sharing a reason folded into one (the whole suite skipping
/// for want of a driver is one line, not thirty-three).
fn grouped_skips(skips: &[String]) -> Vec<String> {
    let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
    for line in skips {
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

    #[test]
    fn skips_sharing_a_reason_are_one_line() {
        let skips: Vec<String> = [
            "SKIP: capture_replay: CUDA unavailable: libcuda.so not found",
            "SKIP: canary: the validation layer is not installed",
            "SKIP: input_rewrite: CUDA unavailable: libcuda.so not found",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            grouped_skips(&skips),
            [
                "SKIP: CUDA unavailable: libcuda.so not found (2 tests)",
                "SKIP: canary: the validation layer is not installed",
            ]
        );
    }
}
