//! Enqueue on any backend: the caller's transaction, validation, `enqueue_many` batching and its
//! all-or-nothing rule, extra columns with a real foreign key, wake-up signals after commit, and
//! several outbox tables in one database.

// A suite fails its test by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{TimeZone, Utc};
use hare_outbox_core::{
    Backend, ColumnType, Error, ExtraColumn, FnDelivery, IdempotencyScope, InProcessWakeup,
    OutboxEvent, OutboxMessage, OutboxRelay, OutboxTable, RelayConfig, Wakeup,
};
use serde_json::{Value, json};
use uuid::Uuid;

use super::harness::{
    Harness, config, drain, enqueue, message, outbox, outbox_in, plain, recording, stored,
};
use super::statements::{kinds, with_statements};
use crate::wait_for;

/// An event enqueued in the caller's transaction is invisible until COMMIT, then stored as
/// returned; after a ROLLBACK neither it nor the business row exists, and it is never delivered.
pub async fn an_event_commits_with_the_transaction_and_vanishes_with_its_rollback<H: Harness>(
    h: &H,
) {
    let outbox = outbox(h).await;
    let backend = outbox.backend();
    h.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total TEXT NOT NULL)")
        .await;

    let mut tx = backend.begin().await.unwrap();
    H::execute_on(
        &mut tx,
        "INSERT INTO orders (id, total) VALUES (1, '12.50')",
    )
    .await;
    let event = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("orders.created", json!({"id": 1, "total": "12.50"}))
                .ordering_key("order:1")
                .header("author", "ann"),
        )
        .await
        .unwrap();
    assert_eq!(
        outbox.get(event.id).await.unwrap(),
        None,
        "invisible before COMMIT"
    );
    backend.commit(tx).await.unwrap();
    assert_eq!(outbox.get(event.id).await.unwrap(), Some(event.clone()));
    assert_eq!(event.id.get_version_num(), 7);
    assert_eq!(event.attempts, 0);
    assert_eq!(event.ordering_key.as_deref(), Some("order:1"));
    assert_eq!(event.payload, json!({"id": 1, "total": "12.50"}));
    assert_eq!(event.headers.get("author"), Some(&json!("ann")));

    let mut tx = backend.begin().await.unwrap();
    H::execute_on(&mut tx, "INSERT INTO orders (id, total) VALUES (2, '3.00')").await;
    let lost = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("orders.created", json!({"id": 2})),
        )
        .await
        .unwrap();
    backend.rollback(tx).await.unwrap();
    assert_eq!(outbox.get(lost.id).await.unwrap(), None);
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 1);
    assert_eq!(h.scalar("SELECT count(*) FROM orders").await, 1);

    let (seen, delivery) = recording();
    let relay = OutboxRelay::new(outbox.clone(), delivery, config("relay")).unwrap();
    assert_eq!(relay.poll_once().await.unwrap().delivered, 1);
    assert_eq!(relay.poll_once().await.unwrap().leased, 0);
    let delivered: Vec<Uuid> = drain(&seen).iter().map(|e| e.id).collect();
    assert_eq!(
        delivered,
        [event.id],
        "a rolled-back event is never delivered"
    );
}

/// Every invalid message is refused with `Error::Validation` before anything is written.
pub async fn a_validation_error_writes_nothing<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let mut conn = h.acquire().await;
    for bad in [
        OutboxMessage::new("", json!(1)),
        OutboxMessage::new("t".repeat(256), json!({})),
        OutboxMessage::new("t", json!(1)).ordering_key(""),
        OutboxMessage::new("t", json!(1)).ordering_key("k".repeat(256)),
        OutboxMessage::new("t", vec![1.0, f64::NAN]),
        OutboxMessage::new("t", json!(1)).header("", "x"),
        // Not a version 7 UUID.
        OutboxMessage::new("t", json!(1))
            .id(Uuid::from_u128(0x0190_0000_0000_4000_8000_0000_0000_0001)),
    ] {
        let error = outbox.enqueue(&mut conn, bad).await.expect_err("refused");
        assert!(matches!(error, Error::Validation { .. }), "{error}");
    }
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 0);
}

