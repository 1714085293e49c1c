//! MySQL-specific change capture: what a cascading foreign-key action does and does not capture
//! (MySQL and MariaDB fire no triggers for it), the JSON form of each column type, and a context
//! that ends with its transaction on the same connection.

// The helpers fail their test by panicking.
#![allow(clippy::unwrap_used)]

use hare_outbox_core::capture::{ChangeCapture, ChangePayload, RowOperation};
use hare_outbox_core::{Error, Outbox, OutboxTable};
use hare_outbox_mysql::MySqlBackend;
use hare_outbox_testkit::conformance::capture::events;
use hare_outbox_testkit::mysql::TestDatabase;
use serde_json::{Value, json};
use sqlx::{Executor, MySqlPool};

async fn outbox(pool: &MySqlPool, ddl: &str) -> Outbox<MySqlBackend> {
    let outbox = Outbox::new(MySqlBackend::new(pool.clone()), OutboxTable::default());
    outbox.migrate().await.unwrap();
    pool.execute(sqlx::raw_sql(sqlx::AssertSqlSafe(ddl.to_owned())))
        .await
        .unwrap();
    outbox
}

async fn exec(pool: &MySqlPool, sql: &'static str) {
    pool.execute(sqlx::raw_sql(sql)).await.unwrap();
}

/// Deleting a parent row captures the parent's delete; the child rows its `ON DELETE CASCADE`
/// deletes and the reference its `ON DELETE SET NULL` clears are not captured (no trigger
/// fires for them), while the same changes made by statements of their own are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascaded_changes_are_not_captured_but_the_statements_changes_are() {
    let db = TestDatabase::new(4).await;
    let outbox = outbox(
        &db.pool,
        "CREATE TABLE readers (id INTEGER PRIMARY KEY, name TEXT);
         CREATE TABLE cards (id INTEGER PRIMARY KEY, reader_id INTEGER,
             FOREIGN KEY (reader_id) REFERENCES readers (id) ON DELETE CASCADE);
         CREATE TABLE notes (id INTEGER PRIMARY KEY, reader_id INTEGER,
             FOREIGN KEY (reader_id) REFERENCES readers (id) ON DELETE SET NULL);
         INSERT INTO readers VALUES (1, 'ann'), (2, 'bob');
         INSERT INTO cards VALUES (10, 1), (11, 1), (12, 2);
         INSERT INTO notes VALUES (20, 1), (21, 2);",
    )
    .await;
    for table in ["readers", "cards", "notes"] {
        ChangeCapture::new(table)
            .with_payload(ChangePayload::Keys)
            .with_operations([RowOperation::Update, RowOperation::Delete])
            .install(&outbox)
            .await
            .unwrap();
    }
    // The database's cascade: only the parent's delete is captured.
    exec(&db.pool, "DELETE FROM readers WHERE id = 1").await;
    assert_eq!(
        db_scalar(&db.pool, "SELECT count(*) FROM cards WHERE reader_id = 1").await,
        0,
        "the cascade ran"
    );
    assert_eq!(
        db_scalar(
            &db.pool,
            "SELECT count(*) FROM notes WHERE reader_id IS NULL"
        )
        .await,
        1,
        "SET NULL ran"
    );
    let got: Vec<(String, Value)> = events(&outbox)
        .await
        .into_iter()
        .map(|e| (e.topic, e.payload["pk"].clone()))
        .collect();
    assert_eq!(got, vec![("readers.deleted".to_owned(), json!(1))]);

    // The same changes written by the application first: every row is captured.
    exec(
        &db.pool,
        "DELETE FROM cards WHERE reader_id = 2;
         UPDATE notes SET reader_id = NULL WHERE reader_id = 2;
         DELETE FROM readers WHERE id = 2;",
    )
    .await;
    let got: Vec<(String, Value)> = events(&outbox)
        .await
        .into_iter()
        .skip(1)
        .map(|e| (e.topic, e.payload["pk"].clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("cards.deleted".to_owned(), json!(12)),
            ("notes.updated".to_owned(), json!(21)),
            ("readers.deleted".to_owned(), json!(2)),
        ]
    );
    db.drop_database().await;
}

async fn db_scalar(pool: &MySqlPool, sql: &'static str) -> i64 {
    sqlx::query_scalar(sql).fetch_one(pool).await.unwrap()
}

