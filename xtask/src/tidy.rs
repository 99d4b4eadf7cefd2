//! `cargo xtask tidy`: the project's own conventions that no rustc or clippy lint checks,
//! over the source tree: `//!` headers, where unsafe code may live and the `// SAFETY:`
//! lines clippy does not ask for, capture-cuda's tests opening CUDA only through
//! `tests/it/support.rs`, a core free of GPU bindings, no unused dependency, no
//! file-import circle in a crate (`imports`), the snapshots each named by code and none
//! pending, and no pointer outside the repository. `docs/testing.md`, "What tidy checks,
//! and why", says what each rule guards and which lints serve instead of the rules
//! dropped.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

use crate::gpu_bundle::SNAPSHOTS;
use crate::manifest::{self, Table};

/// The crates with no unsafe code at all; each `lib.rs` says `#![forbid(unsafe_code)]`.
const FORBID_UNSAFE: [&str; 4] = [
    "crates/capture-core",
    "crates/capture-mock",
    "crates/capture-scenarios",
    "crates/capture-suite",
];

/// The crate whose scenario list names the shared snapshots (a scenario's name is its
/// variant's identifier, so a whole word of that crate's code).
const SCENARIOS: &str = "crates/capture-scenarios";

/// The backends (and the CUDA driver model's kernel library, whose FFI is in its
/// `raw.rs` too), whose unsafe code lives in the files `UNSAFE_FILES` name alone.
const BACKENDS: [&str; 3] = [
    "crates/capture-vulkan",
    "crates/capture-cuda",
    "crates/capture-cuda-model",
];

/// What opens a CUDA device (or loads a module in its context) in a test: only
/// capture-cuda's `tests/it/support.rs` may call them, under the suite lock.
const CUDA_OPENERS: [&str; 2] = ["CudaBackend::new(", "Floor::new("];

/// A backend's files that may hold unsafe code: its FFI at the bottom, the `unsafe fn`s
/// of its public API that take a caller's driver objects, the user's own work and the
/// caller's own memory (whose constructors are `unsafe`: what they touch cannot be
/// checked).
const UNSAFE_FILES: [&str; 4] = ["/raw.rs", "/adopt.rs", "/work.rs", "/import.rs"];

/// The programs' and the decoder's files with unsafe code: the decoder's cuBLAS, its FFI
/// and the foreign work that calls it, the thread CPU clock (`clock_gettime`), the
/// bench's hand-written floors' FFI (ash, the CUDA driver API), and the exported entry
/// of the decoder's kernel library for the CUDA driver model (each crate's `lib.rs`
/// denies unsafe code elsewhere; capture-cli's forbids it).
const PROGRAM_UNSAFE_FILES: [&str; 5] = [
    "crates/capture-decode/src/cublas.rs",
    "crates/capture-decode/src/cpu_time.rs",
    "crates/capture-bench/src/floor/vulkan/raw.rs",
    "crates/capture-bench/src/floor/cuda/raw.rs",
    "crates/capture-decode/examples/cuda_model_kernels.rs",
];

/// The programs and the decoder: unsafe code only in [`PROGRAM_UNSAFE_FILES`].
const PROGRAMS: [&str; 3] = [
    "crates/capture-cli",
    "crates/capture-bench",
    "crates/capture-decode",
];

pub(crate) const HELP: &str = "usage: cargo xtask tidy

Checks the project's own conventions that no rustc or clippy lint checks (docs/testing.md,
\"What tidy checks, and why\") and prints each problem found; fails if there is one.";

