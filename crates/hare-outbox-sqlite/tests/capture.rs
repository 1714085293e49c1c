//! Change capture by triggers on real SQLite files, beyond the shared suite
//! (`hare_outbox_testkit::conformance::{capture, capture_writes}`): the JSON form of each storage
//! class and declared type, the stored form of trigger-written rows, NOTIFY refused, trigger
//! counts and SQLite's own refusals.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::capture::{ChangeCapture, ChangePayload, RowOperation};
use hare_outbox_core::{Error, Outbox, OutboxTable};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::conformance::capture::events;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, SqlitePool};

struct Db {
    db: TestDb,
    outbox: Outbox<SqliteBackend>,
}

impl Db {
    async fn new(ddl: &str) -> Db {
        let db = TestDb::new(4).await;
        let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), OutboxTable::default());
        outbox.migrate().await.unwrap();
        let db = Db { db, outbox };
        db.exec(ddl).await;
        db
    }

    fn pool(&self) -> &SqlitePool {
        &self.db.pool
    }

    async fn exec(&self, sql: &str) {
        sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
            .execute(self.pool())
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// The payloads of every event (as the suite reads them), after checking the triggers
    /// stored each id as UUID text and each time in the fixed 27-character UTC form.
    async fn payloads(&self) -> Vec<Value> {
        let events = events(&self.outbox).await;
        let stored: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM hare_outbox WHERE length(id) = 36 AND typeof(id) = 'text' \
             AND length(created_at) = 27 AND created_at LIKE '%Z'",
        )
        .fetch_one(self.pool())
        .await
        .unwrap();
        assert_eq!(stored, events.len() as i64, "the stored forms");
        events.into_iter().map(|e| e.payload).collect()
    }

    async fn triggers(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'")
            .fetch_one(self.pool())
            .await
            .unwrap()
    }
}

const LOANS: &str = "CREATE TABLE loans (
    id INTEGER PRIMARY KEY,
    status TEXT NOT NULL,
    fee DECIMAL(10,2) NOT NULL DEFAULT 0,
    reader_id INTEGER,
    note TEXT
)";

/// Creates `t (id INTEGER PRIMARY KEY, v <declared>)`, captures it, inserts each literal and
/// returns each `after.v`.
async fn forms(declared: &str, literals: &[&str]) -> Vec<Value> {
    let db = Db::new(&format!(
        "CREATE TABLE t (id INTEGER PRIMARY KEY, v {declared})"
    ))
    .await;
    ChangeCapture::new("t").install(&db.outbox).await.unwrap();
    for (i, literal) in literals.iter().enumerate() {
        db.exec(&format!("INSERT INTO t VALUES ({i}, {literal})"))
            .await;
    }
    db.payloads()
        .await
        .into_iter()
        .map(|p| p["after"]["v"].clone())
        .collect()
}

#[tokio::test]
async fn integer_storage_is_a_number() {
    assert_eq!(
        forms("INTEGER", &["9223372036854775807", "-1", "NULL"]).await,
        vec![json!(9223372036854775807_i64), json!(-1), json!(null)]
    );
}

#[tokio::test]
async fn real_storage_is_a_number_and_infinity_is_text() {
    assert_eq!(
        forms("REAL", &["1.5", "0.1", "9e999", "-9e999", "0.0/0"]).await,
        vec![
            json!(1.5),
            json!(0.1),
            json!("Infinity"),
            json!("-Infinity"),
            json!(null)
        ]
    );
}

#[tokio::test]
async fn text_storage_is_a_string() {
    assert_eq!(
        forms(
            "TEXT",
            &["'Ромашка \"ООО\" it''s'", "'2026-11-13 17:20:00'", "''"]
        )
        .await,
        vec![
            json!("Ромашка \"ООО\" it's"),
            json!("2026-11-13 17:20:00"),
            json!("")
        ]
    );
}

#[tokio::test]
async fn blob_storage_is_base64() {
    let long = format!("x'{}'", "ff".repeat(100));
    assert_eq!(
        forms("BLOB", &["x'48617265'", "x'4861'", "x'48'", "x''", &long]).await,
        vec![
            json!("SGFyZQ=="),
            json!("SGE="),
            json!("SA=="),
            json!(""),
            json!("/".repeat(132) + "/w==")
        ]
    );
}

