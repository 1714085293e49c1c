//! The journal's filters, read from a query string (the page's GET form and the JSON API share
//! them) and turned into an [`EventQuery`].

use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use hare_outbox_core::journal::{Cursor, EventQuery};
use hare_outbox_core::{Error as CoreError, EventStatus};

/// A refused parameter: which one and why (the core's validation message where it has one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FilterError {
    pub(crate) field: String,
    pub(crate) message: String,
}

impl FilterError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        FilterError {
            field: field.into(),
            message: message.into(),
        }
    }

    /// From a core error about `field`.
    pub(crate) fn from_core(field: &str, error: CoreError) -> Self {
        match error {
            CoreError::Validation { field, message } => FilterError { field, message },
            CoreError::Configuration(message) => FilterError::new(field, message),
            other => FilterError::new(field, other.to_string()),
        }
    }
}

/// The parameters a journal request may carry.
const PARAMETERS: &str =
    "topic, status, object, author, created_from, created_until, before, after, limit";

/// The filters as given (kept as text, to show them back in the form and to build links).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Filters {
    /// Topic patterns, exact or `prefix*`.
    pub(crate) topics: Vec<String>,
    /// Status names.
    pub(crate) statuses: Vec<EventStatus>,
    pub(crate) object: String,
    pub(crate) author: String,
    pub(crate) created_from: String,
    pub(crate) created_until: String,
    pub(crate) limit: Option<u32>,
    pub(crate) cursor: Cursor,
}

impl Filters {
    /// Reads the filters of `query` (`application/x-www-form-urlencoded`). `topic` and `status`
    /// may repeat and may hold several values separated by commas; empty values are ignored.
    pub(crate) fn parse(query: Option<&str>) -> Result<Self, FilterError> {
        let mut filters = Filters::default();
        let mut before = None;
        let mut after = None;
        for (key, value) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            match key.as_ref() {
                "topic" => filters.topics.extend(
                    value
                        .split(|c: char| c == ',' || c.is_whitespace())
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned),
                ),
                "status" => {
                    for name in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                        let status = name
                            .parse::<EventStatus>()
                            .map_err(|e| FilterError::from_core("status", e))?;
                        if !filters.statuses.contains(&status) {
                            filters.statuses.push(status);
                        }
                    }
                }
                "object" => filters.object = value.to_owned(),
                "author" => filters.author = value.to_owned(),
                "created_from" => filters.created_from = value.to_owned(),
                "created_until" => filters.created_until = value.to_owned(),
                "before" => before = Some(sequence("before", value)?),
                "after" => after = Some(sequence("after", value)?),
                // The page's language; the page reads it (i18n::Locale), the query does not.
                "lang" => {}
                "limit" => {
                    filters.limit = Some(value.parse().map_err(|_| {
                        FilterError::new(
                            "limit",
                            format!("page size {value:?} is not a whole number; use 1 to 1000"),
                        )
                    })?)
                }
                other => {
                    return Err(FilterError::new(
                        other,
                        format!("parameter {other:?} is not known; use {PARAMETERS}"),
                    ));
                }
            }
        }
        filters.cursor = match (before, after) {
            (Some(_), Some(_)) => {
                return Err(FilterError::new(
                    "before",
                    "give `before` (an older page) or `after` (a live tail), not both",
                ));
            }
            (Some(before), None) => Cursor::Before(before),
            (None, Some(after)) => Cursor::After(after),
            (None, None) => Cursor::Newest,
        };
        Ok(filters)
    }

    /// The core query, validated by the core (topic patterns, object, author, times, limit).
    pub(crate) fn query(&self, default_limit: u32) -> Result<EventQuery, FilterError> {
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        let mut query = EventQuery::new()
            .with_topics(&topics)
            .map_err(|e| FilterError::from_core("topic", e))?
            .with_statuses(&self.statuses)
            .with_cursor(self.cursor)
            .with_limit(self.limit.unwrap_or(default_limit))
            .map_err(|e| FilterError::from_core("limit", e))?;
        if !self.object.is_empty() {
            query = query
                .with_object(&self.object)
                .map_err(|e| FilterError::from_core("object", e))?;
        }
        if !self.author.is_empty() {
            query = query
                .with_author(&self.author)
                .map_err(|e| FilterError::from_core("author", e))?;
        }
        let from = time("created_from", &self.created_from)?;
        let until = time("created_until", &self.created_until)?;
        query
            .with_created(from, until)
            .map_err(|e| FilterError::from_core("created", e))
    }

    /// The filters (not the cursor or the limit) as query pairs, for links and the live tail.
    pub(crate) fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if !self.topics.is_empty() {
            pairs.push(("topic", self.topics.join(",")));
        }
        for status in &self.statuses {
            pairs.push(("status", status.name().to_owned()));
        }
        for (key, value) in [
            ("object", &self.object),
            ("author", &self.author),
            ("created_from", &self.created_from),
            ("created_until", &self.created_until),
        ] {
            if !value.is_empty() {
                pairs.push((key, value.clone()));
            }
        }
        if let Some(limit) = self.limit {
            pairs.push(("limit", limit.to_string()));
        }
        pairs
    }

    /// `pairs` plus `extra`, encoded as a query string (no leading `?`).
    pub(crate) fn query_string(&self, extra: &[(&str, String)]) -> String {
        let mut out = form_urlencoded::Serializer::new(String::new());
        for (key, value) in self.pairs().iter().chain(extra.iter()) {
            out.append_pair(key, value);
        }
        out.finish()
    }
}

