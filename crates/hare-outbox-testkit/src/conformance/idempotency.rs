//! Idempotency keys on any backend: a stored key returns the stored event, keys outlive
//! delivery and dead-lettering but not a rollback, a taken explicit id is an integrity error,
//! and the three idempotency scopes (table, per tenant, none).

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use hare_outbox_core::{Backend, Error, IdempotencyScope, OutboxMessage};
use serde_json::json;
use uuid::Uuid;

use super::enqueue::tenant_outbox;
use super::harness::{EventState, Harness, enqueue, now, outbox, outbox_in, plain, put, stored};

/// A second message with a stored key gets the stored event back unchanged (topic, payload,
/// ordering key of the first), also when the first was written earlier in the same transaction.
pub async fn a_stored_idempotency_key_returns_the_stored_event_unchanged<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let first = enqueue(
        h,
        &outbox,
        OutboxMessage::new("orders.created", json!({"v": 1})).idempotency_key("order:1:created"),
    )
    .await;
    let again = enqueue(
        h,
        &outbox,
        OutboxMessage::new("orders.other", json!({"v": 2}))
            .idempotency_key("order:1:created")
            .ordering_key("x"),
    )
    .await;
    assert_eq!(again, first);
    assert_eq!(again.topic, "orders.created");
    assert_eq!(again.payload, json!({"v": 1}));
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 1);

    let backend = outbox.backend();
    let mut tx = backend.begin().await.unwrap();
    let inner = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("a", json!(1)).idempotency_key("k2"),
        )
        .await
        .unwrap();
    let inner_again = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("b", json!(2)).idempotency_key("k2"),
        )
        .await
        .unwrap();
    assert_eq!(inner_again, inner);
    backend.commit(tx).await.unwrap();
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 2);
}

/// An explicit id that is taken is an `Error::Integrity` with the database error as source,
/// even with a fresh idempotency key.
pub async fn a_taken_explicit_id_is_an_integrity_error<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let id = Uuid::now_v7();
    enqueue(h, &outbox, OutboxMessage::new("t", json!(1)).id(id)).await;
    let mut conn = h.acquire().await;
    let error = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(2))
                .id(id)
                .idempotency_key("fresh"),
        )
        .await
        .expect_err("duplicate id");
    assert!(matches!(error, Error::Integrity { .. }), "{error:?}");
    assert!(std::error::Error::source(&error).is_some());
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 1);
}

/// A key written in a rolled-back transaction is free again (`enqueue` and `enqueue_many`); the
/// key of a published or dead-lettered event still returns that event.
pub async fn keys_outlive_delivery_and_dead_letters_but_not_rollbacks<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let backend = outbox.backend();
    let mut tx = backend.begin().await.unwrap();
    let lost = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("t", json!("rolled back")).idempotency_key("free"),
        )
        .await
        .unwrap();
    outbox
        .enqueue_many(
            &mut tx,
            vec![OutboxMessage::new("t", json!("rolled back too")).idempotency_key("free too")],
        )
        .await
        .unwrap();
    backend.rollback(tx).await.unwrap();
    let reused = enqueue(
        h,
        &outbox,
        OutboxMessage::new("t", json!("again")).idempotency_key("free"),
    )
    .await;
    assert_ne!(reused.id, lost.id);
    assert_eq!(
        reused.payload,
        json!("again"),
        "a key freed by rollback is reusable"
    );
    assert_eq!(stored(&outbox, &reused).await, reused);
    let mut conn = h.acquire().await;
    let reused = outbox
        .enqueue_many(
            &mut conn,
            vec![OutboxMessage::new("t", json!("again too")).idempotency_key("free too")],
        )
        .await
        .unwrap();
    assert_eq!(reused[0].payload, json!("again too"));

    let published = enqueue(
        h,
        &outbox,
        OutboxMessage::new("t", json!(1)).idempotency_key("p"),
    )
    .await;
    let dead = enqueue(
        h,
        &outbox,
        OutboxMessage::new("t", json!(2)).idempotency_key("d"),
    )
    .await;
    put(
        h,
        outbox.table(),
        published.sequence,
        EventState::Published(now()),
    )
    .await;
    put(h, outbox.table(), dead.sequence, EventState::Dead(now())).await;
    let again = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(9)).idempotency_key("p"),
        )
        .await
        .unwrap();
    assert_eq!((again.id, again.payload.clone()), (published.id, json!(1)));
    assert!(again.published_at.is_some());
    let again = outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("t", json!(9)).idempotency_key("d"),
                OutboxMessage::new("t", json!(9)).idempotency_key("p"),
            ],
        )
        .await
        .unwrap();
    assert_eq!((again[0].id, again[1].id), (dead.id, published.id));
    assert!(again[0].dead_lettered_at.is_some());
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 4);
}

