//! The import graph of one crate's `src/`, file by file, and the circles in it.
//!
//! A file imports another when it names a path into that file's module: `crate::a::b`,
//! `super::x`, `self::y`, a grouped `use crate::{a, b::{c, d}}`, or a child module of its
//! own by name. A path that stops at an item re-exported by a module's face (`lib.rs`, a
//! `mod.rs`, or any module re-exporting a descendant's item) is followed to the file that
//! defines the item. A module's `pub use` of its own descendants is its face, not an
//! import: `lib.rs` re-exporting `driver::Backend` does not make `lib.rs` depend on
//! `driver.rs`. Comments, string and character literals are skipped, and inline modules
//! (`mod tests { use super::*; }`) resolve `super` from where they sit.
//!
//! Tidy reports every strongly connected group of two or more files as a circle, with
//! one cycle through it spelled out.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// A module path inside a crate: `[]` is the crate root, `["memory", "pool"]` is
/// `crate::memory::pool`.
type ModPath = Vec<String>;

/// One crate's files and the imports between them.
#[derive(Debug)]
pub(crate) struct Graph {
    /// Each file module, by module path.
    files: BTreeMap<ModPath, PathBuf>,
    /// For each file module, the file modules it imports.
    edges: BTreeMap<ModPath, BTreeSet<ModPath>>,
}

impl Graph {
    /// Reads every `.rs` file under `src` (a crate's `src/` directory).
    pub(crate) fn read(src: &Path) -> Result<Graph> {
        let mut files = BTreeMap::new();
        collect(src, src, &mut files)?;
        let mut texts = BTreeMap::new();
        for (module, path) in &files {
            let text =
                fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            texts.insert(module.clone(), strip(&text));
        }
        let defs = definitions(&texts);
        let mut edges = BTreeMap::new();
        for (module, text) in &texts {
            let mut to = BTreeSet::new();
            for path in references(module, text, &files) {
                let target = resolve(&path, &files, &defs);
                // A module re-exporting its own descendants is its face, not an import.
                if target != *module {
                    to.insert(target);
                }
            }
            edges.insert(module.clone(), to);
        }
        Ok(Graph { files, edges })
    }

    /// Each circle as the files along one cycle through it, relative to `base`, with the
    /// first file repeated at the end (`a.rs -> b.rs -> a.rs`).
    pub(crate) fn circles(&self, base: &Path) -> Vec<String> {
        let name = |m: &ModPath| {
            let p = &self.files[m];
            p.strip_prefix(base).unwrap_or(p).display().to_string()
        };
        strongly_connected(&self.edges)
            .into_iter()
            .filter(|group| group.len() > 1)
            .map(|group| {
                let cycle = cycle_in(&self.edges, &group);
                cycle.iter().map(name).collect::<Vec<_>>().join(" -> ")
            })
            .collect()
    }

    /// The files `module_file` imports (paths relative to `base`), for messages and tests.
    #[cfg(test)]
    pub(crate) fn imports_of(&self, module_file: &str, base: &Path) -> Vec<String> {
        let Some((module, _)) = self
            .files
            .iter()
            .find(|(_, p)| p.strip_prefix(base).unwrap_or(p) == Path::new(module_file))
        else {
            return Vec::new();
        };
        self.edges[module]
            .iter()
            .map(|m| {
                let p = &self.files[m];
                p.strip_prefix(base).unwrap_or(p).display().to_string()
            })
            .collect()
    }
}

/// Every `.rs` file under `dir`, by module path (`lib.rs`/`main.rs` the root, `a/mod.rs`
/// and `a.rs` both `a`).
fn collect(src: &Path, dir: &Path, out: &mut BTreeMap<ModPath, PathBuf>) -> Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            collect(src, &path, out)?;
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path.strip_prefix(src).unwrap_or(&path);
        let mut module: ModPath = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let last = module.last().cloned().unwrap_or_default();
        if last == "mod" || (module.len() == 1 && (last == "lib" || last == "main")) {
            module.pop();
        }
        // A crate with both lib.rs and main.rs: the library is the root.
        if module.is_empty() && out.contains_key(&module) && last == "main" {
            continue;
        }
        out.insert(module, path);
    }
    Ok(())
}

