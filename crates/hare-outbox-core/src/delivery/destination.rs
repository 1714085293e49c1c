//! A delivery with a name and its own circuit breaker and rate limit.

use std::time::Duration;

use async_trait::async_trait;

use super::{Delivery, DeliveryParts, DeliveryReport};
use crate::error::{DeliveryError, Error, Result};
use crate::event::OutboxEvent;
use crate::relay::{BreakerConfig, check_max_per_second};
use crate::topic::TopicFilter;

/// The name of a destination and its own settings, as [`Destination`] gives them to the relay
/// through [`Delivery::destination`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DestinationSpec {
    /// The name in logs, metrics (`destination` label), `/healthz` and the dashboard.
    pub name: String,
    /// Its breaker options; `None` = the relay's ([`RelayConfig::breaker`](crate::RelayConfig)).
    pub breaker: Option<BreakerConfig>,
    /// At most this many sends per second (token bucket holding one second's worth, at least
    /// one send); `None` = no limit.
    pub max_per_second: Option<f64>,
}

/// Wraps a delivery as a named destination with its own circuit breaker options and rate limit;
/// everything else goes to the wrapped delivery unchanged.
///
/// The relay gives every destination a circuit breaker (see
/// [`RelayConfig::breaker`](crate::RelayConfig::breaker)); without a `Destination` a delivery is
/// named `delivery` (a route of a [`TopicRouter`](crate::TopicRouter): its pattern) and uses
/// the relay's breaker options without a rate limit. Routes that share one `Destination` share
/// its breaker and rate limit.
///
/// ```
/// use std::time::Duration;
/// use hare_outbox_core::{BreakerConfig, Destination, FnDelivery, OutboxEvent};
///
/// let billing = Destination::new("billing", FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }))?
///     .with_breaker(BreakerConfig::default().with_failure_threshold(3))?
///     .with_max_per_second(50.0)?;
/// # let _ = billing;
/// # Ok::<(), hare_outbox_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Destination<D> {
    spec: DestinationSpec,
    inner: D,
}

impl<D: Delivery> Destination<D> {
    /// `delivery` named `name`, with the relay's breaker options and no rate limit.
    ///
    /// # Errors
    /// [`Error::Configuration`] when `name` is empty or longer than 255 characters.
    pub fn new(name: impl Into<String>, delivery: D) -> Result<Self> {
        let name = name.into();
        if name.trim().is_empty() || name.chars().count() > 255 {
            return Err(Error::configuration(format!(
                "destination name {name:?} must have 1 to 255 characters"
            )));
        }
        Ok(Destination {
            spec: DestinationSpec {
                name,
                breaker: None,
                max_per_second: None,
            },
            inner: delivery,
        })
    }

    /// This destination's breaker options instead of the relay's.
    ///
    /// # Errors
    /// [`Error::Configuration`] as [`BreakerConfig::validate`] says.
    pub fn with_breaker(mut self, breaker: BreakerConfig) -> Result<Self> {
        breaker.validate()?;
        self.spec.breaker = Some(breaker);
        Ok(self)
    }

    /// At most `max_per_second` sends per second to this destination (each event of a batch
    /// counts as one send); the relay waits for the rate before sending. Fractions are allowed
    /// (0.5 = one send every 2 s). Unset by default: no limit.
    ///
    /// # Errors
    /// [`Error::Configuration`] unless it is above 0 and at most one million.
    pub fn with_max_per_second(mut self, max_per_second: f64) -> Result<Self> {
        check_max_per_second(max_per_second)?;
        self.spec.max_per_second = Some(max_per_second);
        Ok(self)
    }

    /// The settings.
    pub fn spec(&self) -> &DestinationSpec {
        &self.spec
    }

    /// The wrapped delivery.
    pub fn inner(&self) -> &D {
        &self.inner
    }
}

#[async_trait]
impl<D: Delivery> Delivery for Destination<D> {
    async fn deliver(&self, event: &OutboxEvent) -> std::result::Result<(), DeliveryError> {
        self.inner.deliver(event).await
    }

    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<std::result::Result<(), DeliveryError>> {
        self.inner.deliver_batch(events, concurrency, timeout).await
    }

    async fn deliver_batch_reported(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        self.inner
            .deliver_batch_reported(events, concurrency, timeout)
            .await
    }

    fn keeps_key_order(&self) -> bool {
        self.inner.keeps_key_order()
    }

    fn destination(&self) -> Option<&DestinationSpec> {
        Some(&self.spec)
    }

    async fn destination_of(&self, event: &OutboxEvent) -> Option<String> {
        self.inner.destination_of(event).await
    }

    fn split(&self, events: &[OutboxEvent]) -> Option<DeliveryParts> {
        self.inner.split(events)
    }

    fn leasable_topics(&self, is_paused: &dyn Fn(&str) -> bool) -> TopicFilter {
        self.inner.leasable_topics(is_paused)
    }

    async fn close(&self) -> std::result::Result<(), DeliveryError> {
        self.inner.close().await
    }
}
