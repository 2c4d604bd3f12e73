//! What the checks compare against: the scenario's predictions
//! ([`Expectations`]) and its `[checklist]` table ([`Thresholds`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The predictions the checks compare against: defined in `wire`, since
/// the harness writes them into `run.json` ([`wire::RunMeta`]) and the
/// judge reads them back.
pub use wire::Expectations;

/// The `[checklist]` table of a scenario: one threshold table per check.
///
/// Every table and every field has a default; unknown names are errors.
/// Each at its default, with what it means ([`Thresholds::TEMPLATE`],
/// which `rehearse init` writes below `[checklist]`):
///
#[doc = concat!("```toml\n", include_str!("thresholds.toml"), "```")]
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Thresholds {
    /// `[checklist.shed_onset]`.
    pub shed_onset: ShedOnsetThreshold,
    /// `[checklist.stale_share]`.
    pub stale_share: StaleShareThreshold,
    /// `[checklist.retry_after]`.
    pub retry_after: RetryAfterThreshold,
    /// `[checklist.memory_ceiling]`.
    pub memory_ceiling: MemoryCeilingThreshold,
    /// `[checklist.drain]`.
    pub drain: DrainThreshold,
    /// `[checklist.recovery]`.
    pub recovery: RecoveryThreshold,
    /// `[checklist.stale_dispatch]`.
    pub stale_dispatch: StaleDispatchThreshold,
    /// `[checklist.cancel_on_hangup]`.
    pub cancel_on_hangup: CancelOnHangupThreshold,
    /// `[checklist.retry_amplification]`.
    pub retry_amplification: RetryAmplificationThreshold,
    /// `[checklist.stream_intact]`.
    pub stream_intact: StreamIntactThreshold,
    /// `[checklist.served_latency]`.
    pub served_latency: ServedLatencyThreshold,
    /// `[checklist.goodput]`.
    pub goodput: GoodputThreshold,
    /// `[checklist.no_silent_loss]`.
    pub no_silent_loss: NoSilentLossThreshold,
    /// `[checklist.no_silent_truncation]`.
    pub no_silent_truncation: NoSilentTruncationThreshold,
    /// `[checklist.harness_valid]`.
    pub harness_valid: HarnessValidThreshold,
    /// `[checklist.refusals_legible]`.
    pub refusals_legible: RefusalsLegibleThreshold,
    /// `[checklist.concurrency_below_knee]`.
    pub concurrency_below_knee: ConcurrencyBelowKneeThreshold,
    /// `[checklist.cooldown_honoured]`.
    pub cooldown_honoured: CooldownHonouredThreshold,
    /// `[checklist.failover]`.
    pub failover: FailoverThreshold,
}

impl Thresholds {
    /// Every check's table at its defaults, with a line on what each field
    /// means: the template the type's documentation shows and `rehearse
    /// init` writes.
    pub const TEMPLATE: &'static str = include_str!("thresholds.toml");

    /// True if and only if check `c` is turned on.
    pub fn enabled(&self, c: crate::Check) -> bool {
        use crate::Check as C;
        match c {
            C::ShedOnset => self.shed_onset.enabled,
            C::StaleShare => self.stale_share.enabled,
            C::RetryAfter => self.retry_after.enabled,
            C::MemoryCeiling => self.memory_ceiling.enabled,
            C::Drain => self.drain.enabled,
            C::Recovery => self.recovery.enabled,
            C::StaleDispatch => self.stale_dispatch.enabled,
            C::CancelOnHangup => self.cancel_on_hangup.enabled,
            C::RetryAmplification => self.retry_amplification.enabled,
            C::StreamIntact => self.stream_intact.enabled,
            C::ServedLatency => self.served_latency.enabled,
            C::Goodput => self.goodput.enabled,
            C::NoSilentLoss => self.no_silent_loss.enabled,
            C::NoSilentTruncation => self.no_silent_truncation.enabled,
            C::RefusalsLegible => self.refusals_legible.enabled,
            C::ConcurrencyBelowKnee => self.concurrency_below_knee.enabled,
            C::HarnessValid => self.harness_valid.enabled,
            C::CooldownHonoured => self.cooldown_honoured.enabled,
            C::Failover => self.failover.enabled,
        }
    }

