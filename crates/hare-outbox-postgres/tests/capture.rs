//! Change capture by triggers on a real PostgreSQL server, beyond the shared suite
//! (`hare_outbox_testkit::conformance::{capture, capture_writes}`): drift of column types and
//! disabled triggers, captures in other schemas, one trigger per capture and PostgreSQL's type
//! names.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::capture::{CaptureDrift, ChangeCapture, ChangePayload};
use hare_outbox_core::{Outbox, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::conformance::capture::events;
use hare_outbox_testkit::pg::TestSchema;
use sqlx::AssertSqlSafe;

struct Db {
    schema: TestSchema,
    outbox: Outbox<PgBackend>,
}

impl Db {
    async fn new(ddl: &str) -> Db {
        let schema = TestSchema::new(4).await;
        let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
        outbox.migrate().await.unwrap();
        let db = Db { schema, outbox };
        db.exec(ddl).await;
        db
    }

    async fn exec(&self, sql: &str) {
        if sql.is_empty() {
            return;
        }
        sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
            .execute(&self.schema.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    async fn drop(self) {
        self.schema.drop_schema().await;
    }
}

/// The loans of the library example, in PostgreSQL's types.
const LOANS: &str = "CREATE TABLE loans (
    id int PRIMARY KEY,
    status text NOT NULL,
    fee numeric(10,2) NOT NULL DEFAULT 0,
    reader_id int,
    note text
)";

#[tokio::test]
async fn status_reports_drift() {
    let db = Db::new(&format!(
        "{LOANS}; CREATE TABLE other (id int PRIMARY KEY);"
    ))
    .await;
    ChangeCapture::new("loans")
        .install(&db.outbox)
        .await
        .unwrap();
    ChangeCapture::new("other")
        .install(&db.outbox)
        .await
        .unwrap();
    let all = db.outbox.capture_status().await.unwrap();
    assert_eq!(
        all.iter().map(|s| s.table.as_str()).collect::<Vec<_>>(),
        vec!["loans", "other"]
    );
    assert!(all.iter().all(|s| s.is_current()));
    assert_eq!(all[0].columns.len(), 5);
    assert_eq!(all[0].columns[2].type_name, "numeric(10,2)");

    db.exec(
        "ALTER TABLE loans ADD COLUMN due date;
         ALTER TABLE loans DROP COLUMN note;
         ALTER TABLE loans ALTER COLUMN reader_id TYPE bigint;
         ALTER TABLE other DISABLE TRIGGER ALL;",
    )
    .await;
    let all = db.outbox.capture_status().await.unwrap();
    assert_eq!(
        all[0].drift,
        vec![
            CaptureDrift::ColumnTypeChanged {
                column: "reader_id".into(),
                installed: "integer".into(),
                current: "bigint".into()
            },
            CaptureDrift::ColumnDropped {
                column: "note".into()
            },
            CaptureDrift::ColumnAdded {
                column: "due".into()
            },
        ]
    );
    assert_eq!(all[1].drift, vec![CaptureDrift::TriggerDisabled]);
    // Installing again brings it up to date.
    ChangeCapture::new("loans")
        .install(&db.outbox)
        .await
        .unwrap();
    db.exec("DROP TABLE other").await;
    let all = db.outbox.capture_status().await.unwrap();
    assert!(all[0].is_current(), "{:?}", all[0].drift);
    assert_eq!(all[1].drift, vec![CaptureDrift::TableMissing]);
    assert!(
        ChangeCapture::new("other")
            .uninstall(&db.outbox)
            .await
            .unwrap()
    );
    assert_eq!(db.outbox.capture_status().await.unwrap().len(), 1);
    db.drop().await;
}

#[tokio::test]
async fn a_capture_in_another_schema_writes_to_the_qualified_outbox() {
    let db = Db::new("").await;
    let other = format!("{}_b", db.schema.name);
    db.exec(&format!(
        "CREATE SCHEMA \"{other}\"; CREATE TABLE \"{other}\".items (id int PRIMARY KEY, v text)"
    ))
    .await;
    ChangeCapture::new("items")
        .with_schema(other.clone())
        .with_payload(ChangePayload::Keys)
        .install(&db.outbox)
        .await
        .unwrap();
    // Written from a session whose search path does not hold the outbox.
    let mut conn = db.schema.pool.acquire().await.unwrap();
    sqlx::query(AssertSqlSafe(format!("SET search_path TO \"{other}\"")))
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO items VALUES (1, 'x')")
        .execute(&mut *conn)
        .await
        .unwrap();
    sqlx::query(AssertSqlSafe(format!(
        "SET search_path TO \"{}\"",
        db.schema.name
    )))
    .execute(&mut *conn)
    .await
    .unwrap();
    drop(conn);
    assert_eq!(events(&db.outbox).await[0].topic, "items.inserted");
    let status = db.outbox.capture_status().await.unwrap();
    assert_eq!(status[0].schema.as_deref(), Some(other.as_str()));
    assert!(
        ChangeCapture::new("items")
            .with_schema(other.clone())
            .uninstall(&db.outbox)
            .await
            .unwrap()
    );
    db.exec(&format!("DROP SCHEMA \"{other}\" CASCADE")).await;
    db.drop().await;
}

#[tokio::test]
async fn one_trigger_per_capture_and_postgres_type_names() {
    let db = Db::new(LOANS).await;
    let capture = ChangeCapture::new("loans");
    capture.install(&db.outbox).await.unwrap();
    capture.install(&db.outbox).await.unwrap();
    let triggers: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_trigger t WHERE t.tgrelid = 'loans'::regclass \
         AND NOT t.tgisinternal",
    )
    .fetch_one(&db.schema.pool)
    .await
    .unwrap();
    assert_eq!(triggers, 1);
    let status = capture.status(&db.outbox).await.unwrap().unwrap();
    assert_eq!(status.columns[2].type_name, "numeric(10,2)");
    db.drop().await;
}
