//! `events --id/--seq` (one event in full) and `keys --held` (the ordering keys held back by
//! their head), through [`Journal`](hare_outbox::Journal).
//!
//! Values are checked before connecting (a mistake is exit code 2); an event that does not
//! exist is a failure at run time (exit code 1). Reports go to stdout.

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use hare_outbox::backend::JournalBackend;
use hare_outbox::journal::{
    MAX_FILTER_LENGTH, ObjectName, ObjectRef, WAITING_COUNT_CAP, author_of, changes,
};
use hare_outbox::{Journal, OutboxEvent};
use serde_json::{Value, json};

use crate::cli::{EventsArgs, KeysArgs};
use crate::commands::Db;
use crate::config::Settings;
use crate::error::usage;
use crate::journal::{age_text, cell, event_json, printable, terminal_width};

/// The width of the field names of `events --id`.
const NAME_WIDTH: usize = 15;

// ---------------------------------------------------------------------------------------------
// events --id / --seq

/// `hare-outbox events --id UUID` or `--seq N`: one event in full (or as one JSON object with
/// `--json`), with the previous and next event of its ordering key.
///
/// # Errors
/// A runtime error when the database is unreachable or no event has that id or sequence.
pub async fn event(settings: &Settings, args: &EventsArgs) -> anyhow::Result<()> {
    let db = Db::connect(settings.database()?).await?;
    with_backend!(db, backend => {
        let journal = Journal::new(backend, settings.table.clone());
        event_on(&journal, args, settings.dashboard.object_name).await
    })
}

async fn event_on<B: JournalBackend>(
    journal: &Journal<B>,
    args: &EventsArgs,
    object_name: ObjectName,
) -> anyhow::Result<()> {
    let (found, named) = match (args.id, args.seq) {
        (Some(id), _) => (journal.get(id).await, format!("id {id}")),
        (None, Some(seq)) => (
            journal.get_by_sequence(seq).await,
            format!("sequence {seq}"),
        ),
        (None, None) => return Err(usage("events needs --id or --seq to print one event")),
    };
    let table = journal.table();
    let event = found
        .with_context(|| format!("reading the event of {table} failed"))?
        .ok_or_else(|| anyhow::anyhow!("no event of {table} has {named}"))?;
    let around = journal
        .neighbours(&event)
        .await
        .with_context(|| format!("reading the neighbours of the event's key in {table} failed"))?;
    let now = Utc::now();
    if args.json {
        let mut value = event_json(&event, now, object_name);
        if let Some(map) = value.as_object_mut() {
            map.insert(
                "neighbours".to_owned(),
                json!({"previous": around.previous, "next": around.next}),
            );
        }
        println!("{value}");
    } else {
        print!(
            "{}",
            event_text(&event, now, object_name, around.previous, around.next)
        );
    }
    Ok(())
}

fn time(t: Option<DateTime<Utc>>) -> String {
    t.map_or_else(
        || "-".to_owned(),
        |t| t.format("%Y-%m-%d %H:%M:%S%.3f UTC").to_string(),
    )
}

/// `text`, or `-` for none (made printable line by line by [`field`]).
fn or_dash(text: Option<&str>) -> String {
    text.map_or_else(|| "-".to_owned(), str::to_owned)
}

