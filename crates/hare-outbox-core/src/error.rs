//! The error types of hare-outbox.

use std::error::Error as StdError;

/// A boxed error kept as the source of a higher-level error.
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// `Result` with [`enum@Error`] as the default error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong in an outbox, relay or backend call.
///
/// Messages are lowercase, name the offending value and say what is allowed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was refused before anything was written: an empty or over-long topic, key or
    /// header name, a payload that has no JSON form. Nothing was written.
    #[error("invalid {field}: {message}")]
    Validation {
        /// The argument or path that was refused, e.g. `topic` or `headers."x-a"`.
        field: String,
        /// What is wrong with it and what is allowed.
        message: String,
    },
    /// A declaration or option is invalid: a relay option out of range, a malformed table name.
    #[error("configuration error: {0}")]
    Configuration(String),
    /// The database refused a write on a constraint other than the idempotency key: a unique key,
    /// a foreign key, NOT NULL or CHECK; the message names the constraint where the database does.
    #[error("integrity error: {message}")]
    Integrity {
        /// What the database said.
        message: String,
        /// The driver error.
        #[source]
        source: BoxError,
    },
    /// A serialization failure or deadlock: run the whole transaction again.
    #[error("transaction must be retried: {message}")]
    TransactionRetry {
        /// What the database said.
        message: String,
        /// The driver error.
        #[source]
        source: BoxError,
    },
    /// The operation is not available on this backend.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The database's record of applied schema migrations disagrees with this build: a
    /// migration file edited after it ran (checksum), a version applied by a newer build, a
    /// version missing below an applied one. The message names the table and the version. Nothing
    /// was changed.
    #[error("migration error: {0}")]
    Migration(String),
    /// Any other database failure (connection lost, syntax, permissions).
    #[error("database error: {source}")]
    Database {
        /// The driver error.
        #[source]
        source: BoxError,
    },
}

impl Error {
    /// A [`Error::Validation`] for `field` with `message`.
    pub fn validation(field: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Validation {
            field: field.into(),
            message: message.into(),
        }
    }

    /// A [`Error::Configuration`] with `message`.
    pub fn configuration(message: impl Into<String>) -> Self {
        Error::Configuration(message.into())
    }

    /// A [`Error::Database`] wrapping `source`.
    pub fn database(source: impl Into<BoxError>) -> Self {
        Error::Database {
            source: source.into(),
        }
    }
}

/// What kind of failure a [`DeliveryError`] is: it decides whether the failure counts an attempt,
/// when the event is tried again, and whether it tells the relay's circuit breaker that the
/// destination is down.
///
/// | kind | attempt counted | next attempt | circuit breaker |
/// |---|---|---|---|
/// | [`Event`](Self::Event) | yes | back-off | the destination answered: resets its failure count |
/// | [`Outage`](Self::Outage) | yes while the destination is closed, no once it is open | back-off, or the next probe once open | one more consecutive failure; enough of them open it |
/// | [`RetryAfter`](Self::RetryAfter) | like `Outage` | after the given time (at most `retry_max`) | like `Outage`; opening waits at least that long |
/// | [`Permanent`](Self::Permanent) | yes, and the event is dead-lettered at once | never | the destination answered |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum DeliveryErrorKind {
    /// The event's own fault, or a failure the delivery did not classify: a 400 or 404 answer, a
    /// payload the broker refuses. The default of [`DeliveryError::new`] and
    /// [`DeliveryError::with_source`].
    #[default]
    Event,
    /// The destination looks down or overloaded: connection refused or reset, a timeout, a 5xx
    /// or 429 answer, a broker that is unavailable.
    Outage,
    /// The destination asked to be called again after this long (a `Retry-After` on a 429 or
    /// 503): an outage whose end is announced.
    RetryAfter(std::time::Duration),
    /// The event can never be delivered (a webhook's 410 Gone, a record larger than the broker
    /// takes): it is dead-lettered at once, whatever attempts it has left.
    Permanent,
}

impl DeliveryErrorKind {
    /// Whether this kind says the destination is down: [`Outage`](Self::Outage) or
    /// [`RetryAfter`](Self::RetryAfter).
    pub fn is_outage(self) -> bool {
        matches!(
            self,
            DeliveryErrorKind::Outage | DeliveryErrorKind::RetryAfter(_)
        )
    }
}

/// Why one event was not delivered. The relay records it as the event's `last_error`, retries the
/// event with backoff and dead-letters it when its attempts run out.
///
/// A delivery only reports; retries and dead letters belong to the relay. Its
/// [kind](DeliveryErrorKind) tells the relay how to treat the failure: build one with
/// [`DeliveryError::outage`], [`DeliveryError::retry_after`] or [`DeliveryError::permanent`], or
/// set the kind of any error with [`DeliveryError::with_kind`]; custom deliveries may do the same.
///
/// ```
/// use std::time::Duration;
/// use hare_outbox_core::{DeliveryError, error::DeliveryErrorKind};
///
/// let down = DeliveryError::outage("billing answered 503");
/// assert!(down.kind().is_outage());
/// let later = DeliveryError::retry_after("billing answered 429", Duration::from_secs(3));
/// assert_eq!(later.kind(), DeliveryErrorKind::RetryAfter(Duration::from_secs(3)));
/// let gone = DeliveryError::permanent("billing answered 410 Gone");
/// assert_eq!(gone.kind(), DeliveryErrorKind::Permanent);
/// ```
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DeliveryError {
    message: String,
    #[source]
    source: Option<BoxError>,
    not_attempted: bool,
    kind: DeliveryErrorKind,
    deferred: Option<std::time::Duration>,
}

