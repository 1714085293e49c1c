//! `NatsDelivery`: events published to NATS JetStream.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, context::ContextBuilder};
use async_nats::{HeaderMap, HeaderName, HeaderValue, ServerAddr};
use async_trait::async_trait;
use hare_outbox_core::{
    BatchDelivery, Delivery, DeliveryError, DeliveryErrorKind, Error, OutboxEvent, Result,
};
use tokio::time::Instant;

use crate::{describe_servers, parse_servers, publish_subject_problem};

/// How long one call may take unless [`NatsDelivery::with_timeout`] sets another: 10 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The header that carries the event's ordering key, when it has one. NATS messages have no key
/// of their own, so consumers that process keys separately read it from here.
pub const ORDERING_KEY_HEADER: &str = "hare-outbox-ordering-key";

/// Publishes of one batch in flight at once; the next ones wait for these acknowledgements.
const ACK_WINDOW: usize = 1000;

/// Delivers events to NATS JetStream.
///
/// Each event becomes one JetStream message:
/// - subject: the event's topic, or the prefix set by [`with_subject_prefix`](Self::with_subject_prefix)
///   followed by the topic (`"events."` + `"orders.created"` → `"events.orders.created"`);
/// - payload: [`OutboxEvent::body`], the payload as compact JSON;
/// - headers: [`OutboxEvent::message_headers`] (among them `hare-outbox-event-id` and
///   `hare-outbox-topic`), then [`ORDERING_KEY_HEADER`] when the event has an ordering key, then
///   `Nats-Msg-Id` = the event id, which replaces any event header of that name.
///
/// JetStream drops a message whose `Nats-Msg-Id` it stored within the stream's duplicate window
/// (2 minutes unless the stream says otherwise) and answers with a "duplicate" acknowledgement,
/// which counts as delivered. So an event published again — after a lost acknowledgement, a relay
/// crash between delivery and mark, or a retry after a timeout — is stored once, as long as the
/// retry comes within that window. Other `Nats-*` headers of an event reach JetStream, which acts on
/// them (e.g. `Nats-Expected-Stream`).
///
/// An event is delivered once its stream acknowledged it. A relay batch is published whole, then
/// the acknowledgements are awaited (up to 1000 publishes in flight; a larger batch goes in steps),
/// one result per event. An event fails (a [`DeliveryError`], retried by the relay) when its
/// subject cannot be published to (empty token, whitespace, a `*` or `>` token), a header cannot
/// be sent (a name with `:`, non-ASCII or control characters; a value with a line break), no stream
/// captures its subject ("no responders"), JetStream refuses it, or no acknowledgement comes within
/// the timeout.
///
/// Events of one ordering key keep their order in the stream: the relay sends the next event of a
/// key only after the previous one was acknowledged.
///
/// The connection is opened on the first delivery and shared by clones; the client reconnects by
/// itself after a lost connection. Publishes made while it is down fail by timeout, and the client
/// may still send them once it is back — which the duplicate window absorbs.
///
/// # Cancel safety
/// A call dropped midway (e.g. by a timeout) may have published some of its events already; the
/// relay counts them as failed and publishes them again later, and the stream drops those
/// duplicates within its duplicate window.
#[derive(Clone)]
pub struct NatsDelivery {
    servers: Option<Vec<ServerAddr>>,
    /// The caller's client, from [`NatsDelivery::from_client`].
    preset: Option<async_nats::Client>,
    server: String,
    subject_prefix: String,
    stream: Option<StreamSpec>,
    timeout: Duration,
    state: Arc<tokio::sync::Mutex<Connection>>,
}

#[derive(Debug, Clone)]
struct StreamSpec {
    name: String,
    subjects: Vec<String>,
}

#[derive(Default)]
struct Connection {
    /// The client this delivery connected.
    client: Option<async_nats::Client>,
    /// Set once the stream (if any was asked for) exists.
    context: Option<jetstream::Context>,
}