/// The stored event reads back as written: payload and headers as JSON values, the creation
/// time within seconds of now.
pub async fn the_stored_event_reads_back_as_written<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let payload =
        json!({"name": "Zoë ✓", "items": [1, 2.5, null, {"deep": true}], "total": "12.50"});
    let event = enqueue(
        h,
        &outbox,
        OutboxMessage::new("orders.created", &payload)
            .header("author", "ann")
            .header("attempt", 3)
            .idempotency_key("k"),
    )
    .await;
    assert_eq!(event.payload, payload);
    assert_eq!(event.headers.get("author"), Some(&json!("ann")));
    assert_eq!(event.headers.get("attempt"), Some(&json!(3)));
    assert_eq!(event.idempotency_key.as_deref(), Some("k"));
    assert_eq!(event.ordering_key, None);
    let age = Utc::now() - event.created_at;
    assert!(
        age >= chrono::Duration::zero() && age < chrono::Duration::seconds(5),
        "{age}"
    );
    assert_eq!(stored(&outbox, &event).await, event);
}

/// `enqueue_many` writes one INSERT per run of same-shape messages and reads stored and
/// repeated idempotency keys with one SELECT (none without keys), keeping the given order.
pub async fn enqueue_many_writes_one_insert_per_run_and_keeps_the_order<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let mut conn = h.acquire().await;
    let stored_event = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("old", json!("stored")).idempotency_key("k-old"),
        )
        .await
        .unwrap();

    let messages = vec![
        OutboxMessage::new("a", json!(1)).ordering_key("K"),
        OutboxMessage::new("a", json!(2)).ordering_key("K"),
        OutboxMessage::new("b", json!(3)).ordering_key("L"),
        // A run with idempotency keys: a stored key, a new key, and that key repeated.
        OutboxMessage::new("c", json!(4)).idempotency_key("k-old"),
        OutboxMessage::new("c", json!(5)).idempotency_key("k-new"),
        OutboxMessage::new("c", json!(6)).idempotency_key("k-new"),
        // Back to plain messages: a third run.
        OutboxMessage::new("a", json!(7)).ordering_key("K"),
    ];
    let (events, statements) = with_statements(outbox.enqueue_many(&mut conn, messages)).await;
    let events = events.unwrap();
    let (inserts, selects) = kinds(&statements);
    assert_eq!(
        inserts, 3,
        "one INSERT per run of same-shape messages: {statements:#?}"
    );
    assert_eq!(
        selects, 1,
        "existing and repeated keys read with one SELECT: {statements:#?}"
    );

    let payloads: Vec<_> = events.iter().map(|e| e.payload.clone()).collect();
    assert_eq!(
        payloads,
        [
            json!(1),
            json!(2),
            json!(3),
            json!("stored"),
            json!(5),
            json!(5),
            json!(7)
        ]
    );
    assert_eq!(
        events[3], stored_event,
        "a stored key returns the stored event"
    );
    assert_eq!(
        events[4], events[5],
        "a repeated key returns the event written for it"
    );
    let sequences: Vec<i64> = events
        .iter()
        .filter(|e| e.topic == "a")
        .map(|e| e.sequence)
        .collect();
    assert!(
        sequences.windows(2).all(|w| w[0] < w[1]),
        "given order kept: {sequences:?}"
    );
    for event in &events {
        assert_eq!(outbox.get(event.id).await.unwrap().as_ref(), Some(event));
    }
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 6);

    // Without any stored or repeated key, no SELECT at all.
    let (events, statements) = with_statements(outbox.enqueue_many(
        &mut conn,
        vec![
            OutboxMessage::new("d", json!(1)),
            OutboxMessage::new("d", json!(2)),
        ],
    ))
    .await;
    assert_eq!(events.unwrap().len(), 2);
    assert_eq!(kinds(&statements), (1, 0), "{statements:#?}");
}

