//! `MqttDelivery`: events published with QoS 1.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use hare_outbox_core::{Delivery, DeliveryError, Error, OutboxEvent, Result};
use rumqttc::MqttOptions;
use tokio::time::Instant;

use crate::connection::Session;

/// How long one call may take unless [`MqttDelivery::with_timeout`] sets another: 10 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Delivers events to an MQTT broker with QoS 1.
///
/// # Topic
/// The MQTT topic is the event's topic with every `.` replaced by `/`, after the prefix set by
/// [`with_topic_prefix`](Self::with_topic_prefix) (see [`mqtt_topic`]):
///
/// | event topic            | prefix   | MQTT topic                   |
/// |------------------------|----------|------------------------------|
/// | `library.loan.created` | none     | `library/loan/created`       |
/// | `library.loan.created` | `site-1` | `site-1/library/loan/created`|
///
/// An event whose topic contains `+`, `#` or NUL (not allowed in an MQTT topic name), maps to an
/// empty level (`a..b`, `.a`, `a.`, an empty topic), or begins with `$` (reserved for the broker)
/// fails with a message saying so, without affecting the other events of its batch. The relay
/// retries it and finally dead-letters it; fix such topics at the source.
///
/// # Message
/// The payload is [`OutboxEvent::body`] (the payload as compact JSON), published with QoS 1 and
/// without the retain flag. A delivery succeeds only once the broker acknowledged the publish
/// (`PUBACK`): the broker then owns the message. Subscribers get it at least once; they should
/// subscribe with QoS 1 too (a QoS 0 subscription downgrades delivery to at most once).
///
/// **Headers are not carried**: this delivery speaks MQTT 3.1.1, which has no message headers, so
/// [`OutboxEvent::message_headers`] (including `hare-outbox-event-id`) are dropped. MQTT 3.1.1
/// was chosen over 5 because every broker speaks it and rumqttc's 3.1.1 client is its mature one.
/// Receivers that must drop duplicates need an id inside the payload (e.g. put the event's
/// idempotency key or a business id in it).
///
/// # Batches and order
/// A batch publishes every event, then waits for all their acks, and returns one result per event
/// in order. Events of one ordering key keep their order: the relay sends the next event of a key
/// only after the previous one was acknowledged.
///
/// # Connection
/// One MQTT session (client id from the URL), opened on the first delivery and shared by clones.
/// A lost connection fails every event in flight (the relay retries them) and the next call
/// connects again, with a clean session. A call that exceeds its timeout fails its unacked events
/// and drops the session too, so a half-open connection is not kept. Two deliveries must not share
/// a client id: the broker disconnects the older session when a newer one connects.
///
/// # Cancel safety
/// A call dropped midway may have published some of its events; the relay counts them as failed
/// and publishes them again later (at least once).
#[derive(Clone)]
pub struct MqttDelivery {
    options: MqttOptions,
    server: String,
    prefix: Option<String>,
    timeout: Duration,
    session: Arc<Mutex<Option<Arc<Session>>>>,
}

impl std::fmt::Debug for MqttDelivery {
    /// Shows the server and client id, never a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MqttDelivery")
            .field("server", &self.server)
            .field("prefix", &self.prefix)
            .field("timeout", &self.timeout)
            .finish()
    }
}

impl MqttDelivery {
    /// A delivery to the broker at `url`:
    /// `mqtt://[user[:password]@]host[:port]?client_id=<id>[&keep_alive_secs=<n>]`
    /// (port 1883 by default; `mqtts://` on port 8883 with the `tls` feature). Without
    /// `client_id`, a random `hare-outbox-<hex>` id is used. Further rumqttc URL options
    /// (`inflight_num`, `max_incoming_packet_size_bytes` with `max_outgoing_packet_size_bytes`, …)
    /// are accepted too. No prefix; timeout [`DEFAULT_TIMEOUT`] (10 s). Nothing is connected until
    /// the first delivery.
    ///
    /// # Errors
    /// [`Error::Configuration`] naming the URL (password hidden) when it is not such a URL.
    pub fn new(url: &str) -> Result<Self> {
        let parsed = match MqttOptions::parse_url(url) {
            Err(rumqttc::OptionError::ClientId) => {
                let separator = if url.contains('?') { '&' } else { '?' };
                MqttOptions::parse_url(format!("{url}{separator}client_id={}", random_client_id()))
            }
            other => other,
        };
        let options = parsed.map_err(|e| {
            Error::configuration(format!(
                "mqtt delivery url {:?} is not a valid MQTT URL ({e}); expected e.g. \
                 \"mqtt://127.0.0.1:1883?client_id=outbox-relay-1\" or \
                 \"mqtt://user:password@host:1883?client_id=outbox-relay-1\"",
                redact(url)
            ))
        })?;
        if options.broker_address().0.is_empty() {
            return Err(Error::configuration(format!(
                "mqtt delivery url {:?} names no host; expected e.g. \
                 \"mqtt://127.0.0.1:1883?client_id=outbox-relay-1\"",
                redact(url)
            )));
        }
        Ok(Self::from_options(options))
    }

