//! Helpers of the NATS tests: the shared server, servers of their own as child processes, a
//! delaying TCP proxy, events, log capture, a PostgreSQL outbox.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use async_nats::jetstream;
use hare_outbox_core::{Outbox, OutboxEvent, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use serde_json::{Map, Value};

#[allow(unused_imports)] // not every test binary uses every helper
pub use hare_outbox_testkit::logs::Logs;
#[allow(unused_imports)]
pub use hare_outbox_testkit::net::DelayProxy;

/// Every wait of these tests is bounded by this unless it says otherwise.
pub const WAIT: Duration = Duration::from_secs(10);

/// The NATS server (with JetStream) the tests share: `HARE_OUTBOX_TEST_NATS_URL`, else
/// `nats://127.0.0.1:4222`. A set URL that cannot be reached fails the tests; they are never
/// skipped.
pub fn url() -> String {
    std::env::var("HARE_OUTBOX_TEST_NATS_URL")
        .unwrap_or_else(|_| "nats://127.0.0.1:4222".to_owned())
}

/// The TCP port of the shared server.
pub fn port() -> u16 {
    let addr: async_nats::ServerAddr = url().parse().unwrap();
    addr.port()
}

/// A client for reading back and cleaning up.
pub async fn connect(url: &str) -> async_nats::Client {
    async_nats::connect(url)
        .await
        .unwrap_or_else(|e| panic!("connecting to NATS at {url} failed: {e}"))
}

/// A name no other test uses: `<prefix>_<random>` (upper case is fine for streams and subjects).
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{:012x}",
        uuid::Uuid::now_v7().as_u128() & 0xffff_ffff_ffff
    )
}

/// A port nothing listens on (bound and released; nothing else on this machine picks it at once).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Every message of stream `name`, oldest first.
pub async fn read_stream(
    client: &async_nats::Client,
    name: &str,
) -> Vec<jetstream::message::StreamMessage> {
    let js = jetstream::new(client.clone());
    let mut stream = js.get_stream(name).await.unwrap();
    let state = stream.info().await.unwrap().state.clone();
    let mut messages = Vec::new();
    if state.messages == 0 {
        return messages;
    }
    for seq in state.first_sequence..=state.last_sequence {
        messages.push(stream.get_raw_message(seq).await.unwrap());
    }
    messages
}

/// The number of messages stream `name` holds.
pub async fn stream_len(client: &async_nats::Client, name: &str) -> u64 {
    let js = jetstream::new(client.clone());
    let mut stream = js.get_stream(name).await.unwrap();
    stream.info().await.unwrap().state.messages
}

/// The value of header `name` of `message`.
pub fn header(message: &jetstream::message::StreamMessage, name: &str) -> Option<String> {
    message.headers.get(name).map(|v| v.as_str().to_owned())
}

/// Creates stream `name` on the subjects `<subject_root>.>`.
pub async fn create_stream(client: &async_nats::Client, name: &str, subject_root: &str) {
    jetstream::new(client.clone())
        .create_stream(jetstream::stream::Config {
            name: name.to_owned(),
            subjects: vec![format!("{subject_root}.>")],
            ..Default::default()
        })
        .await
        .unwrap();
}

pub async fn delete_stream(client: &async_nats::Client, name: &str) {
    let _ = jetstream::new(client.clone()).delete_stream(name).await;
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

/// A nats-server of the test's own, on a free port, as a child process; with JetStream storing
/// in a directory of its own when asked. Stopped and its directory removed on drop.
pub struct NatsServer {
    pub port: u16,
    dir: PathBuf,
    jetstream: bool,
    child: Option<Child>,
}

impl NatsServer {
    pub async fn start(jetstream: bool) -> NatsServer {
        let dir = std::env::temp_dir().join(unique("hare_t_nats"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = NatsServer {
            port: closed_port(),
            dir,
            jetstream,
            child: None,
        };
        server.restart().await;
        server
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the process (again, on the same port and store) and waits until it takes clients.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let mut command = Command::new("nats-server");
        command
            .args(["-a", "127.0.0.1", "-p"])
            .arg(self.port.to_string())
            .arg("-l")
            .arg(self.dir.join("nats.log"));
        if self.jetstream {
            command.arg("-js").arg("-sd").arg(self.dir.join("store"));
        }
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server must be installed (Debian: apt-get install nats-server)");
        self.child = Some(child);
        let url = self.url();
        let jetstream = self.jetstream;
        wait_for("the nats-server child to take clients", WAIT, || {
            let url = url.clone();
            async move {
                let client = async_nats::connect(url.as_str()).await.ok()?;
                if jetstream {
                    // JetStream answers its API once it is up.
                    client
                        .request("$JS.API.INFO", Vec::new().into())
                        .await
                        .ok()?;
                }
                Some(())
            }
        })
        .await;
    }

    /// Stops the process with SIGTERM (it closes every client connection) and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            let deadline = std::time::Instant::now() + WAIT;
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if std::time::Instant::now() >= deadline {
                    let _ = child.kill();
                    let _ = child.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