    /// The thresholds at a run's scale ([`wire::Scale`]): every duration
    /// of scenario time (`drain.within`, `served_latency.p99_ms`,
    /// `stream_intact.added_ms`, `cancel_on_hangup.within`,
    /// `failover.within`, `memory_ceiling.settle`) divided by the time
    /// scale. Shares, counts, tolerances, `cooldown_honoured.margin` and
    /// `stream_intact.margin` (the machine's own jitter, the same at every
    /// scale) are unchanged. A time scale that is not a positive finite
    /// number leaves the thresholds as they are.
    ///
    /// ```
    /// use std::time::Duration;
    /// let t = assertions::Thresholds::default().scaled(wire::Scale { time: 10.0, quota: 4.0 });
    /// assert_eq!(t.drain.within, Duration::from_secs(6));
    /// assert_eq!(t.served_latency.p99_ms, 1_000.0);
    /// ```
    pub fn scaled(&self, scale: wire::Scale) -> Thresholds {
        let time_scale = scale.time;
        let mut t = self.clone();
        if time_scale.is_finite() && time_scale > 0.0 {
            // A tiny scale could overflow a Duration: saturate instead.
            t.drain.within = Duration::try_from_secs_f64(t.drain.within.as_secs_f64() / time_scale)
                .unwrap_or(Duration::MAX);
            t.served_latency.p99_ms /= time_scale;
            t.stream_intact.added_ms /= time_scale;
            t.cancel_on_hangup.within =
                Duration::try_from_secs_f64(t.cancel_on_hangup.within.as_secs_f64() / time_scale)
                    .unwrap_or(Duration::MAX);
            t.failover.within =
                Duration::try_from_secs_f64(t.failover.within.as_secs_f64() / time_scale)
                    .unwrap_or(Duration::MAX);
            t.memory_ceiling.settle =
                Duration::try_from_secs_f64(t.memory_ceiling.settle.as_secs_f64() / time_scale)
                    .unwrap_or(Duration::MAX);
        }
        t
    }
}

/// `shed_onset`: the depth at the first gateway shed may exceed Q* by this
/// share (one-sided: shedding earlier is safe).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ShedOnsetThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// Allowed excess over Q*, as a share (0.5 = up to 1.5·Q*).
    pub tolerance: f64,
}

impl Default for ShedOnsetThreshold {
    fn default() -> Self {
        ShedOnsetThreshold {
            enabled: true,
            tolerance: 0.5,
        }
    }
}

/// `stale_share`: how many of the gateway's own refusals (those the
/// provider never saw) may come after a wait instead of at admission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StaleShareThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// Allowed refusals after waiting (stale) / refusals the provider never
    /// saw (shed + stale).
    pub max_share: f64,
}

impl Default for StaleShareThreshold {
    fn default() -> Self {
        StaleShareThreshold {
            enabled: true,
            max_share: 0.1,
        }
    }
}

/// `retry_after`: how close each refusal's Retry-After must be to the
/// backlog drain time at that refusal, and how many distinct values it
/// must take.
///
/// Before, `tolerance` was the median relative error allowed over all
/// refusals (1.0 by default); it is now each refusal's own allowed error,
/// as a share of its drain time, in seconds and never under its header's
/// granularity: |Retry-After − drain| ≤ max(granularity, tolerance × drain).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryAfterThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// A refusal's allowed error, as a share of the drain time at it (at
    /// least its header's granularity: 1 ms for `retry-after-ms`, 1 s for
    /// `retry-after`).
    pub tolerance: f64,
    /// Distinct values required when there are at least 5 sheds.
    pub min_distinct: usize,
}

impl Default for RetryAfterThreshold {
    fn default() -> Self {
        RetryAfterThreshold {
            enabled: true,
            tolerance: 0.25,
            min_distinct: 2,
        }
    }
}

