//! The closing summary of `cargo xtask test`: totals, and each backend's status.

use crate::test::Counts;

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

    pub(crate) fn not_built(name: &'static str, why: &str) -> Self {
        Self {
            name,
            status: "not built",
            why: why.to_string(),
        }
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
        for skip in &self.counts.skips {
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
