//! The operator's views of the journal: one event with the neighbours of its ordering key, the
//! ordering keys held back by their head and the actions on that head, counts per topic, and the
//! relays holding leases. The dashboard's event, keys, topics and relays pages and the
//! `hare-outbox events --id/--seq` and `keys --held` commands read the outbox through them.
//!
//! Every read costs about the same however large the table is: pages are keyset pages (by
//! sequence, key, topic or relay name), a held-key page walks a bounded number of keys, and the
//! counts read only the rows still to deliver, the dead letters and the rows published in a
//! window — never the whole history of published events.

use std::time::Duration;

use chrono::Utc;

use super::query::check_filter_text;
use super::{Cursor, EventQuery, Journal, MAX_PAGE_SIZE};
use crate::backend::{
    EventNeighbours, EventNeighboursParams, HeldKeyPage, JournalBackend, KeyHeadAction,
    KeyHeadParams, KeyHeldListParams, RelayLeaseListParams, RelayLeases, TopicStats,
    TopicStatsParams,
};
use crate::error::{Error, Result};
use crate::event::OutboxEvent;

/// How many sequences on either side of an event its delivered neighbours are looked for in (the
/// undelivered events of its key are found however far away): 10,000.
pub const NEIGHBOUR_WINDOW: i64 = 10_000;

/// How many keys with undelivered events one page of held keys walks at most: 10,000. A page
/// that stops there says where the walk goes on.
pub const HELD_KEY_WALK: i64 = 10_000;

/// The undelivered events of a held key are counted up to this many: 10,000.
pub const WAITING_COUNT_CAP: i64 = 10_000;

/// The longest window of published events the topic counts accept: 366 days.
pub const MAX_PUBLISHED_WINDOW: Duration = Duration::from_secs(366 * 86_400);

/// One changed column of a captured update: its value before and, when the payload holds it,
/// after.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnChange {
    /// The column.
    pub column: String,
    /// Its value before the update; `None` when the payload does not hold it.
    pub before: Option<serde_json::Value>,
    /// Its value after the update; `None` when the payload does not hold it.
    pub after: Option<serde_json::Value>,
}

/// The changes of a captured update, in the order of its `changed` list: each column with its
/// value from `before` (or `from`, as the original hare journal writes it) and from `after`.
/// Empty for any other payload.
pub fn changes(payload: &serde_json::Value) -> Vec<ColumnChange> {
    let Some(changed) = payload.get("changed").and_then(serde_json::Value::as_array) else {
        return Vec::new();
    };
    let side = |name: &str| payload.get(name).and_then(serde_json::Value::as_object);
    let before = side("before").or_else(|| side("from"));
    let after = side("after");
    changed
        .iter()
        .filter_map(serde_json::Value::as_str)
        .map(|column| ColumnChange {
            column: column.to_owned(),
            before: before.and_then(|b| b.get(column)).cloned(),
            after: after.and_then(|a| a.get(column)).cloned(),
        })
        .collect()
}

fn check_limit(limit: u32) -> Result<i64> {
    if limit == 0 || limit > MAX_PAGE_SIZE {
        return Err(Error::validation(
            "limit",
            format!("page size {limit} is not allowed; use 1 to {MAX_PAGE_SIZE}"),
        ));
    }
    Ok(i64::from(limit))
}

impl<B: JournalBackend> Journal<B> {
    /// One event by its sequence (№).
    ///
    /// # Errors
    /// [`Error::Validation`] when `sequence` is below 1; [`Error::Database`] when the query
    /// fails.
    pub async fn get_by_sequence(&self, sequence: i64) -> Result<Option<OutboxEvent>> {
        if sequence < 1 {
            return Err(Error::validation(
                "sequence",
                format!("sequence {sequence} is not allowed; sequences start at 1"),
            ));
        }
        // A keyset page of one: the primary key's first entry below sequence + 1.
        let query = EventQuery::new()
            .with_cursor(Cursor::Before(sequence.saturating_add(1)))
            .with_limit(1)?;
        let page = self.list(&query).await?;
        Ok(page.events.into_iter().find(|e| e.sequence == sequence))
    }

    /// The events of `event`'s ordering key just before and after it: among the key's
    /// undelivered events however far away, and among the [`NEIGHBOUR_WINDOW`] events on either
    /// side. None for an event without a key.
    ///
    /// # Errors
    /// [`Error::Database`] when the query fails.
    pub async fn neighbours(&self, event: &OutboxEvent) -> Result<EventNeighbours> {
        let Some(key) = &event.ordering_key else {
            return Ok(EventNeighbours::default());
        };
        let params = EventNeighboursParams::new(event.sequence, key.clone(), NEIGHBOUR_WINDOW);
        self.backend().event_neighbours(self.table(), &params).await
    }