/// `cargo xtask tidy` (and the gate's tidy step): prints each problem, failing on any.
pub(crate) fn run(args: &[String]) -> Result<()> {
    if let Some(arg) = args.first() {
        bail!("unknown option {arg:?}\n\n{HELP}");
    }
    let problems = check(&crate::cargo::workspace_root())?;
    for p in &problems {
        eprintln!("tidy: {p}");
    }
    if !problems.is_empty() {
        bail!("tidy found {} problem(s)", problems.len());
    }
    println!("xtask: tidy ok");
    Ok(())
}

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
        let in_crate = |dir: &str| rel.starts_with(&format!("{dir}/"));
        if FORBID_UNSAFE.iter().any(|c| in_crate(c)) && mentions_unsafe_code(&text) {
            problems.push(format!("{rel}: unsafe code in a crate that forbids it"));
        }
        let backend = BACKENDS.iter().any(|c| in_crate(&format!("{c}/src")));
        let unsafe_file = UNSAFE_FILES.iter().any(|f| rel.ends_with(f));
        if backend && !unsafe_file && mentions_unsafe_code(&text) {
            problems.push(format!(
                "{rel}: unsafe code outside the backend's raw.rs, adopt.rs, work.rs and import.rs"
            ));
        }
        if rel.starts_with("crates/capture-cuda/tests/") && !rel.ends_with("/support.rs") {
            for opener in CUDA_OPENERS {
                if text
                    .lines()
                    .any(|l| l.split("//").next().unwrap_or("").contains(opener))
                {
                    problems.push(format!(
                        "{rel}: calls `{opener}` directly: open CUDA through tests/it/support.rs, \
                         which holds the suite lock (every backend in the process shares one \
                         context and capture domain)"
                    ));
                }
            }
        }
        let program = PROGRAMS.iter().any(|c| in_crate(c));
        let program_unsafe = PROGRAM_UNSAFE_FILES.contains(&rel.as_str());
        if program && !program_unsafe && mentions_unsafe_code(&text) {
            problems.push(format!(
                "{rel}: unsafe code in the program outside {}",
                PROGRAM_UNSAFE_FILES.join(" and ")
            ));
        }
        // The backend's tests and examples call its unsafe API as a user would (the driver
        // model's kernel library exports its entry), each use justified too.
        let backend_test = BACKENDS
            .iter()
            .any(|c| in_crate(&format!("{c}/tests")) || in_crate(&format!("{c}/examples")));
        if (backend && unsafe_file) || backend_test || program_unsafe {
            for line in unsafe_without_safety(&text) {
                problems.push(format!(
                    "{rel}:{line}: unsafe without a `// SAFETY:` line above it"
                ));
            }
        }
    }
    for krate in FORBID_UNSAFE {
        let lib = format!("{krate}/src/lib.rs");
        let text = fs::read_to_string(root.join(&lib)).unwrap_or_default();
        if !text.contains("#![forbid(unsafe_code)]") {
            problems.push(format!("{lib}: lacks #![forbid(unsafe_code)]"));
        }
    }
    let core = "crates/capture-core/Cargo.toml";
    let manifest =
        fs::read_to_string(root.join(core)).with_context(|| format!("reading {core}"))?;
    for dep in manifest::dependencies(&manifest).with_context(|| format!("reading {core}"))? {
        if ["cudarc", "ash", "libloading"].contains(&dep.name.as_str()) {
            problems.push(format!("{core}:{}: depends on {}", dep.line, dep.name));
        }
    }
    problems.extend(dependency_problems(root)?);
    problems.extend(snapshot_problems(root, &sources)?);
    problems.extend(circle_problems(root)?);
    problems.extend(outside_pointers(root)?);
    Ok(problems)
}

/// Built from pieces so this file does not trip its own check.
const OUTSIDE: &str = concat!("../", "shared");

/// Markdown and Rust files that point at the brief's files beside the repository, which
/// a clone does not have.
fn outside_pointers(root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    for file in walk(root)? {
        let markdown = file.extension().is_some_and(|e| e == "md");
        let rust = file.extension().is_some_and(|e| e == "rs");
        if !(markdown || rust) {
            continue;
        }
        let text =
            fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        for (i, line) in text.lines().enumerate() {
            if line.contains(OUTSIDE) {
                let rel = file.strip_prefix(root).unwrap_or(&file).display();
                problems.push(format!(
                    "{rel}:{}: points outside the repository ({OUTSIDE})",
                    i + 1
                ));
            }
        }
    }
    Ok(problems)
}

/// Files of one crate's `src/` that import each other in a circle (`imports`): every
/// crate is layered, its lowest module (a backend's FFI in `raw.rs`) importing nothing
/// from the modules above it.
fn circle_problems(root: &Path) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let mut dirs = subdirs(&root.join("crates"))?;
    dirs.push(root.join("xtask"));
    for dir in dirs {
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let graph = crate::imports::Graph::read(&src)?;
        for circle in graph.circles(root) {
            problems.push(format!("files import each other in a circle: {circle}"));
        }
    }
    Ok(problems)
}

