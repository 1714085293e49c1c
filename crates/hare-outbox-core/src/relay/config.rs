//! Relay options with hare's defaults.

use std::time::Duration;

use super::BreakerConfig;
use crate::error::{Error, Result};
use crate::topic::TopicFilter;

/// Smallest and largest batch size.
pub const BATCH_SIZE_RANGE: std::ops::RangeInclusive<u32> = 1..=10_000;

/// Shortest poll interval: 10 ms. Shorter intervals spin on an empty table for no gain (a
/// wake-up ends the wait anyway).
pub const MIN_POLL_INTERVAL: Duration = Duration::from_millis(10);

/// Shortest lease: 1 s.
pub const MIN_LEASE: Duration = Duration::from_secs(1);

/// Shortest delivery timeout: 10 ms.
pub const MIN_DELIVERY_TIMEOUT: Duration = Duration::from_millis(10);

/// Smallest and largest concurrency: 1 to 10000.
pub const CONCURRENCY_RANGE: std::ops::RangeInclusive<usize> = 1..=10_000;

/// Options of an [`OutboxRelay`](super::OutboxRelay). Every option has hare's default; set
/// them with the `with_*` methods. Checked by [`RelayConfig::validate`] when the relay is built.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RelayConfig {
    /// How long to wait for a wake-up after a poll that leased nothing; a poll that leased
    /// anything polls again at once. At least 10 ms ([`MIN_POLL_INTERVAL`]). Defaults to 5 s.
    pub poll_interval: Duration,
    /// Most events leased per poll. 1 to 10000. Defaults to 100.
    pub batch_size: u32,
    /// Most events of one ordering key in one batch: the key's head and the ordered run of its
    /// next events. A run is
    /// delivered in order — one after the other by a delivery that sends event by event, as one
    /// ordered batch by one that keeps key order
    /// ([`Delivery::keeps_key_order`](crate::Delivery::keeps_key_order)) — and the first failure
    /// releases the rest of its run without counting an attempt. 1 to 10000; 1 gives hare's
    /// one event per key per batch. Defaults to 100.
    pub max_events_per_key: u32,
    /// Attempts before an event is dead-lettered. At least 1. Defaults to 5.
    pub max_delivery_attempts: i32,
    /// First retry delay; doubled each attempt. Defaults to 1 s.
    pub retry_base: Duration,
    /// Longest retry delay. Defaults to 300 s.
    pub retry_max: Duration,
    /// How long a leased batch is held before another relay may take it. At least 1 s
    /// ([`MIN_LEASE`]). Defaults to 60 s.
    pub lease: Duration,
    /// How long one delivery may take: at least 10 ms ([`MIN_DELIVERY_TIMEOUT`]) and shorter
    /// than `lease`. Defaults to 30 s.
    pub delivery_timeout: Duration,
    /// Events delivered at once by a delivery that sends one by one. 1 to 10000
    /// ([`CONCURRENCY_RANGE`]). Defaults to 10.
    pub concurrency: usize,
    /// Relay name written to `leased_by`. Defaults to `host:pid:random`.
    pub name: String,
    /// Topics this relay leases, delivers, counts and cleans: exact names or prefixes ending in
    /// `*` (`_` and `%` are literal). `None` = every topic; an empty list is refused (it would
    /// deliver nothing). Defaults to `None`.
    pub topics: Option<Vec<String>>,
    /// Topics left to other relays, same patterns as `topics`. Defaults to none.
    pub exclude_topics: Vec<String>,
    /// Rows deleted per statement by the clean-ups run through the relay's journal
    /// ([`OutboxRelay::journal`](super::OutboxRelay::journal)). 1 to 100000. Defaults to 1000.
    pub cleanup_batch_size: u32,
    /// How often the running relay refreshes its backlog gauges (`hare_outbox_backlog_*`); zero
    /// turns the refresh off. Defaults to 15 s.
    pub backlog_interval: Duration,
    /// An extra column of the outbox table, of type [`ColumnType::Json`](crate::ColumnType),
    /// into which each attempt's record from the delivery
    /// ([`DeliveryReport::record`](crate::DeliveryReport)) is written with the mark — for the
    /// webhook `{"status_code", "body", "error"}`.
    /// An attempt without a record leaves the column as it was. Checked when the relay is built:
    /// the table must declare the column with the JSON type. Defaults to none.
    pub result_column: Option<String>,
    /// The circuit breaker of every destination (the delivery, each route of a
    /// [`TopicRouter`](crate::TopicRouter), each webhook target host) unless its
    /// [`Destination`](crate::Destination) sets its own. After
    /// [`failure_threshold`](BreakerConfig::failure_threshold) consecutive failures that look
    /// like an outage the destination opens: its events are not sent and their attempts not
    /// counted (they wait, `next_attempt_at` pushed to the next probe), while other destinations
    /// keep flowing; while the relay's only destination is open it leases nothing, and a router's
    /// open routes' topics are left out of its leases. A probe goes out after
    /// [`probe_interval`](BreakerConfig::probe_interval), doubling per failed probe up to
    /// [`probe_interval_max`](BreakerConfig::probe_interval_max); the first answer closes it and
    /// sending ramps up again (1, 2, 4, … sends at once). The state lives in the relay process:
    /// several relays on one table each have their own breakers. Defaults to
    /// [`BreakerConfig::default`]: on, 5 failures, probes after 1 s up to 60 s.
    pub breaker: BreakerConfig,
}

