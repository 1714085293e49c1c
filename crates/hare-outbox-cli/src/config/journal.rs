//! `[backlog]` and `[cleanup]`: the thresholds of `backlog` and `/healthz`, and the ages
//! `cleanup` and `dead-letters cleanup` delete at.

use std::time::Duration;

use hare_outbox::TopicFilter;
use serde::Deserialize;

use crate::error::usage;

/// Seconds in a day, for the `*_days` keys.
const DAY_SECONDS: f64 = 86_400.0;

/// Checks topic patterns (exact names and `prefix*`) before anything connects.
///
/// # Errors
/// A usage error naming `flag` (an option or a key) and the pattern refused.
pub fn check_topics(flag: &str, topics: &[String]) -> anyhow::Result<()> {
    if !topics.is_empty() {
        TopicFilter::new(Some(topics), Vec::<&str>::new())
            .map_err(|e| usage(format!("{flag}: {e}")))?;
    }
    Ok(())
}

/// `[backlog]`: the thresholds of `hare-outbox backlog` and of `/healthz`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BacklogSection {
    /// Most pending events before the backlog counts as unhealthy.
    pub max_pending: Option<i64>,
    /// Oldest age in seconds a pending event may reach.
    pub max_age_seconds: Option<f64>,
    /// Most dead-lettered events.
    pub max_dead: Option<i64>,
    /// Topics counted (exact names and `prefix*`); absent = every topic.
    pub topics: Option<Vec<String>>,
    /// Most destinations of the relay open at once (circuit breaker): checked by `/healthz` of
    /// `relay --http`, and by `backlog` with `relay_url`.
    pub max_open_destinations: Option<i64>,
    /// The address of a running `hare-outbox relay --http`, which `backlog` asks for the
    /// relay's open destinations.
    pub relay_url: Option<String>,
}

/// The backlog thresholds, resolved; `None` = no threshold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BacklogThresholds {
    /// Most pending events.
    pub max_pending: Option<u64>,
    /// Oldest age of a pending event.
    pub max_age: Option<Duration>,
    /// Most dead-lettered events.
    pub max_dead: Option<u64>,
    /// Topics counted; empty = every topic.
    pub topics: Vec<String>,
    /// Most destinations open at once.
    pub max_open_destinations: Option<u64>,
    /// A running `relay --http` to ask for its destinations.
    pub relay_url: Option<String>,
}

/// Resolves `[backlog]`.
///
/// # Errors
/// A usage error naming the key and what is allowed.
pub fn backlog_thresholds(section: Option<&BacklogSection>) -> anyhow::Result<BacklogThresholds> {
    let Some(section) = section else {
        return Ok(BacklogThresholds::default());
    };
    let count = |key: &str, value: Option<i64>| -> anyhow::Result<Option<u64>> {
        value
            .map(|v| {
                u64::try_from(v).map_err(|_| {
                    usage(format!(
                        "{key} = {v} is not allowed; use a count, 0 or more"
                    ))
                })
            })
            .transpose()
    };
    let max_age = section
        .max_age_seconds
        .map(|v| {
            (v.is_finite() && v >= 0.0)
                .then(|| Duration::try_from_secs_f64(v).ok())
                .flatten()
                .ok_or_else(|| {
                    usage(format!(
                        "max_age_seconds = {v} is not allowed; use a number of seconds, 0 or more"
                    ))
                })
        })
        .transpose()?;
    let topics = section.topics.clone().unwrap_or_default();
    check_topics("topics", &topics)?;
    let relay_url = section
        .relay_url
        .as_deref()
        .map(relay_url)
        .transpose()
        .map_err(|e| usage(format!("relay_url: {e}")))?;
    Ok(BacklogThresholds {
        max_pending: count("max_pending", section.max_pending)?,
        max_age,
        max_dead: count("max_dead", section.max_dead)?,
        topics,
        max_open_destinations: count("max_open_destinations", section.max_open_destinations)?,
        relay_url,
    })
}

/// `[cleanup]`: how old finished events must be before `cleanup` and `dead-letters cleanup`
/// delete them when `--older-than` is not given.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CleanupSection {
    /// `cleanup`: published events older than this many days (fractions allowed).
    pub published_older_than_days: Option<f64>,
    /// `dead-letters cleanup`: dead letters older than this many days (fractions allowed).
    pub dead_lettered_older_than_days: Option<f64>,
}

