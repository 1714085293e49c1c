//! The consumer's side: a message published by [`NatsDelivery`](crate::NatsDelivery) read back
//! as a [`ReceivedEvent`].
//!
//! ```no_run
//! use futures::StreamExt;
//! use hare_outbox_nats::reader;
//!
//! # async fn consume(consumer: async_nats::jetstream::consumer::PullConsumer) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let mut messages = consumer.messages().await?;
//! while let Some(message) = messages.next().await {
//!     let message = message?;
//!     let event = reader::read_message(&message)?; // a JetStream message derefs to a Message
//!     // Act once per event, in the transaction that acts on it:
//!     // if inbox.process_once(&mut tx, "billing", event.id).await? { … }
//!     message.ack().await?;
//! #   let _ = event;
//! }
//! # Ok(()) }
//! ```

use async_nats::Message;
use hare_outbox_core::{Error, ReceivedEvent, Result};

use crate::ORDERING_KEY_HEADER;

/// Reads one message (core NATS or JetStream: `&*jetstream_message`). The id and topic come
/// from the `hare-outbox-event-id` and `hare-outbox-topic` headers, the ordering key from
/// [`ORDERING_KEY_HEADER`]; [`ReceivedEvent::headers`] are the event's message headers without
/// the two the delivery adds for NATS (`Nats-Msg-Id` and the ordering key), sorted by name (NATS
/// keeps no header order). A header sent with several values keeps the first.
///
/// # Errors
/// [`Error::Validation`] naming the header when the message has no headers, lacks one of the
/// two, or its id is not a UUID.
pub fn read_message(message: &Message) -> Result<ReceivedEvent> {
    let Some(map) = &message.headers else {
        return Err(Error::validation(
            "headers",
            format!(
                "the message on {} has no headers; was it published by hare-outbox?",
                message.subject
            ),
        ));
    };
    let mut ordering_key = None;
    let mut headers = Vec::new();
    for (name, values) in map.iter() {
        let Some(value) = values.first() else {
            continue;
        };
        let name: &str = name.as_ref();
        if name.eq_ignore_ascii_case(ORDERING_KEY_HEADER) {
            ordering_key = Some(value.as_str().to_owned());
        } else if !name.eq_ignore_ascii_case(async_nats::header::NATS_MESSAGE_ID.as_ref()) {
            headers.push((name.to_owned(), value.as_str().to_owned()));
        }
    }
    headers.sort();
    ReceivedEvent::from_headers(headers, ordering_key, message.payload.to_vec())
}
