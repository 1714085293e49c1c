//! The journal's reads: a page of events with filters and keyset
//! pagination, and the timeline of the dashboard's charts.

use chrono::{DateTime, Utc};
use hare_outbox_core::journal::{
    AUTHOR_HEADER, Cursor, EventQuery, MAX_TIMELINE_BUCKETS, ObjectName, TimelineBucket,
    TimelineParams,
};
use hare_outbox_core::{Error, EventStatus, OutboxEvent, OutboxTable, Result};
use serde_json::Value;
use sqlx::{AssertSqlSafe, Row};

use crate::exec::{Db, RunIn};
use crate::sql::Statements;
use crate::{bind_topics, decode, translate};

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

/// The object filter's key read as JSON, for keys that are not strings (`22`, `{"a":1}`); `None`
/// when the text is no JSON or a JSON string (a string key compares as text).
fn pk_json(pk: &str) -> Option<Value> {
    serde_json::from_str::<Value>(pk)
        .ok()
        .filter(|value| !value.is_string() && !value.is_null())
}

/// One page of events matching `query` (see `queries/event_list.sql`).
pub(crate) async fn list(
    db: Db<'_>,
    table: &OutboxTable,
    query: &EventQuery,
) -> Result<Vec<OutboxEvent>> {
    let statements = Statements::for_table(table);
    let (before, after) = match query.object_name {
        ObjectName::Table => (&statements.event_list_before, &statements.event_list_after),
        ObjectName::Label => (
            &statements.event_list_before_label,
            &statements.event_list_after_label,
        ),
    };
    let (sql, cursor) = match query.cursor {
        Cursor::Newest => (before.clone(), i64::MAX),
        Cursor::Before(sequence) => (before.clone(), sequence),
        Cursor::After(sequence) => (after.clone(), sequence),
    };
    let [pending, leased, retrying, dead, published] = status_flags(&query.statuses);
    let object = query.object.as_ref();
    let pk = object.and_then(|o| o.pk.as_deref());
    let rows = bind_topics(sqlx::query(AssertSqlSafe(sql)), &query.topics)
        .bind(query.statuses.is_empty())
        .bind(pending)
        .bind(leased)
        .bind(retrying)
        .bind(dead)
        .bind(published)
        .bind(object.map(|o| o.model.as_str()))
        .bind(pk)
        .bind(pk.and_then(pk_json))
        .bind(AUTHOR_HEADER)
        .bind(query.author.as_deref())
        .bind(query.created_from)
        .bind(query.created_until)
        .bind(cursor)
        .bind(i64::from(query.limit))
        .fetch_all_in(db)
        .await
        .map_err(translate)?;
    rows.iter().map(|row| decode(table, row)).collect()
}

/// The buckets of a timeline in whole microseconds, the resolution of `timestamptz`: bucket `k`
/// spans `[since + k·width, since + (k+1)·width)`, the last one ends at `until`.
#[derive(Debug, Clone, Copy)]
struct Grid {
    since_us: i64,
    until_us: i64,
    width_us: i64,
    buckets: i64,
}

impl Grid {
    /// The grid of `params`.
    ///
    /// # Errors
    /// [`Error::Validation`] when `buckets` is 0 or above [`MAX_TIMELINE_BUCKETS`], when `since`
    /// is not before `until`, or when the window is shorter than one microsecond per bucket.
    fn new(params: &TimelineParams) -> Result<Grid> {
        if params.buckets == 0 || params.buckets > MAX_TIMELINE_BUCKETS {
            return Err(Error::validation(
                "buckets",
                format!(
                    "{} timeline buckets are not allowed; use 1 to {MAX_TIMELINE_BUCKETS}",
                    params.buckets
                ),
            ));
        }
        if params.since >= params.until {
            return Err(Error::validation(
                "since",
                format!(
                    "timeline start {} is not before its end {}",
                    params.since, params.until
                ),
            ));
        }
        let since_us = params.since.timestamp_micros();
        let until_us = params.until.timestamp_micros();
        let buckets = i64::from(params.buckets);
        let width_us = (until_us - since_us) / buckets;
        if width_us == 0 {
            return Err(Error::validation(
                "buckets",
                format!(
                    "a timeline window of {} µs cannot hold {buckets} buckets; use at most one bucket per microsecond",
                    until_us - since_us
                ),
            ));
        }
        Ok(Grid {
            since_us,
            until_us,
            width_us,
            buckets,
        })
    }

    /// Start and end of bucket `k` in microseconds since the Unix epoch.
    fn bounds(&self, k: i64) -> (i64, i64) {
        let start = self.since_us + k * self.width_us;
        let end = if k + 1 == self.buckets {
            self.until_us
        } else {
            start + self.width_us
        };
        (start, end)
    }

    /// `micros` since the Unix epoch as a time.
    fn time(micros: i64) -> Result<DateTime<Utc>> {
        DateTime::from_timestamp_micros(micros).ok_or_else(|| {
            Error::validation(
                "since",
                format!("{micros} µs since the Unix epoch is not a representable time"),
            )
        })
    }
}

