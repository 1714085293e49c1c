//! Test helpers of hare-outbox: isolated databases per test (a PostgreSQL schema, a SQLite file),
//! a real HTTP receiver on loopback, recording deliveries, and the conformance suites every database
//! backend runs ([`conformance`]). Not published.

pub mod conformance;
pub mod http;
pub mod logs;
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