fn sequence(field: &str, value: &str) -> Result<i64, FilterError> {
    value
        .parse::<i64>()
        .ok()
        .filter(|n| *n >= 0)
        .ok_or_else(|| {
            FilterError::new(
                field,
                format!("{field} {value:?} is not a sequence number; use a whole number ≥ 0"),
            )
        })
}

/// Reads a time: RFC 3339 (`2026-11-13T17:20:00Z`, any offset), or a UTC date and time as a
/// `datetime-local` field sends it (`2026-11-13T17:20`, seconds optional, `T` or a space), or a
/// UTC date (`2026-11-13`, its midnight).
pub(crate) fn time(field: &str, value: &str) -> Result<Option<DateTime<Utc>>, FilterError> {
    if value.is_empty() {
        return Ok(None);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(value) {
        return Ok(Some(t.with_timezone(&Utc)));
    }
    for format in [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d %H:%M:%S",
    ] {
        if let Ok(t) = NaiveDateTime::parse_from_str(value, format) {
            return Ok(Some(t.and_utc()));
        }
    }
    if let Ok(d) = NaiveDate::parse_from_str(value, "%Y-%m-%d")
        && let Some(t) = d.and_hms_opt(0, 0, 0)
    {
        return Ok(Some(t.and_utc()));
    }
    Err(FilterError::new(
        field,
        format!(
            "{field} {value:?} is not a time; use RFC 3339 (2026-11-13T17:20:00Z), a UTC \
             date and time (2026-11-13T17:20) or a UTC date (2026-11-13)"
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_repeated_and_comma_separated_values() {
        let f = Filters::parse(Some(
            "topic=doc.*,orders.created&topic=x&status=dead&status=pending,dead&object=sales_orders+%2322&limit=10&before=7",
        ))
        .unwrap();
        assert_eq!(f.topics, vec!["doc.*", "orders.created", "x"]);
        assert_eq!(f.statuses, vec![EventStatus::Dead, EventStatus::Pending]);
        assert_eq!(f.object, "sales_orders #22");
        assert_eq!(f.cursor, Cursor::Before(7));
        let q = f.query(50).unwrap();
        assert_eq!(q.limit, 10);
        assert_eq!(q.object.unwrap().pk.as_deref(), Some("22"));
    }

    #[test]
    fn refuses_bad_values_naming_them() {
        let e = Filters::parse(Some("status=lost")).unwrap_err();
        assert_eq!(e.field, "status");
        assert!(e.message.contains("\"lost\""), "{}", e.message);
        let e = Filters::parse(Some("colour=red")).unwrap_err();
        assert_eq!(e.field, "colour");
        let e = Filters::parse(Some("before=-1")).unwrap_err();
        assert_eq!(e.field, "before");
        let e = Filters::parse(Some("before=1&after=2")).unwrap_err();
        assert_eq!(e.field, "before");
        let e = Filters::parse(Some("topic=a*b"))
            .unwrap()
            .query(50)
            .unwrap_err();
        assert_eq!(e.field, "topic");
        assert!(e.message.contains("a*b"), "{}", e.message);
        let e = Filters::parse(Some("limit=5000"))
            .unwrap()
            .query(50)
            .unwrap_err();
        assert_eq!(e.field, "limit");
        let e = Filters::parse(Some("created_from=yesterday"))
            .unwrap()
            .query(50)
            .unwrap_err();
        assert_eq!(e.field, "created_from");
        assert!(e.message.contains("yesterday"));
    }

    #[test]
    fn reads_times_in_the_forms_the_page_sends() {
        let t = time("t", "2026-11-13T17:20").unwrap().unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-13T17:20:00+00:00");
        let t = time("t", "2026-11-13T17:20:00+03:00").unwrap().unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-13T14:20:00+00:00");
        let t = time("t", "2026-11-13").unwrap().unwrap();
        assert_eq!(t.to_rfc3339(), "2026-11-13T00:00:00+00:00");
    }

    #[test]
    fn links_keep_the_filters() {
        let f = Filters::parse(Some("topic=doc.*&status=dead&author=Ann+B")).unwrap();
        assert_eq!(
            f.query_string(&[("before", "5".into())]),
            "topic=doc.*&status=dead&author=Ann+B&before=5"
        );
    }
}