    /// Like [`new`](Self::new) with options you built yourself, e.g. with your own TLS transport,
    /// credentials or keep-alive. The session is always clean (`clean_session = true`), whatever
    /// the options say: a session is never resumed (see the type's docs).
    pub fn from_options(mut options: MqttOptions) -> Self {
        options.set_clean_session(true);
        let (host, port) = options.broker_address();
        MqttDelivery {
            server: format!("mqtt {host}:{port} client {}", options.client_id()),
            options,
            prefix: None,
            timeout: DEFAULT_TIMEOUT,
            session: Arc::default(),
        }
    }

    /// Publishes under `prefix`: `library.loan.created` goes to `<prefix>/library/loan/created`.
    /// The prefix is an MQTT topic as is (slashes separate its levels; no dot mapping); one
    /// trailing `/` is ignored. Unset by default.
    ///
    /// # Errors
    /// [`Error::Configuration`] when the prefix is empty, has an empty level, contains `+`, `#` or
    /// NUL, or begins with `$`.
    pub fn with_topic_prefix(mut self, prefix: impl Into<String>) -> Result<Self> {
        let prefix = prefix.into();
        let trimmed = prefix.strip_suffix('/').unwrap_or(&prefix);
        check_topic(trimmed).map_err(|why| {
            Error::configuration(format!(
                "mqtt topic prefix {prefix:?} is not usable: {why}; give e.g. \"site-1\" or \
                 \"site-1/outbox\", or leave it unset"
            ))
        })?;
        self.prefix = Some(trimmed.to_owned());
        Ok(self)
    }

    /// How long one call may take: connecting, publishing and receiving every `PUBACK` of one
    /// event or of a whole batch; a slower call fails its unacked events. In a relay the shorter
    /// of this and the relay's delivery timeout applies. Defaults to 10 s ([`DEFAULT_TIMEOUT`]).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The MQTT topic `event` is published to, or why it cannot be published.
    ///
    /// # Errors
    /// A message naming the event's topic when it cannot be mapped (see [`mqtt_topic`]).
    pub fn topic_for(&self, event: &OutboxEvent) -> std::result::Result<String, String> {
        let topic = mqtt_topic(&event.topic)?;
        Ok(match &self.prefix {
            Some(prefix) => format!("{prefix}/{topic}"),
            None => topic,
        })
    }

    /// The shared session, opened when there is none or the last one ended.
    fn session(&self) -> Arc<Session> {
        let mut slot = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(session) = slot.as_ref().filter(|s| !s.is_dead()) {
            return Arc::clone(session);
        }
        let session = Arc::new(Session::open(self.options.clone(), self.server.clone()));
        *slot = Some(Arc::clone(&session));
        session
    }

