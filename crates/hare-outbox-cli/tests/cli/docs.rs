//! The README stays true: its Rust quick start is the facade crate's tested example, and its two
//! set-up commands are the ones this repository provides.

const README: &str = include_str!("../../../../README.md");
const FACADE: &str = include_str!("../../../hare-outbox/src/lib.rs");

/// The first fenced block of `text` that opens with "```" + `lang`.
fn fenced<'a>(text: &'a str, lang: &str) -> Vec<&'a str> {
    let mut lines = text
        .lines()
        .skip_while(|l| l.trim() != format!("```{lang}"));
    lines.next().expect("opening fence");
    lines.take_while(|l| l.trim() != "```").collect()
}

#[test]
fn readme_quick_start_is_the_facade_doc_example() {
    let doc: String = FACADE
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .collect::<Vec<_>>()
        .join("\n");
    // The example without the lines rustdoc hides.
    let example: Vec<&str> = fenced(&doc, "")
        .into_iter()
        .filter(|l| !(l.starts_with("# ") || *l == "#"))
        .collect();
    assert!(example.len() > 10, "the facade crate doc has no example");
    assert_eq!(
        fenced(README, "rust"),
        example,
        "README.md's Rust quick start differs from the example in crates/hare-outbox/src/lib.rs; copy it over"
    );
}

#[test]
fn readme_gives_the_two_set_up_commands() {
    let block = fenced(README, "sh");
    let commands: Vec<&str> = block
        .iter()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .collect();
    assert_eq!(
        commands,
        ["cargo run -p hare-outbox-cli -- demo", "scripts/test.sh"]
    );
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for script in ["scripts/test.sh", ".ci/run"] {
        let text = std::fs::read_to_string(root.join(script)).expect(script);
        assert!(text.starts_with("#!/usr/bin/env bash\n"), "{script}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(root.join(script))
                .expect(script)
                .permissions()
                .mode();
            assert!(mode & 0o111 != 0, "{script} must be executable");
        }
    }
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    assert!(
        ci.contains("set -euo pipefail") && ci.contains("exec bash scripts/test.sh"),
        "{ci}"
    );
}
