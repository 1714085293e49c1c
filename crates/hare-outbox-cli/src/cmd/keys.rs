//! `keys --held`: the ordering keys held back by their head, through
//! [`Journal`].

use anyhow::Context as _;
use chrono::Utc;
use hare_outbox::Journal;
use hare_outbox::journal::{MAX_FILTER_LENGTH, WAITING_COUNT_CAP};
use serde_json::{Value, json};

use crate::args::KeysArgs;
use crate::config::Settings;
use crate::db::Db;
use crate::error::usage;
use crate::ui::{age_text, cell, event_json, printable, terminal_width};

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
    fn keys_are_quoted_for_the_shell_when_needed() {
        assert_eq!(shell_quote("order:22"), "order:22");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
