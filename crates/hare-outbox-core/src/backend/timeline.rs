//! Timeline arithmetic for backends that bucket events and rank delivery latencies in Rust
//! after one read (SQLite, MySQL): the grid of [`TimelineParams`], the counts of a bucket, and
//! latency percentiles interpolated as PostgreSQL's `percentile_cont` does. Part of the unstable
//! backend seam (see [`crate::backend`]).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};

use crate::error::{Error, Result};
use crate::journal::{MAX_TIMELINE_BUCKETS, TimelineBucket, TimelineParams};

/// The buckets of a timeline in whole microseconds, the resolution timestamps are stored with:
/// bucket `k` spans `[since + k·width, since + (k+1)·width)`, the last one ends at `until`.
#[derive(Debug, Clone, Copy)]
pub struct TimelineGrid {
    /// The window's start, microseconds since the Unix epoch.
    pub since_us: i64,
    /// The window's end (exclusive), microseconds since the Unix epoch.
    pub until_us: i64,
    /// The width of every bucket but the last, in microseconds.
    pub width_us: i64,
    /// The number of buckets.
    pub buckets: i64,
}

impl TimelineGrid {
    /// The grid of `params`.
    ///
    /// # Errors
    /// [`Error::Validation`] when `buckets` is 0 or above [`MAX_TIMELINE_BUCKETS`], when `since`
    /// is not before `until`, or when the window is shorter than one microsecond per bucket.
    pub fn new(params: &TimelineParams) -> Result<TimelineGrid> {
        if params.buckets == 0 || params.buckets > MAX_TIMELINE_BUCKETS {
            return Err(Error::validation(
                "buckets",
                format!(
                    "{} timeline buckets are not allowed; use 1 to {MAX_TIMELINE_BUCKETS}",
                    params.buckets
                ),
            ));
        }
        if params.since >= params.until {
            return Err(Error::validation(
                "since",
                format!(
                    "timeline start {} is not before its end {}",
                    params.since, params.until
                ),
            ));
        }
        let since_us = params.since.timestamp_micros();
        let until_us = params.until.timestamp_micros();
        let buckets = i64::from(params.buckets);
        let width_us = (until_us - since_us) / buckets;
        if width_us == 0 {
            return Err(Error::validation(
                "buckets",
                format!(
                    "a timeline window of {} µs cannot hold {buckets} buckets; use at most one bucket per microsecond",
                    until_us - since_us
                ),
            ));
        }
        Ok(TimelineGrid {
            since_us,
            until_us,
            width_us,
            buckets,
        })
    }

    /// Start and end of bucket `k` in microseconds since the Unix epoch.
    pub fn bounds(&self, k: i64) -> (i64, i64) {
        let start = self.since_us + k * self.width_us;
        let end = if k + 1 == self.buckets {
            self.until_us
        } else {
            start + self.width_us
        };
        (start, end)
    }

    /// The buckets of the timeline: `counts[k]` and `ranks[k]` for bucket `k` (as many as the
    /// grid has), the backlog carried from `before` (the counts of everything before the
    /// window) and the latency percentiles p50, p95 and max in milliseconds.
    ///
    /// # Errors
    /// As [`TimelineGrid::time`], for a bucket bound no time can hold.
    pub fn assemble(
        &self,
        before: BucketCounts,
        counts: &[BucketCounts],
        ranks: &[LatencyRanks],
    ) -> Result<Vec<TimelineBucket>> {
        let mut backlog = before.created - before.finished;
        let mut out = Vec::with_capacity(counts.len());
        for (k, (c, r)) in counts.iter().zip(ranks).enumerate() {
            backlog += c.created - c.finished;
            let (start, end) = self.bounds(k as i64);
            out.push(TimelineBucket {
                start: Self::time(start)?,
                end: Self::time(end)?,
                created: c.created,
                published: c.published,
                dead_lettered: c.dead_lettered,
                backlog,
                latency_p50_ms: r.quantile_ms(0.5),
                latency_p95_ms: r.quantile_ms(0.95),
                latency_max_ms: r.quantile_ms(1.0),
            });
        }
        Ok(out)
    }