/// The counts of one bucket: created, published, dead-lettered, and finished (left the backlog).
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    created: i64,
    published: i64,
    dead_lettered: i64,
    finished: i64,
}

/// The latency percentiles of one bucket, in milliseconds.
#[derive(Debug, Clone, Copy, Default)]
struct Latency {
    p50: Option<f64>,
    p95: Option<f64>,
    max: Option<f64>,
}

/// The timeline of `params` (see `queries/event_timeline.sql` and
/// `queries/event_timeline_latency.sql`), both read in one `REPEATABLE READ` transaction so they
/// agree.
pub(crate) async fn timeline(
    db: Db<'_>,
    table: &OutboxTable,
    params: &TimelineParams,
) -> Result<Vec<TimelineBucket>> {
    let grid = Grid::new(params)?;
    let since = Grid::time(grid.since_us)?;
    let until = Grid::time(grid.until_us)?;
    let statements = Statements::for_table(table);
    let mut tx = db.pool.begin().await.map_err(translate)?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .persistent(db.persistent())
        .execute(&mut *tx)
        .await
        .map_err(translate)?;
    let edges = (0..grid.buckets)
        .map(|k| Grid::time(grid.bounds(k).0))
        .chain(std::iter::once(Ok(until)))
        .collect::<Result<Vec<_>>>()?;
    let rows = sqlx::query(AssertSqlSafe(statements.event_timeline.clone()))
        .bind(&edges)
        .bind(since)
        .bind(until)
        .persistent(db.persistent())
        .fetch_all(&mut *tx)
        .await
        .map_err(translate)?;
    let latency_rows = sqlx::query(AssertSqlSafe(statements.event_timeline_latency.clone()))
        .bind(&edges)
        .bind(since)
        .bind(until)
        .persistent(db.persistent())
        .fetch_all(&mut *tx)
        .await
        .map_err(translate)?;
    tx.commit().await.map_err(translate)?;

    let mut before = Counts::default();
    let mut counts = vec![Counts::default(); grid.buckets as usize];
    for row in &rows {
        let bucket: i64 = row.try_get("bucket").map_err(translate)?;
        let c = Counts {
            created: row.try_get("created").map_err(translate)?,
            published: row.try_get("published").map_err(translate)?,
            dead_lettered: row.try_get("dead_lettered").map_err(translate)?,
            finished: row.try_get("finished").map_err(translate)?,
        };
        match usize::try_from(bucket).ok().and_then(|b| counts.get_mut(b)) {
            Some(slot) => *slot = c,
            None => before = c,
        }
    }
    let mut latencies = vec![Latency::default(); grid.buckets as usize];
    for row in &latency_rows {
        let bucket: i64 = row.try_get("bucket").map_err(translate)?;
        let ms = |column: &str| -> Result<Option<f64>> {
            row.try_get::<Option<f64>, _>(column).map_err(translate)
        };
        if let Some(slot) = usize::try_from(bucket)
            .ok()
            .and_then(|b| latencies.get_mut(b))
        {
            *slot = Latency {
                p50: ms("p50_ms")?,
                p95: ms("p95_ms")?,
                max: ms("max_ms")?,
            };
        }
    }
    let mut backlog = before.created - before.finished;
    let mut out = Vec::with_capacity(counts.len());
    for (k, (c, l)) in counts.iter().zip(&latencies).enumerate() {
        backlog += c.created - c.finished;
        let (start, end) = grid.bounds(k as i64);
        out.push(TimelineBucket {
            start: Grid::time(start)?,
            end: Grid::time(end)?,
            created: c.created,
            published: c.published,
            dead_lettered: c.dead_lettered,
            backlog,
            latency_p50_ms: l.p50,
            latency_p95_ms: l.p95,
            latency_max_ms: l.max,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_non_string_keys_compare_as_json() {
        assert_eq!(pk_json("22"), Some(serde_json::json!(22)));
        assert_eq!(
            pk_json(r#"{"order": 22, "line": 1}"#),
            Some(serde_json::json!({"line": 1, "order": 22}))
        );
        assert_eq!(pk_json("A-7"), None);
        assert_eq!(pk_json(r#""22""#), None);
        assert_eq!(pk_json("null"), None);
    }

    #[test]
    fn grid_splits_the_window_in_whole_microseconds() {
        let at = |s| DateTime::from_timestamp(s, 0).expect("valid");
        let mut params =
            TimelineParams::last(std::time::Duration::from_secs(10), 3, at(10)).expect("valid");
        let grid = Grid::new(&params).expect("valid");
        assert_eq!(grid.bounds(0), (0, 3_333_333));
        assert_eq!(grid.bounds(2), (6_666_666, 10_000_000));
        params.buckets = 0;
        assert!(matches!(Grid::new(&params), Err(Error::Validation { .. })));
    }
}
