//! What the commands show: progress on stderr, table cells and events as JSON lines on
//! stdout. Nothing here reads the config or the database.

use std::time::Duration;

use chrono::{DateTime, Utc};
use hare_outbox::OutboxEvent;
use hare_outbox::journal::{ObjectName, ObjectRef, author_of};

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

/// `text` made printable and padded or cut (with `…`) to `width` terminal cells.
pub(crate) fn cell(text: &str, width: usize, align: console::Alignment) -> String {
    console::pad_str(&printable(text), width, align, Some("…")).into_owned()
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
