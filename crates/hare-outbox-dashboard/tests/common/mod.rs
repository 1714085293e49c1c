//! Shared set-up of the dashboard tests: an outbox on a database of the test's own, the
//! dashboard served on 127.0.0.1:0, events in every state.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod browser;

use std::net::SocketAddr;

use hare_outbox_core::backend::{Backend, JournalBackend};
use hare_outbox_core::{
    DeliveryError, FnDelivery, Journal, Outbox, OutboxMessage, OutboxRelay, OutboxTable,
    RelayConfig,
};
use hare_outbox_dashboard::{Dashboard, DashboardOptions};
use hare_outbox_postgres::PgBackend;
use hare_outbox_sqlite::SqliteBackend;
use hare_outbox_testkit::{pg::TestSchema, sqlite::TestDb};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// A token the tests configure.
pub const TOKEN: &str = "test-token-0123456789";

/// The dashboard served on loopback until dropped.
pub struct Served {
    pub base: String,
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Served {
    /// `base` + `path` (`path` starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{}", self.base, path)
    }

    /// Stops the server and waits for it.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Serves the dashboard of `outbox`'s table with `options` on 127.0.0.1, any free port.
pub async fn serve<B: JournalBackend>(outbox: &Outbox<B>, options: DashboardOptions) -> Served {
    let journal = Journal::new(outbox.backend().clone(), outbox.table().clone());
    let dashboard = Dashboard::new(journal, options).unwrap();
    let listener = dashboard
        .bind("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        dashboard
            .serve(listener, async {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    Served {
        base: format!("http://{addr}"),
        addr,
        stop: Some(stop),
        task: Some(task),
    }
}

/// An outbox table `hare_outbox` on a SQLite file of the test's own, migrated.
pub async fn sqlite_outbox() -> (TestDb, Outbox<SqliteBackend>) {
    let db = TestDb::new(4).await;
    let outbox = Outbox::new(
        SqliteBackend::new(db.pool.clone()),
        OutboxTable::parse("hare_outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    (db, outbox)
}

/// An outbox table `hare_outbox` in a PostgreSQL schema of the test's own, migrated.
pub async fn pg_outbox() -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse("hare_outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

/// Enqueues one event with an optional author, in a transaction of its own.
pub async fn enqueue<B: Backend>(
    outbox: &Outbox<B>,
    topic: &str,
    payload: Value,
    author: Option<&str>,
) {
    let mut message = OutboxMessage::new(topic, payload);
    if let Some(author) = author {
        message = message.header("author", author);
    }
    let mut tx = outbox.begin().await.unwrap();
    tx.enqueue(message).await.unwrap();
    tx.commit().await.unwrap();
}

/// Runs a relay over every event once: topics starting with `fail.` fail and are dead-lettered
/// at once (one attempt), the others are published.
pub async fn relay_once<B: Backend>(outbox: &Outbox<B>) {
    let relay = OutboxRelay::new(
        outbox.clone(),
        FnDelivery::new(|event| async move {
            if event.topic.starts_with("fail.") {
                Err(DeliveryError::new(format!(
                    "receiver refused {}",
                    event.topic
                )))
            } else {
                Ok(())
            }
        }),
        RelayConfig::default()
            .with_max_delivery_attempts(1)
            .with_batch_size(1000),
    )
    .unwrap();
    relay.poll_once().await.unwrap();
}

/// The standard journal of the listing tests, oldest first:
/// 3 × `doc.updated` about `sales_orders #1..3` by ann, 2 × `orders.created` by bob, 2 ×
/// `fail.webhook` (dead letters); all but the dead letters published.
pub async fn standard_journal<B: Backend>(outbox: &Outbox<B>) {
    for pk in 1..=3 {
        enqueue(
            outbox,
            "doc.updated",
            json!({"model": "sales_orders", "pk": pk, "operation": "updated",
                   "changed": ["status"], "before": {"status": "confirmed"},
                   "after": {"status": "shipped"}}),
            Some("ann"),
        )
        .await;
    }
    for n in 1..=2 {
        enqueue(outbox, "orders.created", json!({"order": n}), Some("bob")).await;
    }
    for n in 1..=2 {
        enqueue(outbox, "fail.webhook", json!({"hook": n}), None).await;
    }
    relay_once(outbox).await;
}

/// An HTTP client that follows no redirects.
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

/// GETs `url` and returns the status and the JSON body.
pub async fn get_json(url: &str) -> (u16, Value) {
    let response = client().get(url).send().await.unwrap();
    let status = response.status().as_u16();
    let body: Value = response.json().await.unwrap();
    (status, body)
}