/// `memory_ceiling`: the ceiling itself comes from the scenario's
/// `[gateway]` ([`Expectations::memory_ceiling_bytes`]), and what the
/// gateway keeps once the load is gone: its memory after the load, drained
/// and idle for `settle`, at most `max_retained` above its idle baseline
/// before the load (a leak passes a ceiling in a short rehearsal; it does
/// not come back down).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MemoryCeilingThreshold {
    /// Whether the check runs (and the run waits `settle` after the load).
    pub enabled: bool,
    /// How long the run waits after the load's end, the backlog drained,
    /// for the gateway's memory to settle (scenario time), as a humantime
    /// string (`"10s"`).
    #[serde(with = "humantime_serde")]
    pub settle: Duration,
    /// The memory the gateway may keep above its idle baseline once
    /// drained and idle, in bytes (written as a number of bytes or a size
    /// like `"64 MiB"`); `None`: [`MemoryCeilingThreshold::DEFAULT_RETAINED`]
    /// or a quarter of the peak's growth over the baseline, the larger.
    #[serde(deserialize_with = "size::optional")]
    pub max_retained: Option<u64>,
}

impl MemoryCeilingThreshold {
    /// The least retained memory allowed when `max_retained` is not given:
    /// an allocator keeps some of what a load made it take (free lists,
    /// arenas, pools of connections), and 32 MiB is more than that and less
    /// than a leak of a modest load.
    pub const DEFAULT_RETAINED: u64 = 32 * 1024 * 1024;

    /// The memory allowed to stay above the baseline when the peak grew
    /// `growth` bytes over it: `max_retained`, else the larger of
    /// [`Self::DEFAULT_RETAINED`] and a quarter of the growth (a gateway
    /// that grew by a gigabyte may keep more in its allocator than one that
    /// grew by a megabyte, and a quarter of it still kept is no release).
    ///
    /// ```
    /// let mib = 1024 * 1024;
    /// let t = assertions::MemoryCeilingThreshold::default();
    /// assert_eq!(t.allowed_retained(10 * mib), 32 * mib);
    /// assert_eq!(t.allowed_retained(400 * mib), 100 * mib);
    /// let set = assertions::MemoryCeilingThreshold { max_retained: Some(mib), ..t };
    /// assert_eq!(set.allowed_retained(400 * mib), mib);
    /// ```
    pub fn allowed_retained(&self, growth: u64) -> u64 {
        self.max_retained
            .unwrap_or_else(|| Self::DEFAULT_RETAINED.max(growth / 4))
    }
}

impl Default for MemoryCeilingThreshold {
    fn default() -> Self {
        MemoryCeilingThreshold {
            enabled: true,
            settle: Duration::from_secs(10),
            max_retained: None,
        }
    }
}

/// A size in bytes as a threshold is written: a whole number of bytes, or a
/// string with a unit (`"64 MiB"`, `"512KB"`); a negative, fractional or
/// non-finite number is refused where it is written.
mod size {
    use serde::de::{self, Deserializer, Visitor};
    use std::fmt;

    const WANT: &str =
        "a size of at least 0 bytes: a whole number of bytes, or a string like \"64 MiB\"";

    pub(super) fn optional<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        d.deserialize_any(Bytes).map(Some)
    }

    struct Bytes;

    impl Visitor<'_> for Bytes {
        type Value = u64;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(WANT)
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
            Ok(v)
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
            u64::try_from(v).map_err(|_| E::custom(format!("{v} is negative: want {WANT}")))
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<u64, E> {
            if !v.is_finite() {
                return Err(E::custom(format!(
                    "{v} is not a finite number: want {WANT}"
                )));
            }
            if v < 0.0 {
                return Err(E::custom(format!("{v} is negative: want {WANT}")));
            }
            if v.fract() != 0.0 || v > u64::MAX as f64 {
                return Err(E::custom(format!(
                    "{v} is not a whole number of bytes: want {WANT}"
                )));
            }
            Ok(v as u64)
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
            let t = v.trim();
            if t.starts_with('-') {
                return Err(E::custom(format!("{v:?} is negative: want {WANT}")));
            }
            t.parse::<bytesize::ByteSize>()
                .map(|b| b.as_u64())
                .map_err(|_| E::custom(format!("{v:?} is not a size: want {WANT}")))
        }
    }
}