    /// Drops `session` (if it is still the current one) and ends it.
    async fn discard(&self, session: &Arc<Session>, reason: &str) {
        {
            let mut slot = self.session.lock().unwrap_or_else(PoisonError::into_inner);
            if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, session)) {
                slot.take();
            }
        }
        session.shut_down(reason, false).await;
    }

    async fn send(
        &self,
        events: &[OutboxEvent],
        timeout: Duration,
    ) -> Vec<std::result::Result<(), DeliveryError>> {
        let deadline = Instant::now() + timeout;
        let timed_out = || {
            format!(
                "no PUBACK from {} within {:.3} s",
                self.server,
                timeout.as_secs_f64()
            )
        };
        let session = self.session();
        let mut expired = false;
        // Publish all…
        let mut pending = Vec::with_capacity(events.len());
        for event in events {
            let topic = match self.topic_for(event) {
                Ok(topic) => topic,
                Err(why) => {
                    pending.push(Pending::Refused(DeliveryError::new(format!(
                        "event {} not published: {why}",
                        event.id
                    ))));
                    continue;
                }
            };
            if expired {
                pending.push(Pending::Failed(timed_out()));
                continue;
            }
            match tokio::time::timeout_at(deadline, session.publish(topic, event.body())).await {
                Ok(Ok(ack)) => pending.push(Pending::Sent(ack)),
                Ok(Err(why)) => pending.push(Pending::Failed(why)),
                Err(_) => {
                    expired = true;
                    pending.push(Pending::Failed(timed_out()));
                }
            }
        }
        // …then await every ack.
        let mut results = Vec::with_capacity(events.len());
        for (event, entry) in events.iter().zip(pending) {
            let result = match entry {
                Pending::Refused(error) => {
                    results.push(Err(error));
                    continue;
                }
                Pending::Failed(why) => Err(why),
                Pending::Sent(ack) => match tokio::time::timeout_at(deadline, ack).await {
                    Ok(Ok(result)) => result,
                    Ok(Err(_)) => Err(format!("MQTT session to {} ended", self.server)),
                    Err(_) => {
                        expired = true;
                        Err(timed_out())
                    }
                },
            };
            // The session, the connection or the broker failed: an outage, not the event's fault.
            results.push(result.map_err(|why| {
                DeliveryError::outage(format!(
                    "publishing event {} to MQTT topic {:?} failed: {why}",
                    event.id,
                    self.topic_for(event).unwrap_or_default()
                ))
            }));
        }
        if expired {
            // Requests and waiters may no longer line up, and the connection may be half open.
            self.discard(&session, &timed_out()).await;
        }
        results
    }
}

#[async_trait]
impl Delivery for MqttDelivery {
    /// Publishes one event and waits for its `PUBACK`, within the timeout ([`DEFAULT_TIMEOUT`]
    /// unless set).
    async fn deliver(&self, event: &OutboxEvent) -> std::result::Result<(), DeliveryError> {
        self.send(std::slice::from_ref(event), self.timeout)
            .await
            .pop()
            .unwrap_or_else(|| Err(DeliveryError::new("no result for the event")))
    }

    /// Publishes the whole batch, then waits for every `PUBACK`, and returns one result per
    /// event, in order; all within the shorter of `timeout` and this delivery's timeout.
    /// `concurrency` does not apply: every event is in flight at once (up to the client's
    /// in-flight limit, 100 unless the URL's `inflight_num` says otherwise).
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        _concurrency: usize,
        timeout: Duration,
    ) -> Vec<std::result::Result<(), DeliveryError>> {
        if events.is_empty() {
            return Vec::new();
        }
        self.send(events, timeout.min(self.timeout)).await
    }

    /// Disconnects (sending `DISCONNECT`); a later call connects again.
    async fn close(&self) -> std::result::Result<(), DeliveryError> {
        let session = self
            .session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(session) = session {
            session
                .shut_down("the MQTT delivery was closed", true)
                .await;
        }
        Ok(())
    }
}

/// Where one event of a call stands between publishing and the ack.
enum Pending {
    /// Not publishable: the final error.
    Refused(DeliveryError),
    /// Publishing failed: why.
    Failed(String),
    /// Handed to the client: resolves on the `PUBACK`.
    Sent(tokio::sync::oneshot::Receiver<crate::connection::Ack>),
}

/// The MQTT topic for an event topic: every `.` becomes `/` (`library.loan.created` →
/// `library/loan/created`); a `/` already in the topic stays a level separator.
///
/// # Errors
/// A message saying why, when the topic is empty, contains `+`, `#` or NUL, has an empty level
/// (`a..b`, `.a`, `a.`), begins with `$`, or is longer than 65535 bytes.
pub fn mqtt_topic(event_topic: &str) -> std::result::Result<String, String> {
    let topic = event_topic.replace('.', "/");
    check_topic(&topic).map_err(|why| format!("event topic {event_topic:?} {why}"))?;
    Ok(topic)
}

