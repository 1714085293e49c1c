//! The relay with a webhook delivery and a result column, on SQLite and PostgreSQL: each
//! attempt's `{status_code, body, error}` lands in the event's row; a URL refused by
//! `allows_url` is a recorded failure, retried once allowed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hare_outbox_core::{
    ColumnType, DeliveryError, Error, ExtraColumn, Outbox, OutboxEvent, OutboxMessage, OutboxRelay,
    OutboxTable, RelayConfig,
};
use hare_outbox_postgres::PgBackend;
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::http::{Behaviour, Receiver, unused_local_url};
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::sqlite::TestDb;
use hare_outbox_testkit::wait_for;
use hare_outbox_webhook::{RESULT_TEXT_CHARS, WebhookDelivery, WebhookTarget};
use serde_json::{Value, json};
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(15);

fn table() -> OutboxTable {
    OutboxTable::parse("outbox")
        .unwrap()
        .with_column(ExtraColumn::new("webhook_result", ColumnType::Json).unwrap())
        .unwrap()
        .with_column(ExtraColumn::new("note", ColumnType::Text).unwrap())
        .unwrap()
}

fn config() -> RelayConfig {
    RelayConfig::default()
        .with_poll_interval(Duration::from_millis(20))
        .with_retry_base(Duration::from_millis(20))
        .with_retry_max(Duration::from_millis(50))
        .with_max_delivery_attempts(50)
        .with_delivery_timeout(Duration::from_secs(5))
        .with_result_column("webhook_result")
}

/// The receivers of one scenario and the events written for them.
struct Scenario {
    _ok: Receiver,
    _failing: Receiver,
    _long: Receiver,
    allowed: Arc<AtomicBool>,
    ok: Uuid,
    failing: Uuid,
    long: Uuid,
    refused: Uuid,
    unreachable: Uuid,
    delivery: WebhookDelivery,
}

impl Scenario {
    fn new() -> (Scenario, Vec<OutboxMessage>) {
        let ok = Receiver::start(Behaviour::ok().with_body("accepted"));
        let failing = Receiver::start(Behaviour::status(500).with_body("database down\0"));
        let long = Receiver::start(Behaviour::ok().with_body("x".repeat(10_000)));
        let allowed = Arc::new(AtomicBool::new(false));
        let gate = allowed.clone();
        let delivery = WebhookDelivery::builder()
            .with_sync_target(|event: &OutboxEvent| {
                let url = event.payload["to"]
                    .as_str()
                    .ok_or_else(|| DeliveryError::new("no \"to\" in the payload"))?;
                Ok(WebhookTarget::new(url).with_secret("per-subscriber"))
            })
            .with_allows_url(move |url| url.path() != "/refused" || gate.load(Ordering::SeqCst))
            .build()
            .unwrap();
        let messages: Vec<OutboxMessage> = [
            ok.url("/ok"),
            failing.url("/fail"),
            long.url("/long"),
            ok.url("/refused"),
            unused_local_url("/gone"),
        ]
        .into_iter()
        .map(|to| OutboxMessage::new("subscriber.notified", json!({ "to": to })))
        .collect();
        let ids: Vec<Uuid> = (0..messages.len()).map(|_| Uuid::now_v7()).collect();
        let messages = messages
            .into_iter()
            .zip(&ids)
            .map(|(m, id)| m.id(*id))
            .collect();
        (
            Scenario {
                _ok: ok,
                _failing: failing,
                _long: long,
                allowed,
                ok: ids[0],
                failing: ids[1],
                long: ids[2],
                refused: ids[3],
                unreachable: ids[4],
                delivery,
            },
            messages,
        )
    }

    /// Runs one poll and checks every row's record; then allows the refused URL and polls until
    /// that event is delivered.
    async fn check<B: hare_outbox_core::backend::Backend>(self, outbox: Outbox<B>) {
        let relay = OutboxRelay::new(outbox.clone(), self.delivery.clone(), config()).unwrap();
        let outcome = relay.poll_once().await.unwrap();
        assert_eq!(outcome.leased, 5);
        assert_eq!(outcome.delivered, 2);
        assert_eq!(outcome.failed, 3);

        let get = |id: Uuid| {
            let outbox = outbox.clone();
            async move { outbox.get(id).await.unwrap().unwrap() }
        };
        let ok = get(self.ok).await;
        assert!(ok.published_at.is_some());
        assert_eq!(
            ok.extra["webhook_result"],
            json!({"status_code": 200, "body": "accepted", "error": null})
        );

        let failing = get(self.failing).await;
        assert!(failing.published_at.is_none());
        assert_eq!(failing.attempts, 1);
        let record = &failing.extra["webhook_result"];
        assert_eq!(record["status_code"], 500);
        assert_eq!(
            record["body"], "database down\u{FFFD}",
            "NUL stored as U+FFFD"
        );
        assert!(
            record["error"]
                .as_str()
                .unwrap()
                .contains("500 Internal Server Error"),
            "{record}"
        );

        let long = get(self.long).await;
        assert!(long.published_at.is_some());
        let body = long.extra["webhook_result"]["body"].as_str().unwrap();
        assert_eq!(body.chars().count(), RESULT_TEXT_CHARS, "cut to 4000");

        let refused = get(self.refused).await;
        assert!(refused.published_at.is_none());
        assert_eq!(refused.attempts, 1);
        assert!(
            refused
                .last_error
                .as_deref()
                .unwrap()
                .contains("allows_url"),
            "{:?}",
            refused.last_error
        );
        let record = &refused.extra["webhook_result"];
        assert_eq!(record["status_code"], Value::Null);
        assert_eq!(record["body"], Value::Null);
        assert!(
            record["error"].as_str().unwrap().contains("allows_url"),
            "{record}"
        );
        assert_eq!(
            self._ok.requests_to("/refused").len(),
            0,
            "a refused URL is never requested"
        );

        let unreachable = get(self.unreachable).await;
        let record = &unreachable.extra["webhook_result"];
        assert_eq!(record["status_code"], Value::Null);
        assert!(
            record["error"]
                .as_str()
                .unwrap()
                .contains("connecting failed"),
            "{record}"
        );
        assert_eq!(
            unreachable.extra["note"],
            Value::Null,
            "other columns untouched"
        );

        // Still refused: retried (attempts grow), still not sent.
        wait_for("a second refused attempt", WAIT, || async {
            relay.poll_once().await.unwrap();
            (get(self.refused).await.attempts >= 2).then_some(())
        })
        .await;
        assert_eq!(self._ok.requests_to("/refused").len(), 0);

        self.allowed.store(true, Ordering::SeqCst);
        let delivered = wait_for("the refused event, once allowed", WAIT, || async {
            relay.poll_once().await.unwrap();
            let event = get(self.refused).await;
            event.published_at.is_some().then_some(event)
        })
        .await;
        assert_eq!(self._ok.requests_to("/refused").len(), 1);
        assert_eq!(
            delivered.extra["webhook_result"],
            json!({"status_code": 200, "body": "accepted", "error": null}),
            "the latest attempt's record replaces the earlier one"
        );
    }
}