/// A long run (5,000 messages) keeps the given order and one sequence per message, however the
/// backend splits it into statements.
pub async fn a_long_run_keeps_the_given_order<H: Harness>(h: &H) {
    let outbox = outbox(h).await;
    let backend = outbox.backend();
    let mut tx = backend.begin().await.unwrap();
    let messages: Vec<OutboxMessage> = (0..5000)
        .map(|n| OutboxMessage::new("bulk", json!(n)).ordering_key("one key"))
        .collect();
    let events = outbox.enqueue_many(&mut tx, messages).await.unwrap();
    assert_eq!(events.len(), 5000);
    for (n, event) in events.iter().enumerate() {
        assert_eq!(event.payload, json!(n));
    }
    assert!(
        events.windows(2).all(|w| w[0].sequence < w[1].sequence),
        "sequences follow the given order across statements"
    );
    backend.commit(tx).await.unwrap();
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 5000);
}

/// A failing `enqueue_many` (a taken id in its second run, an invalid message) leaves nothing of
/// the call, its keys stay free, and the caller's transaction goes on; outside a transaction the
/// call runs in one of its own.
pub async fn enqueue_many_is_all_or_nothing_and_the_callers_transaction_survives<H: Harness>(
    h: &H,
) {
    let outbox = outbox(h).await;
    let backend = outbox.backend();
    let mut tx = backend.begin().await.unwrap();
    let taken = outbox
        .enqueue(&mut tx, OutboxMessage::new("x", json!(0)))
        .await
        .unwrap();
    let e = outbox
        .enqueue_many(
            &mut tx,
            vec![
                OutboxMessage::new("x", json!(1)),
                OutboxMessage::new("x", json!(2))
                    .idempotency_key("k")
                    .id(taken.id),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Integrity { .. }), "{e}");
    let e = outbox
        .enqueue_many(
            &mut tx,
            vec![
                OutboxMessage::new("x", json!(1)),
                OutboxMessage::new("", json!(2)),
            ],
        )
        .await
        .unwrap_err();
    assert!(e.to_string().contains("messages[1].topic"), "{e}");
    // The key of the failed call was not kept either.
    let k = outbox
        .enqueue(
            &mut tx,
            OutboxMessage::new("x", json!(3)).idempotency_key("k"),
        )
        .await
        .unwrap();
    assert_eq!(k.payload, json!(3));
    backend.commit(tx).await.unwrap();
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 2);
    assert_eq!(stored(&outbox, &taken).await.payload, json!(0));
    assert_eq!(stored(&outbox, &k).await.payload, json!(3));

    let mut conn = h.acquire().await;
    let e = outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("y", json!(1)),
                OutboxMessage::new("y", json!(2)).id(taken.id),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Integrity { .. }), "{e}");
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 2);
    outbox
        .enqueue_many(&mut conn, vec![OutboxMessage::new("y", json!(3))])
        .await
        .unwrap();
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 3);
}

/// The table `outbox` with extra columns of every type, one a foreign key to `subscriptions`,
/// `tenant_id` as tenant column and the given idempotency scope.
pub fn tenant_table(scope: IdempotencyScope) -> OutboxTable {
    let column = |name: &str, ty| ExtraColumn::new(name, ty).unwrap();
    let mut table = plain("outbox");
    for extra in [
        column("tenant_id", ColumnType::BigInt),
        column("subscription_id", ColumnType::BigInt)
            .references("subscriptions", "id")
            .unwrap(),
        column("webhook_result", ColumnType::Json),
        column("correlation", ColumnType::Uuid),
        column("urgent", ColumnType::Boolean),
        column("due_at", ColumnType::Timestamp),
        column("note", ColumnType::Text),
    ] {
        table = table.with_column(extra).unwrap();
    }
    table
        .with_tenant_column("tenant_id")
        .unwrap()
        .with_idempotency_scope(scope)
        .unwrap()
}

