//! An event as the dashboard shows it: the stored columns plus status, object and author.

use chrono::{DateTime, Utc};
use hare_outbox_core::journal::{ObjectName, ObjectRef, author_of};
use hare_outbox_core::redact::{self, UrlKind};
use hare_outbox_core::{EventStatus, OutboxEvent};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;
use uuid::Uuid;

/// Where an event stands (judged at the dashboard's clock when the page was read).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventStatusView {
    /// Waiting for its first delivery.
    Pending,
    /// A relay holds a live lease on it.
    Leased,
    /// Failed at least once, waiting for its next attempt.
    Retrying,
    /// Out of attempts; held back until retried or cleaned up.
    Dead,
    /// Delivered.
    Published,
}

impl From<EventStatus> for EventStatusView {
    fn from(status: EventStatus) -> Self {
        match status {
            EventStatus::Pending => EventStatusView::Pending,
            EventStatus::Leased => EventStatusView::Leased,
            EventStatus::Retrying => EventStatusView::Retrying,
            EventStatus::Dead => EventStatusView::Dead,
            EventStatus::Published => EventStatusView::Published,
        }
    }
}

impl EventStatusView {
    /// The name the API and the page use: `pending`, `leased`, `retrying`, `dead`, `published`.
    pub fn name(self) -> &'static str {
        match self {
            EventStatusView::Pending => "pending",
            EventStatusView::Leased => "leased",
            EventStatusView::Retrying => "retrying",
            EventStatusView::Dead => "dead",
            EventStatusView::Published => "published",
        }
    }
}

/// One event of the journal, as `GET /api/events` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventView {
    /// № — the delivery order, given by the database.
    pub sequence: i64,
    /// The event id (UUID v7).
    pub id: Uuid,
    /// The event (topic).
    pub topic: String,
    /// The object, `table #pk` (`plan_prod_orders #18`; `label #pk` when the dashboard shows
    /// labels), when the payload is a capture envelope (or has a string `model`).
    pub object: Option<String>,
    /// Who: the `author` header, when a string.
    pub author: Option<String>,
    /// Where the event stands.
    pub status: EventStatusView,
    /// Failed delivery attempts so far.
    pub attempts: i32,
    /// The error of the last failed attempt.
    pub last_error: Option<String>,
    /// When the event was written.
    pub created_at: DateTime<Utc>,
    /// When it was delivered ("processed").
    pub published_at: Option<DateTime<Utc>>,
    /// When it ran out of attempts.
    pub dead_lettered_at: Option<DateTime<Utc>>,
    /// When a failed event is tried again.
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// Until when a relay holds it.
    pub lease_until: Option<DateTime<Utc>>,
    /// The relay holding it.
    pub leased_by: Option<String>,
    /// Events of one ordering key are delivered in order.
    pub ordering_key: Option<String>,
    /// At most one event exists per idempotency key.
    pub idempotency_key: Option<String>,
    /// The payload.
    #[schema(value_type = Object)]
    pub payload: Value,
    /// The headers (trace context, author, …).
    #[schema(value_type = Object)]
    pub headers: Map<String, Value>,
    /// The table's extra columns by name (a tenant, the relay's result record, …); empty
    /// without them.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub extra: Map<String, Value>,
}

impl EventView {
    /// The view of `event` with its status at `now`, its object by captured table.
    pub fn new(event: OutboxEvent, now: DateTime<Utc>) -> Self {
        Self::named(event, now, ObjectName::Table)
    }

    /// The view of `event` with its status at `now`, its object under `name`.
    pub fn named(event: OutboxEvent, now: DateTime<Utc>, name: ObjectName) -> Self {
        EventView {
            status: event.status(now).into(),
            object: ObjectRef::named(&event, name),
            author: author_of(&event).map(str::to_owned),
            sequence: event.sequence,
            id: event.id,
            topic: event.topic,
            attempts: event.attempts,
            // Stored redacted; redacted again for rows an older version or another program wrote.
            last_error: event
                .last_error
                .map(|e| redact::in_text(&e, UrlKind::Connection)),
            created_at: event.created_at,
            published_at: event.published_at,
            dead_lettered_at: event.dead_lettered_at,
            next_attempt_at: event.next_attempt_at,
            lease_until: event.lease_until,
            leased_by: event.leased_by,
            ordering_key: event.ordering_key,
            idempotency_key: event.idempotency_key,
            payload: event.payload,
            headers: event.headers,
            extra: event.extra,
        }
    }
}

/// One changed column of a captured update: its name and its value before and after, as
/// compact JSON.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Change {
    pub(crate) column: String,
    pub(crate) from: String,
    pub(crate) to: Option<String>,
}

/// The changes of a captured update (`changed` + `before`, and `after` when present), in the
/// order of `changed`, as compact JSON (`?` for a value the payload lacks); empty for any other
/// payload.
pub(crate) fn changes(payload: &Value) -> Vec<Change> {
    hare_outbox_core::journal::changes(payload)
        .into_iter()
        .map(|c| Change {
            from: c.before.map_or_else(|| "?".to_owned(), |v| v.to_string()),
            to: c.after.map(|v| v.to_string()),
            column: c.column,
        })
        .collect()
}

/// The payload as one line of compact JSON, cut to `max` characters with `…`.
pub(crate) fn compact(payload: &Value, max: usize) -> String {
    let text = payload.to_string();
    if text.chars().count() <= max {
        text
    } else {
        let mut cut: String = text.chars().take(max).collect();
        cut.push('…');
        cut
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changes_of_a_captured_update() {
        let payload = json!({
            "model": "sales_order", "pk": 22, "operation": "updated",
            "changed": ["status", "eta_date"],
            "before": {"status": "confirmed", "eta_date": null},
            "after": {"status": "shipped", "eta_date": "2026-12-01"}
        });
        let c = changes(&payload);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].column, "status");
        assert_eq!(c[0].from, "\"confirmed\"");
        assert_eq!(c[0].to.as_deref(), Some("\"shipped\""));
        assert_eq!(c[1].from, "null");
        assert!(changes(&json!({"a": 1})).is_empty());
    }

    #[test]
    fn compact_cuts_long_payloads() {
        assert_eq!(compact(&json!({"a": 1}), 100), r#"{"a":1}"#);
        assert_eq!(compact(&json!("abcdef"), 3), "\"ab…");
    }
}