#[tokio::test]
async fn sqlite_result_column_holds_each_attempt() {
    let db = TestDb::new(4).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), table());
    outbox.migrate().await.unwrap();
    let (scenario, messages) = Scenario::new();
    let mut conn = db.pool.acquire().await.unwrap();
    for message in messages {
        outbox.enqueue(&mut conn, message).await.unwrap();
    }
    drop(conn);
    scenario.check(outbox).await;
}

#[tokio::test]
async fn postgres_result_column_holds_each_attempt() {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), table());
    outbox.migrate().await.unwrap();
    let (scenario, messages) = Scenario::new();
    let mut tx = schema.pool.begin().await.unwrap();
    for message in messages {
        outbox.enqueue(&mut tx, message).await.unwrap();
    }
    tx.commit().await.unwrap();
    scenario.check(outbox).await;
}

#[tokio::test]
async fn result_column_must_be_a_declared_json_column() {
    let db = TestDb::new(1).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), table());
    let delivery = WebhookDelivery::new("http://127.0.0.1:1/").unwrap();
    for (column, word) in [("missing", "not an extra column"), ("note", "Text")] {
        match OutboxRelay::new(
            outbox.clone(),
            delivery.clone(),
            config().with_result_column(column),
        ) {
            Err(Error::Configuration(message)) => {
                assert!(message.contains(column), "{message}");
                assert!(message.contains(word), "{message}");
            }
            other => panic!("expected a configuration error for {column}, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn without_a_result_column_nothing_is_written() {
    let db = TestDb::new(2).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), table());
    outbox.migrate().await.unwrap();
    let receiver = Receiver::start(Behaviour::ok().with_body("accepted"));
    let mut conn = db.pool.acquire().await.unwrap();
    let event = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("subscriber.notified", json!({})),
        )
        .await
        .unwrap();
    drop(conn);
    let mut config = config();
    config.result_column = None;
    let relay = OutboxRelay::new(
        outbox.clone(),
        WebhookDelivery::new(receiver.url("/h")).unwrap(),
        config,
    )
    .unwrap();
    assert_eq!(relay.poll_once().await.unwrap().delivered, 1);
    let stored = outbox.get(event.id).await.unwrap().unwrap();
    assert!(stored.published_at.is_some());
    assert_eq!(stored.extra["webhook_result"], Value::Null);
}

#[tokio::test]
async fn records_pass_through_a_topic_router() {
    let db = TestDb::new(2).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), table());
    outbox.migrate().await.unwrap();
    let receiver = Receiver::start(Behaviour::ok().with_body("routed"));
    let mut conn = db.pool.acquire().await.unwrap();
    let routed = outbox
        .enqueue(
            &mut conn,
            OutboxMessage::new("notify.user", json!({"user": 7})),
        )
        .await
        .unwrap();
    let unrouted = outbox
        .enqueue(&mut conn, OutboxMessage::new("billing.paid", json!({})))
        .await
        .unwrap();
    drop(conn);
    let router = hare_outbox_core::TopicRouter::new()
        .route(
            "notify.*",
            WebhookDelivery::new(receiver.url("/notify")).unwrap(),
        )
        .unwrap();
    let relay = OutboxRelay::new(outbox.clone(), router, config()).unwrap();
    let outcome = relay.poll_once().await.unwrap();
    assert_eq!((outcome.delivered, outcome.failed), (1, 1));
    let get = |id: Uuid| {
        let outbox = outbox.clone();
        async move { outbox.get(id).await.unwrap().unwrap() }
    };
    assert_eq!(
        get(routed.id).await.extra["webhook_result"],
        json!({"status_code": 200, "body": "routed", "error": null})
    );
    let unrouted = get(unrouted.id).await;
    assert_eq!(
        unrouted.extra["webhook_result"],
        Value::Null,
        "no route, no record: the column is left as it was"
    );
    assert!(unrouted.last_error.unwrap().contains("no route"));
}
