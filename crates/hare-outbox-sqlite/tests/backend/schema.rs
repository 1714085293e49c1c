//! The DDL: columns, indexes, idempotence, attached schemas. (Concurrent migrations from two
//! pools: `tests/migrations.rs`; sequences never reused: the shared suite.)

use hare_outbox_testkit::sqlite::TestDb;
use sqlx::AssertSqlSafe;
use sqlx::sqlite::SqlitePoolOptions;

use crate::common::{COLUMNS, count, enqueue, message, outbox_on, setup};

const INDEXES: [&str; 5] = [
    "hare_outbox_dead_idx",
    "hare_outbox_pending_idx",
    "hare_outbox_pending_key_idx",
    "hare_outbox_published_idx",
    "hare_outbox_topic_idx",
];

#[tokio::test]
async fn migrate_twice_is_fine_and_the_schema_has_every_column_and_index() {
    let (db, outbox) = setup("hare_outbox").await;
    let event = enqueue(&outbox, message("t", None, 1)).await;
    outbox.migrate().await.expect("second migrate");
    outbox.migrate().await.expect("third migrate");
    assert_eq!(
        count(&db.pool, "hare_outbox").await,
        1,
        "migrate keeps the rows"
    );
    assert_eq!(event.sequence, 1);

    let sql = outbox.schema_sql();
    for definition in [
        "sequence INTEGER PRIMARY KEY AUTOINCREMENT",
        "id TEXT NOT NULL UNIQUE",
        "topic TEXT NOT NULL",
        "payload TEXT NOT NULL",
        "headers TEXT NOT NULL DEFAULT '{}'",
        "ordering_key TEXT",
        "idempotency_key TEXT UNIQUE",
        "created_at TEXT NOT NULL",
        "attempts INTEGER NOT NULL DEFAULT 0",
        "last_error TEXT",
        "next_attempt_at TEXT",
        "lease_until TEXT",
        "leased_by TEXT",
        "published_at TEXT",
        "dead_lettered_at TEXT",
    ] {
        assert!(
            sql.contains(definition),
            "{definition:?} missing from:\n{sql}"
        );
    }
    for index in INDEXES {
        assert!(
            sql.contains(&format!("CREATE INDEX IF NOT EXISTS \"{index}\"")),
            "{index} missing from:\n{sql}"
        );
    }

    let columns: Vec<String> =
        sqlx::query_scalar("SELECT name FROM pragma_table_info('hare_outbox') ORDER BY cid")
            .fetch_all(&db.pool)
            .await
            .expect("table info");
    assert_eq!(columns, COLUMNS);

    let indexes: Vec<(String, String)> = sqlx::query_as(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'hare_outbox' \
         AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name",
    )
    .fetch_all(&db.pool)
    .await
    .expect("indexes");
    let names: Vec<&str> = indexes.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, INDEXES);
    let sql_of = |name: &str| {
        indexes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, sql)| sql.clone())
            .unwrap_or_default()
    };
    let pending_key = sql_of("hare_outbox_pending_key_idx");
    assert!(
        pending_key.contains("(ordering_key, sequence)"),
        "{pending_key}"
    );
    assert!(
        pending_key.contains("WHERE published_at IS NULL")
            && !pending_key.contains("dead_lettered_at"),
        "dead-lettered rows stay in the ordering index: {pending_key}"
    );
    let pending = sql_of("hare_outbox_pending_idx");
    assert!(
        pending.contains("WHERE published_at IS NULL AND dead_lettered_at IS NULL"),
        "{pending}"
    );
}

#[tokio::test]
async fn a_schema_qualified_table_lives_in_the_attached_database() {
    let db = TestDb::new(1).await;
    let attach = format!(
        "ATTACH DATABASE '{}' AS billing",
        db.dir().join("billing.sqlite").display()
    );
    let pool = SqlitePoolOptions::new()
        .max_connections(3)
        .after_connect(move |conn, _| {
            let attach = attach.clone();
            Box::pin(async move {
                sqlx::query(AssertSqlSafe(attach)).execute(conn).await?;
                Ok(())
            })
        })
        .connect_with(db.connect_options())
        .await
        .expect("pool with attached database");
    let outbox = outbox_on(&pool, "billing.events").await;
    outbox.migrate().await.expect("second migrate");

    let sql = outbox.schema_sql();
    assert!(
        sql.contains("CREATE TABLE IF NOT EXISTS \"billing\".\"events\" ("),
        "{sql}"
    );
    assert!(
        sql.contains("CREATE INDEX IF NOT EXISTS \"billing\".\"events_pending_idx\"\n    ON \"events\" (sequence)"),
        "{sql}"
    );

    let event = enqueue(&outbox, message("invoice.paid", Some("invoice:1"), 1)).await;
    assert_eq!(outbox.get(event.id).await.expect("get"), Some(event));
    let in_billing: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM billing.sqlite_master WHERE tbl_name = 'events' AND type = 'index' \
         AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name",
    )
    .fetch_all(&pool)
    .await
    .expect("billing indexes");
    assert_eq!(
        in_billing,
        [
            "events_dead_idx",
            "events_pending_idx",
            "events_pending_key_idx",
            "events_published_idx",
            "events_topic_idx"
        ]
    );
    let in_main: i64 =
        sqlx::query_scalar("SELECT count(*) FROM main.sqlite_master WHERE tbl_name = 'events'")
            .fetch_one(&pool)
            .await
            .expect("main tables");
    assert_eq!(in_main, 0);
}
