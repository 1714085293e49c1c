//! The circuit breaker and rate limit of each destination a relay delivers to.
//!
//! A destination is a delivery as a whole, a route of a [`TopicRouter`](crate::TopicRouter), or
//! a sub-destination a delivery names per event ([`Delivery::destination_of`]: a webhook's target
//! host). Each has one [`Breaker`] per relay process: closed, it lets every send through and
//! counts consecutive outage failures ([`DeliveryErrorKind::is_outage`]); after
//! [`BreakerConfig::failure_threshold`] of them it opens and lets nothing through until its next
//! probe; then one send goes out as the probe (half-open), and its first answer closes the
//! destination again, or a failure re-opens it with a longer wait.
//!
//! [`Delivery::destination_of`]: crate::Delivery::destination_of
//! [`DeliveryErrorKind::is_outage`]: crate::error::DeliveryErrorKind::is_outage

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::retry::{random_jitter, retry_delay};
use crate::error::{Error, Result};

/// Most consecutive outage failures [`BreakerConfig::failure_threshold`] may ask for.
pub const MAX_FAILURE_THRESHOLD: u32 = 10_000;

/// Shortest probe interval: 10 ms.
pub const MIN_PROBE_INTERVAL: Duration = Duration::from_millis(10);

/// Largest [`max_per_second`](crate::Destination::with_max_per_second): one million sends per
/// second.
pub const MAX_PER_SECOND: f64 = 1_000_000.0;

/// Options of the circuit breaker of a destination. Every option has a default; set them with
/// the `with_*` methods. [`RelayConfig::breaker`](crate::RelayConfig::breaker) holds the options
/// of every destination of a relay, [`Destination::with_breaker`](crate::Destination::with_breaker)
/// those of one.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct BreakerConfig {
    /// Whether the breaker is on. Off, every send goes out and every failure counts an attempt,
    /// as if there were no breaker. Defaults to `true`.
    pub enabled: bool,
    /// Consecutive failures that look like an outage (connection refused or reset, timeouts,
    /// 5xx, 429, a broker that is unavailable) after which the destination opens. A send the
    /// destination answers — delivered, or refused for the event's own fault — resets the count.
    /// 1 to 10000. Defaults to 5.
    pub failure_threshold: u32,
    /// How long an open destination waits before its first probe; each failed probe doubles the
    /// wait, up to [`probe_interval_max`](Self::probe_interval_max), with ±10% jitter. At least
    /// 10 ms. Defaults to 1 s.
    pub probe_interval: Duration,
    /// The longest wait between two probes. At least `probe_interval`. Defaults to 60 s.
    pub probe_interval_max: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            enabled: true,
            failure_threshold: 5,
            probe_interval: Duration::from_secs(1),
            probe_interval_max: Duration::from_secs(60),
        }
    }
}

impl BreakerConfig {
    /// The defaults: on, 5 failures, probes after 1 s doubling up to 60 s.
    pub fn new() -> Self {
        BreakerConfig::default()
    }

    /// A breaker that is off: every send goes out, every failure counts.
    pub fn disabled() -> Self {
        BreakerConfig::default().with_enabled(false)
    }

    /// Sets [`BreakerConfig::enabled`].
    pub fn with_enabled(mut self, enabled: bool) -> Self {
        self.enabled = enabled;
        self
    }

    /// Sets [`BreakerConfig::failure_threshold`].
    pub fn with_failure_threshold(mut self, failures: u32) -> Self {
        self.failure_threshold = failures;
        self
    }

    /// Sets [`BreakerConfig::probe_interval`].
    pub fn with_probe_interval(mut self, interval: Duration) -> Self {
        self.probe_interval = interval;
        self
    }

    /// Sets [`BreakerConfig::probe_interval_max`].
    pub fn with_probe_interval_max(mut self, interval: Duration) -> Self {
        self.probe_interval_max = interval;
        self
    }

