//! Secrets never printed, absurd values refused: database URLs with passwords or unknown
//! parameters, webhook URLs with tokens in the path or query, and out-of-range relay options,
//! through the real binary.

use std::time::Duration;

use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{Outbox, OutboxMessage, OutboxTable};
use hare_outbox_testkit::http::{Behaviour, Receiver};
use hare_outbox_testkit::pg::TestSchema;
use serde_json::json;

use crate::support::{Proc, TempDir, hare_outbox, run};

const WAIT: Duration = Duration::from_secs(60);

/// Runs `relay --config <file with text>` and returns (exit code, stderr).
async fn relay_with(text: &str) -> (i32, String) {
    let dir = TempDir::new("safe-input");
    let file = dir.write("hare-outbox.toml", text);
    let (code, _, stderr) = run(
        hare_outbox(dir.path())
            .args(["relay", "--config"])
            .arg(&file),
        WAIT,
    )
    .await;
    (code, stderr)
}

#[tokio::test]
async fn absurd_relay_values_exit_2_naming_key_value_and_range() {
    for (relay, expected) in [
        (
            "poll_interval_seconds = 0.000001",
            "poll_interval_seconds = 0.000001 is out of range; allowed 0.01 or more (seconds)",
        ),
        ("topics = []", "omit the topics key to take every topic"),
        ("concurrency = 1000000", "allowed 1 to 10000"),
        ("concurrency = 0", "allowed 1 to 10000"),
        (
            "lease_seconds = 0.001\ndelivery_timeout_seconds = 0.0005",
            "lease_seconds = 0.001 is out of range; allowed 1 or more (seconds)",
        ),
        (
            "delivery_timeout_seconds = 0.0005",
            "delivery_timeout_seconds = 0.0005 is out of range; allowed 0.01 or more (seconds)",
        ),
        (
            "lease_seconds = 3\ndelivery_timeout_seconds = 3",
            "delivery_timeout_seconds = 3 must be below lease_seconds = 3",
        ),
    ] {
        let (code, stderr) = relay_with(&format!(
            "database_url = \"sqlite:x.db\"\n[relay]\n{relay}\n"
        ))
        .await;
        assert_eq!(code, 2, "{relay}: {stderr}");
        assert!(stderr.contains(expected), "{relay}: {stderr}");
    }
}

#[tokio::test]
async fn secrets_in_the_config_file_exit_2_without_their_value() {
    for (url, named) in [
        (
            "postgres://app@db/erp?password=Hunter2x",
            "the parameter password",
        ),
        (
            "postgres://app@db/erp?sslpassword=Hunter2x",
            "the parameter sslpassword",
        ),
        (
            "postgres://app@db/erp?passfile=/run/Hunter2x",
            "the parameter passfile",
        ),
        (
            "postgres://app:Hunter2x@db/erp",
            "a password in the user info",
        ),
    ] {
        let (code, stderr) = relay_with(&format!("database_url = \"{url}\"\n")).await;
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains(named), "{stderr}");
        assert!(stderr.contains("HARE_OUTBOX_DATABASE_URL"), "{stderr}");
        assert!(!stderr.contains("Hunter2x"), "{stderr}");
    }
    let (code, stderr) = relay_with(
        "database_url = \"sqlite:x.db\"\n[delivery]\nkind = \"webhook\"\nurl = \"https://h/in?token=Tok3nx\"\n",
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("carries a secret") && stderr.contains("url_env"),
        "{stderr}"
    );
    assert!(!stderr.contains("Tok3nx"), "{stderr}");
}

#[tokio::test]
async fn unknown_database_url_parameters_are_named_without_their_values() {
    let schema = TestSchema::new(1).await;
    let url = format!(
        "{}&sslpassword=SslSecret1&bogus_param=BogusValue1",
        schema.url_with_search_path()
    );
    let dir = TempDir::new("safe-input-params");
    // Trace level: the driver's own message (which prints values) is dropped at every level.
    let (code, _, stderr) = run(
        hare_outbox(dir.path())
            .args(["migrate", "--log-level", "trace"])
            .env("HARE_OUTBOX_DATABASE_URL", &url),
        WAIT,
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains("parameters the PostgreSQL driver ignores")
            && stderr.contains("sslpassword, bogus_param"),
        "{stderr}"
    );
    assert!(!stderr.contains("SslSecret1"), "{stderr}");
    assert!(!stderr.contains("BogusValue1"), "{stderr}");
    assert!(!stderr.contains("ignoring unrecognized"), "{stderr}");
    schema.drop_schema().await;
}

