//! The relay's lease on MySQL: the walk, locks and runs of the PostgreSQL lease statement, as a
//! few statements in one `READ COMMITTED` transaction (MySQL has no `LATERAL` on MariaDB and no
//! `UPDATE … RETURNING`).
//!
//! 1. The walk over ordering keys (`lease_walk.sql`): from the cursor, in steps that each read
//!    a bounded range of the pending-key index, the head of each next key with whether it may be
//!    leased, wrapping around once; a key with a long backlog costs one step, never a read of
//!    its backlog. It stops after `limit` heads
//!    that may be leased, or once it holds `min_keys` of them whose runs fill the batch (each
//!    key counting with up to `fill_cap` of its undelivered events).
//! 2. The heads that may be leased are locked with `FOR UPDATE SKIP LOCKED` (`lease_lock.sql`);
//!    a head another relay's lease holds locked is skipped, and the batch says it was contended.
//! 3. Each locked head takes a run of its key's next events (`lease_run.sql`, one `UNION ALL`
//!    for all heads) up to an even share of the batch, stopping before the first that may not be
//!    leased; a run is leased only behind a head this transaction locked.
//! 4. Events without a key, in sequence order, locked with `SKIP LOCKED` (`lease_unkeyed.sql`);
//!    keyed and unkeyed events are interleaved by rank, as on PostgreSQL.
//! 5. One `UPDATE` leases the chosen events; one `SELECT` reads them back.
//!
//! `READ COMMITTED` keeps InnoDB from taking gap locks on the index ranges read, which would make
//! writers of new events wait for the lease.

use std::collections::HashSet;

use chrono::{DateTime, Utc};
use hare_outbox_core::backend::template::render;
use hare_outbox_core::backend::{EventLeaseParams, LeasedBatch, UnreadableRow};
use hare_outbox_core::{OutboxTable, Result, TopicFilter};
use sqlx::mysql::{MySql, MySqlArguments, MySqlConnection, MySqlPool};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Row};

use crate::decode;
use crate::error::translate;
use crate::sql::{cached, placeholders, render_table, topic_filter};

/// The readiness test of alias `alias`, with the topic filter when the relay takes some topics.
fn ready(alias: &str, filtered: bool) -> String {
    let mut test = render(include_str!("../queries/event_ready.sql"), &[("a", alias)])
        .trim_end()
        .to_owned();
    if filtered {
        test = format!("({test} AND {})", topic_filter(alias));
    }
    test
}

/// `template` rendered for `table` with `{ready:o}`, `{ready:e}`, `{ready:u}` and `more`.
fn lease_sql(
    table: &OutboxTable,
    name: &str,
    template: &str,
    filtered: bool,
    more: Vec<(&str, String)>,
) -> std::sync::Arc<str> {
    let shape = format!(
        "lease {name} {filtered} {}",
        more.iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    cached(table, shape, || {
        let mut values = more.clone();
        for alias in ["o", "e", "u"] {
            values.push(match alias {
                "o" => ("ready:o", ready("o", filtered)),
                "e" => ("ready:e", ready("e", filtered)),
                _ => ("ready:u", ready("u", filtered)),
            });
        }
        render_table(template, table, &values)
    })
}

/// Binds the parameters of one readiness test: the clock twice, then the topic filter's five.
pub(crate) fn bind_ready<'q>(
    query: Query<'q, MySql, MySqlArguments>,
    now: DateTime<Utc>,
    topics: Option<&TopicFilter>,
) -> Query<'q, MySql, MySqlArguments> {
    let query = query.bind(now).bind(now);
    match topics {
        Some(topics) => crate::bind_topics(query, topics),
        None => query,
    }
}

/// One head the walk visited.
struct Head {
    sequence: i64,
    key: String,
    ready: bool,
}

/// Leases the next batch (see the module's text).
pub(crate) async fn lease(
    pool: &MySqlPool,
    table: &OutboxTable,
    params: &EventLeaseParams,
) -> Result<LeasedBatch> {
    let mut conn = pool.acquire().await.map_err(translate)?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
        .execute(&mut *conn)
        .await
        .map_err(translate)?;
    let mut tx = sqlx::Connection::begin(&mut *conn)
        .await
        .map_err(translate)?;
    let batch = lease_in(&mut tx, table, params).await?;
    tx.commit().await.map_err(translate)?;
    Ok(batch)
}

