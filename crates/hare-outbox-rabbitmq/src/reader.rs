//! The consumer's side: a message published by [`RabbitMqDelivery`](crate::RabbitMqDelivery)
//! read back as a [`ReceivedEvent`].
//!
//! ```no_run
//! use futures::StreamExt;
//! use hare_outbox_rabbitmq::reader;
//! use lapin::options::BasicAckOptions;
//!
//! # async fn consume(mut consumer: lapin::Consumer) -> Result<(), Box<dyn std::error::Error>> {
//! while let Some(delivery) = consumer.next().await {
//!     let delivery = delivery?;
//!     let event = reader::read_delivery(&delivery)?;
//!     // Act once per event, in the transaction that acts on it:
//!     // if inbox.process_once(&mut tx, "billing", event.id).await? { … }
//!     delivery.ack(BasicAckOptions::default()).await?;
//! #   let _ = event;
//! }
//! # Ok(()) }
//! ```

use hare_outbox_core::{Error, ReceivedEvent, Result};
use lapin::message::Delivery;
use lapin::types::AMQPValue;

use crate::ORDERING_KEY_HEADER;

/// Reads one delivery (from `basic_consume` or `basic_get`). The id and topic come from the
/// `hare-outbox-event-id` and `hare-outbox-topic` headers, the ordering key from
/// [`ORDERING_KEY_HEADER`]; [`ReceivedEvent::headers`] are the event's message headers without
/// that one, sorted by name (an AMQP header table keeps no order); the payload is the body.
///
/// # Errors
/// [`Error::Validation`] naming the header when the message has no header table, lacks one of
/// the two, carries a header that is not a string, or its id is not a UUID.
pub fn read_delivery(delivery: &Delivery) -> Result<ReceivedEvent> {
    let Some(table) = delivery.properties.headers() else {
        return Err(Error::validation(
            "headers",
            format!(
                "the message routed by {:?} has no headers; was it published by hare-outbox?",
                delivery.routing_key.as_str()
            ),
        ));
    };
    let mut ordering_key = None;
    let mut headers = Vec::new();
    for (name, value) in table.inner() {
        let text = match value {
            AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
            AMQPValue::ShortString(s) => s.as_str().to_owned(),
            other => {
                return Err(Error::validation(
                    format!("headers.{}", name.as_str()),
                    format!("{other:?} is not a string"),
                ));
            }
        };
        if name.as_str() == ORDERING_KEY_HEADER {
            ordering_key = Some(text);
        } else {
            headers.push((name.as_str().to_owned(), text));
        }
    }
    headers.sort();
    ReceivedEvent::from_headers(headers, ordering_key, delivery.data.clone())
}
