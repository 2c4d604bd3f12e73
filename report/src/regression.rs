//! A comparison's figures against its baseline: each check's figure
//! (`report.json`'s `figure`: a number, its unit and the direction that
//! counts as worse) per run, its change from the first run's, and whether
//! that change is worse beyond the check's [`Tolerance`] (what
//! `--fail-on-regression` exits 1 on, though every check passes).

use std::collections::BTreeMap;

use assertions::{Check, Worse};
use wire::number::num;

use crate::documents::{ComparedFigure, Comparison, Tolerance};

/// The default tolerances, by check id (README, "Gating a CI job on a
/// baseline"): [`Check::tolerance`] of each check that has one.
fn defaults() -> BTreeMap<String, Tolerance> {
    Check::ALL
        .into_iter()
        .filter_map(|c| Some((c.id().to_string(), c.tolerance()?)))
        .collect()
}

/// The tolerances in force: the defaults, each `ID=SHARE` or
/// `ID=SHARE:AT_LEAST` of `overrides` replacing its check's (a share as
/// `0.5` or `50%`). A bad one is named in the error.
///
/// ```
/// let t = report::tolerances(&["drain=10%".into(), "goodput=0.2:1".into()]).unwrap();
/// assert_eq!((t["drain"].share, t["drain"].at_least), (0.1, 2.0));
/// assert_eq!((t["goodput"].share, t["goodput"].at_least), (0.2, 1.0));
/// assert!(report::tolerances(&["nothing=1".into()]).is_err());
/// ```
pub fn tolerances(overrides: &[String]) -> Result<BTreeMap<String, Tolerance>, String> {
    let mut out = defaults();
    for o in overrides {
        let bad = |why: &str| format!("{o}: {why}");
        let (id, value) = o
            .split_once('=')
            .ok_or_else(|| bad("expected ID=SHARE or ID=SHARE:AT_LEAST"))?;
        let id = id.trim();
        let Some(t) = out.get_mut(id) else {
            let ids: Vec<String> = defaults().into_keys().collect();
            return Err(bad(&format!(
                "no check with a tolerance is named \"{id}\" (those: {})",
                ids.join(", ")
            )));
        };
        let (share, at_least) = match value.split_once(':') {
            Some((s, a)) => (s, Some(a)),
            None => (value, None),
        };
        t.share =
            parse_share(share).ok_or_else(|| bad("the share is a number, like 0.25 or 25%"))?;
        if let Some(a) = at_least {
            t.at_least = a
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| bad("AT_LEAST is a number of the figure's unit, 0 or more"))?;
        }
    }
    Ok(out)
}

/// `0.25` or `25%`, not negative.
fn parse_share(s: &str) -> Option<f64> {
    let s = s.trim();
    let x = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().ok()? / 100.0,
        None => s.parse::<f64>().ok()?,
    };
    (x.is_finite() && x >= 0.0).then_some(x)
}

/// Each check's figure in a run's `report.json`, by id (a report written
/// before figures were has none).
///
/// ```
/// let report = serde_json::json!({ "checks": [
///     { "id": "drain", "status": "pass",
///       "figure": { "value": 4.5, "unit": "s", "measures": "drain time", "worse": "higher" } },
///     { "id": "goodput", "status": "skipped" }
/// ]});
/// let f = report::figures_of_report(&report);
/// assert_eq!(f["drain"].value, 4.5);
/// assert!(!f.contains_key("goodput"));
/// ```
pub fn figures_of_report(report: &serde_json::Value) -> BTreeMap<String, ComparedFigure> {
    report
        .get("checks")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let id = c.get("id")?.as_str()?.to_string();
            let f = c.get("figure")?;
            let figure = ComparedFigure {
                value: f.get("value")?.as_f64()?,
                unit: f.get("unit")?.as_str()?.to_string(),
                measures: f.get("measures")?.as_str()?.to_string(),
                worse: serde_json::from_value(f.get("worse")?.clone()).ok()?,
                change: None,
                regressed: false,
            };
            Some((id, figure))
        })
        .collect()
}

/// Sets each run's figures against the first run's (the baseline): their
/// change and whether it regressed beyond `tolerances`; the time-based
/// floors are divided by `time_scale`, the baseline's. Returns a
/// sentence per regression, in run then [`Check::ALL`] order.
pub fn mark_regressions(
    c: &mut Comparison,
    tolerances: &BTreeMap<String, Tolerance>,
    time_scale: f64,
) -> Vec<String> {
    let Some((baseline, rest)) = c.variants.split_first_mut() else {
        return Vec::new();
    };
    let mut said = Vec::new();
    for run in rest {
        for id in Check::ALL.map(Check::id) {
            let (Some(then), Some(now)) = (baseline.figures.get(id), run.figures.get_mut(id))
            else {
                continue;
            };
            let change = now.value - then.value;
            now.change = Some(change);
            let Some(t) = tolerances.get(id) else {
                continue;
            };
            let worse_by = match now.worse {
                Worse::Higher => change,
                Worse::Lower => -change,
            };
            let floor = match now.unit.as_str() {
                "s" | "ms" if time_scale > 0.0 => t.at_least / time_scale,
                _ => t.at_least,
            };
            let allowed = (t.share * then.value.abs()).max(floor);
            // Written so that a NaN figure does not pass unnoticed.
            let within = worse_by <= allowed;
            now.regressed = !within;
            if now.regressed {
                said.push(format!(
                    "{}: {id}'s {} went from {} to {}, worse by more than its tolerance ({} of the baseline's, at least {})",
                    run.name,
                    now.measures,
                    value_text(then.value, &then.unit),
                    value_text(now.value, &now.unit),
                    value_text(t.share, "share"),
                    value_text(floor, &now.unit),
                ));
            }
        }
    }
    said
}

