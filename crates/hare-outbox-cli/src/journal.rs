//! `events`, `backlog`, `dead-letters retry|cleanup` and `cleanup`: the outbox read and tended as
//! the journal of the system, through
//! [`Journal`](hare_outbox::Journal).
//!
//! Every value is checked before connecting, so a mistake is exit code 2 with nothing read or
//! changed. Reports go to stdout, progress bars and logs to stderr (bars only when stderr is a
//! terminal).

use std::io::Write as _;
use std::ops::ControlFlow;
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use hare_outbox::backend::FinishedState;
use hare_outbox::backend::JournalBackend;
use hare_outbox::journal::{CleanupOutcome, Cursor, EventQuery, ObjectName, ObjectRef, author_of};
use hare_outbox::{CancellationToken, Journal, OutboxEvent, TopicFilter};
use serde::Deserialize;

use crate::cli::{BacklogArgs, CleanupArgs, EventsArgs, RetryArgs};
use crate::commands::Db;
use crate::config::Settings;
use crate::error::{ThresholdPassed, usage};

/// How many sequences below the newest one shown `events --follow` looks back for events whose
/// transaction committed late.
const FOLLOW_LOOKBACK: i64 = 100;

/// Seconds in a day, for the `*_days` keys.
const DAY_SECONDS: f64 = 86_400.0;

// ---------------------------------------------------------------------------------------------
// Values of the command line

/// Parses a point in time for `--since`/`--until`: RFC 3339 (`2026-11-30T10:00:00Z`,
/// `2026-11-30T12:00:00+02:00`) or an age counted back from now (`15m`, `2h`, `7d`, `90s`,
/// `1h 30m`).
///
/// # Errors
/// A message naming the value and both accepted forms.
pub fn parse_time(text: &str) -> Result<DateTime<Utc>, String> {
    let text = text.trim();
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&Utc));
    }
    let age = humantime::parse_duration(text).map_err(|_| {
        format!(
            "{text:?} is neither an RFC 3339 time (2026-11-30T10:00:00Z) nor an age such as 15m, 2h or 7d"
        )
    })?;
    chrono::Duration::from_std(age)
        .ok()
        .and_then(|age| Utc::now().checked_sub_signed(age))
        .ok_or_else(|| format!("age {text:?} reaches before the year 1; use a shorter one"))
}

/// Parses an age or duration: a plain number of seconds (`300`, `0.5`) or a duration with units
/// (`15m`, `2h`, `7d`, `1h 30m`).
///
/// # Errors
/// A message naming the value and the accepted forms.
pub fn parse_age(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|_| {
            format!("{text:?} is not a duration; use 0 or more seconds, or e.g. 15m, 2h, 7d")
        });
    }
    humantime::parse_duration(text).map_err(|e| {
        format!("{text:?} is not a duration ({e}); use seconds (300) or e.g. 30s, 15m, 2h, 7d")
    })
}

/// Parses the polling interval of `--follow`: as [`parse_age`], from 10 ms to 1 hour.
///
/// # Errors
/// A message naming the value and the range allowed.
pub fn parse_interval(text: &str) -> Result<Duration, String> {
    let interval = parse_age(text)?;
    if interval < Duration::from_millis(10) || interval > Duration::from_secs(3600) {
        return Err(format!(
            "interval {text:?} is not allowed; use 10ms to 1h (e.g. 0.5, 1s, 5s)"
        ));
    }
    Ok(interval)
}

/// Checks topic patterns (exact names and `prefix*`) before anything connects.
fn check_topics(flag: &str, topics: &[String]) -> anyhow::Result<()> {
    if !topics.is_empty() {
        TopicFilter::new(Some(topics), Vec::<&str>::new())
            .map_err(|e| usage(format!("{flag}: {e}")))?;
    }
    Ok(())
}

fn topic_refs(topics: &[String]) -> Vec<&str> {
    topics.iter().map(String::as_str).collect()
}

// ---------------------------------------------------------------------------------------------
// The config file: [backlog] and [cleanup]