/// Creates `subscriptions` (ids 1 and 2) and an outbox in [`tenant_table`], migrated twice.
pub async fn tenant_outbox<H: Harness>(
    h: &H,
    scope: IdempotencyScope,
) -> hare_outbox_core::Outbox<H::Backend> {
    h.execute("CREATE TABLE subscriptions (id BIGINT PRIMARY KEY, url TEXT)")
        .await;
    h.execute(
        "INSERT INTO subscriptions VALUES (1, 'http://127.0.0.1/a'), (2, 'http://127.0.0.1/b')",
    )
    .await;
    let outbox = outbox_in(h, tenant_table(scope)).await;
    outbox.migrate().await.unwrap();
    outbox
}

/// Extra columns of every type are stored and read back as given, NULL when absent; a value of
/// the wrong type, an unknown or an outbox-owned column is refused naming `extra.<column>`; the
/// database holds the foreign key, and deleting the referenced row deletes its events.
pub async fn extra_columns_are_typed_checked_and_returned<H: Harness>(h: &H) {
    let outbox = tenant_outbox(h, IdempotencyScope::Table).await;
    let mut conn = h.acquire().await;
    let correlation = Uuid::now_v7();
    let due = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).single().unwrap()
        + chrono::Duration::nanoseconds(123_456_789);
    let event = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("hook", json!({}))
                .extra("tenant_id", 7i64)
                .extra("subscription_id", 2i64)
                .extra("correlation", correlation)
                .extra("urgent", true)
                .extra("due_at", due)
                .extra("webhook_result", json!({"status": 200, "ok": [true]}))
                .extra("note", "Zoë"),
        )
        .await
        .unwrap();
    assert_eq!(event.extra["tenant_id"], json!(7));
    assert_eq!(event.extra["subscription_id"], json!(2));
    assert_eq!(event.extra["correlation"], json!(correlation.to_string()));
    assert_eq!(event.extra["urgent"], json!(true));
    assert_eq!(event.extra["due_at"], json!("2026-01-02T03:04:05.123456Z"));
    assert_eq!(
        event.extra["webhook_result"],
        json!({"status": 200, "ok": [true]})
    );
    assert_eq!(event.extra["note"], json!("Zoë"));
    assert_eq!(outbox.get(event.id).await.unwrap().unwrap(), event);

    // Runs of different extra columns: NULLs, false, absent columns left NULL.
    let events = outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("hook", json!(1))
                    .extra("tenant_id", 1i64)
                    .extra("urgent", false),
                OutboxMessage::new("hook", json!(2))
                    .extra("tenant_id", 2i64)
                    .extra("urgent", None::<bool>),
                OutboxMessage::new("hook", json!(3)).extra("webhook_result", Value::Null),
            ],
        )
        .await
        .unwrap();
    let view = |e: &OutboxEvent| {
        ["tenant_id", "urgent", "webhook_result", "due_at"].map(|c| e.extra[c].clone())
    };
    assert_eq!(
        view(&events[0]),
        [json!(1), json!(false), json!(null), json!(null)]
    );
    assert_eq!(
        view(&events[1]),
        [json!(2), json!(null), json!(null), json!(null)]
    );
    assert_eq!(
        view(&events[2]),
        [json!(null), json!(null), json!(null), json!(null)]
    );
    for e in &events {
        assert_eq!(e.extra.len(), 7);
        assert_eq!(outbox.get(e.id).await.unwrap().as_ref(), Some(e));
    }

    let bad = [
        (
            OutboxMessage::new("t", json!({})).extra("nope", 1i64),
            "extra.nope",
        ),
        (
            OutboxMessage::new("t", json!({})).extra("tenant_id", "seven"),
            "extra.tenant_id",
        ),
        (
            OutboxMessage::new("t", json!({})).extra("urgent", 1i64),
            "extra.urgent",
        ),
        (
            OutboxMessage::new("t", json!({})).extra("attempts", 3i64),
            "extra.attempts",
        ),
        (
            OutboxMessage::new("t", json!({})).extra("leased_by", "me"),
            "extra.leased_by",
        ),
    ];
    for (message, field) in bad {
        match outbox.enqueue(&mut conn, message).await.unwrap_err() {
            Error::Validation { field: f, .. } => assert_eq!(f, field),
            other => panic!("{other}"),
        }
    }
    // The foreign key holds: an unknown subscription is refused by the database as an
    // integrity error.
    let e = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("t", json!({})).extra("subscription_id", 99i64),
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Integrity { .. }), "{e}");
    let e = outbox
        .enqueue_many(
            &mut conn,
            vec![
                OutboxMessage::new("t", json!({})).extra("subscription_id", 1i64),
                OutboxMessage::new("t", json!({})).extra("subscription_id", 99i64),
            ],
        )
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Integrity { .. }), "{e}");
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 4);
    // Deleting the subscription deletes its events (ON DELETE CASCADE).
    H::execute_on(&mut conn, "DELETE FROM subscriptions WHERE id = 2").await;
    assert!(outbox.get(event.id).await.unwrap().is_none());
    assert_eq!(h.scalar("SELECT count(*) FROM outbox").await, 3);
}