#[tokio::test]
async fn an_unreachable_database_is_named_with_its_password_hidden() {
    let dir = TempDir::new("safe-input-unreachable");
    let (code, _, stderr) = run(
        hare_outbox(dir.path()).arg("migrate").env(
            "HARE_OUTBOX_DATABASE_URL",
            "postgres://app:PwSecret1@127.0.0.1:1/erp?sslpassword=SslSecret1",
        ),
        WAIT,
    )
    .await;
    assert_ne!(code, 0, "{stderr}");
    assert!(
        stderr.contains("connecting to postgres://app:***@127.0.0.1:1/erp?sslpassword=*** failed"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("PwSecret1") && !stderr.contains("SslSecret1"),
        "{stderr}"
    );
}

/// A webhook URL from `url_env` with tokens in its path and query, answering 503 with a body
/// that echoes them: the relay log, `last_error`, the result record and `events --json` show
/// `webhook http://127.0.0.1:PORT/… answered 503 Service Unavailable`, no token; with
/// `url_public = true` the path shows and the query value stays hidden.
#[tokio::test]
async fn webhook_tokens_never_reach_the_log_the_table_or_the_journal() {
    for public in [false, true] {
        let receiver = Receiver::start(
            Behaviour::status(503).with_body("no hook PathSecret for token QuerySecret"),
        );
        let hook = receiver.url("/hook/T000/PathSecret?token=QuerySecret");
        let dir = TempDir::new("safe-input-webhook");
        dir.write(
            "hare-outbox.toml",
            &format!(
                "database_url = \"sqlite:erp.db\"\n\n[relay]\npoll_interval_seconds = 0.1\nretry_base_seconds = 30\nresult_column = \"delivery_result\"\n\n[delivery]\nkind = \"webhook\"\nurl_env = \"ERP_HOOK_URL\"\nurl_public = {public}\n"
            ),
        );
        let (code, _, stderr) = run(
            hare_outbox(dir.path())
                .arg("migrate")
                .env("ERP_HOOK_URL", &hook),
            WAIT,
        )
        .await;
        assert_eq!(code, 0, "{stderr}");
        let pool = hare_outbox::sqlite::connect(&format!(
            "sqlite:{}",
            dir.path().join("erp.db").display()
        ))
        .await
        .expect("open");
        let outbox = Outbox::new(SqliteBackend::new(pool.clone()), OutboxTable::default());
        let mut tx = pool.begin().await.expect("begin");
        let id = outbox
            .enqueue(&mut tx, OutboxMessage::new("doc.updated", json!({"id": 1})))
            .await
            .expect("enqueue")
            .id;
        tx.commit().await.expect("commit");

        let mut relay = Proc::spawn(
            hare_outbox(dir.path())
                .arg("relay")
                .env("ERP_HOOK_URL", &hook),
        );
        let deadline = std::time::Instant::now() + WAIT;
        let (last_error, record) = loop {
            let row: (Option<String>, Option<String>) =
                sqlx::query_as("SELECT last_error, delivery_result FROM hare_outbox WHERE id = ?")
                    .bind(id.to_string())
                    .fetch_one(&pool)
                    .await
                    .expect("select");
            if let (Some(error), Some(record)) = row {
                break (error, record);
            }
            assert!(std::time::Instant::now() < deadline, "{}", relay.stderr());
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        relay.signal("TERM");
        let status = relay.wait(WAIT).await;
        assert_eq!(status.code(), Some(0), "{}", relay.stderr());
        let (code, journal, stderr) = run(
            hare_outbox(dir.path())
                .args(["events", "--json"])
                .env("ERP_HOOK_URL", &hook),
            WAIT,
        )
        .await;
        assert_eq!(code, 0, "{stderr}");

        let shown = if public {
            format!(
                "webhook http://{}/hook/T000/PathSecret?token=*** answered 503 Service Unavailable",
                receiver.addr()
            )
        } else {
            format!(
                "webhook http://{}/… answered 503 Service Unavailable",
                receiver.addr()
            )
        };
        let log = relay.stderr();
        assert!(last_error.starts_with(&shown), "{last_error}");
        assert!(log.contains(&shown), "{log}");
        assert!(journal.contains(&shown), "{journal}");
        for text in [&last_error, &record, &log, &journal] {
            assert!(!text.contains("QuerySecret"), "{text}");
            if !public {
                assert!(!text.contains("PathSecret"), "{text}");
            }
        }
        pool.close().await;
    }
}
