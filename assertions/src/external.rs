//! Judging a run whose provider the harness does not see
//! (`--provider external`: the gateway calls a real provider). There are no
//! provider records to join, so the inside of the gateway is read from the
//! client's records and the gateway's own gauges, sampled from its metrics
//! ([`GatewaySample`]s, one per sampling period):
//!
//! - the backlog of a second is the most attempts outstanding at the client
//!   in it less the calls the gateway reported in flight upstream (its
//!   sample at the second's end); the depth is its queue-depth gauge when
//!   named, else the same. With neither gauge, the client alone: every
//!   outstanding attempt counts, calls in flight at the provider included.
//!   Their resolution is the sampling period;
//! - refusals, their reasons, Retry-After and latencies come from the
//!   answers, as in every run; Retry-After is held to the drain time seen
//!   from the client (when the attempts outstanding at an instant ended)
//!   less the plan's service time S: the last of them left the gateway's
//!   queue a call before it ended (the timeline's `drain_s` is the time
//!   seen, S included);
//! - `stale_dispatch` from the gateway's stale-drop counter when one is
//!   named: of the callers who left without an answer, those the gateway
//!   did not drop stale may have been sent on after they left, an upper
//!   bound on the calls made for callers who had left; else skipped.
//!
//! Every verdict says which source it used. A run in which `shed_onset`,
//! `retry_after`, `memory_ceiling` or `drain` could not be judged is not a
//! pass: its verdict is `invalid` unless `allow_unjudged` names each one.

use wire::GatewaySample;

use crate::expect::StaleDispatchThreshold;
use crate::sweep::Rows;
use crate::timeline::{FirstShed, Summary};
use crate::verdict::{Status, Verdict};

/// What an external run is judged by besides the client's records.
#[derive(Debug, Clone, Default)]
pub(crate) struct External {
    /// The gateway's gauges, in time order.
    pub(crate) samples: Vec<GatewaySample>,
    /// How often they were read, seconds.
    pub(crate) period_s: f64,
    /// The checks that [`Check::must_judge`](crate::Check::must_judge) allowed to go unjudged.
    pub(crate) allow_unjudged: Vec<String>,
}

impl External {
    /// The sample in force at `t_us`: the latest at or before it, else the
    /// first.
    fn at(&self, t_us: u64) -> Option<&GatewaySample> {
        let i = self.samples.partition_point(|s| s.t_us <= t_us);
        self.samples.get(i.saturating_sub(1))
    }

    fn has(&self, f: fn(&GatewaySample) -> Option<f64>) -> bool {
        self.samples.iter().any(|s| f(s).is_some())
    }

    /// Rewrites each second's depth and backlog from the gauges (see the
    /// module docs); the client alone leaves them as they are.
    pub(crate) fn adjust(&self, rows: &mut Rows) {
        for k in 0..rows.rows.len() {
            let Some(s) = self.at(rows.bin_start(k as u64 + 1)).copied() else {
                continue;
            };
            let row = &mut rows.rows[k];
            let out = row.client_outstanding;
            match (s.in_flight, s.queue_depth) {
                (Some(f), q) => {
                    let b = out.saturating_sub(f.max(0.0).round() as u64);
                    row.backlog = b;
                    row.gateway_depth = q.map_or(b, |q| q.max(0.0).round() as u64);
                }
                (None, Some(q)) => {
                    let q = q.max(0.0).round() as u64;
                    row.backlog = q;
                    row.gateway_depth = q;
                }
                (None, None) => {}
            }
        }
    }

    /// The first shed with the depth and backlog of its second, as
    /// adjusted.
    pub(crate) fn first_shed(&self, f: Option<FirstShed>, rows: &Rows) -> Option<FirstShed> {
        let mut f = f?;
        if let Some(row) = rows.rows.get(rows.second_of(f.at_us)) {
            f.depth = row.gateway_depth;
            f.backlog = row.backlog;
        }
        Some(f)
    }

    /// Which source the verdicts were judged from, as a clause.
    pub(crate) fn source(&self) -> String {
        let named: Vec<&str> = [
            (self.has(|s| s.in_flight), "in flight upstream"),
            (self.has(|s| s.queue_depth), "queue depth"),
            (self.has(|s| s.stale_drops), "stale drops"),
        ]
        .into_iter()
        .filter_map(|(has, name)| has.then_some(name))
        .collect();
        if named.is_empty() {
            "judged from the client's records alone (provider external; no gateway gauge named or read: the backlog counts calls in flight at the provider too)".to_string()
        } else {
            format!(
                "judged from the client's records and the gateway's gauges ({}), read every {} s (provider external)",
                named.join(", "),
                wire::number::num(self.period_s, 1)
            )
        }
    }

