//! Open files: the run predicts the sockets it will hold, refuses to start
//! when the limit cannot cover what it expects at its peak, and warns when
//! only the worst case would not fit.
//!
//! Two figures, both for this process (the load generator's sockets to the
//! gateway and the in-process provider's sockets from it share one table):
//! - the *worst case* ([`predicted_fds`]): every person at the peak rate
//!   held for their whole patience, on both sides, with half again as margin;
//! - the *expected peak* ([`expected_fds`]): per phase and per side,
//!   λ × W (Little's law), with W the provider latency the plan works with
//!   (or, where the plan has a backlog, the time its requests are held:
//!   in flight plus waiting, divided by λ), capped at the patience; times a
//!   margin of 2.
//!
//! A steady 2,000 requests/s with 10 s of patience against a 50 ms provider
//! holds about 100 sockets a side: it expects 656 open files, while its
//! worst case, a gateway that holds every caller to the end of their
//! patience, is 60,256. Refusing on the worst case refused runs that need a
//! few hundred sockets; so the run is refused only when the expected peak
//! does not fit, and runs with a warning when only the worst case does not.
//! If descriptors then run out, the load generator's connects fail with
//! the OS's "too many open files", each recorded as a `connect_error` with
//! that cause, and judging marks the run invalid ([`out_of_files_note`]).

use wire::Plan;

/// Files the harness holds besides the sockets: the run directory's
/// records, the gateway's log and pipes, the runtime's own descriptors.
const HARNESS_FILES: u64 = 256;

/// The margin on the expected peak.
const EXPECTED_MARGIN: f64 = 2.0;

/// File descriptors the run would hold in the worst case, by Little's law:
/// people in flight at the peak (peak arrival rate × patience, the longest
/// a person holds a connection) on both sides of the gateway (the load's
/// sockets and the provider's), with half again as margin, plus the
/// harness's own files.
pub fn predicted_fds(peak_per_s: f64, patience_s: f64) -> u64 {
    (peak_per_s * patience_s * 2.0 * 1.5).ceil() as u64 + HARNESS_FILES
}

/// File descriptors the run expects to hold at its peak: the largest over
/// the plan's phases (at rehearsal scale) of λ × W on each of the two
/// sides, W capped at `patience_s`, times a margin of 2, plus the harness's
/// own files.
///
/// W is the phase's provider latency (the plan's service time S); where
/// the plan's fluid queue holds a backlog in the phase (a capacity below
/// the arrivals), it is the time a request is held there: (in flight +
/// the larger of the backlog at the phase's start and end) ÷ λ.
///
/// ```
/// let mut plan = wire::Plan::default();
/// plan.rehearsal.phases.push(wire::Segment {
///     offered_per_min: 2_000.0 * 60.0,
///     service_s: 0.05,
///     duration_s: 60.0,
///     ..Default::default()
/// });
/// // 2,000/s × 50 ms = 100 sockets a side; × 2 sides × 2 margin + 256.
/// assert_eq!(harness::expected_fds(&plan, 10.0), 656);
/// assert_eq!(harness::predicted_fds(2_000.0, 10.0), 60_256);
/// ```
pub fn expected_fds(plan: &Plan, patience_s: f64) -> u64 {
    let mut backlog_before = 0.0_f64;
    let mut peak = 0.0_f64;
    for g in &plan.rehearsal.phases {
        let lambda = g.offered_per_min / 60.0;
        let in_flight = g
            .capacity_per_min
            .map_or(lambda, |mu| (mu / 60.0).min(lambda))
            * g.service_s;
        let held = in_flight + backlog_before.max(g.backlog_at_end);
        backlog_before = g.backlog_at_end;
        // λ × W with W = held ÷ λ, capped at the patience.
        let one_side = held.min(lambda * patience_s).max(0.0);
        peak = peak.max(2.0 * one_side * EXPECTED_MARGIN);
    }
    peak.ceil() as u64 + HARNESS_FILES
}

/// What the open-files check found before a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FdCheck {
    /// The limit covers the worst case.
    Fits {
        /// The soft limit in force (raised to the hard limit).
        limit: u64,
    },
    /// The limit covers the expected peak but not the worst case: the run
    /// goes ahead, and this is said, with both numbers.
    WorstCaseOver {
        /// The soft limit in force.
        limit: u64,
        /// What to tell the person running it.
        warning: String,
    },
}

/// Raises the soft limit on open files to the hard limit, and checks the
/// run's two figures against it: an error (the run is refused, with both
/// numbers) when `expected` does not fit; a warning when only `worst` does
/// not.
pub fn check_fds(expected: u64, worst: u64) -> Result<FdCheck, OpenFilesError> {
    let (limit, hard) = raised_limit()?;
    if limit < expected {
        return Err(OpenFilesError::OverLimit {
            expected,
            worst,
            limit,
            hard,
        });
    }
    if limit < worst {
        return Ok(FdCheck::WorstCaseOver {
            limit,
            warning: format!(
                "open files: this run expects to hold about {expected} at its peak, within the limit of {limit}, but up to {worst} if the gateway holds every caller to the end of their patience; if they run out, connects fail with \"too many open files\" (recorded as connect errors) and the run is invalid. Raise the limit (ulimit -n {worst}) to rule that out"
            ),
        });
    }
    Ok(FdCheck::Fits { limit })
}