/// `[backlog]`: the thresholds of `hare-outbox backlog` and of `/healthz`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BacklogSection {
    /// Most pending events before the backlog counts as unhealthy.
    pub max_pending: Option<i64>,
    /// Oldest age in seconds a pending event may reach.
    pub max_age_seconds: Option<f64>,
    /// Most dead-lettered events.
    pub max_dead: Option<i64>,
    /// Topics counted (exact names and `prefix*`); absent = every topic.
    pub topics: Option<Vec<String>>,
    /// Most destinations of the relay open at once (circuit breaker): checked by `/healthz` of
    /// `relay --http`, and by `backlog` with `relay_url`.
    pub max_open_destinations: Option<i64>,
    /// The address of a running `hare-outbox relay --http`, which `backlog` asks for the
    /// relay's open destinations.
    pub relay_url: Option<String>,
}

/// The backlog thresholds, resolved; `None` = no threshold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BacklogThresholds {
    /// Most pending events.
    pub max_pending: Option<u64>,
    /// Oldest age of a pending event.
    pub max_age: Option<Duration>,
    /// Most dead-lettered events.
    pub max_dead: Option<u64>,
    /// Topics counted; empty = every topic.
    pub topics: Vec<String>,
    /// Most destinations open at once.
    pub max_open_destinations: Option<u64>,
    /// A running `relay --http` to ask for its destinations.
    pub relay_url: Option<String>,
}

impl BacklogThresholds {
    /// The thresholds `backlog` passes, one phrase each (`12 pending > max_pending 10`); empty when
    /// the backlog is within every threshold.
    pub fn passed(&self, backlog: &hare_outbox::Backlog) -> Vec<String> {
        let mut passed = Vec::new();
        let pending = u64::try_from(backlog.pending).unwrap_or_default();
        let dead = u64::try_from(backlog.dead_lettered).unwrap_or_default();
        if let Some(max) = self.max_pending
            && pending > max
        {
            passed.push(format!("{pending} pending > max_pending {max}"));
        }
        if let Some(max) = self.max_age
            && backlog.oldest_pending_age_seconds > max.as_secs_f64()
        {
            passed.push(format!(
                "oldest pending {} > max_age {}",
                age_text(backlog.oldest_pending_age_seconds),
                humantime::format_duration(max)
            ));
        }
        if let Some(max) = self.max_dead
            && dead > max
        {
            passed.push(format!("{dead} dead letters > max_dead {max}"));
        }
        passed
    }
}

/// Resolves `[backlog]`.
///
/// # Errors
/// A usage error naming the key and what is allowed.
pub fn backlog_thresholds(section: Option<&BacklogSection>) -> anyhow::Result<BacklogThresholds> {
    let Some(section) = section else {
        return Ok(BacklogThresholds::default());
    };
    let count = |key: &str, value: Option<i64>| -> anyhow::Result<Option<u64>> {
        value
            .map(|v| {
                u64::try_from(v).map_err(|_| {
                    usage(format!(
                        "{key} = {v} is not allowed; use a count, 0 or more"
                    ))
                })
            })
            .transpose()
    };
    let max_age = section
        .max_age_seconds
        .map(|v| {
            (v.is_finite() && v >= 0.0)
                .then(|| Duration::try_from_secs_f64(v).ok())
                .flatten()
                .ok_or_else(|| {
                    usage(format!(
                        "max_age_seconds = {v} is not allowed; use a number of seconds, 0 or more"
                    ))
                })
        })
        .transpose()?;
    let topics = section.topics.clone().unwrap_or_default();
    check_topics("topics", &topics)?;
    let relay_url = section
        .relay_url
        .as_deref()
        .map(relay_url)
        .transpose()
        .map_err(|e| usage(format!("relay_url: {e}")))?;
    Ok(BacklogThresholds {
        max_pending: count("max_pending", section.max_pending)?,
        max_age,
        max_dead: count("max_dead", section.max_dead)?,
        topics,
        max_open_destinations: count("max_open_destinations", section.max_open_destinations)?,
        relay_url,
    })
}

/// `[cleanup]`: how old finished events must be before `cleanup` and `dead-letters cleanup`
/// delete them when `--older-than` is not given.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CleanupSection {
    /// `cleanup`: published events older than this many days (fractions allowed).
    pub published_older_than_days: Option<f64>,
    /// `dead-letters cleanup`: dead letters older than this many days (fractions allowed).
    pub dead_lettered_older_than_days: Option<f64>,
}