impl Default for RelayConfig {
    fn default() -> Self {
        RelayConfig {
            poll_interval: Duration::from_secs(5),
            batch_size: 100,
            max_events_per_key: 100,
            max_delivery_attempts: 5,
            retry_base: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            lease: Duration::from_secs(60),
            delivery_timeout: Duration::from_secs(30),
            concurrency: 10,
            name: default_name(),
            topics: None,
            exclude_topics: Vec::new(),
            cleanup_batch_size: 1000,
            backlog_interval: Duration::from_secs(15),
            result_column: None,
            breaker: BreakerConfig::default(),
        }
    }
}

macro_rules! with {
    ($(#[$doc:meta] $fn:ident: $field:ident: $ty:ty),* $(,)?) => {
        $(#[$doc] pub fn $fn(mut self, value: $ty) -> Self { self.$field = value; self })*
    };
}

impl RelayConfig {
    with! {
        /// Sets [`RelayConfig::poll_interval`].
        with_poll_interval: poll_interval: Duration,
        /// Sets [`RelayConfig::batch_size`].
        with_batch_size: batch_size: u32,
        /// Sets [`RelayConfig::max_events_per_key`].
        with_max_events_per_key: max_events_per_key: u32,
        /// Sets [`RelayConfig::max_delivery_attempts`].
        with_max_delivery_attempts: max_delivery_attempts: i32,
        /// Sets [`RelayConfig::retry_base`].
        with_retry_base: retry_base: Duration,
        /// Sets [`RelayConfig::retry_max`].
        with_retry_max: retry_max: Duration,
        /// Sets [`RelayConfig::lease`].
        with_lease: lease: Duration,
        /// Sets [`RelayConfig::delivery_timeout`].
        with_delivery_timeout: delivery_timeout: Duration,
        /// Sets [`RelayConfig::concurrency`].
        with_concurrency: concurrency: usize,
        /// Sets [`RelayConfig::cleanup_batch_size`].
        with_cleanup_batch_size: cleanup_batch_size: u32,
        /// Sets [`RelayConfig::backlog_interval`].
        with_backlog_interval: backlog_interval: Duration,
    }

    /// Sets [`RelayConfig::topics`].
    pub fn with_topics<S: Into<String>>(mut self, topics: impl IntoIterator<Item = S>) -> Self {
        self.topics = Some(topics.into_iter().map(Into::into).collect());
        self
    }

    /// Sets [`RelayConfig::exclude_topics`].
    pub fn with_exclude_topics<S: Into<String>>(
        mut self,
        topics: impl IntoIterator<Item = S>,
    ) -> Self {
        self.exclude_topics = topics.into_iter().map(Into::into).collect();
        self
    }

    /// The parsed topic filter.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the first pattern that is not a name or a `prefix*`.
    pub fn topic_filter(&self) -> Result<TopicFilter> {
        TopicFilter::new(self.topics.as_ref(), &self.exclude_topics)
    }

    /// Sets [`RelayConfig::breaker`].
    pub fn with_breaker(mut self, breaker: BreakerConfig) -> Self {
        self.breaker = breaker;
        self
    }

    /// Sets [`RelayConfig::result_column`].
    pub fn with_result_column(mut self, column: impl Into<String>) -> Self {
        self.result_column = Some(column.into());
        self
    }

    /// Sets [`RelayConfig::name`].
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Checks the options.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the option, its value and the range allowed: batch size
    /// outside 1..=10000, max attempts below 1, concurrency outside 1..=10000, a poll interval
    /// below 10 ms, a lease below 1 s, a delivery timeout below 10 ms or not below the lease, a
    /// retry base above the retry max, an empty `topics` list, an empty or over-255-character
    /// name, breaker options [`BreakerConfig::validate`] refuses.
    pub fn validate(&self) -> Result<()> {
        if !BATCH_SIZE_RANGE.contains(&self.batch_size) {
            return Err(Error::configuration(format!(
                "batch_size {} is out of range; allowed 1 to 10000",
                self.batch_size
            )));
        }
        if !(1..=10_000).contains(&self.max_events_per_key) {
            return Err(Error::configuration(format!(
                "max_events_per_key {} is out of range; allowed 1 to 10000 (1 = one event per ordering key per batch)",
                self.max_events_per_key
            )));
        }
        if self.max_delivery_attempts < 1 {
            return Err(Error::configuration(format!(
                "max_delivery_attempts {} is below 1",
                self.max_delivery_attempts
            )));
        }
        if !CONCURRENCY_RANGE.contains(&self.concurrency) {
            return Err(Error::configuration(format!(
                "concurrency {} is out of range; allowed 1 to 10000",
                self.concurrency
            )));
        }
        for (name, value, min) in [
            ("poll_interval", self.poll_interval, MIN_POLL_INTERVAL),
            ("lease", self.lease, MIN_LEASE),
            (
                "delivery_timeout",
                self.delivery_timeout,
                MIN_DELIVERY_TIMEOUT,
            ),
        ] {
            if value < min {
                return Err(Error::configuration(format!(
                    "{name} {} s is out of range; allowed {} or more (seconds)",
                    value.as_secs_f64(),
                    min.as_secs_f64()
                )));
            }
        }
        if self.topics.as_ref().is_some_and(Vec::is_empty) {
            return Err(Error::configuration(
                "topics is an empty list, which would deliver nothing; omit the topics setting (None) to take every topic",
            ));
        }
        if self.delivery_timeout >= self.lease {
            return Err(Error::configuration(format!(
                "delivery_timeout {:.3} s must be below lease {:.3} s: a lease that expires mid-delivery lets another relay deliver the event again",
                self.delivery_timeout.as_secs_f64(),
                self.lease.as_secs_f64()
            )));
        }
        if self.retry_base > self.retry_max {
            return Err(Error::configuration(format!(
                "retry_base {:.3} s is above retry_max {:.3} s",
                self.retry_base.as_secs_f64(),
                self.retry_max.as_secs_f64()
            )));
        }
        if !(1..=100_000).contains(&self.cleanup_batch_size) {
            return Err(Error::configuration(format!(
                "cleanup_batch_size {} is out of range; allowed 1 to 100000",
                self.cleanup_batch_size
            )));
        }
        self.topic_filter()?;
        self.breaker.validate()?;
        let name_chars = self.name.chars().count();
        if self.name.trim().is_empty() || name_chars > 255 {
            return Err(Error::configuration(format!(
                "relay name {:?} must have 1 to 255 characters",
                self.name
            )));
        }
        Ok(())
    }
}

/// `host:pid:random`, the default relay name.
pub fn default_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}:{}:{:08x}", std::process::id(), fastrand::u32(..))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_the_seed_and_validate() {
        let c = RelayConfig::default();
        assert_eq!(c.poll_interval, Duration::from_secs(5));
        assert_eq!(c.batch_size, 100);
        assert_eq!(c.max_events_per_key, 100);
        assert_eq!(c.max_delivery_attempts, 5);
        assert_eq!(c.lease, Duration::from_secs(60));
        assert_eq!(c.concurrency, 10);
        assert_eq!(c.name.split(':').count(), 3, "{}", c.name);
        c.validate().unwrap();
    }

    #[test]
    fn absurd_values_are_refused_naming_field_value_and_range() {
        let refused = |config: RelayConfig| match config.validate() {
            Err(Error::Configuration(message)) => message,
            other => panic!("expected a configuration error, got {other:?}"),
        };
        let d = RelayConfig::default;
        let m = refused(d().with_poll_interval(Duration::from_micros(1)));
        assert_eq!(
            m,
            "poll_interval 0.000001 s is out of range; allowed 0.01 or more (seconds)"
        );
        let m = refused(d().with_concurrency(1_000_000));
        assert_eq!(m, "concurrency 1000000 is out of range; allowed 1 to 10000");
        assert!(refused(d().with_concurrency(0)).contains("allowed 1 to 10000"));
        let m = refused(
            d().with_lease(Duration::from_millis(1))
                .with_delivery_timeout(Duration::from_micros(500)),
        );
        assert_eq!(
            m,
            "lease 0.001 s is out of range; allowed 1 or more (seconds)"
        );
        let m = refused(d().with_delivery_timeout(Duration::from_micros(500)));
        assert_eq!(
            m,
            "delivery_timeout 0.0005 s is out of range; allowed 0.01 or more (seconds)"
        );
        let m = refused(
            d().with_lease(Duration::from_secs(2))
                .with_delivery_timeout(Duration::from_secs(2)),
        );
        assert!(
            m.contains("delivery_timeout 2.000 s must be below lease"),
            "{m}"
        );
        let m = refused(d().with_topics(Vec::<String>::new()));
        assert!(m.contains("omit the topics"), "{m}");
        d().with_poll_interval(MIN_POLL_INTERVAL)
            .with_lease(MIN_LEASE)
            .with_delivery_timeout(MIN_DELIVERY_TIMEOUT)
            .with_concurrency(10_000)
            .validate()
            .unwrap();
    }

    #[test]
    fn out_of_range_options_are_refused_by_name() {
        let bad = [
            (RelayConfig::default().with_batch_size(0), "batch_size"),
            (RelayConfig::default().with_batch_size(10_001), "batch_size"),
            (
                RelayConfig::default().with_delivery_timeout(Duration::from_secs(60)),
                "delivery_timeout",
            ),
            (
                RelayConfig::default().with_max_delivery_attempts(0),
                "max_delivery_attempts",
            ),
            (RelayConfig::default().with_concurrency(0), "concurrency"),
            (
                RelayConfig::default().with_max_events_per_key(0),
                "max_events_per_key",
            ),
            (RelayConfig::default().with_name(""), "name"),
            (
                RelayConfig::default().with_retry_base(Duration::from_secs(400)),
                "retry_base",
            ),
        ];
        for (config, word) in bad {
            let e = config.validate().unwrap_err();
            assert!(e.to_string().contains(word), "{e}");
        }
        RelayConfig::default()
            .with_batch_size(10_000)
            .validate()
            .unwrap();
    }
}
