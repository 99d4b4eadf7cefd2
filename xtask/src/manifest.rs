//! Just enough of a `Cargo.toml` for tidy: the workspace's members, and the names each
//! manifest declares in its dependency tables (`[dependencies]`, `[dev-dependencies]`,
//! `[build-dependencies]`, their `[target.'cfg(…)'.…]` forms, and `[dependencies.name]`
//! tables). Read line by line, not as full TOML: sections, keys, and values that span
//! lines (arrays) skipped over.

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

/// A line of a manifest that matters here.
enum Line {
    /// `[a.b]` or `[[a]]`, as dotted parts.
    Header(Vec<String>),
    /// `key = …`, with the dotted parts of the key.
    Key(Vec<String>),
}

/// The headers and keys of `text` with their line numbers (1-based), skipping comments
/// and the inner lines of values that span lines.
fn lines(text: &str) -> Vec<(usize, Line)> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    for (i, raw) in text.lines().enumerate() {
        let line = strip_comment(raw).trim();
        if depth > 0 {
            depth += nesting(line);
        } else if line.starts_with('[') {
            let header = line.trim_start_matches('[').trim_end_matches(']');
            out.push((i + 1, Line::Header(dotted(header))));
        } else if let Some((key, value)) = split_key(line) {
            depth = nesting(value).max(0);
            out.push((i + 1, Line::Key(dotted(key))));
        }
    }
    out
}

/// The dependency table a header opens, and the dependency it is about when it is a
/// `[dependencies.name]` table: `[target.<cfg>.dependencies]` is `[dependencies]` for
/// some targets.
fn dependency_table(header: &[String]) -> Option<(Table, Option<&String>)> {
    let header = match header {
        [target, _cfg, rest @ ..] if target == "target" => rest,
        all => all,
    };
    match header {
        [table] => Some((Table::from_key(table)?, None)),
        [table, name] => Some((Table::from_key(table)?, Some(name))),
        _ => None,
    }
}

/// Every dependency `text` (a `Cargo.toml`) declares, in order.
pub(crate) fn dependencies(text: &str) -> Vec<Dependency> {
    let mut out = Vec::new();
    // The table the keys below declare dependencies of, if they do.
    let mut table = None;
    for (line, entry) in lines(text) {
        match entry {
            Line::Header(header) => {
                table = None;
                match dependency_table(&header) {
                    // `[dependencies.name]`: one dependency; its keys are its fields.
                    Some((t, Some(name))) => out.push(Dependency {
                        name: name.clone(),
                        table: t,
                        line,
                    }),
                    Some((t, None)) => table = Some(t),
                    None => {}
                }
            }
            // `name = …` or `name.workspace = true`.
            Line::Key(key) => {
                if let (Some(table), Some(name)) = (table, key.into_iter().next()) {
                    out.push(Dependency { name, table, line });
                }
            }
        }
    }
    out
}

/// The `members` of the `[workspace]` table (paths, as written).
pub(crate) fn workspace_members(text: &str) -> Vec<String> {
    let mut members = Vec::new();
    let mut in_members = false;
    let mut section: Vec<String> = Vec::new();
    for raw in text.lines() {
        let line = strip_comment(raw).trim();
        if !in_members && line.starts_with('[') {
            section = dotted(line.trim_start_matches('[').trim_end_matches(']'));
            continue;
        }
        let mut value = line;
        if !in_members {
            match split_key(line) {
                Some(("members", rest)) if section == ["workspace"] => {
                    in_members = true;
                    value = rest.trim().strip_prefix('[').unwrap_or(rest);
                }
                _ => continue,
            }
        }
        let (items, closed) = match value.split_once(']') {
            Some((items, _)) => (items, true),
            None => (value, false),
        };
        members.extend(
            items
                .split(',')
                .map(|m| m.trim().trim_matches('"').trim_matches('\''))
                .filter(|m| !m.is_empty())
                .map(String::from),
        );
        if closed {
            in_members = false;
        }
    }
    members
}

/// `key = value` split at the first `=` outside quotes; `None` for a line that is not one.
fn split_key(line: &str) -> Option<(&str, &str)> {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '=') => return Some((line[..i].trim(), &line[i + 1..])),
            _ => {}
        }
    }
    None
}

/// `a."b.c".d` → `["a", "b.c", "d"]`: a dotted key or header, quotes removed.
fn dotted(text: &str) -> Vec<String> {
    let mut parts = vec![String::new()];
    let mut quote = None;
    for c in text.chars() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '.') => parts.push(String::new()),
            (None, c) if c.is_whitespace() => {}
            (_, c) => parts.last_mut().expect("never empty").push(c),
        }
    }
    parts
}

/// `line` without a `#` comment (a `#` inside quotes is kept).
fn strip_comment(line: &str) -> &str {
    let mut quote = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '#') => return &line[..i],
            _ => {}
        }
    }
    line
}

/// Opening minus closing brackets and braces outside quotes: above 0, the value goes on.
fn nesting(text: &str) -> i32 {
    let mut depth = 0;
    let mut quote = None;
    for c in text.chars() {
        match (quote, c) {
            (None, '"' | '\'') => quote = Some(c),
            (Some(q), _) if c == q => quote = None,
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth -= 1,
            _ => {}
        }
    }
    depth
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
        let deps = dependencies(MANIFEST);
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
        assert_eq!(workspace_members(many), ["crates/capture-core", "xtask"]);
        assert_eq!(
            workspace_members("[workspace]\nmembers = [\"a\", 'b']\n"),
            ["a", "b"]
        );
        assert!(workspace_members("[package]\nmembers = [\"a\"]\n").is_empty());
    }

    #[test]
    fn keys_comments_and_nesting_respect_quotes() {
        assert_eq!(split_key(r#""a=b" = 1"#), Some((r#""a=b""#, " 1")));
        assert_eq!(split_key("[dependencies]"), None);
        assert_eq!(strip_comment(r##"x = "#1" # c"##), r##"x = "#1" "##);
        assert_eq!(
            dotted(r#"target."cfg(a.b)".dependencies"#),
            ["target", "cfg(a.b)", "dependencies"]
        );
        assert_eq!(nesting(r#"{ a = ["]", "#), 2);
    }
}