    /// One page of held ordering keys — keys whose head (first undelivered event) is
    /// dead-lettered or has failed, so their later events wait — in key order after `after`
    /// (`""` = from the first key), at most `limit`. A page walks at most [`HELD_KEY_WALK`] keys
    /// with undelivered events; [`HeldKeyPage::next_after`] says where the next page starts.
    ///
    /// # Errors
    /// [`Error::Validation`] when `limit` is not 1 to 1000 or `after` is longer than 255
    /// characters or holds NUL; [`Error::Database`] when the query fails.
    pub async fn held_keys(&self, after: &str, limit: u32) -> Result<HeldKeyPage> {
        let limit = check_limit(limit)?;
        check_filter_text("after", after)?;
        let params =
            KeyHeldListParams::new(after.to_owned(), limit, HELD_KEY_WALK, WAITING_COUNT_CAP);
        self.backend().key_held_list(self.table(), &params).await
    }

    /// Retries or releases (see [`KeyHeadAction`]) the event at `sequence`, the held head of
    /// `ordering_key`. Returns `false`, changing nothing, when it is no longer that key's held
    /// head (delivered, retried or released meanwhile) or a relay holds a live lease on it.
    ///
    /// # Errors
    /// [`Error::Validation`] when `ordering_key` is empty or longer than 255 characters;
    /// [`Error::Database`] when the update fails.
    pub async fn key_head(
        &self,
        sequence: i64,
        ordering_key: &str,
        action: KeyHeadAction,
    ) -> Result<bool> {
        if ordering_key.is_empty() {
            return Err(Error::validation(
                "ordering_key",
                "the ordering key is empty; name the held key whose head to act on",
            ));
        }
        check_filter_text("ordering_key", ordering_key)?;
        let params = KeyHeadParams::new(sequence, ordering_key.to_owned(), action, Utc::now());
        let changed = self
            .backend()
            .key_head_update(self.table(), &params)
            .await?;
        tracing::info!(table = %self.table(), sequence, ordering_key, ?action, changed, "key head action");
        Ok(changed > 0)
    }

    /// Counts per topic: pending, leased, retrying, dead, published in the last
    /// `published_window`, and when the oldest event still to deliver was created; one page of
    /// topics (those with any of these) in name order after `after`, at most `limit`.
    ///
    /// # Errors
    /// [`Error::Validation`] when `limit` is not 1 to 1000, `after` is longer than 255
    /// characters, or `published_window` is zero or longer than 366 days; [`Error::Database`]
    /// when the query fails.
    pub async fn topic_stats(
        &self,
        after: &str,
        limit: u32,
        published_window: Duration,
    ) -> Result<Vec<TopicStats>> {
        let limit = check_limit(limit)?;
        check_filter_text("after", after)?;
        if published_window.is_zero() || published_window > MAX_PUBLISHED_WINDOW {
            return Err(Error::validation(
                "window",
                format!(
                    "a published window of {} s is not allowed; use 1 s to 366 days",
                    published_window.as_secs_f64()
                ),
            ));
        }
        let now = Utc::now();
        let window = chrono::Duration::from_std(published_window)
            .map_err(|e| Error::validation("window", e.to_string()))?;
        let params = TopicStatsParams::new(after.to_owned(), limit, now - window, now);
        self.backend().topic_stats_list(self.table(), &params).await
    }

    /// The relays holding leases, live or run out, one page in name order after `after`, at
    /// most `limit`.
    ///
    /// # Errors
    /// [`Error::Validation`] when `limit` is not 1 to 1000 or `after` is longer than 255
    /// characters; [`Error::Database`] when the query fails.
    pub async fn relay_leases(&self, after: &str, limit: u32) -> Result<Vec<RelayLeases>> {
        let limit = check_limit(limit)?;
        check_filter_text("after", after)?;
        let params = RelayLeaseListParams::new(after.to_owned(), limit, Utc::now());
        self.backend().relay_lease_list(self.table(), &params).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn changes_read_before_or_from_and_after() {
        let c = changes(&json!({
            "changed": ["status", "eta_date", 7],
            "before": {"status": "confirmed", "eta_date": null},
            "after": {"status": "shipped"}
        }));
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].before, Some(json!("confirmed")));
        assert_eq!(c[0].after, Some(json!("shipped")));
        assert_eq!(c[1].before, Some(json!(null)));
        assert_eq!(c[1].after, None);
        let hare = changes(&json!({"changed": ["sum"], "from": {"sum": "0.00"}}));
        assert_eq!(hare[0].before, Some(json!("0.00")));
        assert!(changes(&json!({"a": 1})).is_empty());
    }
}
