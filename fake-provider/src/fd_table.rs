//! Sizing the process's file-descriptor table once, up front.
//!
//! Linux grows a process's descriptor table by doubling as descriptors are
//! opened (at 256, 512, 1,024, ... open files), and when the process has
//! more than one thread each growth waits for an RCU grace period before
//! it returns. Every thread that opens a socket meanwhile waits too: a
//! stall of 10 to 20 ms at each doubling. Holding 10,000 connections meant
//! six such stalls. The calls accepted during them arrived together
//! afterwards and came back together 12 s later, and that put the
//! provider's timer error over 2 ms at the 99th percentile (BENCHMARKS.md).
//! A table sized before any thread starts grows without waiting, and not
//! again below [`PRESIZE_MAX`] descriptors.

/// The most descriptors the table is sized for up front (a table of
/// 65,536 costs half a megabyte of kernel memory).
const PRESIZE_MAX: u64 = 65_536;

/// Raises the soft open-files limit to the hard limit, then sizes the
/// descriptor table for that many (at most 65,536) by placing a copy of
/// stderr at the top and closing it again. Call it first thing in `main`,
/// before any thread starts. Returns the table size reached, or `None`
/// where that could not be done (the limit may have been raised anyway;
/// stderr may be closed). Either way the process works; only the stalls
/// come back.
///
/// ```
/// if let Some(size) = fake_provider::presize_fd_table() {
///     assert!(size >= 1);
/// }
/// ```
pub fn presize_fd_table() -> Option<u64> {
    #[cfg(target_os = "linux")]
    // SAFETY: getrlimit/setrlimit write only to `lim`, which outlives the
    // calls; dup2 places a copy of stderr on a descriptor number that is
    // free (it is at the limit, above any descriptor this process opened
    // before its threads started) and close removes that copy again.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return None;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        let size = lim.rlim_cur.min(PRESIZE_MAX);
        let top = size.checked_sub(1)? as libc::c_int;
        if libc::fcntl(top, libc::F_GETFD) != -1 {
            // Already open (not ours to close): the table is that big anyway.
            return Some(size);
        }
        if libc::dup2(2, top) != top {
            return None;
        }
        libc::close(top);
        Some(size)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
