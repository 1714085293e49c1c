//! `events --id/--seq` (one event in full) and `keys --held` on the real binary, on SQLite and
//! on PostgreSQL: the text and JSON forms, pages of keys, and the exit codes of a missing event
//! and of a bad option.

use std::time::Duration;

use hare_outbox::postgres::PgBackend;
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{Outbox, OutboxEvent, OutboxMessage, OutboxTable};
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::{Value, json};

use crate::support::{TempDir, hare_outbox, run};

const TIMEOUT: Duration = Duration::from_secs(60);

enum Db {
    Sqlite(TestDb),
    Pg(TestSchema),
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
        macro_rules! on {
            ($pool:expr, $backend:expr) => {{
                let outbox = Outbox::new($backend, OutboxTable::default());
                let mut tx = $pool.begin().await.unwrap();
                let event = outbox.enqueue(&mut tx, message).await.unwrap();
                tx.commit().await.unwrap();
                event
            }};
        }
        match self {
            Db::Sqlite(db) => on!(db.pool, SqliteBackend::new(db.pool.clone())),
            Db::Pg(schema) => on!(schema.pool, PgBackend::new(schema.pool.clone())),
        }
    }

    /// Dead-letters event `sequence` with `error` after 5 attempts.
    async fn dead(&self, sequence: i64, error: &str) {
        let (now, sql) = match self {
            Db::Sqlite(_) => (
                "strftime('%Y-%m-%dT%H:%M:%f', 'now') || '000Z'",
                "UPDATE hare_outbox SET attempts = 5, last_error = $1, dead_lettered_at = {now} WHERE sequence = $2",
            ),
            Db::Pg(_) => (
                "now()",
                "UPDATE hare_outbox SET attempts = 5, last_error = $1, dead_lettered_at = {now} WHERE sequence = $2",
            ),
        };
        let sql = sqlx::AssertSqlSafe(sql.replace("{now}", now));
        match self {
            Db::Sqlite(db) => {
                sqlx::query(sql)
                    .bind(error)
                    .bind(sequence)
                    .execute(&db.pool)
                    .await
                    .unwrap();
            }
            Db::Pg(schema) => {
                sqlx::query(sql)
                    .bind(error)
                    .bind(sequence)
                    .execute(&schema.pool)
                    .await
                    .unwrap();
            }
        }
    }

    async fn close(self) {
        match self {
            Db::Sqlite(db) => db.close().await,
            Db::Pg(schema) => schema.drop_schema().await,
        }
    }
}

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

async fn one_event_and_held_keys(db: Db) {
    let dir = TempDir::new("views");
    let envelope = |pk: i64| {
        json!({"model": "prod_order", "table": "plan_prod_orders", "pk": pk, "changed": ["status"],
               "before": {"status": "confirmed"}, "after": {"status": "launched"}})
    };
    let first = db
        .enqueue(
            OutboxMessage::new("doc.updated", envelope(18))
                .ordering_key("prod_order:18")
                .header("author", "Администратор"),
        )
        .await;
    let second = db
        .enqueue(OutboxMessage::new("doc.updated", envelope(18)).ordering_key("prod_order:18"))
        .await;
    let other = db
        .enqueue(OutboxMessage::new("doc.updated", envelope(19)).ordering_key("prod_order:19"))
        .await;
    db.dead(first.sequence, "HTTP 500 from https://erp.example/hook")
        .await;
    db.dead(other.sequence, "timeout").await;

    // One event by sequence, in full.
    let seq = second.sequence.to_string();
    let (code, out, err) = cli(&dir, &db, &["events", "--seq", &seq]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("№ {seq} · doc.updated · pending\n")),
        "{out}"
    );
    assert!(
        out.contains("\nobject         plan_prod_orders #18\n"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "\nordering key   prod_order:18 (previous № {}, next -)\n",
            first.sequence
        )),
        "{out}"
    );
    assert!(
        out.contains("\nchanges        status: \"confirmed\" → \"launched\"\n"),
        "{out}"
    );
    assert!(out.contains("\npayload        {\n"), "{out}");
    // By id, as JSON, with the neighbours.
    let id = first.id.to_string();
    let (code, out, err) = cli(&dir, &db, &["events", "--id", &id, "--json"]).await;
    assert_eq!(code, 0, "{err}");
    let event: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(event["sequence"], first.sequence);
    assert_eq!(event["status"], "dead");
    assert_eq!(event["object"], "plan_prod_orders #18");
    assert_eq!(event["author"], "Администратор");
    assert_eq!(
        event["neighbours"],
        json!({"previous": null, "next": second.sequence})
    );
    // A missing event is a failure at run time; a bad option a usage error.
    let (code, _, err) = cli(&dir, &db, &["events", "--seq", "424242"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("no event of hare_outbox has sequence 424242"),
        "{err}"
    );
    let (code, _, err) = cli(&dir, &db, &["events", "--seq", "1", "--topic", "x"]).await;
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = cli(&dir, &db, &["events", "--id", "not-a-uuid"]).await;
    assert_eq!(code, 2, "{err}");

    // Held keys: both keys, the blocking event, the events waiting behind it.
    let (code, out, err) = cli(&dir, &db, &["keys", "--held"]).await;
    assert_eq!(code, 0, "{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("key"), "{out}");
    assert!(lines[1].starts_with("prod_order:18"), "{out}");
    assert!(lines[1].contains(" dead "), "{out}");
    assert!(lines[1].contains("HTTP 500"), "{out}");
    assert!(lines[2].starts_with("prod_order:19"), "{out}");
    assert_eq!(
        lines[3],
        "hare_outbox: 2 held keys (2 keys with undelivered events looked at); no more keys"
    );
    // One per page, then the next.
    let (_, out, _) = cli(&dir, &db, &["keys", "--held", "--limit", "1", "--json"]).await;
    let page: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(page["keys"][0]["ordering_key"], "prod_order:18");
    assert_eq!(page["keys"][0]["waiting"], 2);
    assert_eq!(page["keys"][0]["head"]["sequence"], first.sequence);
    assert_eq!(page["next_after"], "prod_order:18");
    let (_, out, _) = cli(
        &dir,
        &db,
        &["keys", "--held", "--after", "prod_order:18", "--json"],
    )
    .await;
    let page: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(page["keys"][0]["ordering_key"], "prod_order:19");
    assert_eq!(page["next_after"], Value::Null);
    // Without --held, or with a bad limit: usage errors, nothing read.
    let (code, _, err) = cli(&dir, &db, &["keys"]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--held"), "{err}");
    let (code, _, err) = cli(&dir, &db, &["keys", "--held", "--limit", "0"]).await;
    assert_eq!(code, 2, "{err}");
    let long = "k".repeat(256);
    let (code, _, err) = cli(&dir, &db, &["keys", "--held", "--after", &long]).await;
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("256 characters"), "{err}");
    db.close().await;
}

#[tokio::test]
async fn one_event_and_held_keys_on_sqlite() {
    one_event_and_held_keys(Db::sqlite().await).await;
}

#[tokio::test]
async fn one_event_and_held_keys_on_postgres() {
    one_event_and_held_keys(Db::pg().await).await;
}
