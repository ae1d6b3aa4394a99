//! Latency histograms: HDR histograms of nanoseconds (1 ns .. 60 s, three
//! significant digits), one per task while a run is going, merged at the end.
//! Values above the ceiling are clamped to it (and counted), never dropped,
//! so a stall cannot fall out of the tail.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

/// The largest latency a histogram holds; larger values are clamped here.
pub const LATENCY_NANOS_MAX: u64 = 60_000_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;

/// The quantiles every report shows.
pub const QUANTILES: [(f64, &str); 5] = [
    (0.5, "p50"),
    (0.9, "p90"),
    (0.99, "p99"),
    (0.999, "p99.9"),
    (0.9999, "p99.99"),
];

#[derive(Clone, Debug)]
pub struct LatencyHistogram {
    histogram: Histogram<u64>,
    clamped_count: u64,
}

/// Percentiles of one histogram in microseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub count: u64,
    pub min_micros: f64,
    pub mean_micros: f64,
    pub p50_micros: f64,
    pub p90_micros: f64,
    pub p99_micros: f64,
    pub p999_micros: f64,
    pub p9999_micros: f64,
    pub max_micros: f64,
}

impl Percentiles {
    /// The values in report order: p50, p90, p99, p99.9, p99.99, max.
    pub fn columns(&self) -> [f64; 6] {
        [
            self.p50_micros,
            self.p90_micros,
            self.p99_micros,
            self.p999_micros,
            self.p9999_micros,
            self.max_micros,
        ]
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram::new()
    }
}

impl LatencyHistogram {
    pub fn new() -> LatencyHistogram {
        let histogram = Histogram::<u64>::new_with_bounds(1, LATENCY_NANOS_MAX, SIGNIFICANT_DIGITS)
            .expect("constant bounds are valid");
        LatencyHistogram {
            histogram,
            clamped_count: 0,
        }
    }

