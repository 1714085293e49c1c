//! Helpers of the Redis tests: the shared server, servers of their own as child processes, a
//! delaying TCP proxy, events, log capture, a PostgreSQL outbox.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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

/// The Redis the tests share: `HARE_OUTBOX_TEST_REDIS_URL`, else `redis://127.0.0.1:6379/0`. A set
/// URL that cannot be reached fails the tests; they are never skipped.
pub fn url() -> String {
    std::env::var("HARE_OUTBOX_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379/0".to_owned())
}

/// The TCP port of the shared Redis.
pub fn port() -> u16 {
    let client = redis::Client::open(url().as_str()).unwrap();
    match client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(_, port) => *port,
        other => panic!("the test Redis must be reached over TCP, not {other}"),
    }
}

/// A connection for reading back and cleaning up.
pub async fn connect(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("connecting to Redis at {url} failed: {e}"))
}

/// A name no other test uses: `hare_t_<prefix>_<random>`.
pub fn unique(prefix: &str) -> String {
    format!(
        "hare_t_{prefix}_{:012x}",
        uuid::Uuid::now_v7().as_u128() & 0xffff_ffff_ffff
    )
}

/// A port nothing listens on (bound and released; nothing else on this machine picks it at once).
pub fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
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

/// One stream entry as XRANGE returns it: the entry id and its field/value pairs in order.
pub type Entry = (String, Vec<(String, Vec<u8>)>);

/// Every entry of `stream`, oldest first.
pub async fn xrange(conn: &mut redis::aio::MultiplexedConnection, stream: &str) -> Vec<Entry> {
    let raw: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
        .arg(stream)
        .arg("-")
        .arg("+")
        .query_async(conn)
        .await
        .unwrap();
    raw.into_iter()
        .map(|(id, flat)| {
            let pairs = flat
                .chunks(2)
                .map(|pair| (String::from_utf8(pair[0].clone()).unwrap(), pair[1].clone()))
                .collect();
            (id, pairs)
        })
        .collect()
}

/// The value of `field` in `entry`, as text.
pub fn field(entry: &Entry, name: &str) -> String {
    let (_, pairs) = entry;
    let value = pairs
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no field {name} in {entry:?}"));
    String::from_utf8(value.1.clone()).unwrap()
}

pub async fn xlen(conn: &mut redis::aio::MultiplexedConnection, stream: &str) -> usize {
    redis::cmd("XLEN")
        .arg(stream)
        .query_async(conn)
        .await
        .unwrap()
}

pub async fn del(conn: &mut redis::aio::MultiplexedConnection, keys: &[&str]) {
    let _: i64 = redis::cmd("DEL").arg(keys).query_async(conn).await.unwrap();
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

/// A redis-server of the test's own, on a free port, as a child process. Writes go to an
/// append-only file fsynced on every write, so a killed server restarts with every entry it
/// acknowledged. Killed and its directory removed on drop.
pub struct RedisServer {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    pub async fn start() -> RedisServer {
        let dir = std::env::temp_dir().join(unique("redis"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut server = RedisServer {
            port: closed_port(),
            dir,
            child: None,
        };
        server.restart().await;
        server
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Starts the process (again, on the same port and files) and waits until it answers PING.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "already running");
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args([
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--daemonize",
                "no",
                "--dir",
            ])
            .arg(&self.dir)
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (Debian: apt-get install redis-server)");
        self.child = Some(child);
        let url = self.url();
        wait_for("the redis-server child to answer PING", WAIT, || {
            let url = url.clone();
            async move {
                let client = redis::Client::open(url.as_str()).ok()?;
                let mut conn = client.get_multiplexed_async_connection().await.ok()?;
                let pong: String = redis::cmd("PING").query_async(&mut conn).await.ok()?;
                (pong == "PONG").then_some(())
            }
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

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
