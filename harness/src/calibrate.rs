//! `rehearse calibrate`: where a target's latency curve bends.
//!
//! The target (a fake provider, a gateway in front of a provider, or a
//! provider itself) is driven closed-loop ([`loadgen::closed_level`]) at
//! rising concurrency: 1, 2, 3, … each level a quarter above the last
//! (rounded up), for a step each, until the throughput stops growing, a
//! level fails too often, or the limits are reached.
//!
//! # The knee
//!
//! In a closed loop below the knee every added call adds throughput
//! (X = n / R, R the latency at rest); past it throughput stays on its
//! plateau X_max and latency grows instead (R = n / X_max). The two lines
//! cross at N* = X_max · R_min, the knee: R_min is the lowest median latency
//! measured (the flat part), X_max the highest throughput. The plateau is
//! reached when two levels in a row add less than 10% throughput; then the
//! knee is measured again with a level at ⌈N*⌉ and one 15% above, and the
//! estimate is made from every level. Without a plateau (the limits came
//! first, or the target failed) no knee is claimed.
//!
//! # What it suggests
//!
//! A concurrency limit below the knee (80% of it, at least 1); the drain
//! rate at that limit (limit ÷ R_min) and the queue bound it implies for a
//! wait budget (drain × budget), healthy and with every call
//! `degraded_factor` times slower (a brownout).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use loadgen::{CallEnd, ClosedLevel, ClosedTally, SweepRequests};
use report::{Calibration, CalibrationLevel};
use tokio_util::sync::CancellationToken;

use crate::error::RunError;
use crate::host::Input;
use crate::http::tls::Trusting as _;

/// Growth below this from one level to the next counts toward the plateau.
const PLATEAU_GROWTH: f64 = 0.10;
/// The recommended limit's share of the knee.
const LIMIT_SHARE: f64 = 0.8;

/// What `rehearse calibrate` is asked.
#[derive(Debug, Clone)]
pub struct CalibrateOptions {
    /// The base URL to drive.
    pub target: String,
    /// A target outside loopback is allowed.
    pub allow_remote: bool,
    /// The scenario text whose `[load.request]` shapes the requests (its
    /// origin for errors); none: 100 prompt tokens, 16 max_tokens, OpenAI.
    pub scenario: Option<(String, String)>,
    /// The sweep's limits.
    pub limits: SweepLimits,
    /// TLS for an `https://` target.
    pub tls: loadgen::TlsOptions,
    /// Where calibrate.json, calibrate.html and the charts go.
    pub out: PathBuf,
}

/// How far a sweep may go, and what its suggestions are for. With the
/// `clap` feature these are `rehearse calibrate`'s flags themselves.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "clap", derive(clap::Args))]
pub struct SweepLimits {
    /// The most calls at once of any level.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 64, value_name = "N"))]
    pub max_concurrency: u64,
    /// The most levels.
    #[cfg_attr(feature = "clap", arg(long, default_value_t = 16, value_name = "N"))]
    pub max_levels: usize,
    /// Each level's length (its first fifth is a warm-up).
    #[cfg_attr(feature = "clap", arg(long = "step-duration", default_value = "1s", value_parser = parse_duration))]
    pub step: Duration,
    /// A call's timeout.
    #[cfg_attr(feature = "clap", arg(long, default_value = "30s", value_parser = parse_duration))]
    pub request_timeout: Duration,
    /// Stop when more than this share of a level's calls fail.
    #[cfg_attr(
        feature = "clap",
        arg(long, default_value_t = 0.05, value_name = "SHARE")
    )]
    pub error_threshold: f64,
    /// The wait budget the suggested queue bounds are for.
    #[cfg_attr(feature = "clap", arg(long, default_value = "2s", value_parser = parse_duration))]
    pub wait_budget: Duration,
    /// The slowdown of the degraded queue bound (a brownout's 7x).
    #[cfg_attr(
        feature = "clap",
        arg(
            long = "degraded-latency",
            default_value_t = 7.0,
            value_name = "FACTOR"
        )
    )]
    pub degraded_factor: f64,
    /// Stop the sweep before the tokens of the calls sent (prompt at 4
    /// characters a token plus max_tokens) would pass N: a budget on a
    /// real account.
    #[cfg_attr(feature = "clap", arg(long, value_name = "N"))]
    pub max_spend_tokens: Option<u64>,
}

