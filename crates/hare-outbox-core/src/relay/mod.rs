//! The relay: leases events, delivers them outside any transaction, marks them.

mod breaker;
mod config;
mod gate;
mod observe;
mod retry;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use breaker::{
    BreakerConfig, BreakerState, DestinationStatus, Destinations, MAX_FAILURE_THRESHOLD,
    MAX_PER_SECOND, MIN_PROBE_INTERVAL, check_max_per_second,
};
pub use config::{
    BATCH_SIZE_RANGE, CONCURRENCY_RANGE, MIN_DELIVERY_TIMEOUT, MIN_LEASE, MIN_POLL_INTERVAL,
    RelayConfig, default_name,
};
pub use gate::DEFAULT_DESTINATION;
pub use observe::{RelayEvent, RelayObserver, RelayStats};
pub use retry::{random_jitter, retry_delay};

use crate::backend::{
    Backend, Backlog, BacklogParams, EventFailure, EventLeaseExtendParams, EventLeaseParams,
    EventMarkDeliveredParams, EventMarkFailedParams, EventReleaseParams, JournalBackend,
    UnreadableRow,
};
use crate::delivery::{Delivery, DeliveryReport};
use crate::error::{DeliveryError, DeliveryErrorKind, Error, Result};
use crate::event::OutboxEvent;
use crate::journal::Journal;
use crate::outbox::Outbox;
use crate::topic::TopicFilter;
use crate::wakeup::WakeupSubscription;

/// What one poll did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PollOutcome {
    /// Events leased.
    pub leased: usize,
    /// Events delivered and marked published.
    pub delivered: usize,
    /// Failures recorded for a later retry.
    pub failed: usize,
    /// Events dead-lettered.
    pub dead_lettered: usize,
    /// Events released without an attempt: the rest of a run after a failure of its key, or
    /// events not sent because the lease could not be kept.
    pub released: usize,
    /// Events whose destination was open: not sent, or failed after it opened; they wait for
    /// its next probe with their attempts unchanged.
    pub deferred: usize,
}

/// Delivers the events of one outbox table to one delivery, at least once, strictly in order per
/// ordering key.
///
/// One poll: lease a batch in one statement — due, undelivered, not dead, not leased
/// by a live relay; per ordering key an ordered run that starts at the key's head (no earlier
/// undelivered event: failed and dead-lettered ones hold the key back) and holds at most
/// [`RelayConfig::max_events_per_key`] events; events without a key in `sequence` order. Deliver
/// it outside any transaction, each key's run in order, while a background task extends the
/// lease three times per lease period; mark the delivered in one UPDATE and each failure with
/// `attempts + 1`, `last_error` and a backoff, or a dead letter when attempts run out. After the
/// first failure of a run its later events are released without counting an attempt, so the key
/// keeps its order. A poll that leased anything polls again at once;
/// after an empty poll the relay waits for a wake-up signal or the poll interval. The running
/// relay ([`OutboxRelay::start`], [`OutboxRelay::run`]) leases and delivers the next batch while
/// the previous batch's marks are written; the previous batch's events stay leased until then,
/// so their keys' later events are not leased meanwhile ([`OutboxRelay::poll_once`] is one whole
/// poll, marks included). Lease expiry,
/// retry times and `published_at` use the database's clock, so relays on hosts with skewed
/// clocks never take each other's live leases.
///
/// Several relays (threads, processes, hosts) may share one table. A relay killed between delivery
/// and mark leaves its lease to expire; the batch is then delivered again (at least once).
///
/// ```no_run
/// # async fn example(outbox: hare_outbox_core::Outbox<impl hare_outbox_core::Backend>) -> Result<(), hare_outbox_core::Error> {
/// use hare_outbox_core::{JsonLinesDelivery, OutboxRelay, RelayConfig};
/// use std::time::Duration;
///
/// let relay = OutboxRelay::new(
///     outbox,
///     JsonLinesDelivery::stdout(),
///     RelayConfig::default().with_poll_interval(Duration::from_millis(500)),
/// )?;
/// relay.start()?;
/// // … the application runs …
/// relay.stop().await?;
/// # Ok(()) }
/// ```
///
/// The relay is a cheap handle: clones share one relay (its counters, breakers, and the task of
/// [`start`](Self::start)), so a clone can be moved into a task of your own:
///
/// ```no_run
/// # async fn example(relay: hare_outbox_core::OutboxRelay<impl hare_outbox_core::Backend>) {
/// use hare_outbox_core::CancellationToken;
///
/// let shutdown = CancellationToken::new();
/// let task = tokio::spawn({
///     let (relay, shutdown) = (relay.clone(), shutdown.clone());
///     async move { relay.run(shutdown).await }
/// });
/// // … at shutdown:
/// shutdown.cancel();
/// # let _ = task.await;
/// # }
/// ```
pub struct OutboxRelay<B: Backend> {
    inner: Arc<Inner<B>>,
    running: Arc<std::sync::Mutex<Option<Running>>>,
}

impl<B: Backend> Clone for OutboxRelay<B> {
    fn clone(&self) -> Self {
        OutboxRelay {
            inner: Arc::clone(&self.inner),
            running: Arc::clone(&self.running),
        }
    }
}

struct Running {
    token: CancellationToken,
    handle: JoinHandle<Result<()>>,
}

