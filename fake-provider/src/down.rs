//! A provider that goes away and comes back, as an inference worker whose
//! process dies or stops does: the timeline's `down` phases.
//!
//! One task (the server's `follow_down`) follows the timeline (and the admin API's pins and
//! resets, which wake it) and says whether the provider is down now. When a
//! down phase begins, every open connection is cut (SO_LINGER 0: the peer
//! sees a reset) and the calls in them are recorded as the provider ended
//! them (`reset`, or `hang` for a call already hanging), not as hang-ups.
//! In a `refuse` phase the accept loop closes its listener (connections
//! are refused) and listens again on the same port when it ends; in a
//! `hang` phase connections are accepted and requests read but nothing is
//! answered, and when it ends those connections are cut too (the worker
//! restarted).

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::config::Down;

const UP: u8 = 0;
const REFUSE: u8 = 1;
const HANG: u8 = 2;

/// Whether the provider is down, shared by the accept loop, the
/// connections and the calls.
pub(crate) struct DownState {
    /// [`UP`], [`REFUSE`] or [`HANG`]: one load on a call's path.
    now: AtomicU8,
    tx: watch::Sender<Option<Down>>,
    /// Woken when the phases in force may have changed other than by the
    /// clock (a pin, overrides, a reset).
    pub(crate) changed: Notify,
    /// Bumped at each cut: a call that began before a cut and did not end
    /// by itself was cut.
    epoch: AtomicU64,
    /// Cancelled at a cut; each connection holds the one current when it
    /// was accepted.
    cut: Mutex<CancellationToken>,
}

impl Default for DownState {
    fn default() -> Self {
        DownState {
            now: AtomicU8::new(UP),
            tx: watch::Sender::new(None),
            changed: Notify::new(),
            epoch: AtomicU64::new(0),
            cut: Mutex::new(CancellationToken::new()),
        }
    }
}

impl DownState {
    /// A `hang` phase is in force: calls are held, never answered.
    pub(crate) fn hanging(&self) -> bool {
        self.now.load(Ordering::Relaxed) == HANG
    }

    /// A `refuse` phase is in force: no connection is taken.
    pub(crate) fn refusing(&self) -> bool {
        self.now.load(Ordering::Relaxed) == REFUSE
    }

    /// The cuts so far.
    pub(crate) fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    /// What a connection accepted now waits on to be cut.
    pub(crate) fn connection_token(&self) -> CancellationToken {
        self.cut.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Follows whether the provider is down (the accept loop's view).
    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<Down>> {
        self.tx.subscribe()
    }

    pub(crate) fn set(&self, down: Option<Down>) {
        let code = match down {
            None => UP,
            Some(Down::Refuse) => REFUSE,
            Some(Down::Hang) => HANG,
        };
        self.now.store(code, Ordering::Relaxed);
        self.tx.send_replace(down);
    }

    /// Cuts every connection open now.
    pub(crate) fn cut_all(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        let old = std::mem::take(&mut *self.cut.lock().unwrap_or_else(|e| e.into_inner()));
        old.cancel();
    }
}

/// The down mode of the phases in `mask` of `timeline`: `refuse` over
/// `hang` when both are in force.
pub(crate) fn down_of(timeline: &[crate::config::Phase], mask: u64) -> Option<Down> {
    let modes = timeline
        .iter()
        .enumerate()
        .filter(|(i, _)| mask & (1 << i) != 0)
        .filter_map(|(_, p)| p.down);
    modes.reduce(|a, b| if a == Down::Refuse { a } else { b })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ProviderConfig;

    #[test]
    fn refuse_wins_over_hang_and_no_phase_is_up() {
        let c = ProviderConfig::from_toml(
            "[[timeline]]\nname = \"a\"\nfrom = \"1s\"\ndown = \"hang\"\n[[timeline]]\nname = \"b\"\nfrom = \"1s\"\ndown = \"refuse\"\n[[timeline]]\nname = \"c\"\nfrom = \"1s\"\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(down_of(&c.timeline, 0), None);
        assert_eq!(down_of(&c.timeline, 0b100), None);
        assert_eq!(down_of(&c.timeline, 0b101), Some(Down::Hang));
        assert_eq!(down_of(&c.timeline, 0b111), Some(Down::Refuse));
        assert_eq!(down_of(&c.timeline, 0b011), Some(Down::Refuse));
    }

    #[test]
    fn a_cut_cancels_the_connections_before_it_only() {
        let d = DownState::default();
        let before = d.connection_token();
        let e = d.epoch();
        d.cut_all();
        let after = d.connection_token();
        assert!(before.is_cancelled());
        assert!(!after.is_cancelled());
        assert_eq!(d.epoch(), e + 1);
        d.set(Some(Down::Hang));
        assert!(d.hanging() && !d.refusing());
        d.set(None);
        assert!(!d.hanging() && !d.refusing());
    }
}
