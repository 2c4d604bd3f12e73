//! Axis arithmetic: nice steps, the linear and logarithmic value axes,
//! the shared time axis, tick labels, and [`Axis`], the plotters coordinate
//! that uses the ticks chosen here.

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint};
use plotters::prelude::Ranged;

use super::{count, num};

/// A tick label for a linear axis: as many decimals as the step needs
/// (0.25 → 2, 0.5 → 1, 5 → 0).
pub(super) fn tick(v: f64, step: f64) -> String {
    let decimals = (0..6)
        .find(|d| {
            let scaled = step * 10f64.powi(*d);
            (scaled - scaled.round()).abs() < 1e-6 * scaled.max(1.0)
        })
        .unwrap_or(6) as usize;
    num(v, decimals)
}

/// A latency in milliseconds as a tick label: `0.5 ms`, `20 ms`, `1.5 s`.
pub(super) fn ms_label(v: f64) -> String {
    if v >= 1000.0 {
        format!("{} s", num(v / 1000.0, 2))
    } else {
        format!("{} ms", num(v, 3))
    }
}

/// Returns a "nice" step (1, 2, 2.5 or 5 times a power of ten) that cuts
/// `span` into at most `max_ticks` pieces.
fn nice_step(span: f64, max_ticks: usize) -> f64 {
    let raw = span / max_ticks.max(1) as f64;
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .into_iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw * 0.999_999)
        .unwrap_or(10.0 * mag)
}

/// A linear axis from 0 that holds `max` with a little headroom: its top
/// and its ticks.
pub(super) fn linear_axis(max: f64) -> (f64, f64, Vec<f64>) {
    let max = if max.is_finite() && max > 0.0 {
        max
    } else {
        1.0
    };
    let step = nice_step(max * 1.05, 6);
    let hi = ((max * 1.05) / step).ceil() * step;
    let n = (hi / step).round() as usize;
    (hi, step, (0..=n).map(|i| i as f64 * step).collect())
}

/// A logarithmic latency axis (milliseconds) that holds `lo..hi`: whole
/// decades, with 2 and 5 between them when there are few decades.
pub(super) fn log_axis(lo: f64, hi: f64) -> (f64, f64, Vec<f64>) {
    let lo = if lo.is_finite() && lo > 0.0 { lo } else { 1.0 };
    let hi = if hi.is_finite() && hi > lo {
        hi
    } else {
        lo * 10.0
    };
    let lo = 10f64.powf(lo.log10().floor()).max(0.001);
    let hi = 10f64.powf(hi.log10().ceil()).max(lo * 10.0);
    let decades = (hi / lo).log10().round() as i32;
    let mut ticks = Vec::new();
    let mut d = lo;
    while d <= hi * 1.000_001 {
        ticks.push(d);
        if decades <= 3 {
            for m in [2.0, 5.0] {
                if d * m < hi {
                    ticks.push(d * m);
                }
            }
        }
        d *= 10.0;
    }
    (lo, hi, ticks)
}

/// The shared time axis: its length, ticks and labels.
pub(super) struct TimeAxis {
    pub(super) span: f64,
    pub(super) step: f64,
    pub(super) ticks: Vec<f64>,
    minutes: bool,
}

impl TimeAxis {
    pub(super) fn new(span: f64) -> TimeAxis {
        // At most about eleven days (a wild timestamp in a record must not
        // ask for millions of ticks); the timeline itself stops sooner.
        let span = if span.is_finite() && span >= 1.0 {
            span.min(1e6)
        } else {
            1.0
        };
        let minutes = span > 300.0;
        let steps = [
            0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0,
            1200.0, 1800.0, 3600.0, 7200.0, 10800.0, 21600.0, 43200.0, 86400.0,
        ];
        let step = steps
            .into_iter()
            .find(|s| span / s <= 12.0)
            .unwrap_or(86400.0);
        let n = (span / step).floor() as usize;
        let ticks = (0..=n).map(|i| i as f64 * step).collect();
        TimeAxis {
            span,
            step,
            ticks,
            minutes,
        }
    }