/// `text` with comments, string literals and character literals blanked out (their
/// bytes replaced by spaces, newlines kept), so braces and paths in them are not read.
fn strip(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    let blank = |out: &mut Vec<u8>, bytes: &[u8]| {
        out.extend(bytes.iter().map(|&c| if c == b'\n' { b'\n' } else { b' ' }));
    };
    while i < b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"//") {
            let end = rest.iter().position(|&c| c == b'\n').unwrap_or(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest.starts_with(b"/*") {
            let mut depth = 0;
            let mut j = 0;
            while j < rest.len() {
                if rest[j..].starts_with(b"/*") {
                    depth += 1;
                    j += 2;
                } else if rest[j..].starts_with(b"*/") {
                    depth -= 1;
                    j += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    j += 1;
                }
            }
            blank(&mut out, &rest[..j]);
            i += j;
        } else if let Some(len) = raw_string(rest) {
            blank(&mut out, &rest[..len]);
            i += len;
        } else if rest[0] == b'"' || rest.starts_with(b"b\"") {
            let start = usize::from(rest[0] == b'b');
            let mut j = start + 1;
            while j < rest.len() && rest[j] != b'"' {
                j += if rest[j] == b'\\' { 2 } else { 1 };
            }
            let end = (j + 1).min(rest.len());
            blank(&mut out, &rest[..end]);
            i += end;
        } else if rest[0] == b'\'' {
            // A character literal ('x', '\n', '\'', '\u{..}') or a lifetime ('a).
            let len = if rest.get(1) == Some(&b'\\') {
                rest[2..]
                    .iter()
                    .position(|&c| c == b'\'')
                    .map(|p| p + 3)
                    .unwrap_or(1)
            } else {
                let ch = std::str::from_utf8(&rest[1..rest.len().min(5)])
                    .ok()
                    .or_else(|| text.get(i + 1..))
                    .and_then(|s| s.chars().next())
                    .map(char::len_utf8)
                    .unwrap_or(1);
                if rest.get(1 + ch) == Some(&b'\'') {
                    ch + 2
                } else {
                    0
                }
            };
            if len == 0 {
                // A lifetime: kept as it is.
                out.push(b'\'');
                i += 1;
                continue;
            }
            blank(&mut out, &rest[..len]);
            i += len;
        } else {
            out.push(rest[0]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`, `br#"…"#`) at the start of
/// `rest`, if one starts there.
fn raw_string(rest: &[u8]) -> Option<usize> {
    let start = if rest.starts_with(b"br") {
        2
    } else if rest.starts_with(b"r") {
        1
    } else {
        return None;
    };
    let hashes = rest[start..].iter().take_while(|&&c| c == b'#').count();
    if rest.get(start + hashes) != Some(&b'"') {
        return None;
    }
    let close: Vec<u8> = std::iter::once(b'"')
        .chain(std::iter::repeat_n(b'#', hashes))
        .collect();
    let body = start + hashes + 1;
    let end = rest[body..]
        .windows(close.len())
        .position(|w| w == close.as_slice())
        .map(|p| body + p + close.len())
        .unwrap_or(rest.len());
    Some(end)
}

/// Which file module defines each item name (`struct`, `enum`, `trait`, `fn`, `type`,
/// `const`, `static`, `union`, `macro_rules!`), for names only one file defines.
fn definitions(texts: &BTreeMap<ModPath, String>) -> BTreeMap<String, BTreeSet<ModPath>> {
    let mut defs: BTreeMap<String, BTreeSet<ModPath>> = BTreeMap::new();
    for (module, text) in texts {
        let words: Vec<&str> = text
            .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '!'))
            .filter(|w| !w.is_empty())
            .collect();
        for pair in words.windows(2) {
            if matches!(
                pair[0],
                "struct"
                    | "enum"
                    | "trait"
                    | "fn"
                    | "type"
                    | "const"
                    | "static"
                    | "union"
                    | "macro_rules!"
            ) {
                defs.entry(pair[1].to_string())
                    .or_default()
                    .insert(module.clone());
            }
        }
    }
    defs
}

/// The absolute module paths (with the item name, where one follows) `text`, the file of
/// `module`, refers to. `pub use` of the module's own descendants is left out.
fn references(module: &ModPath, text: &str, files: &BTreeMap<ModPath, PathBuf>) -> Vec<ModPath> {
    let mut out = Vec::new();
    // Inline modules open here: (name, brace depth inside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let bytes = text.as_bytes();
    let mut i = 0;
    let word_at = |at: usize| -> &str {
        let end = text[at..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(text.len(), |e| at + e);
        &text[at..end]
    };
    let starts_word = |at: usize| at == 0 || !is_ident(bytes[at - 1]) && bytes[at - 1] != b':';
    while i < bytes.len() {
        match bytes[i] {
            b'{' => {
                depth += 1;
                i += 1;
                continue;
            }
            b'}' => {
                if inline.last().is_some_and(|(_, d)| *d == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
                i += 1;
                continue;
            }
            _ => {}
        }
        if !starts_word(i) || !is_ident(bytes[i]) {
            i += 1;
            continue;
        }
        let word = word_at(i);
        let here: ModPath = module
            .iter()
            .cloned()
            .chain(inline.iter().map(|(n, _)| n.clone()))
            .collect();
        if word == "mod" {
            // `mod name {` opens an inline module; `mod name;` declares a file.
            let after = text[i + 3..].trim_start();
            let name = word_at(text.len() - after.len());
            let rest = after[name.len()..].trim_start();
            if !name.is_empty() && rest.starts_with('{') {
                inline.push((name.to_string(), depth + 1));
            }
            i += 3;
            continue;
        }
        let is_use = word == "use";
        let reexport = is_use && is_pub_before(text, i);
        let start = if is_use {
            let after = text[i + 3..].trim_start();
            text.len() - after.len()
        } else {
            i
        };
        let (paths, len) = parse_tree(&text[start..]);
        for path in paths {
            let Some(abs) = absolute(&here, &path, is_use, files) else {
                continue;
            };
            if reexport && abs.len() > module.len() && abs.starts_with(module) {
                continue;
            }
            out.push(abs);
        }
        i = start + len.max(word.len());
    }
    out
}

fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

/// Whether the `use` at `at` is `pub use` or `pub(…) use`.
fn is_pub_before(text: &str, at: usize) -> bool {
    let before = text[..at].trim_end();
    before.ends_with("pub") || (before.ends_with(')') && before.contains("pub("))
}

/// The paths a use tree or a path expression at the start of `s` names (each as its
/// segments), and how many bytes it spans. `a::{b, c::{d}}` gives `a::b` and `a::c::d`.
fn parse_tree(s: &str) -> (Vec<Vec<String>>, usize) {
    let mut segments = Vec::new();
    let mut i = 0;
    let b = s.as_bytes();
    loop {
        let end = s[i..]
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .map_or(s.len(), |e| i + e);
        if end == i {
            break;
        }
        segments.push(s[i..end].to_string());
        i = end;
        let rest = &s[i..];
        let trimmed = rest.trim_start();
        if !trimmed.starts_with("::") {
            return (vec![segments], i);
        }
        i += rest.len() - trimmed.len() + 2;
        let rest = &s[i..];
        let trimmed = rest.trim_start();
        i += rest.len() - trimmed.len();
        if trimmed.starts_with('{') {
            // A group: parse each comma-separated tree inside it.
            let mut out = Vec::new();
            i += 1;
            loop {
                let rest = &s[i..];
                let trimmed = rest.trim_start();
                i += rest.len() - trimmed.len();
                if i >= b.len() || b[i] == b'}' {
                    i += 1;
                    break;
                }
                if b[i] == b',' {
                    i += 1;
                    continue;
                }
                let (inner, len) = parse_tree(&s[i..]);
                for p in inner {
                    out.push(segments.iter().cloned().chain(p).collect());
                }
                i += len.max(1);
                // Skip an `as name` or anything else up to the next comma or brace.
                while i < b.len() && b[i] != b',' && b[i] != b'}' {
                    i += 1;
                }
            }
            return (out, i);
        }
        if trimmed.starts_with('*') {
            i += 1;
            return (vec![segments], i);
        }
    }
    (vec![segments], i)
}

/// `path` as an absolute module path from `here`, if it names something in this crate.
fn absolute(
    here: &ModPath,
    path: &[String],
    is_use: bool,
    files: &BTreeMap<ModPath, PathBuf>,
) -> Option<ModPath> {
    // `pub(crate)`, `Self`, a lone `super`: not a path into a module.
    if path.len() < 2 {
        return None;
    }
    let first = &path[0];
    let mut base: ModPath = match first.as_str() {
        "crate" => Vec::new(),
        "self" => here.clone(),
        "super" => {
            let mut m = here.clone();
            let mut rest = path;
            while rest.first().is_some_and(|s| s == "super") {
                m.pop()?;
                rest = &rest[1..];
            }
            return Some(m.into_iter().chain(rest.iter().cloned()).collect());
        }
        _ => {
            // A child module of this file's module, named bare (`use kernels::X`,
            // `kernels::f()` after `mod kernels;`).
            let child: ModPath = here.iter().cloned().chain([first.clone()]).collect();
            if path.len() > 1 && files.contains_key(&child) {
                return Some(here.iter().cloned().chain(path.iter().cloned()).collect());
            }
            let _ = is_use;
            return None;
        }
    };
    base.extend(path[1..].iter().cloned());
    Some(base)
}

/// The file module an absolute `path` lands in: the deepest file module on it, or,
/// where the path goes on to an item that file does not define, the one file of that
/// module's subtree defining it.
fn resolve(
    path: &ModPath,
    files: &BTreeMap<ModPath, PathBuf>,
    defs: &BTreeMap<String, BTreeSet<ModPath>>,
) -> ModPath {
    let mut at = Vec::new();
    for seg in path {
        let next: ModPath = at.iter().cloned().chain([seg.clone()]).collect();
        if files.contains_key(&next) {
            at = next;
        } else {
            break;
        }
    }
    if let Some(item) = path.get(at.len())
        && let Some(owners) = defs.get(item)
        && !owners.contains(&at)
    {
        let inside: Vec<&ModPath> = owners.iter().filter(|o| o.starts_with(&at)).collect();
        if let [only] = inside.as_slice() {
            return (*only).clone();
        }
    }
    at
}

/// The strongly connected groups of `edges` (Tarjan's algorithm, iterative).
fn strongly_connected(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>) -> Vec<Vec<ModPath>> {
    let nodes: Vec<&ModPath> = edges.keys().collect();
    let index_of: BTreeMap<&ModPath, usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let succ: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            edges[*n]
                .iter()
                .filter_map(|m| index_of.get(m).copied())
                .collect()
        })
        .collect();
    let n = nodes.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut groups = Vec::new();
    let mut next = 0;
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut child)) = work.last_mut() {
            if *child == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = succ[v].get(*child) {
                *child += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut group = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    group.push(nodes[w].clone());
                    if w == v {
                        break;
                    }
                }
                group.sort();
                groups.push(group);
            }
        }
    }
    groups.sort();
    groups
}

