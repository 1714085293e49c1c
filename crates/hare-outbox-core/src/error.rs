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

/// Why one event was not delivered. The relay records it as the event's `last_error`, retries the
/// event with backoff and dead-letters it when its attempts run out.
///
/// A delivery only reports; retries and dead letters belong to the relay.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct DeliveryError {
    message: String,
    #[source]
    source: Option<BoxError>,
    not_attempted: bool,
}

impl DeliveryError {
    /// A failure described by `message` alone, e.g. `"webhook answered 500"`.
    pub fn new(message: impl Into<String>) -> Self {
        DeliveryError {
            message: message.into(),
            source: None,
            not_attempted: false,
        }
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

    /// A failure described by `message`, caused by `source` (kept as [`std::error::Error::source`]).
    pub fn with_source(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        DeliveryError {
            message: message.into(),
            source: Some(source.into()),
            not_attempted: false,
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
    fn validation_message_names_field() {
        let e = Error::validation("topic", "must not be empty");
        assert_eq!(e.to_string(), "invalid topic: must not be empty");
    }
}
