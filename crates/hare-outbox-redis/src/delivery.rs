//! `RedisStreamsDelivery`: events appended to Redis streams with `XADD`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use hare_outbox_core::{
    BatchDelivery, Delivery, DeliveryError, DeliveryErrorKind, Error, OutboxEvent, Result,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use serde_json::{Map, Value};

use crate::{describe_client, open_client};

/// How long one call may take unless [`RedisStreamsDelivery::with_timeout`] sets another: 10 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Delivers events to Redis streams.
///
/// Each event becomes one stream entry, appended with `XADD <stream> * …` (Redis gives the entry
/// id), to the stream set by [`with_stream`](Self::with_stream) or, by default, to the stream named
/// like the event's topic. The entry's fields:
///
/// | field          | value                                                                   |
/// |----------------|-------------------------------------------------------------------------|
/// | `id`           | the event id (a UUID, e.g. `0190…`); consumers drop duplicates by it    |
/// | `topic`        | the event's topic                                                       |
/// | `ordering_key` | the ordering key, or the empty string when the event has none           |
/// | `headers`      | [`OutboxEvent::message_headers`] as the text of one JSON object, name → value (among them `hare-outbox-event-id` and `hare-outbox-topic`) |
/// | `payload`      | [`OutboxEvent::body`]: the payload as compact JSON text                 |
/// | `sequence`     | the event's `sequence` (delivery order in the outbox table), as decimal text |
/// | `created_at`   | when the event was enqueued, RFC 3339 in UTC with the fraction it has (microseconds from the database: `2026-12-05T01:02:03.456789Z`) |
///
/// [`reader::read_entry`](crate::reader::read_entry) reads such an entry back into a
/// [`ReceivedEvent`](hare_outbox_core::ReceivedEvent).
///
/// A relay batch is sent as one pipeline (one round trip, not a transaction). The answer has one
/// reply per `XADD`, so each event gets its own result: a command Redis refuses (e.g. the stream
/// key holds another type, `WRONGTYPE`) fails only its event, while a connection error or a
/// timeout fails the whole batch. The relay retries failed events; delivery is at least once, so
/// an `XADD` that Redis applied before the connection dropped is appended again on the retry.
/// Events of one ordering key keep their order in their stream: the relay sends the next event of
/// a key only after the previous one succeeded.
///
/// With [`with_max_length`](Self::with_max_length) every `XADD` trims its stream to about that
/// many entries.
///
/// The connection is a [`redis::aio::ConnectionManager`], opened on the first delivery and shared
/// by clones: after a lost connection it reconnects on the next call. That call and the ones in
/// flight fail, and the relay retries them.
///
/// # Cancel safety
/// A call dropped midway (e.g. by a timeout) may have appended some of its events already; the
/// relay counts them as failed and appends them again later (at least once).
#[derive(Clone)]
pub struct RedisStreamsDelivery {
    client: redis::Client,
    server: String,
    stream: Option<String>,
    max_length: Option<usize>,
    timeout: Duration,
    connection: Arc<Mutex<Option<ConnectionManager>>>,
}

impl std::fmt::Debug for RedisStreamsDelivery {
    /// Shows the server, never a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStreamsDelivery")
            .field("server", &self.server)
            .field("stream", &self.stream)
            .field("max_length", &self.max_length)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl RedisStreamsDelivery {
    /// A delivery to the Redis server at `url` (`redis://[[user]:password@]host[:port][/db]`,
    /// or `unix:///path/to/redis.sock`), appending each event to the stream named like its topic,
    /// without trimming, with a timeout of [`DEFAULT_TIMEOUT`] (10 s). Nothing is connected until
    /// the first delivery.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the URL (password hidden) when it is not a Redis URL.
    pub fn new(url: &str) -> Result<Self> {
        Ok(Self::from_client(open_client("redis delivery", url)?))
    }

    /// Like [`new`](Self::new) with a client you built yourself, e.g. with your own TLS or
    /// protocol settings (as `RedisStreamsDelivery(client=...)` of the original).
    pub fn from_client(client: redis::Client) -> Self {
        RedisStreamsDelivery {
            server: describe_client(&client),
            client,
            stream: None,
            max_length: None,
            timeout: DEFAULT_TIMEOUT,
            connection: Arc::default(),
        }
    }

    /// Appends every event to the stream `name` instead of the stream named like its topic. Unset
    /// by default.
    ///
    /// # Errors
    /// [`Error::Configuration`] when `name` is empty.
    pub fn with_stream(mut self, name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        if name.is_empty() {
            return Err(Error::configuration(
                "redis stream name \"\" is empty; give a stream name such as \"events\", or \
                 leave it unset to use each event's topic",
            ));
        }
        self.stream = Some(name);
        Ok(self)
    }

    /// Trims each stream to about `max_length` entries on every append: `XADD <stream> MAXLEN ~
    /// <max_length> * …`. Unset by default: streams grow until something else trims them.
    ///
    /// The trim is approximate (`~`), which is much cheaper for Redis: it removes only whole
    /// internal nodes, so a stream may keep more than `max_length` entries (up to one node more,
    /// 100 entries with the default `stream-node-max-entries`), never fewer than `max_length`
    /// while it has that many. The oldest entries go first, whether a consumer read them or not.
    ///
    /// # Errors
    /// [`Error::Configuration`] when `max_length` is 0.
    pub fn with_max_length(mut self, max_length: usize) -> Result<Self> {
        if max_length == 0 {
            return Err(Error::configuration(
                "redis stream max_length 0 would trim every entry; give at least 1, or leave it \
                 unset for no trimming",
            ));
        }
        self.max_length = Some(max_length);
        Ok(self)
    }

    /// How long one call may take — connecting, sending and reading every reply of a single
    /// `XADD` or of a whole batch pipeline; a slower call fails all its events. In a relay the
    /// shorter of this and the relay's delivery timeout applies. Defaults to 10 s
    /// ([`DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        // A connection made with the old timeout is not reused.
        self.connection = Arc::default();
        self
    }

