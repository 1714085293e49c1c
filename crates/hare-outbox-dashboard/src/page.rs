//! The journal page and its bundled script and stylesheet.

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use chrono::{DateTime, Utc};
use hare_outbox_core::journal::Cursor;
use hare_outbox_core::redact::{self, UrlKind};
use hare_outbox_core::{EventStatus, JournalBackend};

use crate::AppState;
use crate::api::{ApiError, timeline_params};
use crate::charts::{charts_svg, unavailable_svg};
use crate::filters::Filters;
use crate::view::{Change, EventStatusView, EventView, changes, compact};

const SCRIPT: &str = include_str!("../assets/dashboard.js");
const STYLESHEET: &str = include_str!("../assets/dashboard.css");

/// The longest one-line payload shown before the "more" toggle, in characters.
const COMPACT_LENGTH: usize = 160;

/// One row of the journal table, every value already text (escaped by the template).
struct Row {
    sequence: i64,
    id: String,
    topic: String,
    object: String,
    changes: Vec<Change>,
    compact: String,
    pretty: String,
    created: String,
    created_title: String,
    processed: String,
    processed_title: String,
    who: String,
    status: &'static str,
    attempts: i32,
    last_error: String,
    dead: bool,
}

impl Row {
    fn new(event: EventView) -> Self {
        Row {
            sequence: event.sequence,
            id: event.id.to_string(),
            changes: changes(&event.payload),
            compact: compact(&event.payload, COMPACT_LENGTH),
            pretty: pretty(&event.payload, event.id),
            created: short_time(event.created_at),
            created_title: event.created_at.to_rfc3339(),
            processed: event.published_at.map(short_time).unwrap_or_default(),
            processed_title: event
                .published_at
                .map(|t| t.to_rfc3339())
                .unwrap_or_default(),
            who: event.author.unwrap_or_default(),
            status: event.status.name(),
            dead: event.status == EventStatusView::Dead,
            attempts: event.attempts,
            // Stored redacted; redacted again for rows an older version or another program wrote.
            last_error: event
                .last_error
                .map(|e| redact::in_text(&e, UrlKind::Connection))
                .unwrap_or_default(),
            object: event.object.unwrap_or_default(),
            topic: event.topic,
        }
    }
}

/// The most of a payload's pretty JSON the page holds, in bytes; the API has the rest.
const PRETTY_LIMIT: usize = 64 * 1024;

/// The payload as indented JSON, cut at [`PRETTY_LIMIT`] bytes with a pointer to the whole event.
fn pretty(payload: &serde_json::Value, id: uuid::Uuid) -> String {
    let mut text = serde_json::to_string_pretty(payload).unwrap_or_default();
    if text.len() > PRETTY_LIMIT {
        let mut cut = PRETTY_LIMIT;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str(&format!(
            "\n… cut at {} KiB; the whole event is at api/events/{id}",
            PRETTY_LIMIT / 1024
        ));
    }
    text
}

fn short_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// A status box of the filter form.
struct StatusBox {
    name: &'static str,
    checked: bool,
}

#[derive(Template)]
#[template(path = "journal.html")]
struct JournalPage {
    title: String,
    table: String,
    topic: String,
    statuses: Vec<StatusBox>,
    object: String,
    author: String,
    created_from: String,
    created_until: String,
    limit: String,
    error_field: String,
    error_message: String,
    rows: Vec<Row>,
    newest_href: String,
    older_href: String,
    tail_after: String,
    tail_query: String,
    token_configured: bool,
    retry_topics: String,
    /// The relay's destinations, when it runs with the dashboard.
    destinations: Vec<DestinationRow>,
    /// Whether a relay runs with the dashboard (destinations are known).
    destinations_shown: bool,
}

/// One destination of the relay, every value already text.
struct DestinationRow {
    name: String,
    state: &'static str,
    failures: u32,
    opened: String,
    next_probe: String,
    reason: String,
    rate: String,
}

impl From<crate::api::DestinationView> for DestinationRow {
    fn from(d: crate::api::DestinationView) -> Self {
        DestinationRow {
            state: match d.state.as_str() {
                "open" => "open",
                "half_open" => "half_open",
                _ => "closed",
            },
            failures: d.consecutive_failures,
            opened: d.opened_at.map(short_time).unwrap_or_default(),
            next_probe: d.next_probe_at.map(short_time).unwrap_or_default(),
            reason: d.reason.unwrap_or_default(),
            rate: d
                .max_per_second
                .map(|r| format!("{r}/s"))
                .unwrap_or_default(),
            name: d.name,
        }
    }
}