/// One signal per committed `OutboxTransaction`, one entry per topic; none for a rollback, a
/// dropped transaction or a message whose idempotency key was already stored.
pub async fn signals_are_coalesced_and_sent_only_after_commit<H: Harness>(h: &H) {
    let wakeup = InProcessWakeup::new();
    let outbox = outbox(h).await.with_wakeup(wakeup.clone()).unwrap();
    let mut signals = wakeup.subscribe().await.unwrap();

    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("a", json!(1))).await.unwrap();
    tx.enqueue(OutboxMessage::new("b", json!(2))).await.unwrap();
    tx.enqueue_many(vec![
        OutboxMessage::new("a", json!(3)),
        OutboxMessage::new("c", json!(4)),
    ])
    .await
    .unwrap();
    H::execute_on(&mut tx, "UPDATE outbox SET attempts = 0 WHERE 1 = 0").await;
    assert_eq!(tx.pending_topics(), ["a", "b", "c"]);
    tx.commit().await.unwrap();
    let got = signals.recv().await.unwrap().unwrap();
    assert_eq!(
        &*got,
        ["a", "b", "c"].map(String::from),
        "one signal, one entry per topic"
    );

    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("d", json!(1)).idempotency_key("once"))
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("e", json!(1)).idempotency_key("once"))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("f", json!(1)).idempotency_key("once"))
        .await
        .unwrap();
    tx.enqueue_many(vec![
        OutboxMessage::new("g", json!(1)).idempotency_key("once"),
    ])
    .await
    .unwrap();
    assert!(tx.pending_topics().is_empty());
    tx.commit().await.unwrap();
    // Dropped without commit: a rollback, no signal.
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("h", json!(1))).await.unwrap();
    drop(tx);
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("i", json!(1))).await.unwrap();
    tx.commit().await.unwrap();
    let got = signals.recv().await.unwrap().unwrap();
    assert_eq!(
        &*got,
        ["e".to_owned()],
        "none for d (rolled back) nor f, g (key stored)"
    );
    let got = signals.recv().await.unwrap().unwrap();
    assert_eq!(&*got, ["i".to_owned()], "none for h (dropped)");
}