struct Inner<B: Backend> {
    outbox: Outbox<B>,
    delivery: Arc<dyn Delivery>,
    config: RelayConfig,
    topics: TopicFilter,
    observers: Vec<Arc<dyn RelayObserver>>,
    stats: Counters,
    /// The ordering key the next lease's walk over keys starts after (fairness between keys).
    key_cursor: std::sync::Mutex<String>,
    /// The circuit breakers and rate limits of the destinations.
    gates: gate::Gates,
}

#[derive(Default)]
struct Counters {
    polls: AtomicU64,
    leased: AtomicU64,
    delivered: AtomicU64,
    failed: AtomicU64,
    dead_lettered: AtomicU64,
}

impl<B: Backend> std::fmt::Debug for OutboxRelay<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxRelay")
            .field("table", &self.inner.outbox.table().to_string())
            .field("config", &self.inner.config)
            .finish()
    }
}

impl<B: Backend> OutboxRelay<B> {
    /// A relay of `outbox` to `delivery` with `config`.
    ///
    /// # Errors
    /// [`Error::Configuration`] when `config` is invalid (see [`RelayConfig::validate`]), or when
    /// [`RelayConfig::result_column`] names no extra column of the outbox table or one whose type
    /// is not [`ColumnType::Json`](crate::ColumnType::Json).
    pub fn new(outbox: Outbox<B>, delivery: impl Delivery, config: RelayConfig) -> Result<Self> {
        config.validate()?;
        let topics = config.topic_filter()?;
        if let Some(name) = &config.result_column {
            check_result_column(outbox.table(), name)?;
        }
        let gates = gate::Gates::new(
            Destinations::new(),
            config.breaker.clone(),
            outbox.table().to_string(),
            config.retry_max,
            config.concurrency,
        );
        Ok(OutboxRelay {
            inner: Arc::new(Inner {
                outbox,
                delivery: Arc::new(delivery),
                config,
                topics,
                observers: Vec::new(),
                stats: Counters::default(),
                key_cursor: std::sync::Mutex::default(),
                gates,
            }),
            running: Arc::new(std::sync::Mutex::new(None)),
        })
    }

    /// Adds an observer of delivered, failed and dead-lettered events. Call before
    /// [`start`](Self::start) or [`run`](Self::run), and before cloning the relay.
    ///
    /// # Panics
    /// When the relay is running or has clones.
    pub fn with_observer(mut self, observer: impl RelayObserver) -> Self {
        let inner = Arc::get_mut(&mut self.inner).expect("add observers before the relay runs");
        inner.observers.push(Arc::new(observer));
        self
    }

    /// Keeps the breakers of this relay's destinations in `destinations`, a handle made
    /// beforehand and shared with whatever shows them (a dashboard's `/healthz`). Call before
    /// [`start`](Self::start) or [`run`](Self::run), and before cloning the relay; give each
    /// relay its own.
    ///
    /// # Panics
    /// When the relay is running or has clones.
    pub fn with_destinations(mut self, destinations: Destinations) -> Self {
        let inner =
            Arc::get_mut(&mut self.inner).expect("set the destinations before the relay runs");
        inner.gates.destinations = destinations;
        self
    }

    /// The destinations this relay sent to and the state of their circuit breakers.
    pub fn destinations(&self) -> Destinations {
        self.inner.gates.destinations.clone()
    }

    /// The options.
    pub fn config(&self) -> &RelayConfig {
        &self.inner.config
    }

    /// The relay name written to `leased_by`.
    pub fn name(&self) -> &str {
        &self.inner.config.name
    }

    /// Totals since the relay was built.
    pub fn stats(&self) -> RelayStats {
        self.inner.stats.snapshot()
    }

    /// Runs one poll: lease, deliver, mark. Returns what it did.
    ///
    /// # Errors
    /// [`Error::Database`] when leasing or marking fails (the leased events are delivered again
    /// after their lease expires).
    ///
    /// # Cancel safety
    /// Not cancel safe: dropping the future mid-delivery leaves the batch leased until its lease
    /// expires, after which it is delivered again.
    pub async fn poll_once(&self) -> Result<PollOutcome> {
        self.inner.poll_once().await
    }

    /// Polls until `shutdown` is cancelled, then finishes and marks the batch in flight, closes
    /// the delivery and returns. For embedding the relay in a runtime you already run: spawn it
    /// on a clone (`let relay = relay.clone(); tokio::spawn(async move { relay.run(token).await })`).
    ///
    /// Storage errors do not stop the loop: it logs them and backs off (0.5 s doubling up to
    /// 30 s, or the poll interval if longer) so a database outage is not hammered.
    ///
    /// # Errors
    /// Never returns an error today; the `Result` is kept for future fatal conditions.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<()> {
        self.inner.clone().run(shutdown).await
    }

    /// Starts [`run`](Self::run) on the current tokio runtime. Idempotent: a running relay stays
    /// as it is.
    ///
    /// # Errors
    /// [`Error::Configuration`] when called outside a tokio runtime.
    pub fn start(&self) -> Result<()> {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if running.as_ref().is_some_and(|r| !r.handle.is_finished()) {
            return Ok(());
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::configuration("OutboxRelay::start needs a tokio runtime"))?;
        let token = CancellationToken::new();
        let handle = runtime.spawn(self.inner.clone().run(token.clone()));
        *running = Some(Running { token, handle });
        Ok(())
    }

    /// Stops a relay started with [`start`](Self::start): waits for the batch in flight to be
    /// delivered and marked, closes the delivery. Idempotent: stopping a stopped relay does nothing.
    ///
    /// # Errors
    /// [`Error::Configuration`] when the relay task panicked.
    pub async fn stop(&self) -> Result<()> {
        let running = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        let Some(Running { token, handle }) = running else {
            return Ok(());
        };
        token.cancel();
        handle
            .await
            .map_err(|e| Error::configuration(format!("relay task failed: {e}")))?
    }
}

