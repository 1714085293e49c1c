//! Every config example the project publishes is accepted by the command's config loader: the
//! TOML blocks of README.md and docs/, and hare-outbox.example.toml; and every key the example,
//! the README and the help texts name.

use crate::config::{Overrides, parse, resolve};

const README: &str = include_str!("../../../README.md");
const ARCHITECTURE: &str = include_str!("../../../docs/architecture.md");
const STATE_MACHINE: &str = include_str!("../../../docs/state_machine.md");
const EXAMPLE: &str = include_str!("../../../hare-outbox.example.toml");

/// The fenced TOML blocks of `text` that are `hare-outbox` config files (not `Cargo.toml`).
fn toml_blocks(text: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if line.trim() != "```toml" {
            continue;
        }
        let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
        let block = block.join("\n");
        if !block.contains("[dependencies]") && !block.contains("[package]") {
            blocks.push(block);
        }
    }
    blocks
}

/// An environment that gives every variable an example names a value of the right shape.
fn env(name: &str) -> Option<String> {
    let value = if name.contains("KAFKA") {
        "127.0.0.1:9092"
    } else if name.contains("REDIS") {
        "redis://:pw@127.0.0.1:6379/0"
    } else if name.contains("AMQP") || name.contains("RABBIT") {
        "amqp://u:pw@127.0.0.1:5672/%2f"
    } else if name.contains("NATS") {
        "nats://127.0.0.1:4222"
    } else if name.contains("MQTT") {
        "mqtt://127.0.0.1:1883?client_id=example"
    } else if name.ends_with("_URL") {
        // HARE_OUTBOX_DATABASE_URL and the like are overrides the examples do not need.
        return None;
    } else {
        "s3cret"
    };
    Some(value.to_owned())
}

#[test]
fn every_published_example_is_accepted() -> Result<(), toml::de::Error> {
    let mut examples: Vec<(String, String)> =
        vec![("hare-outbox.example.toml".into(), EXAMPLE.into())];
    for (file, text) in [
        ("README.md", README),
        ("docs/architecture.md", ARCHITECTURE),
        ("docs/state_machine.md", STATE_MACHINE),
    ] {
        for (i, block) in toml_blocks(text).into_iter().enumerate() {
            examples.push((format!("{file} TOML block #{}", i + 1), block));
        }
    }
    assert!(examples.len() >= 5, "the README has its config examples");
    for (name, text) in examples {
        let file = parse(&text).unwrap_or_else(|e| panic!("{name} does not parse: {e}\n{text}"));
        let resolved = resolve(file, None, Overrides::default(), &env);
        // A fragment showing named deliveries without routes needs a default to run.
        let resolved = match resolved {
            Err(e) if format!("{e:#}").contains("nothing sends events to them") => {
                let first = text
                    .lines()
                    .find_map(|l| l.trim().strip_prefix("[deliveries.")?.strip_suffix(']'))
                    .expect("a [deliveries.NAME] section");
                let text = format!("default_delivery = {first:?}\n{text}");
                resolve(parse(&text)?, None, Overrides::default(), &env)
            }
            other => other,
        };
        resolved.unwrap_or_else(|e| panic!("{name} is refused: {e:#}\n{text}"));
    }
    Ok(())
}

#[test]
fn unknown_keys_and_kinds_are_refused_when_the_file_is_read() {
    let e = parse("[delivery]\nkind = \"redis\"\nurl = \"redis://h/0\"\nstreem = \"s\"\n")
        .expect_err("a key no kind has")
        .to_string();
    assert!(e.contains("unknown field `streem`"), "{e}");
    assert!(e.contains("line 4"), "{e}");
    let e = parse("[delivery]\nkind = \"carrier-pigeon\"\n")
        .expect_err("an unknown kind")
        .to_string();
    assert!(e.contains("unknown variant `carrier-pigeon`"), "{e}");
    assert!(e.contains("`taskiq`"), "{e}");
}

#[test]
fn a_value_of_the_wrong_type_is_refused_at_its_line() {
    for (text, line, expected) in [
        (
            "[delivery]\nkind = \"mqtt\"\nhost = \"h\"\nport = \"x\"\n",
            "line 4",
            "invalid type: string \"x\", expected i64",
        ),
        // Keys are read in name order, so `headers` comes before `kind`.
        (
            "[delivery]\nkind = \"webhook\"\nurl = \"http://h/\"\nheaders = 3\n",
            "line 4",
            "invalid type: integer `3`, expected a map",
        ),
        (
            "[delivery]\nkind = \"redis\"\nurl = \"redis://h/0\"\nbreaker = \"yes\"\n",
            "line 4",
            "invalid type: string \"yes\", expected a boolean",
        ),
    ] {
        let e = parse(text).expect_err(text).to_string();
        assert!(e.contains(line) && e.contains(expected), "{text}\n{e}");
    }
}

