//! The open-files limit and the descriptor table, set once per process.
//!
//! Every outstanding request holds a socket, at the load generator, at the
//! gateway and at the provider; the usual soft limit of 1,024 open files
//! caps an open loop long before the target does. So each process that
//! holds many sockets raises its soft limit to the hard limit first
//! ([`raise_open_files_limit`]).
//!
//! And sizes its descriptor table ([`presize_fd_table`]): Linux grows a
//! process's table by doubling as descriptors are opened (at 256, 512,
//! 1,024, ... open files), and when the process has more than one thread
//! each growth waits for an RCU grace period before it returns. Every
//! thread that opens a socket meanwhile waits too: a stall of 10 to 20 ms at
//! each doubling. Holding 10,000 connections meant six such stalls. The
//! calls accepted during them arrived together afterwards and came back
//! together 12 s later, and that put the provider's timer error over 2 ms
//! at the 99th percentile (BENCHMARKS.md). A table sized before any thread
//! starts grows without waiting, and not again below [`PRESIZE_MAX`]
//! descriptors.
//!
//! Both are process-wide changes: the binary calls them, first thing; the
//! libraries never do.

/// The most descriptors the table is sized for up front (a table of
/// 65,536 costs half a megabyte of kernel memory).
pub const PRESIZE_MAX: u64 = 65_536;

/// Raises this process's soft limit on open files to its hard limit, and
/// returns the new soft limit.
///
/// ```
/// let soft = wire::raise_open_files_limit().expect("getrlimit works here");
/// assert!(soft >= 1);
/// ```
pub fn raise_open_files_limit() -> std::io::Result<u64> {
    let mut lim = limits()?;
    if lim.rlim_cur < lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit only reads the struct passed, which outlives the call.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    // rlim_t is u64 here but not on every platform.
    #[allow(clippy::unnecessary_cast)]
    Ok(lim.rlim_cur as u64)
}

/// Raises the soft open-files limit to the hard limit
/// ([`raise_open_files_limit`]), then sizes the descriptor table for that
/// many (at most [`PRESIZE_MAX`]) by placing a copy of stderr at the top
/// and closing it again. Call it first thing in `main`, before any thread
/// starts. Returns the table size reached, or `None` where that could not
/// be done (the limit may have been raised anyway; stderr may be closed).
/// Either way the process works; only the stalls come back.
///
/// ```
/// if let Some(size) = wire::presize_fd_table() {
///     assert!(size >= 1);
/// }
/// ```
pub fn presize_fd_table() -> Option<u64> {
    let soft = match raise_open_files_limit() {
        Ok(soft) => soft,
        // Not allowed to raise it: size the table for the limit in force.
        Err(_) => limits().ok()?.rlim_cur,
    };
    // rlim_t is u64 here but not on every platform.
    #[allow(clippy::unnecessary_cast)]
    presize_to(soft as u64)
}

fn limits() -> std::io::Result<libc::rlimit> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct passed, which outlives the call.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(lim)
}

#[cfg(target_os = "linux")]
fn presize_to(limit: u64) -> Option<u64> {
    let size = limit.min(PRESIZE_MAX);
    let top = libc::c_int::try_from(size.checked_sub(1)?).ok()?;
    // SAFETY: dup2 places a copy of stderr on a descriptor number that is
    // free (it is at the limit, above any descriptor this process opened
    // before its threads started) and close removes that copy again;
    // F_GETFD only reads a descriptor's flags.
    unsafe {
        if libc::fcntl(top, libc::F_GETFD) != -1 {
            // Already open (not ours to close): the table is that big anyway.
            return Some(size);
        }
        if libc::dup2(2, top) != top {
            return None;
        }
        libc::close(top);
    }
    Some(size)
}

#[cfg(not(target_os = "linux"))]
fn presize_to(_limit: u64) -> Option<u64> {
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soft_and_hard() -> (u64, u64) {
        let lim = limits().unwrap();
        #[allow(clippy::unnecessary_cast)]
        (lim.rlim_cur as u64, lim.rlim_max as u64)
    }

    #[test]
    fn open_files_limit_goes_up_to_the_hard_limit() {
        let raised = raise_open_files_limit().unwrap();
        let (soft, hard) = soft_and_hard();
        assert_eq!(raised, soft);
        assert_eq!(soft, hard);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn sizes_the_table_and_leaves_no_descriptor_open() {
        let size = presize_fd_table().expect("the OS allows it here");
        assert!(size >= 1);
        let top = (size - 1) as libc::c_int;
        // SAFETY: F_GETFD only reads the descriptor's flags.
        assert_eq!(unsafe { libc::fcntl(top, libc::F_GETFD) }, -1);
        // The table really is that big: /proc shows the slot count the
        // kernel allocated, at least `size`.
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let fdsize: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("FDSize:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("FDSize in /proc/self/status");
        assert!(fdsize >= size, "FDSize {fdsize} < {size}");
        // And the soft limit was raised on the way.
        let (soft, hard) = soft_and_hard();
        assert_eq!(soft, hard);
    }
}
