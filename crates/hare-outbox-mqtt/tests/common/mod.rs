//! Helpers of the MQTT tests: the shared Mosquitto, a Mosquitto of the test's own as a child
//! process, a recording QoS 1 subscriber, events, a PostgreSQL outbox.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hare_outbox_core::{Outbox, OutboxEvent, OutboxTable};
use hare_outbox_postgres::PgBackend;
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::wait_for;
use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use serde_json::Value;

/// Every wait of these tests is bounded by this unless it says otherwise.
pub const WAIT: Duration = Duration::from_secs(10);

/// The port of the shared Mosquitto: `HARE_OUTBOX_TEST_MQTT_PORT`, else 1883 (on 127.0.0.1).
pub fn port() -> u16 {
    std::env::var("HARE_OUTBOX_TEST_MQTT_PORT")
        .ok()
        .and_then(|p| p.parse().ok())
        .unwrap_or(1883)
}

/// A delivery URL for the broker on `port`, with a client id no other test uses.
pub fn url(port: u16) -> String {
    format!("mqtt://127.0.0.1:{port}?client_id={}", unique("pub"))
}

/// A name no other test uses: `hare_t_<prefix>_<random>`.
pub fn unique(prefix: &str) -> String {
    format!(
        "hare_t_{prefix}_{:012x}",
        uuid::Uuid::now_v7().as_u128() & 0xffff_ffff_ffff
    )
}

/// A port nothing listens on (bound and released).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// An event as the relay would hand it over.
pub fn event(topic: &str, key: Option<&str>, payload: Value) -> OutboxEvent {
    OutboxEvent {
        sequence: 1,
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

/// A QoS 1 subscriber to `<prefix>/#` that records every message (topic, payload) in arrival
/// order. Its session is persistent (clean_session = false) and it reconnects after a lost
/// connection, so with a broker that keeps sessions across restarts it misses nothing.
/// One received message: its topic and payload.
pub type Message = (String, Vec<u8>);

pub struct Subscriber {
    messages: Arc<Mutex<Vec<Message>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Subscriber {
    /// Subscribed (SUBACK received) when this returns.
    pub async fn start(port: u16, prefix: &str) -> Subscriber {
        let mut options = MqttOptions::new(unique("sub"), "127.0.0.1", port);
        options.set_clean_session(false);
        options.set_keep_alive(Duration::from_secs(5));
        let (client, mut event_loop) = AsyncClient::new(options, 64);
        let filter = format!("{prefix}/#");
        let messages = Arc::new(Mutex::new(Vec::new()));
        let (subscribed_tx, subscribed_rx) = tokio::sync::oneshot::channel();
        let task = {
            let messages = Arc::clone(&messages);
            tokio::spawn(async move {
                let mut subscribed_tx = Some(subscribed_tx);
                loop {
                    match event_loop.poll().await {
                        Ok(Event::Incoming(Packet::ConnAck(_))) => {
                            // Again after every reconnect (harmless when the session kept it).
                            client
                                .try_subscribe(filter.clone(), QoS::AtLeastOnce)
                                .unwrap();
                        }
                        Ok(Event::Incoming(Packet::SubAck(_))) => {
                            if let Some(tx) = subscribed_tx.take() {
                                let _ = tx.send(());
                            }
                        }
                        Ok(Event::Incoming(Packet::Publish(p))) => {
                            messages.lock().unwrap().push((p.topic, p.payload.to_vec()));
                        }
                        Ok(_) => {}
                        // The broker is down: retry the connection, paced.
                        Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
                    }
                }
            })
        };
        tokio::time::timeout(WAIT, subscribed_rx)
            .await
            .expect("subscribed in time")
            .unwrap();
        Subscriber { messages, task }
    }

    pub fn messages(&self) -> Vec<(String, Vec<u8>)> {
        self.messages.lock().unwrap().clone()
    }

    /// Waits until at least `n` messages arrived, and returns them all.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Vec<(String, Vec<u8>)> {
        wait_for(&format!("{n} MQTT messages"), timeout, || async {
            let messages = self.messages();
            (messages.len() >= n).then_some(messages)
        })
        .await
    }
}

impl Subscriber {
    /// Waits until `n` distinct payloads arrived (duplicates not counted), and returns every
    /// message so far.
    pub async fn wait_for_distinct(&self, n: usize, timeout: Duration) -> Vec<(String, Vec<u8>)> {
        wait_for(&format!("{n} distinct MQTT messages"), timeout, || async {
            let messages = self.messages();
            let distinct: std::collections::HashSet<&Vec<u8>> =
                messages.iter().map(|(_, p)| p).collect();
            (distinct.len() >= n).then_some(messages.clone())
        })
        .await
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A Mosquitto of the test's own, on a free port, as a child process, keeping sessions and queued
/// messages across a restart (persistence, saved when it is stopped). Killed and its directory
/// removed on drop.
pub struct Mosquitto {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl Mosquitto {
    pub async fn start() -> Mosquitto {
        let dir = std::env::temp_dir().join(unique("mosquitto"));
        std::fs::create_dir_all(&dir).unwrap();
        let port = closed_port();
        std::fs::write(
            dir.join("mosquitto.conf"),
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\n\
                 persistence_location {}/\nlog_dest none\n",
                dir.display()
            ),
        )
        .unwrap();
        let mut server = Mosquitto {
            port,
            dir,
            child: None,
        };
        server.restart().await;
        server
    }

    /// Starts the process (again, on the same port and files) and waits until it accepts TCP.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("mosquitto")
            .arg("-c")
            .arg(self.dir.join("mosquitto.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mosquitto must be installed (Debian: apt-get install mosquitto)");
        self.child = Some(child);
        let port = self.port;
        wait_for(
            "the mosquitto child to accept connections",
            WAIT,
            || async {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .ok()
                    .map(drop)
            },
        )
        .await;
    }

    /// Stops the process with SIGTERM (it saves its persistence file on the way out) and waits
    /// for it to be gone.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
            let deadline = std::time::Instant::now() + WAIT;
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A fake MQTT broker on a free port that answers CONNECT with CONNACK and then never sends a
/// PUBACK: it stays silent, or with `hang_up` closes the connection once a PUBLISH arrived.
/// Counts the connections it accepted.
pub struct FakeBroker {
    pub port: u16,
    pub connections: Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl FakeBroker {
    pub async fn start(hang_up: bool) -> FakeBroker {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = Arc::clone(&connections);
        let task = tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 1 << 16];
                    let mut connected = false;
                    while let Ok(n) = socket.read(&mut buf).await {
                        if n == 0 {
                            return;
                        }
                        if !connected && buf[0] >> 4 == 1 {
                            connected = true;
                            // CONNACK, session not present, accepted.
                            socket.write_all(&[0x20, 0x02, 0x00, 0x00]).await.unwrap();
                        } else if connected && hang_up && buf[..n].iter().any(|b| b >> 4 == 3) {
                            return;
                        }
                    }
                });
            }
        });
        FakeBroker {
            port,
            connections,
            task,
        }
    }

    pub fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Waits until `n` connections were accepted.
    pub async fn wait_for_connections(&self, n: usize) {
        wait_for(
            &format!("{n} connections to the fake broker"),
            WAIT,
            || async { (self.connections() >= n).then_some(()) },
        )
        .await;
    }
}

impl Drop for FakeBroker {
    fn drop(&mut self) {
        self.task.abort();
    }
}
