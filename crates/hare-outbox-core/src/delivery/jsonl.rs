use std::time::Duration;

use async_trait::async_trait;
use serde_json::json;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::Mutex;

use super::Delivery;
use crate::error::DeliveryError;
use crate::event::OutboxEvent;

/// A delivery that writes each event as one JSON line to a writer (standard output by default).
///
/// Line shape: `{"sequence", "id", "topic", "ordering_key", "headers", "payload", "created_at",
/// "attempts"}`, compact, one per event; a batch is written in order as one buffer and flushed
/// once. A failed write is a delivery
/// failure (retried by the relay).
pub struct JsonLinesDelivery<W> {
    out: Mutex<W>,
}

impl JsonLinesDelivery<tokio::io::Stdout> {
    /// Writes to the process's standard output.
    pub fn stdout() -> Self {
        JsonLinesDelivery::new(tokio::io::stdout())
    }
}

impl<W: AsyncWrite + Unpin + Send + 'static> JsonLinesDelivery<W> {
    /// Writes to `out`.
    pub fn new(out: W) -> Self {
        JsonLinesDelivery {
            out: Mutex::new(out),
        }
    }

    /// Gives the writer back.
    pub fn into_inner(self) -> W {
        self.out.into_inner()
    }
}

/// The JSON line for `event`, without the newline.
pub fn json_line(event: &OutboxEvent) -> String {
    json!({
        "sequence": event.sequence,
        "id": event.id,
        "topic": event.topic,
        "ordering_key": event.ordering_key,
        "headers": event.headers,
        "payload": event.payload,
        "created_at": event.created_at,
        "attempts": event.attempts,
    })
    .to_string()
}

#[async_trait]
impl<W: AsyncWrite + Unpin + Send + 'static> Delivery for JsonLinesDelivery<W> {
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        let mut line = json_line(event);
        line.push('\n');
        let mut out = self.out.lock().await;
        out.write_all(line.as_bytes())
            .await
            .map_err(|e| DeliveryError::with_source("writing the JSON line failed", e))?;
        out.flush()
            .await
            .map_err(|e| DeliveryError::with_source("flushing the JSON line failed", e))
    }

    /// Writes the whole batch as one buffer, in batch order, and flushes once: one write per
    /// batch instead of one per event. Every event gets the write's result.
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        _concurrency: usize,
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        let mut buffer = String::with_capacity(events.len() * 256);
        for event in events {
            buffer.push_str(&json_line(event));
            buffer.push('\n');
        }
        let write = async {
            let mut out = self.out.lock().await;
            out.write_all(buffer.as_bytes()).await?;
            out.flush().await
        };
        let result = match tokio::time::timeout(timeout, write).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(format!("writing the JSON lines failed: {e}")),
            Err(_) => Err(format!(
                "writing the JSON lines timed out after {:.3} s",
                timeout.as_secs_f64()
            )),
        };
        events
            .iter()
            .map(|_| result.clone().map_err(DeliveryError::new))
            .collect()
    }

    /// `true`: a batch is written in its order as one buffer.
    fn keeps_key_order(&self) -> bool {
        true
    }

    async fn close(&self) -> Result<(), DeliveryError> {
        self.out
            .lock()
            .await
            .flush()
            .await
            .map_err(|e| DeliveryError::with_source("flushing failed", e))
    }
}
