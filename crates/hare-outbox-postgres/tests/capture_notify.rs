//! `ChangeCapture::notify`: a capture trigger that NOTIFYs inside the writing transaction, so a
//! relay on `ListenNotifyWakeup` delivers captured writes — raw SQL included — at once after the
//! commit instead of at its next poll (issue: capture triggers and LISTEN/NOTIFY).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use hare_outbox_core::capture::ChangeCapture;
use hare_outbox_core::{
    Error, FnDelivery, Outbox, OutboxEvent, OutboxRelay, OutboxTable, RelayConfig, Wakeup,
    WakeupSubscription,
};
use hare_outbox_postgres::{ListenNotifyWakeup, PgBackend};
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use sqlx::{AssertSqlSafe, PgPool};

async fn exec(pool: &PgPool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A schema with `items` (3 rows) and an outbox waking through LISTEN/NOTIFY on a channel named
/// like the schema.
async fn setup() -> (TestSchema, Outbox<PgBackend>, ListenNotifyWakeup) {
    let schema = TestSchema::new(6).await;
    let wakeup = ListenNotifyWakeup::new(schema.pool.clone())
        .with_channel(&schema.name)
        .unwrap();
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default())
        .with_wakeup(wakeup.clone())
        .unwrap();
    outbox.migrate().await.unwrap();
    exec(
        &schema.pool,
        "CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL);
         INSERT INTO items VALUES (1, 0), (2, 0), (3, 0);",
    )
    .await;
    (schema, outbox, wakeup)
}

/// Waits until the wake-up's listening connection has run its LISTEN.
async fn wait_for_listen(schema: &TestSchema) {
    wait_for("LISTEN", Duration::from_secs(10), || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE query = $1")
            .bind(format!("LISTEN \"{}\"", schema.name))
            .fetch_one(&schema.pool)
            .await
            .unwrap();
        (n >= 1).then_some(())
    })
    .await;
}

async fn next(sub: &mut WakeupSubscription) -> Vec<String> {
    tokio::time::timeout(Duration::from_secs(5), sub.recv())
        .await
        .expect("a signal within 5 s")
        .unwrap()
        .unwrap()
        .to_vec()
}

async fn nothing_within(sub: &mut WakeupSubscription, wait: Duration) -> bool {
    tokio::time::timeout(wait, sub.recv()).await.is_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_raw_sql_update_wakes_a_listen_notify_relay_long_before_its_poll() {
    let (schema, outbox, _wakeup) = setup().await;
    ChangeCapture::new("items")
        .with_label("shop.Item")
        .with_notify(Some(schema.name.clone()))
        .install(&outbox)
        .await
        .unwrap();
    let (tx, mut delivered) = tokio::sync::mpsc::unbounded_channel::<(OutboxEvent, Instant)>();
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(move |e: OutboxEvent| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((e, Instant::now()));
                Ok(())
            }
        }),
        RelayConfig::default().with_poll_interval(Duration::from_secs(30)),
    )
    .unwrap();
    relay.start().unwrap();
    // The first poll found nothing; the next one is 30 s away.
    wait_for("the first poll", Duration::from_secs(10), || async {
        (relay.stats().polls >= 1).then_some(())
    })
    .await;
    wait_for_listen(&schema).await;

    // Raw SQL, no outbox API involved: the trigger writes the event and notifies.
    let committed = Instant::now();
    exec(&schema.pool, "UPDATE items SET qty = qty + 1 WHERE id = 2").await;
    let (event, at) = tokio::time::timeout(Duration::from_secs(10), delivered.recv())
        .await
        .expect("delivered well before the 30 s poll")
        .unwrap();
    let took = at.duration_since(committed);
    assert!(
        took < Duration::from_secs(2),
        "delivered {took:?} after the commit; the poll interval is 30 s"
    );
    assert_eq!(event.topic, "shop.item.updated");
    assert_eq!(event.payload["pk"], 2);
    relay.stop().await.unwrap();
    schema.drop_schema().await;
}

#[tokio::test]
async fn the_trigger_notifies_once_per_topic_at_commit_and_never_for_a_rollback() {
    let (schema, outbox, wakeup) = setup().await;
    let mut sub = wakeup.subscribe().await.unwrap();
    wait_for_listen(&schema).await;

    // Without `notify` (the default) a captured write sends nothing: the relay polls for it.
    let capture = ChangeCapture::new("items").with_label("shop.Item");
    capture.install(&outbox).await.unwrap();
    exec(&schema.pool, "UPDATE items SET qty = qty + 1").await;
    assert!(
        nothing_within(&mut sub, Duration::from_millis(300)).await,
        "no NOTIFY without notify"
    );

    // With it: one notification for a statement touching every row (PostgreSQL folds identical
    // notifications of a transaction), per topic, delivered at commit.
    capture
        .clone()
        .with_notify(Some(schema.name.clone()))
        .install(&outbox)
        .await
        .unwrap();
    let mut tx = schema.pool.begin().await.unwrap();
    sqlx::query("UPDATE items SET qty = qty + 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    sqlx::query("INSERT INTO items VALUES (4, 0)")
        .execute(&mut *tx)
        .await
        .unwrap();
    assert!(
        nothing_within(&mut sub, Duration::from_millis(200)).await,
        "nothing before commit"
    );
    tx.commit().await.unwrap();
    let mut got = [next(&mut sub).await, next(&mut sub).await].concat();
    got.sort();
    assert_eq!(got, ["shop.item.inserted", "shop.item.updated"]);
    assert!(
        nothing_within(&mut sub, Duration::from_millis(300)).await,
        "one notification per topic"
    );

    let mut tx = schema.pool.begin().await.unwrap();
    sqlx::query("DELETE FROM items WHERE id = 1")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert!(
        nothing_within(&mut sub, Duration::from_millis(300)).await,
        "never for a rollback"
    );
    schema.drop_schema().await;
}

#[tokio::test]
async fn a_bad_notify_channel_is_refused_at_install() {
    let (schema, outbox, _wakeup) = setup().await;
    for channel in [String::new(), "c".repeat(64), "a\0b".to_owned()] {
        let e = ChangeCapture::new("items")
            .with_notify(Some(channel.clone()))
            .install(&outbox)
            .await
            .unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(e.to_string().contains("notify"), "{e}");
    }
    schema.drop_schema().await;
}
