//! The import graph of one crate's `src/`, file by file, and the circles in it.
//!
//! Each file is parsed with `syn`. A file imports another when it names a path into that
//! file's module: in a `use` tree (`use crate::{a, b::{c, d}}`, `use super::*`) or
//! anywhere in its code (`crate::a::f()`, a type `super::X`, `self::y`, the same inside a
//! macro's arguments, which syn leaves as tokens), or a child module of its own by name
//! (`kernels::f()` after `mod kernels;`). A path that stops at an item re-exported by a
//! module's face (`lib.rs`, a `mod.rs`, or any module re-exporting a descendant's item) is
//! followed to the file that defines the item. A module's `pub use` of its own
//! descendants is its face, not an import: `lib.rs` re-exporting `driver::Backend` does
//! not make `lib.rs` depend on `driver.rs`. Inline modules (`mod tests { use super::*; }`)
//! resolve `super` from where they sit; a visibility (`pub(in crate::a)`) names no import;
//! comments and literals are no code to syn, so `"crate::a"` is none either.
//!
//! Tidy reports every strongly connected group of two or more files as a circle, with
//! the shortest cycle through its first file spelled out.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow};
use syn::buffer::{Cursor, TokenBuffer};
use syn::visit::{self, Visit};
use syn::{ForeignItem, Item, UseTree, Visibility};

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
    /// Reads and parses every `.rs` file under `src` (a crate's `src/` directory).
    pub(crate) fn read(src: &Path) -> Result<Graph> {
        let mut files = BTreeMap::new();
        collect(src, src, &mut files)?;
        let mut parsed = BTreeMap::new();
        let mut defs: BTreeMap<String, BTreeSet<ModPath>> = BTreeMap::new();
        for (module, path) in &files {
            let text =
                fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
            let file = syn::parse_file(&text).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            let mut names = Definitions(BTreeSet::new());
            names.visit_file(&file);
            for name in names.0 {
                defs.entry(name).or_default().insert(module.clone());
            }
            parsed.insert(module.clone(), file);
        }
        let mut edges = BTreeMap::new();
        for (module, file) in &parsed {
            let mut refs = References {
                here: module.clone(),
                file: module,
                files: &files,
                out: Vec::new(),
            };
            refs.visit_file(file);
            let to = refs.out.iter().map(|p| resolve(p, &files, &defs));
            // A module re-exporting its own descendants is its face, not an import.
            let to = to
                .filter(|t| t != module && files.contains_key(t))
                .collect();
            edges.insert(module.clone(), to);
        }
        Ok(Graph { files, edges })
    }

    /// Each circle as the files along one cycle through it, relative to `base`, with the
    /// first file repeated at the end (`a.rs -> b.rs -> a.rs`).
    pub(crate) fn circles(&self, base: &Path) -> Vec<String> {
        let reach: BTreeMap<&ModPath, _> = self.edges.keys().map(|v| (v, self.reach(v))).collect();
        let mut seen: BTreeSet<&ModPath> = BTreeSet::new();
        let mut out = Vec::new();
        // In module order, so each group is met first at its least file.
        for (v, from) in &reach {
            if seen.contains(v) || !from.contains_key(v) {
                continue;
            }
            // Its group: whatever it reaches that reaches it back.
            seen.extend(from.keys().filter(|w| reach[*w].contains_key(v)));
            // The shortest cycle, walked back from `v` along the breadth-first tree.
            let mut cycle = vec![*v];
            let mut at = from[v];
            while at != *v {
                cycle.push(at);
                at = from[at];
            }
            cycle.push(v);
            cycle.reverse();
            let names: Vec<String> = cycle.into_iter().map(|m| self.name(m, base)).collect();
            out.push(names.join(" -> "));
        }
        out
    }

    /// Every file reachable from `from`, with the file it is first reached from
    /// (breadth-first); `from` itself is there when a cycle leads back to it.
    fn reach<'a>(&'a self, from: &'a ModPath) -> BTreeMap<&'a ModPath, &'a ModPath> {
        let mut came_from = BTreeMap::new();
        let mut queue = VecDeque::from([from]);
        while let Some(v) = queue.pop_front() {
            for w in &self.edges[v] {
                if !came_from.contains_key(w) {
                    came_from.insert(w, v);
                    queue.push_back(w);
                }
            }
        }
        came_from
    }

    fn name(&self, module: &ModPath, base: &Path) -> String {
        let p = &self.files[module];
        p.strip_prefix(base).unwrap_or(p).display().to_string()
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

/// The names of the items a file defines (`struct`, `enum`, `trait`, `fn`, `type`,
/// `const`, `static`, `union`, `macro_rules!`, foreign items), at any depth: for an
/// item re-exported by a module's face, the file that defines it.
struct Definitions(BTreeSet<String>);

impl<'ast> Visit<'ast> for Definitions {
    fn visit_item(&mut self, item: &'ast Item) {
        let name = match item {
            Item::Const(i) => Some(&i.ident),
            Item::Enum(i) => Some(&i.ident),
            Item::Fn(i) => Some(&i.sig.ident),
            Item::Macro(i) => i.ident.as_ref(),
            Item::Static(i) => Some(&i.ident),
            Item::Struct(i) => Some(&i.ident),
            Item::Trait(i) => Some(&i.ident),
            Item::TraitAlias(i) => Some(&i.ident),
            Item::Type(i) => Some(&i.ident),
            Item::Union(i) => Some(&i.ident),
            _ => None,
        };
        self.0.extend(name.map(ToString::to_string));
        visit::visit_item(self, item);
    }

    fn visit_foreign_item(&mut self, item: &'ast ForeignItem) {
        let name = match item {
            ForeignItem::Fn(i) => Some(&i.sig.ident),
            ForeignItem::Static(i) => Some(&i.ident),
            ForeignItem::Type(i) => Some(&i.ident),
            _ => None,
        };
        self.0.extend(name.map(ToString::to_string));
    }
}

/// The absolute module paths (with the item name, where one follows) one file names.
struct References<'a> {
    /// The module the visitor is in: the file's, or an inline module inside it.
    here: ModPath,
    /// The file's own module.
    file: &'a ModPath,
    files: &'a BTreeMap<ModPath, PathBuf>,
    out: Vec<ModPath>,
}

