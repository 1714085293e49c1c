//! The circuit breaker and rate limit every kind of delivery section takes.

use std::sync::Arc;
use std::time::Duration;

use hare_outbox::{BreakerConfig, Delivery, Destination};

use super::DestinationSection;
use crate::config::values::seconds;
use crate::error::usage;

/// The keys every kind of delivery section takes: its circuit breaker and rate limit.
pub const DESTINATION_KEYS: [&str; 5] = [
    "breaker",
    "breaker_failure_threshold",
    "breaker_probe_interval_seconds",
    "breaker_probe_interval_max_seconds",
    "max_per_second",
];

/// The circuit breaker and rate limit one delivery section sets; what it leaves unset comes
/// from `[relay]` (the breaker) or is off (the rate limit).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DestinationOptions {
    /// `breaker`.
    pub enabled: Option<bool>,
    /// `breaker_failure_threshold`.
    pub failure_threshold: Option<u32>,
    /// `breaker_probe_interval_seconds`.
    pub probe_interval: Option<Duration>,
    /// `breaker_probe_interval_max_seconds`.
    pub probe_interval_max: Option<Duration>,
    /// `max_per_second`.
    pub max_per_second: Option<f64>,
}

impl DestinationOptions {
    /// The section's options, checked one by one.
    ///
    /// # Errors
    /// A usage error naming the key and what is allowed.
    pub(super) fn of(section: &DestinationSection) -> anyhow::Result<DestinationOptions> {
        let failure_threshold = section
            .breaker_failure_threshold
            .map(|v| {
                u32::try_from(v)
                    .ok()
                    .filter(|v| (1..=hare_outbox::relay::MAX_FAILURE_THRESHOLD).contains(v))
                    .ok_or_else(|| {
                        usage(format!(
                            "breaker_failure_threshold = {v} is out of range; allowed 1 to {}",
                            hare_outbox::relay::MAX_FAILURE_THRESHOLD
                        ))
                    })
            })
            .transpose()?;
        let probe = |key: &str, value: Option<f64>| -> anyhow::Result<Option<Duration>> {
            value
                .map(|v| {
                    let d = seconds(key, v, false)?;
                    if d < hare_outbox::relay::MIN_PROBE_INTERVAL {
                        return Err(usage(format!(
                            "{key} = {v} is out of range; allowed {} or more (seconds)",
                            hare_outbox::relay::MIN_PROBE_INTERVAL.as_secs_f64()
                        )));
                    }
                    Ok(d)
                })
                .transpose()
        };
        let max_per_second = section
            .max_per_second
            .map(|v| {
                hare_outbox::relay::check_max_per_second(v)
                    .map(|()| v)
                    .map_err(|_| {
                        usage(format!(
                            "max_per_second = {v} is not allowed; use a number of sends per second above 0 and at most {} (0.5 = one send every 2 s)",
                            hare_outbox::relay::MAX_PER_SECOND
                        ))
                    })
            })
            .transpose()?;
        Ok(DestinationOptions {
            enabled: section.breaker,
            failure_threshold,
            probe_interval: probe(
                "breaker_probe_interval_seconds",
                section.breaker_probe_interval_seconds,
            )?,
            probe_interval_max: probe(
                "breaker_probe_interval_max_seconds",
                section.breaker_probe_interval_max_seconds,
            )?,
            max_per_second,
        })
    }

    /// The breaker of this section: `base` (the relay's) with what the section sets; `None` when
    /// it sets nothing of the breaker.
    pub fn breaker(&self, base: &BreakerConfig) -> Option<BreakerConfig> {
        if self.enabled.is_none()
            && self.failure_threshold.is_none()
            && self.probe_interval.is_none()
            && self.probe_interval_max.is_none()
        {
            return None;
        }
        let mut config = base.clone();
        if let Some(enabled) = self.enabled {
            config = config.with_enabled(enabled);
        }
        if let Some(n) = self.failure_threshold {
            config = config.with_failure_threshold(n);
        }
        if let Some(d) = self.probe_interval {
            config = config.with_probe_interval(d);
        }
        if let Some(d) = self.probe_interval_max {
            config = config.with_probe_interval_max(d);
        }
        Some(config)
    }

    /// Checks the section's breaker merged with the relay's.
    ///
    /// # Errors
    /// A usage error naming the keys, e.g. a longest probe interval below the first.
    pub fn check(&self, base: &BreakerConfig) -> anyhow::Result<()> {
        if let Some(config) = self.breaker(base)
            && config.probe_interval_max < config.probe_interval
        {
            return Err(usage(format!(
                "breaker_probe_interval_max_seconds = {} is below breaker_probe_interval_seconds = {} (with what [relay] sets); allowed: at least the first interval",
                config.probe_interval_max.as_secs_f64(),
                config.probe_interval.as_secs_f64()
            )));
        }
        Ok(())
    }

    /// `delivery` as the destination `name` with these options over `base`.
    ///
    /// # Errors
    /// A configuration error the destination refuses (none after [`DestinationOptions::check`]).
    pub fn wrap(
        &self,
        name: &str,
        delivery: Arc<dyn Delivery>,
        base: &BreakerConfig,
    ) -> anyhow::Result<Arc<dyn Delivery>> {
        let mut destination = Destination::new(name, delivery)?;
        if let Some(config) = self.breaker(base) {
            destination = destination.with_breaker(config)?;
        }
        if let Some(rate) = self.max_per_second {
            destination = destination.with_max_per_second(rate)?;
        }
        Ok(Arc::new(destination))
    }
}
