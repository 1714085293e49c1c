//! `[wakeup] kind = "listen_notify"`: a relay polling only every 30 s delivers an event within
//! 2 s of its commit, woken by the NOTIFY the writing transaction sends — or, for raw SQL on a
//! table whose `[[capture]]` sets `notify`, by the capture trigger's NOTIFY.

use std::time::{Duration, Instant};

use hare_outbox::postgres::{ListenNotifyWakeup, NotifyMode, PgBackend};
use hare_outbox::{Outbox, OutboxMessage, OutboxTable};
use hare_outbox_testkit::pg::TestSchema;
use serde_json::{Value, json};

use crate::support::{Proc, TempDir, hare_outbox};

/// Waits until a session LISTENs on `channel` (the relay's listener is connected).
async fn wait_for_listener(schema: &TestSchema, channel: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listening: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%' AND query LIKE '%' || $1 || '%'",
        )
        .bind(channel)
        .fetch_one(&schema.pool)
        .await
        .expect("pg_stat_activity");
        if listening > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the relay never listened on {channel}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_notify_in_transaction_wakes_the_relay_within_two_seconds() {
    let schema = TestSchema::new(4).await;
    // A channel of this test's own, so parallel tests neither wake it nor confuse the wait below.
    let channel = format!("wake_{}", schema.name);
    let wakeup = ListenNotifyWakeup::new(schema.pool.clone())
        .with_channel(&channel)
        .expect("channel")
        .with_mode(NotifyMode::InTransaction);
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default())
        .with_wakeup(wakeup)
        .expect("wakeup");
    outbox.migrate().await.expect("migrate");
    let dir = TempDir::new("wakeup-pg");
    let config = dir.write(
        "hare-outbox.toml",
        &format!(
            "[relay]\npoll_interval_seconds = 30\n\n[delivery]\nkind = \"stdout\"\n\n[wakeup]\nkind = \"listen_notify\"\nchannel = \"{channel}\"\n"
        ),
    );
    let write = |id: i64| {
        let outbox = outbox.clone();
        let pool = schema.pool.clone();
        async move {
            // A plain sqlx transaction: the NOTIFY rides it and PostgreSQL delivers it at commit.
            let mut tx = pool.begin().await.expect("begin");
            outbox
                .enqueue(
                    &mut *tx,
                    OutboxMessage::new("doc.updated", json!({"id": id}))
                        .ordering_key(format!("sales_orders:{id}")),
                )
                .await
                .expect("enqueue");
            tx.commit().await.expect("commit");
        }
    };
    // The first event is found by the relay's first poll; after it the relay waits 30 s.
    write(1).await;
    let mut relay = Proc::spawn(
        hare_outbox(dir.path())
            .args(["relay", "--config"])
            .arg(&config)
            .env("HARE_OUTBOX_DATABASE_URL", schema.url_with_search_path()),
    );
    relay
        .wait_for_stdout("the first event", Duration::from_secs(30), |out| {
            out.lines().count() >= 1
        })
        .await;
    wait_for_listener(&schema, &channel).await;

    // The second one can only arrive in time through the wake-up.
    write(22).await;
    let committed = Instant::now();
    relay
        .wait_for_stdout("the second event", Duration::from_secs(30), |out| {
            out.lines().count() >= 2
        })
        .await;
    let took = committed.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "delivered {took:?} after commit; the poll interval is 30 s"
    );
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", relay.stderr());
    let event: Value =
        serde_json::from_str(relay.stdout().lines().nth(1).expect("line")).expect("JSON");
    assert_eq!(event["payload"]["id"], 22, "{event}");
    assert!(
        relay.stderr().contains("listen_notify"),
        "{}",
        relay.stderr()
    );
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capture_with_notify_wakes_the_relay_for_raw_sql() {
    let schema = TestSchema::new(4).await;
    let channel = format!("cap_{}", schema.name);
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
    outbox.migrate().await.expect("migrate");
    sqlx::raw_sql("CREATE TABLE items (id int PRIMARY KEY, qty int NOT NULL)")
        .execute(&schema.pool)
        .await
        .expect("create table");
    let dir = TempDir::new("capture-notify");
    let config = dir.write(
        "hare-outbox.toml",
        &format!(
            "[relay]\npoll_interval_seconds = 30\n\n[delivery]\nkind = \"stdout\"\n\n[wakeup]\nkind = \"listen_notify\"\nchannel = \"{channel}\"\n\n[[capture]]\ntable = \"items\"\nlabel = \"shop.item\"\nnotify = \"{channel}\"\n"
        ),
    );
    let url = schema.url_with_search_path();
    let (code, _, stderr) = crate::support::run(
        hare_outbox(dir.path())
            .args(["capture", "install", "--config"])
            .arg(&config)
            .env("HARE_OUTBOX_DATABASE_URL", &url),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let exec = |sql: &'static str| {
        let pool = schema.pool.clone();
        async move {
            sqlx::raw_sql(sql).execute(&pool).await.expect(sql);
        }
    };
    // Found by the first poll; after it the relay waits 30 s.
    exec("INSERT INTO items VALUES (1, 0)").await;
    let mut relay = Proc::spawn(
        hare_outbox(dir.path())
            .args(["relay", "--config"])
            .arg(&config)
            .env("HARE_OUTBOX_DATABASE_URL", &url),
    );
    relay
        .wait_for_stdout("the first event", Duration::from_secs(30), |out| {
            out.lines().count() >= 1
        })
        .await;
    wait_for_listener(&schema, &channel).await;

    // Raw SQL: only the trigger's NOTIFY can bring it in time.
    exec("UPDATE items SET qty = 5 WHERE id = 1").await;
    let committed = Instant::now();
    relay
        .wait_for_stdout("the captured update", Duration::from_secs(30), |out| {
            out.lines().count() >= 2
        })
        .await;
    let took = committed.elapsed();
    assert!(
        took < Duration::from_secs(2),
        "delivered {took:?} after commit; the poll interval is 30 s"
    );
    let event: Value =
        serde_json::from_str(relay.stdout().lines().nth(1).expect("line")).expect("JSON");
    assert_eq!(event["topic"], "shop.item.updated", "{event}");
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", relay.stderr());
    schema.drop_schema().await;
}