impl References<'_> {
    fn add(&mut self, path: &[String], glob: bool) {
        self.out
            .extend(absolute(&self.here, path, glob, self.files));
    }
}

impl<'ast> Visit<'ast> for References<'_> {
    fn visit_item_mod(&mut self, module: &'ast syn::ItemMod) {
        self.here.push(module.ident.to_string());
        visit::visit_item_mod(self, module);
        self.here.pop();
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        if item.leading_colon.is_some() {
            return;
        }
        let reexport = !matches!(item.vis, Visibility::Inherited);
        let mut paths = Vec::new();
        use_paths(&item.tree, &mut Vec::new(), &mut paths);
        for (path, glob) in paths {
            let Some(abs) = absolute(&self.here, &path, glob, self.files) else {
                continue;
            };
            // `pub use` of the module's own descendants is its face.
            if reexport && abs.len() > self.file.len() && abs.starts_with(self.file) {
                continue;
            }
            self.out.push(abs);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            let segments: Vec<String> = path.segments.iter().map(|s| s.ident.to_string()).collect();
            self.add(&segments, false);
        }
        visit::visit_path(self, path);
    }

    fn visit_vis_restricted(&mut self, _: &'ast syn::VisRestricted) {}

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        visit::visit_macro(self, mac);
        let tokens = TokenBuffer::new2(mac.tokens.clone());
        let mut paths = Vec::new();
        token_paths(tokens.begin(), &mut paths);
        for path in paths {
            self.add(&path, false);
        }
    }
}

/// The paths a use tree names under `prefix`, each with whether it is a glob:
/// `a::{b, c::{d as e, *}}` gives `a::b`, `a::c::d` and `a::c` (a glob).
fn use_paths(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, bool)>) {
    let with = |prefix: &[String], ident: &syn::Ident| {
        let mut path = prefix.to_vec();
        path.push(ident.to_string());
        path
    };
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_paths(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => out.push((with(prefix, &n.ident), false)),
        UseTree::Rename(r) => out.push((with(prefix, &r.ident), false)),
        UseTree::Glob(_) => out.push((prefix.clone(), true)),
        UseTree::Group(g) => g.items.iter().for_each(|t| use_paths(t, prefix, out)),
    }
}

