//! SQLite: capture writes an event for every row a statement touches (seed 001 § ChangeCapture), with
//! `changed` listing what differs; `skip_unchanged` keeps the journal-friendly behaviour of
//! writing nothing for an UPDATE that changed no captured column.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::capture::{ChangeCapture, ChangePayload, RowOperation};
use hare_outbox_core::{Outbox, OutboxTable};
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::{Value, json};
use sqlx::{AssertSqlSafe, SqlitePool};

async fn setup() -> (TestDb, Outbox<SqliteBackend>) {
    let schema = TestDb::new(4).await;
    let outbox = Outbox::new(
        SqliteBackend::new(schema.pool.clone()),
        OutboxTable::default(),
    );
    outbox.migrate().await.unwrap();
    exec(
        &schema.pool,
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL, note TEXT, \
         updated_at TEXT NOT NULL DEFAULT 'a')",
    )
    .await;
    exec(
        &schema.pool,
        "INSERT INTO orders (id, status) VALUES (1, 'new'), (2, 'new'), (3, 'paid')",
    )
    .await;
    (schema, outbox)
}

async fn exec(pool: &SqlitePool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// (pk, changed, after) of every stored event, in sequence order.
async fn updates(pool: &SqlitePool) -> Vec<(Value, Value, Value)> {
    let payloads: Vec<String> =
        sqlx::query_scalar("SELECT payload FROM hare_outbox ORDER BY sequence")
            .fetch_all(pool)
            .await
            .unwrap();
    payloads
        .into_iter()
        .map(|p| serde_json::from_str::<Value>(&p).unwrap())
        .map(|p| {
            assert_eq!(p["operation"], "updated", "{p}");
            (p["pk"].clone(), p["changed"].clone(), p["after"].clone())
        })
        .collect()
}

#[tokio::test]
async fn every_touched_row_writes_an_event_by_default() {
    let (schema, outbox) = setup().await;
    let declaration = ChangeCapture::new("orders")
        .with_exclude(["updated_at"])
        .with_operations([RowOperation::Update]);
    assert!(!declaration.skip_unchanged, "off by default");
    declaration.install(&outbox).await.unwrap();

    // One statement over three rows: one sets a column to its own value, one changes it, and
    // the last statement touches only the excluded column.
    exec(&schema.pool, "UPDATE orders SET status = 'paid'").await;
    exec(
        &schema.pool,
        "UPDATE orders SET updated_at = 'b' WHERE id = 1",
    )
    .await;

    let events = updates(&schema.pool).await;
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(events[0].0, json!(1));
    assert_eq!(events[0].1, json!(["status"]));
    assert_eq!(events[1].1, json!(["status"]));
    assert_eq!(
        (events[2].0.clone(), events[2].1.clone()),
        (json!(3), json!([]))
    );
    assert_eq!(events[2].2["status"], "paid");
    assert_eq!(
        (events[3].0.clone(), events[3].1.clone()),
        (json!(1), json!([]))
    );
    assert!(
        events[3].2.get("updated_at").is_none(),
        "exclude still narrows the event"
    );
}

#[tokio::test]
async fn skip_unchanged_writes_nothing_for_rows_that_kept_their_captured_values() {
    let (schema, outbox) = setup().await;
    ChangeCapture::new("orders")
        .with_exclude(["updated_at"])
        .with_operations([RowOperation::Update])
        .with_payload(ChangePayload::Changes)
        .with_skip_unchanged(true)
        .install(&outbox)
        .await
        .unwrap();
    exec(&schema.pool, "UPDATE orders SET status = 'paid'").await;
    exec(&schema.pool, "UPDATE orders SET updated_at = 'b'").await;
    let events = updates(&schema.pool).await;
    assert_eq!(
        events,
        vec![
            (json!(1), json!(["status"]), json!({"status": "paid"})),
            (json!(2), json!(["status"]), json!({"status": "paid"})),
        ]
    );
}

#[tokio::test]
async fn skip_unchanged_is_read_from_a_configuration_entry_and_off_when_left_out() {
    let on: ChangeCapture =
        serde_json::from_value(json!({"table": "orders", "skip_unchanged": true})).unwrap();
    assert!(on.skip_unchanged);
    let off: ChangeCapture = serde_json::from_value(json!({"table": "orders"})).unwrap();
    assert!(!off.skip_unchanged);
    assert!(
        !serde_json::to_value(&off)
            .unwrap()
            .as_object()
            .unwrap()
            .contains_key("skip_unchanged"),
        "left out of stored declarations when off"
    );
    let e = serde_json::from_value::<ChangeCapture>(json!({"table": "o", "skip_unchanged": "yes"}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("bool"), "{e}");
}