/// Dependencies a workspace member declares and its code never names.
fn dependency_problems(root: &Path) -> Result<Vec<String>> {
    let workspace = fs::read_to_string(root.join("Cargo.toml"))
        .with_context(|| format!("reading {}/Cargo.toml", root.display()))?;
    let mut problems = Vec::new();
    for member in manifest::workspace_members(&workspace)? {
        let dir = root.join(&member);
        let path = dir.join("Cargo.toml");
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let code = |dirs: &[&str]| -> Result<String> {
            let mut text = String::new();
            for d in dirs {
                for file in walk(&dir.join(d))?
                    .iter()
                    .filter(|f| f.extension().is_some_and(|e| e == "rs"))
                {
                    text.push_str(&fs::read_to_string(file)?);
                    text.push('\n');
                }
            }
            Ok(text)
        };
        let normal = code(&["src", "build.rs"])?;
        let build = code(&["build.rs"])?;
        let dev = code(&["src", "tests", "benches", "examples"])?;
        for dep in
            manifest::dependencies(&text).with_context(|| format!("reading {}", path.display()))?
        {
            let ident = dep.ident();
            let (code, places) = match dep.table {
                Table::Normal => (&normal, "src/ or build.rs"),
                Table::Build => (&build, "build.rs"),
                Table::Dev => (&dev, "src/, tests/, benches/ or examples/"),
            };
            if names(code, &ident) {
                continue;
            }
            let hint = if dep.table == Table::Normal && names(&dev, &ident) {
                " (only its tests do: make it a [dev-dependencies] entry)"
            } else {
                " (remove it)"
            };
            problems.push(format!(
                "{member}/Cargo.toml:{}: {} declares `{}`, and nothing in {places} names `{ident}`{hint}",
                dep.line,
                dep.table.name(),
                dep.name,
            ));
        }
    }
    Ok(problems)
}

/// Whether `code` has `ident` as a whole word (`capture_core`, not `capture_core_x`).
fn names(code: &str, ident: &str) -> bool {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(ident).any(|(at, _)| {
        !code[..at].chars().next_back().is_some_and(word)
            && !code[at + ident.len()..].chars().next().is_some_and(word)
    })
}

/// What starts unsafe code: a block or an impl (whose `// SAFETY:` comment clippy's
/// `undocumented_unsafe_blocks` asks for), then what that lint does not check.
const UNSAFE: [&str; 5] = [
    "unsafe {",
    "unsafe impl",
    "unsafe fn",
    "unsafe trait",
    "unsafe extern",
];

/// Whether `text` has any of `kinds` outside `//` comments.
fn has_unsafe(text: &str, kinds: &[&str]) -> bool {
    text.lines().any(|line| {
        let code = line.split("//").next().unwrap_or("");
        kinds.iter().any(|u| code.contains(u))
    })
}

/// Whether `text` has unsafe code of any kind.
fn mentions_unsafe_code(text: &str) -> bool {
    has_unsafe(text, &UNSAFE)
}

/// Lines (1-based) with an `unsafe fn`, `unsafe trait` or `unsafe extern` and no
/// `// SAFETY:` comment in the eight lines above.
fn unsafe_without_safety(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    (0..lines.len())
        .filter(|&i| has_unsafe(lines[i], &UNSAFE[2..]))
        .filter(|&i| {
            let from = i.saturating_sub(8);
            !lines[from..=i].iter().any(|l| l.contains("SAFETY:"))
        })
        .map(|i| i + 1)
        .collect()
}

