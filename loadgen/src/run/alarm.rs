//! A timer with the OS's resolution that the runtime's own I/O driver
//! waits on: a Linux `timerfd`, read through tokio's `AsyncFd`.
//!
//! Why: the schedule needs wake-ups accurate to tens of microseconds, and
//! tokio's timer wheel has millisecond ticks and rounds each deadline up
//! (about a millisecond of send lag on every arrival). The dispatcher used
//! to sleep on a thread of its own for that, at real-time priority, and
//! hand each person over with a spawn from outside the runtime: at 50,000
//! arrivals a second that thread took 13% of the core, in its wake-ups, the
//! two context switches of each and the runtime's injection queue, and it
//! preempted the worker 4,000 times a second. A timerfd wakes the worker's
//! own `epoll_wait` instead, and persons are spawned from inside the
//! runtime onto its local queue.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A one-shot timer; [`Alarm::sleep`] arms it and waits for it.
pub(crate) struct Alarm {
    fd: AsyncFd<OwnedFd>,
}

impl Alarm {
    /// A timer on the monotonic clock (the clock of `Instant`), registered
    /// with the runtime of the calling task.
    pub(crate) fn new() -> io::Result<Alarm> {
        // SAFETY: timerfd_create takes no pointers; a negative result is an
        // error, anything else a new descriptor that we own from here on.
        let raw = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor just made and owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: an OwnedFd's descriptor stays open, and the same, for
        // as long as the AsyncFd owns it (nothing here hands it out).
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(io::Error::from)?;
        Ok(Alarm { fd })
    }

    /// Waits `d` (nothing for zero).
    pub(crate) async fn sleep(&self, d: Duration) -> io::Result<()> {
        if d.is_zero() {
            return Ok(());
        }
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: d.as_secs().try_into().unwrap_or(libc::time_t::MAX),
                tv_nsec: d.subsec_nanos().into(),
            },
        };
        // SAFETY: `spec` outlives the call; the old value is not asked for.
        let rc =
            unsafe { libc::timerfd_settime(self.fd.as_raw_fd(), 0, &spec, std::ptr::null_mut()) };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        loop {
            let mut ready = self.fd.readable().await?;
            // Reading the expiry count disarms the readiness; before the
            // timer fires the read says WouldBlock and the wait goes on.
            let read = ready.try_io(|fd| {
                let mut expirations = 0u64;
                // SAFETY: reads at most 8 bytes into a u64 that outlives the call.
                let n = unsafe {
                    libc::read(
                        fd.as_raw_fd(),
                        std::ptr::addr_of_mut!(expirations).cast(),
                        std::mem::size_of::<u64>(),
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match read {
                Ok(result) => {
                    // Read: nothing more until the next expiry, so the
                    // readiness is cleared now, or the next sleep would
                    // find it set and spend a read that says WouldBlock.
                    ready.clear_ready();
                    return result;
                }
                Err(_would_block) => continue,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[tokio::test]
    async fn an_alarm_wakes_after_its_time_and_again() {
        let alarm = Alarm::new().unwrap();
        for wait in [
            Duration::from_micros(300),
            Duration::from_millis(3),
            Duration::ZERO,
        ] {
            let began = Instant::now();
            alarm.sleep(wait).await.unwrap();
            let took = began.elapsed();
            assert!(took >= wait, "{took:?} < {wait:?}");
            assert!(took < wait + Duration::from_millis(500), "{took:?}");
        }
    }
}
