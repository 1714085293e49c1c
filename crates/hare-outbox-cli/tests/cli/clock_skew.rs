//! Issue 13 item 4: two `hare-outbox relay` processes on one PostgreSQL outbox table, one with
//! its wall clock 15 s ahead (libfaketime), lease 10 s, each delivery taking 3.5 s. Leases are
//! judged by the database's clock, so the fast relay never takes a lease the other still holds:
//! every event is delivered exactly once, and both relays deliver some.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use hare_outbox::postgres::PgBackend;
use hare_outbox::{EVENT_ID_HEADER, Outbox, OutboxMessage, OutboxTable};
use hare_outbox_testkit::http::{Behaviour, Receiver};
use hare_outbox_testkit::pg::TestSchema;
use serde_json::json;

use crate::support::{Proc, TempDir, hare_outbox};

const KEYS: i64 = 8;
const ROUNDS: i64 = 3;
const SKEW: chrono::TimeDelta = chrono::TimeDelta::seconds(15);

/// libfaketime's preload library: `HARE_OUTBOX_TEST_LIBFAKETIME`, or where Debian's `faketime`
/// package and other distributions put it.
fn libfaketime() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("HARE_OUTBOX_TEST_LIBFAKETIME") {
        return Some(PathBuf::from(path));
    }
    [
        "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
        "/usr/lib/faketime/libfaketimeMT.so.1",
        "/usr/lib64/faketime/libfaketimeMT.so.1",
        "/usr/local/lib/faketime/libfaketimeMT.so.1",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|path| path.exists())
}