/// Each column type's JSON form: exact decimals as text, times as ISO 8601, bytes as base64,
/// JSON as is, bits as text, enums and sets as text, floats as numbers, NULL as null.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_column_type_has_its_json_form() {
    let db = TestDatabase::new(4).await;
    let outbox = outbox(
        &db.pool,
        "SET time_zone = '+03:00';
         CREATE TABLE kinds (
             id BIGINT PRIMARY KEY, small TINYINT, price DECIMAL(12,3), ratio DOUBLE, f FLOAT,
             at DATETIME(6), at0 DATETIME, stamp TIMESTAMP(3) NULL, day DATE, clock TIME, yr YEAR,
             bytes VARBINARY(16), blob_ BLOB, doc JSON, flags BIT(5), colour ENUM('red', 'green'),
             tags SET('a', 'b', 'c'), label VARCHAR(20), nothing TEXT)",
    )
    .await;
    ChangeCapture::new("kinds").install(&outbox).await.unwrap();
    // The session's time zone moves TIMESTAMP values, not their captured UTC form.
    let mut conn = db.pool.acquire().await.unwrap();
    conn.execute(sqlx::raw_sql(
        "SET time_zone = '+03:00';
         INSERT INTO kinds VALUES (1, -5, 1234.5, 0.25, 1.5, '2026-11-13 17:20:00.123400',
             '2026-11-13 17:20:00', '2026-11-13 20:20:00.500', '2026-12-01', '08:30:00', 2026,
             X'00FF10', X'68656C6C6F', '{\"a\": [1, {\"b\": null}], \"c\": \"x\"}', b'00101',
             'green', 'a,c', 'ключ', NULL)",
    ))
    .await
    .unwrap();
    drop(conn);
    let after = events(&outbox).await[0].payload["after"].clone();
    assert_eq!(
        after,
        json!({
            "id": 1, "small": -5, "price": "1234.500", "ratio": 0.25, "f": 1.5,
            "at": "2026-11-13T17:20:00.1234", "at0": "2026-11-13T17:20:00",
            "stamp": "2026-11-13T17:20:00.5+00:00", "day": "2026-12-01", "clock": "08:30:00",
            "yr": "2026", "bytes": "AP8Q", "blob_": "aGVsbG8=",
            "doc": {"a": [1, {"b": null}], "c": "x"}, "flags": "00101", "colour": "green",
            "tags": "a,c", "label": "ключ", "nothing": null
        })
    );
    db.drop_database().await;
}

/// A context committed with its transaction is not carried by the next transaction on the same
/// connection, nor by a statement outside any transaction; a rolled-back one is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_ends_with_its_transaction_on_the_same_connection() {
    let db = TestDatabase::new(3).await;
    let outbox = outbox(
        &db.pool,
        "CREATE TABLE t (id INTEGER PRIMARY KEY, v INTEGER)",
    )
    .await;
    ChangeCapture::new("t")
        .with_payload(ChangePayload::Keys)
        .install(&outbox)
        .await
        .unwrap();
    let mut conn = db.pool.acquire().await.unwrap();
    let mut tx = sqlx::Acquire::begin(&mut *conn).await.unwrap();
    outbox
        .set_context(&mut *tx, json!({"author": "ann"}))
        .await
        .unwrap();
    tx.execute("INSERT INTO t VALUES (1, 1)").await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = sqlx::Acquire::begin(&mut *conn).await.unwrap();
    tx.execute("INSERT INTO t VALUES (2, 1)").await.unwrap();
    tx.commit().await.unwrap();
    conn.execute("INSERT INTO t VALUES (3, 1)").await.unwrap();
    let mut tx = sqlx::Acquire::begin(&mut *conn).await.unwrap();
    outbox
        .set_context(&mut *tx, json!({"author": "bob"}))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    conn.execute("INSERT INTO t VALUES (4, 1)").await.unwrap();
    // Every write above ran on this one connection.
    let headers: Vec<Value> = events(&outbox)
        .await
        .into_iter()
        .map(|e| e.headers)
        .collect();
    assert_eq!(
        headers,
        vec![json!({"author": "ann"}), json!({}), json!({}), json!({})]
    );
    // The first captured row after the commit found ann's context stale and deleted it.
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM hare_outbox_context")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
    drop(conn);
    db.drop_database().await;
}

/// Setting a context before any capture is installed into the outbox is a configuration error
/// (creating the context table inside the caller's transaction would commit it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_needs_an_installed_capture() {
    let db = TestDatabase::new(2).await;
    let outbox = outbox(&db.pool, "SELECT 1").await;
    let mut tx = db.pool.begin().await.unwrap();
    let error = outbox
        .set_context(&mut *tx, json!({"author": "ann"}))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Configuration { .. }), "{error}");
    drop(tx);
    db.drop_database().await;
}

/// Installing a capture again while a writer inserts rows: on MariaDB every row still writes
/// exactly one event (the triggers are replaced in one statement each).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reinstalling_under_writes_loses_no_event_on_mariadb() {
    let db = TestDatabase::new(4).await;
    let version: String = sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let outbox = outbox(&db.pool, "CREATE TABLE t (id INTEGER PRIMARY KEY)").await;
    let capture = ChangeCapture::new("t").with_payload(ChangePayload::Keys);
    capture.install(&outbox).await.unwrap();
    let pool = db.pool.clone();
    let writer = tokio::spawn(async move {
        for id in 0..300 {
            sqlx::query("INSERT INTO t VALUES (?)")
                .bind(id)
                .execute(&pool)
                .await
                .unwrap();
        }
    });
    let mut installs = 0;
    while !writer.is_finished() {
        capture
            .clone()
            .with_label(format!("v{installs}"))
            .install(&outbox)
            .await
            .unwrap();
        installs += 1;
    }
    writer.await.unwrap();
    assert!(installs > 1, "the writer outran every install");
    let written = events(&outbox).await.len();
    if version.contains("MariaDB") {
        assert_eq!(written, 300, "after {installs} installs");
    } else {
        assert!(written <= 300);
    }
    db.drop_database().await;
}
