use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;

use super::Delivery;
use crate::error::DeliveryError;
use crate::event::OutboxEvent;

/// A delivery that calls an async Rust function with each event, like an
/// `async def deliver(event)` of the original hare outbox.
///
/// ```
/// use hare_outbox_core::{DeliveryError, FnDelivery, OutboxEvent};
///
/// let delivery = FnDelivery::new(|event: OutboxEvent| async move {
///     if event.topic == "poison" {
///         return Err(DeliveryError::new("refused"));
///     }
///     println!("{} {}", event.topic, event.payload);
///     Ok(())
/// });
/// # let _ = delivery;
/// ```
pub struct FnDelivery<F> {
    f: Arc<F>,
}

impl<F, Fut> FnDelivery<F>
where
    F: Fn(OutboxEvent) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), DeliveryError>> + Send + 'static,
{
    /// Wraps `f`; it gets an owned copy of each event.
    pub fn new(f: F) -> Self {
        FnDelivery { f: Arc::new(f) }
    }
}

#[async_trait]
impl<F, Fut> Delivery for FnDelivery<F>
where
    F: Fn(OutboxEvent) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), DeliveryError>> + Send + 'static,
{
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        (self.f)(event.clone()).await
    }
}