async fn lease_in(
    conn: &mut MySqlConnection,
    table: &OutboxTable,
    params: &EventLeaseParams,
) -> Result<LeasedBatch> {
    let now: DateTime<Utc> = match params.now {
        Some(now) => now,
        None => sqlx::query_scalar("SELECT UTC_TIMESTAMP(6)")
            .fetch_one(&mut *conn)
            .await
            .map_err(translate)?,
    };
    let filtered = !params.topics.is_all();
    let topics = filtered.then_some(&params.topics);
    let limit = params.limit.max(1);
    let run_limit = (params.max_events_per_key.max(1) - 1).min(limit - 1).max(0);
    let min_keys = params.min_keys.clamp(1, limit);
    let fill_cap = ((limit + min_keys - 1) / min_keys).min(run_limit + 1);
    // Index entries one step of the walk reads: room for several keys' heads and some backlog.
    let scan = (min_keys.max(16).min(limit) * 4).max(64);

    // 1. The walk, with the runs of the ready heads when they count towards filling the batch.
    let cursor = params.key_cursor.as_str();
    let mut walked: Vec<Head> = Vec::new();
    let mut runs: std::collections::HashMap<i64, Vec<(i64, bool)>> = Default::default();
    let (mut found, mut filled) = (0_i64, 0_i64);
    let mut after = cursor.to_owned();
    let mut wrapped = false;
    'walk: loop {
        let upto = if wrapped {
            " AND o.ordering_key <= ?"
        } else {
            ""
        };
        let sql = lease_sql(
            table,
            "walk",
            include_str!("../queries/lease_walk.sql"),
            filtered,
            vec![("upto", upto.to_owned()), ("scan", scan.to_string())],
        );
        let mut query = bind_ready(sqlx::query(AssertSqlSafe(sql)), now, topics).bind(&after);
        if wrapped {
            query = query.bind(cursor);
        }
        let rows = query.fetch_all(&mut *conn).await.map_err(translate)?;
        let exhausted = (rows.len() as i64) < scan;
        // The first row of each key is its head.
        let mut heads: Vec<Head> = Vec::new();
        for row in &rows {
            let key: String = row.try_get("ordering_key").map_err(translate)?;
            if heads.last().is_some_and(|h| h.key == key) {
                continue;
            }
            heads.push(Head {
                sequence: row.try_get("sequence").map_err(translate)?,
                key,
                ready: row.try_get::<i64, _>("ready").map_err(translate)? != 0,
            });
        }
        if run_limit > 0 {
            let ready: Vec<&Head> = heads.iter().filter(|h| h.ready).collect();
            runs.extend(fetch_runs(conn, table, &ready, run_limit, now, topics, filtered).await?);
        }
        for head in heads {
            after.clone_from(&head.key);
            if head.ready {
                found += 1;
                let run = runs.get(&head.sequence).map_or(0, |r| r.len() as i64);
                filled += (1 + run).min(fill_cap);
            }
            walked.push(head);
            if found >= limit || (found >= min_keys && filled >= limit) {
                break 'walk;
            }
        }
        if exhausted {
            if wrapped || cursor.is_empty() {
                break;
            }
            wrapped = true;
            after = String::new();
        }
    }
    let key_cursor = walked.last().map(|h| h.key.clone());

    // 2. Lock the ready heads; those another relay holds are skipped.
    let ready: Vec<&Head> = walked.iter().filter(|h| h.ready).collect();
    let mut locked: HashSet<i64> = HashSet::new();
    if !ready.is_empty() {
        let sql = lease_sql(
            table,
            "lock",
            include_str!("../queries/lease_lock.sql"),
            filtered,
            vec![("sequences", placeholders(ready.len()))],
        );
        let mut query = sqlx::query(AssertSqlSafe(sql));
        for head in &ready {
            query = query.bind(head.sequence);
        }
        let rows = bind_ready(query, now, topics)
            .fetch_all(&mut *conn)
            .await
            .map_err(translate)?;
        for row in rows {
            locked.insert(row.try_get("sequence").map_err(translate)?);
        }
    }
    let contended = locked.len() < ready.len();
    let heads: Vec<(usize, &Head)> = ready
        .iter()
        .copied()
        .filter(|h| locked.contains(&h.sequence))
        .enumerate()
        .collect();

    // 3. Runs behind the locked heads, up to an even share of what the batch has left.
    let count = heads.len() as i64;
    let per_key = run_limit.min((limit - count + count.max(1) - 1) / count.max(1));
    let mut keyed: Vec<(i64, usize, i64)> = Vec::new(); // (pos, depth, sequence)
    for (depth, head) in &heads {
        keyed.push((1, *depth, head.sequence));
        if per_key > 0 {
            let run = runs.get(&head.sequence).map(Vec::as_slice).unwrap_or(&[]);
            for (i, (sequence, _)) in run
                .iter()
                .take_while(|(_, ok)| *ok)
                .take(per_key as usize)
                .enumerate()
            {
                keyed.push((2 + i as i64, *depth, *sequence));
            }
        }
    }
    keyed.sort_unstable();

    // 4. Events without a key.
    let sql = lease_sql(
        table,
        "unkeyed",
        include_str!("../queries/lease_unkeyed.sql"),
        filtered,
        vec![("limit", limit.to_string())],
    );
    let unkeyed: Vec<i64> = bind_ready(sqlx::query(AssertSqlSafe(sql)), now, topics)
        .fetch_all(&mut *conn)
        .await
        .map_err(translate)?
        .iter()
        .map(|row| row.try_get("sequence").map_err(translate))
        .collect::<Result<_>>()?;

    // Interleave by rank: the n-th keyed event before the n-th unkeyed one.
    let mut chosen: Vec<i64> = Vec::with_capacity(limit as usize);
    let (mut k, mut u) = (keyed.iter(), unkeyed.iter());
    loop {
        let (a, b) = (k.next(), u.next());
        if a.is_none() && b.is_none() {
            break;
        }
        chosen.extend(a.map(|x| x.2));
        chosen.extend(b.copied());
    }
    chosen.truncate(limit as usize);
    if chosen.is_empty() {
        return Ok(LeasedBatch::new(Vec::new(), key_cursor).with_contended(contended));
    }

    // 5. Lease them and read them back.
    let until = now + chrono::Duration::from_std(params.lease).unwrap_or(chrono::Duration::MAX);
    let list = placeholders(chosen.len());
    let mut update = sqlx::query(AssertSqlSafe(render_table(
        include_str!("../queries/lease_update.sql"),
        table,
        &[("sequences", list.clone())],
    )))
    .bind(until)
    .bind(&params.leased_by);
    for s in &chosen {
        update = update.bind(s);
    }
    update.execute(&mut *conn).await.map_err(translate)?;
    let mut select = sqlx::query(AssertSqlSafe(render_table(
        include_str!("../queries/event_get_by_sequences.sql"),
        table,
        &[("sequences", list)],
    )));
    for s in &chosen {
        select = select.bind(s);
    }
    let rows = select.fetch_all(&mut *conn).await.map_err(translate)?;
    let mut events = Vec::with_capacity(rows.len());
    let mut unreadable = Vec::new();
    for row in &rows {
        let refused = match decode::stored_row_problem(row) {
            Some(reason) => reason,
            None => match decode::event(table, row) {
                Ok(event) => {
                    events.push(event);
                    continue;
                }
                Err(error) => format!("the stored event cannot be read: {error}"),
            },
        };
        unreadable.push(UnreadableRow::new(
            row.try_get("sequence").map_err(translate)?,
            row.try_get("attempts").map_err(translate)?,
            row.try_get::<Option<String>, _>("ordering_key")
                .ok()
                .flatten(),
            refused,
        ));
    }
    Ok(LeasedBatch::new(events, key_cursor)
        .with_contended(contended)
        .with_unreadable(unreadable))
}

