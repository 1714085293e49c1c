//! The consumer's side: a message produced by [`KafkaDelivery`](crate::KafkaDelivery) read back
//! as a [`ReceivedEvent`].
//!
//! ```no_run
//! use hare_outbox_kafka::rdkafka::consumer::{Consumer, StreamConsumer};
//! use hare_outbox_kafka::reader;
//!
//! # async fn consume(consumer: StreamConsumer) -> Result<(), Box<dyn std::error::Error>> {
//! loop {
//!     let message = consumer.recv().await?;
//!     let event = reader::read_message(&message)?;
//!     // Act once per event, in the transaction that acts on it:
//!     // if inbox.process_once(&mut tx, "billing", event.id).await? { … }
//!     consumer.commit_message(&message, hare_outbox_kafka::rdkafka::consumer::CommitMode::Async)?;
//! #   let _ = event;
//! }
//! # }
//! ```

use hare_outbox_core::{Error, ReceivedEvent, Result};
use rdkafka::Message;
use rdkafka::message::Headers;

/// Reads one message (a `BorrowedMessage` from a consumer, or an `OwnedMessage`). The id and
/// topic come from the `hare-outbox-event-id` and `hare-outbox-topic` headers, the ordering key
/// from the message key; [`ReceivedEvent::headers`] are the headers in the order sent; the
/// payload is the value (empty when the message has none).
///
/// # Errors
/// [`Error::Validation`] naming the header when the message has no headers, lacks one of the
/// two, carries a header or key that is not UTF-8, or its id is not a UUID.
pub fn read_message<M: Message>(message: &M) -> Result<ReceivedEvent> {
    let Some(sent) = message.headers() else {
        return Err(Error::validation(
            "headers",
            format!(
                "the message at {}/{}@{} has no headers; was it produced by hare-outbox?",
                message.topic(),
                message.partition(),
                message.offset()
            ),
        ));
    };
    let headers = sent
        .iter()
        .map(|h| {
            let value = std::str::from_utf8(h.value.unwrap_or_default()).map_err(|_| {
                Error::validation(format!("headers.{}", h.key), "the value is not UTF-8")
            })?;
            Ok((h.key.to_owned(), value.to_owned()))
        })
        .collect::<Result<Vec<_>>>()?;
    let ordering_key = message
        .key()
        .map(|k| {
            std::str::from_utf8(k)
                .map(str::to_owned)
                .map_err(|_| Error::validation("key", "the message key is not UTF-8"))
        })
        .transpose()?;
    ReceivedEvent::from_headers(
        headers,
        ordering_key,
        message.payload().unwrap_or_default().to_vec(),
    )
}
