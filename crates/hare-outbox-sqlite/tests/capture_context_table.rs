//! The context table of an earlier release (headers only) gets its `payload` column when a
//! capture is installed or a context is set, and a context set through it reaches the envelope.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::capture::{CaptureContext, ChangeCapture, ChangePayload};
use hare_outbox_core::{Backend, Outbox, OutboxTable};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::conformance::capture::events;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::json;

#[tokio::test]
async fn a_context_table_without_payload_gets_the_column_and_the_keys_arrive() {
    let db = TestDb::new(2).await;
    let backend = SqliteBackend::new(db.pool.clone());
    let outbox = Outbox::new(backend.clone(), OutboxTable::default());
    outbox.migrate().await.unwrap();
    sqlx::raw_sql(
        "CREATE TABLE hare_outbox_context (id INTEGER PRIMARY KEY CHECK (id = 1), headers TEXT NOT NULL);
         INSERT INTO hare_outbox_context VALUES (1, '{\"author\":\"old\"}');
         CREATE TABLE pets (id INTEGER PRIMARY KEY, name TEXT)",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    ChangeCapture::new("pets")
        .with_payload(ChangePayload::Keys)
        .install(&outbox)
        .await
        .unwrap();
    let columns: Vec<String> =
        sqlx::query_scalar("SELECT name FROM pragma_table_info('hare_outbox_context')")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(columns, ["id", "headers", "payload"]);

    let mut tx = backend.begin().await.unwrap();
    outbox
        .set_context(
            &mut tx,
            CaptureContext::new().with_payload(json!({"shelter": "north", "tags": []})),
        )
        .await
        .unwrap();
    sqlx::query("INSERT INTO pets VALUES (1, 'Rex')")
        .execute(&mut *tx)
        .await
        .unwrap();
    backend.commit(tx).await.unwrap();
    let events = events(&outbox).await;
    assert_eq!(
        events[0].payload,
        json!({"model": "pets", "table": "pets", "operation": "inserted", "pk": 1,
            "changed": null, "before": null, "after": null, "shelter": "north", "tags": []})
    );
    assert_eq!(events[0].headers, json!({}));
}