impl std::fmt::Debug for NatsDelivery {
    /// Shows the servers, never a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsDelivery")
            .field("server", &self.server)
            .field("subject_prefix", &self.subject_prefix)
            .field("stream", &self.stream)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl NatsDelivery {
    /// A delivery to the NATS server(s) at `url` — `nats://[user:password@]host[:port]`, several
    /// separated by commas — publishing each event on the subject named like its topic, to a stream
    /// that must exist already, with a timeout of [`DEFAULT_TIMEOUT`] (10 s). Nothing is connected
    /// until the first delivery.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the URL (password hidden) when it is not a NATS URL.
    pub fn new(url: &str) -> Result<Self> {
        let servers = parse_servers("nats delivery", url)?;
        Ok(Self::build(describe_servers(&servers), Some(servers), None))
    }

    /// Like [`new`](Self::new) with a client you connected yourself, e.g. with credentials files or
    /// TLS settings. [`Delivery::close`] leaves that client open.
    pub fn from_client(client: async_nats::Client) -> Self {
        Self::build("nats (caller's client)".to_owned(), None, Some(client))
    }

    fn build(
        server: String,
        servers: Option<Vec<ServerAddr>>,
        client: Option<async_nats::Client>,
    ) -> Self {
        NatsDelivery {
            servers,
            preset: client,
            server,
            subject_prefix: String::new(),
            stream: None,
            timeout: DEFAULT_TIMEOUT,
            state: Arc::default(),
        }
    }

    /// Publishes on `prefix` followed by the topic instead of the topic alone, e.g. `"events."`
    /// makes topic `orders.created` go to `events.orders.created`. The prefix is put in front as
    /// it is: end it with `.` to make it a token of its own. Unset by default.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the prefix when it is empty or cannot start a subject
    /// (whitespace, an empty token as in `"a..b."`, a `*` or `>` token).
    pub fn with_subject_prefix(mut self, prefix: impl Into<String>) -> Result<Self> {
        let prefix = prefix.into();
        let problem = if prefix.is_empty() {
            Some("it is empty (leave it unset to publish on the topic itself)".to_owned())
        } else {
            publish_subject_problem(&format!("{prefix}topic"))
        };
        if let Some(problem) = problem {
            return Err(Error::configuration(format!(
                "nats subject prefix {prefix:?} cannot start a subject: {problem}; use e.g. \"events.\""
            )));
        }
        self.subject_prefix = prefix;
        self.reset();
        Ok(self)
    }

    /// Makes sure the stream `name` exists before the first publish, creating it with `subjects`
    /// (file storage, limits retention, the server's default 2-minute duplicate window) when it is
    /// missing. An existing stream is used as it is, whatever its subjects. Unset by default: the
    /// stream that captures the subjects must exist, else every event fails with "no responders".
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the value when `name` is empty or holds whitespace, `.`,
    /// `*`, `>`, `/` or `\`; when `subjects` is empty; or when a subject is not a valid subject
    /// filter (empty token, whitespace, `>` before the last token).
    pub fn with_stream<S: Into<String>>(
        mut self,
        name: impl Into<String>,
        subjects: impl IntoIterator<Item = S>,
    ) -> Result<Self> {
        let name = name.into();
        if name.is_empty()
            || name
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || ".*>/\\".contains(c))
        {
            return Err(Error::configuration(format!(
                "nats stream name {name:?} is not valid: it must be non-empty, without whitespace, \
                 '.', '*', '>', '/' or '\\'; use e.g. \"EVENTS\""
            )));
        }
        let subjects: Vec<String> = subjects.into_iter().map(Into::into).collect();
        if subjects.is_empty() {
            return Err(Error::configuration(format!(
                "nats stream {name:?} needs at least one subject to capture, e.g. \"events.>\""
            )));
        }
        for subject in &subjects {
            if let Some(problem) = subject_filter_problem(subject) {
                return Err(Error::configuration(format!(
                    "nats stream {name:?} subject {subject:?} is not valid: {problem}"
                )));
            }
        }
        self.stream = Some(StreamSpec { name, subjects });
        self.reset();
        Ok(self)
    }

