//! The `[checklist]` table's values held to their ranges, so that a share
//! of 7 or a negative ratio is refused where it is written (file, line,
//! field) instead of making a check that can never fail, or never pass.
//!
//! The rule goes by each field's name, so a check added to
//! `assertions::Thresholds` is covered without a line here: a name ending
//! in `share` or named `quantile` is a share, 0 to 1 (a quantile above 0);
//! `tolerance` is at least 0; a name starting `max_ratio` is a ratio of at
//! least 1 (fewer calls than attempts is no bound on retries); one ending
//! in `_ms` is a positive number of milliseconds; every number is finite.
//! Durations and counts are checked by their types when they are read.

/// The first field of `t` out of its range: its dotted path below
/// `checklist` (`goodput.min_share`) and why.
pub(crate) fn out_of_range(t: &assertions::Thresholds) -> Result<(), (String, String)> {
    // TOML, not JSON: a `nan` or `inf` written in the scenario survives.
    let Ok(toml::Value::Table(tables)) = toml::Value::try_from(t) else {
        return Ok(());
    };
    for (check, table) in &tables {
        let Some(fields) = table.as_table() else {
            continue;
        };
        for (name, value) in fields {
            let x = match value {
                toml::Value::Float(x) => *x,
                toml::Value::Integer(n) => *n as f64,
                _ => continue,
            };
            if let Some(why) = why_out_of_range(name, x) {
                return Err((format!("{check}.{name}"), why));
            }
        }
    }
    Ok(())
}

/// Why `x` cannot be the value of a field named `name`, if it cannot.
fn why_out_of_range(name: &str, x: f64) -> Option<String> {
    if !x.is_finite() {
        return Some("must be a finite number".into());
    }
    let bad = if name == "quantile" {
        !(x > 0.0 && x <= 1.0)
    } else if name.ends_with("share") {
        !(0.0..=1.0).contains(&x)
    } else if name.starts_with("max_ratio") {
        x < 1.0
    } else if name.ends_with("_ms") {
        x <= 0.0
    } else {
        x < 0.0
    };
    bad.then(|| {
        let range = if name == "quantile" {
            "a share above 0 and at most 1 (0.99 is 99%)"
        } else if name.ends_with("share") {
            "a share from 0 to 1 (0.9 is 90%)"
        } else if name.starts_with("max_ratio") {
            "a ratio of at least 1"
        } else if name.ends_with("_ms") {
            "a positive number of milliseconds"
        } else {
            "at least 0"
        };
        format!("{x} is out of range: expected {range}")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_in_range() {
        assert_eq!(out_of_range(&assertions::Thresholds::default()), Ok(()));
    }

    #[test]
    fn shares_ratios_tolerances_and_latencies_are_held_to_their_ranges() {
        let mut t = assertions::Thresholds::default();
        t.goodput.min_share = 7.0;
        let (field, why) = out_of_range(&t).unwrap_err();
        assert_eq!(field, "goodput.min_share");
        assert!(why.contains("a share from 0 to 1"), "{why}");

        let mut t = assertions::Thresholds::default();
        t.retry_amplification.max_ratio = -1.0;
        assert_eq!(
            out_of_range(&t).unwrap_err().0,
            "retry_amplification.max_ratio"
        );

        let mut t = assertions::Thresholds::default();
        t.shed_onset.tolerance = -0.5;
        assert_eq!(out_of_range(&t).unwrap_err().0, "shed_onset.tolerance");

        let mut t = assertions::Thresholds::default();
        t.served_latency.p99_ms = 0.0;
        assert_eq!(out_of_range(&t).unwrap_err().0, "served_latency.p99_ms");

        let mut t = assertions::Thresholds::default();
        t.concurrency_below_knee.quantile = 0.0;
        assert_eq!(
            out_of_range(&t).unwrap_err().0,
            "concurrency_below_knee.quantile"
        );

        let mut t = assertions::Thresholds::default();
        t.stream_intact.added_ms = f64::NAN;
        assert!(out_of_range(&t).unwrap_err().1.contains("finite"));
    }
}