    /// Checks the options.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the option, its value and what is allowed: a failure
    /// threshold outside 1..=10000, a probe interval below 10 ms, a longest probe interval
    /// below the probe interval.
    pub fn validate(&self) -> Result<()> {
        if !(1..=MAX_FAILURE_THRESHOLD).contains(&self.failure_threshold) {
            return Err(Error::configuration(format!(
                "breaker_failure_threshold {} is out of range; allowed 1 to {MAX_FAILURE_THRESHOLD}",
                self.failure_threshold
            )));
        }
        if self.probe_interval < MIN_PROBE_INTERVAL {
            return Err(Error::configuration(format!(
                "breaker_probe_interval {} s is out of range; allowed {} or more (seconds)",
                self.probe_interval.as_secs_f64(),
                MIN_PROBE_INTERVAL.as_secs_f64()
            )));
        }
        if self.probe_interval_max < self.probe_interval {
            return Err(Error::configuration(format!(
                "breaker_probe_interval_max {} s is below breaker_probe_interval {} s",
                self.probe_interval_max.as_secs_f64(),
                self.probe_interval.as_secs_f64()
            )));
        }
        Ok(())
    }

    /// The wait before probe number `failed_probes + 1`.
    fn probe_delay(&self, failed_probes: u32) -> Duration {
        let attempts = i32::try_from(failed_probes.saturating_add(1)).unwrap_or(i32::MAX);
        retry_delay(
            attempts,
            self.probe_interval,
            self.probe_interval_max,
            random_jitter(),
        )
    }
}

/// Checks a rate limit of `max_per_second` sends per second.
///
/// # Errors
/// [`Error::Configuration`] naming the value unless it is a number above 0 and at most one
/// million.
pub fn check_max_per_second(max_per_second: f64) -> Result<()> {
    if !(max_per_second.is_finite() && max_per_second > 0.0 && max_per_second <= MAX_PER_SECOND) {
        return Err(Error::configuration(format!(
            "max_per_second {max_per_second} is not allowed; use a number of sends per second above 0 and at most {MAX_PER_SECOND} (fractions allowed: 0.5 = one send every 2 s)"
        )));
    }
    Ok(())
}

/// Whether a destination takes sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Sends go out; consecutive outage failures are counted.
    Closed,
    /// Nothing goes out until the next probe; the destination's events wait with their
    /// attempts unchanged.
    Open,
    /// One probe is out; the other sends wait for its answer.
    HalfOpen,
}

impl BreakerState {
    /// `closed`, `open` or `half_open`.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    /// The value of the `hare_outbox_destination_state` gauge: 0 closed, 1 open, 2 half-open.
    pub fn gauge(self) -> f64 {
        match self {
            BreakerState::Closed => 0.0,
            BreakerState::Open => 1.0,
            BreakerState::HalfOpen => 2.0,
        }
    }
}

/// What a destination's breaker looks like now, for `/metrics`, `/healthz`, the dashboard and
/// logs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct DestinationStatus {
    /// The destination: a delivery's name, a route, or `name/host` for a webhook target.
    pub name: String,
    /// Closed, open or half-open.
    pub state: BreakerState,
    /// Outage failures in a row (0 after a send the destination answered).
    pub consecutive_failures: u32,
    /// When it opened; `None` while closed.
    pub opened_at: Option<DateTime<Utc>>,
    /// When the next probe may go out; `None` unless open.
    pub next_probe_at: Option<DateTime<Utc>>,
    /// Why it opened: the last outage failure's error; `None` while closed.
    pub reason: Option<String>,
    /// Times it opened since the relay started.
    pub opens: u64,
    /// Its rate limit in sends per second, if any.
    pub max_per_second: Option<f64>,
    /// Whether its breaker is on.
    pub breaker: bool,
}

/// The destinations of one relay and their breakers: a cheap handle, cloned to whoever shows
/// them (the dashboard's `/healthz`). Give each relay its own
/// ([`OutboxRelay::with_destinations`](crate::OutboxRelay::with_destinations)); several relays
/// on one table each keep their own breakers.
#[derive(Clone, Default)]
pub struct Destinations {
    inner: Arc<Mutex<BTreeMap<String, Arc<Breaker>>>>,
}

impl std::fmt::Debug for Destinations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.statuses()).finish()
    }
}

impl Destinations {
    /// An empty set; the relay adds each destination the first time it sends to it.
    pub fn new() -> Self {
        Destinations::default()
    }

    /// Every destination the relay sent to, by name.
    pub fn statuses(&self) -> Vec<DestinationStatus> {
        self.breakers().iter().map(|b| b.status()).collect()
    }

