//! The listener behind a broker wake-up: one task per wake-up object, shared by every relay that
//! subscribes to it.
//!
//! The task holds the only strong [`broadcast::Sender`]; the wake-up object keeps a weak one. So
//! the subscribers see the wake-up as closed exactly when the task ends — because it gave up, was
//! aborted by `close()`, or because the last subscriber went away — and the next `subscribe()`
//! after that starts a new task. Subscribing and the task's "anyone left?" check both run under
//! the state lock, so a subscriber never joins a task that is about to end.
//!
//! The broker crates (hare-outbox-redis, hare-outbox-nats, hare-outbox-kafka,
//! hare-outbox-rabbitmq) implement [`Source`] for their transport and get the sharing and the
//! reconnect rules from here: a listener never gives up while anyone subscribes. After
//! [`MAX_FAILURES`] failed attempts in a row it logs an ERROR (relays poll meanwhile) and goes on
//! retrying with a backoff capped at [`MAX_RECONNECT_DELAY`]. Every success that follows a lost
//! subscription or one or more failed attempts — including the first subscription of a listener
//! started during an outage — resets the count, logs `wake-up subscription restored` at INFO and
//! sends every subscriber an empty signal, so each relay polls once for the signals lost while
//! the subscription was down. Only a first attempt that succeeds at once logs at DEBUG.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use crate::error::BoxError;
use crate::wakeup::{Topics, WakeupSubscription};
use futures::StreamExt;
use futures::stream::BoxStream;
use tokio::sync::{broadcast, watch};
use tokio::task::AbortHandle;

/// Failed attempts in a row after which the listener logs an ERROR; it goes on retrying. Seed
/// 001 § Будильники gives up here for good; a wake-up that never comes back costs every relay
/// its latency until a restart, so this one keeps trying.
pub const MAX_FAILURES: u32 = 5;

/// Signals buffered per subscriber; a subscriber further behind gets one "missed signals" wake-up.
const SIGNAL_BUFFER: usize = 1024;

/// The longest one connect-and-subscribe attempt may take before it counts as a failure.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The pause before the first reconnect; each further one doubles it.
const FIRST_RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// The longest pause between two reconnects: 60 s.
pub const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(60);

/// The message payloads of one live subscription; the stream ends when the subscription breaks.
pub type Messages = BoxStream<'static, Vec<u8>>;

/// One connect-and-subscribe attempt.
pub type Connecting<'a> = Pin<Box<dyn Future<Output = Result<Messages, BoxError>> + Send + 'a>>;

/// The broker side of a listener.
pub trait Source: Send + Sync + 'static {
    /// Connects and subscribes. Returns once the broker confirmed the subscription, so a signal
    /// sent after that reaches it.
    fn connect(&self) -> Connecting<'_>;

    /// Where the listener listens, for logs (no password).
    fn describe(&self) -> String;

    /// The longest one [`Source::connect`] may take before it counts as a failure. Defaults to
    /// [`CONNECT_TIMEOUT`] (5 s).
    fn connect_timeout(&self) -> Duration {
        CONNECT_TIMEOUT
    }

    /// Whether the client reconnects and resubscribes by itself with [`reconnect_delay`] and
    /// stops after [`MAX_FAILURES`] failed reconnects in a row. Then the end of the message stream
    /// means it gave up: the listener logs an ERROR and connects anew after a capped backoff.
    fn reconnects_itself(&self) -> bool;
}

/// Starts, shares and stops the listener task of one wake-up object.
#[derive(Debug, Default)]
pub struct Listener {
    state: Arc<Mutex<Option<Running>>>,
}