/// The timestamp that starts the first log line of `stderr` (`2026-12-04T19:25:50.372421Z  INFO …`).
fn first_log_time(stderr: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    stderr.lines().find_map(|line| {
        let stamp = line.split_whitespace().next()?;
        chrono::DateTime::parse_from_rfc3339(stamp)
            .ok()
            .map(|t| t.with_timezone(&chrono::Utc))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_15_s_ahead_never_takes_a_live_lease_and_each_event_goes_once() {
    let Some(faketime) = libfaketime() else {
        eprintln!(
            "SKIPPED a_relay_15_s_ahead_never_takes_a_live_lease_and_each_event_goes_once: \
             libfaketime not found (Debian: apt-get install faketime, or set \
             HARE_OUTBOX_TEST_LIBFAKETIME to libfaketimeMT.so.1)"
        );
        return;
    };
    let started = Instant::now();
    let schema = TestSchema::new(4).await;
    let outbox = Outbox::new(PgBackend::new(schema.pool.clone()), OutboxTable::default());
    outbox.migrate().await.expect("migrate");

    // Every delivery takes 3.5 s: a third of the lease, so each batch's lease is extended while
    // it is delivered, and a relay judging leases by its own clock would see the other's as
    // expired 5 s before they are.
    let receiver = Receiver::start(Behaviour::delayed(Duration::from_millis(3500)));
    let dir = TempDir::new("clock-skew");
    let config = |name: &str| {
        dir.write(
            &format!("{name}.toml"),
            &format!(
                "[relay]\nname = \"{name}\"\npoll_interval_seconds = 0.2\nbatch_size = 4\n\
                 max_events_per_key = 1\nconcurrency = 4\nlease_seconds = 10\n\
                 delivery_timeout_seconds = 6\n\n[delivery]\nkind = \"webhook\"\nurl = \"{}\"\n",
                receiver.url(&format!("/{name}"))
            ),
        )
    };
    let relay = |name: &str, ahead: bool| {
        let mut command = hare_outbox(dir.path());
        command
            .args(["relay", "--config"])
            .arg(config(name))
            .env("HARE_OUTBOX_DATABASE_URL", schema.url_with_search_path())
            .env("RUST_LOG", "info");
        if ahead {
            command
                .env("LD_PRELOAD", &faketime)
                .env("FAKETIME", "+15s")
                .env("FAKETIME_DONT_RESET", "1");
        }
        (Proc::spawn(&mut command), chrono::Utc::now())
    };
    let (mut on_time, _) = relay("on-time", false);
    let (mut ahead, spawned) = relay("ahead", true);
    for process in [&mut on_time, &mut ahead] {
        let deadline = Instant::now() + Duration::from_secs(15);
        while !process.stderr().contains("relay started") {
            assert!(
                Instant::now() < deadline && matches!(process.child.try_wait(), Ok(None)),
                "a relay did not start\nstderr:\n{}",
                process.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The clock really is ahead: the fast relay's first log line is stamped ~15 s after it was
    // started, the other's is not.
    let stamped = first_log_time(&ahead.stderr()).expect("a timestamped log line");
    let lead = stamped - spawned;
    assert!(
        lead > SKEW - chrono::TimeDelta::seconds(2) && lead < SKEW + chrono::TimeDelta::seconds(3),
        "the relay under libfaketime logs {lead} ahead of its start\n{}",
        ahead.stderr()
    );
    let on_time_lead =
        first_log_time(&on_time.stderr()).expect("a timestamped log line") - chrono::Utc::now();
    assert!(
        on_time_lead < chrono::TimeDelta::seconds(1),
        "{on_time_lead}"
    );

    // Written once both relays poll, so both get to lease from the start.
    let mut tx = schema.pool.begin().await.expect("begin");
    for round in 0..ROUNDS {
        for key in 0..KEYS {
            let message = OutboxMessage::new("doc.updated", json!({"key": key, "round": round}))
                .ordering_key(format!("k{key}"));
            outbox.enqueue(&mut tx, message).await.expect("enqueue");
        }
    }
    tx.commit().await.expect("commit");
    let total = (KEYS * ROUNDS) as usize;

    hare_outbox_testkit::wait_for("every event marked", Duration::from_secs(40), || {
        let pool = schema.pool.clone();
        async move {
            let pending: i64 =
                sqlx::query_scalar("SELECT count(*) FROM hare_outbox WHERE published_at IS NULL")
                    .fetch_one(&pool)
                    .await
                    .ok()?;
            (pending == 0).then_some(())
        }
    })
    .await;
    let drained = started.elapsed();
    // A duplicate would be a delivery still in flight: let any such request arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for process in [&mut on_time, &mut ahead] {
        process.signal("TERM");
        let status = process.wait(Duration::from_secs(15)).await;
        assert_eq!(status.code(), Some(0), "stderr:\n{}", process.stderr());
    }

    let requests = receiver.requests();
    let mut times: HashMap<String, Vec<String>> = HashMap::new();
    let mut per_key: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
    for request in &requests {
        times
            .entry(request.header_str(EVENT_ID_HEADER).expect("id").to_owned())
            .or_default()
            .push(request.path.clone());
        let body = request.body_json();
        per_key
            .entry(body["key"].as_i64().expect("key"))
            .or_default()
            .push(body["round"].as_i64().expect("round"));
    }
    let twice: Vec<&Vec<String>> = times.values().filter(|by| by.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "{} of {total} events delivered more than once (by {twice:?})",
        twice.len()
    );
    assert_eq!(times.len(), total, "every event delivered");
    for (key, rounds) in &per_key {
        assert_eq!(
            rounds,
            &(0..ROUNDS).collect::<Vec<_>>(),
            "key {key} in order"
        );
    }
    let by_ahead = receiver.requests_to("/ahead").len();
    let by_on_time = receiver.requests_to("/on-time").len();
    assert!(
        by_ahead > 0 && by_on_time > 0,
        "both relays deliver: {by_on_time} on time, {by_ahead} ahead"
    );
    eprintln!(
        "clock skew: the fast relay logged {lead} ahead; {total} events, each once \
         ({by_on_time} by the relay on time, {by_ahead} by the one 15 s ahead), drained {drained:?} \
         after the test started"
    );
    schema.drop_schema().await;
}