    /// `micros` since the Unix epoch as a time.
    ///
    /// # Errors
    /// [`Error::Validation`] on field `since` when no time has that many microseconds.
    pub fn time(micros: i64) -> Result<DateTime<Utc>> {
        DateTime::from_timestamp_micros(micros).ok_or_else(|| {
            Error::validation(
                "since",
                format!("{micros} µs since the Unix epoch is not a representable time"),
            )
        })
    }
}

/// The counts of one bucket: created, published, dead-lettered, and finished (left the backlog).
#[derive(Debug, Clone, Copy, Default)]
pub struct BucketCounts {
    /// Events created in the bucket.
    pub created: i64,
    /// Events published in the bucket.
    pub published: i64,
    /// Events dead-lettered in the bucket.
    pub dead_lettered: i64,
    /// Events that left the backlog in the bucket (published or dead-lettered).
    pub finished: i64,
}

/// Sorted latencies of one bucket, by rank: only the ranks the percentiles read.
#[derive(Debug, Default)]
pub struct LatencyRanks {
    /// How many latencies the bucket has.
    pub n: i64,
    /// Latency in microseconds by 0-based rank, for the ranks the percentiles read.
    pub by_rank: BTreeMap<i64, i64>,
}

impl LatencyRanks {
    /// The `q` quantile (0 to 1) in milliseconds, interpolated between the neighbouring ranks
    /// as PostgreSQL's `percentile_cont` does.
    pub fn quantile_ms(&self, q: f64) -> Option<f64> {
        if self.n == 0 {
            return None;
        }
        // The same double arithmetic as the statement's, so the ranks it returned are these.
        let position = (self.n - 1) as f64 * q;
        let low = position.floor();
        let low_rank = low as i64;
        let low_value = *self.by_rank.get(&low_rank)? as f64;
        let value = match self.by_rank.get(&(low_rank + 1)) {
            Some(high) if low_rank + 1 < self.n => {
                low_value + (*high as f64 - low_value) * (position - low)
            }
            _ => low_value,
        };
        Some(value / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_between_ranks() {
        let ranks = LatencyRanks {
            n: 4,
            by_rank: [(1, 2000), (2, 4000), (3, 10_000)].into_iter().collect(),
        };
        // Position 1.5 lies between 2 ms and 4 ms.
        assert_eq!(ranks.quantile_ms(0.5), Some(3.0));
        // Position 2.85 lies between 4 ms and 10 ms.
        let p95 = ranks.quantile_ms(0.95).expect("p95");
        assert!((p95 - 9.1).abs() < 1e-9, "{p95}");
        assert_eq!(ranks.quantile_ms(1.0), Some(10.0));
        assert_eq!(LatencyRanks::default().quantile_ms(0.5), None);
    }

    #[test]
    fn grid_refuses_empty_windows_and_too_many_buckets() {
        let at = |s| DateTime::from_timestamp(s, 0).expect("valid");
        let params = |since, until, buckets| {
            TimelineParams::last(std::time::Duration::from_secs(60), 1, at(100))
                .map(|mut p| {
                    p.since = since;
                    p.until = until;
                    p.buckets = buckets;
                    p
                })
                .expect("valid")
        };
        assert!(matches!(
            TimelineGrid::new(&params(at(10), at(10), 1)),
            Err(Error::Validation { .. })
        ));
        assert!(matches!(
            TimelineGrid::new(&params(at(0), at(10), 0)),
            Err(Error::Validation { .. })
        ));
        let grid = TimelineGrid::new(&params(at(0), at(10), 3)).expect("valid");
        assert_eq!(grid.bounds(0), (0, 3_333_333));
        assert_eq!(grid.bounds(2), (6_666_666, 10_000_000));
    }
}