impl Default for SweepLimits {
    fn default() -> Self {
        SweepLimits {
            max_concurrency: 64,
            max_levels: 16,
            step: Duration::from_secs(1),
            request_timeout: Duration::from_secs(30),
            error_threshold: 0.05,
            wait_budget: Duration::from_secs(2),
            degraded_factor: 7.0,
            max_spend_tokens: None,
        }
    }
}

#[cfg(feature = "clap")]
fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| e.to_string())
}

/// How a sweep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SweepEnd {
    /// A knee was found (exit 0).
    Knee,
    /// None within the limits (exit 1).
    NoKnee,
    /// The target failed: nothing answered (exit 3).
    TargetFailed,
}

/// The concurrency levels a sweep may run: 1, then each a quarter above
/// the last (rounded up, at least one more), up to `max`, at most `n`.
///
/// ```
/// assert_eq!(harness::sweep_levels(64, 16), [1, 2, 3, 4, 5, 7, 9, 12, 15, 19, 24, 30, 38, 48, 60, 64]);
/// assert_eq!(harness::sweep_levels(10, 16), [1, 2, 3, 4, 5, 7, 9, 10]);
/// ```
pub fn sweep_levels(max: u64, n: usize) -> Vec<u64> {
    let mut out = Vec::new();
    let mut level = 1u64;
    while out.len() < n && level <= max.max(1) {
        out.push(level);
        if level == max {
            break;
        }
        level = ((level as f64 * 1.25).ceil() as u64)
            .max(level + 1)
            .min(max);
    }
    out
}

/// The knee from measured levels: N* = X_max · R_min (see the module docs),
/// with R_min and X_max; `None` without an answer.
///
/// ```
/// use report::CalibrationLevel;
/// let level = |n: u64, x: f64, p50: f64| CalibrationLevel {
///     concurrency: n, throughput_per_s: x, p50_ms: Some(p50), ..Default::default()
/// };
/// // 50 ms calls, a plateau of 640/s: the knee is at 32 calls.
/// let levels = [level(8, 160.0, 50.0), level(30, 600.0, 50.0), level(48, 640.0, 75.0)];
/// let (knee, r_min, x_max) = harness::knee_of(&levels).unwrap();
/// assert!((knee - 32.0).abs() < 1e-9 && r_min == 50.0 && x_max == 640.0);
/// ```
pub fn knee_of(levels: &[CalibrationLevel]) -> Option<(f64, f64, f64)> {
    let r_min = levels
        .iter()
        .filter_map(|l| l.p50_ms)
        .fold(f64::INFINITY, f64::min);
    let x_max = levels
        .iter()
        .map(|l| l.throughput_per_s)
        .fold(0.0, f64::max);
    (r_min.is_finite() && x_max > 0.0).then(|| (x_max * r_min / 1000.0, r_min, x_max))
}

