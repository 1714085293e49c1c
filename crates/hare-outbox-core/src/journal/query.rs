//! What a journal read asks for and gets back: the filters and cursor of one page, the timeline's
//! buckets, and how the journal names an event's object and author. Plain data with its
//! validation; the statements that answer it live in the backends.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::event::{EventStatus, OutboxEvent};
use crate::topic::TopicFilter;

/// The most events one page may hold.
pub const MAX_PAGE_SIZE: u32 = 1000;
/// The page size of [`EventQuery::new`].
pub const DEFAULT_PAGE_SIZE: u32 = 50;
/// The longest author or object filter accepted, in characters.
pub const MAX_FILTER_LENGTH: usize = 255;
/// The most buckets one timeline may have.
pub const MAX_TIMELINE_BUCKETS: u32 = 1440;

/// The header whose value the journal shows as "who" and filters by author. Captured
/// events get it from [`Outbox::set_context`](crate::Outbox::set_context) (`{"author": "…"}`).
pub const AUTHOR_HEADER: &str = "author";

/// Where a page starts, by sequence (keyset pagination: no OFFSET, so every page costs the same).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cursor {
    /// The newest events first.
    #[default]
    Newest,
    /// Events with a sequence below this one, newest first (the next, older page).
    Before(i64),
    /// Events with a sequence above this one, oldest first (a live tail: what arrived since).
    After(i64),
}

/// Which name of a captured object the journal shows and its object filter compares: the
/// captured table (`plan_prod_orders #18`, the envelope's `table`) or the capture's label
/// (`prod_order #18`, the envelope's `model`). Defaults to [`ObjectName::Table`].
///
/// An event without a string `table` (written before captures named their table, or by code of
/// your own with only a `model`) shows and matches its `model` under either.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectName {
    /// The captured table: the envelope's `table`, else its `model`.
    #[default]
    Table,
    /// The capture's label: the envelope's `model`.
    Label,
}

impl ObjectName {
    /// The name in configuration files and query strings: `table` or `label`.
    pub fn name(self) -> &'static str {
        match self {
            ObjectName::Table => "table",
            ObjectName::Label => "label",
        }
    }
}

impl std::str::FromStr for ObjectName {
    type Err = Error;

    fn from_str(text: &str) -> Result<Self> {
        match text {
            "table" => Ok(ObjectName::Table),
            "label" => Ok(ObjectName::Label),
            other => Err(Error::validation(
                "object_name",
                format!("object name {other:?} is not known; use table or label"),
            )),
        }
    }
}

/// Which captured object an event is about: the name the journal shows for it (see
/// [`ObjectName`]) and, optionally, its `pk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObjectRef {
    /// The object's name: the captured table (the envelope's `table`, else its `model`) or the
    /// capture's label (the envelope's `model`), as [`EventQuery::object_name`] says.
    pub model: String,
    /// The primary key as text (`22`, or the JSON text of a composite key); `None` = any.
    pub pk: Option<String>,
}

impl ObjectRef {
    /// Parses `model` or `model #pk` (`sales_orders #22`; `sales_orders#22` too).
    ///
    /// # Errors
    /// [`Error::Validation`] naming the text when the model is empty or it is longer than
    /// [`MAX_FILTER_LENGTH`] characters.
    pub fn parse(text: &str) -> Result<Self> {
        check_filter_text("object", text)?;
        let (model, pk) = match text.split_once('#') {
            Some((model, pk)) => (model.trim(), Some(pk.trim())),
            None => (text.trim(), None),
        };
        if model.is_empty() {
            return Err(Error::validation(
                "object",
                format!("object filter {text:?} has no model; write `model` or `model #pk`"),
            ));
        }
        Ok(ObjectRef {
            model: model.to_owned(),
            pk: pk.filter(|pk| !pk.is_empty()).map(str::to_owned),
        })
    }

    /// The object of an event by its captured table ([`ObjectName::Table`]): `table #pk`
    /// (`plan_prod_orders #18`), when its payload is a capture envelope; an envelope without a
    /// string `table`, or any payload with a string `model`, shows `model #pk`.
    pub fn of(event: &OutboxEvent) -> Option<String> {
        Self::named(event, ObjectName::Table)
    }