    pub(super) fn label(&self, v: f64) -> String {
        if !self.minutes {
            return tick(v, self.step);
        }
        let total = v.round() as u64;
        if self.step >= 60.0 {
            count(total / 60)
        } else {
            format!("{}:{:02}", total / 60, total % 60)
        }
    }

    /// An instant for a sentence: `2.3 s`, or `3:10` (min:s) on a long run.
    pub(super) fn instant(&self, t: f64) -> String {
        if self.minutes {
            let total = t.max(0.0).round() as u64;
            format!("{}:{:02}", total / 60, total % 60)
        } else {
            format!("{} s", num(t, 1))
        }
    }

    /// The axis's caption: the time charts' rows are scenario seconds
    /// (the rehearsal's ÷ the time scale), and so is the axis.
    pub(super) fn desc(&self) -> &'static str {
        match (self.minutes, self.step >= 60.0) {
            (false, _) => "scenario time since start (s)",
            (true, true) => "scenario time since start (min)",
            (true, false) => "scenario time since start (min:s)",
        }
    }
}

/// A numeric axis with the ticks chosen here (plotters' own choice for f64
/// ranges knows nothing of minutes or decades): linear or logarithmic.
#[derive(Debug, Clone)]
pub(super) struct Axis {
    pub(super) lo: f64,
    pub(super) hi: f64,
    log: bool,
    pub(super) ticks: Vec<f64>,
}

impl Axis {
    pub(super) fn linear(lo: f64, hi: f64, ticks: Vec<f64>) -> Axis {
        Axis {
            lo,
            hi,
            log: false,
            ticks,
        }
    }

    pub(super) fn log(lo: f64, hi: f64, ticks: Vec<f64>) -> Axis {
        Axis {
            lo,
            hi,
            log: true,
            ticks,
        }
    }
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let (a, b, v) = if self.log {
            let floor = self.lo / 1e3;
            (self.lo.ln(), self.hi.ln(), value.max(floor).ln())
        } else {
            (self.lo, self.hi, *value)
        };
        let f = if b > a { (v - a) / (b - a) } else { 0.0 };
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_tick_sensibly() {
        assert_eq!(TimeAxis::new(10.0).step, 1.0);
        assert!(TimeAxis::new(1e15).ticks.len() <= 13);
        assert_eq!(TimeAxis::new(f64::NAN).span, 1.0);
        let short = TimeAxis::new(2.0);
        assert_eq!((short.step, short.label(1.6).as_str()), (0.2, "1.6"));
        assert_eq!(TimeAxis::new(66.0).step, 10.0);
        assert_eq!(TimeAxis::new(180.0).step, 15.0);
        let a = TimeAxis::new(400.0);
        assert_eq!((a.step, a.label(90.0).as_str()), (60.0, "1"));
        let (hi, step, ticks) = linear_axis(245.0);
        assert_eq!((hi, step), (300.0, 50.0));
        assert_eq!(ticks.len(), 7);
        assert!(linear_axis(0.0).0 >= 1.0);
        let (lo, hi, ticks) = log_axis(3.0, 1900.0);
        assert_eq!((lo, hi), (1.0, 10_000.0));
        assert_eq!(ticks, [1.0, 10.0, 100.0, 1000.0, 10_000.0]);
        let (lo, hi, ticks) = log_axis(30.0, 1900.0);
        assert_eq!((lo, hi), (10.0, 10_000.0));
        assert!(ticks.contains(&200.0));
        assert_eq!(tick(0.75, 0.25), "0.75");
        assert_eq!(tick(1.0, 0.25), "1");
        assert_eq!(tick(1.5, 0.5), "1.5");
        assert_eq!(tick(2500.0, 500.0), "2,500");
        assert_eq!(ms_label(1500.0), "1.5 s");
        assert_eq!(ms_label(0.5), "0.5 ms");
    }
}