/// `drain`: how soon after the overload the backlog must be back to its
/// baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DrainThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// The allowed drain time, written as a humantime string (`"60s"`,
    /// `"1m 30s"`, `"500ms"`).
    #[serde(with = "humantime_serde")]
    pub within: Duration,
}

impl Default for DrainThreshold {
    fn default() -> Self {
        DrainThreshold {
            enabled: true,
            within: Duration::from_secs(60),
        }
    }
}

/// `recovery`: once the last trouble has ended and `drain.within` has
/// passed, the answered share of what was offered, against what a healthy
/// system answers there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecoveryThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// Answers needed after the trouble, a share of what a healthy system
    /// answers there: min(offered, the plan's capacity).
    pub min_share: f64,
}

impl Default for RecoveryThreshold {
    fn default() -> Self {
        RecoveryThreshold {
            enabled: true,
            min_share: 0.9,
        }
    }
}

/// `cancel_on_hangup`: of the provider calls in service when their caller
/// gave up, the share the gateway cancelled (hung up on) promptly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CancelOnHangupThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// How soon after its caller left a call must be hung up on (scenario
    /// time, divided by the time scale).
    #[serde(with = "humantime_serde")]
    pub within: Duration,
    /// Calls cancelled within `within` / calls in service when their
    /// caller left, needed.
    pub min_share: f64,
}

impl Default for CancelOnHangupThreshold {
    fn default() -> Self {
        CancelOnHangupThreshold {
            enabled: true,
            within: Duration::from_secs(1),
            min_share: 0.9,
        }
    }
}

/// `retry_amplification`: provider calls per gateway attempt (each
/// provider counted, failovers included).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryAmplificationThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// The most calls per attempt allowed over the whole run.
    pub max_ratio: f64,
    /// The most calls per attempt allowed in any one scenario second.
    pub max_ratio_per_second: f64,
    /// A second is held to `max_ratio_per_second` only when at least this
    /// many attempts were sent in it: in a second of two attempts, one
    /// failover reads 1.5 calls per attempt and one retry plus a failover
    /// 2.0, noise rather than a storm.
    pub min_attempts: u64,
}

impl Default for RetryAmplificationThreshold {
    fn default() -> Self {
        RetryAmplificationThreshold {
            enabled: true,
            max_ratio: 1.2,
            max_ratio_per_second: 2.0,
            min_attempts: 10,
        }
    }
}

/// `stream_intact`: a streamed answer reaches the client as it is made:
/// little time added to its first token, and in pieces, not one lump.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamIntactThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// The p99 of the time the gateway added to the first token allowed,
    /// in milliseconds (scenario time, divided by the time scale), before
    /// `margin`.
    pub added_ms: f64,
    /// Added to `added_ms` once it is scaled: the rehearsal's own time, not
    /// divided by the time scale, because handing a frame on costs the
    /// machine the same at every scale (the reference gateway's p99 was
    /// 4-8 ms in a debug build on a busy 2-core machine, against the 3.3 ms
    /// that 100 ms is at `--time-scale 30`).
    #[serde(with = "humantime_serde")]
    pub margin: Duration,
    /// Streamed answers delivered in a lump allowed, a share of the
    /// streams the provider sent in pieces.
    pub max_lumped_share: f64,
}

impl StreamIntactThreshold {
    /// The bound on the p99 of the time added, in milliseconds of the
    /// rehearsal: `added_ms` (as scaled) plus `margin`.
    pub fn bound_ms(&self) -> f64 {
        self.added_ms + self.margin.as_secs_f64() * 1000.0
    }
}

impl Default for StreamIntactThreshold {
    fn default() -> Self {
        StreamIntactThreshold {
            enabled: true,
            added_ms: 100.0,
            margin: Duration::from_millis(10),
            max_lumped_share: 0.01,
        }
    }
}

/// `stale_dispatch`: the allowed share of provider calls made for callers
/// who had already left.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StaleDispatchThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// Allowed stale calls / all provider calls.
    pub max_share: f64,
}

impl Default for StaleDispatchThreshold {
    fn default() -> Self {
        StaleDispatchThreshold {
            enabled: true,
            max_share: 0.01,
        }
    }
}