/// The paths (`a::b::c`, by segment) in a macro's tokens, groups included.
fn token_paths(mut at: Cursor, out: &mut Vec<Vec<String>>) {
    while !at.eof() {
        if let Some((ident, mut next)) = at.ident() {
            let mut path = vec![ident.to_string()];
            while let Some((first, colon)) = next.punct()
                && let Some((second, after)) = colon.punct()
                && first.as_char() == ':'
                && second.as_char() == ':'
                && let Some((ident, rest)) = after.ident()
            {
                path.push(ident.to_string());
                next = rest;
            }
            out.push(path);
            at = next;
        } else if let Some((inside, _, _, after)) = at.any_group() {
            token_paths(inside, out);
            at = after;
        } else if let Some((_, next)) = at.token_tree() {
            at = next;
        } else {
            break;
        }
    }
}

/// `path` as an absolute module path from `here`, if it names something in this crate
/// (a lone `crate`, `self` or `super` only as a glob's).
fn absolute(
    here: &ModPath,
    path: &[String],
    glob: bool,
    files: &BTreeMap<ModPath, PathBuf>,
) -> Option<ModPath> {
    let (first, rest) = path.split_first()?;
    if rest.is_empty() && !glob {
        return None;
    }
    let base = match first.as_str() {
        "crate" => Vec::new(),
        "self" => here.clone(),
        "super" => {
            let mut m = here.clone();
            m.pop()?;
            let supers = rest.iter().take_while(|s| *s == "super").count();
            for _ in 0..supers {
                m.pop()?;
            }
            return Some([m.as_slice(), &rest[supers..]].concat());
        }
        // A child module of this module, named bare (`use kernels::X`, `kernels::f()`).
        _ if files.contains_key(&[here.as_slice(), &path[..1]].concat()) => {
            return Some([here.as_slice(), path].concat());
        }
        _ => return None,
    };
    Some([base.as_slice(), rest].concat())
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

#[cfg(test)]
mod tests {
    use super::*;

    impl Graph {
        /// The files `module_file` imports (paths relative to `base`), for tests.
        fn imports_of(&self, module_file: &str, base: &Path) -> Vec<String> {
            let module = self
                .files
                .keys()
                .find(|m| self.name(m, base) == module_file);
            let to = module.map(|m| &self.edges[m]).into_iter().flatten();
            to.map(|m| self.name(m, base)).collect()
        }
    }

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

    /// What the parser gives: literals, comments and lifetimes are no paths (a brace in
    /// them opens or closes nothing), a macro's arguments are, a visibility is not, and
    /// a glob of the parent module is an import of it.
    #[test]
    fn literals_macros_visibilities_and_globs() {
        let root = src(
            "syntax",
            &[
                ("lib.rs", "mod a;\nmod b;\nmod c;\nmod d;\nmod e;\n"),
                (
                    "a.rs",
                    "fn f<'a>(x: &'a str) -> char { let _ = \"crate::b::X {\"; \
                     let _ = r#\"} crate::b::Y\"#; /* crate::b::Z { */ '{' }\n\
                     fn g() -> String { format!(\"{}\", crate::c::h()) }\n\
                     mod m { fn s() -> &'static str { \"}\" } use super::super::d::D; }\n\
                     mod inner;\nmod other;\n",
                ),
                ("a/inner.rs", "pub(in crate::a) fn k() {}\n"),
                ("a/other.rs", "use super::*;\n"),
                ("b.rs", "pub struct X;\n"),
                ("c.rs", "pub fn h() {}\n"),
                ("d.rs", "pub struct D;\n"),
                ("e.rs", "fn e() { assert!(crate::c::h() == ()); }\n"),
            ],
        );
        let g = Graph::read(&root).unwrap();
        assert_eq!(g.imports_of("a.rs", &root), ["c.rs", "d.rs"]);
        assert_eq!(g.imports_of("a/inner.rs", &root), Vec::<String>::new());
        assert_eq!(g.imports_of("a/other.rs", &root), ["a.rs"]);
        assert_eq!(g.imports_of("e.rs", &root), ["c.rs"]);
        assert!(g.circles(&root).is_empty());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_file_that_is_not_rust_is_an_error() {
        let root = src("broken", &[("lib.rs", "mod a;\n"), ("a.rs", "fn f( {\n")]);
        let err = Graph::read(&root).unwrap_err().to_string();
        assert!(err.contains("a.rs"), "{err}");
        fs::remove_dir_all(&root).unwrap();
    }
}