/// The clean-up ages, resolved; `None` = `--older-than` is required.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanupAges {
    /// Published events older than this are deleted by `cleanup`.
    pub published: Option<Duration>,
    /// Dead letters older than this are deleted by `dead-letters cleanup`.
    pub dead_lettered: Option<Duration>,
}

/// Resolves `[cleanup]`.
///
/// # Errors
/// A usage error naming the key and what is allowed.
pub fn cleanup_ages(section: Option<&CleanupSection>) -> anyhow::Result<CleanupAges> {
    let Some(section) = section else {
        return Ok(CleanupAges::default());
    };
    let days = |key: &str, value: Option<f64>| -> anyhow::Result<Option<Duration>> {
        value
            .map(|v| {
                (v.is_finite() && v >= 0.0)
                    .then(|| Duration::try_from_secs_f64(v * DAY_SECONDS).ok())
                    .flatten()
                    .ok_or_else(|| {
                        usage(format!(
                            "{key} = {v} is not allowed; use a number of days, 0 or more"
                        ))
                    })
            })
            .transpose()
    };
    Ok(CleanupAges {
        published: days(
            "published_older_than_days",
            section.published_older_than_days,
        )?,
        dead_lettered: days(
            "dead_lettered_older_than_days",
            section.dead_lettered_older_than_days,
        )?,
    })
}

// ---------------------------------------------------------------------------------------------
// Progress on stderr

