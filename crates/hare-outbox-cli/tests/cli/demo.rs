//! `hare-outbox demo`: runs to completion by itself, prints one summary line, stops on Ctrl-C.

use std::time::Duration;

use crate::support::{Proc, TempDir, hare_outbox, run};

/// The demo's simulated users (their names start so).
const AUTHORS: &[&str] = &[
    "Администратор",
    "Иванова",
    "Петров",
    "Соколова",
    "Robot: MRP",
];

/// Parses `demo: written W, delivered D, failed F, dead X…` into (W, D, F, X).
fn summary(line: &str) -> (u64, u64, u64, u64) {
    let rest = line
        .strip_prefix("demo: ")
        .unwrap_or_else(|| panic!("not a summary line: {line:?}"));
    let numbers: Vec<u64> = rest
        .split(',')
        .map(|part| {
            part.split_whitespace()
                .nth(1)
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("cannot read {part:?} in {line:?}"))
        })
        .collect();
    assert_eq!(numbers.len(), 4, "{line:?}");
    (numbers[0], numbers[1], numbers[2], numbers[3])
}

#[tokio::test]
async fn demo_runs_to_completion_and_prints_one_summary_line() {
    let dir = TempDir::new("demo");
    let (code, stdout, stderr) = run(
        hare_outbox(dir.path()).args(["demo", "--events", "30", "--rate", "300"]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let last = stdout.lines().last().expect("some output");
    // Every change updates one document (one captured event); a change that opens a new
    // document first writes a `doc.inserted` event too.
    let (written, delivered, _failed, dead) = summary(last);
    assert!(written >= 30, "{last}");
    assert_eq!((delivered, dead), (written, 0), "{last}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("demo:")).count(),
        1,
        "exactly one summary line:\n{stdout}"
    );
    // One journal line per delivered update, with the object, the author (the transaction's
    // context, carried by the captured event) and the changed columns.
    let journal: Vec<&str> = stdout
        .lines()
        .filter(|l| l.contains("doc.updated") && l.contains("(was "))
        .collect();
    assert_eq!(journal.len(), 30, "{stdout}");
    assert!(journal.iter().all(|l| l.contains(" #")), "{stdout}");
    assert!(
        journal
            .iter()
            .all(|l| AUTHORS.iter().any(|a| l.contains(a))),
        "every line names its author:\n{stdout}"
    );
    // The bookkeeping column is not captured.
    assert!(!stdout.contains("updated_at"), "{stdout}");
    assert!(
        dir.path().join("hare-outbox-demo.db").is_file(),
        "the demo database is left for a look"
    );
}

#[tokio::test]
async fn demo_json_prints_events_and_a_summary_object() {
    let dir = TempDir::new("demo-json");
    let (code, stdout, stderr) = run(
        hare_outbox(dir.path()).args([
            "demo",
            "--events",
            "20",
            "--rate",
            "0",
            "--failure-rate",
            "0.3",
            "--json",
            "--database",
            "erp.db",
        ]),
        Duration::from_secs(60),
    )
    .await;
    assert_eq!(code, 0, "stdout:\n{stdout}\nstderr:\n{stderr}");
    let lines: Vec<serde_json::Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let (last, events) = lines.split_last().expect("lines");
    let written = last["summary"]["written"].as_u64().expect("written");
    let delivered = last["summary"]["delivered"].as_u64().expect("delivered");
    let dead = last["summary"]["dead"].as_u64().expect("dead");
    let held = last["summary"]["held"].as_u64().expect("held");
    assert!(written >= 20, "{last}");
    // A subscriber refusing 30% of attempts exhausts an event's five attempts now and then
    // (0.3^5 per event): that event is a dead letter, the later events of its key wait behind
    // it for a retry, every other one is delivered.
    assert_eq!(delivered + dead + held, written, "{last}");
    assert!(
        held == 0 || dead > 0,
        "events are held only behind a dead letter: {last}"
    );
    assert_eq!(last["summary"]["pending"], 0, "{last}");
    assert_eq!(events.len() as u64, delivered);
    let mut updates = 0;
    for event in events {
        let payload = &event["payload"];
        match event["topic"].as_str() {
            Some("doc.updated") => {
                updates += 1;
                assert_eq!(payload["operation"], "updated", "{payload}");
                assert!(payload["changed"].is_array(), "{payload}");
                assert!(payload["before"].is_object(), "{payload}");
            }
            Some("doc.inserted") => assert_eq!(payload["operation"], "inserted", "{payload}"),
            other => panic!("unexpected topic {other:?}: {event}"),
        }
        assert!(payload["model"].is_string(), "{payload}");
        let key = event["ordering_key"].as_str().expect("ordering key");
        assert!(
            key.ends_with(&format!(":{}", payload["pk"])),
            "{key} vs {payload}"
        );
        assert!(event["headers"]["author"].is_string(), "{event}");
    }
    assert!(
        updates <= 20 && updates + dead >= 20,
        "one update per change: {updates} delivered, {dead} dead"
    );
    assert!(dir.path().join("erp.db").is_file());
}

#[tokio::test]
async fn demo_stops_on_ctrl_c_and_still_prints_the_summary() {
    let dir = TempDir::new("demo-int");
    let mut demo =
        Proc::spawn(hare_outbox(dir.path()).args(["demo", "--events", "100000", "--rate", "50"]));
    demo.wait_for_stdout("a few delivered events", Duration::from_secs(30), |out| {
        out.matches("doc.updated").count() >= 5
    })
    .await;
    demo.signal("INT");
    let status = demo.wait(Duration::from_secs(30)).await;
    let stdout = demo.stdout();
    assert_eq!(
        status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{}",
        demo.stderr()
    );
    let last = stdout.lines().last().expect("output");
    let (written, delivered, _, dead) = summary(last.split(" (").next().unwrap_or(last));
    assert!((5..100_000).contains(&written), "{last}");
    assert!(delivered + dead <= written, "{last}");
}

#[tokio::test]
async fn demo_refuses_out_of_range_options() {
    let dir = TempDir::new("demo-bad");
    let (code, _, stderr) = run(
        hare_outbox(dir.path()).args(["demo", "--failure-rate", "1.5"]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--failure-rate 1.5"), "{stderr}");
}

#[tokio::test]
async fn demo_serves_its_journal_on_the_dashboard_until_ctrl_c() {
    let dir = TempDir::new("demo-http");
    let mut demo = Proc::spawn(
        hare_outbox(dir.path())
            .args([
                "demo",
                "--events",
                "20",
                "--rate",
                "0",
                "--failure-rate",
                "0",
                "--http",
                "127.0.0.1:0",
            ])
            .env("HARE_OUTBOX_DASHBOARD_TOKEN", "demo-token-123"),
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !demo.stderr().contains("stay up until Ctrl-C") {
        assert!(
            std::time::Instant::now() < deadline,
            "the workload did not finish:\n{}",
            demo.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stderr = demo.stderr();
    assert!(stderr.contains("$HARE_OUTBOX_DASHBOARD_TOKEN"), "{stderr}");
    assert!(
        !stderr.contains("demo-token-123"),
        "the token was printed:\n{stderr}"
    );
    let addr: std::net::SocketAddr = stderr
        .split("dashboard on http://")
        .nth(1)
        .and_then(|rest| rest.split('/').next())
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no dashboard address in:\n{stderr}"));
    let (status, body) = tokio::task::spawn_blocking(move || {
        crate::serve::http_get(addr, "/api/events?topic=doc.updated&limit=5")
    })
    .await
    .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"doc.updated\""), "{body}");
    assert!(
        AUTHORS.iter().any(|a| body.contains(a)),
        "no author in the journal:\n{body}"
    );
    demo.signal("INT");
    let status = demo.wait(Duration::from_secs(30)).await;
    assert_eq!(status.code(), Some(0), "stderr:\n{}", demo.stderr());
    let last = demo.stdout().lines().last().unwrap_or_default().to_owned();
    let (written, delivered, _, dead) = summary(&last);
    assert_eq!((delivered, dead), (written, 0), "{last}");
}

#[tokio::test]
async fn demo_refuses_a_remote_dashboard_address() {
    let dir = TempDir::new("demo-remote");
    let (code, _stdout, stderr) = run(
        hare_outbox(dir.path()).args(["demo", "--http", "0.0.0.0:8080"]),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("0.0.0.0:8080") && stderr.contains("loopback"),
        "{stderr}"
    );
}