    /// The object of an event under `name`: `table #pk` or `label #pk` (see [`ObjectRef::of`]).
    pub fn named(event: &OutboxEvent, name: ObjectName) -> Option<String> {
        let label = || event.payload.get("model")?.as_str();
        let model = match name {
            ObjectName::Table => event
                .payload
                .get("table")
                .and_then(serde_json::Value::as_str)
                .or_else(label)?,
            ObjectName::Label => label()?,
        };
        Some(match event.payload.get("pk") {
            None | Some(serde_json::Value::Null) => model.to_owned(),
            Some(serde_json::Value::String(pk)) => format!("{model} #{pk}"),
            Some(pk) => format!("{model} #{pk}"),
        })
    }
}

/// The author of an event: its [`AUTHOR_HEADER`] header, when a string.
pub fn author_of(event: &OutboxEvent) -> Option<&str> {
    event.headers.get(AUTHOR_HEADER)?.as_str()
}

pub(super) fn check_filter_text(what: &str, text: &str) -> Result<()> {
    if text.chars().count() > MAX_FILTER_LENGTH {
        return Err(Error::validation(
            what,
            format!(
                "{what} filter of {} characters is too long; at most {MAX_FILTER_LENGTH} are allowed",
                text.chars().count()
            ),
        ));
    }
    if text.contains('\0') {
        return Err(Error::validation(
            what,
            format!(
                "{what} filter {text:?} holds a NUL character, which no stored value can contain"
            ),
        ));
    }
    Ok(())
}

/// What to list: filters, a cursor and a page size. Every filter narrows (they combine with AND);
/// values are bound as parameters, never spliced into SQL.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct EventQuery {
    /// Topics, as exact names and `prefix*` patterns ([`TopicFilter`]); every topic by default.
    pub topics: TopicFilter,
    /// The statuses to show; empty = every status. A status is judged at the database's clock
    /// (a lease counts while `lease_until` is in the future).
    pub statuses: Vec<EventStatus>,
    /// The captured object.
    pub object: Option<ObjectRef>,
    /// Which name of the object `object` compares: the captured table (the default) or the
    /// capture's label.
    pub object_name: ObjectName,
    /// The author, compared with the [`AUTHOR_HEADER`] header exactly.
    pub author: Option<String>,
    /// Only events created at or after this time.
    pub created_from: Option<DateTime<Utc>>,
    /// Only events created before this time.
    pub created_until: Option<DateTime<Utc>>,
    /// Where the page starts.
    pub cursor: Cursor,
    /// Events per page, 1 to [`MAX_PAGE_SIZE`]; default [`DEFAULT_PAGE_SIZE`].
    pub limit: u32,
}

impl Default for EventQuery {
    fn default() -> Self {
        EventQuery {
            topics: TopicFilter::all(),
            statuses: Vec::new(),
            object: None,
            object_name: ObjectName::Table,
            author: None,
            created_from: None,
            created_until: None,
            cursor: Cursor::Newest,
            limit: DEFAULT_PAGE_SIZE,
        }
    }
}

impl EventQuery {
    /// Every event, newest first, [`DEFAULT_PAGE_SIZE`] per page.
    pub fn new() -> Self {
        Self::default()
    }

    /// Only these topics (exact names and `prefix*` patterns); an empty slice = every topic.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming a malformed pattern.
    pub fn with_topics(mut self, patterns: &[&str]) -> Result<Self> {
        self.topics = if patterns.is_empty() {
            TopicFilter::all()
        } else {
            TopicFilter::new(Some(patterns), Vec::<&str>::new())?
        };
        Ok(self)
    }

    /// Only these statuses; an empty slice = every status.
    pub fn with_statuses(mut self, statuses: &[EventStatus]) -> Self {
        let mut statuses = statuses.to_vec();
        statuses.sort_by_key(|s| *s as u8);
        statuses.dedup();
        self.statuses = statuses;
        self
    }

    /// Only events about this object (`model` or `model #pk`, see [`ObjectRef::parse`]).
    ///
    /// # Errors
    /// [`Error::Validation`] as [`ObjectRef::parse`].
    pub fn with_object(mut self, object: &str) -> Result<Self> {
        self.object = Some(ObjectRef::parse(object)?);
        Ok(self)
    }

