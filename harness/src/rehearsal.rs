//! A scenario at rehearsal scale: every part of it as a run starts it,
//! scaled once, here, by each typed config's own `scaled(Scale)` (the one
//! rule of [`wire::Scale`]), with the plan a run is judged against. A run
//! (`rehearse run`, `rehearse stage`) reads the [`Rehearsal`] alone, never
//! the scenario as written.

use std::path::PathBuf;

use wire::{Plan, Scale};

use crate::error::RunError;
use crate::scenario::{GatewayKind, GatewaySpec, Meta, Scenario};

/// A scenario at rehearsal scale: each part's typed config as the run
/// starts it, and its plan.
#[derive(Debug, Clone)]
pub struct Rehearsal {
    /// The scale applied.
    pub scale: Scale,
    /// The `[scenario]` table as written (its name and description).
    pub meta: Meta,
    /// The scenario's file (for errors that name it).
    pub path: PathBuf,
    /// The document as run (after `--set`): what the run directory keeps.
    pub text: String,
    /// The fake providers' configs, in the scenario's order (see
    /// [`Scenario::providers`]).
    pub providers: Vec<fake_provider::ProviderConfig>,
    /// The load.
    pub load: loadgen::LoadPlan,
    /// The gateway under test, at this scale ([`GatewaySpec::scaled`]).
    pub gateway: GatewaySpec,
    /// A gateway already serving that the run drives (the scenario's
    /// `url`, or `--target`); `None`: the harness starts the scenario's.
    pub target: Option<String>,
    /// The reference gateway's config, when the scenario uses it (upstream
    /// and listen are set when it starts).
    pub reference: Option<reference_gateway::GatewayConfig>,
    /// The checklist's thresholds.
    pub thresholds: assertions::Thresholds,
    /// The plan: its figures at full scale and at this one.
    pub plan: Plan,
    /// When the last trouble (the overload, a provider's troubled phase)
    /// ends, in seconds from the load's start at this scale, and the
    /// capacity per second after it (`None`: unlimited); `None` when
    /// nothing troubles the run. `recovery` judges from there.
    pub after_trouble: Option<(f64, Option<f64>)>,
}

impl Rehearsal {
    /// The first provider's config (see [`Scenario::provider`]).
    pub fn provider(&self) -> &fake_provider::ProviderConfig {
        &self.providers[0]
    }

    /// The highest mean arrival rate of any phase, per second, at the
    /// rehearsal's scale.
    pub fn peak_per_s(&self) -> f64 {
        self.plan
            .rehearsal
            .phases
            .iter()
            .map(|p| p.offered_per_min / 60.0)
            .fold(0.0, f64::max)
    }

    /// Drives `target`, a gateway already serving (`--target`), instead of
    /// the scenario's own.
    pub fn with_target(mut self, target: Option<String>) -> Rehearsal {
        if target.is_some() {
            self.target = target;
        }
        self
    }

    /// Returns true if and only if the harness starts the reference
    /// gateway for this run (no gateway already serving is driven).
    pub fn reference_started(&self) -> bool {
        self.target.is_none() && matches!(self.gateway.kind, GatewayKind::Reference(_))
    }

    /// Where the gateway's `/metrics` are once it serves at `url`: the
    /// scenario's `metrics_url`, else the reference gateway's own when the
    /// harness started it.
    pub fn metrics_url_at(&self, url: &str) -> Option<String> {
        match &self.gateway.metrics_url {
            Some(m) => Some(m.clone()),
            None if self.reference_started() => {
                Some(format!("{}/metrics", url.trim_end_matches('/')))
            }
            None => None,
        }
    }
}

impl GatewaySpec {
    /// The gateway at `scale`, as the run starts it: the memory ceiling
    /// and limit by [`GatewaySpec::memory_at`] (so bytes at that scale from
    /// then on), the restart delay ÷ the time scale; the rest as written.
    pub fn scaled(&self, scale: Scale) -> GatewaySpec {
        GatewaySpec {
            memory_ceiling: self.memory_ceiling.map(|b| self.memory_at(b, scale)),
            memory_limit: self.memory_limit.map(|b| self.memory_at(b, scale)),
            restart_delay: scale.duration(self.restart_delay),
            ..self.clone()
        }
    }
}