/// `refusals_legible`: no (status, reason) pair of the answers stands for
/// two kinds of refusal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RefusalsLegibleThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// A kind counts for a pair when it holds at least this share of the
    /// pair's refusals.
    pub min_share: f64,
}

impl Default for RefusalsLegibleThreshold {
    fn default() -> Self {
        RefusalsLegibleThreshold {
            enabled: true,
            min_share: 0.01,
        }
    }
}

/// `concurrency_below_knee`: the calls in service at the provider stay at
/// or below its load curve's knee (judged when the scenario names one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConcurrencyBelowKneeThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// The quantile of the run's seconds (each its most calls in service)
    /// that must be at or below the knee.
    pub quantile: f64,
}

impl Default for ConcurrencyBelowKneeThreshold {
    fn default() -> Self {
        ConcurrencyBelowKneeThreshold {
            enabled: true,
            quantile: 0.99,
        }
    }
}

/// `cooldown_honoured`: how few of a provider's calls may reach it inside
/// a Retry-After window it had just announced (judged when a provider
/// announced one, or the run has several).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CooldownHonouredThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// Allowed calls inside a window / the provider's calls.
    pub max_share: f64,
    /// Added to the measured round trip for the calls already on their
    /// way when a refusal left (not counted): the rehearsal's own time,
    /// not divided by the time scale (it is the machine's jitter).
    #[serde(with = "humantime_serde")]
    pub margin: Duration,
}

impl Default for CooldownHonouredThreshold {
    fn default() -> Self {
        CooldownHonouredThreshold {
            enabled: true,
            max_share: 0.01,
            margin: Duration::from_millis(10),
        }
    }
}

/// `failover`: how soon a provider in trouble loses the gateway's calls,
/// and how much of what the others can serve is served meanwhile (judged
/// with several providers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FailoverThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// The troubled provider's allowed share of all providers' calls,
    /// from `within` after its trouble starts to its end.
    pub max_share: f64,
    /// How soon after the trouble starts (scenario time).
    #[serde(with = "humantime_serde")]
    pub within: Duration,
    /// Answers needed meanwhile, a share of what the others can serve
    /// (at most the offered load).
    pub min_share: f64,
}

impl Default for FailoverThreshold {
    fn default() -> Self {
        FailoverThreshold {
            enabled: true,
            max_share: 0.1,
            within: Duration::from_secs(5),
            min_share: 0.8,
        }
    }
}

/// `served_latency`: the latency SLO of the people who were served.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServedLatencyThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// The allowed 99th percentile, in milliseconds.
    pub p99_ms: f64,
}

impl Default for ServedLatencyThreshold {
    fn default() -> Self {
        ServedLatencyThreshold {
            enabled: true,
            p99_ms: 10_000.0,
        }
    }
}

/// `goodput`: answers per second during the overload, as a share of μ.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GoodputThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// Required answers per second / μ.
    pub min_share: f64,
}

impl Default for GoodputThreshold {
    fn default() -> Self {
        GoodputThreshold {
            enabled: true,
            min_share: 0.8,
        }
    }
}

/// `no_silent_loss`: how many attempts may end in a reset, a connection
/// error, a malformed answer or a timeout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NoSilentLossThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// Allowed lost attempts.
    pub max_lost: u64,
}

impl Default for NoSilentLossThreshold {
    fn default() -> Self {
        NoSilentLossThreshold {
            enabled: true,
            max_lost: 0,
        }
    }
}

/// `no_silent_truncation`: how many of the provider's cut streams may reach
/// the client as a complete answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NoSilentTruncationThreshold {
    /// Whether the check runs.
    pub enabled: bool,
    /// Allowed cut calls answered `ok` to the client / cut calls.
    pub max_share: f64,
}

impl Default for NoSilentTruncationThreshold {
    fn default() -> Self {
        NoSilentTruncationThreshold {
            enabled: true,
            max_share: 0.0,
        }
    }
}

/// `harness_valid`: the bound itself comes from the load generator
/// ([`Expectations::send_lag_bound_ms`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HarnessValidThreshold {
    /// Whether the check runs.
    pub enabled: bool,
}

