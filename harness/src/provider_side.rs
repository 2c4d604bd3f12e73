//! Where the run's fake provider is (`rehearse run --provider`): started
//! in this process (the default), or already serving at a URL and driven
//! through its admin API ([`crate::remote`]).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fake_provider::{FakeProvider, ProviderConfig, ProviderHandle};
use wire::files;

use crate::error::RunError;
use crate::remote::{ClockOffset, RemoteProvider, Reset};

/// `--provider`: where the fake provider is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ProviderChoice {
    /// Started in this process, listening on `--provider-listen`.
    #[default]
    InProcess,
    /// A `rehearse provider` already serving at this base URL, driven
    /// through its admin API (token from `REHEARSE_PROVIDER_TOKEN`).
    Url(String),
    /// No fake provider: the gateway (`--target`) calls its own upstream,
    /// a real provider, and the run is judged from the client side and the
    /// gateway's metrics.
    External,
}

impl std::str::FromStr for ProviderChoice {
    type Err = String;

    /// `in-process`, `external`, or an `http://` / `https://` URL.
    fn from_str(s: &str) -> Result<ProviderChoice, String> {
        match s {
            "in-process" => Ok(ProviderChoice::InProcess),
            u if u.starts_with("http://") || u.starts_with("https://") => {
                Ok(ProviderChoice::Url(u.trim_end_matches('/').to_string()))
            }
            "external" => Ok(ProviderChoice::External),
            other => Err(format!(
                "{other:?}: --provider is in-process, external, or the URL of a rehearse provider"
            )),
        }
    }
}

/// Round trips per clock-offset measurement.
const OFFSET_ROUNDS: usize = 8;

/// How far ahead of now the load and a remote provider's timeline start,
/// so both can be ready (the reset travels, the load probes its target).
const REMOTE_LEAD: Duration = Duration::from_secs(2);

/// The run's provider.
pub(crate) enum ProviderSide {
    Local(ProviderHandle),
    /// None the harness sees: the gateway's own upstream.
    External,
    Remote {
        remote: RemoteProvider,
        before: ClockOffset,
        /// When the load and the provider's timeline start (our clock).
        start_at: SystemTime,
        /// The run it holds the provider's lease for.
        run_id: String,
    },
}