impl<B: JournalBackend> OutboxRelay<B> {
    /// The journal of this relay's outbox table, scoped to the relay's topics
    /// ([`RelayConfig::topics`]): the operator's API for its backlog, dead letters and
    /// clean-ups ([`Journal::backlog`], [`Journal::retry_dead_lettered`], [`Journal::cleanup`]
    /// with [`RelayConfig::cleanup_batch_size`]).
    pub fn journal(&self) -> Journal<B> {
        let outbox = &self.inner.outbox;
        Journal::new(outbox.backend().clone(), outbox.table().clone())
            .with_scope(self.inner.topics.clone())
    }
}

impl Counters {
    fn snapshot(&self) -> RelayStats {
        RelayStats {
            polls: self.polls.load(Ordering::Relaxed),
            leased: self.leased.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            dead_lettered: self.dead_lettered.load(Ordering::Relaxed),
        }
    }
}

/// How many times a mark is tried before the relay gives up and leaves the lease to expire.
const MARK_TRIES: u32 = 3;

impl<B: Backend> Inner<B> {
    async fn backlog(&self) -> Result<Backlog> {
        let params = BacklogParams::new(self.topics.clone(), Utc::now());
        let backlog = self
            .outbox
            .backend()
            .backlog(self.outbox.table(), &params)
            .await?;
        crate::journal::set_backlog_gauges(self.outbox.table(), &backlog);
        Ok(backlog)
    }

