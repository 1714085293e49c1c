//! `events`, `backlog`, `dead-letters retry|cleanup` and `cleanup` on the real binary, on SQLite
//! and on PostgreSQL: filters, `--follow`, exit codes, and what each action changes.

use std::time::Duration;

use chrono::{DateTime, Utc};
use hare_outbox::postgres::PgBackend;
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{Outbox, OutboxEvent, OutboxMessage, OutboxTable};
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::{Value, json};

use crate::support::{Proc, TempDir, hare_outbox, run};

const TIMEOUT: Duration = Duration::from_secs(60);

/// A database of either kind holding the default outbox table.
enum Db {
    Sqlite(TestDb),
    Pg(TestSchema),
}

/// The six events [`Db::seed`] writes, in sequence order.
struct Seeded {
    /// sales_orders #22 by alice, created and published 10 days ago.
    old_published: OutboxEvent,
    /// sales_orders #23 by bob, published an hour ago.
    new_published: OutboxEvent,
    /// purchase_orders #5 by alice, created and dead-lettered 10 days ago.
    old_dead: OutboxEvent,
    /// purchase_orders #6 by bob, dead-lettered now.
    new_dead: OutboxEvent,
    /// Two pending stock.moved events.
    pending: [OutboxEvent; 2],
}

fn sqlite_time(time: DateTime<Utc>) -> String {
    time.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

impl Db {
    async fn sqlite() -> Db {
        let db = TestDb::new(2).await;
        Outbox::new(SqliteBackend::new(db.pool.clone()), OutboxTable::default())
            .migrate()
            .await
            .unwrap();
        Db::Sqlite(db)
    }

    async fn pg() -> Db {
        let schema = TestSchema::new(2).await;
        Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default())
            .migrate()
            .await
            .unwrap();
        Db::Pg(schema)
    }

    fn url(&self) -> String {
        match self {
            Db::Sqlite(db) => db.url(),
            Db::Pg(schema) => schema.url_with_search_path(),
        }
    }

    async fn enqueue(&self, message: OutboxMessage) -> OutboxEvent {
        match self {
            Db::Sqlite(db) => {
                let outbox =
                    Outbox::new(SqliteBackend::new(db.pool.clone()), OutboxTable::default());
                let mut tx = db.pool.begin().await.unwrap();
                let event = outbox.enqueue(&mut tx, message).await.unwrap();
                tx.commit().await.unwrap();
                event
            }
            Db::Pg(schema) => {
                let outbox =
                    Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
                let mut tx = schema.pool.begin().await.unwrap();
                let event = outbox.enqueue(&mut tx, message).await.unwrap();
                tx.commit().await.unwrap();
                event
            }
        }
    }

    /// Puts event `sequence` in a state: its creation time, publication or dead-lettering time
    /// and attempts.
    async fn set(
        &self,
        sequence: i64,
        created: DateTime<Utc>,
        published: Option<DateTime<Utc>>,
        dead: Option<DateTime<Utc>>,
        attempts: i32,
    ) {
        let sql = "UPDATE hare_outbox SET created_at = $1, published_at = $2, dead_lettered_at = $3, attempts = $4, last_error = CASE WHEN $4 > 0 THEN 'HTTP 500' END WHERE sequence = $5";
        match self {
            Db::Sqlite(db) => {
                sqlx::query(sql)
                    .bind(sqlite_time(created))
                    .bind(published.map(sqlite_time))
                    .bind(dead.map(sqlite_time))
                    .bind(attempts)
                    .bind(sequence)
                    .execute(&db.pool)
                    .await
                    .unwrap();
            }
            Db::Pg(schema) => {
                sqlx::query(sql)
                    .bind(created)
                    .bind(published)
                    .bind(dead)
                    .bind(attempts)
                    .bind(sequence)
                    .execute(&schema.pool)
                    .await
                    .unwrap();
            }
        }
    }

    /// `SELECT count(*) FROM hare_outbox WHERE <condition>`.
    async fn count(&self, condition: &str) -> i64 {
        let sql = sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM hare_outbox WHERE {condition}"
        ));
        match self {
            Db::Sqlite(db) => sqlx::query_scalar(sql).fetch_one(&db.pool).await.unwrap(),
            Db::Pg(schema) => sqlx::query_scalar(sql)
                .fetch_one(&schema.pool)
                .await
                .unwrap(),
        }
    }

    async fn seed(&self) -> Seeded {
        let now = Utc::now();
        let days_ago = now - chrono::Duration::days(10);
        let message = |topic: &str, model: &str, pk: i64, author: Option<&str>| {
            let m = OutboxMessage::new(
                topic,
                json!({"model": model, "pk": pk, "changes": {"qty": [pk, pk + 1]}}),
            );
            match author {
                Some(author) => m.header("author", author),
                None => m,
            }
        };
        let old_published = self
            .enqueue(message("doc.updated", "sales_orders", 22, Some("alice")))
            .await;
        self.set(old_published.sequence, days_ago, Some(days_ago), None, 0)
            .await;
        let new_published = self
            .enqueue(message("doc.updated", "sales_orders", 23, Some("bob")))
            .await;
        let hour_ago = now - chrono::Duration::hours(1);
        self.set(new_published.sequence, hour_ago, Some(hour_ago), None, 1)
            .await;
        let old_dead = self
            .enqueue(message("doc.created", "purchase_orders", 5, Some("alice")))
            .await;
        self.set(old_dead.sequence, days_ago, None, Some(days_ago), 5)
            .await;
        let new_dead = self
            .enqueue(message("doc.created", "purchase_orders", 6, Some("bob")))
            .await;
        self.set(new_dead.sequence, hour_ago, None, Some(now), 5)
            .await;
        let first = self.enqueue(message("stock.moved", "stock", 1, None)).await;
        let second = self.enqueue(message("stock.moved", "stock", 2, None)).await;
        Seeded {
            old_published,
            new_published,
            old_dead,
            new_dead,
            pending: [first, second],
        }
    }

    async fn close(self) {
        match self {
            Db::Sqlite(db) => db.close().await,
            Db::Pg(schema) => schema.drop_schema().await,
        }
    }
}