impl Default for HarnessValidThreshold {
    fn default() -> Self {
        HarnessValidThreshold { enabled: true }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_with_defaults_and_refuse_unknown_fields() {
        let t: Thresholds =
            serde_json::from_str(r#"{"drain":{"within":"1m 30s"},"goodput":{"enabled":false}}"#)
                .unwrap();
        assert_eq!(t.drain.within, Duration::from_secs(90));
        assert!(t.drain.enabled);
        assert!(!t.goodput.enabled);
        assert_eq!(t.goodput.min_share, 0.8);
        assert_eq!(t.shed_onset, ShedOnsetThreshold::default());
        assert!(serde_json::from_str::<Thresholds>(r#"{"drain":{"whithin":"1s"}}"#).is_err());
        assert!(serde_json::from_str::<Thresholds>(r#"{"drian":{}}"#).is_err());
        assert_eq!(
            serde_json::from_str::<Thresholds>("{}").unwrap(),
            Thresholds::default()
        );
    }

    #[test]
    fn max_retained_reads_bytes_or_a_size_and_refuses_the_rest() {
        let read = |v: &str| {
            toml::from_str::<MemoryCeilingThreshold>(&format!("max_retained = {v}"))
                .map(|t| t.max_retained)
                .map_err(|e| e.to_string())
        };
        assert_eq!(read("\"64MiB\""), Ok(Some(64 << 20)));
        assert_eq!(read("\"64 MiB\""), Ok(Some(64 << 20)));
        assert_eq!(read("\"1.5 KiB\""), Ok(Some(1536)));
        assert_eq!(read("1048576"), Ok(Some(1 << 20)));
        assert_eq!(read("0"), Ok(Some(0)));
        assert_eq!(read("2048.0"), Ok(Some(2048)));
        for (bad, why) in [
            ("-1", "-1 is negative"),
            ("-1.5", "-1.5 is negative"),
            ("\"-3 MiB\"", "\"-3 MiB\" is negative"),
            ("nan", "NaN is not a finite number"),
            ("inf", "inf is not a finite number"),
            ("-inf", "-inf is not a finite number"),
            ("1.5", "1.5 is not a whole number of bytes"),
            ("\"lots\"", "\"lots\" is not a size"),
            ("true", "a size of at least 0 bytes"),
        ] {
            let err = read(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
        let t = toml::from_str::<MemoryCeilingThreshold>("settle = \"2s\"").unwrap();
        assert_eq!(t.settle, Duration::from_secs(2));
        assert_eq!(t.max_retained, None);
        assert!(toml::from_str::<MemoryCeilingThreshold>("settle = \"-2s\"").is_err());
    }

    #[test]
    fn the_template_reads_as_the_defaults() {
        let written: Thresholds = toml::from_str(Thresholds::TEMPLATE).unwrap();
        assert_eq!(written, Thresholds::default());
    }

    #[test]
    fn scaling_divides_durations_only() {
        let t = Thresholds::default().scaled(wire::Scale {
            time: 4.0,
            quota: 1.0,
        });
        assert_eq!(t.drain.within, Duration::from_secs(15));
        assert_eq!(t.served_latency.p99_ms, 2_500.0);
        assert_eq!(t.failover.within, Duration::from_millis(1250));
        assert_eq!(t.memory_ceiling.settle, Duration::from_millis(2500));
        // A size is not time.
        assert_eq!(t.memory_ceiling.max_retained, None);
        // The machine's margin is not scenario time.
        assert_eq!(t.cooldown_honoured.margin, Duration::from_millis(10));
        assert_eq!(t.stream_intact.added_ms, 25.0);
        assert_eq!(t.stream_intact.bound_ms(), 35.0);
        assert_eq!(t.stale_dispatch.max_share, 0.01);
        assert_eq!(
            Thresholds::default().scaled(wire::Scale {
                time: 0.0,
                quota: 1.0
            }),
            Thresholds::default()
        );
        assert_eq!(
            Thresholds::default().scaled(wire::Scale {
                time: f64::NAN,
                quota: 1.0
            }),
            Thresholds::default()
        );
        assert_eq!(
            Thresholds::default()
                .scaled(wire::Scale {
                    time: 1e-300,
                    quota: 1.0
                })
                .drain
                .within,
            Duration::MAX
        );
    }
}