/// Why `topic` is not a usable MQTT topic name, if it is not.
fn check_topic(topic: &str) -> std::result::Result<(), String> {
    if topic.is_empty() {
        return Err("is empty".to_owned());
    }
    if let Some(c) = topic.chars().find(|c| matches!(c, '+' | '#' | '\0')) {
        let shown = if c == '\0' {
            "NUL".to_owned()
        } else {
            format!("{c:?}")
        };
        return Err(format!(
            "contains {shown}, which MQTT does not allow in a topic name"
        ));
    }
    if topic.split('/').any(str::is_empty) {
        return Err(format!(
            "maps to MQTT topic {topic:?}, which has an empty level"
        ));
    }
    if topic.starts_with('$') {
        return Err("begins with '$', which MQTT reserves for the broker".to_owned());
    }
    if topic.len() > usize::from(u16::MAX) {
        return Err(format!(
            "is {} bytes long, more than MQTT's 65535",
            topic.len()
        ));
    }
    Ok(())
}

/// A client id of 16 random hex digits after `hare-outbox-`.
fn random_client_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.write_u32(std::process::id());
    format!("hare-outbox-{:016x}", hasher.finish())
}

/// `url` as messages show it: the shared redaction of connection URLs
/// ([`hare_outbox_core::redact::redact_url`]), password and secret parameters as `***`.
fn redact(url: &str) -> String {
    hare_outbox_core::redact::redact_url(url, hare_outbox_core::redact::UrlKind::Connection)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dots_become_levels() {
        assert_eq!(
            mqtt_topic("library.loan.created").unwrap(),
            "library/loan/created"
        );
        assert_eq!(mqtt_topic("orders").unwrap(), "orders");
        assert_eq!(mqtt_topic("a/b.c").unwrap(), "a/b/c");
    }

    #[test]
    fn unusable_topics_say_why() {
        for (topic, why) in [
            ("", "empty"),
            ("a.+.b", "'+'"),
            ("a.#", "'#'"),
            ("a\0b", "NUL"),
            ("a..b", "empty level"),
            (".a", "empty level"),
            ("a.", "empty level"),
            ("a//b", "empty level"),
            ("$SYS.x", "'$'"),
        ] {
            let e = mqtt_topic(topic).unwrap_err();
            assert!(e.contains(why), "{topic:?}: {e}");
            assert!(e.contains(&format!("{topic:?}")), "{topic:?}: {e}");
        }
    }

    #[test]
    fn prefix_is_checked_and_prepended() {
        let d = || MqttDelivery::new("mqtt://127.0.0.1:1883?client_id=t").unwrap();
        let d1 = d().with_topic_prefix("site-1/").unwrap();
        assert_eq!(d1.prefix.as_deref(), Some("site-1"));
        for bad in ["", "/", "a//b", "a/+", "#", "$SYS"] {
            let e = d().with_topic_prefix(bad).unwrap_err();
            assert!(matches!(e, Error::Configuration(_)), "{bad:?}: {e}");
            assert!(e.to_string().contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn redact_hides_only_the_password() {
        assert_eq!(
            redact("mqtt://user:s3cret@host:1883?client_id=a"),
            "mqtt://user:***@host:1883?client_id=a"
        );
        assert_eq!(redact("mqtt://host:1883"), "mqtt://host:1883");
        assert_eq!(redact("mqtt://user@host"), "mqtt://user@host");
        assert_eq!(redact("not a url"), "not a url");
    }

    #[test]
    fn bad_urls_are_configuration_errors_naming_the_url() {
        for url in [
            "",
            "http://host:1883?client_id=a",
            "mqtt://u:pw@host:notaport?client_id=a",
            "mqtt://host?client_id=a&keep_alive_secs=x",
        ] {
            let e = MqttDelivery::new(url).unwrap_err();
            assert!(matches!(e, Error::Configuration(_)), "{url}: {e}");
            assert!(!e.to_string().contains("pw@"), "{e}");
        }
        let e = MqttDelivery::new("http://host:1883").unwrap_err();
        assert!(e.to_string().contains("\"http://host:1883\""), "{e}");
    }

    #[test]
    fn a_missing_client_id_is_generated() {
        let a = MqttDelivery::new("mqtt://127.0.0.1").unwrap();
        let b = MqttDelivery::new("mqtt://127.0.0.1?keep_alive_secs=5").unwrap();
        assert!(a.options.client_id().starts_with("hare-outbox-"));
        assert_ne!(a.options.client_id(), b.options.client_id());
        assert_eq!(a.options.broker_address().1, 1883);
        let c = MqttDelivery::new("mqtt://u:hunter2@127.0.0.1:1884?client_id=relay").unwrap();
        let text = format!("{c:?}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("127.0.0.1:1884 client relay"), "{text}");
    }
}
