//! What tidy reads of a `Cargo.toml`: the workspace's members, and the names each
//! manifest declares in its dependency tables (`[dependencies]`, `[dev-dependencies]`,
//! `[build-dependencies]`, their `[target.'cfg(…)'.…]` forms, and `[dependencies.name]`
//! tables), each with the line it is declared on. Parsed as TOML by the `toml` crate,
//! whose spans give the lines.

use anyhow::{Context, Result, anyhow};
use toml::de::{DeTable, DeValue};

/// Which table declares a dependency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Table {
    Normal,
    Dev,
    Build,
}

impl Table {
    /// The table's name, as a manifest spells it.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Table::Normal => "[dependencies]",
            Table::Dev => "[dev-dependencies]",
            Table::Build => "[build-dependencies]",
        }
    }

    fn from_key(key: &str) -> Option<Self> {
        match key {
            "dependencies" => Some(Table::Normal),
            "dev-dependencies" | "dev_dependencies" => Some(Table::Dev),
            "build-dependencies" | "build_dependencies" => Some(Table::Build),
            _ => None,
        }
    }
}

/// One declared dependency: the key it is declared under (the name the crate's code
/// uses, `-` read as `_`, even when `package = …` renames it) and its table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Dependency {
    pub(crate) name: String,
    pub(crate) table: Table,
    /// The line it is declared on (1-based).
    pub(crate) line: usize,
}

impl Dependency {
    /// The identifier Rust code names it by (`capture-core` → `capture_core`).
    pub(crate) fn ident(&self) -> String {
        self.name.replace('-', "_")
    }
}

/// A parsed manifest's top table.
fn parse(text: &str) -> Result<DeTable<'_>> {
    DeTable::parse(text)
        .map(toml::Spanned::into_inner)
        .map_err(|e| anyhow!("{e}"))
        .context("parsing a Cargo.toml")
}

/// The 1-based line byte `at` of `text` is on.
fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

/// The table `key` names in `table`, if it is one.
fn table<'a, 'i>(table: &'a DeTable<'i>, key: &str) -> Option<&'a DeTable<'i>> {
    table
        .iter()
        .find(|(k, _)| k.get_ref() == key)
        .and_then(|(_, v)| v.get_ref().as_table())
}

/// Every dependency `text` (a `Cargo.toml`) declares, in the order of their lines.
///
/// # Errors
///
/// When `text` is not TOML.
pub(crate) fn dependencies(text: &str) -> Result<Vec<Dependency>> {
    let top = parse(text)?;
    let mut out = Vec::new();
    let mut read = |tables: &DeTable<'_>| {
        for (key, value) in tables {
            let Some(kind) = Table::from_key(key.get_ref()) else {
                continue;
            };
            let Some(deps) = value.get_ref().as_table() else {
                continue;
            };
            for (name, _) in deps {
                out.push(Dependency {
                    name: name.get_ref().to_string(),
                    table: kind,
                    line: line_of(text, name.span().start),
                });
            }
        }
    };
    read(&top);
    // `[target.<cfg>.dependencies]` is `[dependencies]` for some targets.
    if let Some(targets) = table(&top, "target") {
        for (_, cfg) in targets {
            if let Some(cfg) = cfg.get_ref().as_table() {
                read(cfg);
            }
        }
    }
    out.sort_by_key(|d| d.line);
    Ok(out)
}

/// The `members` of the `[workspace]` table (paths, as written).
///
/// # Errors
///
/// When `text` is not TOML.
pub(crate) fn workspace_members(text: &str) -> Result<Vec<String>> {
    let top = parse(text)?;
    let Some(workspace) = table(&top, "workspace") else {
        return Ok(Vec::new());
    };
    let members = workspace
        .iter()
        .find(|(k, _)| k.get_ref() == "members")
        .map(|(_, v)| v.get_ref());
    let Some(DeValue::Array(members)) = members else {
        return Ok(Vec::new());
    };
    Ok(members
        .iter()
        .filter_map(|m| m.get_ref().as_str().map(String::from))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = r#"
[package]
name = "capture-vulkan" # not a dependency
description = "deps = [not, one]"

[features]
default = ["dep:ash"]

[dependencies]
capture-core.workspace = true
ash = { workspace = true, features = ["loaded"] }
"quoted-name" = "1"
renamed = { package = "bytes", version = "1" } # the code says `renamed`
long = { version = "1", features = [
    "not-a-dependency",
    "nor = this",
] }

[dev-dependencies]
rstest.workspace = true

[target.'cfg(unix)'.dependencies]
libc = "0.2"

[target."cfg(target_os = \"linux\")".dev-dependencies.procfs]
version = "0.17"
features = ["serde"]

[build-dependencies.cc]

[[test]]
name = "it"
path = "tests/it/main.rs"

[lints]
workspace = true
"#;

    #[test]
    fn every_dependency_table_is_read() {
        let got: Vec<(String, Table)> = dependencies(MANIFEST)
            .unwrap()
            .into_iter()
            .map(|d| (d.name, d.table))
            .collect();
        let want: Vec<(String, Table)> = [
            ("capture-core", Table::Normal),
            ("ash", Table::Normal),
            ("quoted-name", Table::Normal),
            ("renamed", Table::Normal),
            ("long", Table::Normal),
            ("rstest", Table::Dev),
            ("libc", Table::Normal),
            ("procfs", Table::Dev),
            ("cc", Table::Build),
        ]
        .into_iter()
        .map(|(n, t)| (n.to_string(), t))
        .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_dependency_knows_its_line_and_identifier() {
        let deps = dependencies(MANIFEST).unwrap();
        let core = &deps[0];
        assert_eq!((core.line, core.ident().as_str()), (10, "capture_core"));
        let cc = deps.iter().find(|d| d.name == "cc").unwrap();
        assert_eq!(
            MANIFEST.lines().nth(cc.line - 1),
            Some("[build-dependencies.cc]")
        );
    }

    #[test]
    fn workspace_members_are_read_on_one_line_or_many() {
        let many = r#"
[workspace]
resolver = "3"
members = [
    "crates/capture-core", # the core
    "xtask",
]

[workspace.dependencies]
members = ["not", "these"]
"#;
        assert_eq!(
            workspace_members(many).unwrap(),
            ["crates/capture-core", "xtask"]
        );
        assert_eq!(
            workspace_members("[workspace]\nmembers = [\"a\", 'b']\n").unwrap(),
            ["a", "b"]
        );
        assert!(
            workspace_members("[package]\nmembers = [\"a\"]\n")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_manifest_that_is_not_toml_is_an_error() {
        assert!(dependencies("[dependencies\nx = 1").is_err());
        assert!(workspace_members("members = [").is_err());
    }
}
