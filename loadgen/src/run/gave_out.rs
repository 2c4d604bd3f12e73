//! What gave out when a run could not keep its schedule: the load
//! generator's core, its connections, the machine's local ports or file
//! descriptors, or none of its own (other work on the machine took the
//! core it may run on).
//!
//! A run whose send lag passed its bound is invalid whatever the cause;
//! what a user does next depends on it. A generator that used all the
//! core it may run on needs another core or shard (the rig's ceiling,
//! `rehearse calibrate --rig`); one refused connects for want of a port
//! or a descriptor needs the machine's limits raised; one that used
//! little of its core was crowded out by other work, and a rerun on a
//! quiet machine tells.

use std::time::Duration;

/// The share of its cores past which the load generator is taken to
/// have used all of them: its runtime's threads also sleep between
/// arrivals, so a saturated process reads a little under 100%.
const SATURATED: f64 = 0.85;

/// The CPU this process has used so far (user and system), if the
/// system says.
pub(crate) fn cpu_time() -> Option<Duration> {
    use nix::sys::resource::{getrusage, UsageWho};
    use nix::sys::time::TimeValLike as _;
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let micros = usage.user_time().num_microseconds() + usage.system_time().num_microseconds();
    Some(Duration::from_micros(micros.max(0) as u64))
}

/// The cores this process may run on (its affinity, as `taskset` sets it).
pub(crate) fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// What the run met, for [`what_gave_out`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Met {
    /// Attempts that waited at the load generator's own bound.
    pub(crate) own_bound_waits: u64,
    /// Connects refused for want of a local port.
    pub(crate) no_port: u64,
    /// Connects refused for want of a file descriptor.
    pub(crate) no_descriptor: u64,
    /// The CPU it used over the run ÷ (the run's time × its cores).
    pub(crate) cpu_share: Option<f64>,
    /// The cores it may run on.
    pub(crate) cores: usize,
}

impl Met {
    /// What `connector` met over a run of `elapsed` that began with this
    /// process having used `cpu_before`.
    pub(crate) fn measured(
        connector: &crate::http1::Connector,
        cpu_before: Option<Duration>,
        elapsed: Duration,
        own_bound_waits: u64,
    ) -> Met {
        let (no_port, no_descriptor) = connector.ran_short();
        let cores = cores();
        let cpu_share = cpu_before.zip(cpu_time()).map(|(a, b)| {
            b.saturating_sub(a).as_secs_f64() / (elapsed.as_secs_f64().max(1e-3) * cores as f64)
        });
        Met {
            own_bound_waits,
            no_port,
            no_descriptor,
            cpu_share,
            cores,
        }
    }
}

/// The resource that gave out in an invalid run, and the note that says
/// so; `None` for a valid one.
pub(crate) fn what_gave_out(valid: bool, met: Met) -> Option<(&'static str, String)> {
    if valid {
        return None;
    }
    let share = met
        .cpu_share
        .map(|s| format!("{:.0}%", s * 100.0))
        .unwrap_or_else(|| "an unknown share".into());
    let cores = match met.cores {
        1 => "the 1 core".to_owned(),
        n => format!("the {n} cores"),
    };
    Some(if met.own_bound_waits > 0 {
        (
            "connections",
            format!(
                "what gave out: connections: {} attempts waited at the load generator's own bound on open connections",
                wire::number::count(met.own_bound_waits)
            ),
        )
    } else if met.no_port > 0 {
        (
            "ports",
            format!(
                "what gave out: local ports: {} connects were refused for want of one (EADDRNOTAVAIL); widen net.ipv4.ip_local_port_range or use fewer connections (a pool)",
                wire::number::count(met.no_port)
            ),
        )
    } else if met.no_descriptor > 0 {
        (
            "file descriptors",
            format!(
                "what gave out: file descriptors: {} connects were refused for want of one (EMFILE); raise the open-files limit (ulimit -n) or use fewer connections (a pool)",
                wire::number::count(met.no_descriptor)
            ),
        )
    } else if met.cpu_share.is_some_and(|s| s >= SATURATED) {
        (
            "core",
            format!(
                "what gave out: the core: the load generator used {share} of {cores} it may run on; give it more (--shards, or a machine of its own: `rehearse calibrate --rig` measures what one carries)"
            ),
        )
    } else {
        (
            "machine",
            format!(
                "what gave out: none of the load generator's own: it used {share} of {cores} it may run on, so other work on the machine held {}; rerun on a quiet machine",
                if met.cores == 1 { "it" } else { "them" }
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn met() -> Met {
        Met {
            own_bound_waits: 0,
            no_port: 0,
            no_descriptor: 0,
            cpu_share: Some(0.4),
            cores: 1,
        }
    }

    #[test]
    fn a_valid_run_names_nothing_and_an_invalid_one_names_one_resource() {
        assert_eq!(what_gave_out(true, met()), None);
        let said = |m: Met| what_gave_out(false, m).unwrap();
        assert_eq!(said(met()).0, "machine");
        assert!(
            said(met()).1.contains("used 40% of the 1 core"),
            "{}",
            said(met()).1
        );
        let busy = Met {
            cpu_share: Some(0.97),
            cores: 2,
            ..met()
        };
        assert_eq!(said(busy).0, "core");
        assert!(
            said(busy).1.contains("97% of the 2 cores"),
            "{}",
            said(busy).1
        );
        // A resource refused outright is named before the core.
        let ports = Met {
            no_port: 12,
            ..busy
        };
        assert_eq!(said(ports).0, "ports");
        let files = Met {
            no_descriptor: 3,
            ..busy
        };
        assert_eq!(said(files).0, "file descriptors");
        let bound = Met {
            own_bound_waits: 5,
            ..ports
        };
        assert_eq!(said(bound).0, "connections");
        assert_eq!(
            said(Met {
                cpu_share: None,
                ..met()
            })
            .0,
            "machine"
        );
    }

    #[test]
    fn this_process_cpu_time_is_read_and_grows() {
        let before = cpu_time().expect("getrusage on Linux");
        let mut x = 0u64;
        for i in 0..5_000_000u64 {
            x = x.wrapping_mul(31).wrapping_add(i);
        }
        std::hint::black_box(x);
        assert!(cpu_time().unwrap() > before);
        assert!(cores() >= 1);
    }
}
