//! `hare-outbox relay` against PostgreSQL, delivering to a webhook receiver: events written by
//! another process (this test, through its own pool), in order per key, signed; a relay killed
//! mid-delivery loses nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

use hare_outbox::postgres::PgBackend;
use hare_outbox::webhook::verify_signature;
use hare_outbox::{EVENT_ID_HEADER, Outbox, OutboxMessage, OutboxTable};
use hare_outbox_testkit::http::{Behaviour, Receiver, RecordedRequest};
use hare_outbox_testkit::pg::TestSchema;
use serde_json::json;
use uuid::Uuid;

use crate::support::{Proc, TempDir, hare_outbox};

const SECRET: &str = "test-secret-7d1c";

/// Writes `rounds` events for each of `keys` ordering keys, one transaction per round, and returns
/// their ids in writing order.
async fn write_events(
    schema: &TestSchema,
    outbox: &Outbox<PgBackend>,
    keys: u32,
    rounds: std::ops::Range<u32>,
) -> Vec<Uuid> {
    let mut ids = Vec::new();
    for round in rounds {
        let mut tx = schema.pool.begin().await.expect("begin");
        for key in 0..keys {
            let message = OutboxMessage::new(
                "doc.updated",
                json!({"id": key, "entity": "sales_order", "round": round}),
            )
            .ordering_key(format!("sales_orders:{key}"))
            .header("author", "Администратор");
            ids.push(outbox.enqueue(&mut tx, message).await.expect("enqueue").id);
        }
        tx.commit().await.expect("commit");
    }
    ids
}

fn event_id(request: &RecordedRequest) -> Uuid {
    let text = request
        .header_str(EVENT_ID_HEADER)
        .expect("event id header");
    Uuid::parse_str(text).expect("event id is a UUID")
}

/// The rounds each key's requests carried, in arrival order.
fn rounds_by_key(requests: &[RecordedRequest]) -> BTreeMap<i64, Vec<i64>> {
    let mut by_key: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for request in requests {
        let body = request.body_json();
        by_key
            .entry(body["id"].as_i64().expect("id"))
            .or_default()
            .push(body["round"].as_i64().expect("round"));
    }
    by_key
}