/// A spinner on stderr counting rows, drawn only when stderr is a terminal.
pub fn spinner(message: &str) -> indicatif::ProgressBar {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} {msg} {human_pos} rows ({elapsed})")
    {
        bar.set_style(style);
    }
    bar.set_message(message.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A spinner on stderr showing one step of work and its elapsed time, drawn only when stderr is
/// a terminal.
pub fn step(message: &str) -> indicatif::ProgressBar {
    if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} ({elapsed})") {
        bar.set_style(style);
    }
    bar.set_message(message.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

// ---------------------------------------------------------------------------------------------
// events

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
        return crate::views::event(settings, args).await;
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

/// One event as a JSON line: the [`OutboxEvent`] with `status`, `object` (under `object_name`)
/// and `author` added.
pub fn event_json(
    event: &OutboxEvent,
    now: DateTime<Utc>,
    object_name: ObjectName,
) -> serde_json::Value {
    let mut value = serde_json::to_value(event).unwrap_or(serde_json::Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert(
            "status".to_owned(),
            serde_json::to_value(event.status(now)).unwrap_or_default(),
        );
        map.insert(
            "object".to_owned(),
            ObjectRef::named(event, object_name).into(),
        );
        map.insert("author".to_owned(), author_of(event).into());
    }
    value
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

/// The width of the terminal stdout writes to; `COLUMNS`, else 160 when it is not a terminal.
pub(crate) fn terminal_width() -> usize {
    if let Some((_, columns)) = console::Term::stdout().size_checked() {
        return usize::from(columns);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse().ok())
        .filter(|c| *c > 0)
        .unwrap_or(160)
}

/// `text` with control characters (which could steer the terminal) shown as `?`.
pub(crate) fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect()
}

pub(crate) fn cell(text: &str, width: usize, align: console::Alignment) -> String {
    console::pad_str(&printable(text), width, align, Some("…")).into_owned()
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
// backlog

/// `hare-outbox backlog`: prints pending, the oldest pending age and dead letters; fails with
/// [`ThresholdPassed`] (exit code 4) when a threshold of the options or `[backlog]` is passed.
///
/// # Errors
/// [`ThresholdPassed`]; a usage error for a bad topic; a runtime error when the database is
/// unreachable.
pub async fn backlog(settings: &Settings, args: &BacklogArgs) -> anyhow::Result<()> {
    let file = &settings.backlog;
    let thresholds = BacklogThresholds {
        max_pending: args.max_pending.or(file.max_pending),
        max_age: args.max_age.or(file.max_age),
        max_dead: args.max_dead.or(file.max_dead),
        topics: if args.topics.is_empty() {
            file.topics.clone()
        } else {
            args.topics.clone()
        },
        max_open_destinations: args.max_open_destinations.or(file.max_open_destinations),
        relay_url: match &args.relay {
            Some(url) => Some(relay_url(url).map_err(|e| usage(format!("--relay: {e}")))?),
            None => file.relay_url.clone(),
        },
    };
    check_topics("--topic", &thresholds.topics)?;
    if args.max_open_destinations.is_some() && thresholds.relay_url.is_none() {
        return Err(usage(
            "--max-open-destinations needs --relay URL (or [backlog] relay_url): the circuit breakers live in the relay process, which `backlog` asks through its --http address",
        ));
    }
    // The relay first: it answers at once or not at all, before the database is counted.
    let open = match &thresholds.relay_url {
        Some(url) => Some(open_destinations(url).await?),
        None => None,
    };
    let db = Db::connect(settings.database()?).await?;
    let backlog = with_backend!(db, backend => {
        Journal::new(backend, settings.table.clone())
            .backlog(&topic_refs(&thresholds.topics))
            .await
    })
    .with_context(|| format!("counting the backlog of {} failed", settings.table))?;
    let mut passed = thresholds.passed(&backlog);
    if let (Some(max), Some(open)) = (thresholds.max_open_destinations, &open)
        && open.len() as u64 > max
    {
        passed.push(format!(
            "{} open destinations > max_open_destinations {max}",
            open.len()
        ));
    }
    if args.json {
        let mut json = serde_json::json!({
            "table": settings.table.to_string(),
            "pending": backlog.pending,
            "oldest_pending_age_seconds": backlog.oldest_pending_age_seconds,
            "dead_lettered": backlog.dead_lettered,
            "thresholds": {
                "max_pending": thresholds.max_pending,
                "max_age_seconds": thresholds.max_age.map(|d| d.as_secs_f64()),
                "max_dead": thresholds.max_dead,
                "max_open_destinations": thresholds.max_open_destinations,
            },
            "passed": passed,
        });
        if let Some(open) = &open {
            json["open_destinations"] = serde_json::Value::Array(open.clone());
        }
        println!("{json}");
    } else {
        println!(
            "{}: {} pending, oldest pending {}, {} dead letters",
            settings.table,
            backlog.pending,
            if backlog.pending > 0 {
                format!("{} old", age_text(backlog.oldest_pending_age_seconds))
            } else {
                "-".to_owned()
            },
            backlog.dead_lettered
        );
        if let Some(open) = &open {
            if open.is_empty() {
                println!("no destination of the relay is open");
            }
            for d in open {
                let text = |key: &str| d[key].as_str().unwrap_or("-").to_owned();
                println!(
                    "destination {} is {}: since {}, next probe {}, {} failures in a row; why: {}",
                    text("name"),
                    text("state").replace('_', "-"),
                    text("opened_at"),
                    text("next_probe_at"),
                    d["consecutive_failures"].as_u64().unwrap_or_default(),
                    text("reason")
                );
            }
        }
    }
    if passed.is_empty() {
        Ok(())
    } else {
        Err(anyhow::Error::new(ThresholdPassed(format!(
            "backlog past its thresholds: {}",
            passed.join("; ")
        ))))
    }
}

/// `url` checked as the base URL of a running `relay --http`: `http(s)://host:port[/prefix]`.
fn relay_url(url: &str) -> Result<String, String> {
    let parsed = url::Url::parse(url).map_err(|e| {
        format!("{url:?} is not a URL ({e}); give the relay's --http address, e.g. http://127.0.0.1:8080")
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "{url:?} has the scheme {:?}; give the relay's --http address, http://host:port",
            parsed.scheme()
        ));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// The open destinations of the relay serving `base` (`GET <base>/api/destinations`), as the
/// dashboard writes them.
///
/// # Errors
/// A runtime error naming the URL when the relay does not answer, answers with an error, or
/// runs without destinations.
async fn open_destinations(base: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let url = format!("{base}/api/destinations");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .context("building the HTTP client failed")?;
    let answer = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("asking the relay at {url} for its destinations failed"))?;
    let status = answer.status();
    let body = answer
        .text()
        .await
        .with_context(|| format!("reading the destinations from {url} failed"))?;
    if !status.is_success() {
        anyhow::bail!("the relay at {url} answered {status}: {body}");
    }
    let list: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("the answer of {url} is not JSON"))?;
    Ok(list["destinations"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|d| d["state"].as_str().is_some_and(|s| s != "closed"))
                .cloned()
                .collect()
        })
        .unwrap_or_default())
}

