//! Extra columns declared after the table exists: `migrate` adds the missing ones, nullable
//! columns (one a foreign key) to a table with rows, a NOT NULL column only to an empty table.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{ColumnType, Error, ExtraColumn, IdempotencyScope, Outbox, OutboxMessage};
use serde_json::{Value, json};

use super::enqueue::tenant_table;
use super::harness::{Harness, enqueue, outbox, outbox_in, plain};

/// A table with one event gains the seven declared columns on `migrate` (again: nothing
/// changes); the old event reads them as NULL, a new one writes them, the added foreign key
/// holds and the table's idempotency keys still serve. A NOT NULL column cannot be added to a
/// table with rows and that migration adds nothing; on an empty table it is added, the database
/// refuses a NULL in it and `enqueue` asks for it.
pub async fn migrate_adds_missing_extra_columns_to_an_existing_table<H: Harness>(h: &H) {
    h.execute(
        "CREATE TABLE subscriptions (id BIGINT PRIMARY KEY, url TEXT);
         INSERT INTO subscriptions VALUES (1, 'http://127.0.0.1/a')",
    )
    .await;
    let before = outbox(h).await;
    let old = enqueue(
        h,
        &before,
        OutboxMessage::new("t", json!(1)).idempotency_key("old"),
    )
    .await;

    let after = outbox_in(h, tenant_table(IdempotencyScope::Table)).await;
    after.migrate().await.unwrap();
    let read = after.get(old.id).await.unwrap().unwrap();
    assert_eq!(read.extra.len(), 7, "{:?}", read.extra);
    assert!(read.extra.values().all(Value::is_null));
    let mut conn = h.acquire().await;
    let new = after
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(2))
                .extra("tenant_id", 3i64)
                .extra("subscription_id", 1i64),
        )
        .await
        .unwrap();
    assert_eq!(new.extra["tenant_id"], json!(3));
    let e = after
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(3)).extra("subscription_id", 99i64),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Integrity { .. }),
        "the added foreign key holds: {e}"
    );
    let same = after
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(4)).idempotency_key("old"),
        )
        .await
        .unwrap();
    assert_eq!(
        same.id, old.id,
        "the table's UNIQUE (idempotency_key) still serves"
    );
    drop(conn);

    let required = |name: &str| {
        plain(name)
            .with_column(
                ExtraColumn::new("shard", ColumnType::BigInt)
                    .unwrap()
                    .not_null(),
            )
            .unwrap()
            .with_column(ExtraColumn::new("region", ColumnType::Text).unwrap())
            .unwrap()
    };
    let e = Outbox::new(h.backend(), required("outbox"))
        .migrate()
        .await
        .unwrap_err();
    // PostgreSQL reports the rows' NULLs as an integrity error, SQLite the refused ALTER.
    assert!(
        matches!(e, Error::Database { .. } | Error::Integrity { .. }),
        "{e}"
    );
    let mut conn = h.acquire().await;
    for column in ["shard", "region"] {
        let select = format!("SELECT count({column}) FROM outbox");
        let added = H::try_execute_on(&mut conn, &select).await;
        assert!(added.is_err(), "the failed migration added {column}");
    }
    drop(conn);

    outbox_in(h, plain("empty")).await;
    let empty = outbox_in(h, required("empty")).await;
    let mut conn = h.acquire().await;
    let refused = H::try_execute_on(
        &mut conn,
        "INSERT INTO empty (id, topic, payload, created_at) \
         VALUES ('0190b5c6-7e1d-7a2b-8c3d-4e5f60718293', 't', '1', '2026-01-01T00:00:00Z')",
    )
    .await;
    assert!(refused.is_err(), "a NULL shard is refused by the database");
    let e = empty
        .enqueue(&mut conn, OutboxMessage::new("t", json!(1)))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Validation { .. }), "{e}");
    let ok = empty
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(1)).extra("shard", 5i64),
        )
        .await
        .unwrap();
    assert_eq!(ok.extra["shard"], json!(5));
    assert_eq!(ok.extra["region"], json!(null));
}