async fn assert_all_published(outbox: &Outbox<PgBackend>, ids: &[Uuid]) {
    for id in ids {
        let event = outbox.get(*id).await.expect("get").expect("event exists");
        assert!(
            event.published_at.is_some(),
            "event {id} is not published: {event:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_delivers_events_written_by_another_process_in_order_per_key() {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
    outbox.migrate().await.expect("migrate");
    let receiver = Receiver::start(Behaviour::ok());
    let dir = TempDir::new("relay-pg");
    let config = dir.write(
        "relay.toml",
        &format!(
            r#"
table = "hare_outbox"

[relay]
poll_interval_seconds = 0.1
batch_size = 10
lease_seconds = 10
delivery_timeout_seconds = 5

[delivery]
kind = "webhook"
url = "{}"
secret_env = "ERP_HOOK_SECRET"
timeout_seconds = 5

[delivery.headers]
x-source = "erp"
"#,
            receiver.url("/hooks/erp")
        ),
    );

    // Half of the events exist before the relay starts, half are written while it runs.
    let mut ids = write_events(&schema, &outbox, 10, 0..10).await;
    let mut relay = Proc::spawn(
        hare_outbox(dir.path())
            .args(["relay", "--config"])
            .arg(&config)
            .env("HARE_OUTBOX_DATABASE_URL", schema.url_with_search_path())
            .env("ERP_HOOK_SECRET", SECRET),
    );
    ids.extend(write_events(&schema, &outbox, 10, 10..20).await);
    assert_eq!(ids.len(), 200);

    receiver
        .wait_for_requests(200, Duration::from_secs(60))
        .await;
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(
        status.code(),
        Some(0),
        "relay exit after SIGTERM; stderr:\n{}",
        relay.stderr()
    );
    // Everything the receiver got, including anything sent while stopping.
    let requests = receiver.requests();

    // Every event exactly once (no lease expired, so no second delivery), each signed.
    assert_eq!(requests.len(), 200, "one request per event");
    let seen: HashSet<Uuid> = requests.iter().map(event_id).collect();
    assert_eq!(seen, ids.iter().copied().collect::<HashSet<_>>());
    for request in &requests {
        assert_eq!(request.method, "POST");
        assert_eq!(request.path, "/hooks/erp");
        let signature = request
            .header_str("hare-outbox-signature")
            .expect("signature header");
        assert!(
            verify_signature(SECRET.as_bytes(), &request.body, signature),
            "bad signature {signature:?} on {}",
            String::from_utf8_lossy(&request.body)
        );
        assert_eq!(request.header_str("x-source"), Some("erp"));
        assert_eq!(request.header_str("hare-outbox-topic"), Some("doc.updated"));
        assert_eq!(request.header_str("author"), Some("Администратор"));
    }
    // Strictly in order per key.
    let by_key = rounds_by_key(&requests);
    assert_eq!(by_key.len(), 10);
    for (key, rounds) in &by_key {
        assert_eq!(rounds, &(0..20).collect::<Vec<i64>>(), "order of key {key}");
    }
    // Nothing left pending after the graceful stop.
    assert_all_published(&outbox, &ids).await;
    let stderr = relay.stderr();
    assert!(stderr.contains("SIGTERM"), "stderr:\n{stderr}");
    assert!(!stderr.contains(SECRET), "the secret must never be logged");
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_killed_mid_delivery_leaves_its_batch_to_the_next_relay() {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
    outbox.migrate().await.expect("migrate");
    // 3 keys × 3 events; the first batch holds the first event of each key.
    let ids = write_events(&schema, &outbox, 3, 0..3).await;
    // The receiver records each request at once but holds the answer far longer than any test.
    let receiver = Receiver::start(Behaviour::delayed(Duration::from_secs(300)));
    let dir = TempDir::new("relay-kill");
    let config = |lease: f64, timeout: f64| {
        format!(
            "[relay]\npoll_interval_seconds = 0.1\nlease_seconds = {lease}\ndelivery_timeout_seconds = {timeout}\nretry_base_seconds = 0.1\n\n[delivery]\nkind = \"webhook\"\nurl = \"{}\"\n",
            receiver.url("/hook")
        )
    };
    let first_config = dir.write("first.toml", &config(6.0, 5.0));
    let second_config = dir.write("second.toml", &config(2.0, 1.0));
    let relay_command = |file: &std::path::Path| {
        let mut command = hare_outbox(dir.path());
        command
            .args(["relay", "--config"])
            .arg(file)
            .env("HARE_OUTBOX_DATABASE_URL", schema.url_with_search_path());
        command
    };

    let mut first = Proc::spawn(&mut relay_command(&first_config));
    let held = receiver.wait_for_requests(3, Duration::from_secs(30)).await;
    // Mid-delivery: the requests arrived, no answer yet, nothing marked. Kill without warning.
    first.kill_hard();
    let held_ids: HashSet<Uuid> = held.iter().map(event_id).collect();
    assert_eq!(held_ids.len(), 3, "one event per key in the first batch");
    assert_eq!(held_ids, ids[..3].iter().copied().collect());
    for id in &held_ids {
        let event = outbox.get(*id).await.expect("get").expect("exists");
        assert!(
            event.published_at.is_none() && event.attempts == 0,
            "{event:?}"
        );
        assert!(
            event.leased_by.is_some(),
            "still leased by the dead relay: {event:?}"
        );
    }

    // The subscriber answers at once from now on; a second relay takes over after the lease.
    receiver.set_behaviour(Behaviour::ok());
    let mut second = Proc::spawn(&mut relay_command(&second_config));
    let all = receiver
        .wait_for_requests(3 + 9, Duration::from_secs(60))
        .await;
    let after_kill = &all[3..];

    // The held events were delivered a second time, with the same event id, once the lease expired.
    let first_arrival: HashMap<Uuid, std::time::Instant> =
        held.iter().map(|r| (event_id(r), r.received_at)).collect();
    for request in after_kill {
        if let Some(first_at) = first_arrival.get(&event_id(request)) {
            let gap = request.received_at.duration_since(*first_at);
            assert!(
                gap >= Duration::from_millis(5500),
                "redelivered {gap:?} after the first try: before the 6 s lease expired"
            );
        }
    }
    let redelivered: HashSet<Uuid> = after_kill
        .iter()
        .map(event_id)
        .filter(|id| held_ids.contains(id))
        .collect();
    assert_eq!(redelivered, held_ids, "each held event is delivered again");

    // Nothing lost: every event delivered after the kill, in order per key, and marked published.
    let delivered_after: HashSet<Uuid> = after_kill.iter().map(event_id).collect();
    assert_eq!(delivered_after, ids.iter().copied().collect::<HashSet<_>>());
    for (key, rounds) in rounds_by_key(after_kill) {
        assert_eq!(rounds, vec![0, 1, 2], "order of key {key} after the kill");
    }
    hare_outbox_testkit::wait_for("every event published", Duration::from_secs(10), || {
        let outbox = outbox.clone();
        let ids = ids.clone();
        async move {
            for id in &ids {
                let event = outbox.get(*id).await.ok()??;
                event.published_at?;
            }
            Some(())
        }
    })
    .await;
    assert_all_published(&outbox, &ids).await;

    second.signal("TERM");
    let status = second.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", second.stderr());
    schema.drop_schema().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_delivery_finishes_and_marks_the_batch_in_flight() {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
    outbox.migrate().await.expect("migrate");
    let ids = write_events(&schema, &outbox, 2, 0..1).await;
    // Each answer comes 1.5 s after its request: the signal arrives mid-delivery.
    let receiver = Receiver::start(Behaviour::delayed(Duration::from_millis(1500)));
    let dir = TempDir::new("relay-term");
    let config = dir.write(
        "relay.toml",
        &format!(
            "[relay]\npoll_interval_seconds = 0.1\n\n[delivery]\nkind = \"webhook\"\nurl = \"{}\"\n",
            receiver.url("/hook")
        ),
    );
    let mut relay = Proc::spawn(
        hare_outbox(dir.path())
            .args(["relay", "--config"])
            .arg(&config)
            .env("HARE_OUTBOX_DATABASE_URL", schema.url_with_search_path()),
    );
    receiver.wait_for_requests(2, Duration::from_secs(30)).await;
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", relay.stderr());
    // The batch in flight was answered and marked before the exit: nothing to deliver again.
    assert_all_published(&outbox, &ids).await;
    assert_eq!(receiver.request_count(), 2);
    schema.drop_schema().await;
}