/// Why a run's open files were not checked against the limit, or do not
/// fit it.
#[derive(Debug, thiserror::Error)]
pub enum OpenFilesError {
    /// The run expects more open files than the limit, raised to the hard
    /// one, allows: it is refused before it starts.
    #[error("this run expects to hold about {expected} open files at its peak (per phase and side, arrivals x provider latency, capped at the patience, x2; {worst} in the worst case, every caller held to the end of their patience) but the limit is {limit} (hard limit {hard}); raise it (ulimit -n) or lower the scenario's rate or time scale")]
    OverLimit {
        /// Open files expected at the peak.
        expected: u64,
        /// Open files in the worst case.
        worst: u64,
        /// The soft limit, raised to the hard one where it could be.
        limit: u64,
        /// The hard limit.
        hard: u64,
    },
    /// The limit could not be read.
    #[error("cannot read the open-files limit: {0}")]
    Limit(#[source] nix::Error),
}

/// The soft limit after raising it to the hard one, and the hard limit.
fn raised_limit() -> Result<(u64, u64), OpenFilesError> {
    use nix::sys::resource::{getrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).map_err(OpenFilesError::Limit)?;
    // Where the limit cannot be raised, the one in force is all there is.
    Ok((wire::raise_open_files_limit().unwrap_or(soft), hard))
}

/// Returns true if and only if a connect error's cause (a record's
/// `reason`) says this process had no file descriptor left (EMFILE), or
/// the system none (ENFILE).
pub fn is_out_of_files(cause: &str) -> bool {
    let c = cause.to_ascii_lowercase();
    c.contains("too many open files") || c.contains("os error 24") || c.contains("os error 23")
}

/// The note that makes a run invalid when `connects` of its attempts could
/// not connect because the harness had no file descriptor left; `None`
/// when none did.
pub fn out_of_files_note(connects: u64) -> Option<String> {
    (connects > 0).then(|| {
        format!(
            "the harness ran out of open files: {} attempts could not connect (too many open files), a limit of this machine rather than the gateway's doing, so the run is invalid; raise the open-files limit (ulimit -n) or lower the rate or the time scale",
            wire::number::count(connects)
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::Segment;

    #[test]
    fn file_descriptors_are_predicted_and_checked() {
        // 40 requests/s held up to 30 s, both sides, +50%, +256.
        assert_eq!(predicted_fds(40.0, 30.0), 3856);
        let err = check_fds(u64::MAX / 2, u64::MAX / 2)
            .unwrap_err()
            .to_string();
        assert!(err.contains("open files"), "{err}");
    }

    fn segment(per_s: f64, service_s: f64, capacity_per_s: Option<f64>, backlog: f64) -> Segment {
        Segment {
            offered_per_min: per_s * 60.0,
            service_s,
            capacity_per_min: capacity_per_s.map(|c| c * 60.0),
            backlog_at_end: backlog,
            duration_s: 10.0,
            ..Segment::default()
        }
    }

    #[test]
    fn the_expected_peak_is_arrivals_times_latency_per_phase_and_side() {
        let mut plan = Plan::default();
        // The issue's run: 2,000/s, 10 s patience, a 50 ms provider.
        plan.rehearsal.phases = vec![segment(2_000.0, 0.05, None, 0.0)];
        assert_eq!(expected_fds(&plan, 10.0), 2 * 100 * 2 + 256);
        // The largest phase counts, not the sum.
        plan.rehearsal.phases = vec![
            segment(100.0, 1.0, None, 0.0),
            segment(2_000.0, 0.05, None, 0.0),
        ];
        assert_eq!(expected_fds(&plan, 10.0), 656);
        // A latency longer than the patience: held for the patience only.
        plan.rehearsal.phases = vec![segment(100.0, 60.0, None, 0.0)];
        assert_eq!(expected_fds(&plan, 2.0), 2 * 200 * 2 + 256);
        // A backlog (capacity 10/s, 1 s calls): 10 in flight and 300
        // waiting at the phase's end, and still 300 when the next begins.
        plan.rehearsal.phases = vec![
            segment(40.0, 1.0, Some(10.0), 300.0),
            segment(5.0, 1.0, Some(10.0), 250.0),
        ];
        assert_eq!(expected_fds(&plan, 30.0), 2 * 310 * 2 + 256);
        // ... capped at the patience: 40/s for 5 s at most.
        assert_eq!(expected_fds(&plan, 5.0), 2 * 200 * 2 + 256);
        assert_eq!(expected_fds(&Plan::default(), 5.0), 256);
    }

    #[test]
    fn only_the_expected_peak_refuses_a_run() {
        let (limit, _) = raised_limit().unwrap();
        assert!(matches!(check_fds(64, 128), Ok(FdCheck::Fits { limit: l }) if l == limit));
        match check_fds(64, limit + 1) {
            Ok(FdCheck::WorstCaseOver { warning, .. }) => {
                assert!(
                    warning.contains("about 64")
                        && warning.contains(&format!("up to {}", limit + 1)),
                    "{warning}"
                );
            }
            other => panic!("{other:?}"),
        }
        let err = check_fds(limit + 1, limit + 2).unwrap_err().to_string();
        assert!(
            err.contains(&format!("about {} open files", limit + 1))
                && err.contains(&format!("{} in the worst case", limit + 2)),
            "{err}"
        );
    }

    #[test]
    fn running_out_of_files_is_told_apart() {
        let emfile = std::io::Error::from_raw_os_error(24).to_string();
        assert!(is_out_of_files(&emfile), "{emfile}");
        assert!(!is_out_of_files("Connection refused (os error 111)"));
        assert!(out_of_files_note(0).is_none());
        assert!(out_of_files_note(3).unwrap().contains("open files"));
    }
}