/// Runs `hare-outbox ARGS --database-url URL` to the end: (exit code, stdout, stderr).
async fn cli(dir: &TempDir, db: &Db, args: &[&str]) -> (i32, String, String) {
    run(
        hare_outbox(dir.path())
            .args(args)
            .args(["--database-url", &db.url()])
            .env("COLUMNS", "200"),
        TIMEOUT,
    )
    .await
}

/// The JSON lines of `events --json ARGS`, asserting exit code 0.
async fn json_lines(dir: &TempDir, db: &Db, args: &[&str]) -> Vec<Value> {
    let mut all = vec!["events", "--json"];
    all.extend_from_slice(args);
    let (code, stdout, stderr) = cli(dir, db, &all).await;
    assert_eq!(code, 0, "events {args:?}\nstderr:\n{stderr}");
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect()
}

/// The sequences of `events --json ARGS`.
async fn sequences(dir: &TempDir, db: &Db, args: &[&str]) -> Vec<i64> {
    json_lines(dir, db, args)
        .await
        .iter()
        .map(|e| e["sequence"].as_i64().unwrap())
        .collect()
}

async fn events_filters(db: Db) {
    let dir = TempDir::new("events");
    let s = db.seed().await;
    let seq = |e: &OutboxEvent| e.sequence;
    let all: Vec<i64> = [
        &s.old_published,
        &s.new_published,
        &s.old_dead,
        &s.new_dead,
        &s.pending[0],
        &s.pending[1],
    ]
    .into_iter()
    .map(seq)
    .collect();

    // JSON lines: the whole event plus status, object and author; oldest first.
    let lines = json_lines(&dir, &db, &[]).await;
    let got: Vec<i64> = lines
        .iter()
        .map(|e| e["sequence"].as_i64().unwrap())
        .collect();
    assert_eq!(got, all);
    let first = &lines[0];
    assert_eq!(first["id"], s.old_published.id.to_string());
    assert_eq!(first["topic"], "doc.updated");
    assert_eq!(first["status"], "published");
    assert_eq!(first["object"], "sales_orders #22");
    assert_eq!(first["author"], "alice");
    assert_eq!(first["payload"]["pk"], 22);
    assert_eq!(lines[2]["status"], "dead");
    assert_eq!(lines[2]["attempts"], 5);
    assert_eq!(lines[2]["last_error"], "HTTP 500");
    assert_eq!(lines[4]["status"], "pending");
    assert_eq!(lines[4]["author"], Value::Null);

    // Each filter.
    assert_eq!(sequences(&dir, &db, &["--topic", "doc.*"]).await, all[..4]);
    assert_eq!(
        sequences(
            &dir,
            &db,
            &["--topic", "doc.created", "--topic", "stock.moved"]
        )
        .await,
        all[2..]
    );
    assert_eq!(sequences(&dir, &db, &["--status", "dead"]).await, all[2..4]);
    assert_eq!(
        sequences(&dir, &db, &["--status", "published", "--status", "pending"]).await,
        [all[0], all[1], all[4], all[5]]
    );
    assert_eq!(
        sequences(&dir, &db, &["--object", "sales_orders #22"]).await,
        [all[0]]
    );
    assert_eq!(
        sequences(&dir, &db, &["--object", "purchase_orders"]).await,
        all[2..4]
    );
    assert_eq!(
        sequences(&dir, &db, &["--author", "alice"]).await,
        [all[0], all[2]]
    );
    assert_eq!(
        sequences(&dir, &db, &["--since", "2d"]).await,
        [all[1], all[3], all[4], all[5]]
    );
    assert_eq!(
        sequences(&dir, &db, &["--until", "2d"]).await,
        [all[0], all[2]]
    );
    let since = (Utc::now() - chrono::Duration::days(2)).to_rfc3339();
    assert_eq!(sequences(&dir, &db, &["--since", &since]).await.len(), 4);
    assert_eq!(sequences(&dir, &db, &["--limit", "2"]).await, all[4..]);
    let before = all[2].to_string();
    assert_eq!(sequences(&dir, &db, &["--before", &before]).await, all[..2]);
    assert_eq!(
        sequences(
            &dir,
            &db,
            &["--topic", "doc.*", "--author", "bob", "--status", "dead"]
        )
        .await,
        [all[3]]
    );
    assert!(
        sequences(&dir, &db, &["--topic", "nothing"])
            .await
            .is_empty()
    );

    // The table: the journal's columns, one row per event.
    let (code, stdout, stderr) = cli(&dir, &db, &["events"]).await;
    assert_eq!(code, 0, "{stderr}");
    let mut rows = stdout.lines();
    let header = rows.next().unwrap();
    for column in [
        "№",
        "event",
        "object",
        "data",
        "created",
        "processed",
        "who",
        "status",
        "attempts",
    ] {
        assert!(header.contains(column), "{column} missing: {header}");
    }
    let rows: Vec<&str> = rows.collect();
    assert_eq!(rows.len(), 6, "{stdout}");
    assert!(
        rows[0].contains("doc.updated")
            && rows[0].contains("sales_orders #22")
            && rows[0].contains("alice")
            && rows[0].contains("published"),
        "{}",
        rows[0]
    );
    assert!(
        rows[2].contains("dead") && rows[2].trim_end().ends_with('5'),
        "{}",
        rows[2]
    );
    assert!(rows.iter().all(|r| console_width(r) <= 200), "{stdout}");
    let (code, stdout, _) = cli(
        &dir,
        &db,
        &["events", "--author", "bob", "--status", "dead"],
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(stdout.lines().count(), 2, "header and one row: {stdout}");
    db.close().await;
}

fn console_width(text: &str) -> usize {
    text.chars().count()
}

#[tokio::test]
async fn events_table_and_json_lines_with_each_filter_on_sqlite() {
    events_filters(Db::sqlite().await).await;
}

#[tokio::test]
async fn events_table_and_json_lines_with_each_filter_on_postgres() {
    events_filters(Db::pg().await).await;
}

async fn follow(db: Db) {
    let dir = TempDir::new("follow");
    db.seed().await;
    let mut proc = Proc::spawn(
        hare_outbox(dir.path())
            .args([
                "events",
                "--follow",
                "--json",
                "--interval",
                "0.1",
                "--topic",
                "stock.*",
            ])
            .args(["--database-url", &db.url()]),
    );
    proc.wait_for_stdout("the two pending events", TIMEOUT, |out| {
        out.lines().count() == 2
    })
    .await;
    // Another topic is not printed; the matching one written later is.
    db.enqueue(OutboxMessage::new("doc.updated", json!({"n": 1})))
        .await;
    let late = db
        .enqueue(OutboxMessage::new(
            "stock.moved",
            json!({"model": "stock", "pk": 9}),
        ))
        .await;
    proc.wait_for_stdout("the event written after the start", TIMEOUT, |out| {
        out.lines().count() >= 3
    })
    .await;
    proc.signal("TERM");
    let status = proc.wait(TIMEOUT).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", proc.stderr());
    let lines: Vec<Value> = proc
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{}", proc.stdout());
    assert_eq!(lines[2]["id"], late.id.to_string());
    assert_eq!(lines[2]["object"], "stock #9");
    db.close().await;
}

#[tokio::test]
async fn events_follow_prints_a_later_event_and_stops_on_sigterm_on_sqlite() {
    follow(Db::sqlite().await).await;
}

#[tokio::test]
async fn events_follow_prints_a_later_event_and_stops_on_sigterm_on_postgres() {
    follow(Db::pg().await).await;
}

#[tokio::test]
async fn events_follow_prints_an_event_whose_transaction_committed_late_on_postgres() {
    let db = Db::pg().await;
    let Db::Pg(schema) = &db else { unreachable!() };
    let dir = TempDir::new("follow-late");
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
    let mut proc = Proc::spawn(
        hare_outbox(dir.path())
            .args(["events", "--follow", "--json", "--interval", "0.1"])
            .args(["--database-url", &db.url()]),
    );
    // Transaction A takes the lower sequence but commits after B.
    let mut a = schema.pool.begin().await.unwrap();
    let early = outbox
        .enqueue(&mut a, OutboxMessage::new("doc.slow", json!({"n": 1})))
        .await
        .unwrap();
    let late = db
        .enqueue(OutboxMessage::new("doc.fast", json!({"n": 2})))
        .await;
    assert!(early.sequence < late.sequence);
    proc.wait_for_stdout("B's event", TIMEOUT, |out| out.contains("doc.fast"))
        .await;
    a.commit().await.unwrap();
    proc.wait_for_stdout("A's event, below the one shown", TIMEOUT, |out| {
        out.contains("doc.slow")
    })
    .await;
    // Later polls do not print either again.
    db.enqueue(OutboxMessage::new("doc.last", json!({"n": 3})))
        .await;
    proc.wait_for_stdout("the last event", TIMEOUT, |out| out.contains("doc.last"))
        .await;
    proc.signal("INT");
    let status = proc.wait(TIMEOUT).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", proc.stderr());
    let topics: Vec<String> = proc
        .stdout()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["topic"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(topics, ["doc.fast", "doc.slow", "doc.last"]);
    db.close().await;
}

async fn backlog(db: Db) {
    let dir = TempDir::new("backlog");
    db.seed().await;
    let (code, stdout, stderr) = cli(&dir, &db, &["backlog"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("2 pending") && stdout.contains("2 dead letters"),
        "{stdout}"
    );

    let (code, stdout, _) = cli(&dir, &db, &["backlog", "--json", "--max-pending", "2"]).await;
    assert_eq!(code, 0);
    let report: Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(report["pending"], 2);
    assert_eq!(report["dead_lettered"], 2);
    assert!(report["oldest_pending_age_seconds"].as_f64().unwrap() < 600.0);
    assert_eq!(report["passed"], json!([]));

    // Past a threshold: exit code 4, naming it.
    let (code, stdout, stderr) = cli(&dir, &db, &["backlog", "--max-pending", "1"]).await;
    assert_eq!(code, 4, "{stdout}{stderr}");
    assert!(stderr.contains("max_pending 1"), "{stderr}");
    assert!(
        stdout.contains("2 pending"),
        "the report is printed all the same: {stdout}"
    );
    let (code, _, stderr) = cli(&dir, &db, &["backlog", "--max-dead", "1"]).await;
    assert_eq!(code, 4, "{stderr}");
    assert!(stderr.contains("max_dead 1"), "{stderr}");
    let (code, _, _) = cli(
        &dir,
        &db,
        &["backlog", "--max-age", "1h", "--max-dead", "2"],
    )
    .await;
    assert_eq!(code, 0);
    // Only the topics asked about are counted.
    let (code, _, _) = cli(
        &dir,
        &db,
        &["backlog", "--max-dead", "0", "--topic", "stock.*"],
    )
    .await;
    assert_eq!(code, 0);

    // From the environment and the config file; the flag beats both.
    let (code, _, stderr) = run(
        hare_outbox(dir.path())
            .args(["backlog", "--database-url", &db.url()])
            .env("HARE_OUTBOX_BACKLOG_MAX_DEAD", "1"),
        TIMEOUT,
    )
    .await;
    assert_eq!(code, 4, "{stderr}");
    let config = dir.write("backlog.toml", "[backlog]\nmax_pending = 1\n");
    let config = config.to_str().unwrap();
    let (code, _, stderr) = cli(&dir, &db, &["backlog", "--config", config]).await;
    assert_eq!(code, 4, "{stderr}");
    let (code, _, stderr) = cli(
        &dir,
        &db,
        &["backlog", "--config", config, "--max-pending", "5"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    db.close().await;
}

#[tokio::test]
async fn backlog_exit_code_flips_past_a_threshold_on_sqlite() {
    backlog(Db::sqlite().await).await;
}

#[tokio::test]
async fn backlog_exit_code_flips_past_a_threshold_on_postgres() {
    backlog(Db::pg().await).await;
}

async fn retry(db: Db) {
    let dir = TempDir::new("retry");
    let s = db.seed().await;
    let dead = "dead_lettered_at IS NOT NULL";

    // Without a filter: refused, nothing changed.
    let (code, _, stderr) = cli(&dir, &db, &["dead-letters", "retry"]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--all") && stderr.contains("--topic"),
        "{stderr}"
    );
    assert_eq!(db.count(dead).await, 2);

    // By id.
    let id = s.old_dead.id.to_string();
    let (code, stdout, stderr) = cli(&dir, &db, &["dead-letters", "retry", "--id", &id]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("1 dead letter returned"), "{stdout}");
    assert_eq!(db.count(dead).await, 1);
    let retried = format!(
        "sequence = {} AND dead_lettered_at IS NULL AND attempts = 0",
        s.old_dead.sequence
    );
    assert_eq!(db.count(&retried).await, 1, "pending again, attempts reset");
    let lines = json_lines(&dir, &db, &["--status", "pending"]).await;
    assert!(lines.iter().any(|e| e["id"] == id.as_str()));

    // By topic: a topic without dead letters changes nothing, the right one does.
    let (code, stdout, _) = cli(
        &dir,
        &db,
        &["dead-letters", "retry", "--topic", "doc.updated"],
    )
    .await;
    assert_eq!(code, 0);
    assert!(stdout.contains("0 dead letters returned"), "{stdout}");
    assert_eq!(db.count(dead).await, 1);
    let (code, stdout, _) = cli(&dir, &db, &["dead-letters", "retry", "--topic", "doc.*"]).await;
    assert_eq!(code, 0);
    assert!(stdout.contains("1 dead letter returned"), "{stdout}");
    assert_eq!(db.count(dead).await, 0);
    let back = format!("sequence = {} AND attempts = 0", s.new_dead.sequence);
    assert_eq!(db.count(&back).await, 1);

    // A bad id or topic is refused before anything is done.
    let (code, _, stderr) = cli(&dir, &db, &["dead-letters", "retry", "--id", "nope"]).await;
    assert_eq!(code, 2);
    assert!(stderr.contains("nope"), "{stderr}");
    let (code, _, stderr) = cli(&dir, &db, &["dead-letters", "retry", "--topic", "a*b"]).await;
    assert_eq!(code, 2);
    assert!(stderr.contains("a*b"), "{stderr}");
    db.close().await;
}

#[tokio::test]
async fn dead_letters_retry_by_id_and_by_topic_on_sqlite() {
    retry(Db::sqlite().await).await;
}

#[tokio::test]
async fn dead_letters_retry_by_id_and_by_topic_on_postgres() {
    retry(Db::pg().await).await;
}

async fn cleanup(db: Db) {
    let dir = TempDir::new("cleanup");
    let s = db.seed().await;
    // More old published events, so batches of one take several statements.
    for n in 0..3 {
        let e = db
            .enqueue(OutboxMessage::new("audit.logged", json!({"n": n})))
            .await;
        let old = Utc::now() - chrono::Duration::days(30);
        db.set(e.sequence, old, Some(old), None, 0).await;
    }
    let (code, stdout, stderr) = cli(
        &dir,
        &db,
        &[
            "cleanup",
            "--older-than",
            "7d",
            "--topic",
            "doc.*",
            "--batch-size",
            "1",
        ],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("deleted 1 published events"), "{stdout}");
    assert_eq!(
        db.count(&format!("sequence = {}", s.old_published.sequence))
            .await,
        0
    );
    assert_eq!(
        db.count("topic = 'audit.logged'").await,
        3,
        "other topics stay"
    );

    let (code, stdout, stderr) = cli(
        &dir,
        &db,
        &["cleanup", "--older-than", "7d", "--batch-size", "2"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("deleted 3 published events"), "{stdout}");
    // What stays: the recent published event, both dead letters, the pending events.
    assert_eq!(db.count("1 = 1").await, 5);
    assert_eq!(
        db.count(&format!("sequence = {}", s.new_published.sequence))
            .await,
        1
    );

    // Dead letters by their own age; with the age from the config file.
    let config = dir.write(
        "cleanup.toml",
        "[cleanup]\ndead_lettered_older_than_days = 7\n",
    );
    let (code, stdout, stderr) = cli(
        &dir,
        &db,
        &[
            "dead-letters",
            "cleanup",
            "--config",
            config.to_str().unwrap(),
        ],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("deleted 1 dead letters"), "{stdout}");
    assert_eq!(
        db.count(&format!("sequence = {}", s.old_dead.sequence))
            .await,
        0
    );
    assert_eq!(
        db.count(&format!("sequence = {}", s.new_dead.sequence))
            .await,
        1
    );
    assert_eq!(
        db.count("published_at IS NULL AND dead_lettered_at IS NULL")
            .await,
        2
    );

    // No age anywhere: refused, nothing deleted.
    let (code, _, stderr) = cli(&dir, &db, &["cleanup"]).await;
    assert_eq!(code, 2);
    assert!(stderr.contains("--older-than"), "{stderr}");
    assert_eq!(db.count("1 = 1").await, 4);
    db.close().await;
}

#[tokio::test]
async fn cleanup_deletes_only_old_published_events_on_sqlite() {
    cleanup(Db::sqlite().await).await;
}

#[tokio::test]
async fn cleanup_deletes_only_old_published_events_on_postgres() {
    cleanup(Db::pg().await).await;
}

#[tokio::test]
async fn cleanup_stops_between_batches_on_sigterm_and_reports_what_it_deleted() {
    let db = Db::sqlite().await;
    let Db::Sqlite(test_db) = &db else {
        unreachable!()
    };
    // Many old published events, deleted one per statement so the run lasts.
    let old = sqlite_time(Utc::now() - chrono::Duration::days(30));
    sqlx::query(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000) \
         INSERT INTO hare_outbox (id, topic, payload, headers, created_at, attempts, published_at) \
         SELECT printf('00000000-0000-7000-8000-%012d', i), 'doc.updated', '{}', '{}', $1, 0, $1 FROM n",
    )
    .bind(&old)
    .execute(&test_db.pool)
    .await
    .unwrap();
    let dir = TempDir::new("cleanup-stop");
    let mut proc = Proc::spawn(
        hare_outbox(dir.path())
            .args(["cleanup", "--older-than", "7d", "--batch-size", "1"])
            .args(["--database-url", &db.url()]),
    );
    hare_outbox_testkit::wait_for("some rows deleted", TIMEOUT, || async {
        (db.count("1 = 1").await < 19_990).then_some(())
    })
    .await;
    proc.signal("TERM");
    let status = proc.wait(TIMEOUT).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", proc.stderr());
    let left = db.count("1 = 1").await;
    assert!(left > 0, "stopped before the end");
    let stdout = proc.stdout();
    assert!(stdout.contains("stopped by a signal"), "{stdout}");
    assert!(
        stdout.contains(&format!("deleted {} published events", 20_000 - left)),
        "the summary counts exactly the rows deleted ({} of 20000): {stdout}",
        20_000 - left
    );
    db.close().await;
}

#[tokio::test]
async fn bad_values_exit_2_naming_the_value_and_what_is_allowed() {
    let dir = TempDir::new("bad-values");
    // A database that does not exist: nothing may get as far as opening it.
    let url = format!("sqlite://{}/missing/db.sqlite", dir.path().display());
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["events", "--status", "nope"],
            &["nope", "pending", "published"],
        ),
        (&["events", "--limit", "0"], &["0", "1..=1000"]),
        (&["events", "--limit", "1001"], &["1001", "1..=1000"]),
        (
            &["events", "--since", "yesterday"],
            &["yesterday", "RFC 3339", "15m"],
        ),
        (&["events", "--object", " #22"], &["#22", "model"]),
        (&["events", "--topic", "a*b"], &["a*b"]),
        (
            &["events", "--follow", "--before", "3"],
            &["--before", "--follow"],
        ),
        (&["events", "--interval", "2s"], &["--interval", "--follow"]),
        (&["events", "--author", ""], &["--author"]),
        (&["cleanup", "--older-than", "x"], &["\"x\"", "7d"]),
        (
            &["cleanup", "--older-than", "7d", "--batch-size", "0"],
            &["0", "1..=100000"],
        ),
        (
            &["dead-letters", "cleanup", "--older-than", "soon"],
            &["soon", "7d"],
        ),
        (
            &["dead-letters", "retry", "--all", "--topic", "a"],
            &["--all", "--topic"],
        ),
        (&["backlog", "--max-age", "later"], &["later", "15m"]),
        (&["backlog", "--max-pending", "-1"], &["-1"]),
        (
            &["serve", "--http", "0.0.0.0:8080"],
            &["0.0.0.0:8080", "--allow-remote"],
        ),
        (
            &["relay", "--http", "10.1.2.3:80"],
            &["10.1.2.3:80", "--allow-remote"],
        ),
    ];
    for (args, needles) in cases {
        let (code, stdout, stderr) = run(
            hare_outbox(dir.path())
                .args(*args)
                .args(["--database-url", &url]),
            TIMEOUT,
        )
        .await;
        assert_eq!(code, 2, "{args:?}\nstdout:\n{stdout}\nstderr:\n{stderr}");
        for needle in *needles {
            assert!(
                stderr.contains(needle),
                "{args:?}: {needle:?} missing from:\n{stderr}"
            );
        }
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
    }
    assert!(!dir.path().join("missing").exists());
}