fn keyed(n: i64, key: &str, tenant: i64) -> OutboxMessage {
    OutboxMessage::new("t", json!(n))
        .idempotency_key(key)
        .extra("tenant_id", tenant)
}

/// Scope `Table`: a key is one event across tenants, and another tenant's use of it is an
/// integrity error that leaves nothing of the call.
pub async fn a_table_wide_key_refuses_another_tenant<H: Harness>(h: &H) {
    let outbox = tenant_outbox(h, IdempotencyScope::Table).await;
    let mut conn = h.acquire().await;
    outbox.enqueue(&mut conn, keyed(1, "k", 1)).await.unwrap();
    let same = outbox.enqueue(&mut conn, keyed(2, "k", 1)).await.unwrap();
    assert_eq!(same.payload, json!(1));
    let e = outbox
        .enqueue(&mut conn, keyed(3, "k", 2))
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Integrity { .. }) && e.to_string().contains("another tenant"),
        "{e}"
    );
    let e = outbox
        .enqueue_many(&mut conn, vec![keyed(4, "fresh", 2), keyed(5, "k", 2)])
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Integrity { .. }) && e.to_string().contains("another tenant"),
        "{e}"
    );
    assert_eq!(
        h.scalar("SELECT count(*) FROM outbox").await,
        1,
        "nothing of the call stays"
    );
}

/// Scope `PerTenant`: one key names one event per tenant, also within one `enqueue_many`; a key
/// without its tenant is a validation error.
pub async fn a_per_tenant_key_is_one_event_per_tenant<H: Harness>(h: &H) {
    let outbox = tenant_outbox(h, IdempotencyScope::PerTenant).await;
    let mut conn = h.acquire().await;
    let a = outbox.enqueue(&mut conn, keyed(1, "k", 1)).await.unwrap();
    let b = outbox.enqueue(&mut conn, keyed(2, "k", 2)).await.unwrap();
    assert_ne!(a.id, b.id, "per-tenant keys");
    let again = outbox
        .enqueue_many(
            &mut conn,
            vec![
                keyed(9, "k", 2),
                keyed(10, "j", 1),
                keyed(11, "j", 2),
                keyed(12, "j", 1),
            ],
        )
        .await
        .unwrap();
    assert_eq!(again[0].id, b.id);
    assert_ne!(again[1].id, again[2].id, "one key, two tenants, two events");
    assert_eq!(again[3].id, again[1].id, "repeated within its tenant");
    let e = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(3)).idempotency_key("k"),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(e, Error::Validation { .. }),
        "a key needs its tenant: {e}"
    );
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 4);
}

/// Scope `None`: a message with a key is a configuration error (`enqueue` and `enqueue_many`);
/// messages without keys are written.
pub async fn without_a_scope_a_key_is_a_configuration_error<H: Harness>(h: &H) {
    let table = plain("outbox")
        .with_idempotency_scope(IdempotencyScope::None)
        .unwrap();
    let outbox = outbox_in(h, table).await;
    let mut conn = h.acquire().await;
    let e = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!(1)).idempotency_key("k"),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Configuration(_)), "{e}");
    let e = outbox
        .enqueue_many(
            &mut conn,
            vec![OutboxMessage::new("t", json!(1)).idempotency_key("k")],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Configuration(_)), "{e}");
    outbox
        .enqueue(&mut conn, OutboxMessage::new("t", json!(1)))
        .await
        .unwrap();
    outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("t", json!(2)),
                OutboxMessage::new("t", json!(3)),
            ],
        )
        .await
        .unwrap();
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 3);
}