    /// The destinations that are open or half-open, by name.
    pub fn open(&self) -> Vec<DestinationStatus> {
        self.statuses()
            .into_iter()
            .filter(|s| s.state != BreakerState::Closed)
            .collect()
    }

    /// The status of the destination `name`, if the relay sent to it.
    pub fn status(&self, name: &str) -> Option<DestinationStatus> {
        self.lock().get(name).map(|b| b.status())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Breaker>>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn breakers(&self) -> Vec<Arc<Breaker>> {
        self.lock().values().cloned().collect()
    }

    /// The breaker of `name`, made with `make` the first time.
    pub(crate) fn get_or_insert(&self, name: &str, make: impl FnOnce() -> Breaker) -> Arc<Breaker> {
        let mut map = self.lock();
        if let Some(b) = map.get(name) {
            return b.clone();
        }
        let breaker = Arc::new(make());
        breaker.publish_gauges();
        map.insert(name.to_owned(), breaker.clone());
        breaker
    }

    /// Whether `name` is open with its probe not due yet: its events need not be leased.
    pub(crate) fn is_paused(&self, name: &str) -> bool {
        self.paused_until(name).is_some()
    }

    /// When the probe of `name` is due, if it is open and the probe is not due yet.
    pub(crate) fn paused_until(&self, name: &str) -> Option<Instant> {
        let breaker = self.lock().get(name).cloned();
        breaker.and_then(|b| b.paused_until())
    }

    /// The earliest probe of an open destination, if any is open.
    pub(crate) fn next_probe(&self) -> Option<Instant> {
        self.breakers()
            .iter()
            .filter_map(|b| b.paused_until())
            .min()
    }
}

/// The state of one destination's breaker, behind its mutex.
#[derive(Debug)]
struct Inner {
    state: BreakerState,
    consecutive_failures: u32,
    /// Failed probes since it opened: the exponent of the probe back-off.
    failed_probes: u32,
    opened_at: Option<DateTime<Utc>>,
    opened: Option<Instant>,
    next_probe: Option<Instant>,
    reason: Option<String>,
    opens: u64,
    /// Sends in flight.
    in_flight: usize,
    /// After a close, the most sends in flight at once; doubled by each answered send until it
    /// reaches the relay's concurrency (slow start).
    ramp: Option<usize>,
}

/// One destination's circuit breaker and rate limit.
pub(crate) struct Breaker {
    name: String,
    table: String,
    config: BreakerConfig,
    /// The longest wait a `Retry-After` may impose: the relay's `retry_max`.
    retry_max: Duration,
    /// The relay's concurrency: where the slow start after a close ends.
    concurrency: usize,
    limiter: Option<governor::DefaultDirectRateLimiter>,
    max_per_second: Option<f64>,
    inner: Mutex<Inner>,
    changed: tokio::sync::Notify,
}

/// What a send may do now.
pub(crate) enum Admission {
    /// Go; `probe` when this send is the half-open probe.
    Go(Permit),
    /// The destination is open: the send is deferred until its next probe, this long from now.
    Refused(Duration),
}

/// The right to send, held while the send is out. [`Permit::finish`] reports its outcome;
/// dropping it unfinished (a cancelled send) gives the right back, and a probe dropped that way
/// lets the next send probe at once.
pub(crate) struct Permit {
    breaker: Arc<Breaker>,
    probe: bool,
    done: bool,
}

/// How one send ended, as the breaker sees it.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// The destination answered: delivered, or refused for the event's own fault.
    Answered,
    /// It looked down; `retry_after` when it said how long to wait.
    Outage {
        retry_after: Option<Duration>,
        reason: String,
    },
    /// The send did not happen (not attempted).
    Skipped,
}

/// Whether a failed send counts against its event.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Verdict {
    /// It counts (an attempt, a back-off) as without a breaker.
    Counts,
    /// The destination is open: the event waits this long (until the next probe), its attempts
    /// unchanged.
    Deferred(Duration),
}