#[derive(Debug)]
struct Running {
    id: u64,
    tx: broadcast::WeakSender<Topics>,
    /// Becomes `true` once the first attempt is over (subscribed or failed).
    ready: watch::Receiver<bool>,
    abort: AbortHandle,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Listener {
    /// A subscription to the running listener, or to a new one started for `source`. Waits until
    /// the listener's first attempt is over (at most `wait`), so that a signal sent right after a
    /// successful subscribe is received.
    pub async fn subscribe(&self, source: &Arc<dyn Source>, wait: Duration) -> WakeupSubscription {
        let (rx, mut ready) = {
            let mut state = lock(&self.state);
            let joined = state.as_ref().and_then(|running| {
                running
                    .tx
                    .upgrade()
                    .map(|tx| (tx.subscribe(), running.ready.clone()))
            });
            match joined {
                Some(joined) => joined,
                None => {
                    let (tx, rx) = broadcast::channel(SIGNAL_BUFFER);
                    let (ready_tx, ready_rx) = watch::channel(false);
                    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
                    let weak = tx.downgrade();
                    let task =
                        tokio::spawn(listen(source.clone(), tx, ready_tx, self.state.clone(), id));
                    *state = Some(Running {
                        id,
                        tx: weak,
                        ready: ready_rx.clone(),
                        abort: task.abort_handle(),
                    });
                    (rx, ready_rx)
                }
            }
        };
        // An error means the task already ended: the subscription reports the wake-up closed.
        let _ = tokio::time::timeout(wait, ready.wait_for(|done| *done)).await;
        WakeupSubscription::new(rx)
    }

    /// Stops the listener task; its subscribers see the wake-up closed. A later
    /// [`Listener::subscribe`] starts a new one.
    pub fn close(&self) {
        if let Some(running) = lock(&self.state).take() {
            running.abort.abort();
        }
    }

    /// Whether a listener task is running (it may be between reconnects).
    #[cfg(test)]
    pub fn is_running(&self) -> bool {
        lock(&self.state)
            .as_ref()
            .is_some_and(|running| running.tx.upgrade().is_some())
    }
}

type State = Arc<Mutex<Option<Running>>>;

fn lock(state: &Mutex<Option<Running>>) -> MutexGuard<'_, Option<Running>> {
    // The state is a plain value that every writer leaves consistent; a panic elsewhere while
    // holding the lock does not make it invalid.
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The listener task: connect, forward signals, reconnect with a capped backoff, log an ERROR
/// after [`MAX_FAILURES`] failures in a row and keep retrying, stop when nobody listens any more.
async fn listen(
    source: Arc<dyn Source>,
    tx: broadcast::Sender<Topics>,
    ready: watch::Sender<bool>,
    state: State,
    id: u64,
) {
    let what = source.describe();
    let mut failures: u32 = 0;
    let mut subscribed_before = false;
    loop {
        let attempt = tokio::select! {
            () = unsubscribed(&tx, &state, id) => return,
            attempt = tokio::time::timeout(source.connect_timeout(), source.connect()) => attempt,
        };
        let error: BoxError = match attempt {
            Ok(Ok(mut messages)) => {
                // Restored: after a lost subscription, and after failed attempts — also when
                // the listener started during an outage, since `subscribe()` returned to the
                // relays after the first failure and signals sent since then are lost.
                if subscribed_before || failures > 0 {
                    tracing::info!(
                        wakeup = %what,
                        failures,
                        "wake-up subscription restored; relays poll once for the signals missed"
                    );
                    // Signals sent while the subscription was down are lost: an empty signal
                    // asks every relay to poll now.
                    let _ = tx.send(Vec::new().into());
                } else {
                    tracing::debug!(wakeup = %what, "wake-up subscribed");
                }
                subscribed_before = true;
                failures = 0;
                ready.send_replace(true);
                loop {
                    tokio::select! {
                        () = unsubscribed(&tx, &state, id) => return,
                        message = messages.next() => match message {
                            Some(payload) => dispatch(&tx, &payload, &what),
                            None => break,
                        },
                    }
                }
                drop(messages);
                let delay = if source.reconnects_itself() {
                    // The client tried MAX_FAILURES reconnects of its own, and every one failed.
                    failures = MAX_FAILURES;
                    let delay = reconnect_delay(failures + 1);
                    tracing::error!(
                        wakeup = %what,
                        failures,
                        retry_in_seconds = delay.as_secs_f64(),
                        "wake-up subscription lost and {MAX_FAILURES} reconnects in a row failed; \
                         relays poll meanwhile, a new connection follows"
                    );
                    delay
                } else {
                    let delay = reconnect_delay(1);
                    tracing::warn!(
                        wakeup = %what,
                        retry_in_seconds = delay.as_secs_f64(),
                        "wake-up subscription lost; reconnecting"
                    );
                    delay
                };
                // A pause, so a subscription that breaks at once does not spin.
                tokio::select! {
                    () = unsubscribed(&tx, &state, id) => return,
                    () = tokio::time::sleep(delay) => {}
                }
                continue;
            }
            Ok(Err(error)) => error,
            Err(_) => format!(
                "connecting and subscribing took longer than {} s",
                source.connect_timeout().as_secs()
            )
            .into(),
        };
        failures = failures.saturating_add(1);
        // The first attempt is over: `subscribe()` stops waiting.
        ready.send_replace(true);
        let delay = reconnect_delay(failures);
        if failures == MAX_FAILURES {
            tracing::error!(
                wakeup = %what,
                failures,
                error = &*error as &dyn std::error::Error,
                retry_in_seconds = delay.as_secs_f64(),
                "wake-up subscription failed {MAX_FAILURES} times in a row; relays poll \
                 meanwhile, retrying with a backoff of up to {} s",
                MAX_RECONNECT_DELAY.as_secs()
            );
        } else {
            tracing::warn!(
                wakeup = %what,
                failures,
                error = &*error as &dyn std::error::Error,
                retry_in_seconds = delay.as_secs_f64(),
                "wake-up subscription failed; retrying"
            );
        }
        tokio::select! {
            () = unsubscribed(&tx, &state, id) => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

/// Completes once every subscriber is gone, and then removes this listener from the state. Checks
/// under the state lock, so a subscriber joining meanwhile keeps the listener alive.
async fn unsubscribed(tx: &broadcast::Sender<Topics>, state: &State, id: u64) {
    loop {
        tx.closed().await;
        let mut guard = lock(state);
        if tx.receiver_count() == 0 {
            if guard.as_ref().is_some_and(|running| running.id == id) {
                *guard = None;
            }
            return;
        }
    }
}

fn dispatch(tx: &broadcast::Sender<Topics>, payload: &[u8], what: &str) {
    match decode_topics(payload) {
        // No subscriber left is not an error here: `unsubscribed` ends the task.
        Some(topics) => {
            let _ = tx.send(topics);
        }
        None => tracing::warn!(
            wakeup = %what,
            message = %String::from_utf8_lossy(payload),
            "ignoring a wake-up message that is not a JSON array of topics"
        ),
    }
}

/// The message of one signal: the topics as a JSON array of strings, e.g. `["orders.created"]`.
pub fn encode_topics(topics: &[String]) -> Vec<u8> {
    // Serializing strings cannot fail.
    serde_json::to_vec(topics).unwrap_or_else(|_| b"[]".to_vec())
}

/// The topics of a signal message, or `None` when it is not a JSON array of strings.
pub fn decode_topics(payload: &[u8]) -> Option<Topics> {
    serde_json::from_slice::<Vec<String>>(payload)
        .ok()
        .map(Into::into)
}

/// The pause before reconnect `attempt` (1-based): 100 ms doubled per attempt, at most
/// [`MAX_RECONNECT_DELAY`] (60 s, reached at attempt 11), of
/// which a random 50–100 % is taken so that many listeners do not reconnect in step.
pub fn reconnect_delay(attempt: u32) -> Duration {
    let doublings = attempt.saturating_sub(1).min(16);
    let full = FIRST_RECONNECT_DELAY
        .saturating_mul(1u32 << doublings)
        .min(MAX_RECONNECT_DELAY);
    full.mul_f64(0.5 + 0.5 * random_fraction())
}

/// A random number in `[0, 1)`, good enough for jitter.
fn random_fraction() -> f64 {
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use tokio::sync::mpsc;

    /// A source whose attempts fail `fail_first` times, then hand out streams fed by the test.
    struct Fake {
        attempts: AtomicU32,
        fail_first: u32,
        streams: Mutex<Vec<mpsc::UnboundedSender<Vec<u8>>>>,
        itself: bool,
    }

    impl Fake {
        fn new(fail_first: u32, itself: bool) -> Arc<Fake> {
            Arc::new(Fake {
                attempts: AtomicU32::new(0),
                fail_first,
                streams: Mutex::new(Vec::new()),
                itself,
            })
        }
        fn attempts(&self) -> u32 {
            self.attempts.load(Ordering::SeqCst)
        }
        fn send(&self, payload: &[u8]) {
            let streams = self.streams.lock().unwrap();
            streams.last().unwrap().send(payload.to_vec()).unwrap();
        }
        /// Ends the live subscription, like a connection the server closed.
        fn break_subscription(&self) {
            self.streams.lock().unwrap().clear();
        }
        fn open_streams(&self) -> usize {
            self.streams
                .lock()
                .unwrap()
                .iter()
                .filter(|s| !s.is_closed())
                .count()
        }
    }

    struct Shared(Arc<Fake>);

    impl Source for Shared {
        fn connect(&self) -> Connecting<'_> {
            Box::pin(async move {
                let n = self.0.attempts.fetch_add(1, Ordering::SeqCst) + 1;
                if n <= self.0.fail_first {
                    return Err(format!("attempt {n} refused").into());
                }
                let (tx, rx) = mpsc::unbounded_channel();
                self.0.streams.lock().unwrap().push(tx);
                Ok(futures::stream::unfold(
                    rx,
                    |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
                )
                .boxed())
            })
        }
        fn describe(&self) -> String {
            "fake".into()
        }
        fn reconnects_itself(&self) -> bool {
            self.0.itself
        }
    }

    fn source(fake: &Arc<Fake>) -> Arc<dyn Source> {
        Arc::new(Shared(fake.clone()))
    }

    const WAIT: Duration = Duration::from_secs(5);

    async fn recv(sub: &mut WakeupSubscription) -> Option<Option<Topics>> {
        tokio::time::timeout(WAIT, sub.recv())
            .await
            .expect("a signal or the end")
    }

    #[tokio::test]
    async fn subscribers_share_one_connection_and_all_get_each_signal() {
        let fake = Fake::new(0, false);
        let listener = Listener::default();
        let src = source(&fake);
        let mut a = listener.subscribe(&src, WAIT).await;
        let mut b = listener.subscribe(&src, WAIT).await;
        assert_eq!(fake.attempts(), 1, "one connection per wake-up object");
        fake.send(br#"["x","y"]"#);
        assert_eq!(
            &*recv(&mut a).await.unwrap().unwrap(),
            ["x".to_owned(), "y".to_owned()]
        );
        assert_eq!(
            &*recv(&mut b).await.unwrap().unwrap(),
            ["x".to_owned(), "y".to_owned()]
        );
        // A malformed message is skipped, the next one arrives.
        fake.send(b"not json");
        fake.send(br#"["z"]"#);
        assert_eq!(&*recv(&mut a).await.unwrap().unwrap(), ["z".to_owned()]);
    }

    #[tokio::test]
    async fn a_lost_subscription_reconnects_and_asks_for_one_poll() {
        let fake = Fake::new(0, false);
        let listener = Listener::default();
        let mut sub = listener.subscribe(&source(&fake), WAIT).await;
        fake.break_subscription();
        wait_until(|| fake.open_streams() == 1).await;
        assert_eq!(fake.attempts(), 2);
        assert!(
            recv(&mut sub).await.unwrap().unwrap().is_empty(),
            "an empty signal after the reconnect: poll now"
        );
        fake.send(br#"["after"]"#);
        assert_eq!(
            &*recv(&mut sub).await.unwrap().unwrap(),
            ["after".to_owned()]
        );
    }

    #[tokio::test]
    async fn failures_below_the_limit_are_retried() {
        let fake = Fake::new(MAX_FAILURES - 1, false);
        let listener = Listener::default();
        let mut sub = listener.subscribe(&source(&fake), WAIT).await;
        wait_until(|| fake.open_streams() == 1).await;
        assert_eq!(fake.attempts(), MAX_FAILURES);
        // The first subscription came after failures, and `subscribe()` had already returned:
        // signals sent meanwhile are lost, so the relays poll once.
        assert!(recv(&mut sub).await.unwrap().unwrap().is_empty());
        fake.send(br#"["late"]"#);
        assert_eq!(
            &*recv(&mut sub).await.unwrap().unwrap(),
            ["late".to_owned()]
        );
    }

    /// Paused time: the backoff grows to a minute, which the clock skips.
    #[tokio::test(start_paused = true)]
    async fn failures_past_the_limit_never_end_the_subscriptions() {
        let fake = Fake::new(MAX_FAILURES + 6, false);
        let listener = Listener::default();
        let src = source(&fake);
        let mut a = listener.subscribe(&src, WAIT).await;
        let mut b = listener.subscribe(&src, WAIT).await;
        let waited = tokio::time::Instant::now();
        wait_until_for(|| fake.open_streams() == 1, Duration::from_secs(600)).await;
        assert_eq!(fake.attempts(), MAX_FAILURES + 7);
        assert!(listener.is_running());
        // Eleven pauses of 100 ms doubling, each at least half its full length.
        let full: Duration = (1..=MAX_FAILURES + 6).map(full_delay).sum();
        assert!(waited.elapsed() >= full / 2, "{:?}", waited.elapsed());
        assert!(recv(&mut a).await.unwrap().unwrap().is_empty(), "poll now");
        assert!(recv(&mut b).await.unwrap().unwrap().is_empty(), "poll now");
        fake.send(br#"["back"]"#);
        assert_eq!(&*recv(&mut a).await.unwrap().unwrap(), ["back".to_owned()]);
        assert_eq!(&*recv(&mut b).await.unwrap().unwrap(), ["back".to_owned()]);
    }

    /// Log lines written on this thread while the guard lives (the test runtime is
    /// current-thread, so the listener task logs here too). One global subscriber writes to the
    /// capturing thread's buffer: with scoped subscribers, a callsite first reached by a test on
    /// another thread can keep a stale "never" interest and lose the line here.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    thread_local! {
        static CAPTURE: std::cell::RefCell<Option<Logs>> = const { std::cell::RefCell::new(None) };
    }

    struct ThreadWriter;

    impl std::io::Write for ThreadWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            CAPTURE.with(|c| {
                if let Some(logs) = &*c.borrow() {
                    logs.0.lock().unwrap().extend_from_slice(buf);
                }
            });
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    struct CaptureGuard;

    impl Drop for CaptureGuard {
        fn drop(&mut self) {
            CAPTURE.with(|c| c.borrow_mut().take());
        }
    }

    impl Logs {
        fn capture() -> (Logs, CaptureGuard) {
            static GLOBAL: std::sync::Once = std::sync::Once::new();
            GLOBAL.call_once(|| {
                let subscriber = tracing_subscriber::fmt()
                    .with_ansi(false)
                    .with_max_level(tracing::Level::DEBUG)
                    .with_writer(|| ThreadWriter)
                    .finish();
                tracing::subscriber::set_global_default(subscriber).unwrap();
            });
            let logs = Logs::default();
            CAPTURE.with(|c| *c.borrow_mut() = Some(logs.clone()));
            (logs, CaptureGuard)
        }
        fn lines(&self, level: &str, needle: &str) -> Vec<String> {
            String::from_utf8_lossy(&self.0.lock().unwrap())
                .lines()
                .filter(|l| l.contains(level) && l.contains(needle))
                .map(str::to_owned)
                .collect()
        }
    }

    /// Started during an outage: `subscribe()` returns after the first failed attempt, so the
    /// first subscription that follows is a restored one — INFO and one "poll now".
    #[tokio::test(start_paused = true)]
    async fn a_start_during_an_outage_is_announced_as_restored_with_one_empty_signal() {
        let (logs, _guard) = Logs::capture();
        let fake = Fake::new(3, false);
        let listener = Listener::default();
        let mut sub = listener.subscribe(&source(&fake), WAIT).await;
        assert_eq!(
            fake.attempts(),
            1,
            "subscribe() returned after the first failure"
        );
        wait_until(|| fake.open_streams() == 1).await;
        assert_eq!(fake.attempts(), 4);
        assert!(
            recv(&mut sub).await.unwrap().unwrap().is_empty(),
            "one empty signal: poll now"
        );
        let restored = logs.lines(
            "INFO",
            "wake-up subscription restored; relays poll once for the signals missed",
        );
        assert_eq!(restored.len(), 1, "{restored:?}");
        assert!(restored[0].contains("failures=3"), "{}", restored[0]);
        assert!(logs.lines("DEBUG", "wake-up subscribed").is_empty());
        // Exactly one: the next signal is the broker's own.
        fake.send(br#"["next"]"#);
        assert_eq!(
            &*recv(&mut sub).await.unwrap().unwrap(),
            ["next".to_owned()]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_first_attempt_that_succeeds_is_no_restoration() {
        let (logs, _guard) = Logs::capture();
        let fake = Fake::new(0, false);
        let listener = Listener::default();
        let mut sub = listener.subscribe(&source(&fake), WAIT).await;
        fake.send(br#"["first"]"#);
        assert_eq!(
            &*recv(&mut sub).await.unwrap().unwrap(),
            ["first".to_owned()]
        );
        assert!(logs.lines("INFO", "restored").is_empty());
        assert_eq!(logs.lines("DEBUG", "wake-up subscribed").len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_gave_up_reconnecting_is_replaced_by_a_new_one() {
        let fake = Fake::new(0, true);
        let listener = Listener::default();
        let mut sub = listener.subscribe(&source(&fake), WAIT).await;
        fake.break_subscription();
        assert!(
            recv(&mut sub).await.unwrap().unwrap().is_empty(),
            "the new connection asks for one poll"
        );
        assert_eq!(fake.attempts(), 2, "one new connection");
        fake.send(br#"["again"]"#);
        assert_eq!(
            &*recv(&mut sub).await.unwrap().unwrap(),
            ["again".to_owned()]
        );
    }

    #[tokio::test]
    async fn the_last_subscriber_leaving_stops_the_listener_and_close_closes() {
        let fake = Fake::new(0, false);
        let listener = Listener::default();
        let src = source(&fake);
        let a = listener.subscribe(&src, WAIT).await;
        let b = listener.subscribe(&src, WAIT).await;
        drop(a);
        tokio::task::yield_now().await;
        assert_eq!(fake.open_streams(), 1, "one subscriber left");
        drop(b);
        wait_until(|| fake.open_streams() == 0).await;
        assert!(!listener.is_running());

        let mut c = listener.subscribe(&src, WAIT).await;
        assert_eq!(fake.attempts(), 2, "a new listener for a new subscriber");
        listener.close();
        assert!(recv(&mut c).await.is_none(), "close() closes subscriptions");
    }

    fn full_delay(attempt: u32) -> Duration {
        FIRST_RECONNECT_DELAY
            .saturating_mul(1 << attempt.saturating_sub(1).min(16))
            .min(MAX_RECONNECT_DELAY)
    }

    #[test]
    fn reconnect_delays_double_with_jitter_and_are_capped() {
        for attempt in 1..=20u32 {
            let full = full_delay(attempt);
            let d = reconnect_delay(attempt);
            assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
        }
        assert!(reconnect_delay(100) <= MAX_RECONNECT_DELAY);
        assert_eq!(full_delay(11), MAX_RECONNECT_DELAY);
    }

    #[test]
    fn topics_round_trip_as_a_json_array() {
        let topics = vec!["a.b".to_owned(), "ünï \"q\"".to_owned()];
        let bytes = encode_topics(&topics);
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"["a.b","ünï \"q\""]"#
        );
        assert_eq!(&*decode_topics(&bytes).unwrap(), topics.as_slice());
        assert!(decode_topics(b"{}").is_none());
        assert!(decode_topics(b"[1]").is_none());
    }

    async fn wait_until(check: impl FnMut() -> bool) {
        wait_until_for(check, WAIT).await;
    }

    async fn wait_until_for(mut check: impl FnMut() -> bool, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        while !check() {
            assert!(tokio::time::Instant::now() < deadline, "timed out");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}
