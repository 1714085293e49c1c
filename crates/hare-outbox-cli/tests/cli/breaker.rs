//! Circuit breakers and rate limits from the config file: `[relay]` and per-delivery keys, the
//! open destination in `relay --http`'s `/api/destinations`, `/healthz`, `/metrics` and page,
//! `backlog --relay`, and the keys' mistakes.

use std::net::SocketAddr;
use std::time::Duration;

use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{Outbox, OutboxMessage, OutboxTable};
use hare_outbox_testkit::http::{Behaviour, Receiver};
use hare_outbox_testkit::sqlite::TestDb;
use hare_outbox_testkit::wait_for;
use serde_json::{Value, json};

use crate::serve::http_get;
use crate::support::{Proc, TempDir, hare_outbox, run};

const TIMEOUT: Duration = Duration::from_secs(60);

fn free_addr() -> SocketAddr {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("127.0.0.1:{port}").parse().unwrap()
}

async fn get(addr: SocketAddr, path: &'static str) -> Option<(u16, String)> {
    tokio::task::spawn_blocking(move || {
        std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
        Some(http_get(addr, path))
    })
    .await
    .ok()
    .flatten()
}

/// Two routes, billing down: billing opens after its own threshold and shows up everywhere an
/// operator looks, while shipping (rate-limited) delivers.
#[tokio::test]
async fn an_open_route_is_shown_by_the_relay_and_backlog() {
    let db = TestDb::new(2).await;
    let dir = TempDir::new("breaker");
    let billing = Receiver::start(Behaviour::status(503).with_body("billing is down"));
    let shipping = Receiver::start(Behaviour::ok());
    let addr = free_addr();
    let config = dir.write(
        "relay.toml",
        &format!(
            "[relay]\npoll_interval_seconds = 0.1\nretry_base_seconds = 0.1\nmax_delivery_attempts = 3\n\
             breaker_probe_interval_seconds = 30\nbreaker_probe_interval_max_seconds = 60\n\n\
             [deliveries.billing]\nkind = \"webhook\"\nurl = \"{}\"\nbreaker_failure_threshold = 2\n\n\
             [deliveries.shipping]\nkind = \"webhook\"\nurl = \"{}\"\nmax_per_second = 100\n\n\
             [[route]]\ntopic = \"billing.*\"\ndelivery = \"billing\"\n\n\
             [[route]]\ntopic = \"shipping.*\"\ndelivery = \"shipping\"\n\n\
             [backlog]\nmax_open_destinations = 0\n",
            billing.url("/in"),
            shipping.url("/in")
        ),
    );
    let mut relay = Proc::spawn(
        hare_outbox(dir.path())
            .args([
                "relay",
                "--migrate",
                "--http",
                &addr.to_string(),
                "--config",
            ])
            .arg(&config)
            .args(["--database-url", &db.url()]),
    );
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), OutboxTable::default());
    wait_for("the outbox table", TIMEOUT, || {
        let outbox = outbox.clone();
        let pool = db.pool.clone();
        async move {
            let mut tx = pool.begin().await.ok()?;
            for n in 0..4 {
                for topic in ["billing.invoiced", "shipping.sent"] {
                    outbox
                        .enqueue(&mut tx, OutboxMessage::new(topic, json!({"n": n})))
                        .await
                        .ok()?;
                }
            }
            tx.commit().await.ok()
        }
    })
    .await;
    shipping.wait_for_requests(4, TIMEOUT).await;

    let destinations: Value = wait_for("billing open", TIMEOUT, || async move {
        let (status, body) = get(addr, "/api/destinations").await?;
        let list: Value = serde_json::from_str(&body).ok()?;
        let open = list["destinations"]
            .as_array()?
            .iter()
            .any(|d| d["name"] == "billing" && d["state"] == "open");
        (status == 200 && open).then_some(list)
    })
    .await;
    let all = destinations["destinations"].as_array().unwrap();
    let billing_status = all.iter().find(|d| d["name"] == "billing").unwrap();
    assert!(
        billing_status["reason"].as_str().unwrap().contains("503"),
        "{billing_status}"
    );
    assert!(billing_status["opened_at"].is_string());
    assert!(billing_status["next_probe_at"].is_string());
    let shipping_status = all.iter().find(|d| d["name"] == "shipping").unwrap();
    assert_eq!(shipping_status["state"], "closed");
    assert_eq!(shipping_status["max_per_second"], 100.0);
    // Two failures opened it (its own threshold, the other two were in flight already); then
    // nothing until the probe in 30 s.
    let first_wave = billing.request_count();
    assert!((2..=4).contains(&first_wave), "{first_wave} requests");

    let (status, health) = get(addr, "/healthz").await.unwrap();
    assert_eq!(status, 503, "{health}");
    assert!(
        health.contains("open_destinations") && health.contains("billing"),
        "{health}"
    );
    let metrics = wait_for("the destination gauges", TIMEOUT, || async move {
        let (_, body) = get(addr, "/metrics").await?;
        body.contains("hare_outbox_destination_state")
            .then_some(body)
    })
    .await;
    let open_line = metrics
        .lines()
        .find(|l| {
            l.starts_with("hare_outbox_destination_state") && l.contains("destination=\"billing\"")
        })
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(open_line.ends_with(" 1"), "{open_line}");
    assert!(metrics.contains("hare_outbox_destination_opened_at_seconds"));
    assert_eq!(
        billing.request_count(),
        first_wave,
        "nothing more until the probe"
    );
    let (_, page) = get(addr, "/").await.unwrap();
    assert!(
        page.contains("Destinations") && page.contains("billing is down"),
        "the page shows the destination and why it opened"
    );

    let (code, stdout, stderr) = run(
        hare_outbox(dir.path())
            .args(["backlog", "--relay", &format!("http://{addr}"), "--config"])
            .arg(&config)
            .args(["--database-url", &db.url()]),
        TIMEOUT,
    )
    .await;
    assert_eq!(code, 4, "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("destination billing is open") && stdout.contains("503"),
        "{stdout}"
    );
    assert!(stderr.contains("max_open_destinations 0"), "{stderr}");

    relay.signal("TERM");
    let status = relay.wait(TIMEOUT).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", relay.stderr());
    assert!(
        relay.stderr().contains("destination opened"),
        "{}",
        relay.stderr()
    );
    db.close().await;
}