    pub fn record(&mut self, latency: Duration) {
        self.record_nanos(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX));
    }

    pub fn record_nanos(&mut self, nanos: u64) {
        let value = if nanos > LATENCY_NANOS_MAX {
            self.clamped_count += 1;
            LATENCY_NANOS_MAX
        } else {
            nanos.max(1)
        };
        self.histogram
            .record(value)
            .expect("value is within the histogram's bounds");
    }

    pub fn merge(&mut self, other: &LatencyHistogram) {
        self.histogram
            .add(&other.histogram)
            .expect("histograms share bounds");
        self.clamped_count += other.clamped_count;
    }

    pub fn count(&self) -> u64 {
        self.histogram.len()
    }

    pub fn clamped_count(&self) -> u64 {
        self.clamped_count
    }

    /// Latency at quantile `q` (0..=1), in nanoseconds; 0 when empty.
    pub fn value_at_quantile_nanos(&self, quantile: f64) -> u64 {
        assert!((0.0..=1.0).contains(&quantile), "quantile {quantile}");
        if self.histogram.is_empty() {
            return 0;
        }
        self.histogram.value_at_quantile(quantile)
    }

    pub fn percentiles(&self) -> Percentiles {
        if self.histogram.is_empty() {
            return Percentiles::default();
        }
        let micros = |nanos: u64| nanos as f64 / 1_000.0;
        let at = |quantile: f64| micros(self.histogram.value_at_quantile(quantile));
        Percentiles {
            count: self.histogram.len(),
            min_micros: micros(self.histogram.min()),
            mean_micros: self.histogram.mean() / 1_000.0,
            p50_micros: at(0.5),
            p90_micros: at(0.9),
            p99_micros: at(0.99),
            p999_micros: at(0.999),
            p9999_micros: at(0.9999),
            max_micros: micros(self.histogram.max()),
        }
    }

    /// The percentile spectrum for plots: `(quantile, latency µs)` at points
    /// spaced evenly on the `log10(1 / (1 - q))` axis, `steps_per_decade`
    /// per factor of ten, up to the last recorded value.
    pub fn spectrum(&self, steps_per_decade: u32) -> Vec<(f64, f64)> {
        assert!(steps_per_decade > 0);
        let mut points = Vec::new();
        if self.histogram.is_empty() {
            return points;
        }
        let count = self.histogram.len() as f64;
        // Beyond 1 - 1/count the histogram has nothing more to say.
        let decades_max = count.log10().max(0.5);
        let steps = (decades_max * f64::from(steps_per_decade)).ceil() as u32;
        for step in 0..=steps {
            let decades = (f64::from(step) / f64::from(steps_per_decade)).min(decades_max);
            let quantile = 1.0 - 10f64.powf(-decades);
            points.push((
                quantile,
                self.histogram.value_at_quantile(quantile) as f64 / 1e3,
            ));
        }
        points.push((1.0, self.histogram.max() as f64 / 1e3));
        points
    }

    pub fn inner(&self) -> &Histogram<u64> {
        &self.histogram
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three significant digits: a value is within 0.1 % of what it reports.
    fn close(actual_nanos: u64, expected_nanos: u64) -> bool {
        let tolerance = expected_nanos as f64 * 0.001 + 1.0;
        (actual_nanos as f64 - expected_nanos as f64).abs() <= tolerance
    }

    #[test]
    fn uniform_distribution() {
        let mut histogram = LatencyHistogram::new();
        // 1 µs .. 10 ms in 1 µs steps: quantile q sits at q × 10 ms.
        for micros in 1..=10_000u64 {
            histogram.record_nanos(micros * 1_000);
        }
        assert_eq!(histogram.count(), 10_000);
        for (quantile, _) in QUANTILES {
            let expected = (quantile * 10_000.0).ceil() as u64 * 1_000;
            let actual = histogram.value_at_quantile_nanos(quantile);
            assert!(
                close(actual, expected),
                "q {quantile}: {actual} vs {expected}"
            );
        }
        let percentiles = histogram.percentiles();
        assert!((percentiles.mean_micros - 5_000.5).abs() < 5.0);
        assert!(close((percentiles.max_micros * 1e3) as u64, 10_000_000));
        assert!(close((percentiles.min_micros * 1e3) as u64, 1_000));
    }

    #[test]
    fn constant_distribution() {
        let mut histogram = LatencyHistogram::new();
        for _ in 0..1_000 {
            histogram.record(Duration::from_micros(250));
        }
        let percentiles = histogram.percentiles();
        for value in percentiles.columns() {
            assert!(close((value * 1e3) as u64, 250_000), "{percentiles:?}");
        }
    }

    #[test]
    fn bimodal_distribution() {
        // 98 % at 100 µs, 2 % at 10 ms: p50 and p90 see the first mode, p99
        // and beyond the second.
        let mut histogram = LatencyHistogram::new();
        for index in 0..100_000u64 {
            let micros = if index % 50 == 0 { 10_000 } else { 100 };
            histogram.record_nanos(micros * 1_000);
        }
        let percentiles = histogram.percentiles();
        assert!(close((percentiles.p50_micros * 1e3) as u64, 100_000));
        assert!(close((percentiles.p90_micros * 1e3) as u64, 100_000));
        assert!(close((percentiles.p99_micros * 1e3) as u64, 10_000_000));
        assert!(close((percentiles.max_micros * 1e3) as u64, 10_000_000));
        // The boundary: 98 % of samples are fast.
        assert!(close(histogram.value_at_quantile_nanos(0.98), 100_000));
        assert!(close(histogram.value_at_quantile_nanos(0.981), 10_000_000));
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let mut first = LatencyHistogram::new();
        let mut second = LatencyHistogram::new();
        let mut all = LatencyHistogram::new();
        for value in 1..=5_000u64 {
            let nanos = value * 997;
            if value % 3 == 0 {
                first.record_nanos(nanos);
            } else {
                second.record_nanos(nanos);
            }
            all.record_nanos(nanos);
        }
        first.merge(&second);
        assert_eq!(first.percentiles(), all.percentiles());
    }

    #[test]
    fn values_beyond_the_ceiling_are_clamped_not_lost() {
        let mut histogram = LatencyHistogram::new();
        histogram.record(Duration::from_secs(3_600));
        histogram.record_nanos(0);
        assert_eq!(histogram.count(), 2);
        assert_eq!(histogram.clamped_count(), 1);
        assert!(close(
            histogram.value_at_quantile_nanos(1.0),
            LATENCY_NANOS_MAX
        ));
    }

    #[test]
    fn spectrum_is_monotonic_and_ends_at_max() {
        let mut histogram = LatencyHistogram::new();
        for micros in 1..=100_000u64 {
            histogram.record_nanos(micros * 100);
        }
        let points = histogram.spectrum(10);
        assert!(points.len() > 40);
        for pair in points.windows(2) {
            assert!(pair[0].0 <= pair[1].0 && pair[0].1 <= pair[1].1, "{pair:?}");
        }
        let last = points.last().unwrap();
        assert_eq!(last.0, 1.0);
        assert!((last.1 - histogram.percentiles().max_micros).abs() < 1e-9);
        assert!(LatencyHistogram::new().spectrum(10).is_empty());
    }
}