/// A value's lines after its name: the first beside it, the others indented under it.
fn field(out: &mut String, name: &str, value: &str) {
    let pad = " ".repeat(NAME_WIDTH);
    for (i, line) in value.lines().enumerate() {
        if i == 0 {
            out.push_str(&format!("{name:<NAME_WIDTH$}{}\n", printable(line)));
        } else {
            out.push_str(&format!("{pad}{}\n", printable(line)));
        }
    }
    if value.is_empty() {
        out.push_str(&format!("{name}\n"));
    }
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// One event as `events --id` prints it: a heading, then one field per line.
pub fn event_text(
    event: &OutboxEvent,
    now: DateTime<Utc>,
    object_name: ObjectName,
    previous: Option<i64>,
    next: Option<i64>,
) -> String {
    let mut out = format!(
        "№ {} · {} · {}\n",
        event.sequence,
        printable(&event.topic),
        event.status(now).name()
    );
    field(&mut out, "id", &event.id.to_string());
    field(
        &mut out,
        "object",
        &or_dash(ObjectRef::named(event, object_name).as_deref()),
    );
    field(&mut out, "who", &or_dash(author_of(event)));
    field(&mut out, "created", &time(Some(event.created_at)));
    field(&mut out, "processed", &time(event.published_at));
    field(&mut out, "attempts", &event.attempts.to_string());
    field(&mut out, "next attempt", &time(event.next_attempt_at));
    field(&mut out, "dead-lettered", &time(event.dead_lettered_at));
    field(&mut out, "leased by", &or_dash(event.leased_by.as_deref()));
    field(&mut out, "lease until", &time(event.lease_until));
    let key = match &event.ordering_key {
        None => "- (unordered)".to_owned(),
        Some(key) => {
            let seq = |s: Option<i64>| s.map_or_else(|| "-".to_owned(), |s| format!("№ {s}"));
            format!("{key} (previous {}, next {})", seq(previous), seq(next))
        }
    };
    field(&mut out, "ordering key", &key);
    field(
        &mut out,
        "idempotency",
        &or_dash(event.idempotency_key.as_deref()),
    );
    field(
        &mut out,
        "last error",
        &or_dash(event.last_error.as_deref()),
    );
    let changed = changes(&event.payload);
    if !changed.is_empty() {
        let text = changed
            .iter()
            .map(|c| {
                let value = |v: &Option<Value>| v.as_ref().map_or("?".to_owned(), Value::to_string);
                format!("{}: {} → {}", c.column, value(&c.before), value(&c.after))
            })
            .collect::<Vec<_>>()
            .join("\n");
        field(&mut out, "changes", &text);
    }
    field(&mut out, "payload", &pretty(&event.payload));
    field(
        &mut out,
        "headers",
        &pretty(&Value::Object(event.headers.clone())),
    );
    for (name, value) in &event.extra {
        field(&mut out, name, &pretty(value));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// keys --held

/// `hare-outbox keys --held`: one page of the ordering keys held back by a dead or failing head,
/// as a table (with where the next page starts) or one JSON object with `--json`.
///
/// # Errors
/// A usage error, before connecting, for an `--after` longer than 255 characters or holding
/// NUL; a runtime error when the database is unreachable.
pub async fn keys(settings: &Settings, args: &KeysArgs) -> anyhow::Result<()> {
    let after = args.after.clone().unwrap_or_default();
    if after.chars().count() > MAX_FILTER_LENGTH || after.contains('\0') {
        return Err(usage(format!(
            "--after of {} characters is not allowed; an ordering key has at most \
             {MAX_FILTER_LENGTH} characters and no NUL",
            after.chars().count()
        )));
    }
    let db = Db::connect(settings.database()?).await?;
    let page = with_backend!(db, backend => {
        Journal::new(backend, settings.table.clone())
            .held_keys(&after, args.limit)
            .await
    })
    .with_context(|| format!("reading the held keys of {} failed", settings.table))?;
    let now = Utc::now();
    let object_name = settings.dashboard.object_name;
    if args.json {
        let keys: Vec<Value> = page
            .keys
            .iter()
            .map(|k| {
                json!({
                    "ordering_key": k.ordering_key,
                    "waiting": k.waiting,
                    "waiting_capped": k.waiting >= WAITING_COUNT_CAP,
                    "head": event_json(&k.head, now, object_name),
                })
            })
            .collect();
        let json = json!({
            "table": settings.table.to_string(),
            "keys": keys,
            "next_after": page.next_after,
            "walked": page.walked,
        });
        println!("{json}");
        return Ok(());
    }
    use console::Alignment::{Left, Right};
    let key_width = page
        .keys
        .iter()
        .map(|k| console::measure_text_width(&k.ordering_key))
        .max()
        .unwrap_or(0)
        .clamp(3, 40);
    let fixed = key_width + 8 + 20 + 9 + 8 + 7 + 26 + 7 * 2;
    let error_width = terminal_width().saturating_sub(fixed).max(16);
    let row = |cells: [(String, usize, console::Alignment); 8]| {
        cells
            .iter()
            .map(|(text, width, align)| cell(text, *width, *align))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_owned()
    };
    let mut text = String::new();
    text.push_str(&row([
        ("key".into(), key_width, Left),
        ("№".into(), 8, Right),
        ("topic".into(), 20, Left),
        ("status".into(), 9, Left),
        ("attempts".into(), 8, Right),
        ("waiting".into(), 7, Right),
        ("waiting since (UTC)".into(), 26, Left),
        ("last error".into(), error_width, Left),
    ]));
    text.push('\n');
    for k in &page.keys {
        let head = &k.head;
        let since = format!(
            "{} ({})",
            head.created_at.format("%Y-%m-%d %H:%M:%S"),
            age_text((now - head.created_at).as_seconds_f64())
        );
        let waiting = if k.waiting >= WAITING_COUNT_CAP {
            format!("{}+", k.waiting)
        } else {
            k.waiting.to_string()
        };
        text.push_str(&row([
            (k.ordering_key.clone(), key_width, Left),
            (head.sequence.to_string(), 8, Right),
            (head.topic.clone(), 20, Left),
            (head.status(now).name().to_owned(), 9, Left),
            (head.attempts.to_string(), 8, Right),
            (waiting, 7, Right),
            (since, 26, Left),
            (
                head.last_error.clone().unwrap_or_default(),
                error_width,
                Left,
            ),
        ]));
        text.push('\n');
    }
    let count = page.keys.len();
    text.push_str(&format!(
        "{}: {count} held key{} ({} keys with undelivered events looked at); {}\n",
        settings.table,
        if count == 1 { "" } else { "s" },
        page.walked,
        match &page.next_after {
            Some(after) => format!("next page: --after {}", shell_quote(after)),
            None => "no more keys".to_owned(),
        }
    ));
    print!("{text}");
    Ok(())
}

/// `text` quoted for a POSIX shell when it holds anything but letters, digits and `-_.:/@`.
fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:/@".contains(c))
    {
        printable(text)
    } else {
        format!("'{}'", printable(&text.replace('\'', r"'\''")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_in_full() {
        let mut e = OutboxEvent::new(
            "doc.updated",
            json!({"model": "prod_order", "table": "plan_prod_orders", "pk": 18,
                   "changed": ["status"], "before": {"status": "confirmed"},
                   "after": {"status": "launched"}}),
        );
        e.sequence = 138;
        e.ordering_key = Some("prod_order:18".into());
        e.last_error = Some("line one\nline\u{1b}two".into());
        e.extra.insert("result".into(), json!({"code": 200}));
        let text = event_text(&e, Utc::now(), ObjectName::Table, Some(124), None);
        assert!(
            text.starts_with("№ 138 · doc.updated · pending\n"),
            "{text}"
        );
        assert!(
            text.contains("\nobject         plan_prod_orders #18\n"),
            "{text}"
        );
        assert!(
            text.contains("\nordering key   prod_order:18 (previous № 124, next -)\n"),
            "{text}"
        );
        assert!(text.contains("\nchanges        status: \"confirmed\" → \"launched\"\n"));
        assert!(text.contains("\nlast error     line one\n               line?two\n"));
        assert!(
            text.contains("\nresult         {\n                 \"code\": 200\n"),
            "{text}"
        );
        let label = event_text(&e, Utc::now(), ObjectName::Label, None, None);
        assert!(label.contains("\nobject         prod_order #18\n"));
    }

    #[test]
    fn keys_are_quoted_for_the_shell_when_needed() {
        assert_eq!(shell_quote("order:22"), "order:22");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
