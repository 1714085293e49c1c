//! `serve` and `relay --http`: the dashboard, `/healthz` and `/metrics` on a free loopback port,
//! stopped by SIGTERM.

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use hare_outbox::postgres::PgBackend;
use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{Outbox, OutboxMessage, OutboxTable};
use hare_outbox_testkit::pg::TestSchema;
use hare_outbox_testkit::sqlite::TestDb;
use serde_json::{Value, json};

use crate::support::{Proc, TempDir, hare_outbox};

const TIMEOUT: Duration = Duration::from_secs(60);

/// `GET path` over HTTP/1.1 with `Connection: close`: (status, body).
pub(crate) fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head}"));
    // Chunked bodies keep their chunk sizes; the assertions only look for substrings.
    (status, body.to_owned())
}

/// The address `serve` printed: `dashboard on http://ADDR/`.
fn printed_address(stdout: &str) -> SocketAddr {
    stdout
        .lines()
        .find_map(|l| l.strip_prefix("dashboard on http://"))
        .and_then(|rest| rest.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("no address printed: {stdout}"))
}

async fn serve(url: String, write: impl std::future::Future<Output = ()>) {
    write.await;
    let dir = TempDir::new("serve");
    let config = dir.write("serve.toml", "[backlog]\nmax_dead = 5\n");
    let mut proc = Proc::spawn(
        hare_outbox(dir.path())
            .args(["serve", "--http", "127.0.0.1:0", "--config"])
            .arg(&config)
            .args(["--database-url", &url]),
    );
    proc.wait_for_stdout("the listening address", TIMEOUT, |out| {
        out.contains("dashboard on http://")
    })
    .await;
    let addr = printed_address(&proc.stdout());
    assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");

    let (status, body) = tokio::task::spawn_blocking(move || http_get(addr, "/healthz"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"ok\"") || body.contains("ok"), "{body}");
    let (status, body) = tokio::task::spawn_blocking(move || http_get(addr, "/"))
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        body.contains("erp.order.served"),
        "the journal page lists the event: {body}"
    );
    let (status, body) =
        tokio::task::spawn_blocking(move || http_get(addr, "/api/events?topic=erp.*"))
            .await
            .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("erp.order.served"), "{body}");

    proc.signal("TERM");
    let status = proc.wait(TIMEOUT).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", proc.stderr());
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_err(),
        "the port is closed after the stop"
    );
}

#[tokio::test]
async fn serve_answers_healthz_and_the_journal_page_and_stops_on_sigterm_on_sqlite() {
    let db = TestDb::new(2).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), OutboxTable::default());
    serve(db.url(), async {
        outbox.migrate().await.unwrap();
        let mut tx = db.pool.begin().await.unwrap();
        outbox
            .enqueue(
                &mut tx,
                OutboxMessage::new("erp.order.served", json!({"model": "orders", "pk": 1})),
            )
            .await
            .unwrap();
        tx.commit().await.unwrap();
    })
    .await;
    db.close().await;
}

#[tokio::test]
async fn serve_answers_healthz_and_the_journal_page_and_stops_on_sigterm_on_postgres() {
    let schema = TestSchema::new(2).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
    serve(schema.url_with_search_path(), async {
        outbox.migrate().await.unwrap();
        let mut tx = schema.pool.begin().await.unwrap();
        outbox
            .enqueue(
                &mut tx,
                OutboxMessage::new("erp.order.served", json!({"model": "orders", "pk": 1})),
            )
            .await
            .unwrap();
        tx.commit().await.unwrap();
    })
    .await;
    schema.drop_schema().await;
}

#[tokio::test]
async fn relay_http_serves_metrics_and_healthz_beside_the_relay() {
    let db = TestDb::new(2).await;
    let dir = TempDir::new("relay-http");
    // A free port: bound, read, released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = dir.write(
        "relay.toml",
        "[relay]\npoll_interval_seconds = 0.1\n\n[delivery]\nkind = \"stdout\"\n\n[backlog]\nmax_pending = 100\n",
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
    hare_outbox_testkit::wait_for("the outbox table", TIMEOUT, || {
        let outbox = outbox.clone();
        let pool = db.pool.clone();
        async move {
            let mut tx = pool.begin().await.ok()?;
            outbox
                .enqueue(
                    &mut tx,
                    OutboxMessage::new("erp.order.relayed", json!({"n": 1})),
                )
                .await
                .ok()?;
            tx.commit().await.ok()
        }
    })
    .await;
    relay
        .wait_for_stdout("the event delivered", TIMEOUT, |out| {
            out.contains("erp.order.relayed")
        })
        .await;
    let (status, body) = hare_outbox_testkit::wait_for("/healthz", TIMEOUT, || async move {
        tokio::task::spawn_blocking(move || {
            TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
            Some(http_get(addr, "/healthz"))
        })
        .await
        .ok()
        .flatten()
    })
    .await;
    assert_eq!(status, 200, "{body}");
    let metrics = hare_outbox_testkit::wait_for("the delivery counter", TIMEOUT, || async move {
        let (status, body) = tokio::task::spawn_blocking(move || http_get(addr, "/metrics"))
            .await
            .ok()?;
        (status == 200 && body.contains("hare_outbox_delivered_total")).then_some(body)
    })
    .await;
    assert!(metrics.contains("erp.order.relayed"), "{metrics}");
    let lines: Vec<Value> = relay
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1, "stdout holds only the delivered events");

    relay.signal("TERM");
    let status = relay.wait(TIMEOUT).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", relay.stderr());
    db.close().await;
}