/// An age in seconds as `3m 4s` (whole seconds; `0s` below one).
pub(crate) fn age_text(seconds: f64) -> String {
    let whole = if seconds.is_finite() && seconds > 0.0 {
        seconds.floor() as u64
    } else {
        0
    };
    humantime::format_duration(Duration::from_secs(whole)).to_string()
}

// ---------------------------------------------------------------------------------------------
// dead-letters retry

/// `hare-outbox dead-letters retry`: returns the dead letters chosen by `--topic`/`--id` (or
/// every one with `--all`) to the queue with their attempts reset; prints how many.
///
/// # Errors
/// A usage error, before connecting, when no filter and no `--all` is given or a topic is
/// malformed; a runtime error when the database fails.
pub async fn retry(settings: &Settings, args: &RetryArgs) -> anyhow::Result<()> {
    if !args.all && args.topics.is_empty() && args.ids.is_empty() {
        return Err(usage(
            "dead-letters retry needs a filter: --topic TOPIC or --id UUID (repeatable), or --all to retry every dead letter",
        ));
    }
    check_topics("--topic", &args.topics)?;
    let db = Db::connect(settings.database()?).await?;
    let bar = step("returning dead letters to the queue");
    let retried = with_backend!(db, backend => {
        Journal::new(backend, settings.table.clone())
            .retry_dead_lettered(&topic_refs(&args.topics), &args.ids)
            .await
    })
    .with_context(|| format!("retrying the dead letters of {} failed", settings.table))?;
    bar.finish_and_clear();
    println!(
        "{}: {retried} dead letter{} returned to the queue",
        settings.table,
        if retried == 1 { "" } else { "s" }
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// cleanup and dead-letters cleanup

/// `hare-outbox cleanup` (`state` = published) and `dead-letters cleanup` (dead-lettered):
/// deletes the finished events older than `--older-than` (or `[cleanup]`), in batches of
/// `--batch-size` rows (default `[relay] cleanup_batch_size`), each its own short statement (seed
/// 001 § «Мёртвые» события, очередь и очистка). Pending events are never touched. A signal stops
/// it after the batch in flight; the summary says how many rows were deleted.
///
/// # Errors
/// A usage error, before connecting, when no age is given or a topic is malformed; a runtime
/// error when a delete fails (the batches before it stay deleted).
pub async fn cleanup(
    settings: &Settings,
    args: &CleanupArgs,
    state: FinishedState,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let (what, configured, key) = match state {
        FinishedState::Published => (
            "published events",
            settings.cleanup.published,
            "published_older_than_days",
        ),
        FinishedState::DeadLettered => (
            "dead letters",
            settings.cleanup.dead_lettered,
            "dead_lettered_older_than_days",
        ),
    };
    let older_than = args.older_than.or(configured).ok_or_else(|| {
        usage(format!(
            "no age given: pass --older-than (e.g. 7d, 12h) or set [cleanup] {key} in the config file"
        ))
    })?;
    check_topics("--topic", &args.topics)?;
    let topics: Vec<&str> = args.topics.iter().map(String::as_str).collect();
    let batch_size = match args.batch_size {
        Some(n) => n,
        None => settings.relay.cleanup_batch_size,
    };
    let db = Db::connect(settings.database()?).await?;
    let bar = spinner(&format!("deleting {what}"));
    // Checked between statements, so the batch in flight always finishes and is counted.
    let progress = |deleted: u64| {
        bar.set_position(deleted);
        if shutdown.is_cancelled() {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let outcome = with_backend!(db, backend => {
        Journal::new(backend, settings.table.clone())
            .cleanup(state, older_than, &topics, batch_size, &progress)
            .await
    });
    bar.finish_and_clear();
    let CleanupOutcome { deleted, stopped } = outcome.map_err(|e| match e {
        hare_outbox::Error::Validation { .. } | hare_outbox::Error::Configuration(_) => {
            usage(e.to_string())
        }
        e => anyhow::Error::new(e).context(format!("deleting {what} of {} failed", settings.table)),
    })?;
    println!(
        "{}: deleted {deleted} {what} finished more than {} ago{}",
        settings.table,
        humantime::format_duration(older_than),
        if stopped {
            " (stopped by a signal; run it again to finish)"
        } else {
            ""
        }
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_and_times_parse() {
        assert_eq!(parse_age("300").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_age("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_age("7d").unwrap(), Duration::from_secs(7 * 86_400));
        assert_eq!(parse_age("1h 30m").unwrap(), Duration::from_secs(5400));
        let e = parse_age("x").unwrap_err();
        assert!(e.contains("\"x\"") && e.contains("7d"), "{e}");
        assert!(parse_age("-5").is_err());
        assert!(parse_interval("0").is_err());
        assert_eq!(parse_interval("1s").unwrap(), Duration::from_secs(1));

        let t = parse_time("2026-11-30T10:00:00Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-30T10:00:00+00:00");
        let t = parse_time("2026-11-30T12:00:00+02:00").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-30T10:00:00+00:00");
        let ago = Utc::now() - parse_time("2h").unwrap();
        assert!((ago.num_seconds() - 7200).abs() < 5, "{ago}");
        let e = parse_time("yesterday").unwrap_err();
        assert!(e.contains("yesterday") && e.contains("RFC 3339"), "{e}");
    }

    #[test]
    fn thresholds_name_what_is_passed() {
        let t = BacklogThresholds {
            max_pending: Some(10),
            max_age: Some(Duration::from_secs(60)),
            max_dead: Some(0),
            topics: Vec::new(),
            ..BacklogThresholds::default()
        };
        let ok = hare_outbox::Backlog {
            pending: 10,
            oldest_pending_age_seconds: 59.0,
            dead_lettered: 0,
        };
        assert!(t.passed(&ok).is_empty());
        let bad = hare_outbox::Backlog {
            pending: 11,
            oldest_pending_age_seconds: 61.0,
            dead_lettered: 1,
        };
        let passed = t.passed(&bad);
        assert_eq!(passed.len(), 3, "{passed:?}");
        assert!(passed[0].contains("11 pending") && passed[0].contains("max_pending 10"));
        assert!(passed[1].contains("1m 1s") && passed[1].contains("max_age 1m"));
        assert!(passed[2].contains("max_dead 0"));
    }

    #[test]
    fn config_sections_are_checked() {
        let s = BacklogSection {
            max_pending: Some(-1),
            ..BacklogSection::default()
        };
        let e = format!("{:#}", backlog_thresholds(Some(&s)).unwrap_err());
        assert!(e.contains("max_pending = -1"), "{e}");
        let s = BacklogSection {
            max_age_seconds: Some(f64::NAN),
            ..BacklogSection::default()
        };
        assert!(backlog_thresholds(Some(&s)).is_err());
        let s = BacklogSection {
            topics: Some(vec!["doc.*.x".to_owned()]),
            ..BacklogSection::default()
        };
        let e = format!("{:#}", backlog_thresholds(Some(&s)).unwrap_err());
        assert!(e.contains("doc.*.x"), "{e}");
        let s = CleanupSection {
            published_older_than_days: Some(7.0),
            dead_lettered_older_than_days: Some(-1.0),
        };
        let e = format!("{:#}", cleanup_ages(Some(&s)).unwrap_err());
        assert!(e.contains("dead_lettered_older_than_days = -1"), "{e}");
        let s = CleanupSection {
            published_older_than_days: Some(0.5),
            dead_lettered_older_than_days: None,
        };
        let ages = cleanup_ages(Some(&s)).unwrap();
        assert_eq!(ages.published, Some(Duration::from_secs(43_200)));
    }

    #[test]
    fn the_example_file_sets_backlog_and_cleanup() {
        let text = include_str!("../../../hare-outbox.example.toml");
        let file = crate::config::parse(text).unwrap();
        let t = backlog_thresholds(file.backlog.as_ref()).unwrap();
        assert_eq!(t.max_pending, Some(10_000));
        assert_eq!(t.max_age, Some(Duration::from_secs(900)));
        assert_eq!(t.max_dead, Some(0));
        let ages = cleanup_ages(file.cleanup.as_ref()).unwrap();
        assert_eq!(ages.published, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(ages.dead_lettered, Some(Duration::from_secs(30 * 86_400)));
        let d = crate::serve::dashboard_settings(
            file.dashboard.as_ref(),
            std::path::Path::new("."),
            &|_| None,
        )
        .unwrap();
        assert_eq!(d.address.as_deref(), Some("127.0.0.1:8080"));
        assert!(!d.allow_remote && d.token.is_none());
    }

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
}
