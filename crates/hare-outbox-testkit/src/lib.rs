//! Test helpers of hare-outbox: isolated databases per test (a PostgreSQL schema, a SQLite file),
//! a real HTTP receiver on loopback, recording deliveries, and the conformance suites every database
//! backend runs ([`conformance`]). Not published.

pub mod conformance;
pub mod http;
pub mod logs;
pub mod mysql;
pub mod net;
pub mod outage;
pub mod pg;
pub mod record;
pub mod scenario;
pub mod sqlite;

/// Polls `check` every 10 ms until it returns `Some`, or panics after `timeout` with `what`.
///
/// # Panics
/// When `timeout` passes first.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: std::time::Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The topics of the next signal on `sub` that names any, within `timeout`. Empty signals (the
/// "poll now" a wake-up sends after a reconnect) are skipped.
///
/// # Panics
/// When `timeout` passes first, the wake-up closes, or signals were missed.
pub async fn next_topics(
    sub: &mut hare_outbox_core::WakeupSubscription,
    timeout: std::time::Duration,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let signal = tokio::time::timeout_at(deadline, sub.recv())
            .await
            .expect("a signal within the wait")
            .expect("the wake-up is open")
            .expect("no signal was missed");
        if !signal.is_empty() {
            return signal.to_vec();
        }
    }
}