/// The clean-up ages, resolved; `None` = `--older-than` is required.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CleanupAges {
    /// Published events older than this are deleted by `cleanup`.
    pub published: Option<Duration>,
    /// Dead letters older than this are deleted by `dead-letters cleanup`.
    pub dead_lettered: Option<Duration>,
}

/// Resolves `[cleanup]`.
///
/// # Errors
/// A usage error naming the key and what is allowed.
pub fn cleanup_ages(section: Option<&CleanupSection>) -> anyhow::Result<CleanupAges> {
    let Some(section) = section else {
        return Ok(CleanupAges::default());
    };
    let days = |key: &str, value: Option<f64>| -> anyhow::Result<Option<Duration>> {
        value
            .map(|v| {
                (v.is_finite() && v >= 0.0)
                    .then(|| Duration::try_from_secs_f64(v * DAY_SECONDS).ok())
                    .flatten()
                    .ok_or_else(|| {
                        usage(format!(
                            "{key} = {v} is not allowed; use a number of days, 0 or more"
                        ))
                    })
            })
            .transpose()
    };
    Ok(CleanupAges {
        published: days(
            "published_older_than_days",
            section.published_older_than_days,
        )?,
        dead_lettered: days(
            "dead_lettered_older_than_days",
            section.dead_lettered_older_than_days,
        )?,
    })
}

/// `url` checked as the base URL of a running `relay --http`: `http(s)://host:port[/prefix]`.
///
/// # Errors
/// What is wrong with the URL and what to give instead.
pub fn relay_url(url: &str) -> Result<String, String> {
    let parsed = url::Url::parse(url).map_err(|e| {
        format!("{url:?} is not a URL ({e}); give the relay's --http address, e.g. http://127.0.0.1:8080")
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!(
            "{url:?} has the scheme {:?}; give the relay's --http address, http://host:port",
            parsed.scheme()
        ));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_sections_are_checked() {
        let s = BacklogSection {
            max_pending: Some(-1),
            ..BacklogSection::default()
        };
        let e = format!("{:#}", backlog_thresholds(Some(&s)).unwrap_err());
        assert!(e.contains("max_pending = -1"), "{e}");
        let s = BacklogSection {
            max_age_seconds: Some(f64::NAN),
            ..BacklogSection::default()
        };
        assert!(backlog_thresholds(Some(&s)).is_err());
        let s = BacklogSection {
            topics: Some(vec!["doc.*.x".to_owned()]),
            ..BacklogSection::default()
        };
        let e = format!("{:#}", backlog_thresholds(Some(&s)).unwrap_err());
        assert!(e.contains("doc.*.x"), "{e}");
        let s = CleanupSection {
            published_older_than_days: Some(7.0),
            dead_lettered_older_than_days: Some(-1.0),
        };
        let e = format!("{:#}", cleanup_ages(Some(&s)).unwrap_err());
        assert!(e.contains("dead_lettered_older_than_days = -1"), "{e}");
        let s = CleanupSection {
            published_older_than_days: Some(0.5),
            dead_lettered_older_than_days: None,
        };
        let ages = cleanup_ages(Some(&s)).unwrap();
        assert_eq!(ages.published, Some(Duration::from_secs(43_200)));
    }

    #[test]
    fn the_example_file_sets_backlog_and_cleanup() {
        let text = include_str!("../../../../hare-outbox.example.toml");
        let file = crate::config::parse(text).unwrap();
        let t = backlog_thresholds(file.backlog.as_ref()).unwrap();
        assert_eq!(t.max_pending, Some(10_000));
        assert_eq!(t.max_age, Some(Duration::from_secs(900)));
        assert_eq!(t.max_dead, Some(0));
        let ages = cleanup_ages(file.cleanup.as_ref()).unwrap();
        assert_eq!(ages.published, Some(Duration::from_secs(7 * 86_400)));
        assert_eq!(ages.dead_lettered, Some(Duration::from_secs(30 * 86_400)));
        let d = crate::config::dashboard::dashboard_settings(
            file.dashboard.as_ref(),
            std::path::Path::new("."),
            &|_| None,
        )
        .unwrap();
        assert_eq!(d.address.as_deref(), Some("127.0.0.1:8080"));
        assert!(!d.allow_remote && d.token.is_none());
    }
}
