//! `cargo xtask tidy`: the project's own conventions, checked over the source tree.
//!
//! - every `.rs` file starts with a `//!` header;
//! - no stubs or debug leftovers in shipped code (the three macros named in `STUBS`);
//! - no unsafe in `capture-core` or `capture-mock`, each of which forbids it;
//! - `capture-core` depends on neither cudarc nor ash;
//! - every `.snap` file is referenced by the tests of its crate, and none waits for review.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// Built from pieces so this file does not trip its own check.
const STUBS: [&str; 3] = [
    concat!("todo", "!("),
    concat!("dbg", "!("),
    concat!("unimplemented", "!("),
];

/// Every problem found, one line each; empty when the tree is tidy.
pub(crate) fn check(root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let sources = rust_files(root)?;
    for file in &sources {
        let text =
            fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
        let rel = file
            .strip_prefix(root)
            .unwrap_or(file)
            .display()
            .to_string();
        if !text.trim_start().starts_with("//!") {
            problems.push(format!("{rel}: does not start with a `//!` header"));
        }
        let shipped = !rel.contains("/tests/") && !rel.ends_with("/tests.rs");
        for stub in STUBS {
            if shipped && text.contains(stub) {
                problems.push(format!("{rel}: contains `{stub}`"));
            }
        }
        if text.contains(concat!("#[ignore", "]")) {
            problems.push(format!("{rel}: an ignored test without a reason"));
        }
        let no_unsafe = ["crates/capture-core/", "crates/capture-mock/"]
            .iter()
            .any(|c| rel.starts_with(c));
        if no_unsafe && mentions_unsafe_code(&text) {
            problems.push(format!("{rel}: unsafe code in a crate that forbids it"));
        }
        let backend = ["crates/capture-vulkan/src/", "crates/capture-cuda/src/"]
            .iter()
            .any(|c| rel.starts_with(c));
        if backend && !rel.ends_with("/raw.rs") && mentions_unsafe_code(&text) {
            problems.push(format!("{rel}: unsafe code outside the backend's raw.rs"));
        }
        if backend && rel.ends_with("/raw.rs") {
            for line in unsafe_without_safety(&text) {
                problems.push(format!(
                    "{rel}:{line}: unsafe without a `// SAFETY:` line above it"
                ));
            }
        }
    }
    for lib in [
        "crates/capture-core/src/lib.rs",
        "crates/capture-mock/src/lib.rs",
    ] {
        let text = fs::read_to_string(root.join(lib)).unwrap_or_default();
        if !text.contains("#![forbid(unsafe_code)]") {
            problems.push(format!("{lib}: lacks #![forbid(unsafe_code)]"));
        }
    }
    let manifest = fs::read_to_string(root.join("crates/capture-core/Cargo.toml"))?;
    for gpu in ["cudarc", "ash"] {
        if manifest.lines().any(|l| l.trim_start().starts_with(gpu)) {
            problems.push(format!("crates/capture-core/Cargo.toml: depends on {gpu}"));
        }
    }
    problems.extend(snapshot_problems(root, &sources)?);
    Ok(problems)
}

/// Whether `text` has an `unsafe` block, fn, impl or trait outside comments and strings
/// a tidy check would itself use.
fn mentions_unsafe_code(text: &str) -> bool {
    text.lines().any(|line| {
        let code = line.split("//").next().unwrap_or("");
        [
            "unsafe {",
            "unsafe fn",
            "unsafe impl",
            "unsafe trait",
            "unsafe extern",
        ]
        .iter()
        .any(|u| code.contains(u))
    })
}

/// Lines (1-based) using `unsafe` with no `// SAFETY:` comment in the eight lines above.
fn unsafe_without_safety(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    (0..lines.len())
        .filter(|&i| mentions_unsafe_code(lines[i]))
        .filter(|&i| {
            let from = i.saturating_sub(8);
            !lines[from..=i].iter().any(|l| l.contains("SAFETY:"))
        })
        .map(|i| i + 1)
        .collect()
}

/// Snapshots nobody references, and snapshots waiting for review.
fn snapshot_problems(root: &Path, sources: &[PathBuf]) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for crate_dir in subdirs(&root.join("crates"))? {
        let snaps: Vec<PathBuf> = walk(&crate_dir)?
            .into_iter()
            .filter(|p| {
                let name = p.to_string_lossy();
                name.ends_with(".snap")
                    || name.ends_with(".snap.new")
                    || name.ends_with(".pending-snap")
            })
            .collect();
        if snaps.is_empty() {
            continue;
        }
        let crate_sources: String = sources
            .iter()
            .filter(|s| s.starts_with(&crate_dir))
            .filter_map(|s| fs::read_to_string(s).ok())
            .collect();
        for snap in snaps {
            let rel = snap
                .strip_prefix(root)
                .unwrap_or(&snap)
                .display()
                .to_string();
            let file = snap
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !file.ends_with(".snap") {
                problems.push(format!(
                    "{rel}: a snapshot waits for review (cargo insta review)"
                ));
                continue;
            }
            // `module__name.snap`: the test names `name` explicitly.
            let stem = file.trim_end_matches(".snap");
            let name = stem.rsplit("__").next().unwrap_or(stem);
            if !crate_sources.contains(&format!("\"{name}\"")) {
                problems.push(format!(
                    "{rel}: no test of this crate names snapshot `{name}`"
                ));
            }
        }
    }
    Ok(problems)
}

fn rust_files(root: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for top in ["crates", "xtask"] {
        files.extend(
            walk(&root.join(top))?
                .into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "rs")),
        );
    }
    files.sort();
    Ok(files)
}

fn subdirs(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if dir.is_dir() {
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            if path.is_dir() {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if !dir.is_dir() {
        return Ok(out);
    }
    for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if name == "target" || name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            out.extend(walk(&path)?);
        } else {
            out.push(path);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_workspace_is_tidy() {
        let problems = check(&crate::workspace_root()).unwrap();
        assert!(problems.is_empty(), "tidy:\n{}", problems.join("\n"));
    }

    #[test]
    fn unsafe_needs_a_safety_line_above_it() {
        let filler = "let x = 1;\n".repeat(9);
        let text = format!(
            "fn a() {{\n    // SAFETY: fine.\n    unsafe {{ f() }};\n}}\n{filler}fn b() {{ unsafe {{ g() }} }}\n"
        );
        assert_eq!(unsafe_without_safety(&text), vec![14]);
    }

    #[test]
    fn unsafe_code_is_seen_and_comments_are_not() {
        assert!(mentions_unsafe_code("let x = unsafe { f() };"));
        assert!(!mentions_unsafe_code("// an unsafe { block } in a comment"));
        assert!(!mentions_unsafe_code("#![forbid(unsafe_code)]"));
    }
}