impl Breaker {
    /// A closed breaker for `name` of a relay on `table`.
    pub(crate) fn new(
        name: &str,
        table: &str,
        config: BreakerConfig,
        max_per_second: Option<f64>,
        retry_max: Duration,
        concurrency: usize,
    ) -> Breaker {
        let limiter = max_per_second.and_then(|rate| {
            let period = Duration::try_from_secs_f64(1.0 / rate).ok()?;
            let burst = NonZeroU32::new(rate.ceil().clamp(1.0, f64::from(u32::MAX)) as u32)?;
            let quota = governor::Quota::with_period(period)?.allow_burst(burst);
            Some(governor::RateLimiter::direct(quota))
        });
        Breaker {
            name: name.to_owned(),
            table: table.to_owned(),
            config,
            retry_max,
            concurrency: concurrency.max(1),
            limiter,
            max_per_second,
            inner: Mutex::new(Inner {
                state: BreakerState::Closed,
                consecutive_failures: 0,
                failed_probes: 0,
                opened_at: None,
                opened: None,
                next_probe: None,
                reason: None,
                opens: 0,
                in_flight: 0,
                ramp: None,
            }),
            changed: tokio::sync::Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether sends to this destination need the breaker or the limiter at all.
    pub(crate) fn is_active(&self) -> bool {
        self.config.enabled || self.limiter.is_some()
    }

    /// The sends of a chunk may hold at most this many events: the rate limit's burst (one
    /// second's worth), 1 for a probe, the slow start's limit after a close.
    pub(crate) fn chunk_limit(&self, permit: &Permit) -> usize {
        let mut limit = usize::MAX;
        if permit.probe {
            limit = 1;
        }
        if let Some(ramp) = self.lock().ramp {
            limit = limit.min(ramp);
        }
        if let Some(rate) = self.max_per_second {
            limit = limit.min(rate.ceil().max(1.0) as usize);
        }
        limit.max(1)
    }

    /// Waits until the rate limit lets `n` sends go (at most one second's worth at once).
    pub(crate) async fn pace(&self, n: usize) {
        let Some(limiter) = &self.limiter else {
            return;
        };
        let burst = self
            .max_per_second
            .map_or(1, |rate| rate.ceil().max(1.0) as usize);
        let mut left = n;
        while left > 0 {
            let take = left.min(burst);
            let cells =
                NonZeroU32::new(u32::try_from(take).unwrap_or(u32::MAX)).unwrap_or(NonZeroU32::MIN);
            if limiter.until_n_ready(cells).await.is_err() {
                limiter.until_ready().await;
            }
            left -= take;
        }
    }

    /// When an open destination's probe is due, if it is open and the probe is not due yet.
    pub(crate) fn paused_until(&self) -> Option<Instant> {
        if !self.config.enabled {
            return None;
        }
        let inner = self.lock();
        match inner.state {
            BreakerState::Open => inner.next_probe.filter(|at| *at > Instant::now()),
            // The probe is out: nothing else goes until it answers.
            BreakerState::HalfOpen => Some(Instant::now() + self.config.probe_interval),
            BreakerState::Closed => None,
        }
    }

    /// Asks to send. Waits while a probe is out or the slow start's limit is reached, at most
    /// `wait_at_most`; after that the send is deferred to a probe interval from now.
    pub(crate) async fn admit(self: &Arc<Self>, wait_at_most: Duration) -> Admission {
        if !self.config.enabled {
            return Admission::Go(Permit {
                breaker: self.clone(),
                probe: false,
                done: true,
            });
        }
        let deadline = Instant::now() + wait_at_most;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut inner = self.lock();
                let now = Instant::now();
                match inner.state {
                    BreakerState::Closed => {
                        if inner.ramp.is_none_or(|limit| inner.in_flight < limit) {
                            inner.in_flight += 1;
                            return self.permit(false);
                        }
                    }
                    BreakerState::Open => match inner.next_probe {
                        Some(at) if at > now => return Admission::Refused(at - now),
                        _ => {
                            inner.state = BreakerState::HalfOpen;
                            inner.in_flight += 1;
                            drop(inner);
                            self.publish_gauges();
                            tracing::info!(destination = %self.name, "destination half-open: sending a probe");
                            return self.permit(true);
                        }
                    },
                    BreakerState::HalfOpen => {}
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Admission::Refused(self.config.probe_interval);
            }
        }
    }

    fn permit(self: &Arc<Self>, probe: bool) -> Admission {
        Admission::Go(Permit {
            breaker: self.clone(),
            probe,
            done: false,
        })
    }

    /// Records the outcomes of the sends of one permit, in order; one verdict per outcome.
    fn record(&self, probe: bool, outcomes: &[Outcome]) -> Vec<Verdict> {
        let mut verdicts = Vec::with_capacity(outcomes.len());
        let mut opened = None;
        let mut closed = None;
        let mut failed_probe = None;
        {
            let mut inner = self.lock();
            inner.in_flight = inner.in_flight.saturating_sub(1);
            let mut probe_pending = probe;
            for outcome in outcomes {
                let now = Instant::now();
                match outcome {
                    Outcome::Skipped => verdicts.push(Verdict::Counts),
                    Outcome::Answered => {
                        inner.consecutive_failures = 0;
                        if inner.state != BreakerState::Closed {
                            closed = inner.opened.map(|at| now.duration_since(at));
                            inner.state = BreakerState::Closed;
                            inner.failed_probes = 0;
                            inner.opened = None;
                            inner.opened_at = None;
                            inner.next_probe = None;
                            inner.reason = None;
                            inner.ramp = Some(1);
                        } else if let Some(limit) = inner.ramp {
                            let next = limit.saturating_mul(2);
                            inner.ramp = (next < self.concurrency).then_some(next);
                        }
                        probe_pending = false;
                        verdicts.push(Verdict::Counts);
                    }
                    Outcome::Outage {
                        retry_after,
                        reason,
                    } => {
                        inner.consecutive_failures = inner.consecutive_failures.saturating_add(1);
                        let retry_after = retry_after.map(|d| d.min(self.retry_max));
                        match inner.state {
                            BreakerState::Closed => {
                                if inner.consecutive_failures >= self.config.failure_threshold {
                                    let wait = self
                                        .config
                                        .probe_delay(0)
                                        .max(retry_after.unwrap_or_default());
                                    inner.state = BreakerState::Open;
                                    inner.opened = Some(now);
                                    inner.opened_at = Some(Utc::now());
                                    inner.next_probe = Some(now + wait);
                                    inner.reason = Some(reason.clone());
                                    inner.opens += 1;
                                    inner.ramp = None;
                                    opened =
                                        Some((inner.consecutive_failures, reason.clone(), wait));
                                }
                                // Sent while closed: it counts.
                                verdicts.push(Verdict::Counts);
                            }
                            BreakerState::HalfOpen if probe_pending => {
                                probe_pending = false;
                                inner.failed_probes = inner.failed_probes.saturating_add(1);
                                let wait = self
                                    .config
                                    .probe_delay(inner.failed_probes)
                                    .max(retry_after.unwrap_or_default());
                                inner.state = BreakerState::Open;
                                inner.next_probe = Some(now + wait);
                                inner.reason = Some(reason.clone());
                                failed_probe = Some((reason.clone(), wait));
                                verdicts.push(Verdict::Deferred(wait));
                            }
                            BreakerState::HalfOpen => {
                                let wait = self.config.probe_delay(inner.failed_probes);
                                verdicts.push(Verdict::Deferred(wait));
                            }
                            BreakerState::Open => {
                                let mut at = inner.next_probe.unwrap_or(now);
                                if let Some(after) = retry_after {
                                    at = at.max(now + after);
                                    inner.next_probe = Some(at);
                                }
                                verdicts.push(Verdict::Deferred(at.saturating_duration_since(now)));
                            }
                        }
                    }
                }
            }
            if probe_pending && inner.state == BreakerState::HalfOpen {
                // The probe was not sent after all: the next send probes.
                inner.state = BreakerState::Open;
                inner.next_probe = Some(Instant::now());
            }
        }
        if let Some((failures, reason, wait)) = opened {
            metrics::counter!("hare_outbox_destination_opens_total", "table" => self.table.clone(), "destination" => self.name.clone()).increment(1);
            tracing::warn!(destination = %self.name, table = %self.table, consecutive_failures = failures, probe_in_seconds = wait.as_secs_f64(), reason = %reason, "destination opened: its events wait, attempts unchanged, until a probe succeeds");
        }
        if let Some((reason, wait)) = failed_probe {
            tracing::info!(destination = %self.name, probe_in_seconds = wait.as_secs_f64(), reason = %reason, "destination probe failed; it stays open");
        }
        if let Some(open_for) = closed {
            tracing::info!(destination = %self.name, table = %self.table, open_for_seconds = open_for.as_secs_f64(), "destination closed: it answered again");
        }
        self.publish_gauges();
        self.changed.notify_waiters();
        verdicts
    }

    /// The status now.
    pub(crate) fn status(&self) -> DestinationStatus {
        let inner = self.lock();
        let now = Instant::now();
        let next_probe_at = match inner.state {
            BreakerState::Open => inner.next_probe.map(|at| {
                let left = at.saturating_duration_since(now);
                Utc::now() + chrono::Duration::from_std(left).unwrap_or(chrono::Duration::MAX)
            }),
            _ => None,
        };
        DestinationStatus {
            name: self.name.clone(),
            state: inner.state,
            consecutive_failures: inner.consecutive_failures,
            opened_at: inner.opened_at,
            next_probe_at,
            reason: inner.reason.clone(),
            opens: inner.opens,
            max_per_second: self.max_per_second,
            breaker: self.config.enabled,
        }
    }

    /// Sets the destination's gauges: state, consecutive failures, when it opened.
    fn publish_gauges(&self) {
        let status = self.status();
        let labels = [
            ("table", self.table.clone()),
            ("destination", self.name.clone()),
        ];
        metrics::gauge!("hare_outbox_destination_state", &labels).set(status.state.gauge());
        metrics::gauge!("hare_outbox_destination_consecutive_failures", &labels)
            .set(f64::from(status.consecutive_failures));
        metrics::gauge!("hare_outbox_destination_opened_at_seconds", &labels).set(
            status
                .opened_at
                .map_or(0.0, |at| at.timestamp_millis() as f64 / 1000.0),
        );
    }
}

impl Permit {
    /// Whether this send is the half-open probe.
    #[cfg(test)]
    fn is_probe(&self) -> bool {
        self.probe
    }

