//! The packaging step of `cargo xtask test`: every published crate (each workspace
//! member without `publish = false`) must carry full metadata and package, workspace
//! aware, with `cargo package` building each from its packaged files, so a missing file
//! or field fails CI rather than a release.

use std::path::Path;

use anyhow::{Context, Result, bail};

use crate::cargo::cargo;
use crate::manifest::workspace_members;

/// The fields every published crate must set, itself or through the workspace.
const REQUIRED: [&str; 8] = [
    "description",
    "license",
    "readme",
    "keywords",
    "categories",
    "documentation",
    "rust-version",
    "[package.metadata.docs.rs]",
];

/// A published member: its package name and its manifest's text.
pub(crate) struct Published {
    pub(crate) name: String,
    manifest: String,
}

/// The workspace members that publish, in the workspace's order.
pub(crate) fn published(root: &Path) -> Result<Vec<Published>> {
    let text =
        std::fs::read_to_string(root.join("Cargo.toml")).context("the workspace manifest")?;
    let mut out = Vec::new();
    for member in workspace_members(&text)? {
        let path = root.join(&member).join("Cargo.toml");
        let manifest = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        if manifest.lines().any(|l| l.trim() == "publish = false") {
            continue;
        }
        let name = manifest
            .lines()
            .find_map(|l| l.trim().strip_prefix("name = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .with_context(|| format!("{member}: no package name"))?
            .to_string();
        out.push(Published { name, manifest });
    }
    Ok(out)
}

/// What a published manifest lacks or gets wrong.
pub(crate) fn problems(crate_: &Published) -> Vec<String> {
    let mut out = Vec::new();
    for field in REQUIRED {
        let set = crate_.manifest.lines().any(|l| {
            let l = l.trim();
            l == field || l.starts_with(&format!("{field} ")) || l.starts_with(&format!("{field}."))
        });
        if !set {
            out.push(format!("{}: no `{field}`", crate_.name));
        }
    }
    if crate_.manifest.contains(".invalid") || crate_.manifest.contains("example.com") {
        out.push(format!("{}: a placeholder URL", crate_.name));
    }
    out
}

/// Checks every published crate's metadata, then packages them all.
pub(crate) fn run(root: &Path) -> Result<()> {
    let crates = published(root)?;
    let workspace = std::fs::read_to_string(root.join("Cargo.toml"))?;
    if workspace.contains(".invalid") || workspace.contains("example.com") {
        bail!("the workspace manifest holds a placeholder URL");
    }
    let problems: Vec<String> = crates.iter().flat_map(problems).collect();
    if !problems.is_empty() {
        bail!(
            "published crates lack metadata:\n  {}",
            problems.join("\n  ")
        );
    }
    forget_earlier_packages(&crates)?;
    let mut args = vec!["package", "--allow-dirty"];
    for c in &crates {
        args.extend(["-p", c.name.as_str()]);
    }
    println!(
        "xtask: cargo package ({})",
        crates
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    // A target directory of its own, with the workspace's own crates forgotten: cargo
    // takes a registry package of the same version as unchanged and would reuse what it
    // built of an earlier package.
    let target = root.join("target").join("package-verify");
    forget_built(&target, &crates)?;
    let status = cargo(&args.join(" "))
        .env("CARGO_TARGET_DIR", &target)
        .status()
        .context("starting cargo package")?;
    if !status.success() {
        bail!("cargo package failed ({status})");
    }
    Ok(())
}

/// Removes what earlier `cargo package` runs left extracted in cargo's home: cargo
/// unpacks the workspace's own packages from its temporary local registry into
/// `registry/src/-<hash>/<name>-<version>` and reuses an extraction of the same version
/// even when the package changed, so a later verification would build stale sources.
/// Only those local registries' directories (named from `-`) are touched.
fn forget_earlier_packages(crates: &[Published]) -> Result<()> {
    let home = match std::env::var_os("CARGO_HOME") {
        Some(home) => std::path::PathBuf::from(home),
        None => match std::env::var_os("HOME") {
            Some(home) => std::path::PathBuf::from(home).join(".cargo"),
            None => return Ok(()),
        },
    };
    let src = home.join("registry").join("src");
    let Ok(registries) = std::fs::read_dir(&src) else {
        return Ok(());
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(registry.path()) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if stale(&name, crates) {
                std::fs::remove_dir_all(entry.path())
                    .with_context(|| format!("removing {}", entry.path().display()))?;
            }
        }
    }
    Ok(())
}

/// Removes what an earlier verification built of `crates` under `target`: entries
/// named `<name>-<hash>` (fingerprints, build-script outputs) and `lib<ident>-<hash>.*`
/// or `<ident>-<hash>.*` (libraries, dep-info); third-party builds stay.
fn forget_built(target: &Path, crates: &[Published]) -> Result<()> {
    for dir in [".fingerprint", "build", "deps"] {
        let dir = target.join("debug").join(dir);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !crates.iter().any(|c| built_of(&name, &c.name)) {
                continue;
            }
            let path = entry.path();
            let removed = if path.is_dir() {
                std::fs::remove_dir_all(&path)
            } else {
                std::fs::remove_file(&path)
            };
            removed.with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

/// Whether a target-directory entry `entry` was built of the package `package`.
fn built_of(entry: &str, package: &str) -> bool {
    let ident = package.replace('-', "_");
    let stem = entry.split('.').next().unwrap_or(entry);
    let stem = stem.strip_prefix("lib").unwrap_or(stem);
    [package, ident.as_str()].iter().any(|p| {
        stem.strip_prefix(p)
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|hash| !hash.is_empty() && hash.chars().all(|ch| ch.is_ascii_hexdigit()))
    })
}

/// Whether `dir` (`<name>-<version>`) is an extraction of one of `crates`.
fn stale(dir: &str, crates: &[Published]) -> bool {
    crates.iter().any(|c| {
        dir.strip_prefix(c.name.as_str())
            .and_then(|rest| rest.strip_prefix('-'))
            .is_some_and(|version| version.starts_with(|ch: char| ch.is_ascii_digit()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_published_crate_needs_every_field_and_no_placeholder_url() {
        let full = Published {
            name: "x".into(),
            manifest: "description = \"d\"\nlicense.workspace = true\nreadme = \"README.md\"\n\
                keywords = []\ncategories = []\ndocumentation = \"https://docs.rs/x\"\n\
                rust-version.workspace = true\n[package.metadata.docs.rs]\n"
                .into(),
        };
        assert!(problems(&full).is_empty(), "{:?}", problems(&full));
        let lacking = Published {
            name: "y".into(),
            manifest: "description = \"d\"\nrepository = \"https://example.invalid/y\"\n".into(),
        };
        let found = problems(&lacking);
        assert!(found.contains(&"y: no `readme`".to_string()), "{found:?}");
        assert!(
            found.contains(&"y: a placeholder URL".to_string()),
            "{found:?}"
        );
    }

    #[test]
    fn only_what_was_built_of_the_package_is_forgotten() {
        assert!(built_of("capture-core-0123abcd", "capture-core"));
        assert!(built_of("libcapture_core-0123abcd.rlib", "capture-core"));
        assert!(built_of("capture_core-0123abcd.d", "capture-core"));
        assert!(!built_of("capture-core-extra-0123abcd", "capture-core"));
        assert!(!built_of("libash-0123abcd.rlib", "capture-core"));
    }

    #[test]
    fn only_this_workspace_s_extractions_are_stale() {
        let crates = [Published {
            name: "capture-core".into(),
            manifest: String::new(),
        }];
        assert!(stale("capture-core-0.1.0", &crates));
        assert!(!stale("capture-core-extra-0.1.0", &crates));
        assert!(!stale("capture-mock-0.1.0", &crates));
    }

    #[test]
    fn this_workspace_publishes_the_facade_the_core_the_backends_the_scenarios_the_decoder_and_the_program()
     {
        let crates = published(&crate::cargo::workspace_root()).unwrap();
        let names: Vec<&str> = crates.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "capture-core",
                "capture-mock",
                "capture-vulkan",
                "capture-cuda",
                "capture-scenarios",
                "capture-graphs",
                "capture-decode",
                "capture-cli"
            ]
        );
        for c in &crates {
            assert!(problems(c).is_empty(), "{:?}", problems(c));
        }
    }
}