    /// Compares the object filter with the object's `name` (the captured table by default).
    pub fn with_object_name(mut self, name: ObjectName) -> Self {
        self.object_name = name;
        self
    }

    /// Only events whose [`AUTHOR_HEADER`] header equals `author`.
    ///
    /// # Errors
    /// [`Error::Validation`] when longer than [`MAX_FILTER_LENGTH`] characters or holding NUL.
    pub fn with_author(mut self, author: &str) -> Result<Self> {
        check_filter_text("author", author)?;
        self.author = Some(author.to_owned());
        Ok(self)
    }

    /// Only events created in `[from, until)`; either end may be open.
    ///
    /// # Errors
    /// [`Error::Validation`] when both are given and `from` is not before `until`.
    pub fn with_created(
        mut self,
        from: Option<DateTime<Utc>>,
        until: Option<DateTime<Utc>>,
    ) -> Result<Self> {
        if let (Some(from), Some(until)) = (from, until)
            && from >= until
        {
            return Err(Error::validation(
                "created",
                format!("created-from {from} is not before created-until {until}"),
            ));
        }
        self.created_from = from;
        self.created_until = until;
        Ok(self)
    }

    /// Starts the page at `cursor`.
    pub fn with_cursor(mut self, cursor: Cursor) -> Self {
        self.cursor = cursor;
        self
    }

    /// At most `limit` events per page.
    ///
    /// # Errors
    /// [`Error::Validation`] unless 1 ≤ `limit` ≤ [`MAX_PAGE_SIZE`].
    pub fn with_limit(mut self, limit: u32) -> Result<Self> {
        if limit == 0 || limit > MAX_PAGE_SIZE {
            return Err(Error::validation(
                "limit",
                format!("page size {limit} is not allowed; use 1 to {MAX_PAGE_SIZE}"),
            ));
        }
        self.limit = limit;
        Ok(self)
    }
}

/// One page of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventPage {
    /// The events: newest first for [`Cursor::Newest`] and [`Cursor::Before`], oldest first for
    /// [`Cursor::After`].
    pub events: Vec<OutboxEvent>,
    /// Whether the page is full, so more events may follow in its direction.
    pub full: bool,
}

impl EventPage {
    /// The query of the next page in the same direction, or `None` when this page was not full.
    pub fn next_query(&self, query: &EventQuery) -> Option<EventQuery> {
        if !self.full {
            return None;
        }
        let last = self.events.last()?.sequence;
        let cursor = match query.cursor {
            Cursor::Newest | Cursor::Before(_) => Cursor::Before(last),
            Cursor::After(_) => Cursor::After(last),
        };
        Some(query.clone().with_cursor(cursor))
    }
}

/// A timeline for the dashboard's charts: `[since, until)` cut into equal buckets.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct TimelineParams {
    /// Start of the first bucket.
    pub since: DateTime<Utc>,
    /// End of the last bucket.
    pub until: DateTime<Utc>,
    /// Number of buckets, 1 to [`MAX_TIMELINE_BUCKETS`].
    pub buckets: u32,
}

impl TimelineParams {
    /// The last `window` up to `until`, in `buckets` buckets.
    ///
    /// # Errors
    /// [`Error::Validation`] when `window` is zero or longer than 366 days, or `buckets` is 0 or
    /// above [`MAX_TIMELINE_BUCKETS`].
    pub fn last(window: Duration, buckets: u32, until: DateTime<Utc>) -> Result<Self> {
        if window.is_zero() || window > Duration::from_secs(366 * 86_400) {
            return Err(Error::validation(
                "window",
                format!(
                    "timeline window of {} s is not allowed; use 1 s to 366 days",
                    window.as_secs_f64()
                ),
            ));
        }
        if buckets == 0 || buckets > MAX_TIMELINE_BUCKETS {
            return Err(Error::validation(
                "buckets",
                format!(
                    "{buckets} timeline buckets are not allowed; use 1 to {MAX_TIMELINE_BUCKETS}"
                ),
            ));
        }
        let window = chrono::Duration::from_std(window)
            .map_err(|e| Error::validation("window", e.to_string()))?;
        Ok(TimelineParams {
            since: until - window,
            until,
            buckets,
        })
    }

