//! Exit codes: 0 for a clean stop, 2 for a bad config or usage, 1 for a failure at run time, 3
//! when `capture status` finds a capture missing or drifted, 4 when `backlog` finds a threshold
//! passed.

use std::fmt;

/// A mistake in the command line, the config file or the environment: exit code 2.
#[derive(Debug)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Builds an `anyhow::Error` carrying a [`UsageError`].
pub fn usage(message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::new(UsageError(message.into()))
}

/// Captures differ from the config (`capture status`): exit code 3.
#[derive(Debug)]
pub struct DriftFound(pub String);

impl fmt::Display for DriftFound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for DriftFound {}

/// `backlog` found a threshold passed: exit code 4.
#[derive(Debug)]
pub struct ThresholdPassed(pub String);

impl fmt::Display for ThresholdPassed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ThresholdPassed {}

/// Exit code of a clean stop.
pub const EXIT_OK: u8 = 0;
/// Exit code of a failure at run time (database unreachable, migration refused, …).
pub const EXIT_RUNTIME: u8 = 1;
/// Exit code of a bad config file, option or environment variable.
pub const EXIT_USAGE: u8 = 2;
/// Exit code of `capture status` when a capture is missing, drifted or not in the config.
pub const EXIT_DRIFT: u8 = 3;
/// Exit code of `backlog` when a threshold is passed.
pub const EXIT_THRESHOLD: u8 = 4;

/// The exit code for `error`: [`EXIT_USAGE`] when anything in its chain is a [`UsageError`], a
/// broker config's [`ConfigError`](hare_outbox::secrets::ConfigError), or a configuration or validation error of the library, [`EXIT_DRIFT`] for [`DriftFound`],
/// [`EXIT_THRESHOLD`] for [`ThresholdPassed`], else [`EXIT_RUNTIME`].
pub fn exit_code(error: &anyhow::Error) -> u8 {
    for cause in error.chain() {
        if cause.is::<ThresholdPassed>() {
            return EXIT_THRESHOLD;
        }
        if cause.is::<DriftFound>() {
            return EXIT_DRIFT;
        }
        if cause.is::<UsageError>() || cause.is::<hare_outbox::secrets::ConfigError>() {
            return EXIT_USAGE;
        }
        if let Some(hare_outbox::Error::Configuration(_) | hare_outbox::Error::Validation { .. }) =
            cause.downcast_ref::<hare_outbox::Error>()
        {
            return EXIT_USAGE;
        }
    }
    EXIT_RUNTIME
}

/// `error` and its causes as one line, `a: b: c`, leaving out a cause whose text an earlier part
/// already shows (library errors often repeat their source in their own message).
pub fn render(error: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in error.chain() {
        let part = cause.to_string();
        if text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// `url` as messages and logs show a connection URL: the shared redaction
/// ([`hare_outbox::redact::redact_url`]) — password, NATS token and secret parameters as `***`.
pub fn redact_url(url: &str) -> String {
    hare_outbox::redact::redact_url(url, hare_outbox::redact::UrlKind::Connection)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_and_configuration_errors_exit_2() {
        assert_eq!(exit_code(&usage("bad")), EXIT_USAGE);
        let e = anyhow::Error::new(hare_outbox::Error::configuration("batch_size 0"));
        assert_eq!(exit_code(&e.context("loading config")), EXIT_USAGE);
        let e = anyhow::Error::new(hare_outbox::Error::database(std::io::Error::other("down")));
        assert_eq!(exit_code(&e), EXIT_RUNTIME);
        let e = anyhow::Error::new(DriftFound("1 capture differs".into()));
        assert_eq!(exit_code(&e.context("capture status")), EXIT_DRIFT);
        let e = anyhow::Error::new(ThresholdPassed("12 pending > max_pending 10".into()));
        assert_eq!(exit_code(&e.context("backlog")), EXIT_THRESHOLD);
    }

    #[test]
    fn render_leaves_out_repeated_causes() {
        let io = std::io::Error::other("unable to open database file");
        let e = anyhow::Error::new(hare_outbox::Error::database(io))
            .context("opening sqlite:x.db failed");
        assert_eq!(
            render(&e),
            "opening sqlite:x.db failed: database error: unable to open database file"
        );
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/erp?sslmode=require"),
            "postgres://app:***@db:5432/erp?sslmode=require"
        );
        assert_eq!(redact_url("postgres://app@db/erp"), "postgres://app@db/erp");
        assert_eq!(redact_url("sqlite:erp.db"), "sqlite:erp.db");
        assert_eq!(redact_url("postgres://db/x?u=a@b"), "postgres://db/x?u=a@b");
    }

    #[test]
    fn passwords_in_server_lists_and_scheme_less_urls_are_redacted() {
        assert_eq!(
            redact_url("nats://h1:4222,nats://u:hunter2@h2:4222"),
            "nats://h1:4222,nats://u:***@h2:4222"
        );
        assert_eq!(
            redact_url("nats://h1:4222, u:hunter2@h2:4222"),
            "nats://h1:4222, u:***@h2:4222"
        );
        assert_eq!(redact_url("u:hunter2@h:4222"), "u:***@h:4222");
        assert_eq!(redact_url("nats://h1,nats://h2"), "nats://h1,nats://h2");
        assert_eq!(redact_url("127.0.0.1:4222"), "127.0.0.1:4222");
        assert_eq!(redact_url("sqlite:a@b:c.db"), "sqlite:a@b:c.db");
    }
}