impl ProviderSide {
    /// True if and only if the provider runs in this process.
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, ProviderSide::Local(_))
    }

    /// Starts the in-process provider (writing its records into `out`), or
    /// readies the remote one: clock offset, the provider table uploaded,
    /// a reset whose timeline starts with the load (over `https://`, its
    /// certificate checked as `tls` says).
    pub(crate) async fn start(
        choice: &ProviderChoice,
        tls: &loadgen::TlsOptions,
        config: &ProviderConfig,
        listen: &str,
        out: &Path,
        run_id: &str,
        lease: Duration,
    ) -> Result<ProviderSide, RunError> {
        match choice {
            ProviderChoice::External => Ok(ProviderSide::External),
            ProviderChoice::InProcess => {
                let handle = FakeProvider::new(config.clone())
                    .record_to(out.join(files::PROVIDER_RECORDS))
                    .bind(listen)
                    .await
                    .map_err(|source| RunError::ProviderListen {
                        listen: listen.to_string(),
                        source,
                    })?;
                Ok(ProviderSide::Local(handle))
            }
            ProviderChoice::Url(url) => {
                let remote = RemoteProvider::new(url).trusting(tls);
                let before = remote.clock_offset(OFFSET_ROUNDS).await?;
                let version = remote.upload_config(config).await?;
                let start_at = SystemTime::now() + REMOTE_LEAD;
                let ours_ms = start_at
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                remote
                    .reset(&Reset {
                        run_id: run_id.to_string(),
                        start_at_unix_ms: Some((ours_ms + before.offset_us / 1000).max(0) as u64),
                        lease_s: lease.as_secs().max(60),
                        force: false,
                        config_version: version,
                    })
                    .await?;
                Ok(ProviderSide::Remote {
                    remote,
                    before,
                    start_at,
                    run_id: run_id.to_string(),
                })
            }
        }
    }

    /// The base URL the gateway calls.
    pub(crate) fn base_url(&self) -> String {
        match self {
            ProviderSide::External => "external".to_string(),
            ProviderSide::Local(h) => h.base_url(),
            ProviderSide::Remote { remote, .. } => remote.base_url().to_string(),
        }
    }

    /// When the load must start, agreed with a remote provider's timeline.
    pub(crate) fn start_at(&self) -> Option<SystemTime> {
        match self {
            ProviderSide::Local(_) | ProviderSide::External => None,
            ProviderSide::Remote { start_at, .. } => Some(*start_at),
        }
    }

    /// Its calls in flight (a remote provider that cannot be asked: 0).
    pub(crate) async fn in_flight(&self) -> u64 {
        match self {
            ProviderSide::External => 0,
            ProviderSide::Local(h) => h.stats().in_flight,
            ProviderSide::Remote { remote, .. } => remote.in_flight().await.unwrap_or(0),
        }
    }

    /// Ends the provider's part: the in-process one shut down (its records
    /// are in `out` already), the remote one's records fetched into `out`
    /// on our clock, with a note of the offset. Returns the offset used.
    pub(crate) async fn finish(self, out: &Path, notes: &mut Vec<String>) -> Option<ClockOffset> {
        match self {
            ProviderSide::External => {
                // No provider records: an empty file, so the run directory
                // reads as every other.
                let _ = std::fs::File::create(out.join(files::PROVIDER_RECORDS));
                notes.push("provider: external (the gateway's own upstream); the harness saw no provider call, so the run is judged from the client's records and the gateway's metrics".into());
                None
            }
            ProviderSide::Local(h) => {
                h.shutdown().await;
                None
            }
            ProviderSide::Remote {
                remote,
                before,
                run_id,
                ..
            } => {
                let after = match remote.clock_offset(OFFSET_ROUNDS).await {
                    Ok(a) => a,
                    Err(e) => {
                        notes.push(format!("the provider's clock could not be read after the run ({e}); its offset from before is used"));
                        before
                    }
                };
                let offset = ClockOffset::mean(before, after);
                let path = out.join(files::PROVIDER_RECORDS);
                match remote.fetch_records(&path, offset).await {
                    Ok(n) => notes.push(format!(
                        "the fake provider at {}: {n} call records fetched; its clock is {:+.1} ms from ours (± {:.1} ms; {:+.1} ms before the run, {:+.1} ms after), and its record times were moved onto ours by it",
                        remote.base_url(),
                        offset.offset_us as f64 / 1000.0,
                        offset.uncertainty_us as f64 / 1000.0,
                        before.offset_us as f64 / 1000.0,
                        after.offset_us as f64 / 1000.0,
                    )),
                    Err(e) => {
                        notes.push(format!(
                            "the fake provider's records could not be fetched ({e}): the run is judged without them"
                        ));
                        if !path.exists() {
                            let _ = std::fs::File::create(&path);
                        }
                    }
                }
                if let Err(e) = remote.release(&run_id).await {
                    notes.push(format!(
                        "the provider's lease could not be given back ({e}): it expires by itself"
                    ));
                }
                Some(offset)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_choices_read_and_refuse_with_the_reason() {
        assert_eq!("in-process".parse(), Ok(ProviderChoice::InProcess));
        assert_eq!(
            "http://10.0.0.2:8080/".parse(),
            Ok(ProviderChoice::Url("http://10.0.0.2:8080".into()))
        );
        assert_eq!("external".parse(), Ok(ProviderChoice::External));
        assert!("ftp://x"
            .parse::<ProviderChoice>()
            .unwrap_err()
            .contains("in-process"));
    }
}