    /// The stream `event` is appended to.
    pub fn stream_for<'a>(&'a self, event: &'a OutboxEvent) -> &'a str {
        self.stream.as_deref().unwrap_or(&event.topic)
    }

    /// The `XADD` command for `event`.
    fn xadd(&self, event: &OutboxEvent) -> redis::Cmd {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(self.stream_for(event));
        if let Some(max_length) = self.max_length {
            cmd.arg("MAXLEN").arg("~").arg(max_length);
        }
        let headers: Map<String, Value> = event
            .message_headers()
            .into_iter()
            .map(|(name, value)| (name, Value::String(value)))
            .collect();
        cmd.arg("*")
            .arg("id")
            .arg(event.id.to_string())
            .arg("topic")
            .arg(&event.topic)
            .arg("ordering_key")
            .arg(event.ordering_key.as_deref().unwrap_or(""))
            .arg("headers")
            .arg(Value::Object(headers).to_string())
            .arg("payload")
            .arg(event.body())
            .arg("sequence")
            .arg(event.sequence)
            .arg("created_at")
            .arg(
                event
                    .created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            );
        cmd
    }

    /// The shared connection, made on first use.
    fn connection(&self) -> std::result::Result<ConnectionManager, DeliveryError> {
        let mut slot = self
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(connection) = slot.as_ref() {
            return Ok(connection.clone());
        }
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout))
            // Fail fast while Redis is down: the relay retries with its own backoff, and the
            // next call reconnects.
            .set_number_of_retries(0);
        let connection = ConnectionManager::new_lazy_with_config(self.client.clone(), config)
            .map_err(|e| {
                DeliveryError::with_source(format!("connecting to {} failed", self.server), e)
                    .with_kind(DeliveryErrorKind::Outage)
            })?;
        *slot = Some(connection.clone());
        Ok(connection)
    }

    async fn send(
        &self,
        events: &[OutboxEvent],
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        let fail_all = |error: DeliveryError| {
            let text = error.chain();
            let kind = error.kind();
            events
                .iter()
                .map(|_| Err(DeliveryError::new(text.clone()).with_kind(kind)))
                .collect()
        };
        let mut connection = match self.connection() {
            Ok(connection) => connection,
            Err(error) => return fail_all(error),
        };
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for event in events {
            pipe.add_command(self.xadd(event));
        }
        let replies = tokio::time::timeout(
            timeout,
            pipe.query_async::<Vec<redis::RedisResult<redis::Value>>>(&mut connection),
        )
        .await;
        let replies = match replies {
            Err(_) => {
                return fail_all(DeliveryError::outage(format!(
                    "XADD of {} event(s) to {} timed out after {:.3} s",
                    events.len(),
                    self.server,
                    timeout.as_secs_f64()
                )));
            }
            Ok(Err(error)) => {
                return events
                    .iter()
                    .map(|_| {
                        Err(DeliveryError::with_source(
                            format!(
                                "XADD of {} event(s) to {} failed",
                                events.len(),
                                self.server
                            ),
                            error.clone(),
                        )
                        .with_kind(error_kind(&error)))
                    })
                    .collect();
            }
            Ok(Ok(replies)) => replies,
        };
        if replies.len() != events.len() {
            return fail_all(DeliveryError::outage(format!(
                "{} answered {} replies to a pipeline of {} XADD commands",
                self.server,
                replies.len(),
                events.len()
            )));
        }
        events
            .iter()
            .zip(replies)
            .map(|(event, reply)| {
                reply.map(|_entry_id| ()).map_err(|error| {
                    let kind = error_kind(&error);
                    DeliveryError::with_source(
                        format!(
                            "XADD of event {} to stream {:?} on {} failed",
                            event.id,
                            self.stream_for(event),
                            self.server
                        ),
                        error,
                    )
                    .with_kind(kind)
                })
            })
            .collect()
    }
}