    /// How long one call may take — connecting, making sure of the stream, publishing and waiting
    /// for every acknowledgement of a single event or a whole batch; what has not been
    /// acknowledged by then fails. In a relay the shorter of this and the relay's delivery timeout
    /// applies. Defaults to 10 s ([`DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self.reset();
        self
    }

    /// The subject `event` is published on.
    pub fn subject_for(&self, event: &OutboxEvent) -> String {
        format!("{}{}", self.subject_prefix, event.topic)
    }

    /// A builder method changed what a connection is set up with: clones made before keep theirs.
    fn reset(&mut self) {
        self.state = Arc::default();
    }

    /// The JetStream context, connecting and making sure of the stream on first use.
    async fn context(&self) -> Result<jetstream::Context, DeliveryError> {
        let mut state = self.state.lock().await;
        if let Some(context) = &state.context {
            return Ok(context.clone());
        }
        let client = match (&self.preset, &state.client, &self.servers) {
            (Some(client), _, _) | (None, Some(client), _) => client.clone(),
            (None, None, Some(servers)) => {
                let client = async_nats::ConnectOptions::new()
                    .name("hare-outbox delivery")
                    .connection_timeout(self.timeout)
                    .connect(servers.clone())
                    .await
                    .map_err(|e| {
                        DeliveryError::with_source(
                            format!("connecting to {} failed", self.server),
                            e,
                        )
                        .with_kind(DeliveryErrorKind::Outage)
                    })?;
                state.client = Some(client.clone());
                client
            }
            (None, None, None) => {
                return Err(DeliveryError::new(format!(
                    "{} has neither a client nor a server to connect to",
                    self.server
                )));
            }
        };
        let context = ContextBuilder::new()
            .timeout(self.timeout)
            .backpressure_on_inflight(true)
            .build(client);
        if let Some(spec) = &self.stream {
            let config = jetstream::stream::Config {
                name: spec.name.clone(),
                subjects: spec.subjects.clone(),
                ..Default::default()
            };
            context.get_or_create_stream(config).await.map_err(|e| {
                DeliveryError::with_source(
                    format!(
                        "making sure of stream {:?} on {} failed (is JetStream enabled?)",
                        spec.name, self.server
                    ),
                    e,
                )
                .with_kind(DeliveryErrorKind::Outage)
            })?;
        }
        state.context = Some(context.clone());
        Ok(context)
    }

    /// The subject and headers of `event`, or why it cannot be published.
    fn message(&self, event: &OutboxEvent) -> Result<(String, HeaderMap), DeliveryError> {
        let subject = self.subject_for(event);
        if let Some(problem) = publish_subject_problem(&subject) {
            return Err(DeliveryError::new(format!(
                "event {} cannot be published on subject {subject:?}: {problem}",
                event.id
            )));
        }
        let refused = |what: String| {
            DeliveryError::new(format!(
                "event {} cannot be published on {}: {what}",
                event.id, self.server
            ))
        };
        let mut headers = HeaderMap::new();
        let mut put = |name: &str, value: &str| -> Result<(), DeliveryError> {
            let header = HeaderName::from_str(name).map_err(|_| {
                refused(format!(
                    "header name {name:?} is not a NATS header name (ASCII without ':', spaces \
                     or control characters)"
                ))
            })?;
            let value = HeaderValue::from_str(value).map_err(|_| {
                refused(format!(
                    "the value of header {name:?} holds a line break, which NATS headers cannot \
                     carry"
                ))
            })?;
            headers.insert(header, value);
            Ok(())
        };
        for (name, value) in event.message_headers() {
            if name.eq_ignore_ascii_case(async_nats::header::NATS_MESSAGE_ID.as_ref()) {
                continue;
            }
            put(&name, &value)?;
        }
        if let Some(key) = event.message_key() {
            put(ORDERING_KEY_HEADER, key)?;
        }
        put(
            async_nats::header::NATS_MESSAGE_ID.as_ref(),
            &event.id.to_string(),
        )?;
        Ok((subject, headers))
    }

    async fn send(
        &self,
        events: &[OutboxEvent],
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        let deadline = Instant::now() + timeout;
        let timed_out = |what: &str| {
            DeliveryError::outage(format!(
                "{what} on {} timed out after {:.3} s",
                self.server,
                timeout.as_secs_f64()
            ))
        };
        let context = match tokio::time::timeout_at(deadline, self.context()).await {
            Ok(Ok(context)) => context,
            Ok(Err(error)) => {
                let text = error.chain();
                let kind = error.kind();
                return events
                    .iter()
                    .map(|_| Err(DeliveryError::new(text.clone()).with_kind(kind)))
                    .collect();
            }
            Err(_) => {
                return events
                    .iter()
                    .map(|_| Err(timed_out("connecting")))
                    .collect();
            }
        };
        let mut results = Vec::with_capacity(events.len());
        for chunk in events.chunks(ACK_WINDOW) {
            // Publish the whole chunk first…
            let mut pending = Vec::with_capacity(chunk.len());
            for event in chunk {
                let ack = match self.message(event) {
                    Err(error) => Err(error),
                    Ok((subject, headers)) => {
                        let publish = context.publish_with_headers(
                            subject.clone(),
                            headers,
                            event.body().into(),
                        );
                        match tokio::time::timeout_at(deadline, publish).await {
                            Ok(Ok(ack)) => Ok(ack),
                            Ok(Err(error)) => {
                                let kind = publish_error_kind(error.kind());
                                Err(DeliveryError::with_source(
                                    format!(
                                        "publishing event {} on {subject:?} to {} failed",
                                        event.id, self.server
                                    ),
                                    error,
                                )
                                .with_kind(kind))
                            }
                            Err(_) => Err(timed_out(&format!("publishing event {}", event.id))),
                        }
                    }
                };
                pending.push(ack);
            }
            // …then wait for its acknowledgements.
            for (event, ack) in chunk.iter().zip(pending) {
                let result = match ack {
                    Err(error) => Err(error),
                    Ok(ack) => match tokio::time::timeout_at(deadline, ack.into_future()).await {
                        Ok(Ok(ack)) => {
                            if ack.duplicate {
                                tracing::debug!(event_id = %event.id, stream = %ack.stream, "JetStream dropped a duplicate; counted as delivered");
                            }
                            Ok(())
                        }
                        Ok(Err(error)) => {
                            let kind = publish_error_kind(error.kind());
                            Err(DeliveryError::with_source(
                                format!(
                                    "JetStream did not store event {} on {:?} ({})",
                                    event.id,
                                    self.subject_for(event),
                                    self.server
                                ),
                                error,
                            )
                            .with_kind(kind))
                        }
                        Err(_) => Err(timed_out(&format!(
                            "waiting for the acknowledgement of event {}",
                            event.id
                        ))),
                    },
                };
                results.push(result);
            }
        }
        results
    }
}