/// Sweeps the target, writes calibrate.json, calibrate.html and the chart
/// PNGs into `opts.out`, and says how it ended.
pub async fn calibrate(
    opts: &CalibrateOptions,
    cancel: CancellationToken,
) -> Result<(Calibration, SweepEnd), RunError> {
    let requests = Arc::new(SweepRequests::new(request_plan(opts)?));
    requests.headers(0).map_err(RunError::SweepHeaders)?;
    let base = check_target(opts)?;
    let client = crate::http::resolve::client()
        .timeout(opts.limits.request_timeout)
        .pool_max_idle_per_host(usize::MAX)
        .trusting(&opts.tls)
        .build()
        .map_err(RunError::HttpClient)?;
    let mut c = Calibration {
        target: base.clone(),
        request: requests.describe(),
        step_s: opts.limits.step.as_secs_f64(),
        wait_budget_s: opts.limits.wait_budget.as_secs_f64(),
        degraded_factor: opts.limits.degraded_factor,
        ..Calibration::default()
    };
    let spend = opts
        .limits
        .max_spend_tokens
        .map(|n| Arc::new(loadgen::SpendBudget::new(n)));
    let planned = sweep_levels(opts.limits.max_concurrency, opts.limits.max_levels);
    let mut flat_run = 0;
    for &n in &planned {
        if cancel.is_cancelled() {
            c.stopped = Some("interrupted".into());
            break;
        }
        let level = run_level(&client, &base, &requests, n, opts, spend.clone()).await;
        eprintln!("{}", level_line(&level));
        if let Some(b) = spend.as_ref().filter(|b| b.refused()) {
            c.stopped = Some(format!(
                "stopped at {n} calls at once: the next calls would pass the spending guard of {} tokens ({}; {} sent)",
                b.limit(),
                Input::MaxSpendTokens,
                b.spent()
            ));
            c.levels.push(level);
            break;
        }
        let failed = level.failed_share();
        let previous = c.levels.last().map(|l| l.throughput_per_s);
        c.levels.push(level);
        if failed > opts.limits.error_threshold {
            let l = c.levels.last().expect("just pushed");
            c.stopped = Some(format!(
                "stopped at {n} calls at once: {:.0}% of the calls failed ({} refused, {} errors, {} timeouts), over the {:.0}% allowed",
                failed * 100.0,
                l.refused,
                l.errors,
                l.timeouts,
                opts.limits.error_threshold * 100.0
            ));
            break;
        }
        let x = c.levels.last().map_or(0.0, |l| l.throughput_per_s);
        match previous {
            Some(p) if p > 0.0 && x < p * (1.0 + PLATEAU_GROWTH) => flat_run += 1,
            _ => flat_run = 0,
        }
        if flat_run >= 2 {
            break;
        }
    }
    if flat_run >= 2 && !cancel.is_cancelled() && c.stopped.is_none() {
        refine(&mut c, &client, &base, &requests, opts, spend).await;
    }
    let end = conclude(&mut c, flat_run >= 2, opts);
    report::write_calibration(&opts.out, &c)?;
    Ok((c, end))
}

/// Measures the knee again near where it was found: at ⌈N*⌉ and 15%
/// above, when not run yet and within the limits.
async fn refine(
    c: &mut Calibration,
    client: &reqwest::Client,
    base: &str,
    requests: &Arc<SweepRequests>,
    opts: &CalibrateOptions,
    spend: Option<Arc<loadgen::SpendBudget>>,
) {
    let Some((knee, _, _)) = knee_of(&c.levels) else {
        return;
    };
    for n in [knee.ceil() as u64, (knee * 1.15).ceil() as u64] {
        let run = c.levels.iter().any(|l| l.concurrency == n);
        if run
            || n > opts.limits.max_concurrency
            || c.levels.len() >= opts.limits.max_levels
            || n == 0
        {
            continue;
        }
        let level = run_level(client, base, requests, n, opts, spend.clone()).await;
        eprintln!("{}", level_line(&level));
        c.levels.push(level);
    }
}

/// Fills in the knee and what follows from it.
fn conclude(c: &mut Calibration, plateau: bool, opts: &CalibrateOptions) -> SweepEnd {
    c.method = format!(
        "closed loop, {} levels of {:.1} s (each a quarter above the last); the knee N* = X_max x R_min, where the no-queueing line n / R_min meets the throughput plateau X_max, claimed once two levels in a row added under {:.0}% throughput",
        c.levels.len(),
        c.step_s,
        PLATEAU_GROWTH * 100.0
    );
    if c.levels.iter().all(|l| l.ok == 0) {
        c.summary = format!(
            "the target answered nothing: {}",
            c.stopped
                .clone()
                .unwrap_or_else(|| "every call failed".into())
        );
        return SweepEnd::TargetFailed;
    }
    let Some((knee, r_min, x_max)) = knee_of(&c.levels) else {
        return SweepEnd::TargetFailed;
    };
    c.flat_latency_ms = Some(r_min);
    c.plateau_per_s = Some(x_max);
    if !plateau {
        let most = c
            .levels
            .iter()
            .filter(|l| l.failed_share() <= opts.limits.error_threshold);
        let took = most.map(|l| l.concurrency).max().unwrap_or(0);
        c.summary = match &c.stopped {
            Some(why) => format!("no knee found: {why}; the target took {took} calls at once within the error threshold"),
            None => format!(
                "no knee found within {} calls at once: throughput still grew (at most {:.1}/s)",
                opts.limits.max_concurrency, x_max
            ),
        };
        return SweepEnd::NoKnee;
    }
    c.knee = Some(knee);
    let limit = ((knee * LIMIT_SHARE).floor() as u64).max(1);
    c.recommended_limit = Some(limit);
    let drain = limit as f64 / (r_min / 1000.0);
    let budget = opts.limits.wait_budget.as_secs_f64();
    c.queue_bound_healthy = Some((drain * budget).floor() as u64);
    c.queue_bound_degraded =
        Some((drain / opts.limits.degraded_factor.max(1.0) * budget).floor() as u64);
    c.summary = format!(
        "knee at about {knee:.1} calls in flight (latency {r_min:.0} ms at rest, a plateau of {x_max:.1} answers/s); a concurrency limit of {limit} drains {drain:.1}/s: a queue of {} for a {budget} s wait budget, {} if calls get {}x slower",
        c.queue_bound_healthy.unwrap_or(0),
        c.queue_bound_degraded.unwrap_or(0),
        opts.limits.degraded_factor
    );
    SweepEnd::Knee
}

