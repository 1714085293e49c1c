//! Building the deliveries of the file: one, or a router over the named ones.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use async_trait::async_trait;
use hare_outbox::{
    BreakerConfig, Delivery, DeliveryError, JsonLinesDelivery, OutboxEvent, TopicRouter,
};

use super::{BrokerConfig, DeliverySettings, DestinationOptions, MAIN_DESTINATION, config_error};
use crate::error::usage;

/// A delivery shared by several routes, closed once however many routes hold it.
struct Shared {
    inner: Arc<dyn Delivery>,
    closed: AtomicBool,
}

#[async_trait]
impl Delivery for Shared {
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        self.inner.deliver(event).await
    }

    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        self.inner.deliver_batch(events, concurrency, timeout).await
    }

    async fn deliver_batch_reported(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<hare_outbox::DeliveryReport> {
        self.inner
            .deliver_batch_reported(events, concurrency, timeout)
            .await
    }

    fn keeps_key_order(&self) -> bool {
        self.inner.keeps_key_order()
    }

    fn destination(&self) -> Option<&hare_outbox::DestinationSpec> {
        self.inner.destination()
    }

    async fn destination_of(&self, event: &OutboxEvent) -> Option<String> {
        self.inner.destination_of(event).await
    }

    async fn close(&self) -> Result<(), DeliveryError> {
        if self.closed.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.inner.close().await
    }
}

impl DeliverySettings {
    /// Builds the delivery (a [`TopicRouter`] for [`DeliverySettings::Routed`]). Nothing is
    /// connected yet, except that a Kafka producer starts connecting in the background.
    ///
    /// # Errors
    /// A configuration error naming the value the delivery refused.
    pub fn build(&self) -> anyhow::Result<Arc<dyn Delivery>> {
        self.build_with(None)
    }

    /// Builds the delivery for the relay: each delivery section a destination of its own —
    /// named `name` for a single delivery, by its section name behind a router — with its
    /// circuit breaker (`relay_breaker` with what the section sets) and rate limit.
    ///
    /// # Errors
    /// A configuration error naming the value the delivery refused.
    pub fn build_for_relay(
        &self,
        name: &str,
        options: &DestinationOptions,
        relay_breaker: &BreakerConfig,
    ) -> anyhow::Result<Arc<dyn Delivery>> {
        match self {
            DeliverySettings::Routed(_) => self.build_with(Some(relay_breaker)),
            DeliverySettings::One(_) => options.wrap(name, self.build()?, relay_breaker),
        }
    }

    /// Builds it; with `relay_breaker`, a router's deliveries become destinations with their
    /// options.
    fn build_with(
        &self,
        relay_breaker: Option<&BreakerConfig>,
    ) -> anyhow::Result<Arc<dyn Delivery>> {
        let router = match self {
            DeliverySettings::One(BrokerConfig::Stdout) => {
                return Ok(Arc::new(JsonLinesDelivery::stdout()));
            }
            DeliverySettings::One(config) => {
                let broker = config.broker().context("a delivery of no broker")?;
                return broker
                    .build_delivery()
                    .map_err(|e| config_error(broker.kind(), e));
            }
            DeliverySettings::Routed(router) => router,
        };
        let wrap = |name: &str, shown: &str, inner: Arc<dyn Delivery>| match relay_breaker {
            Some(base) => router
                .options
                .get(name)
                .cloned()
                .unwrap_or_default()
                .wrap(shown, inner, base),
            None => Ok(inner),
        };
        let mut built: BTreeMap<&str, Arc<Shared>> = BTreeMap::new();
        for (name, settings) in &router.deliveries {
            let inner = settings
                .build()
                .and_then(|inner| wrap(name, name, inner))
                .with_context(|| format!("[deliveries.{name}]"))?;
            built.insert(
                name,
                Arc::new(Shared {
                    inner,
                    closed: AtomicBool::new(false),
                }),
            );
        }
        let mut out = TopicRouter::new();
        for (i, (topic, name)) in router.routes.iter().enumerate() {
            let delivery = built.get(name.as_str()).cloned().ok_or_else(|| {
                usage(format!(
                    "[[route]] #{} names the unknown delivery {name:?}",
                    i + 1
                ))
            })?;
            out = out
                .route(topic, delivery)
                .with_context(|| format!("[[route]] #{} (topic {topic:?})", i + 1))?;
        }
        if let Some((name, settings)) = &router.default {
            match built.get(name.as_str()) {
                Some(delivery) => out = out.with_default(delivery.clone()),
                None => {
                    let inner = settings.build().with_context(|| name.clone())?;
                    out = out.with_default(wrap(name, MAIN_DESTINATION, inner)?);
                }
            }
        }
        Ok(Arc::new(out))
    }

    /// Checks the circuit breaker options of every delivery section against the relay's.
    ///
    /// # Errors
    /// A usage error naming the section and the keys.
    pub fn check_options(
        &self,
        options: &DestinationOptions,
        relay_breaker: &BreakerConfig,
    ) -> anyhow::Result<()> {
        match self {
            DeliverySettings::Routed(router) => {
                for (name, options) in &router.options {
                    let section = if name == "[delivery]" {
                        name.clone()
                    } else {
                        format!("[deliveries.{name}]")
                    };
                    options.check(relay_breaker).context(section)?;
                }
                Ok(())
            }
            DeliverySettings::One(_) => options.check(relay_breaker).context("[delivery]"),
        }
    }

    /// A short description for the start-up log, passwords hidden.
    pub fn describe(&self) -> String {
        let router = match self {
            DeliverySettings::One(config) => {
                return config
                    .broker()
                    .map_or_else(|| "stdout (JSON lines)".to_owned(), |b| b.describe());
            }
            DeliverySettings::Routed(router) => router,
        };
        let routes: Vec<String> = router
            .routes
            .iter()
            .map(|(topic, name)| format!("{topic} -> {name}"))
            .collect();
        let mut text = format!("router: {}", routes.join(", "));
        match &router.default {
            Some((name, _)) => text.push_str(&format!("; default {name}")),
            None => text.push_str("; no default (unrouted topics fail)"),
        }
        for (name, settings) in &router.deliveries {
            text.push_str(&format!("; {name} = {}", settings.describe()));
        }
        if let Some((name, settings)) = &router.default
            && !router.deliveries.contains_key(name)
        {
            text.push_str(&format!("; {name} = {}", settings.describe()));
        }
        text
    }
}