/// How a JetStream publish error counts for the relay: no stream for the subject and a wrong
/// expected last message are the event's own fault; a message larger than the server's
/// `max_payload` is permanent; timeouts, a broken connection, too many acknowledgements pending
/// and anything else are an outage.
fn publish_error_kind(kind: jetstream::context::PublishErrorKind) -> DeliveryErrorKind {
    use jetstream::context::PublishErrorKind as K;
    match kind {
        K::StreamNotFound | K::WrongLastMessageId | K::WrongLastSequence => {
            DeliveryErrorKind::Event
        }
        K::MaxPayloadExceeded => DeliveryErrorKind::Permanent,
        _ => DeliveryErrorKind::Outage,
    }
}

/// Why `subject` is not a valid subject filter, if it is not: non-empty tokens, no whitespace,
/// `>` only as the last token.
fn subject_filter_problem(subject: &str) -> Option<String> {
    if subject.is_empty() {
        return Some("it is empty".to_owned());
    }
    if subject.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some("it contains whitespace or control characters".to_owned());
    }
    let tokens: Vec<&str> = subject.split('.').collect();
    for (i, token) in tokens.iter().enumerate() {
        if token.is_empty() {
            return Some("it has an empty token (a leading, trailing or double \".\")".to_owned());
        }
        if *token == ">" && i + 1 != tokens.len() {
            return Some("\">\" may only be the last token".to_owned());
        }
    }
    None
}

/// The whole batch at once, behind the shared batching adaptor.
#[async_trait]
impl BatchDelivery for NatsDelivery {
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
impl Delivery for NatsDelivery {
    /// Publishes one event and waits for its acknowledgement, within the timeout
    /// ([`DEFAULT_TIMEOUT`] unless set).
    async fn deliver(&self, event: &OutboxEvent) -> Result<(), DeliveryError> {
        self.deliver_one(event).await
    }

    /// Publishes the batch, then waits for the acknowledgements, all within the shorter of
    /// `timeout` and this delivery's timeout; one result per event, in order. `concurrency` does
    /// not apply: every publish of the batch is in flight at once (up to 1000).
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        _concurrency: usize,
        timeout: Duration,
    ) -> Vec<Result<(), DeliveryError>> {
        self.deliver_all(events, timeout).await
    }

    /// `true`: a batch is published in order on one connection, and the server appends a
    /// subject's messages to the stream in the order they arrive on it. When an event fails
    /// (its acknowledgement did not come), later events of its key may already be stored; the
    /// relay resends them after the failed one (the stream drops copies by `Nats-Msg-Id` within
    /// its duplicate window).
    fn keeps_key_order(&self) -> bool {
        true
    }

