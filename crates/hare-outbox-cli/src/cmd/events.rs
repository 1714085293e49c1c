//! `events`: the outbox read as the journal of the system, as a table or JSON lines, optionally
//! following new events; and `events --id/--seq`, one event in full with the previous and next
//! event of its ordering key.
//!
//! Values are checked before connecting (a mistake is exit code 2); an event that does not
//! exist is a failure at run time (exit code 1). Reports go to stdout, progress to stderr.

use std::io::Write as _;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use hare_outbox::backend::JournalBackend;
use hare_outbox::journal::{Cursor, EventQuery, ObjectName, ObjectRef, author_of, changes};
use hare_outbox::{CancellationToken, Journal, OutboxEvent};
use serde_json::{Value, json};

use crate::args::{EventsArgs, topic_refs};
use crate::config::Settings;
use crate::config::journal::check_topics;
use crate::db::Db;
use crate::error::usage;
use crate::ui::{cell, event_json, printable, terminal_width};

/// How many sequences below the newest one shown `events --follow` looks back for events whose
/// transaction committed late.
const FOLLOW_LOOKBACK: i64 = 100;

/// The width of the field names of `events --id`.
const NAME_WIDTH: usize = 15;

/// The query `events` runs, built from its options.
///
/// # Errors
/// A usage error naming the option and what is allowed.
pub fn events_query(args: &EventsArgs) -> anyhow::Result<EventQuery> {
    check_topics("--topic", &args.topics)?;
    let statuses = &args.statuses;
    let mut query = EventQuery::new()
        .with_topics(&topic_refs(&args.topics))
        .context("--topic")?
        .with_statuses(statuses)
        .with_limit(args.limit)
        .context("--limit")?
        .with_created(args.since, args.until)
        .map_err(|e| usage(format!("--since/--until: {e}")))?;
    if let Some(object) = &args.object {
        query = query
            .with_object(object)
            .map_err(|e| usage(format!("--object: {e}")))?;
    }
    if let Some(author) = &args.author {
        query = query
            .with_author(author)
            .map_err(|e| usage(format!("--author: {e}")))?;
    }
    if let Some(before) = args.before {
        query = query.with_cursor(Cursor::Before(before));
    }
    Ok(query)
}

/// `hare-outbox events`: prints a page of the journal, oldest first, then with `--follow` the
/// events written later until `shutdown` is cancelled.
///
/// # Errors
/// A usage error for a bad option; a runtime error when the database is unreachable or the first
/// page cannot be read (while following, a failed poll is logged and retried).
pub async fn events(
    settings: &Settings,
    args: &EventsArgs,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if args.id.is_some() || args.seq.is_some() {
        return event(settings, args).await;
    }
    let query = events_query(args)?.with_object_name(settings.dashboard.object_name);
    let db = Db::connect(settings.database()?).await?;
    with_backend!(db, backend => {
        let journal = Journal::new(backend, settings.table.clone());
        events_on(&journal, query, args, settings.dashboard.object_name, shutdown).await
    })
}

async fn events_on<B: JournalBackend>(
    journal: &Journal<B>,
    query: EventQuery,
    args: &EventsArgs,
    object_name: ObjectName,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let page = journal
        .list(&query)
        .await
        .with_context(|| format!("reading the journal of {} failed", journal.table()))?;
    let first_page_full = page.full;
    let mut events = page.events;
    events.reverse();
    let mut printer = Printer::new(args.json, &events, object_name);
    if !printer.print(&events) || !args.follow {
        return Ok(());
    }
    // Follow from the newest event shown; with none shown, from the newest in the table, so old
    // events are not printed as if they were new.
    let mut last = match events.last() {
        Some(event) => event.sequence,
        None => journal
            .list(&EventQuery::new().with_limit(1)?)
            .await
            .with_context(|| format!("reading the journal of {} failed", journal.table()))?
            .events
            .first()
            .map_or(0, |e| e.sequence),
    };
    // Sequences are taken at INSERT but become visible at COMMIT, so a long transaction's event
    // can appear below one already shown. Each poll therefore looks FOLLOW_LOOKBACK sequences
    // back and skips what it printed; it never looks below the first page when that page was
    // full (older matching events exist there and are not new).
    let floor = if first_page_full {
        events.first().map_or(0, |e| e.sequence)
    } else {
        0
    };
    let mut seen: std::collections::BTreeSet<i64> = events.iter().map(|e| e.sequence).collect();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return Ok(()),
            () = tokio::time::sleep(args.interval) => {}
        }
        let mut cursor = last.saturating_sub(FOLLOW_LOOKBACK).max(floor);
        loop {
            let next = query.clone().with_cursor(Cursor::After(cursor));
            let page = tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                page = journal.list(&next) => page,
            };
            let page = match page {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!("reading new events failed ({e}); trying again");
                    break;
                }
            };
            let new: Vec<OutboxEvent> = page
                .events
                .iter()
                .filter(|e| !seen.contains(&e.sequence))
                .cloned()
                .collect();
            if let Some(event) = page.events.last() {
                cursor = event.sequence;
                last = last.max(event.sequence);
            }
            seen.extend(new.iter().map(|e| e.sequence));
            if !printer.print(&new) {
                return Ok(());
            }
            if !page.full {
                break;
            }
        }
        let keep_from = last.saturating_sub(FOLLOW_LOOKBACK);
        seen = seen.split_off(&keep_from);
    }
}

/// Writes events to stdout as a table (header once, fixed column widths) or as JSON lines.
struct Printer {
    json: bool,
    header_done: bool,
    widths: Widths,
    object_name: ObjectName,
}

