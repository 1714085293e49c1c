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
    async fn close(&self) -> Result<(), DeliveryError> {
        (**self).close().await
    }
}

impl std::fmt::Debug for dyn Delivery {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("dyn Delivery")
    }
}