/// One level's line on the terminal, as it is measured.
fn level_line(l: &CalibrationLevel) -> String {
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1} ms"));
    format!(
        "  {:>4} at once: {:>9.1}/s, p50 {}, p99 {}, failed {:.1}%",
        l.concurrency,
        l.throughput_per_s,
        ms(l.p50_ms),
        ms(l.p99_ms),
        l.failed_share() * 100.0
    )
}

/// Runs one level of `n` workers.
async fn run_level(
    client: &reqwest::Client,
    base: &str,
    requests: &Arc<SweepRequests>,
    n: u64,
    opts: &CalibrateOptions,
    spend: Option<Arc<loadgen::SpendBudget>>,
) -> CalibrationLevel {
    let (client, base, requests) = (client.clone(), base.to_string(), requests.clone());
    let level = ClosedLevel {
        workers: n as usize,
        step: opts.limits.step,
        warmup: opts.limits.step / 5,
    };
    let tally = loadgen::closed_level(level, move |seq| {
        let (client, requests) = (client.clone(), requests.clone());
        let (path, body, cost) = requests.request(seq);
        let url = format!("{base}{path}");
        // Checked before the sweep: the headers are made.
        let headers = requests.headers(seq).unwrap_or_default();
        // Over the spending guard: not sent (the sweep stops after it).
        let affordable = spend.as_ref().is_none_or(|b| b.take(cost));
        async move {
            if !affordable {
                // Not sent: the worker waits out its step without spinning.
                tokio::time::sleep(Duration::from_millis(10)).await;
                return CallEnd::Failed;
            }
            let mut post = client
                .post(url)
                .header("content-type", "application/json")
                .header(wire::headers::REQUEST_ID, format!("calibrate-{seq}"));
            for (name, value) in headers {
                post = post.header(name, value);
            }
            let sent = post.body(body).send().await;
            match sent {
                Ok(r) => {
                    let end = CallEnd::of_status(r.status().as_u16());
                    match r.bytes().await {
                        Ok(_) => end,
                        Err(e) if e.is_timeout() => CallEnd::TimedOut,
                        Err(_) => CallEnd::Failed,
                    }
                }
                Err(e) if e.is_timeout() => CallEnd::TimedOut,
                Err(_) => CallEnd::Failed,
            }
        }
    })
    .await;
    level_of(&tally)
}

/// A level's tally as calibrate.json shows it.
fn level_of(t: &ClosedTally) -> CalibrationLevel {
    let q = |q: f64| {
        (!t.latency_us.is_empty()).then(|| t.latency_us.value_at_quantile(q) as f64 / 1000.0)
    };
    CalibrationLevel {
        concurrency: t.workers as u64,
        measured_s: t.measured_s,
        ok: t.answered,
        refused: t.refused,
        errors: t.failed,
        timeouts: t.timed_out,
        throughput_per_s: t.throughput_per_s(),
        p50_ms: q(0.5),
        p90_ms: q(0.9),
        p99_ms: q(0.99),
    }
}

/// The `[load]` plan whose request shape the sweep sends: `--scenario`'s
/// text is read here, once, for that alone (a sweep has no phases of its
/// own to play, and no gateway or provider of the scenario's).
fn request_plan(opts: &CalibrateOptions) -> Result<loadgen::LoadPlan, RunError> {
    const DEFAULT: &str = "[load]\n[[load.phases]]\nduration = \"1s\"\nrate = 1\n[load.request]\nprompt_tokens = { fixed = 100 }\nmax_tokens = { fixed = 16 }\n";
    let (text, origin) = opts
        .scenario
        .clone()
        .unwrap_or_else(|| (DEFAULT.to_string(), "the default request".to_string()));
    Ok(loadgen::LoadPlan::from_scenario_str(
        &text,
        &origin,
        std::path::Path::new("."),
    )?)
}

