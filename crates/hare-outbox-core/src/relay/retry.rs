//! The retry schedule: a pure function, since the schedule is stored in `next_attempt_at`.

use std::time::Duration;

/// Delay before the next attempt after `attempts` failures (1 = the first failure):
/// `min(base · 2^(attempts−1), max)`, then scaled by `1 + jitter` where `jitter` ∈ [−0.1, 0.1].
pub fn retry_delay(attempts: i32, base: Duration, max: Duration, jitter: f64) -> Duration {
    let exponent = attempts.saturating_sub(1).clamp(0, 62);
    let raw = base.as_secs_f64() * 2f64.powi(exponent);
    let capped = raw.min(max.as_secs_f64());
    let jitter = jitter.clamp(-0.1, 0.1);
    Duration::from_secs_f64((capped * (1.0 + jitter)).max(0.0))
}

/// A jitter drawn uniformly from [−0.1, 0.1].
pub fn random_jitter() -> f64 {
    (fastrand::f64() * 2.0 - 1.0) * 0.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_and_caps() {
        let base = Duration::from_secs(1);
        let max = Duration::from_secs(300);
        let delays: Vec<f64> = (1..=10)
            .map(|a| retry_delay(a, base, max, 0.0).as_secs_f64())
            .collect();
        assert_eq!(
            delays,
            vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0]
        );
        assert_eq!(retry_delay(1000, base, max, 0.0), max);
    }

    #[test]
    fn jitter_stays_within_ten_percent() {
        let base = Duration::from_secs(10);
        let max = Duration::from_secs(300);
        for _ in 0..1000 {
            let d = retry_delay(1, base, max, random_jitter()).as_secs_f64();
            assert!((9.0..=11.0).contains(&d), "{d}");
        }
        assert_eq!(retry_delay(1, base, max, 5.0).as_secs_f64(), 11.0);
    }
}
