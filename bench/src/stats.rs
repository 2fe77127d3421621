//! Order statistics of a set of samples, and how to print durations.

/// p50, p99 and the extremes of a set of samples (in seconds, or any unit).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// How many samples.
    pub n: usize,
    /// Smallest.
    pub min: f64,
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank: the maximum below 100 samples).
    pub p99: f64,
    /// Largest.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

/// The nearest-rank `p` quantile (0 < p ≤ 1) of sorted samples.
fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Summary {
    /// Summarises `samples`; `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        let mut sorted = samples.to_vec();
        sorted.sort_by(f64::total_cmp);
        Some(Self {
            n: sorted.len(),
            min: sorted[0],
            p50: nearest_rank(&sorted, 0.50),
            p99: nearest_rank(&sorted, 0.99),
            max: sorted[sorted.len() - 1],
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
        })
    }

    /// "p50 1.23 ms, p99 2.34 ms (n=100)" for samples in seconds.
    pub fn describe(&self) -> String {
        format!(
            "p50 {}, p99 {} (n={})",
            dur(self.p50),
            dur(self.p99),
            self.n
        )
    }
}

/// A duration in seconds as "812 ns", "19.3 µs", "2.41 ms" or "1.20 s".
pub fn dur(secs: f64) -> String {
    let a = secs.abs();
    if a < 1e-6 {
        format!("{:.0} ns", secs * 1e9)
    } else if a < 1e-3 {
        format!("{:.1} µs", secs * 1e6)
    } else if a < 1.0 {
        format!("{:.2} ms", secs * 1e3)
    } else {
        format!("{secs:.2} s")
    }
}

/// A byte count as MiB with two decimals.
pub fn mib(bytes: f64) -> String {
    format!("{:.2} MiB", bytes / (1024.0 * 1024.0))
}

/// A rate as "1.23 M/s" or "456 k/s".
pub fn rate(per_sec: f64) -> String {
    if per_sec >= 1e6 {
        format!("{:.2} M frames/s", per_sec / 1e6)
    } else {
        format!("{:.0} k frames/s", per_sec / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        let sum = Summary::of(&s).expect("samples");
        assert_eq!(sum.p50, 50.0);
        assert_eq!(sum.p99, 99.0);
        assert_eq!(sum.max, 100.0);
        let few = Summary::of(&[3.0, 1.0, 2.0]).expect("samples");
        assert_eq!(few.p50, 2.0);
        assert_eq!(few.p99, 3.0);
        assert!(Summary::of(&[]).is_none());
    }
}
