//! The journal's reads: a page of events with filters and keyset
//! pagination, and the timeline of the dashboard's charts.

use hare_outbox_core::backend::timeline::{
    BucketCounts as Counts, LatencyRanks as Ranks, TimelineGrid as Grid,
};
use hare_outbox_core::journal::{
    AUTHOR_HEADER, Cursor, EventQuery, TimelineBucket, TimelineParams,
};
use hare_outbox_core::{EventStatus, OutboxEvent, OutboxTable, Result};
use sqlx::{AssertSqlSafe, Row, SqlitePool};

use crate::bind_topics;
use crate::decode::{self, timestamp};
use crate::error::map_err;
use crate::sql::{self, Query};

/// The five status flags of `statuses`: pending, leased, retrying, dead, published.
fn status_flags(statuses: &[EventStatus]) -> [bool; 5] {
    let has = |status| statuses.contains(&status);
    [
        has(EventStatus::Pending),
        has(EventStatus::Leased),
        has(EventStatus::Retrying),
        has(EventStatus::Dead),
        has(EventStatus::Published),
    ]
}

/// The SQLite JSON path of the [`AUTHOR_HEADER`] header (`$."author"`).
fn author_path() -> String {
    format!("$.\"{}\"", AUTHOR_HEADER.replace('"', "\\\""))
}

/// The object filter's key as the statement compares it: a key that reads as JSON other than a
/// string (`22`, `{"order": 22, "line": 1}`) as its compact text with sorted object keys, the
/// form [`ObjectRef::of`](hare_outbox_core::journal::ObjectRef::of) shows; any other text as is.
fn pk_text(pk: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(pk) {
        Ok(value) if !value.is_string() => value.to_string(),
        _ => pk.to_owned(),
    }
}

/// One page of events matching `query` (see `queries/event_list.sql`).
pub(crate) async fn list(
    pool: &SqlitePool,
    table: &OutboxTable,
    query: &EventQuery,
) -> Result<Vec<OutboxEvent>> {
    let (ascending, cursor) = match query.cursor {
        Cursor::Newest => (false, i64::MAX),
        Cursor::Before(sequence) => (false, sequence),
        Cursor::After(sequence) => (true, sequence),
    };
    let [pending, leased, retrying, dead, published] = status_flags(&query.statuses);
    let object = query.object.as_ref();
    let statement = sqlx::query(AssertSqlSafe(sql::event_list(
        table,
        ascending,
        query.object_name,
    )));
    let rows = bind_topics(statement, &query.topics)
        .bind(query.statuses.is_empty())
        .bind(pending)
        .bind(leased)
        .bind(retrying)
        .bind(dead)
        .bind(published)
        .bind(object.map(|o| o.model.as_str()))
        .bind(object.and_then(|o| o.pk.as_deref()).map(pk_text))
        .bind(author_path())
        .bind(query.author.as_deref())
        .bind(query.created_from.map(timestamp))
        .bind(query.created_until.map(timestamp))
        .bind(cursor)
        .bind(i64::from(query.limit))
        .fetch_all(pool)
        .await
        .map_err(map_err)?;
    rows.iter().map(|row| decode::event(table, row)).collect()
}

/// The timeline of `params` (see `queries/event_timeline.sql` and
/// `queries/event_timeline_latency.sql`), both read in one transaction so they agree.
pub(crate) async fn timeline(
    pool: &SqlitePool,
    table: &OutboxTable,
    params: &TimelineParams,
) -> Result<Vec<TimelineBucket>> {
    let grid = Grid::new(params)?;
    let since = timestamp(Grid::time(grid.since_us)?);
    let until = timestamp(Grid::time(grid.until_us)?);
    let mut tx = pool.begin().await.map_err(map_err)?;
    let rows = sqlx::query(AssertSqlSafe(Query::EventTimeline.render(table)))
        .bind(&since)
        .bind(&until)
        .bind(grid.since_us)
        .bind(grid.until_us)
        .bind(grid.width_us)
        .bind(grid.buckets)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
    // Bucket -1 (before the window) is the last slot.
    let before = grid.buckets as usize;
    let mut counts = vec![Counts::default(); before + 1];
    let slot = |bucket: Option<i64>| match bucket {
        Some(-1) => Some(before),
        Some(b) => usize::try_from(b).ok().filter(|&b| b < before),
        None => None,
    };
    for row in &rows {
        let events: i64 = row.try_get("events").map_err(map_err)?;
        let bucket = |column: &str| -> Result<Option<usize>> {
            Ok(slot(
                row.try_get::<Option<i64>, _>(column).map_err(map_err)?,
            ))
        };
        if let Some(b) = bucket("created")? {
            counts[b].created += events;
        }
        if let Some(b) = bucket("published")? {
            counts[b].published += events;
        }
        if let Some(b) = bucket("dead_lettered")? {
            counts[b].dead_lettered += events;
        }
        if let Some(b) = bucket("finished")? {
            counts[b].finished += events;
        }
    }
    let before = counts.pop().unwrap_or_default();
    let latency_rows = sqlx::query(AssertSqlSafe(Query::EventTimelineLatency.render(table)))
        .bind(&since)
        .bind(&until)
        .bind(grid.since_us)
        .bind(grid.width_us)
        .bind(grid.buckets)
        .fetch_all(&mut *tx)
        .await
        .map_err(map_err)?;
    tx.commit().await.map_err(map_err)?;
    let mut ranks: Vec<Ranks> = (0..grid.buckets).map(|_| Ranks::default()).collect();
    for row in &latency_rows {
        let bucket: i64 = row.try_get("bucket").map_err(map_err)?;
        if let Some(slot) = usize::try_from(bucket).ok().and_then(|b| ranks.get_mut(b)) {
            slot.n = row.try_get("n").map_err(map_err)?;
            slot.by_rank.insert(
                row.try_get("rank").map_err(map_err)?,
                row.try_get("latency_us").map_err(map_err)?,
            );
        }
    }
    grid.assemble(before, &counts, &ranks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_read_as_json_are_written_compact_and_sorted() {
        assert_eq!(pk_text("22"), "22");
        assert_eq!(pk_text("1.50"), "1.5");
        assert_eq!(
            pk_text(r#"{"order": 22, "line": 1}"#),
            r#"{"line":1,"order":22}"#
        );
        assert_eq!(pk_text("A-7"), "A-7");
        assert_eq!(pk_text(r#""22""#), r#""22""#);
    }
}