    /// `stale_dispatch` from the gateway's stale-drop counter (see the
    /// module docs); skipped without one.
    pub(crate) fn stale_dispatch(&self, summary: &Summary, th: &StaleDispatchThreshold) -> Verdict {
        const ID: &str = crate::Check::StaleDispatch.id();
        if !th.enabled {
            return Verdict::off(ID);
        }
        let drops: Vec<f64> = self.samples.iter().filter_map(|s| s.stale_drops).collect();
        let (Some(first), Some(last)) = (drops.first(), drops.last()) else {
            return Verdict::skipped(
                ID,
                "no stale-drop counter",
                "the provider is external and no stale-drop counter is named (`stale_drops_metric`), so the calls made for callers who had left cannot be seen",
            );
        };
        let dropped = (last - first).max(0.0).round() as u64;
        let c = &summary.counts;
        let bound = c.timeout.saturating_sub(dropped);
        let calls = c.ok + c.upstream_refused + c.gateway_timeout + bound;
        let share = if calls > 0 {
            bound as f64 / calls as f64
        } else {
            0.0
        };
        let predicted = format!(
            "at most {} of the calls sent for callers who had already left",
            crate::verdict::percent(th.max_share)
        );
        let observed = format!(
            "at most {bound} of about {calls} calls ({}): {} callers left unanswered, {dropped} dropped stale by the gateway",
            crate::verdict::percent(share),
            c.timeout
        );
        let short = format!(
            "at most {} stale of {calls} calls (bound {})",
            crate::verdict::percent(share),
            crate::verdict::percent(th.max_share)
        );
        let status = if share <= th.max_share {
            Status::Pass
        } else {
            Status::Fail
        };
        let detail = format!(
            "an upper bound: of the {} callers who left without an answer the gateway dropped {dropped} stale, so at most {bound} were sent on after they left, {} of the calls",
            c.timeout,
            crate::verdict::percent(share)
        );
        Verdict::new(ID, status, short, predicted, observed, detail).with(
            crate::verdict::Figure::higher(share, "share", "provider calls for callers gone"),
        )
    }

    /// The verdicts of an external run: the source said in each, and a
    /// check that [`Check::must_judge`](crate::Check::must_judge) left unjudged (not disabled) makes it
    /// invalid unless allowed.
    pub(crate) fn finish(&self, verdicts: Vec<Verdict>) -> Vec<Verdict> {
        let source = self.source();
        verdicts
            .into_iter()
            .map(|mut v| {
                let unjudged = v.status == Status::Skipped
                    && crate::Check::from_id(v.id).is_some_and(crate::Check::must_judge)
                    && !self.allow_unjudged.iter().any(|a| a == v.id);
                if unjudged {
                    v.status = Status::Invalid;
                    v.detail = format!(
                        "could not be judged ({}), so the run cannot pass: name the gauges it needs, or pass --allow-unjudged {}",
                        v.detail, v.id
                    );
                }
                v.detail = format!("{}; {source}", v.detail);
                v
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_us: u64, in_flight: f64, queue: Option<f64>, drops: f64) -> GatewaySample {
        GatewaySample {
            t_us,
            queue_depth: queue,
            in_flight: Some(in_flight),
            stale_drops: Some(drops),
        }
    }

    #[test]
    fn the_sample_in_force_is_the_latest_before() {
        let e = External {
            samples: vec![sample(10, 1.0, None, 0.0), sample(20, 2.0, None, 0.0)],
            period_s: 1.0,
            allow_unjudged: Vec::new(),
        };
        assert_eq!(e.at(5).unwrap().t_us, 10, "before the first: the first");
        assert_eq!(e.at(15).unwrap().t_us, 10);
        assert_eq!(e.at(20).unwrap().t_us, 20);
        assert!(
            e.source().contains("in flight upstream, stale drops"),
            "{}",
            e.source()
        );
        let none = External::default();
        assert!(none.source().contains("client's records alone"));
    }

    #[test]
    fn an_unjudged_check_makes_the_run_invalid_unless_allowed() {
        let mut e = External::default();
        let v = || {
            vec![
                Verdict::skipped("drain", "too few baseline seconds", "no baseline"),
                Verdict::off("retry_after"),
                Verdict::skipped("goodput", "no overload", "no overload"),
            ]
        };
        let out = e.finish(v());
        assert_eq!(out[0].status, Status::Invalid);
        assert!(
            out[0].detail.contains("--allow-unjudged drain"),
            "{}",
            out[0].detail
        );
        assert_eq!(out[1].status, Status::Off, "off is not unjudged");
        assert_eq!(
            out[2].status,
            Status::Skipped,
            "not one that must be judged"
        );
        e.allow_unjudged = vec!["drain".into()];
        assert_eq!(e.finish(v())[0].status, Status::Skipped);
    }
}