    /// The width of one bucket.
    pub fn bucket_width(&self) -> chrono::Duration {
        (self.until - self.since) / self.buckets as i32
    }
}

/// One bucket of a timeline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimelineBucket {
    /// Start of the bucket (inclusive).
    pub start: DateTime<Utc>,
    /// End of the bucket (exclusive).
    pub end: DateTime<Utc>,
    /// Events created in the bucket.
    pub created: i64,
    /// Events published in the bucket (by `published_at`).
    pub published: i64,
    /// Events dead-lettered in the bucket (by `dead_lettered_at`).
    pub dead_lettered: i64,
    /// Events neither published nor dead-lettered at the bucket's end, among the events still in
    /// the table (a clean-up removes finished events, never pending ones, so this stays right).
    pub backlog: i64,
    /// Median of `published_at - created_at` over the bucket's published events, in
    /// milliseconds; `None` when none was published.
    pub latency_p50_ms: Option<f64>,
    /// 95th percentile of the same, in milliseconds.
    pub latency_p95_ms: Option<f64>,
    /// The largest of the same, in milliseconds.
    pub latency_max_ms: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn object_ref_parses_model_and_pk() {
        let o = ObjectRef::parse("sales_orders #22").unwrap();
        assert_eq!(o.model, "sales_orders");
        assert_eq!(o.pk.as_deref(), Some("22"));
        let o = ObjectRef::parse("sales_orders").unwrap();
        assert_eq!(o.pk, None);
        assert!(ObjectRef::parse(" #22").is_err());
        assert!(ObjectRef::parse(&"x".repeat(256)).is_err());
    }

    #[test]
    fn limits_are_checked() {
        assert!(EventQuery::new().with_limit(0).is_err());
        assert!(EventQuery::new().with_limit(1001).is_err());
        assert_eq!(EventQuery::new().with_limit(1000).unwrap().limit, 1000);
        let t = Utc::now();
        assert!(EventQuery::new().with_created(Some(t), Some(t)).is_err());
        assert!(TimelineParams::last(Duration::ZERO, 10, t).is_err());
        assert!(TimelineParams::last(Duration::from_secs(60), 0, t).is_err());
        let p = TimelineParams::last(Duration::from_secs(600), 10, t).unwrap();
        assert_eq!(p.bucket_width(), chrono::Duration::seconds(60));
    }

    #[test]
    fn next_query_follows_the_direction() {
        let mut e = OutboxEvent::new("t", serde_json::json!({}));
        e.sequence = 7;
        let page = EventPage {
            events: vec![e],
            full: true,
        };
        let q = EventQuery::new().with_limit(1).unwrap();
        assert_eq!(page.next_query(&q).unwrap().cursor, Cursor::Before(7));
        let q = q.with_cursor(Cursor::After(3));
        assert_eq!(page.next_query(&q).unwrap().cursor, Cursor::After(7));
    }

    #[test]
    fn object_by_table_or_label() {
        let e = OutboxEvent::new(
            "doc.updated",
            serde_json::json!({"model": "prod_order", "table": "plan_prod_orders", "pk": 18}),
        );
        assert_eq!(ObjectRef::of(&e).as_deref(), Some("plan_prod_orders #18"));
        assert_eq!(
            ObjectRef::named(&e, ObjectName::Label).as_deref(),
            Some("prod_order #18")
        );
        // A `table` that is no string (a payload of your own) is not a table name.
        let e = OutboxEvent::new(
            "x",
            serde_json::json!({"model": "bill", "table": 4, "pk": 1}),
        );
        assert_eq!(ObjectRef::of(&e).as_deref(), Some("bill #1"));
        assert_eq!("label".parse::<ObjectName>().unwrap(), ObjectName::Label);
        assert!("labels".parse::<ObjectName>().is_err());
    }

    #[test]
    fn object_of_a_capture_envelope() {
        let e = OutboxEvent::new(
            "doc.updated",
            serde_json::json!({"model": "sales_orders", "pk": 22}),
        );
        assert_eq!(ObjectRef::of(&e).as_deref(), Some("sales_orders #22"));
        let e = OutboxEvent::new("x", serde_json::json!([1]));
        assert_eq!(ObjectRef::of(&e), None);
    }
}
