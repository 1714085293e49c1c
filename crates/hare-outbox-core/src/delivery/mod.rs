//! The delivery seam: where the relay sends events (seed 001 § Доставки).

use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;

use crate::error::DeliveryError;
use crate::event::OutboxEvent;

mod func;
mod jsonl;
mod router;

pub use func::FnDelivery;
pub use jsonl::{JsonLinesDelivery, json_line};
pub use router::TopicRouter;

/// What one delivery attempt of one event came to: its result and, optionally, a JSON record
/// of the attempt that the relay stores in [`RelayConfig::result_column`](crate::RelayConfig)
/// when one is configured (seed 001 § WebhookDelivery, `result_field`).
///
/// A delivery that keeps no record leaves `record` at `None`; the relay then leaves the result
/// column as it was.
#[derive(Debug)]
#[non_exhaustive]
pub struct DeliveryReport {
    /// `Ok` when the event went out, else why not.
    pub result: Result<(), DeliveryError>,
    /// The record of the attempt, e.g. a webhook's `{"status_code", "body", "error"}`.
    pub record: Option<serde_json::Value>,
}

impl DeliveryReport {
    /// A report of `result` without a record.
    pub fn new(result: Result<(), DeliveryError>) -> Self {
        DeliveryReport {
            result,
            record: None,
        }
    }

    /// Adds the record of the attempt.
    pub fn with_record(mut self, record: serde_json::Value) -> Self {
        self.record = Some(record);
        self
    }
}

impl From<Result<(), DeliveryError>> for DeliveryReport {
    fn from(result: Result<(), DeliveryError>) -> Self {
        DeliveryReport::new(result)
    }
}

/// Sends events somewhere. A delivery only sends: retries, attempt counting and dead letters
/// belong to the relay.
///
/// Every built-in delivery sends [`OutboxEvent::body`] as the body and
/// [`OutboxEvent::message_headers`] as headers, so receivers can drop duplicates by
/// `hare-outbox-event-id` (delivery is at least once).
#[async_trait]
pub trait Delivery: Send + Sync + 'static {
    /// Sends one event.
    ///
    /// # Errors
    /// A [`DeliveryError`] saying why the event did not go out; the relay records it and retries.
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError>;

    /// Sends a batch and returns one result per event, in the order of `events`.
    ///
    /// The batch holds at most one event per ordering key, so its events may go out in any order.
    /// The default sends up to `concurrency` events at once through [`Delivery::deliver`], each
    /// within `timeout` (an event that takes longer fails with a timeout error). An implementation
    /// that sends the batch as a whole must itself keep within `timeout`.
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        let sends: Vec<futures::future::BoxFuture<'_, Result<(), DeliveryError>>> = events
            .iter()
            .map(|event| {
                Box::pin(async move {
                    match tokio::time::timeout(timeout, self.deliver(event)).await {
                        Ok(result) => result,
                        Err(_) => Err(DeliveryError::new(format!(
                            "delivery timed out after {:.3} s",
                            timeout.as_secs_f64()
                        ))),
                    }
                }) as futures::future::BoxFuture<'_, _>
            })
            .collect();
        futures::stream::iter(sends)
            .buffered(concurrency.max(1))
            .collect()
            .await
    }

    /// Sends a batch like [`Delivery::deliver_batch`] and returns one [`DeliveryReport`] per
    /// event, in the order of `events`; the relay calls this one.
    ///
    /// The default calls [`Delivery::deliver_batch`] and reports its results without records. A
    /// delivery that records its attempts (the webhook's response) overrides it; it must keep
    /// within `timeout` per event like [`Delivery::deliver_batch`].
    async fn deliver_batch_reported(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        self.deliver_batch(events, concurrency, timeout)
            .await
            .into_iter()
            .map(DeliveryReport::new)
            .collect()
    }

    /// Releases connections. Called once by the relay when it stops. Defaults to nothing.
    ///
    /// # Errors
    /// A [`DeliveryError`] when closing failed; the relay logs it.
    async fn close(&self) -> Result<(), DeliveryError> {
        Ok(())
    }
}

#[async_trait]
impl<D: Delivery + ?Sized> Delivery for std::sync::Arc<D> {
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        (**self).deliver(event).await
    }
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        (**self).deliver_batch(events, concurrency, timeout).await
    }
    async fn deliver_batch_reported(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        (**self)
            .deliver_batch_reported(events, concurrency, timeout)
            .await
    }
    async fn close(&self) -> Result<(), DeliveryError> {
        (**self).close().await
    }
}

impl std::fmt::Debug for dyn Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn Delivery")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn default_reports_keep_results_in_order_without_records() {
        let delivery = FnDelivery::new(|event: OutboxEvent| async move {
            if event.topic == "bad" {
                Err(DeliveryError::new("refused"))
            } else {
                Ok(())
            }
        });
        let events = [
            OutboxEvent::new("good".to_owned(), serde_json::json!({})),
            OutboxEvent::new("bad".to_owned(), serde_json::json!({})),
        ];
        let reports = std::sync::Arc::new(delivery)
            .deliver_batch_reported(&events, 2, Duration::from_secs(5))
            .await;
        assert_eq!(reports.len(), 2);
        assert!(reports[0].result.is_ok());
        assert_eq!(
            reports[1].result.as_ref().unwrap_err().to_string(),
            "refused"
        );
        assert!(reports.iter().all(|r| r.record.is_none()));
        let report = DeliveryReport::new(Ok(())).with_record(serde_json::json!({"a": 1}));
        assert_eq!(report.record, Some(serde_json::json!({"a": 1})));
    }
}