    /// Flushes and drops the connection this delivery opened (a client passed to
    /// [`NatsDelivery::from_client`] stays open); a later call connects again.
    async fn close(&self) -> Result<(), DeliveryError> {
        let mut state = self.state.lock().await;
        state.context = None;
        if let Some(client) = state.client.take() {
            let flushed = tokio::time::timeout(self.timeout, client.flush()).await;
            if !matches!(flushed, Ok(Ok(()))) {
                tracing::debug!(server = %self.server, "flushing the NATS connection before closing failed");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn event(topic: &str, key: Option<&str>, headers: serde_json::Value) -> OutboxEvent {
        OutboxEvent {
            sequence: 1,
            headers: headers.as_object().cloned().unwrap_or_default(),
            ordering_key: key.map(str::to_owned),
            ..OutboxEvent::new(topic.to_owned(), json!({"n": 1}))
        }
    }

    fn delivery() -> NatsDelivery {
        NatsDelivery::new("nats://127.0.0.1:4222").unwrap()
    }

    #[test]
    fn message_carries_headers_key_and_msg_id() {
        let e = event(
            "orders.created",
            Some("order:1"),
            json!({"author": "ann", "Nats-Msg-Id": "spoofed", "n": 3}),
        );
        let (subject, headers) = delivery().message(&e).unwrap();
        assert_eq!(subject, "orders.created");
        let get = |name: &str| headers.get(name).map(|v| v.as_str().to_owned());
        assert_eq!(get("author").as_deref(), Some("ann"));
        assert_eq!(get("n").as_deref(), Some("3"));
        assert_eq!(get("hare-outbox-event-id"), Some(e.id.to_string()));
        assert_eq!(get("hare-outbox-topic").as_deref(), Some("orders.created"));
        assert_eq!(get(ORDERING_KEY_HEADER).as_deref(), Some("order:1"));
        assert_eq!(get("Nats-Msg-Id"), Some(e.id.to_string()), "not spoofable");
        let (_, unkeyed) = delivery().message(&event("t", None, json!({}))).unwrap();
        assert!(unkeyed.get(ORDERING_KEY_HEADER).is_none());
    }

    #[test]
    fn unpublishable_subjects_and_headers_fail_the_event() {
        for topic in ["orders.*", "a..b", "with space"] {
            let error = delivery()
                .message(&event(topic, None, json!({})))
                .unwrap_err();
            assert!(error.to_string().contains(topic), "{error}");
        }
        let error = delivery()
            .message(&event("t", None, json!({"a:b": "x"})))
            .unwrap_err();
        assert!(error.to_string().contains("\"a:b\""), "{error}");
        let error = delivery()
            .message(&event("t", None, json!({"x": "line\nbreak"})))
            .unwrap_err();
        assert!(error.to_string().contains("line break"), "{error}");
    }

    #[test]
    fn prefix_goes_in_front_of_the_topic() {
        let d = delivery().with_subject_prefix("events.").unwrap();
        assert_eq!(
            d.subject_for(&event("orders", None, json!({}))),
            "events.orders"
        );
        for bad in ["", "a b.", "a..", "*.", ">."] {
            let e = delivery().with_subject_prefix(bad).unwrap_err();
            assert!(matches!(e, Error::Configuration(_)), "{bad:?}: {e}");
        }
    }

    #[test]
    fn stream_names_and_subjects_are_checked() {
        assert!(delivery().with_stream("EVENTS", ["events.>"]).is_ok());
        assert!(delivery().with_stream("EVENTS", ["a.*.b", "c"]).is_ok());
        for (name, subjects) in [
            ("", vec!["a"]),
            ("A.B", vec!["a"]),
            ("A B", vec!["a"]),
            ("EVENTS", vec![]),
            ("EVENTS", vec!["a.>.b"]),
            ("EVENTS", vec!["a..b"]),
        ] {
            let e = delivery().with_stream(name, subjects.clone()).unwrap_err();
            assert!(
                matches!(e, Error::Configuration(_)),
                "{name:?} {subjects:?}: {e}"
            );
            assert!(e.to_string().contains(&format!("{name:?}")), "{e}");
        }
    }

    #[test]
    fn debug_hides_the_password() {
        let d = NatsDelivery::new("nats://user:hunter2@127.0.0.1:4222").unwrap();
        let text = format!("{d:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("127.0.0.1:4222"), "{text}");
    }
}
