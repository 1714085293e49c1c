//! `backlog`: pending, the oldest pending age and dead letters, checked against thresholds.

use std::time::Duration;

use anyhow::Context as _;
use hare_outbox::Journal;

use crate::args::{BacklogArgs, topic_refs};
use crate::config::Settings;
use crate::config::journal::{BacklogThresholds, check_topics, relay_url};
use crate::db::Db;
use crate::error::{ThresholdPassed, usage};
use crate::ui::age_text;

/// `hare-outbox backlog`: prints pending, the oldest pending age and dead letters; fails with
/// [`ThresholdPassed`] (exit code 4) when a threshold of the options or `[backlog]` is passed.
///
/// # Errors
/// [`ThresholdPassed`]; a usage error for a bad topic; a runtime error when the database is
/// unreachable.
pub async fn backlog(settings: &Settings, args: &BacklogArgs) -> anyhow::Result<()> {
    let file = &settings.backlog;
    let thresholds = BacklogThresholds {
        max_pending: args.max_pending.or(file.max_pending),
        max_age: args.max_age.or(file.max_age),
        max_dead: args.max_dead.or(file.max_dead),
        topics: if args.topics.is_empty() {
            file.topics.clone()
        } else {
            args.topics.clone()
        },
        max_open_destinations: args.max_open_destinations.or(file.max_open_destinations),
        relay_url: match &args.relay {
            Some(url) => Some(relay_url(url).map_err(|e| usage(format!("--relay: {e}")))?),
            None => file.relay_url.clone(),
        },
    };
    check_topics("--topic", &thresholds.topics)?;
    if args.max_open_destinations.is_some() && thresholds.relay_url.is_none() {
        return Err(usage(
            "--max-open-destinations needs --relay URL (or [backlog] relay_url): the circuit breakers live in the relay process, which `backlog` asks through its --http address",
        ));
    }
    // The relay first: it answers at once or not at all, before the database is counted.
    let open = match &thresholds.relay_url {
        Some(url) => Some(open_destinations(url).await?),
        None => None,
    };
    let db = Db::connect(settings.database()?).await?;
    let backlog = with_backend!(db, backend => {
        Journal::new(backend, settings.table.clone())
            .backlog(&topic_refs(&thresholds.topics))
            .await
    })
    .with_context(|| format!("counting the backlog of {} failed", settings.table))?;
    let mut passed = passed(&thresholds, &backlog);
    if let (Some(max), Some(open)) = (thresholds.max_open_destinations, &open)
        && open.len() as u64 > max
    {
        passed.push(format!(
            "{} open destinations > max_open_destinations {max}",
            open.len()
        ));
    }
    if args.json {
        let mut json = serde_json::json!({
            "table": settings.table.to_string(),
            "pending": backlog.pending,
            "oldest_pending_age_seconds": backlog.oldest_pending_age_seconds,
            "dead_lettered": backlog.dead_lettered,
            "thresholds": {
                "max_pending": thresholds.max_pending,
                "max_age_seconds": thresholds.max_age.map(|d| d.as_secs_f64()),
                "max_dead": thresholds.max_dead,
                "max_open_destinations": thresholds.max_open_destinations,
            },
            "passed": passed,
        });
        if let Some(open) = &open {
            json["open_destinations"] = serde_json::Value::Array(open.clone());
        }
        println!("{json}");
    } else {
        println!(
            "{}: {} pending, oldest pending {}, {} dead letters",
            settings.table,
            backlog.pending,
            if backlog.pending > 0 {
                format!("{} old", age_text(backlog.oldest_pending_age_seconds))
            } else {
                "-".to_owned()
            },
            backlog.dead_lettered
        );
        if let Some(open) = &open {
            if open.is_empty() {
                println!("no destination of the relay is open");
            }
            for d in open {
                let text = |key: &str| d[key].as_str().unwrap_or("-").to_owned();
                println!(
                    "destination {} is {}: since {}, next probe {}, {} failures in a row; why: {}",
                    text("name"),
                    text("state").replace('_', "-"),
                    text("opened_at"),
                    text("next_probe_at"),
                    d["consecutive_failures"].as_u64().unwrap_or_default(),
                    text("reason")
                );
            }
        }
    }
    if passed.is_empty() {
        Ok(())
    } else {
        Err(anyhow::Error::new(ThresholdPassed(format!(
            "backlog past its thresholds: {}",
            passed.join("; ")
        ))))
    }
}

/// The thresholds `backlog` passes, one phrase each (`12 pending > max_pending 10`); empty when
/// the backlog is within every threshold.
fn passed(thresholds: &BacklogThresholds, backlog: &hare_outbox::Backlog) -> Vec<String> {
    let mut passed = Vec::new();
    let pending = u64::try_from(backlog.pending).unwrap_or_default();
    let dead = u64::try_from(backlog.dead_lettered).unwrap_or_default();
    if let Some(max) = thresholds.max_pending
        && pending > max
    {
        passed.push(format!("{pending} pending > max_pending {max}"));
    }
    if let Some(max) = thresholds.max_age
        && backlog.oldest_pending_age_seconds > max.as_secs_f64()
    {
        passed.push(format!(
            "oldest pending {} > max_age {}",
            age_text(backlog.oldest_pending_age_seconds),
            humantime::format_duration(max)
        ));
    }
    if let Some(max) = thresholds.max_dead
        && dead > max
    {
        passed.push(format!("{dead} dead letters > max_dead {max}"));
    }
    passed
}

/// The open destinations of the relay serving `base` (`GET <base>/api/destinations`), as the
/// dashboard writes them.
///
/// # Errors
/// A runtime error naming the URL when the relay does not answer, answers with an error, or
/// runs without destinations.
async fn open_destinations(base: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let url = format!("{base}/api/destinations");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .context("building the HTTP client failed")?;
    let answer = client
        .get(&url)
        .send()
        .await
        .with_context(|| format!("asking the relay at {url} for its destinations failed"))?;
    let status = answer.status();
    let body = answer
        .text()
        .await
        .with_context(|| format!("reading the destinations from {url} failed"))?;
    if !status.is_success() {
        anyhow::bail!("the relay at {url} answered {status}: {body}");
    }
    let list: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("the answer of {url} is not JSON"))?;
    Ok(list["destinations"]
        .as_array()
        .map(|all| {
            all.iter()
                .filter(|d| d["state"].as_str().is_some_and(|s| s != "closed"))
                .cloned()
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_name_what_is_passed() {
        let t = BacklogThresholds {
            max_pending: Some(10),
            max_age: Some(Duration::from_secs(60)),
            max_dead: Some(0),
            topics: Vec::new(),
            ..BacklogThresholds::default()
        };
        let ok = hare_outbox::Backlog {
            pending: 10,
            oldest_pending_age_seconds: 59.0,
            dead_lettered: 0,
        };
        assert!(passed(&t, &ok).is_empty());
        let bad = hare_outbox::Backlog {
            pending: 11,
            oldest_pending_age_seconds: 61.0,
            dead_lettered: 1,
        };
        let passed = passed(&t, &bad);
        assert_eq!(passed.len(), 3, "{passed:?}");
        assert!(passed[0].contains("11 pending") && passed[0].contains("max_pending 10"));
        assert!(passed[1].contains("1m 1s") && passed[1].contains("max_age 1m"));
        assert!(passed[2].contains("max_dead 0"));
    }
}