/// `GET /`: the journal page. A refused filter answers 400 with the page showing what was
/// refused and why; a database failure answers 503 the same way.
pub(crate) async fn journal<B: JournalBackend>(
    State(state): State<AppState<B>>,
    RawQuery(query): RawQuery,
) -> Response {
    let parsed = Filters::parse(query.as_deref());
    let filters = parsed.clone().unwrap_or_default();
    let mut page = JournalPage {
        title: state.options.title.clone(),
        table: state.journal.table().to_string(),
        topic: filters.topics.join(", "),
        statuses: EventStatus::ALL
            .into_iter()
            .map(|status| StatusBox {
                name: status.name(),
                checked: filters.statuses.contains(&status),
            })
            .collect(),
        object: filters.object.clone(),
        author: filters.author.clone(),
        created_from: filters.created_from.clone(),
        created_until: filters.created_until.clone(),
        limit: filters.limit.map(|l| l.to_string()).unwrap_or_default(),
        error_field: String::new(),
        error_message: String::new(),
        rows: Vec::new(),
        newest_href: format!("?{}", filters.query_string(&[])),
        older_href: String::new(),
        tail_after: String::new(),
        tail_query: filters.query_string(&[]),
        token_configured: state.options.token.is_some(),
        retry_topics: if filters.topics.is_empty() {
            "*".to_owned()
        } else {
            filters.topics.join(",")
        },
        destinations: state
            .options
            .destinations
            .as_ref()
            .map(|d| {
                d.statuses()
                    .into_iter()
                    .map(|s| DestinationRow::from(crate::api::DestinationView::from(s)))
                    .collect()
            })
            .unwrap_or_default(),
        destinations_shown: state.options.destinations.is_some(),
    };
    let status = match fill(&state, parsed, &mut page).await {
        Ok(()) => StatusCode::OK,
        Err(error) => {
            page.error_field = error.field;
            page.error_message = error.message;
            error.status
        }
    };
    match page.render() {
        Ok(html) => (status, Html(html)).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the journal page could not be rendered: {e}"),
        )
            .into_response(),
    }
}

async fn fill<B: JournalBackend>(
    state: &AppState<B>,
    parsed: Result<Filters, crate::filters::FilterError>,
    page: &mut JournalPage,
) -> Result<(), ApiError> {
    let filters = parsed?;
    let query = filters.query(state.options.page_size)?;
    let result = state
        .journal
        .list(&query)
        .await
        .map_err(|e| ApiError::core("query", e))?;
    let next = result.next_query(&query);
    let now = Utc::now();
    let mut events: Vec<EventView> = result
        .events
        .into_iter()
        .map(|e| EventView::new(e, now))
        .collect();
    if let Cursor::After(_) = query.cursor {
        events.reverse();
    }
    if let Some(Cursor::Before(before)) = next.map(|n| n.cursor) {
        page.older_href = format!(
            "?{}",
            filters.query_string(&[("before", before.to_string())])
        );
    }
    if query.cursor == Cursor::Newest {
        let newest = events.first().map_or(0, |e| e.sequence);
        page.tail_after = newest.to_string();
    }
    page.rows = events.into_iter().map(Row::new).collect();
    Ok(())
}

/// `GET /charts.svg`: the charts of the page as one SVG image (backlog, delivery rate, latency)
/// over `window_seconds` (default 3600) in `buckets` (default 60). The page loads it as an image,
/// so a slow timeline never holds up the table. A refused parameter answers 400 (JSON); a
/// timeline the backend cannot read answers an image saying why.
pub(crate) async fn charts<B: JournalBackend>(
    State(state): State<AppState<B>>,
    RawQuery(query): RawQuery,
) -> Response {
    let params = match timeline_params(query.as_deref()) {
        Ok(params) => params,
        Err(e) => return e.into_response(),
    };
    let svg = match state.journal.timeline(&params).await {
        Ok(buckets) => charts_svg(&buckets),
        Err(e) => unavailable_svg(&e.to_string()),
    };
    (
        [
            (header::CONTENT_TYPE, "image/svg+xml"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        svg,
    )
        .into_response()
}

/// `GET /assets/dashboard.js`.
pub(crate) async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        SCRIPT,
    )
}

/// `GET /assets/dashboard.css`.
pub(crate) async fn stylesheet() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        STYLESHEET,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_payloads_are_cut_on_a_character_boundary() {
        let id = uuid::Uuid::now_v7();
        let small = serde_json::json!({"a": 1});
        assert_eq!(pretty(&small, id), "{\n  \"a\": 1\n}");
        let big = serde_json::json!({"text": "ж".repeat(PRETTY_LIMIT)});
        let text = pretty(&big, id);
        assert!(text.len() < PRETTY_LIMIT + 200);
        assert!(
            text.ends_with(&format!("api/events/{id}")),
            "{}",
            &text[text.len() - 80..]
        );
    }
}