/// A time or quota scale as given on a command line: a number above 0
/// (clap's value parser for `--time-scale` and `--quota-scale`, so a bad
/// one is refused where it is parsed, naming the flag).
///
/// ```
/// assert_eq!(harness::scale_factor("2.5"), Ok(2.5));
/// assert!(harness::scale_factor("0").is_err());
/// assert!(harness::scale_factor("-1").is_err());
/// assert!(harness::scale_factor("inf").is_err());
/// assert!(harness::scale_factor("ten").is_err());
/// ```
pub fn scale_factor(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        Ok(_) => Err("must be a number above 0".into()),
        Err(e) => Err(format!("{e}: a number above 0, as 10 or 2.5")),
    }
}

impl Scenario {
    /// Plays the scenario at time scale `ts` instead of its own
    /// (`--time-scale N` of `run`, `plan` and `stage`); `None` leaves it.
    ///
    /// ```
    /// let mut s = harness::Scenario::load_or_builtin(None, &[]).unwrap();
    /// s.at_time_scale(Some(7.0)).unwrap();
    /// assert_eq!(s.scale().time, 7.0);
    /// assert!(s.at_time_scale(Some(0.0)).is_err());
    /// ```
    pub fn at_time_scale(&mut self, ts: Option<f64>) -> Result<(), RunError> {
        if let Some(ts) = ts {
            if !(ts.is_finite() && ts > 0.0) {
                return Err(RunError::BadScale {
                    what: "time scale",
                    value: ts,
                });
            }
            self.meta.time_scale = ts;
        }
        Ok(())
    }

    /// The scale the scenario asks for.
    pub fn scale(&self) -> Scale {
        Scale {
            time: self.meta.time_scale,
            quota: self.meta.quota_scale,
        }
    }

    /// The scenario at its scale, with its plan.
    pub fn rehearsal(&self) -> Rehearsal {
        let scale = self.scale();
        let plan = crate::plan::plan(self);
        Rehearsal {
            scale,
            meta: self.meta.clone(),
            path: self.path.clone(),
            text: self.text.clone(),
            providers: self.providers.iter().map(|p| p.scaled(scale)).collect(),
            // Per caller, bounded by the plan's expected time at the
            // target (when the scenario does not say), as the plan says.
            load: self
                .load_plan
                .clone()
                .scaled(scale)
                .expecting(plan.clients.time_in_system()),
            gateway: self.gateway.scaled(scale),
            target: match &self.gateway.kind {
                GatewayKind::Url(u) => Some(u.clone()),
                _ => None,
            },
            reference: match &self.gateway.kind {
                GatewayKind::Reference(c) => Some(c.as_ref().clone().scaled(scale)),
                _ => None,
            },
            thresholds: self.checklist.scaled(scale),
            after_trouble: crate::plan::after_trouble(self, &plan),
            plan,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gateway_is_scaled_once_with_the_rest() {
        let mib = 1024 * 1024;
        let text = crate::BUILTIN_SCENARIO.replacen(
            "[gateway]\nmemory_ceiling = \"80MiB\"\n",
            "[gateway]\nmemory_ceiling = \"400MiB\"\nmemory_limit = \"800MiB\"\n\
             scale_memory = true\nrestart_delay = \"4s\"\n",
            1,
        );
        let text = text.replacen("seed = 11\n", "seed = 11\nquota_scale = 2\n", 1);
        let mut s = Scenario::from_str(&text, "s.toml", std::path::Path::new("s.toml")).unwrap();
        s.at_time_scale(Some(2.0)).unwrap();
        let r = s.rehearsal();
        // 32 MiB at rest, the rest ÷ the quota scale, 2.
        assert_eq!(r.scale.quota, 2.0);
        assert_eq!(r.gateway.memory_ceiling, Some(216 * mib));
        assert_eq!(r.gateway.memory_limit, Some(416 * mib));
        assert_eq!(r.gateway.restart_delay, std::time::Duration::from_secs(2));
        assert!(r.reference_started());
        assert_eq!(
            r.metrics_url_at("http://127.0.0.1:9/").as_deref(),
            Some("http://127.0.0.1:9/metrics")
        );
        // Driving a gateway already serving: nothing is started, and its
        // metrics are only where the scenario says.
        let driven = r.with_target(Some("http://127.0.0.1:8".into()));
        assert!(!driven.reference_started());
        assert_eq!(driven.metrics_url_at("http://127.0.0.1:8"), None);
        // The scenario's own, whoever started the gateway.
        let mut named = driven.clone();
        named.gateway.metrics_url = Some("http://m/x".into());
        assert_eq!(
            named.metrics_url_at("http://g").as_deref(),
            Some("http://m/x")
        );
    }
}