/// A missing shared snapshot directory, snapshots nobody references, and snapshots
/// waiting for review.
fn snapshot_problems(root: &Path, sources: &[PathBuf]) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let shared = walk(&root.join(SNAPSHOTS))?;
    if !shared
        .iter()
        .any(|p| p.extension().is_some_and(|e| e == "snap"))
    {
        problems.push(format!(
            "{SNAPSHOTS}: holds no snapshot (the scenario suite's shared snapshots live here)"
        ));
    }
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
        let code_of = |dir: &Path| -> String {
            sources
                .iter()
                .filter(|s| s.starts_with(dir))
                .filter_map(|s| fs::read_to_string(s).ok())
                .collect()
        };
        let crate_sources = code_of(&crate_dir);
        let scenario_sources = code_of(&root.join(SCENARIOS));
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
            if snap.starts_with(root.join(SNAPSHOTS)) {
                if !names(&scenario_sources, name) {
                    problems.push(format!(
                        "{rel}: no scenario of {SCENARIOS} is named `{name}`"
                    ));
                }
            } else if !crate_sources.contains(&format!("\"{name}\"")) {
                problems.push(format!(
                    "{rel}: no code of this crate names snapshot `{name}`"
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

/// Every file under `dir` (`dir` itself if it is a file), outside `target` and hidden
/// folders.
fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    if !dir.is_dir() {
        out.extend(Some(dir.to_path_buf()).filter(|f| f.is_file()));
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
        let problems = check(&crate::cargo::workspace_root()).unwrap();
        assert!(problems.is_empty(), "tidy:\n{}", problems.join("\n"));
    }

    #[test]
    fn an_unsafe_fn_trait_or_extern_needs_a_safety_line_above_it() {
        let filler = "let x = 1;\n".repeat(9);
        let text = format!(
            "// SAFETY: fine.\nunsafe fn a() {{}}\n{filler}unsafe fn b() {{}}\n\
             unsafe trait T {{}}\nunsafe extern \"C\" {{}}\nfn c() {{ unsafe {{ g() }} }}\n"
        );
        // The block is clippy's (`undocumented_unsafe_blocks`).
        assert_eq!(unsafe_without_safety(&text), vec![12, 13, 14]);
    }

    /// A scratch workspace of `files` (path, text) under the temp directory.
    fn workspace(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let root = std::env::temp_dir().join(format!("xtask-tidy-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        for (path, text) in files {
            let path = root.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        root
    }

    #[test]
    fn a_declared_dependency_nothing_names_is_a_problem() {
        let root = workspace(
            "deps",
            &[
                (
                    "Cargo.toml",
                    "[workspace]\nmembers = [\"crates/a\", \"b\"]\n",
                ),
                (
                    "crates/a/Cargo.toml",
                    r#"[package]
name = "a"

[dependencies]
capture-core.workspace = true
unused-dep = "1"
tested-only = "1"
prefix = "1"
in-build = "1"

[dev-dependencies]
rstest.workspace = true
dev-unused = "1"
in-example = "1"

[build-dependencies]
cc = "1"
"#,
                ),
                (
                    "crates/a/src/lib.rs",
                    "//! a\nuse capture_core::Device;\npub fn f() { prefix_extended::g() }\n",
                ),
                (
                    "crates/a/build.rs",
                    "//! build\nfn main() { cc::Build::new(); in_build::x(); }\n",
                ),
                (
                    "crates/a/tests/it/main.rs",
                    "//! it\n#[rstest::rstest]\nfn t() { tested_only::x() }\n",
                ),
                (
                    "crates/a/examples/e.rs",
                    "//! e\nfn main() { in_example::x() }\n",
                ),
                ("crates/a/src/notes.txt", "unused_dep dev_unused"),
                (
                    "b/Cargo.toml",
                    "[package]\nname = \"b\"\n[target.'cfg(unix)'.dependencies]\nlibc = \"0.2\"\n",
                ),
                ("b/src/main.rs", "//! b\nfn main() {}\n"),
            ],
        );
        let problems = dependency_problems(&root).unwrap();
        assert_eq!(
            problems,
            [
                "crates/a/Cargo.toml:6: [dependencies] declares `unused-dep`, and nothing in src/ or build.rs names `unused_dep` (remove it)",
                "crates/a/Cargo.toml:7: [dependencies] declares `tested-only`, and nothing in src/ or build.rs names `tested_only` (only its tests do: make it a [dev-dependencies] entry)",
                "crates/a/Cargo.toml:8: [dependencies] declares `prefix`, and nothing in src/ or build.rs names `prefix` (remove it)",
                "crates/a/Cargo.toml:13: [dev-dependencies] declares `dev-unused`, and nothing in src/, tests/, benches/ or examples/ names `dev_unused` (remove it)",
                "b/Cargo.toml:4: [dependencies] declares `libc`, and nothing in src/ or build.rs names `libc` (remove it)",
            ]
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn names_are_whole_words() {
        assert!(names("use capture_core::Device;", "capture_core"));
        assert!(names("capture_core", "capture_core"));
        assert!(names("#[rstest]", "rstest"));
        assert!(!names("use capture_core_extra::X;", "capture_core"));
        assert!(!names("my_capture_core", "capture_core"));
        assert!(!names("", "capture_core"));
    }

    #[test]
    fn the_layout_checks_name_the_crates_that_moved() {
        let outside = format!("See {OUTSIDE}/brief.md.\n");
        let root = workspace(
            "layout",
            &[
                ("Cargo.toml", "[workspace]\nmembers = []\n"),
                (
                    "crates/capture-core/Cargo.toml",
                    "[dependencies]\nash.workspace = true\n",
                ),
                (
                    "crates/capture-core/src/lib.rs",
                    "//! core\n#![forbid(unsafe_code)]\n",
                ),
                (
                    "crates/capture-mock/src/lib.rs",
                    "//! mock\n#![forbid(unsafe_code)]\n",
                ),
                ("crates/capture-mock/src/bare.rs", "fn f() {}\n"),
                ("docs/notes.md", &outside),
                (
                    "crates/capture-suite/src/lib.rs",
                    "//! suite\npub const S: &str = \"gone\";\n",
                ),
                (
                    "crates/capture-scenarios/src/lib.rs",
                    "//! scenarios\n#![forbid(unsafe_code)]\nscenarios! { basic::kept => \"kept\", }\n",
                ),
                (
                    "crates/capture-suite/tests/mock/main.rs",
                    "//! mock\nfn f() { unsafe { g() } }\n",
                ),
                ("crates/capture-suite/snapshots/kept.snap", ""),
                ("crates/capture-suite/snapshots/gone.snap", ""),
                ("crates/capture-mock/snapshots/kept.snap", ""),
                (
                    "crates/capture-vulkan/src/lane.rs",
                    "//! lane\nunsafe fn f() {}\n",
                ),
                (
                    "crates/capture-cuda/tests/it/gpu.rs",
                    "//! gpu\n// CudaBackend::new( in a comment\nfn f() { let b = CudaBackend::new(0); }\n",
                ),
                (
                    "crates/capture-cuda/tests/it/support.rs",
                    "//! support\nfn open() { CudaBackend::new(0); Floor::new(0, 1, 2); }\n",
                ),
            ],
        );
        let problems = check(&root).unwrap();
        assert_eq!(
            problems,
            [
                "crates/capture-cuda/tests/it/gpu.rs: calls `CudaBackend::new(` directly: open CUDA through tests/it/support.rs, which holds the suite lock (every backend in the process shares one context and capture domain)",
                "crates/capture-mock/src/bare.rs: does not start with a `//!` header",
                "crates/capture-suite/tests/mock/main.rs: unsafe code in a crate that forbids it",
                "crates/capture-vulkan/src/lane.rs: unsafe code outside the backend's raw.rs, adopt.rs, work.rs and import.rs",
                "crates/capture-suite/src/lib.rs: lacks #![forbid(unsafe_code)]",
                "crates/capture-core/Cargo.toml:2: depends on ash",
                "crates/capture-mock/snapshots/kept.snap: no code of this crate names snapshot `kept`",
                "crates/capture-suite/snapshots/gone.snap: no scenario of crates/capture-scenarios is named `gone`",
                &format!("docs/notes.md:1: points outside the repository ({OUTSIDE})"),
            ]
        );
        fs::remove_file(root.join("crates/capture-suite/snapshots/kept.snap")).unwrap();
        fs::remove_file(root.join("crates/capture-suite/snapshots/gone.snap")).unwrap();
        let problems = check(&root).unwrap();
        assert!(
            problems.contains(&format!(
                "{SNAPSHOTS}: holds no snapshot (the scenario suite's shared snapshots live here)"
            )),
            "{problems:?}"
        );
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn unsafe_code_is_seen_and_comments_are_not() {
        assert!(mentions_unsafe_code("let x = unsafe { f() };"));
        assert!(!mentions_unsafe_code("// an unsafe { block } in a comment"));
        assert!(!mentions_unsafe_code("#![forbid(unsafe_code)]"));
    }
}