#[tokio::test]
async fn untyped_columns_follow_their_storage_class() {
    assert_eq!(
        forms("", &["1", "'1'", "1.25", "x'00'"]).await,
        vec![json!(1), json!("1"), json!(1.25), json!("AA==")]
    );
}

#[tokio::test]
async fn declared_decimal_is_exact_text() {
    assert_eq!(
        forms("DECIMAL(10,2)", &["12.5", "3", "'1200.00'", "NULL"]).await,
        vec![json!("12.50"), json!("3.00"), json!("1200.00"), json!(null)]
    );
    assert_eq!(
        forms("NUMERIC", &["12.5", "3"]).await,
        vec![json!("12.5"), json!("3")]
    );
}

#[tokio::test]
async fn declared_boolean_is_true_or_false() {
    assert_eq!(
        forms("BOOLEAN", &["1", "0", "TRUE", "NULL"]).await,
        vec![json!(true), json!(false), json!(true), json!(null)]
    );
}

#[tokio::test]
async fn declared_json_is_as_is() {
    assert_eq!(
        forms(
            "JSON",
            &["'{\"a\": [1, \"x\", null]}'", "'not json'", "'12.50'"]
        )
        .await,
        vec![
            json!({"a": [1, "x", null]}),
            json!("not json"),
            json!(12.50)
        ]
    );
}

#[tokio::test]
async fn declared_uuid_is_its_text() {
    assert_eq!(
        forms(
            "UUID",
            &[
                "x'0190B5C67E1D7A2B8C3D4E5F60718293'",
                "'0190b5c6-7e1d-7a2b-8c3d-4e5f60718293'"
            ]
        )
        .await,
        vec![
            json!("0190b5c6-7e1d-7a2b-8c3d-4e5f60718293"),
            json!("0190b5c6-7e1d-7a2b-8c3d-4e5f60718293")
        ]
    );
}

#[tokio::test]
async fn declared_dates_and_times_stay_as_written() {
    assert_eq!(
        forms("DATETIME", &["'2026-11-13T17:20:00+00:00'", "'2026-11-13'"]).await,
        vec![json!("2026-11-13T17:20:00+00:00"), json!("2026-11-13")]
    );
}

#[tokio::test]
async fn notify_is_refused_on_sqlite() {
    let db = Db::new("CREATE TABLE items (id INTEGER PRIMARY KEY, qty INTEGER)").await;
    let e = ChangeCapture::new("items")
        .with_notify(Some("hare_outbox"))
        .install(&db.outbox)
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Configuration(_)), "{e}");
    assert!(
        e.to_string().contains("notify") && e.to_string().contains("SQLite"),
        "{e}"
    );
    assert_eq!(db.triggers().await, 0, "nothing installed");
}

#[tokio::test]
async fn one_trigger_per_operation_sqlite_type_names_and_no_other_database() {
    let db = Db::new(LOANS).await;
    let capture = ChangeCapture::new("loans").with_payload(ChangePayload::Keys);
    capture.install(&db.outbox).await.unwrap();
    capture.install(&db.outbox).await.unwrap();
    assert_eq!(db.triggers().await, 3);
    let status = capture.status(&db.outbox).await.unwrap().unwrap();
    assert_eq!(status.columns[2].type_name, "DECIMAL(10,2)");
    // SQLite itself refuses to drop a column a trigger reads.
    assert!(
        sqlx::query("ALTER TABLE loans DROP COLUMN note")
            .execute(db.pool())
            .await
            .is_err()
    );
    capture
        .clone()
        .with_operations([RowOperation::Delete])
        .install(&db.outbox)
        .await
        .unwrap();
    assert_eq!(db.triggers().await, 1);
    let e = ChangeCapture::new("loans")
        .with_schema("other")
        .install(&db.outbox)
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("SQLite triggers can only write to their own database"),
        "{e}"
    );
}