/// One cycle through the first node of `group`, staying inside it (breadth-first, so
/// the shortest), with the first node repeated at the end.
fn cycle_in(edges: &BTreeMap<ModPath, BTreeSet<ModPath>>, group: &[ModPath]) -> Vec<ModPath> {
    let start = &group[0];
    let inside: BTreeSet<&ModPath> = group.iter().collect();
    let mut came_from: BTreeMap<&ModPath, &ModPath> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for w in &edges[v] {
            if !inside.contains(w) {
                continue;
            }
            if w == start {
                let mut back = vec![v.clone()];
                let mut at = v;
                while at != start {
                    at = came_from[at];
                    back.push(at.clone());
                }
                back.reverse();
                back.push(start.clone());
                return back;
            }
            if !came_from.contains_key(w) {
                came_from.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    group.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch crate `src/` of `files` (path under src, text).
    fn src(name: &str, files: &[(&str, &str)]) -> PathBuf {
        let root =
            std::env::temp_dir().join(format!("xtask-imports-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        for (path, text) in files {
            let path = root.join(path);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        root
    }

    #[test]
    fn paths_groups_super_and_children_are_imports() {
        let root = src(
            "forms",
            &[
                ("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\npub use a::A;\n"),
                (
                    "a.rs",
                    "use crate::{b::{B, f}, c};\npub struct A;\nmod inner;\n",
                ),
                ("a/inner.rs", "use super::A;\nfn g() { crate::d::h(); }\n"),
                ("b.rs", "pub struct B;\npub fn f() {}\n"),
                (
                    "c.rs",
                    "// crate::a::A in a comment\nconst S: &str = \"crate::a\";\n",
                ),
                (
                    "d.rs",
                    "pub fn h() {}\n#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
                ),
            ],
        );
        let g = Graph::read(&root).unwrap();
        assert_eq!(g.imports_of("lib.rs", &root), Vec::<String>::new());
        assert_eq!(g.imports_of("a.rs", &root), ["b.rs", "c.rs"]);
        assert_eq!(g.imports_of("a/inner.rs", &root), ["a.rs", "d.rs"]);
        assert_eq!(g.imports_of("c.rs", &root), Vec::<String>::new());
        assert_eq!(g.imports_of("d.rs", &root), Vec::<String>::new());
        assert!(g.circles(&root).is_empty());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn an_item_re_exported_by_the_root_resolves_to_its_file() {
        let root = src(
            "reexport",
            &[
                (
                    "lib.rs",
                    "mod raw;\nmod driver;\npub use driver::Backend;\n",
                ),
                ("raw.rs", "use crate::Backend;\n"),
                ("driver.rs", "use crate::raw;\npub struct Backend;\n"),
            ],
        );
        let g = Graph::read(&root).unwrap();
        assert_eq!(g.imports_of("raw.rs", &root), ["driver.rs"]);
        assert_eq!(g.circles(&root), ["driver.rs -> raw.rs -> driver.rs"]);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_longer_circle_is_found_and_spelled_out() {
        let root = src(
            "long",
            &[
                ("lib.rs", "mod a;\nmod b;\nmod c;\nmod z;\n"),
                ("a.rs", "use crate::b::f;\n"),
                ("b.rs", "pub fn f() { crate::c::g() }\n"),
                ("c.rs", "pub fn g() {}\nfn h() { let _ = crate::a::X; }\n"),
                ("z.rs", "use crate::a;\n"),
            ],
        );
        let g = Graph::read(&root).unwrap();
        assert_eq!(g.circles(&root), ["a.rs -> b.rs -> c.rs -> a.rs"]);
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn literals_and_lifetimes_are_told_apart() {
        let s = strip("fn f<'a>(x: &'a str) -> char { let _ = \"{\"; let _ = r#\"}\"#; '{' }");
        assert_eq!(s.matches('{').count(), 1);
        assert_eq!(s.matches('}').count(), 1);
        assert!(s.contains("'a"));
    }
}