/// The target's base URL, checked: a URL, on loopback unless allowed.
fn check_target(opts: &CalibrateOptions) -> Result<String, RunError> {
    let t = opts.target.trim_end_matches('/').to_string();
    loadgen::Target::parse(&t)?;
    if !crate::run::is_loopback_url(&t) && !opts.allow_remote {
        return Err(RunError::RemoteTarget { target: t });
    }
    opts.tls.client_config()?;
    if opts.limits.max_concurrency == 0 || opts.limits.max_levels == 0 || opts.limits.step.is_zero()
    {
        return Err(RunError::Flag {
            flag: format!(
                "{}, {} and {}",
                Input::MaxConcurrency,
                Input::MaxLevels,
                Input::StepDuration
            ),
            message: "must be above 0".into(),
        });
    }
    if !(opts.limits.error_threshold > 0.0 && opts.limits.error_threshold < 1.0) {
        return Err(RunError::flag(
            Input::ErrorThreshold,
            "must lie between 0 and 1",
        ));
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(n: u64, x: f64, p50: f64, failed: u64) -> CalibrationLevel {
        CalibrationLevel {
            concurrency: n,
            throughput_per_s: x,
            p50_ms: Some(p50),
            ok: 100,
            refused: failed,
            ..Default::default()
        }
    }

    fn opts() -> CalibrateOptions {
        CalibrateOptions {
            target: "http://127.0.0.1:1".into(),
            allow_remote: false,
            scenario: None,
            limits: SweepLimits::default(),
            tls: loadgen::TlsOptions::default(),
            out: PathBuf::from("/nonexistent"),
        }
    }

    #[test]
    fn a_plateau_gives_the_knee_the_limit_and_the_queue_bounds() {
        // Knee 40 at 50 ms: 800/s.
        let mut c = Calibration {
            levels: vec![
                level(30, 600.0, 50.0, 0),
                level(38, 760.0, 50.0, 0),
                level(48, 800.0, 60.0, 0),
                level(60, 800.0, 75.0, 0),
            ],
            ..Default::default()
        };
        assert_eq!(conclude(&mut c, true, &opts()), SweepEnd::Knee);
        assert!((c.knee.unwrap() - 40.0).abs() < 1e-9);
        assert_eq!(c.recommended_limit, Some(32));
        // 32 calls at 50 ms drain 640/s: 1,280 in 2 s; 7x slower, 182.
        assert_eq!(c.queue_bound_healthy, Some(1_280));
        assert_eq!(c.queue_bound_degraded, Some(182));
        assert!(c.summary.contains("knee at about 40.0"), "{}", c.summary);
    }

    #[test]
    fn without_a_plateau_no_knee_is_claimed_and_the_reason_is_kept() {
        let mut c = Calibration {
            levels: vec![level(19, 380.0, 50.0, 0), level(24, 380.0, 50.0, 60)],
            stopped: Some("stopped at 24 calls at once: 38% of the calls failed".into()),
            ..Default::default()
        };
        assert_eq!(conclude(&mut c, false, &opts()), SweepEnd::NoKnee);
        assert_eq!(c.knee, None);
        assert!(
            c.summary.contains("stopped at 24") && c.summary.contains("took 19 calls"),
            "{}",
            c.summary
        );
        let mut none = Calibration {
            levels: vec![CalibrationLevel {
                concurrency: 1,
                errors: 5,
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(conclude(&mut none, false, &opts()), SweepEnd::TargetFailed);
    }

    #[test]
    fn a_target_outside_loopback_needs_allow_remote() {
        let mut o = opts();
        o.target = "http://10.1.2.3:8080".into();
        let err = check_target(&o).unwrap_err();
        assert!(
            matches!(err, RunError::RemoteTarget { .. })
                && err.to_string().contains("allow_remote"),
            "{err}"
        );
        assert_eq!(err.kind(), crate::RunErrorKind::BadInput);
        o.allow_remote = true;
        assert!(check_target(&o).is_ok());
        o.limits.max_concurrency = 0;
        assert!(check_target(&o).is_err());
    }
}