/// A relay polling every 60 s delivers within a second of a commit that signals one of its
/// topics; a plain transaction (no signal) or another relay's topic does not wake it.
pub async fn a_relay_wakes_on_commit_not_on_the_poll_interval<H: Harness>(h: &H) {
    let outbox = outbox(h).await.with_wakeup(InProcessWakeup::new()).unwrap();
    let seen = Arc::new(Mutex::new(Vec::<(String, Instant)>::new()));
    let sink = seen.clone();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |e: OutboxEvent| {
            let sink = sink.clone();
            async move {
                sink.lock().unwrap().push((e.topic, Instant::now()));
                Ok(())
            }
        }),
        RelayConfig::default()
            .with_poll_interval(Duration::from_secs(60))
            .with_topics(["mine.*"]),
    )
    .unwrap();
    relay.start().unwrap();
    wait_for("the first poll", Duration::from_secs(10), || async {
        (relay.stats().polls >= 1).then_some(())
    })
    .await;

    // A plain transaction of the backend cannot signal: the relay sleeps on.
    let backend = outbox.backend();
    let mut plain_tx = backend.begin().await.unwrap();
    outbox
        .enqueue(&mut plain_tx, OutboxMessage::new("mine.plain", json!(1)))
        .await
        .unwrap();
    backend.commit(plain_tx).await.unwrap();
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(OutboxMessage::new("theirs.x", json!(1)))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing delivered before a signal for this relay"
    );
    assert_eq!(relay.stats().polls, 1);

    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue_many(vec![OutboxMessage::new("mine.signalled", json!(2))])
        .await
        .unwrap();
    let committed = Instant::now();
    tx.commit().await.unwrap();
    wait_for(
        "delivery after the signal",
        Duration::from_secs(10),
        || async { (seen.lock().unwrap().len() == 2).then_some(()) },
    )
    .await;
    let latency = seen.lock().unwrap()[1].1 - committed;
    assert!(
        latency < Duration::from_secs(2),
        "woken by the signal, not the 60 s poll: {latency:?}"
    );
    relay.stop().await.unwrap();
}

/// Two outbox tables in one database: idempotency keys are per table, a relay of one never
/// touches the other's events.
pub async fn two_outbox_tables_in_one_database_do_not_see_each_other<H: Harness>(h: &H) {
    let orders = outbox_in(h, plain("orders_outbox")).await;
    let billing = outbox_in(h, plain("billing_outbox")).await;
    let order_event = enqueue(
        h,
        &orders,
        message("orders.created", Some("k"), 1).idempotency_key("same"),
    )
    .await;
    let billing_event = enqueue(
        h,
        &billing,
        message("invoice.paid", Some("k"), 1).idempotency_key("same"),
    )
    .await;
    assert_ne!(order_event.id, billing_event.id);
    assert_eq!(billing.get(order_event.id).await.unwrap(), None);
    assert_eq!(orders.get(billing_event.id).await.unwrap(), None);

    let (seen, delivery) = recording();
    let relay = OutboxRelay::new(orders.clone(), delivery, config("orders-relay")).unwrap();
    assert_eq!(relay.poll_once().await.unwrap().delivered, 1);
    let delivered: Vec<Uuid> = drain(&seen).iter().map(|e| e.id).collect();
    assert_eq!(delivered, [order_event.id]);
    assert!(stored(&orders, &order_event).await.published_at.is_some());
    assert_eq!(
        stored(&billing, &billing_event).await,
        billing_event,
        "the other table's event is untouched"
    );
    assert_eq!(relay.poll_once().await.unwrap().leased, 0);
    assert_eq!(
        h.scalar("SELECT count(*) FROM billing_outbox WHERE published_at IS NULL")
            .await,
        1
    );
}

/// Two concurrent migrations of one table both succeed, and a third changes nothing.
pub async fn migrate_is_idempotent_and_safe_concurrently<H: Harness>(h: &H) {
    let outbox = hare_outbox_core::Outbox::new(h.backend(), plain("outbox"));
    let (a, b) = tokio::join!(outbox.migrate(), outbox.migrate());
    a.unwrap();
    b.unwrap();
    let event = enqueue(h, &outbox, message("t", None, 1)).await;
    outbox.migrate().await.unwrap();
    assert_eq!(stored(&outbox, &event).await, event);
}