/// The next undelivered events after each head (at most `run_limit`), with whether each may be
/// leased, in one statement.
async fn fetch_runs(
    conn: &mut MySqlConnection,
    table: &OutboxTable,
    heads: &[&Head],
    run_limit: i64,
    now: DateTime<Utc>,
    topics: Option<&TopicFilter>,
    filtered: bool,
) -> Result<Vec<(i64, Vec<(i64, bool)>)>> {
    if heads.is_empty() {
        return Ok(Vec::new());
    }
    let part = lease_sql(
        table,
        "run",
        include_str!("../queries/lease_run.sql"),
        filtered,
        vec![("run_limit", run_limit.to_string())],
    );
    // Each part tags its rows with the part's number, so rows map back to their head.
    let parts: Vec<String> = (0..heads.len())
        .map(|i| {
            part.replacen(
                "SELECT e.sequence,",
                &format!("SELECT {i} AS part, e.sequence,"),
                1,
            )
        })
        .collect();
    let sql = parts.join("\nUNION ALL\n");
    let mut query = sqlx::query(AssertSqlSafe(sql));
    for head in heads {
        query = bind_ready(query, now, topics)
            .bind(&head.key)
            .bind(head.sequence);
    }
    let rows = query.fetch_all(&mut *conn).await.map_err(translate)?;
    let mut runs: Vec<(i64, Vec<(i64, bool)>)> =
        heads.iter().map(|h| (h.sequence, Vec::new())).collect();
    for row in rows {
        let part: i64 = row.try_get("part").map_err(translate)?;
        let sequence: i64 = row.try_get("sequence").map_err(translate)?;
        let ready: i64 = row.try_get("ready").map_err(translate)?;
        if let Some((_, run)) = usize::try_from(part).ok().and_then(|p| runs.get_mut(p)) {
            run.push((sequence, ready != 0));
        }
    }
    for (_, run) in &mut runs {
        run.sort_unstable_by_key(|(s, _)| *s);
    }
    Ok(runs)
}
