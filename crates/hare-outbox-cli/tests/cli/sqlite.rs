//! `schema`, `migrate` and `relay` to stdout on a SQLite file, with the config file found in the
//! current directory.

use std::time::Duration;

use hare_outbox::sqlite::SqliteBackend;
use hare_outbox::{Outbox, OutboxMessage, OutboxTable};
use serde_json::{Value, json};

use crate::support::{Proc, TempDir, hare_outbox, run};

#[tokio::test]
async fn schema_prints_the_ddl_without_touching_the_database() {
    let dir = TempDir::new("schema");
    let (code, stdout, stderr) = run(
        hare_outbox(dir.path()).args([
            "schema",
            "--database-url",
            "sqlite:erp.db",
            "--table",
            "erp_events",
        ]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("CREATE TABLE"), "{stdout}");
    assert!(stdout.contains("erp_events"), "{stdout}");
    assert!(
        !dir.path().join("erp.db").exists(),
        "schema must not create the database"
    );
}

#[tokio::test]
async fn migrate_then_relay_prints_json_lines_and_stops_on_sigint() {
    let dir = TempDir::new("sqlite-relay");
    let db = dir.path().join("erp.db");
    // Found without --config: hare-outbox.toml in the current directory.
    dir.write(
        "hare-outbox.toml",
        "database_url = \"sqlite:erp.db\"\ntable = \"erp_outbox\"\n\n[relay]\npoll_interval_seconds = 0.1\n\n[delivery]\nkind = \"stdout\"\n",
    );
    let (code, _, stderr) = run(
        hare_outbox(dir.path()).arg("migrate"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    // Migrating twice is fine.
    let (code, _, stderr) = run(
        hare_outbox(dir.path()).arg("migrate"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");

    let pool = hare_outbox::sqlite::connect(&format!("sqlite:{}", db.display()))
        .await
        .expect("open");
    let outbox = Outbox::new(
        SqliteBackend::new(pool.clone()),
        OutboxTable::parse("erp_outbox").expect("table"),
    );
    let mut tx = pool.begin().await.expect("begin");
    for n in 0..5 {
        let message = OutboxMessage::new("doc.updated", json!({"id": 1, "n": n}))
            .ordering_key("sales_orders:1");
        outbox.enqueue(&mut tx, message).await.expect("enqueue");
    }
    tx.commit().await.expect("commit");

    let mut relay = Proc::spawn(hare_outbox(dir.path()).arg("relay"));
    relay
        .wait_for_stdout("5 JSON lines", Duration::from_secs(30), |out| {
            out.lines().count() >= 5
        })
        .await;
    relay.signal("INT");
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", relay.stderr());
    let lines: Vec<Value> = relay
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let order: Vec<i64> = lines
        .iter()
        .map(|l| l["payload"]["n"].as_i64().expect("n"))
        .collect();
    assert_eq!(
        order,
        vec![0, 1, 2, 3, 4],
        "stdout holds only the events, in order"
    );
    assert!(
        relay.stderr().contains("SIGINT"),
        "logs go to stderr:\n{}",
        relay.stderr()
    );
    pool.close().await;
}

#[tokio::test]
async fn result_column_keeps_each_webhook_answer() {
    use hare_outbox_testkit::http::{Behaviour, Receiver};
    let dir = TempDir::new("sqlite-result");
    let db = dir.path().join("erp.db");
    // The first attempt is refused with a body, the second accepted.
    let receiver = Receiver::start(Behaviour::statuses([500, 201]).with_body("queue full"));
    dir.write(
        "hare-outbox.toml",
        &format!(
            "database_url = \"sqlite:erp.db\"\n\n[relay]\npoll_interval_seconds = 0.1\nretry_base_seconds = 0.5\nresult_column = \"delivery_result\"\n\n[delivery]\nkind = \"webhook\"\nurl = \"{}\"\n",
            receiver.url("/hook")
        ),
    );
    let (code, _, stderr) = run(
        hare_outbox(dir.path()).arg("migrate"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let pool = hare_outbox::sqlite::connect(&format!("sqlite:{}", db.display()))
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

    let mut relay = Proc::spawn(hare_outbox(dir.path()).arg("relay"));
    let mut seen = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // The column holds the last attempt's record: first the 500, then the 201.
    loop {
        let (result, published): (Option<String>, Option<String>) =
            sqlx::query_as("SELECT delivery_result, published_at FROM hare_outbox WHERE id = ?")
                .bind(id.to_string())
                .fetch_one(&pool)
                .await
                .expect("select");
        if let Some(result) = result {
            let value: Value = serde_json::from_str(&result).expect("JSON");
            if seen.last() != Some(&value) {
                seen.push(value);
            }
        }
        if published.is_some() && seen.len() >= 2 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "seen {seen:?}\n{}",
            relay.stderr()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", relay.stderr());
    let last = seen.last().expect("a record");
    assert_eq!(last["status_code"], 201, "{seen:?}");
    assert!(
        seen.iter()
            .any(|r| r["status_code"] == 500 && r["body"] == "queue full"),
        "{seen:?}"
    );
    pool.close().await;
}

#[tokio::test]
async fn result_column_must_be_a_plain_name() {
    let dir = TempDir::new("sqlite-result-bad");
    dir.write(
        "hare-outbox.toml",
        "database_url = \"sqlite:erp.db\"\n\n[relay]\nresult_column = \"attempts\"\n",
    );
    let (code, _, stderr) = run(
        hare_outbox(dir.path()).arg("migrate"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("result_column") && stderr.contains("\"attempts\""),
        "{stderr}"
    );
    assert!(!dir.path().join("erp.db").exists());
}

#[tokio::test]
async fn a_second_sigterm_exits_at_once_with_143() {
    use hare_outbox_testkit::http::{Behaviour, Receiver};
    let dir = TempDir::new("sqlite-sigterm-twice");
    let db = dir.path().join("erp.db");
    // The receiver holds the request far longer than the test waits.
    let receiver = Receiver::start(Behaviour::delayed(Duration::from_secs(120)));
    dir.write(
        "hare-outbox.toml",
        &format!(
            "database_url = \"sqlite:erp.db\"\n\n[relay]\npoll_interval_seconds = 0.1\nlease_seconds = 300\ndelivery_timeout_seconds = 200\n\n[delivery]\nkind = \"webhook\"\nurl = \"{}\"\n",
            receiver.url("/hook")
        ),
    );
    let (code, _, stderr) = run(
        hare_outbox(dir.path()).arg("migrate"),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    let pool = hare_outbox::sqlite::connect(&format!("sqlite:{}", db.display()))
        .await
        .expect("open");
    let outbox = Outbox::new(SqliteBackend::new(pool.clone()), OutboxTable::default());
    let mut tx = pool.begin().await.expect("begin");
    outbox
        .enqueue(&mut tx, OutboxMessage::new("doc.updated", json!({"id": 1})))
        .await
        .expect("enqueue");
    tx.commit().await.expect("commit");
    pool.close().await;

    let mut relay = Proc::spawn(hare_outbox(dir.path()).arg("relay"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while receiver.request_count() == 0 {
        assert!(std::time::Instant::now() < deadline, "{}", relay.stderr());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The first SIGTERM waits for the batch in flight…
    relay.signal("TERM");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !relay.stderr().contains("SIGTERM received") {
        assert!(std::time::Instant::now() < deadline, "{}", relay.stderr());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // …the second one does not.
    relay.signal("TERM");
    let status = relay.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(143), "stderr:\n{}", relay.stderr());
    assert!(
        relay.stderr().contains("received again"),
        "{}",
        relay.stderr()
    );
}