    async fn run(self: Arc<Self>, shutdown: CancellationToken) -> Result<()> {
        let config = &self.config;
        let mut storage_errors: i32 = 0;
        let mut outage = Outage::default();
        let mut next_backlog = tokio::time::Instant::now();
        let mut subscription = match self.outbox.wakeup() {
            Some(wakeup) => match wakeup.subscribe().await {
                Ok(subscription) => Some(subscription),
                Err(error) => {
                    tracing::warn!(relay = %config.name, error = &error as &dyn std::error::Error, "wake-up subscription failed; polling only");
                    None
                }
            },
            None => None,
        };
        tracing::info!(relay = %config.name, table = %self.outbox.table(), "relay started");
        // The marks of the last delivered batch, written while the next batch is leased.
        let mut finishing = None;
        let mut contended_in_a_row = 0;
        while !shutdown.is_cancelled() {
            if !config.backlog_interval.is_zero() && tokio::time::Instant::now() >= next_backlog {
                next_backlog = tokio::time::Instant::now() + config.backlog_interval;
                if let Err(error) = self.backlog().await {
                    tracing::debug!(relay = %config.name, error = &error as &dyn std::error::Error, "backlog refresh failed");
                }
            }
            // The relay's only destination is open: nothing is leased until its next probe.
            if let gate::LeaseScope::Paused(until) = self.gates.lease_scope(self.delivery.as_ref())
            {
                if let Err(error) = Self::finished(finishing.take()).await {
                    tracing::warn!(relay = %config.name, error = &error as &dyn std::error::Error, "marking the previous batch failed");
                }
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep_until(until) => {}
                }
                continue;
            }
            // Signals queued so far announce commits this poll will see: drop them, so a burst
            // of commits costs one poll instead of one poll per commit.
            if let Some(queued) = subscription.as_mut()
                && !queued.discard_queued()
            {
                tracing::warn!(relay = %config.name, "wake-up closed; polling only");
                subscription = None;
            }
            let wait = match self
                .poll_pipelined(&mut finishing, &mut contended_in_a_row)
                .await
            {
                // A poll that leased anything polls again at once.
                Ok(true) => {
                    storage_errors = 0;
                    outage.recovered(&config.name);
                    continue;
                }
                Ok(_) => {
                    storage_errors = 0;
                    outage.recovered(&config.name);
                    // An open destination's events are due again at its probe.
                    match self.gates.destinations.next_probe() {
                        Some(at) => config
                            .poll_interval
                            .min(at.saturating_duration_since(tokio::time::Instant::now())),
                        None => config.poll_interval,
                    }
                }
                Err(error) => {
                    storage_errors = storage_errors.saturating_add(1);
                    let cap = storage_backoff_cap(config.poll_interval);
                    let wait = retry_delay(
                        storage_errors,
                        STORAGE_BACKOFF_BASE.min(cap),
                        cap,
                        random_jitter(),
                    );
                    outage.failed(&config.name, &error, wait);
                    wait
                }
            };
            // After a storage error only the backoff counts; otherwise a signal for one of this
            // relay's topics cuts the wait short.
            let wakeable = storage_errors == 0;
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(wait) => {}
                open = next_signal(subscription.as_mut(), &self.topics), if wakeable => {
                    if !open {
                        tracing::warn!(relay = %config.name, "wake-up closed; polling only");
                        subscription = None;
                    }
                }
            }
        }
        // The last batch's marks are written before the relay stops.
        if let Err(error) = Self::finished(finishing.take()).await {
            tracing::warn!(relay = %config.name, error = &error as &dyn std::error::Error, "marking the last batch failed");
        }
        if let Err(error) = self.delivery.close().await {
            tracing::warn!(relay = %config.name, error = &error as &dyn std::error::Error, "closing the delivery failed");
        }
        tracing::info!(relay = %config.name, "relay stopped");
        Ok(())
    }

    async fn poll_once(&self) -> Result<PollOutcome> {
        let result = self.poll().await;
        // Counted when the poll is over, so `polls >= n` means its lease has run.
        self.stats.polls.fetch_add(1, Ordering::Relaxed);
        result
    }

    async fn poll(&self) -> Result<PollOutcome> {
        match self.lease_and_deliver().await? {
            Leased::Batch(batch) => self.finish(batch).await,
            Leased::Nothing | Leased::Contended => Ok(PollOutcome::default()),
        }
    }

    /// One poll of the run loop, pipelined: this batch is leased and delivered while the previous
    /// one's marks are written (`finishing`); its own marks are then left running in the
    /// background for the next call. Order per key holds: while the previous batch is not
    /// marked its events are leased, so their keys' later events cannot be leased here.
    /// Returns whether to poll again at once: after a lease that took anything, when nothing
    /// was free but the previous batch was still being marked (its keys are free now), or when
    /// another relay's lease held the heads this one found (the next walk starts past them; at
    /// most [`MAX_CONTENDED_REPOLLS`] times in a row).
    async fn poll_pipelined(
        self: &Arc<Self>,
        finishing: &mut Option<JoinHandle<Result<PollOutcome>>>,
        contended_in_a_row: &mut u32,
    ) -> Result<bool> {
        let step = self.lease_and_deliver().await;
        self.stats.polls.fetch_add(1, Ordering::Relaxed);
        let previous = Self::finished(finishing.take()).await;
        let batch = match step {
            Ok(batch) => batch,
            Err(error) => {
                if let Err(marks) = previous {
                    tracing::warn!(relay = %self.config.name, error = &marks as &dyn std::error::Error, "marking the previous batch failed");
                }
                return Err(error);
            }
        };
        let previous = previous?;
        match batch {
            Leased::Batch(batch) => {
                *contended_in_a_row = 0;
                let relay = self.clone();
                *finishing = Some(tokio::spawn(async move { relay.finish(batch).await }));
                Ok(true)
            }
            Leased::Contended if *contended_in_a_row < MAX_CONTENDED_REPOLLS => {
                *contended_in_a_row += 1;
                Ok(true)
            }
            Leased::Nothing | Leased::Contended => {
                *contended_in_a_row = 0;
                Ok(previous.is_some())
            }
        }
    }

    /// Waits for the marks of a batch left running by [`Self::poll_pipelined`].
    async fn finished(
        finishing: Option<JoinHandle<Result<PollOutcome>>>,
    ) -> Result<Option<PollOutcome>> {
        match finishing {
            None => Ok(None),
            Some(handle) => match handle.await {
                Ok(outcome) => outcome.map(Some),
                // A panic there (an observer's, say) is this relay's panic, as in a serial poll.
                Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
                // The task is never aborted.
                Err(_) => Ok(None),
            },
        }
    }

    /// Leases a batch and delivers it while holding its lease.
    async fn lease_and_deliver(&self) -> Result<Leased> {
        let config = &self.config;
        let backend = self.outbox.backend();
        let table = self.outbox.table();
        let cursor = self
            .key_cursor
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let topics = match self.gates.lease_scope(self.delivery.as_ref()) {
            gate::LeaseScope::Paused(_) => return Ok(Leased::Nothing),
            gate::LeaseScope::Topics(open) if open.is_all() => self.topics.clone(),
            gate::LeaseScope::Topics(open) => self.topics.and(&open),
        };
        let leased = backend
            .event_lease(
                table,
                &EventLeaseParams::new(config.name.clone(), config.batch_size as i64, config.lease)
                    .with_topics(topics)
                    .with_max_events_per_key(config.max_events_per_key as i64)
                    .with_min_keys(config.concurrency as i64)
                    .with_key_cursor(cursor),
            )
            .await?;
        if let Some(next) = leased.key_cursor {
            *self.key_cursor.lock().unwrap_or_else(|p| p.into_inner()) = next;
        }
        let events = if leased.unreadable.is_empty() {
            leased.events
        } else {
            self.dead_letter_unreadable(leased.unreadable, leased.events)
                .await?
        };
        if events.is_empty() {
            return Ok(if leased.contended {
                Leased::Contended
            } else {
                Leased::Nothing
            });
        }
        self.stats
            .leased
            .fetch_add(events.len() as u64, Ordering::Relaxed);

        let started = std::time::Instant::now();
        let reports = self.deliver_holding_lease(&events).await;
        metrics::histogram!("hare_outbox_batch_delivery_seconds", "table" => table.to_string())
            .record(started.elapsed().as_secs_f64());
        Ok(Leased::Batch(DeliveredBatch { events, reports }))
    }

    /// Dead-letters leased rows that cannot be read as events, with their reason as
    /// `last_error` and their attempts as they were, and releases the events of their ordering
    /// keys behind them (the key stays held back by its dead head, as after any dead letter).
    /// Such a row would otherwise fail every lease and stop the relay; now it holds back only
    /// its own key. Returns the events still to deliver.
    async fn dead_letter_unreadable(
        &self,
        unreadable: Vec<UnreadableRow>,
        events: Vec<OutboxEvent>,
    ) -> Result<Vec<OutboxEvent>> {
        let backend = self.outbox.backend();
        let table = self.outbox.table();
        let mut first_blocked: std::collections::HashMap<&str, i64> =
            std::collections::HashMap::new();
        for row in &unreadable {
            if let Some(key) = row.ordering_key.as_deref() {
                let first = first_blocked.entry(key).or_insert(row.sequence);
                *first = (*first).min(row.sequence);
            }
        }
        let (events, behind): (Vec<OutboxEvent>, Vec<OutboxEvent>) =
            events.into_iter().partition(|e| {
                e.ordering_key
                    .as_deref()
                    .and_then(|k| first_blocked.get(k))
                    .is_none_or(|&first| e.sequence < first)
            });
        for row in &unreadable {
            tracing::warn!(relay = %self.config.name, %table, sequence = row.sequence, reason = %row.reason, "a stored event cannot be read; dead-lettered");
        }
        let failures = unreadable
            .iter()
            .map(|row| EventFailure::dead(row.sequence, row.attempts, row.reason.clone()))
            .collect();
        let params = EventMarkFailedParams::new(failures, self.config.name.clone());
        let dead = self
            .with_retries("dead-lettering unreadable events", || {
                backend.event_mark_failed(table, &params)
            })
            .await?;
        self.stats.dead_lettered.fetch_add(dead, Ordering::Relaxed);
        if !behind.is_empty() {
            let release = EventReleaseParams::new(
                behind.iter().map(|e| e.sequence).collect(),
                self.config.name.clone(),
            );
            self.with_retries("releasing events behind unreadable ones", || {
                backend.event_lease_release(table, &release)
            })
            .await?;
        }
        Ok(events)
    }

    /// Writes the marks of a delivered batch (delivered, failed, released), then counts and
    /// reports them to the observers and metrics.
    async fn finish(&self, batch: DeliveredBatch) -> Result<PollOutcome> {
        let config = &self.config;
        let backend = self.outbox.backend();
        let table = self.outbox.table();
        let DeliveredBatch {
            events,
            reports: reports_of_delivery,
        } = batch;
        let mut outcome = PollOutcome {
            leased: events.len(),
            ..PollOutcome::default()
        };
        let now = Utc::now();
        let mut delivered = Vec::new();
        let mut records = Vec::new();
        let mut failures = Vec::new();
        let mut released = Vec::new();
        let mut deferred = Vec::new();
        let mut reports = Vec::with_capacity(events.len());
        // Keys whose run failed in this batch: their later events are released unattempted.
        let mut failed_keys: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for (event, report) in events.iter().zip(reports_of_delivery) {
            let key = event.ordering_key.as_deref();
            let unattempted = report
                .result
                .as_ref()
                .is_err_and(DeliveryError::is_not_attempted);
            if unattempted || key.is_some_and(|k| failed_keys.contains(k)) {
                released.push(event.sequence);
                continue;
            }
            let record = report.record.filter(|_| config.result_column.is_some());
            match report.result {
                Ok(()) => {
                    delivered.push(event.sequence);
                    records.push(record);
                    reports.push(RelayEvent::Delivered {
                        event_id: event.id,
                        topic: event.topic.clone(),
                        table: table.to_string(),
                        model: model_of(event),
                        attempts: event.attempts,
                        delay_seconds: (now - event.created_at).as_seconds_f64().max(0.0),
                    });
                }
                Err(error) => {
                    if let Some(k) = key {
                        failed_keys.insert(k);
                    }
                    if let Some(retry_in) = error.deferred_for() {
                        // The destination is open: the event waits for its next probe, its
                        // attempts unchanged.
                        let text = stored_error_text(&error.chain());
                        deferred.push(
                            EventFailure::retry(
                                event.sequence,
                                event.attempts,
                                text.clone(),
                                retry_in,
                            )
                            .with_result(record),
                        );
                        reports.push(RelayEvent::Deferred {
                            event_id: event.id,
                            topic: event.topic.clone(),
                            table: table.to_string(),
                            model: model_of(event),
                            attempts: event.attempts,
                            error: text,
                            next_attempt_at: now + chrono_duration(retry_in),
                        });
                        continue;
                    }
                    let (failure, report) = self.failure(event, &error, now);
                    failures.push(failure.with_result(record));
                    reports.push(report);
                }
            }
        }
        if !delivered.is_empty() {
            let mut params = EventMarkDeliveredParams::new(delivered.clone());
            if let Some(column) = &config.result_column {
                params = params.with_results(column.clone(), records);
            }
            let changed = self
                .with_retries("marking delivered events", || {
                    backend.event_mark_delivered(table, &params)
                })
                .await?;
            if changed == 0 {
                // Every one was published by another relay already: nothing to report.
                reports.retain(|r| !matches!(r, RelayEvent::Delivered { .. }));
            }
            outcome.delivered = delivered.len();
        }
        outcome.deferred = deferred.len();
        if !failures.is_empty() || !deferred.is_empty() {
            outcome.dead_lettered = failures.iter().filter(|f| f.retry_in.is_none()).count();
            outcome.failed = failures.len() - outcome.dead_lettered;
            failures.extend(deferred);
            let mut params = EventMarkFailedParams::new(failures, config.name.clone());
            if let Some(column) = &config.result_column {
                params = params.with_result_column(column.clone());
            }
            let changed = self
                .with_retries("recording failed deliveries", || {
                    backend.event_mark_failed(table, &params)
                })
                .await?;
            if changed == 0 {
                // The lease was lost: another relay holds these events, the failures are not ours.
                reports.retain(|r| matches!(r, RelayEvent::Delivered { .. }));
            }
        }
        if !released.is_empty() {
            outcome.released = released.len();
            let params = EventReleaseParams::new(released, config.name.clone());
            self.with_retries("releasing the rest of failed runs", || {
                backend.event_lease_release(table, &params)
            })
            .await?;
        }
        self.stats
            .delivered
            .fetch_add(outcome.delivered as u64, Ordering::Relaxed);
        self.stats
            .failed
            .fetch_add(outcome.failed as u64, Ordering::Relaxed);
        self.stats
            .dead_lettered
            .fetch_add(outcome.dead_lettered as u64, Ordering::Relaxed);
        let table_name = table.to_string();
        for report in &reports {
            record_metrics(&table_name, report);
            for observer in &self.observers {
                observer.observe(report);
            }
        }
        Ok(outcome)
    }

    /// Delivers the batch, each key's run in order
    /// ([`deliver_in_key_order`](crate::delivery::deliver_in_key_order)), each destination through
    /// its circuit breaker and rate limit, while a background
    /// task extends its lease every third of the lease. When extending keeps failing — an error,
    /// or no answer (a line that drops packets, a locked row) — until less than a third of the
    /// lease is left, the delivery is cut
    /// short: what was not sent yet comes back unattempted, so it is never sent while another
    /// relay may already hold it.
    ///
    /// With feature `otel`, each event gets a `hare_outbox.deliver` span under its trace context
    /// for the time of the batch's delivery (see [`crate::trace_context`]).
    async fn deliver_holding_lease(&self, events: &[OutboxEvent]) -> Vec<DeliveryReport> {
        #[cfg(feature = "otel")]
        {
            use tracing::Instrument;
            let spans: Vec<tracing::Span> = events
                .iter()
                .map(|e| crate::trace_context::delivery_span(e, events.len()))
                .collect();
            let delivering = self.deliver_holding_lease_untraced(events);
            // A lone event's span is the delivery's own: the transport's spans nest under it.
            let reports = match spans.as_slice() {
                [span] => delivering.instrument(span.clone()).await,
                _ => delivering.await,
            };
            for (span, report) in spans.iter().zip(&reports) {
                let outcome = match &report.result {
                    Ok(()) => "delivered",
                    Err(e) if e.is_not_attempted() => "not_attempted",
                    Err(_) => "failed",
                };
                span.record("outcome", outcome);
            }
            reports
        }
        #[cfg(not(feature = "otel"))]
        self.deliver_holding_lease_untraced(events).await
    }

    async fn deliver_holding_lease_untraced(&self, events: &[OutboxEvent]) -> Vec<DeliveryReport> {
        let config = &self.config;
        let lease_lost = CancellationToken::new();
        let extender = {
            let backend = self.outbox.backend().clone();
            let table = self.outbox.table().clone();
            let sequences: Vec<i64> = events.iter().map(|e| e.sequence).collect();
            let name = config.name.clone();
            let lease = config.lease;
            let lease_lost = lease_lost.clone();
            // Aborted when dropped, so a poll future dropped mid-delivery stops extending the lease
            // and the batch is delivered again after the lease expires.
            tokio_util::task::AbortOnDropHandle::new(tokio::spawn(async move {
                let period = lease / 3;
                let mut held_until = tokio::time::Instant::now() + lease;
                let mut ticker =
                    tokio::time::interval_at(tokio::time::Instant::now() + period, period);
                loop {
                    ticker.tick().await;
                    let params =
                        EventLeaseExtendParams::new(sequences.clone(), name.clone(), lease);
                    let asked = tokio::time::Instant::now();
                    // An extension that does not answer (a line that drops packets, a blocked
                    // row) counts as failed once less than a third of the lease is left.
                    let deadline = held_until.checked_sub(period).unwrap_or(asked);
                    let extended = tokio::time::timeout_at(
                        deadline.max(asked),
                        backend.event_lease_extend(&table, &params),
                    )
                    .await;
                    let error = match extended {
                        Ok(Ok(_)) => {
                            held_until = asked + lease;
                            continue;
                        }
                        Ok(Err(error)) => error,
                        Err(_) => Error::database(format!(
                            "no answer within {:.1} s",
                            deadline.saturating_duration_since(asked).as_secs_f64()
                        )),
                    };
                    tracing::warn!(relay = %name, error = &error as &dyn std::error::Error, "extending the lease failed");
                    if held_until.saturating_duration_since(tokio::time::Instant::now()) <= period {
                        tracing::error!(relay = %name, "the lease cannot be kept; the rest of the batch is left for a later lease");
                        lease_lost.cancel();
                        return;
                    }
                }
            }))
        };
        let mut results = tokio::select! {
            results = self.gates.deliver(&self.delivery, &lease_lost, events, config.concurrency, config.delivery_timeout) => results,
            _ = lease_lost.cancelled() => Vec::new(),
        };
        drop(extender);
        if lease_lost.is_cancelled() {
            // Nothing of this batch is marked: what went out is delivered again later (at least
            // once); what did not is released for the next lease.
            return events.iter().map(|_| not_attempted()).collect();
        }
        if results.len() != events.len() {
            let got = results.len();
            results = events
                .iter()
                .map(|_| {
                    DeliveryReport::new(Err(DeliveryError::new(format!(
                        "the delivery returned {got} results for a batch of {}",
                        events.len()
                    ))))
                })
                .collect();
        }
        results
    }

    fn failure(
        &self,
        event: &OutboxEvent,
        error: &DeliveryError,
        now: DateTime<Utc>,
    ) -> (EventFailure, RelayEvent) {
        let config = &self.config;
        let attempts = event.attempts.saturating_add(1);
        let text = stored_error_text(&error.chain());
        let name = &config.name;
        let permanent = error.kind() == DeliveryErrorKind::Permanent;
        if permanent || attempts >= config.max_delivery_attempts {
            tracing::error!(relay = %name, event_id = %event.id, topic = %event.topic, attempts, error = %text, "event dead-lettered");
            let failure = EventFailure::dead(event.sequence, attempts, text.clone());
            let report = RelayEvent::DeadLettered {
                event_id: event.id,
                topic: event.topic.clone(),
                table: self.outbox.table().to_string(),
                model: model_of(event),
                attempts,
                error: text,
            };
            (failure, report)
        } else {
            let delay = match error.kind() {
                // The destination said when: then, at most retry_max from now.
                DeliveryErrorKind::RetryAfter(after) => after.min(config.retry_max),
                _ => retry_delay(
                    attempts,
                    config.retry_base,
                    config.retry_max,
                    random_jitter(),
                ),
            };
            tracing::warn!(relay = %name, event_id = %event.id, topic = %event.topic, attempts, retry_in_seconds = delay.as_secs_f64(), error = %text, "delivery failed");
            let failure = EventFailure::retry(event.sequence, attempts, text.clone(), delay);
            let report = RelayEvent::DeliveryFailed {
                event_id: event.id,
                topic: event.topic.clone(),
                table: self.outbox.table().to_string(),
                model: model_of(event),
                attempts,
                error: text,
                // The database writes its own clock's time; this is the relay's estimate of it.
                next_attempt_at: now + chrono_duration(delay),
            };
            (failure, report)
        }
    }

    /// Marks are written even while stopping; a transient storage error is retried a few times.
    async fn with_retries<'a, F, Fut>(&self, what: &str, mut call: F) -> Result<u64>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<u64>> + 'a,
    {
        let mut tries = 0;
        loop {
            tries += 1;
            match call().await {
                Ok(n) => return Ok(n),
                Err(error) if tries < MARK_TRIES => {
                    tracing::warn!(relay = %self.config.name, error = &error as &dyn std::error::Error, tries, "{what} failed; trying again");
                    tokio::time::sleep(Duration::from_millis(200 * u64::from(tries))).await;
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// How many times in a row a relay polls again at once after a contended lease (one that found
/// only heads another relay's lease held locked) before it waits for its poll interval again.
const MAX_CONTENDED_REPOLLS: u32 = 8;

/// What one lease gave the run loop.
enum Leased {
    /// A batch, delivered and waiting for its marks.
    Batch(DeliveredBatch),
    /// Nothing could be leased.
    Nothing,
    /// Nothing leased, but only because another relay's lease held the heads found.
    Contended,
}

/// A leased batch and the report of each event's delivery, in batch order, waiting for its marks.
struct DeliveredBatch {
    events: Vec<OutboxEvent>,
    reports: Vec<DeliveryReport>,
}

/// Why an event was not sent when the batch's lease could not be kept.
const LEASE_LOST: &str = "not attempted: the lease could not be kept (database unreachable)";

fn not_attempted() -> DeliveryReport {
    DeliveryReport::new(Err(DeliveryError::not_attempted(LEASE_LOST)))
}

/// The relay's delivery, refusing to start a send once the batch's lease is lost.
struct GuardedDelivery {
    inner: Arc<dyn Delivery>,
    lease_lost: CancellationToken,
}

#[async_trait::async_trait]
impl Delivery for GuardedDelivery {
    async fn deliver(&self, event: &OutboxEvent) -> std::result::Result<(), DeliveryError> {
        if self.lease_lost.is_cancelled() {
            return Err(DeliveryError::not_attempted(LEASE_LOST));
        }
        self.inner.deliver(event).await
    }

    async fn deliver_batch_reported(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        if self.lease_lost.is_cancelled() {
            return events.iter().map(|_| not_attempted()).collect();
        }
        self.inner
            .deliver_batch_reported(events, concurrency, timeout)
            .await
    }

    fn keeps_key_order(&self) -> bool {
        self.inner.keeps_key_order()
    }

    async fn destination_of(&self, event: &OutboxEvent) -> Option<String> {
        self.inner.destination_of(event).await
    }
}

/// Waits for a signal naming one of `topics` (or a "missed signals" notice); `false` when the
/// wake-up closed. Without a subscription it never completes.
async fn next_signal(subscription: Option<&mut WakeupSubscription>, topics: &TopicFilter) -> bool {
    let Some(subscription) = subscription else {
        return std::future::pending().await;
    };
    loop {
        match subscription.recv().await {
            None => return false,
            Some(None) => return true,
            // An empty signal means "poll now" (e.g. after a reconnect that may have lost signals).
            Some(Some(signal)) if signal.is_empty() || signal.iter().any(|t| topics.matches(t)) => {
                return true;
            }
            Some(Some(_)) => {}
        }
    }
}

/// The first pause after a failed poll; it doubles per failure in a row up to
/// [`storage_backoff_cap`].
const STORAGE_BACKOFF_BASE: Duration = Duration::from_millis(100);

/// How often a run of failed polls is logged at WARN after its first failure.
const OUTAGE_LOG_EVERY: Duration = Duration::from_secs(30);

/// The longest pause between failed polls: the poll interval, within 50 ms..=5 s, so delivery
/// resumes within a poll interval (at most 5 s) of the database coming back.
fn storage_backoff_cap(poll_interval: Duration) -> Duration {
    poll_interval.clamp(Duration::from_millis(50), Duration::from_secs(5))
}

/// A run of failed polls, for logs an operator can follow without a flood: the first failure and
/// then one line per [`OUTAGE_LOG_EVERY`] at WARN with the cause, the rest at DEBUG, and one
/// INFO when a poll succeeds again.
#[derive(Debug, Default)]
struct Outage {
    /// When the run of failures started, and when it was last logged at WARN.
    since: Option<(tokio::time::Instant, tokio::time::Instant)>,
    failures: u64,
}

impl Outage {
    fn failed(&mut self, relay: &str, error: &Error, retry_in: Duration) {
        let now = tokio::time::Instant::now();
        self.failures += 1;
        let error = error as &dyn std::error::Error;
        match &mut self.since {
            None => {
                self.since = Some((now, now));
                tracing::warn!(relay = %relay, error, retry_in_seconds = retry_in.as_secs_f64(), "relay poll failed; retrying");
            }
            Some((started, logged)) if now.duration_since(*logged) >= OUTAGE_LOG_EVERY => {
                *logged = now;
                tracing::warn!(relay = %relay, error, failures = self.failures, failing_for_seconds = now.duration_since(*started).as_secs(), retry_in_seconds = retry_in.as_secs_f64(), "relay polls still failing; retrying");
            }
            Some(_) => {
                tracing::debug!(relay = %relay, error, failures = self.failures, retry_in_seconds = retry_in.as_secs_f64(), "relay poll failed; retrying");
            }
        }
    }

    fn recovered(&mut self, relay: &str) {
        if let Some((started, _)) = self.since.take() {
            tracing::info!(relay = %relay, failures = self.failures, failed_for_seconds = started.elapsed().as_secs_f64(), "relay polls succeed again");
            self.failures = 0;
        }
    }
}

/// The model label of a captured event: its payload's `model`, when that is text.
fn model_of(event: &OutboxEvent) -> Option<String> {
    event
        .payload
        .get("model")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}

/// Counters and the delay histogram, labelled by table and topic (keep topics few: each is a
/// time series).
fn record_metrics(table: &str, report: &RelayEvent) {
    match report {
        RelayEvent::Delivered {
            topic,
            delay_seconds,
            ..
        } => {
            metrics::counter!("hare_outbox_delivered_total", "table" => table.to_owned(), "topic" => topic.clone())
                .increment(1);
            metrics::histogram!("hare_outbox_delivery_delay_seconds", "table" => table.to_owned(), "topic" => topic.clone())
                .record(*delay_seconds);
        }
        RelayEvent::DeliveryFailed { topic, .. } => {
            metrics::counter!("hare_outbox_delivery_failed_total", "table" => table.to_owned(), "topic" => topic.clone())
                .increment(1);
        }
        RelayEvent::DeadLettered { topic, .. } => {
            metrics::counter!("hare_outbox_dead_lettered_total", "table" => table.to_owned(), "topic" => topic.clone())
                .increment(1);
        }
        RelayEvent::Deferred { topic, .. } => {
            metrics::counter!("hare_outbox_deferred_total", "table" => table.to_owned(), "topic" => topic.clone())
                .increment(1);
        }
    }
}

/// Checks that `name` is an extra column of `table` with the JSON type.
fn check_result_column(table: &crate::table::OutboxTable, name: &str) -> Result<()> {
    let declared: Vec<&str> = table.columns().iter().map(|c| c.name()).collect();
    match table.column(name) {
        None => Err(Error::configuration(format!(
            "result_column {name:?} is not an extra column of outbox table {table}; declared extra columns: [{}] — declare it with OutboxTable::with_column(ExtraColumn::new({name:?}, ColumnType::Json)?)",
            declared.join(", ")
        ))),
        Some(column) if column.column_type() != crate::extra::ColumnType::Json => {
            Err(Error::configuration(format!(
                "result_column {name:?} of outbox table {table} has the type {:?}; only a ColumnType::Json column can hold the records",
                column.column_type()
            )))
        }
        Some(_) => Ok(()),
    }
}

/// Longest `last_error` stored, in characters.
pub const MAX_ERROR_CHARS: usize = 4000;

/// The error text as stored and logged: URLs in it redacted
/// ([`redact::in_text`](crate::redact::in_text), passwords and secret parameters hidden), NUL
/// (which PostgreSQL text cannot hold) as U+FFFD, cut to [`MAX_ERROR_CHARS`] characters.
fn stored_error_text(text: &str) -> String {
    crate::redact::in_text(text, crate::redact::UrlKind::Connection)
        .chars()
        .take(MAX_ERROR_CHARS)
        .map(|c| if c == '\0' { '\u{FFFD}' } else { c })
        .collect()
}

fn chrono_duration(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_error_text_replaces_nul_and_cuts() {
        assert_eq!(stored_error_text("a\0b"), "a\u{FFFD}b");
        assert_eq!(
            stored_error_text(&"é".repeat(5000)).chars().count(),
            MAX_ERROR_CHARS
        );
    }
}