/// The whole batch at once, behind the shared batching adaptor.
#[async_trait]
impl BatchDelivery for RedisStreamsDelivery {
    fn batch_timeout(&self) -> Duration {
        self.timeout
    }

    async fn send_batch(
        &self,
        events: &[OutboxEvent],
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        self.send(events, timeout).await
    }
}

#[async_trait]
impl Delivery for RedisStreamsDelivery {
    /// Appends one event with one `XADD`, within the timeout ([`DEFAULT_TIMEOUT`] unless set).
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        self.deliver_one(event).await
    }

    /// Appends the whole batch in one pipeline and returns one result per event, in order; the
    /// pipeline must finish within the shorter of `timeout` and this delivery's timeout.
    /// `concurrency` does not apply: the batch is one round trip.
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        _concurrency: usize,
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        self.deliver_all(events, timeout).await
    }

    /// `true`: a batch is one pipeline of `XADD`s on one connection, which Redis runs in order.
    /// When an `XADD` fails, the later ones of the pipeline still run; the relay appends those
    /// events of the key again after the failed one.
    fn keeps_key_order(&self) -> bool {
        true
    }

    /// Drops this delivery's connection; a later call connects again.
    async fn close(&self) -> Result<(), DeliveryError> {
        self.connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        Ok(())
    }
}

/// How a Redis error counts for the relay: an outage when the connection failed or Redis says to
/// retry (I/O errors, timeouts, refused or dropped connections, `LOADING`, `TRYAGAIN`,
/// `MASTERDOWN`, cluster errors, a failed authentication); otherwise the event's own fault (a
/// stream key of another type, say).
pub fn error_kind(error: &redis::RedisError) -> DeliveryErrorKind {
    let outage = error.is_io_error()
        || error.is_timeout()
        || error.is_connection_refusal()
        || error.is_connection_dropped()
        || error.is_cluster_error()
        || !matches!(error.retry_method(), redis::RetryMethod::NoRetry);
    if outage {
        DeliveryErrorKind::Outage
    } else {
        DeliveryErrorKind::Event
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(topic: &str, key: Option<&str>) -> OutboxEvent {
        OutboxEvent {
            sequence: 1,
            ordering_key: key.map(str::to_owned),
            ..OutboxEvent::new(topic.to_owned(), serde_json::json!({"n": 1}))
        }
    }

    fn args(cmd: &redis::Cmd) -> Vec<String> {
        cmd.args_iter()
            .map(|arg| match arg {
                redis::Arg::Simple(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => "<other>".to_owned(),
            })
            .collect()
    }

    #[test]
    fn xadd_names_the_topic_stream_and_all_fields() {
        let d = RedisStreamsDelivery::new("redis://127.0.0.1:6379/0").unwrap();
        let e = event("orders.created", None);
        let a = args(&d.xadd(&e));
        assert_eq!(a[..3], ["XADD", "orders.created", "*"]);
        let fields: Vec<&str> = a[3..].iter().step_by(2).map(String::as_str).collect();
        assert_eq!(
            fields,
            [
                "id",
                "topic",
                "ordering_key",
                "headers",
                "payload",
                "sequence",
                "created_at"
            ]
        );
        assert_eq!(a[4], e.id.to_string());
        assert_eq!(a[8], "", "no ordering key → empty string");
        assert_eq!(a[12], r#"{"n":1}"#);
    }

    #[test]
    fn xadd_uses_the_configured_stream_and_approximate_maxlen() {
        let d = RedisStreamsDelivery::new("redis://127.0.0.1:6379/0")
            .unwrap()
            .with_stream("events")
            .unwrap()
            .with_max_length(500)
            .unwrap();
        let a = args(&d.xadd(&event("t", Some("k"))));
        assert_eq!(a[..6], ["XADD", "events", "MAXLEN", "~", "500", "*"]);
    }

    #[test]
    fn empty_stream_and_zero_max_length_are_refused() {
        let d = || RedisStreamsDelivery::new("redis://127.0.0.1/").unwrap();
        let e = d().with_stream("").unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(e.to_string().contains("\"\""), "{e}");
        let e = d().with_max_length(0).unwrap_err();
        assert!(matches!(e, Error::Configuration(_)), "{e}");
        assert!(e.to_string().contains("max_length 0"), "{e}");
    }

    #[test]
    fn debug_hides_the_password() {
        let d = RedisStreamsDelivery::new("redis://:hunter2@127.0.0.1:6379/3").unwrap();
        let text = format!("{d:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("127.0.0.1:6379 db 3"), "{text}");
    }
}