/// Column widths of the table, in terminal cells.
#[derive(Debug, Clone, Copy)]
struct Widths {
    sequence: usize,
    topic: usize,
    object: usize,
    data: usize,
    who: usize,
}

const TIME_WIDTH: usize = 19;

const STATUS_WIDTH: usize = 9;

const ATTEMPTS_WIDTH: usize = 8;

const GAP: &str = "  ";

impl Widths {
    /// Widths fitting `events` (bounded per column), the data column taking what is left of
    /// `terminal` cells.
    fn fit(events: &[OutboxEvent], terminal: usize, object_name: ObjectName) -> Widths {
        let longest = |f: &dyn Fn(&OutboxEvent) -> String, min: usize, max: usize| {
            events
                .iter()
                .map(|e| console::measure_text_width(&f(e)))
                .max()
                .unwrap_or(0)
                .clamp(min, max)
        };
        let sequence = longest(&|e| e.sequence.to_string(), 6, 20);
        let topic = longest(&|e| e.topic.clone(), 12, 32);
        let object = longest(
            &|e| ObjectRef::named(e, object_name).unwrap_or_default(),
            8,
            28,
        );
        let who = longest(&|e| author_of(e).unwrap_or_default().to_owned(), 6, 16);
        let fixed =
            sequence + topic + object + who + 2 * TIME_WIDTH + STATUS_WIDTH + ATTEMPTS_WIDTH;
        let data = terminal.saturating_sub(fixed + 8 * GAP.len()).max(16);
        Widths {
            sequence,
            topic,
            object,
            data,
            who,
        }
    }
}

fn time_cell(time: Option<DateTime<Utc>>) -> String {
    time.map_or_else(
        || "-".to_owned(),
        |t| t.format("%Y-%m-%d %H:%M:%S").to_string(),
    )
}

impl Printer {
    fn new(json: bool, first: &[OutboxEvent], object_name: ObjectName) -> Printer {
        Printer {
            json,
            header_done: false,
            widths: Widths::fit(first, terminal_width(), object_name),
            object_name,
        }
    }

    fn header(&self) -> String {
        use console::Alignment::{Left, Right};
        let w = self.widths;
        [
            cell("№", w.sequence, Right),
            cell("event", w.topic, Left),
            cell("object", w.object, Left),
            cell("data", w.data, Left),
            cell("created (UTC)", TIME_WIDTH, Left),
            cell("processed (UTC)", TIME_WIDTH, Left),
            cell("who", w.who, Left),
            cell("status", STATUS_WIDTH, Left),
            cell("attempts", ATTEMPTS_WIDTH, Right),
        ]
        .join(GAP)
    }

    fn row(&self, event: &OutboxEvent, now: DateTime<Utc>) -> String {
        use console::Alignment::{Left, Right};
        let w = self.widths;
        let data = serde_json::to_string(&event.payload).unwrap_or_default();
        [
            cell(&event.sequence.to_string(), w.sequence, Right),
            cell(&event.topic, w.topic, Left),
            cell(
                &ObjectRef::named(event, self.object_name).unwrap_or_default(),
                w.object,
                Left,
            ),
            cell(&data, w.data, Left),
            cell(&time_cell(Some(event.created_at)), TIME_WIDTH, Left),
            cell(
                &time_cell(event.published_at.or(event.dead_lettered_at)),
                TIME_WIDTH,
                Left,
            ),
            cell(author_of(event).unwrap_or("-"), w.who, Left),
            cell(event.status(now).name(), STATUS_WIDTH, Left),
            cell(&event.attempts.to_string(), ATTEMPTS_WIDTH, Right),
        ]
        .join(GAP)
        .trim_end()
        .to_owned()
    }

    /// Prints `events`; `false` when stdout is closed (a pager or `head` quit), so the caller
    /// stops.
    fn print(&mut self, events: &[OutboxEvent]) -> bool {
        let now = Utc::now();
        let mut text = String::new();
        if !self.json && !self.header_done {
            text.push_str(self.header().trim_end());
            text.push('\n');
            self.header_done = true;
        }
        for event in events {
            if self.json {
                text.push_str(&event_json(event, now, self.object_name).to_string());
            } else {
                text.push_str(&self.row(event, now));
            }
            text.push('\n');
        }
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
            .is_ok()
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_cells_are_cut_and_cleaned() {
        assert_eq!(cell("abcdef", 4, console::Alignment::Left), "abc…");
        assert_eq!(cell("ab", 4, console::Alignment::Right), "  ab");
        assert_eq!(printable("a\u{1b}[2Jb\n"), "a?[2Jb?");
        let mut e = OutboxEvent::new(
            "doc.updated",
            serde_json::json!({"model": "sales_orders", "pk": 22, "changes": {"qty": [1, 2]}}),
        );
        e.sequence = 42;
        e.headers
            .insert("author".to_owned(), serde_json::json!("alice"));
        let printer = Printer {
            json: false,
            header_done: false,
            widths: Widths::fit(std::slice::from_ref(&e), 160, ObjectName::Table),
            object_name: ObjectName::Table,
        };
        let row = printer.row(&e, Utc::now());
        assert!(
            row.contains("sales_orders #22") && row.contains("alice"),
            "{row}"
        );
        assert!(console::measure_text_width(&row) <= 160, "{row}");
        let json = event_json(&e, Utc::now(), ObjectName::Table);
        assert_eq!(json["status"], "pending");
        assert_eq!(json["object"], "sales_orders #22");
        assert_eq!(json["author"], "alice");
        assert_eq!(json["sequence"], 42);
    }

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
}
