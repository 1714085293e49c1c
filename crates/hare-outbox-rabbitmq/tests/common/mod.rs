//! Helpers of the RabbitMQ tests: the shared broker, exchanges and queues of each test's own,
//! events, a PostgreSQL outbox, closing one connection server-side.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hare_outbox_core::{Outbox, OutboxEvent, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_rabbitmq::lapin::message::BasicGetMessage;
use hare_outbox_rabbitmq::lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use hare_outbox_rabbitmq::lapin::types::{AMQPValue, FieldTable};
use hare_outbox_rabbitmq::lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use hare_outbox_testkit::pg::TestSchema;
use serde_json::{Map, Value};

/// Every wait of these tests is bounded by this unless it says otherwise.
pub const WAIT: Duration = Duration::from_secs(10);

/// The RabbitMQ broker the tests share: `HARE_OUTBOX_TEST_RABBITMQ_URL`, else
/// `amqp://guest:guest@127.0.0.1:5672/%2f`. A broker that cannot be reached fails the tests; they
/// are never skipped.
pub fn url() -> String {
    std::env::var("HARE_OUTBOX_TEST_RABBITMQ_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned())
}

/// A name no other test uses: `<prefix>_<random>`.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{:012x}",
        uuid::Uuid::now_v7().as_u128() & 0xffff_ffff_ffff
    )
}

/// A connection and channel of the test's own, for setting up, reading back and cleaning up.
pub struct Admin {
    pub connection: Connection,
    pub channel: Channel,
}

impl Admin {
    pub async fn connect() -> Admin {
        let connection = Connection::connect(
            &url(),
            ConnectionProperties::default().with_connection_name("hare-outbox test admin".into()),
        )
        .await
        .unwrap_or_else(|e| panic!("connecting to RabbitMQ at {} failed: {e}", url()));
        let channel = connection.create_channel().await.unwrap();
        Admin {
            connection,
            channel,
        }
    }

    /// Declares a non-durable exchange of `kind`.
    pub async fn exchange(&self, name: &str, kind: ExchangeKind) {
        self.channel
            .exchange_declare(
                name.into(),
                kind,
                ExchangeDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }

    /// Declares the queue `name` (durable, so persistent messages are kept as such) and, when
    /// `exchange` is given, binds it there with `routing_key`.
    pub async fn queue(&self, name: &str, binding: Option<(&str, &str)>) {
        self.channel
            .queue_declare(
                name.into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        if let Some((exchange, routing_key)) = binding {
            self.channel
                .queue_bind(
                    name.into(),
                    exchange.into(),
                    routing_key.into(),
                    QueueBindOptions::default(),
                    FieldTable::default(),
                )
                .await
                .unwrap();
        }
    }

    /// The next message of queue `name` (acknowledged at once), waiting for it up to [`WAIT`].
    pub async fn get(&self, queue: &str) -> BasicGetMessage {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let message = self
                .channel
                .basic_get(queue.into(), BasicGetOptions { no_ack: true })
                .await
                .unwrap();
            if let Some(message) = message {
                return message;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no message on queue {queue} within {WAIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The number of messages queue `name` holds.
    pub async fn depth(&self, queue: &str) -> u32 {
        self.channel
            .queue_declare(
                queue.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap()
            .message_count()
    }

    pub async fn delete_queue(&self, name: &str) {
        let _ = self
            .channel
            .queue_delete(name.into(), QueueDeleteOptions::default())
            .await;
    }

    pub async fn delete_exchange(&self, name: &str) {
        let _ = self
            .channel
            .exchange_delete(name.into(), ExchangeDeleteOptions::default())
            .await;
    }

    /// Whether exchange `name` exists (checked on a channel of its own: a failed passive
    /// declaration closes the channel).
    pub async fn exchange_exists(&self, name: &str) -> bool {
        let channel = self.connection.create_channel().await.unwrap();
        channel
            .exchange_declare(
                name.into(),
                ExchangeKind::Fanout,
                ExchangeDeclareOptions {
                    passive: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .is_ok()
    }
}

/// The text of an AMQP long-string header value.
pub fn text(value: &AMQPValue) -> String {
    match value {
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        other => panic!("not a long string: {other:?}"),
    }
}

/// An event as the relay would hand it over.
pub fn event(topic: &str, key: Option<&str>, payload: Value, headers: Value) -> OutboxEvent {
    let headers: Map<String, Value> = match headers {
        Value::Object(map) => map,
        Value::Null => Map::new(),
        other => panic!("headers must be an object, not {other}"),
    };
    OutboxEvent {
        sequence: 1,
        headers,
        ordering_key: key.map(str::to_owned),
        ..OutboxEvent::new(topic.to_owned(), payload)
    }
}

/// A PostgreSQL outbox in a schema of its own.
pub async fn pg_outbox() -> (TestSchema, Outbox<PgBackend>) {
    let schema = TestSchema::new(8).await;
    let outbox = Outbox::new(
        PgBackend::new(schema.pool.clone()),
        OutboxTable::parse("outbox").unwrap(),
    );
    outbox.migrate().await.unwrap();
    (schema, outbox)
}

/// The broker's process ids (as `rabbitmqctl list_connections pid` prints them, e.g.
/// `<rabbit@localhost.1796024285.2249.0>`) of the connections whose `connection_name` client
/// property is `connection_name` (through `rabbitmqctl`, which takes about a second).
pub async fn connections_named(connection_name: &str) -> Vec<String> {
    let output = tokio::process::Command::new("rabbitmqctl")
        .args([
            "-q",
            "--no-table-headers",
            "list_connections",
            "pid",
            "client_properties",
        ])
        .output()
        .await
        .expect("rabbitmqctl must be installed beside the broker");
    assert!(
        output.status.success(),
        "rabbitmqctl list_connections failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    // One line per connection: the pid, a tab, the client properties as Erlang terms, where the
    // name shows as `{"connection_name",longstr,"<name>"}`.
    let quoted = format!("\"{connection_name}\"");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_once('\t'))
        .filter(|(_, properties)| {
            properties.contains("connection_name") && properties.contains(&quoted)
        })
        .map(|(pid, _)| pid.trim().to_owned())
        .collect()
}

/// Closes the broker connection of process id `pid` (from [`connections_named`]), as an operator
/// would with `rabbitmqctl close_connection`.
pub async fn close_connection(pid: &str) {
    let output = tokio::process::Command::new("rabbitmqctl")
        .args([
            "-q",
            "close_connection",
            pid,
            "closed by a hare-outbox test",
        ])
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "rabbitmqctl close_connection failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The shared broker's port, from [`url`].
pub fn broker_port() -> u16 {
    let url = url();
    let authority = url
        .split_once("://")
        .map_or(url.as_str(), |(_, rest)| rest)
        .split('/')
        .next()
        .unwrap();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    host_port
        .rsplit_once(':')
        .map_or(5672, |(_, port)| port.parse().unwrap())
}

/// [`url`] with the host and port replaced by `127.0.0.1:<port>`.
pub fn url_via(port: u16) -> String {
    let url = url();
    let (scheme, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let user = authority
        .rsplit_once('@')
        .map_or(String::new(), |(u, _)| format!("{u}@"));
    format!("{scheme}://{user}127.0.0.1:{port}/{path}")
}
