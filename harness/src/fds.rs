//! Open files: the run predicts the sockets it will hold and refuses to
//! start when the limit cannot cover them.

/// File descriptors the run will hold, by Little's law: people in flight
/// at the peak (peak arrival rate × patience, the longest a person holds a
/// connection) on both sides of the gateway (the load's sockets and the
/// provider's), with half again as margin, plus the harness's own files.
pub fn predicted_fds(peak_per_s: f64, patience_s: f64) -> u64 {
    (peak_per_s * patience_s * 2.0 * 1.5).ceil() as u64 + 256
}

/// Raises the soft limit on open files to the hard limit, and says whether
/// `needed` then fits. Returns the limit in force.
pub fn ensure_fds(needed: u64) -> Result<u64, String> {
    use nix::sys::resource::{getrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)
        .map_err(|e| format!("cannot read the open-files limit: {e}"))?;
    // Where the limit cannot be raised, the one in force is all there is.
    let soft = wire::raise_open_files_limit().unwrap_or(soft);
    if soft < needed {
        return Err(format!(
            "this run needs about {needed} open files (peak arrivals x patience, both sides of the gateway) but the limit is {soft} (hard limit {hard}); raise it (ulimit -n) or lower the scenario's rate or time scale"
        ));
    }
    Ok(soft)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_descriptors_are_predicted_and_checked() {
        // 40 requests/s held up to 30 s, both sides, +50%, +256.
        assert_eq!(predicted_fds(40.0, 30.0), 3856);
        let limit = ensure_fds(64).unwrap();
        assert!(limit >= 64);
        let err = ensure_fds(u64::MAX / 2).unwrap_err();
        assert!(err.contains("open files"), "{err}");
    }
}
