//! The quick start the README and the guide quote is the example CI runs, verbatim.

const QUICK_START: &str = include_str!("../examples/quick_start.rs");

fn quoted(doc: &str, path: &str) {
    let block = format!("```rust\n{QUICK_START}```");
    assert!(
        doc.contains(&block),
        "{path} must quote crates/capture/examples/quick_start.rs verbatim in a ```rust block"
    );
}

#[test]
fn the_readme_and_the_guide_quote_the_quick_start_example() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for path in ["README.md", "docs/guide.md"] {
        let doc = std::fs::read_to_string(format!("{root}/{path}")).unwrap();
        quoted(&doc, path);
    }
}

#[test]
fn the_quick_start_is_at_most_25_lines() {
    assert!(
        QUICK_START.lines().count() <= 25,
        "{}",
        QUICK_START.lines().count()
    );
}
