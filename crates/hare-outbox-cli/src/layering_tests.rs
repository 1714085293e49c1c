//! The layering of `main.rs`, checked on the sources: a module names no module of its own
//! layer or of a layer above it.

use std::path::{Path, PathBuf};

/// The modules a file may not name (`crate::NAME`), by the layer of its path under `src/`.
fn forbidden(path: &str) -> &'static [&'static str] {
    const ABOVE_CONFIG: &[&str] = &["args", "ui", "db", "cmd"];
    match path.split('/').next().unwrap_or_default() {
        "error.rs" => &["config", "args", "ui", "db", "cmd"],
        "config" => ABOVE_CONFIG,
        "args.rs" => &["ui", "db", "cmd"],
        "ui.rs" => &["args", "db", "cmd"],
        "db.rs" => &["args", "cmd"],
        // A command names no other command (nor itself through `crate::cmd`).
        "cmd" => &["cmd"],
        _ => &[],
    }
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_module_imports_from_its_layer_or_above() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let named = regex::Regex::new(r"crate::([a-z_]+)").expect("a valid pattern");
    let mut breaches = Vec::new();
    let mut checked = 0;
    for file in &files {
        let relative = file
            .strip_prefix(&src)
            .expect("under src/")
            .to_string_lossy()
            .replace('\\', "/");
        let forbidden = forbidden(&relative);
        if forbidden.is_empty() {
            continue;
        }
        checked += 1;
        let text = std::fs::read_to_string(file).expect("a readable source file");
        // A module of config/ below its mod.rs (the sections), which must not reach back up.
        let section = relative.starts_with("config/")
            && !relative.ends_with("mod.rs")
            && !relative.ends_with("values.rs")
            && !relative.ends_with("tests.rs");
        let mut in_tests = false;
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") {
                continue;
            }
            if code.contains("crate::{") {
                breaches.push(format!(
                    "{relative}:{}: name the module: use crate::MODULE::…",
                    n + 1
                ));
            }
            // A command file directly in cmd/ reaching a sibling through `super::`.
            let in_cmd = relative.starts_with("cmd/") && relative.matches('/').count() == 1;
            if in_cmd && code.contains("super::") && !code.contains("super::*") {
                breaches.push(format!("{relative}:{}: {code}", n + 1));
            }
            // Inside config/, a section module names only the leaf `values` of its parent
            // (test code, after `#[cfg(test)]`, may use the whole loader).
            if code == "#[cfg(test)]" {
                in_tests = true;
            }
            if section && !in_tests && code.contains("crate::config::") {
                let leaf_only = code.contains("crate::config::values::")
                    && code.matches("crate::config::").count() == 1;
                if !leaf_only {
                    breaches.push(format!("{relative}:{}: {code}", n + 1));
                }
            }
            for c in named.captures_iter(code) {
                if forbidden.contains(&&c[1]) {
                    breaches.push(format!("{relative}:{}: {code}", n + 1));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} files checked");
    assert!(
        breaches.is_empty(),
        "imports against the layering of main.rs:\n{}",
        breaches.join("\n")
    );
}

#[test]
fn the_check_sees_a_breach() {
    assert!(forbidden("config/wakeup.rs").contains(&"cmd"));
    assert!(forbidden("config/delivery/env.rs").contains(&"ui"));
    assert!(forbidden("cmd/events.rs").contains(&"cmd"));
    assert!(forbidden("ui.rs").contains(&"db") && !forbidden("db.rs").contains(&"ui"));
    assert!(forbidden("main.rs").is_empty());
}