/// A figure's value as a person reads it, in its unit.
pub fn value_text(v: f64, unit: &str) -> String {
    match unit {
        "s" => format!("{} s", num(v, if v.abs() < 10.0 { 3 } else { 1 })),
        "ms" => format!("{} ms", num(v, 1)),
        "bytes" => format!("{} MiB", num(v / (1024.0 * 1024.0), 1)),
        "share" => format!("{}%", num(v * 100.0, 1)),
        "per_s" => format!("{}/s", num(v, 1)),
        noun => format!("{} {noun}", num(v, 1)),
    }
}

/// A change as a person reads it: signed, in its unit, with `worse` or
/// `better` when it moved at all.
pub fn change_text(f: &ComparedFigure) -> String {
    let Some(change) = f.change else {
        return String::new();
    };
    let sign = if change > 0.0 {
        "+"
    } else if change < 0.0 {
        "−"
    } else {
        "±"
    };
    let worse = match f.worse {
        Worse::Higher => change > 0.0,
        Worse::Lower => change < 0.0,
    };
    let way = if change == 0.0 {
        ""
    } else if f.regressed {
        ", worse beyond tolerance"
    } else if worse {
        ", worse"
    } else {
        ", better"
    };
    format!("{sign}{}{way}", value_text(change.abs(), &f.unit))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::documents::ComparedRun;

    fn run(name: &str, figures: &[(&str, f64, &str, Worse)]) -> ComparedRun {
        ComparedRun {
            figures: figures
                .iter()
                .map(|&(id, value, unit, worse)| {
                    let f = ComparedFigure {
                        value,
                        unit: unit.into(),
                        measures: "figure".into(),
                        worse,
                        change: None,
                        regressed: false,
                    };
                    (id.to_string(), f)
                })
                .collect(),
            ..ComparedRun::named(name)
        }
    }

    #[test]
    fn a_figure_regresses_only_beyond_both_parts_of_its_tolerance() {
        let t = tolerances(&[]).unwrap();
        let baseline = run(
            "main",
            &[
                ("drain", 5.0, "s", Worse::Higher),
                ("retry_after", 0.4, "s", Worse::Higher),
                ("goodput", 10.0, "per_s", Worse::Lower),
                ("served_latency", 400.0, "ms", Worse::Higher),
                ("harness_valid", 1.0, "ms", Worse::Higher),
            ],
        );
        let worse = run(
            "change",
            &[
                ("drain", 50.0, "s", Worse::Higher),
                ("retry_after", 3.0, "s", Worse::Higher),
                ("goodput", 8.0, "per_s", Worse::Lower),
                // +100 ms of 400: within 25%.
                ("served_latency", 500.0, "ms", Worse::Higher),
                ("harness_valid", 90.0, "ms", Worse::Higher),
            ],
        );
        let mut c = Comparison {
            variants: vec![baseline, worse],
            ..Comparison::default()
        };
        let said = mark_regressions(&mut c, &t, 1.0);
        let now = &c.variants[1].figures;
        assert!(now["drain"].regressed && now["retry_after"].regressed && now["goodput"].regressed);
        assert!(!now["served_latency"].regressed && !now["harness_valid"].regressed);
        assert_eq!(now["drain"].change, Some(45.0));
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(
            said[0].contains("change: retry_after") || said[0].contains("change: drain"),
            "{said:?}"
        );
        assert_eq!(change_text(&now["goodput"]), "−2/s, worse beyond tolerance");
        assert_eq!(change_text(&now["served_latency"]), "+100 ms, worse");
        assert!(c.variants[0].figures["drain"].change.is_none());
        // A goodput that grew, a drain that shrank: better, never regressed.
        let mut c = Comparison {
            variants: vec![c.variants[1].clone(), c.variants[0].clone()],
            ..Comparison::default()
        };
        assert!(mark_regressions(&mut c, &t, 1.0).is_empty());
        assert_eq!(
            change_text(&c.variants[1].figures["drain"]),
            "−45 s, better"
        );
        // At time scale 10 the drain's floor is 0.2 s: 0.1 s to 0.35 s regresses.
        let mut c = Comparison {
            variants: vec![
                run("a", &[("drain", 0.1, "s", Worse::Higher)]),
                run("b", &[("drain", 0.35, "s", Worse::Higher)]),
            ],
            ..Comparison::default()
        };
        assert_eq!(mark_regressions(&mut c, &t, 10.0).len(), 1);
        assert_eq!(mark_regressions(&mut c, &t, 1.0).len(), 0);
    }

    #[test]
    fn bad_tolerances_are_named() {
        for (arg, says) in [
            ("drain", "ID=SHARE"),
            ("drain=much", "the share is a number"),
            ("drain=0.5:-1", "AT_LEAST"),
            ("harness_valid=1", "no check with a tolerance"),
        ] {
            let e = tolerances(&[arg.into()]).unwrap_err();
            assert!(e.contains(says) && e.contains(arg), "{arg}: {e}");
        }
    }
}