/// Whether `key = value` under `header` (`""` for the top level) is a key the file accepts:
/// parsing may fail on the value, but never with "unknown field".
fn key_is_accepted(header: &str, key: &str, value: &str) -> Result<(), String> {
    let text = format!("{header}\n{key} = {value}\n");
    match parse(&text) {
        Err(e) if e.to_string().contains("unknown field") => Err(format!("{text}: {e}")),
        _ => Ok(()),
    }
}

/// Every `key = value` line of `text` (TOML, keys commented out with `#` included) with the
/// section it is under (headers commented out included). Prose lines whose right-hand side
/// is not a TOML value are skipped.
fn keys_in_toml(text: &str) -> Vec<(String, String, String)> {
    let header_re = regex::Regex::new(r"^#?\s*(\[\[?[a-z_.]+\]\]?)\s*(#.*)?$").unwrap();
    let key_re = regex::Regex::new(r"^#?\s*([a-z_]+)\s*=\s*(.+)$").unwrap();
    let mut header = String::new();
    let mut keys = Vec::new();
    for line in text.lines() {
        if let Some(c) = header_re.captures(line) {
            header = c[1].to_owned();
            continue;
        }
        let Some(c) = key_re.captures(line) else {
            continue;
        };
        // The value without a trailing comment, if it parses as a TOML value.
        let raw = c[2].trim();
        let value = (0..=raw.len())
            .rev()
            .filter(|i| raw.is_char_boundary(*i))
            .map(|i| raw[..i].trim())
            .find(|v| !v.is_empty() && toml::from_str::<toml::Table>(&format!("v = {v}")).is_ok());
        if let Some(value) = value {
            keys.push((header.clone(), c[1].to_owned(), value.to_owned()));
        }
    }
    keys
}

#[test]
fn every_key_named_in_the_example_the_readme_and_the_help_is_accepted() {
    use clap::CommandFactory as _;
    let mut failures = Vec::new();
    let mut checked = 0;
    let example = include_str!("../../../hare-outbox.example.toml");
    let readme = include_str!("../../../README.md");
    let mut blocks = vec![example.to_owned()];
    let mut rest = readme;
    while let Some(start) = rest.find("```toml\n") {
        let body = &rest[start + 8..];
        let end = body.find("```").unwrap_or(body.len());
        // Blocks of a Cargo.toml are not config files.
        if !body[..end].contains("[dependencies]") {
            blocks.push(body[..end].to_owned());
        }
        rest = &body[end..];
    }
    for block in &blocks {
        for (header, key, value) in keys_in_toml(block) {
            // `[delivery.headers]` and `properties` tables take any name.
            if header.ends_with(".headers]") {
                continue;
            }
            checked += 1;
            if let Err(e) = key_is_accepted(&header, &key, &value) {
                failures.push(e);
            }
        }
    }
    // `[section] key` in the README's prose and in every help text.
    let mut texts = vec![readme.to_owned()];
    fn helps(command: &mut clap::Command, out: &mut Vec<String>) {
        out.push(command.render_long_help().to_string());
        for sub in command.get_subcommands_mut() {
            helps(sub, out);
        }
    }
    let mut command = crate::args::Cli::command();
    helps(&mut command, &mut texts);
    // The README writes `[section] key`; help texts `[config: [section] key / key]`.
    let in_readme = regex::Regex::new(r"`\[([a-z_]+)\] ([a-z_]+)`").unwrap();
    let in_help =
        regex::Regex::new(r"\[(?:config|default): \[([a-z_]+)\] ([a-z_]+(?: / [a-z_]+)*)").unwrap();
    let mut from_help = 0;
    for (n, text) in texts.iter().enumerate() {
        let named = if n == 0 { &in_readme } else { &in_help };
        for c in named.captures_iter(text) {
            for key in c[2].split(" / ") {
                checked += 1;
                from_help += usize::from(n > 0);
                if let Err(e) = key_is_accepted(&format!("[{}]", &c[1]), key, "0") {
                    failures.push(e);
                }
            }
        }
    }
    assert!(
        checked > 100 && from_help >= 6,
        "{checked} keys, {from_help} from help texts"
    );
    assert!(
        failures.is_empty(),
        "keys the config file refuses:\n{}",
        failures.join("\n")
    );
}
