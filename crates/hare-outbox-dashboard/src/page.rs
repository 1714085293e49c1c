//! The journal page and its bundled script and stylesheet.

use askama::Template;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;
use hare_outbox_core::journal::Cursor;
use hare_outbox_core::{EventStatus, JournalBackend};

use crate::AppState;
use crate::api::{ApiError, timeline_params};
use crate::charts::{charts_svg, unavailable_svg};
use crate::filters::Filters;
use crate::i18n::{Locale, Texts, TimeText};
use crate::pages::{Chrome, error_text, render};
use crate::view::{Change, EventStatusView, EventView, changes, compact};

const SCRIPT: &str = include_str!("../assets/dashboard.js");
const STYLESHEET: &str = include_str!("../assets/dashboard.css");

/// The longest one-line payload a row shows, in characters: the rest is one click away (the
/// row's JSON, or the event page).
const COMPACT_LENGTH: usize = 200;

/// One row of the journal table, every value already text (escaped by the template).
struct Row {
    sequence: i64,
    id: String,
    topic: String,
    object: String,
    changes: Vec<Change>,
    compact: String,
    summary_title: String,
    created: TimeText,
    processed: Option<TimeText>,
    who: String,
    status: &'static str,
    status_text: &'static str,
    attempts: i32,
    last_error: String,
    dead: bool,
}

impl Row {
    fn new(event: EventView, locale: &Locale, t: &Texts) -> Self {
        let changes = changes(&event.payload);
        let summary_title = if changes.is_empty() {
            compact(&event.payload, 1000)
        } else {
            changes
                .iter()
                .map(|c| match &c.to {
                    Some(to) => format!("{}: {} → {}", c.column, c.from, to),
                    None => format!("{}: {}", c.column, c.from),
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        Row {
            sequence: event.sequence,
            id: event.id.to_string(),
            compact: compact(&event.payload, COMPACT_LENGTH),
            changes,
            summary_title,
            created: locale.time(event.created_at),
            processed: event.published_at.map(|p| locale.time(p)),
            who: event.author.unwrap_or_default(),
            status: event.status.name(),
            status_text: t.status(event.status.name()),
            dead: event.status == EventStatusView::Dead,
            attempts: event.attempts,
            last_error: error_text(event.last_error.as_deref()),
            object: event.object.unwrap_or_default(),
            topic: event.topic,
        }
    }
}

/// A status box of the filter form.
struct StatusBox {
    name: &'static str,
    text: &'static str,
    checked: bool,
}

#[derive(Template)]
#[template(path = "journal.html")]
struct JournalPage {
    c: Chrome,
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

/// A time of the destinations panel: UTC, to the second.
fn short_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
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
    axum::Extension(base): axum::Extension<crate::security::Base>,
    headers: HeaderMap,
    RawQuery(query): RawQuery,
) -> Response {
    let locale = Locale::of(&headers, query.as_deref());
    let parsed = Filters::parse(query.as_deref());
    let filters = parsed.clone().unwrap_or_default();
    let c = Chrome::new(&state, &locale, &base, "journal", query.as_deref());
    let t = c.t;
    let mut page = JournalPage {
        c,
        topic: filters.topics.join(", "),
        statuses: EventStatus::ALL
            .into_iter()
            .map(|status| StatusBox {
                name: status.name(),
                text: t.status(status.name()),
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
    let status = match fill(&state, parsed, &mut page, &locale).await {
        Ok(()) => StatusCode::OK,
        Err(error) => {
            page.error_field = error.field;
            page.error_message = error.message;
            error.status
        }
    };
    render(status, &page, &locale)
}

async fn fill<B: JournalBackend>(
    state: &AppState<B>,
    parsed: Result<Filters, crate::filters::FilterError>,
    page: &mut JournalPage,
    locale: &Locale,
) -> Result<(), ApiError> {
    let filters = parsed?;
    let query = filters
        .query(state.options.page_size)?
        .with_object_name(state.options.object_name);
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
        .map(|e| EventView::named(e, now, state.options.object_name))
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
    let t = page.c.t;
    page.rows = events.into_iter().map(|e| Row::new(e, locale, t)).collect();
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