/// `POST path` with a JSON body and optional bearer token: (status, body).
fn http_post(addr: SocketAddr, path: &str, body: &str, token: Option<&str>) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let response = String::from_utf8_lossy(&response).into_owned();
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {head}"));
    (status, body.to_owned())
}

#[tokio::test]
async fn serve_takes_the_dashboard_token_from_the_environment_or_a_file_never_the_config() {
    let db = TestDb::new(2).await;
    let outbox = Outbox::new(SqliteBackend::new(db.pool.clone()), OutboxTable::default());
    outbox.migrate().await.unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let dead = outbox
        .enqueue(&mut tx, OutboxMessage::new("doc.failed", json!({"n": 1})))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let mark_dead = || async {
        sqlx::query("UPDATE hare_outbox SET dead_lettered_at = '2026-01-01T00:00:00.000000Z', attempts = 5 WHERE sequence = $1")
            .bind(dead.sequence)
            .execute(&db.pool)
            .await
            .unwrap();
    };
    let dir = TempDir::new("serve-token");
    dir.write("token.txt", "token-from-file-42\n");
    let with_file = dir.write("file.toml", "[dashboard]\ntoken_file = \"token.txt\"\n");
    let plain = dir.write("plain.toml", "");
    let cases = [
        (
            plain.clone(),
            Some("token-from-env-42"),
            "token-from-env-42",
        ),
        (with_file, None, "token-from-file-42"),
    ];
    for (config, env, token) in cases {
        mark_dead().await;
        let mut command = hare_outbox(dir.path());
        command
            .args(["serve", "--http", "127.0.0.1:0", "--config"])
            .arg(&config)
            .args(["--database-url", &db.url()]);
        if let Some(env) = env {
            command.env("HARE_OUTBOX_DASHBOARD_TOKEN", env);
        }
        let mut proc = Proc::spawn(&mut command);
        proc.wait_for_stdout("the listening address", TIMEOUT, |out| {
            out.contains("dashboard on http://")
        })
        .await;
        let addr = printed_address(&proc.stdout());
        let body = r#"{"topics": ["doc.*"]}"#;
        let (status, answer) = tokio::task::spawn_blocking(move || {
            http_post(
                addr,
                "/api/dead-letters/retry",
                body,
                Some("wrong-token-0000"),
            )
        })
        .await
        .unwrap();
        assert!(status == 401 || status == 403, "{status} {answer}");
        let token = token.to_owned();
        let (status, answer) = tokio::task::spawn_blocking(move || {
            http_post(addr, "/api/dead-letters/retry", body, Some(&token))
        })
        .await
        .unwrap();
        assert_eq!(status, 200, "{answer}");
        assert!(answer.contains("\"retried\":1"), "{answer}");
        proc.signal("TERM");
        assert_eq!(
            proc.wait(TIMEOUT).await.code(),
            Some(0),
            "{}",
            proc.stderr()
        );
    }

    // A token in the config file itself is refused without echoing it; so is a short one.
    let in_file = dir.write("secret.toml", "[dashboard]\ntoken = \"leaked-token-99\"\n");
    let (code, _, stderr) = crate::support::run(
        hare_outbox(dir.path())
            .args(["serve", "--http", "127.0.0.1:0", "--config"])
            .arg(&in_file)
            .args(["--database-url", &db.url()]),
        TIMEOUT,
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("token_env") && !stderr.contains("leaked-token-99"),
        "{stderr}"
    );
    let (code, _, stderr) = crate::support::run(
        hare_outbox(dir.path())
            .args(["serve", "--http", "127.0.0.1:0", "--config"])
            .arg(&plain)
            .args(["--database-url", &db.url()])
            .env("HARE_OUTBOX_DASHBOARD_TOKEN", "short"),
        TIMEOUT,
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("HARE_OUTBOX_DASHBOARD_TOKEN") && stderr.contains("too short"),
        "{stderr}"
    );
    db.close().await;
}