    /// Reports how the permit's sends ended, in order; one verdict per outcome.
    pub(crate) fn finish(mut self, outcomes: &[Outcome]) -> Vec<Verdict> {
        let was_done = self.done;
        self.done = true;
        if was_done {
            // A breaker that is off counts everything.
            return outcomes.iter().map(|_| Verdict::Counts).collect();
        }
        self.breaker.record(self.probe, outcomes)
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.done {
            self.done = true;
            self.breaker.record(self.probe, &[]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(threshold: u32) -> Arc<Breaker> {
        let config = BreakerConfig::default()
            .with_failure_threshold(threshold)
            .with_probe_interval(Duration::from_millis(50))
            .with_probe_interval_max(Duration::from_millis(200));
        Arc::new(Breaker::new(
            "hooks",
            "outbox",
            config,
            None,
            Duration::from_secs(300),
            8,
        ))
    }

    fn outage() -> Outcome {
        Outcome::Outage {
            retry_after: None,
            reason: "down".into(),
        }
    }

    async fn go(b: &Arc<Breaker>) -> Permit {
        match b.admit(Duration::from_secs(5)).await {
            Admission::Go(p) => p,
            Admission::Refused(_) => panic!("refused"),
        }
    }

    #[test]
    fn config_is_checked_by_name() {
        BreakerConfig::default().validate().unwrap();
        for (config, word) in [
            (
                BreakerConfig::default().with_failure_threshold(0),
                "breaker_failure_threshold 0",
            ),
            (
                BreakerConfig::default().with_probe_interval(Duration::from_millis(1)),
                "breaker_probe_interval 0.001 s",
            ),
            (
                BreakerConfig::default().with_probe_interval_max(Duration::from_millis(500)),
                "breaker_probe_interval_max 0.5 s",
            ),
        ] {
            let e = config.validate().unwrap_err().to_string();
            assert!(e.contains(word), "{e}");
        }
        assert!(check_max_per_second(0.0).is_err());
        assert!(check_max_per_second(f64::NAN).is_err());
        assert!(check_max_per_second(2e6).is_err());
        check_max_per_second(0.5).unwrap();
    }

    #[tokio::test]
    async fn opens_after_the_threshold_refuses_then_probes_and_closes() {
        let b = breaker(3);
        for _ in 0..2 {
            let v = go(&b).await.finish(&[outage()]);
            assert_eq!(v, [Verdict::Counts]);
        }
        assert_eq!(b.status().state, BreakerState::Closed);
        assert_eq!(b.status().consecutive_failures, 2);
        // The third opens it; it still counts (it was sent while closed).
        assert_eq!(go(&b).await.finish(&[outage()]), [Verdict::Counts]);
        let status = b.status();
        assert_eq!(status.state, BreakerState::Open);
        assert_eq!(status.reason.as_deref(), Some("down"));
        assert!(status.opened_at.is_some() && status.next_probe_at.is_some());
        assert!(b.paused_until().is_some());
        let Admission::Refused(wait) = b.admit(Duration::from_secs(5)).await else {
            panic!("an open destination refuses");
        };
        assert!(wait <= Duration::from_millis(60), "{wait:?}");
        tokio::time::sleep(wait).await;
        // The probe fails: open again, deferred, longer wait.
        let probe = go(&b).await;
        assert!(probe.is_probe());
        assert_eq!(b.status().state, BreakerState::HalfOpen);
        let v = probe.finish(&[outage()]);
        assert!(
            matches!(v[0], Verdict::Deferred(d) if d >= Duration::from_millis(80)),
            "{v:?}"
        );
        assert_eq!(b.status().state, BreakerState::Open);
        tokio::time::sleep(Duration::from_millis(250)).await;
        let probe = go(&b).await;
        assert!(probe.is_probe());
        assert_eq!(probe.finish(&[Outcome::Answered]), [Verdict::Counts]);
        let status = b.status();
        assert_eq!(status.state, BreakerState::Closed);
        assert_eq!(status.consecutive_failures, 0);
        assert_eq!(status.opens, 1);
    }

    #[tokio::test]
    async fn an_answer_resets_the_count_and_other_sends_wait_for_the_probe() {
        let b = breaker(2);
        go(&b).await.finish(&[outage()]);
        go(&b).await.finish(&[Outcome::Answered]);
        go(&b).await.finish(&[outage()]);
        assert_eq!(
            b.status().state,
            BreakerState::Closed,
            "the answer reset the count"
        );
        go(&b).await.finish(&[outage()]);
        assert_eq!(b.status().state, BreakerState::Open);
        tokio::time::sleep(Duration::from_millis(60)).await;
        let probe = go(&b).await;
        let waiter = {
            let b = b.clone();
            tokio::spawn(async move {
                matches!(b.admit(Duration::from_secs(5)).await, Admission::Go(p) if !p.is_probe())
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished(), "waits while the probe is out");
        probe.finish(&[Outcome::Answered]);
        assert!(waiter.await.unwrap(), "goes once the probe closed it");
    }

    #[tokio::test]
    async fn a_dropped_probe_lets_the_next_send_probe_and_retry_after_sets_the_wait() {
        let b = breaker(1);
        let v = go(&b).await.finish(&[Outcome::Outage {
            retry_after: Some(Duration::from_secs(3)),
            reason: "429".into(),
        }]);
        assert_eq!(v, [Verdict::Counts]);
        let Admission::Refused(wait) = b.admit(Duration::from_secs(1)).await else {
            panic!("open");
        };
        assert!(wait > Duration::from_millis(2900), "{wait:?}");
        let b = breaker(1);
        go(&b).await.finish(&[outage()]);
        tokio::time::sleep(Duration::from_millis(60)).await;
        drop(go(&b).await);
        assert!(go(&b).await.is_probe(), "the next send probes");
    }

    #[tokio::test]
    async fn a_disabled_breaker_counts_everything() {
        let b = Arc::new(Breaker::new(
            "x",
            "t",
            BreakerConfig::disabled(),
            None,
            Duration::from_secs(1),
            4,
        ));
        for _ in 0..20 {
            assert_eq!(go(&b).await.finish(&[outage()]), [Verdict::Counts]);
        }
        assert!(!b.is_active());
        assert_eq!(b.status().state, BreakerState::Closed);
    }

    #[tokio::test]
    async fn pace_holds_sends_to_the_rate() {
        let b = Arc::new(Breaker::new(
            "x",
            "t",
            BreakerConfig::disabled(),
            Some(20.0),
            Duration::from_secs(1),
            4,
        ));
        let started = std::time::Instant::now();
        // The first second's worth (20) goes at once, the next 10 take about 0.5 s.
        b.pace(30).await;
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(400), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    }
}