impl DeliveryError {
    /// A failure described by `message` alone, e.g. `"webhook answered 400"`, of the kind
    /// [`DeliveryErrorKind::Event`].
    pub fn new(message: impl Into<String>) -> Self {
        DeliveryError {
            message: message.into(),
            source: None,
            not_attempted: false,
            kind: DeliveryErrorKind::Event,
            deferred: None,
        }
    }

    /// A failure that says the destination is down ([`DeliveryErrorKind::Outage`]), e.g.
    /// `"connecting to redis://cache:6379 failed"`.
    pub fn outage(message: impl Into<String>) -> Self {
        DeliveryError::new(message).with_kind(DeliveryErrorKind::Outage)
    }

    /// A failure after which the destination asked to be called again in `after`
    /// ([`DeliveryErrorKind::RetryAfter`]): the event is tried again then (at most
    /// [`RelayConfig::retry_max`](crate::RelayConfig::retry_max) later).
    pub fn retry_after(message: impl Into<String>, after: std::time::Duration) -> Self {
        DeliveryError::new(message).with_kind(DeliveryErrorKind::RetryAfter(after))
    }

    /// A failure that can never turn into a delivery ([`DeliveryErrorKind::Permanent`]): the
    /// relay dead-letters the event at once.
    pub fn permanent(message: impl Into<String>) -> Self {
        DeliveryError::new(message).with_kind(DeliveryErrorKind::Permanent)
    }

    /// The same error, of the kind `kind`.
    pub fn with_kind(mut self, kind: DeliveryErrorKind) -> Self {
        self.kind = kind;
        self
    }

    /// The kind of failure; [`DeliveryErrorKind::Event`] unless set.
    pub fn kind(&self) -> DeliveryErrorKind {
        self.kind
    }

    /// The event was not sent at all, e.g. because an earlier event of its ordering key in the
    /// same batch failed: the relay releases it without counting an attempt.
    pub fn not_attempted(message: impl Into<String>) -> Self {
        DeliveryError {
            not_attempted: true,
            ..DeliveryError::new(message)
        }
    }

    /// Whether this is a [`DeliveryError::not_attempted`].
    pub fn is_not_attempted(&self) -> bool {
        self.not_attempted
    }

    /// A failure the relay's circuit breaker does not count against the event: the destination
    /// is open. The event is tried again in `retry_in` (at the destination's next probe) with
    /// its attempts unchanged.
    pub(crate) fn deferred(mut self, retry_in: std::time::Duration) -> Self {
        self.deferred = Some(retry_in);
        self
    }

    /// When the relay's circuit breaker deferred the event instead of counting the failure: the
    /// time until the destination's next probe. `None` for a failure that counts.
    pub fn deferred_for(&self) -> Option<std::time::Duration> {
        self.deferred
    }

    /// A failure described by `message`, caused by `source` (kept as [`std::error::Error::source`]),
    /// of the kind [`DeliveryErrorKind::Event`].
    pub fn with_source(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        DeliveryError {
            source: Some(source.into()),
            ..DeliveryError::new(message)
        }
    }

    /// The message with the chain of sources, `"a: b: c"`: what the relay stores as `last_error`.
    pub fn chain(&self) -> String {
        let mut text = self.message.clone();
        let mut next: Option<&(dyn StdError + 'static)> = self.source.as_deref().map(|e| e as _);
        while let Some(cause) = next {
            let part = cause.to_string();
            if !text.contains(&part) {
                text.push_str(": ");
                text.push_str(&part);
            }
            next = cause.source();
        }
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chain_joins_sources_once() {
        let io = std::io::Error::other("connection refused");
        let e = DeliveryError::with_source("request to http://127.0.0.1:1/ failed", io);
        assert_eq!(
            e.chain(),
            "request to http://127.0.0.1:1/ failed: connection refused"
        );
        assert!(e.source().is_some());
    }

    #[test]
    fn kinds_are_set_by_their_constructors_and_kept_by_with_source() {
        assert_eq!(DeliveryError::new("x").kind(), DeliveryErrorKind::Event);
        assert_eq!(
            DeliveryError::with_source("x", std::io::Error::other("y")).kind(),
            DeliveryErrorKind::Event
        );
        assert!(DeliveryError::outage("x").kind().is_outage());
        assert!(
            DeliveryError::retry_after("x", std::time::Duration::from_secs(1))
                .kind()
                .is_outage()
        );
        assert!(!DeliveryError::permanent("x").kind().is_outage());
        let e = DeliveryError::with_source("x", std::io::Error::other("y"))
            .with_kind(DeliveryErrorKind::Outage);
        assert_eq!(e.kind(), DeliveryErrorKind::Outage);
        assert_eq!(e.chain(), "x: y");
        assert_eq!(e.deferred_for(), None);
        let later = e.deferred(std::time::Duration::from_secs(2));
        assert_eq!(
            later.deferred_for(),
            Some(std::time::Duration::from_secs(2))
        );
    }

    #[test]
    fn validation_message_names_field() {
        let e = Error::validation("topic", "must not be empty");
        assert_eq!(e.to_string(), "invalid topic: must not be empty");
    }
}