/// The breaker keys are checked like the others: the key, the value and what is allowed.
#[tokio::test]
async fn breaker_keys_are_checked_naming_the_key() {
    let dir = TempDir::new("breaker-keys");
    let cases = [
        (
            "[relay]\nbreaker_failure_threshold = 0\n",
            "breaker_failure_threshold = 0 is out of range; allowed 1 to 10000",
        ),
        (
            "[relay]\nbreaker_probe_interval_seconds = 0.001\n",
            "breaker_probe_interval_seconds = 0.001 is out of range; allowed 0.01 or more",
        ),
        (
            "[relay]\nbreaker_probe_interval_seconds = 10\nbreaker_probe_interval_max_seconds = 5\n",
            "breaker_probe_interval_max_seconds = 5 is below breaker_probe_interval_seconds = 10",
        ),
        ("[relay]\nbreaker = \"yes\"\n", "breaker"),
        (
            "[delivery]\nkind = \"stdout\"\nmax_per_second = 0\n",
            "max_per_second = 0 is not allowed",
        ),
        (
            "[delivery]\nkind = \"stdout\"\nbreaker_failure_threshold = -3\n",
            "breaker_failure_threshold = -3 is out of range",
        ),
        (
            "[relay]\nbreaker_probe_interval_seconds = 20\n\n[delivery]\nkind = \"stdout\"\nbreaker_probe_interval_max_seconds = 5\n",
            "[delivery]: breaker_probe_interval_max_seconds = 5 is below breaker_probe_interval_seconds = 20",
        ),
        ("[backlog]\nrelay_url = \"ftp://relay\"\n", "relay_url"),
    ];
    for (text, expected) in cases {
        let config = dir.write("bad.toml", text);
        let (code, stdout, stderr) = run(
            hare_outbox(dir.path())
                .args(["schema", "--config"])
                .arg(&config),
            TIMEOUT,
        )
        .await;
        assert_eq!(code, 2, "{text}\nstdout: {stdout}\nstderr: {stderr}");
        assert!(stderr.contains(expected), "{text}\n{stderr}");
    }
    let config = dir.write(
        "good.toml",
        "[relay]\nbreaker = false\n\n[delivery]\nkind = \"stdout\"\nbreaker = true\nbreaker_failure_threshold = 3\nmax_per_second = 0.5\n",
    );
    let (code, stdout, stderr) = run(
        hare_outbox(dir.path())
            .args(["schema", "--database-url", "sqlite:unused.db", "--config"])
            .arg(&config),
        TIMEOUT,
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("CREATE TABLE"), "{stdout}");
    let (code, _, stderr) = run(
        hare_outbox(dir.path()).args([
            "backlog",
            "--max-open-destinations",
            "0",
            "--database-url",
            "sqlite::memory:",
        ]),
        TIMEOUT,
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--max-open-destinations needs --relay"),
        "{stderr}"
    );
}
