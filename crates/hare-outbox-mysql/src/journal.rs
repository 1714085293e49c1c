//! The journal's reads on MySQL: a page of events with filters and keyset pagination, and the
//! timeline of the dashboard's charts.

use hare_outbox_core::backend::timeline::{
    BucketCounts as Counts, LatencyRanks as Ranks, TimelineGrid as Grid,
};
use hare_outbox_core::journal::{
    AUTHOR_HEADER, Cursor, EventQuery, ObjectName, TimelineBucket, TimelineParams,
};
use hare_outbox_core::{EventStatus, OutboxEvent, OutboxTable, Result};
use sqlx::mysql::MySqlPool;
use sqlx::{AssertSqlSafe, Row};

use crate::bind_topics;
use crate::decode;
use crate::error::translate;
use crate::sql::{cached, render_table, topic_filter};

/// The journal's object name by captured table: the payload's `table` when it is a string, else
/// its `model` when that is one (NULL otherwise, which matches nothing).
const OBJECT_BY_TABLE: &str = "CASE WHEN JSON_TYPE(JSON_EXTRACT(o.payload, '$.table')) = 'STRING' \
     THEN JSON_UNQUOTE(JSON_EXTRACT(o.payload, '$.table')) \
     WHEN JSON_TYPE(JSON_EXTRACT(o.payload, '$.model')) = 'STRING' \
     THEN JSON_UNQUOTE(JSON_EXTRACT(o.payload, '$.model')) END";

/// The journal's object name by the capture's label: the payload's `model` when it is a string.
const OBJECT_BY_LABEL: &str = "CASE WHEN JSON_TYPE(JSON_EXTRACT(o.payload, '$.model')) = 'STRING' \
     THEN JSON_UNQUOTE(JSON_EXTRACT(o.payload, '$.model')) END";

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

/// The JSON path of the [`AUTHOR_HEADER`] header (`$."author"`).
fn author_path() -> String {
    format!("$.\"{}\"", AUTHOR_HEADER.replace('"', "\\\""))
}

/// The object filter's key as JSON text when it reads as JSON other than a string (`22`,
/// `{"order": 22, "line": 1}`), compared as JSON whatever the stored key order; `None` otherwise.
fn pk_json(pk: &str) -> Option<String> {
    match serde_json::from_str::<serde_json::Value>(pk) {
        Ok(value) if !value.is_string() => Some(value.to_string()),
        _ => None,
    }
}

/// The statement of one journal page (cached per direction and object name).
fn list_sql(table: &OutboxTable, ascending: bool, object_name: ObjectName) -> std::sync::Arc<str> {
    let (keyset, order) = if ascending {
        (">", "ASC")
    } else {
        ("<", "DESC")
    };
    let object = match object_name {
        ObjectName::Label => OBJECT_BY_LABEL,
        _ => OBJECT_BY_TABLE,
    };
    cached(table, format!("list {ascending} {object_name:?}"), || {
        render_table(
            include_str!("../queries/event_list.sql"),
            table,
            &[
                ("keyset", keyset.to_owned()),
                ("order", order.to_owned()),
                ("object_name", object.to_owned()),
                ("topic_filter:o", topic_filter("o")),
            ],
        )
    })
}

/// One page of events matching `query` (see `queries/event_list.sql`).
///
/// # Errors
/// [`Error::Database`] when the query fails or a row cannot be decoded.
pub(crate) async fn list(
    pool: &MySqlPool,
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
    let model = object.map(|o| o.model.as_str());
    let pk = object.and_then(|o| o.pk.as_deref());
    let json = pk.and_then(pk_json);
    let statement =
        sqlx::query(AssertSqlSafe(list_sql(table, ascending, query.object_name))).bind(cursor);
    let rows = bind_topics(statement, &query.topics)
        .bind(query.statuses.is_empty())
        .bind(published)
        .bind(dead)
        .bind(leased)
        .bind(retrying)
        .bind(pending)
        .bind(model)
        .bind(model)
        .bind(pk)
        .bind(pk)
        .bind(json.clone())
        .bind(json.clone())
        .bind(json)
        .bind(query.author.as_deref())
        .bind(author_path())
        .bind(author_path())
        .bind(query.author.as_deref())
        .bind(query.created_from)
        .bind(query.created_from)
        .bind(query.created_until)
        .bind(query.created_until)
        .bind(i64::from(query.limit))
        .fetch_all(pool)
        .await
        .map_err(translate)?;
    rows.iter().map(|row| decode::event(table, row)).collect()
}

/// The timeline of `params` (see `queries/event_timeline.sql` and
/// `queries/event_timeline_latency.sql`), both read in one transaction so they agree.
pub(crate) async fn timeline(
    pool: &MySqlPool,
    table: &OutboxTable,
    params: &TimelineParams,
) -> Result<Vec<TimelineBucket>> {
    let grid = Grid::new(params)?;
    let since = Grid::time(grid.since_us)?;
    let until = Grid::time(grid.until_us)?;
    let mut tx = pool.begin().await.map_err(translate)?;
    let rows = sqlx::query(AssertSqlSafe(crate::sql::statement!(
        table,
        "event_timeline"
    )))
    .bind(since)
    .bind(until)
    .bind(grid.since_us)
    .bind(grid.until_us)
    .bind(grid.width_us)
    .bind(grid.buckets)
    .fetch_all(&mut *tx)
    .await
    .map_err(translate)?;
    // Bucket -1 (before the window) is the last slot.
    let before = grid.buckets as usize;
    let mut counts = vec![Counts::default(); before + 1];
    let slot = |bucket: Option<i64>| match bucket {
        Some(-1) => Some(before),
        Some(b) => usize::try_from(b).ok().filter(|&b| b < before),
        None => None,
    };
    for row in &rows {
        let events: i64 = row.try_get("events").map_err(translate)?;
        let bucket = |column: &str| -> Result<Option<usize>> {
            Ok(slot(
                row.try_get::<Option<i64>, _>(column).map_err(translate)?,
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
    let latency_rows = sqlx::query(AssertSqlSafe(crate::sql::statement!(
        table,
        "event_timeline_latency"
    )))
    .bind(since)
    .bind(until)
    .bind(grid.since_us)
    .bind(grid.width_us)
    .bind(grid.buckets)
    .fetch_all(&mut *tx)
    .await
    .map_err(translate)?;
    tx.commit().await.map_err(translate)?;
    let mut ranks: Vec<Ranks> = (0..grid.buckets).map(|_| Ranks::default()).collect();
    for row in &latency_rows {
        let bucket: i64 = row.try_get("bucket").map_err(translate)?;
        if let Some(slot) = usize::try_from(bucket).ok().and_then(|b| ranks.get_mut(b)) {
            slot.n = row.try_get("n").map_err(translate)?;
            slot.by_rank.insert(
                row.try_get("rnk").map_err(translate)?,
                row.try_get("latency_us").map_err(translate)?,
            );
        }
    }
    grid.assemble(before, &counts, &ranks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_that_read_as_json_compare_as_json() {
        assert_eq!(pk_json("22").as_deref(), Some("22"));
        assert_eq!(
            pk_json(r#"{"order": 22, "line": 1}"#).as_deref(),
            Some(r#"{"line":1,"order":22}"#)
        );
        assert_eq!(pk_json("A-7"), None);
        assert_eq!(pk_json(r#""22""#), None);
    }
}
