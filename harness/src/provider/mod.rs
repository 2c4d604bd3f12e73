//! Where the run's fake provider is (`rehearse run --provider`): started
//! in this process (the default), or already serving at a URL and driven
//! through its admin API ([`crate::provider::remote`]).
//!
//! One type says where: [`ProviderChoice`], from the user's choice to the
//! run, the in-process address included. The rest are what a run makes of
//! it: [`ProviderSide`], the providers started (or readied) for one run;
//! `ProviderUrls`, their base URLs by name as a gateway is told them; and
//! `RemoteProvider`, the client of a remote one's admin API.
//!
//! The rooms beside this one:
//! - `urls`: the providers' base URLs by name, as a gateway under test is told them;
//! - `remote`: a provider the harness did not start, driven through its admin API.

pub mod remote;
pub(crate) mod urls;

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fake_provider::{FakeProvider, ProviderConfig, ProviderHandle};
use wire::files;

use crate::error::RunError;
use crate::host::Input;
use crate::provider::remote::{ClockOffset, RemoteProvider, Reset};
use crate::provider::urls::ProviderUrls;

/// Where the run's fake providers are: the one type that says it, from the
/// user's choice to the run ([`ProviderSide`] is them started, and
/// [`ProviderUrls`] the base URLs a gateway is told).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderChoice {
    /// Started in this process, listening at `listen` (the first; each
    /// provider after it on the next port). `None`: a free port on
    /// loopback, or for a gateway already running 127.0.0.1:8080 or the
    /// next free port (an address a person writes once into its config).
    InProcess {
        /// The address asked for.
        listen: Option<String>,
    },
    /// `rehearse provider`s already serving, each driven through its
    /// admin API (token from `REHEARSE_PROVIDER_TOKEN`): one base URL per
    /// scenario provider (`--provider URL` for a scenario's one provider,
    /// `--provider NAME=URL` for each of several).
    Urls(Vec<ProviderAt>),
    /// No fake provider: the gateway (`--target`) calls its own upstream,
    /// a real provider, and the run is judged from the client side and the
    /// gateway's metrics.
    External,
}

/// A remote provider's base URL, for the scenario's provider `name`
/// (`None`: its only one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderAt {
    /// The scenario provider it plays, as `--provider NAME=URL` names it.
    pub name: Option<String>,
    /// Its base URL, without a trailing `/`.
    pub url: String,
}

impl ProviderChoice {
    /// In this process, on the default address.
    pub const IN_PROCESS: ProviderChoice = ProviderChoice::InProcess { listen: None };

    /// Where the in-process providers listen, for a run whose gateway is
    /// already running (`for_target`) or started by the harness; `None`
    /// for providers not in this process.
    pub(crate) fn listen(&self, for_target: bool) -> Option<ProviderListen> {
        match self {
            ProviderChoice::InProcess { listen } => Some(ProviderListen::of(listen, for_target)),
            _ => None,
        }
    }
}

impl Default for ProviderChoice {
    fn default() -> Self {
        ProviderChoice::IN_PROCESS
    }
}

impl std::str::FromStr for ProviderChoice {
    type Err = String;

    /// `in-process`, `external`, an `http://` / `https://` URL, or
    /// `NAME=URL` (one `--provider` flag), or several `NAME=URL` in one
    /// value, comma-separated (one ConfigMap key for a Job's flag).
    fn from_str(s: &str) -> Result<ProviderChoice, String> {
        if s.contains(',') {
            let mut all = Vec::new();
            for part in s.split(',').map(str::trim) {
                match part.parse::<ProviderChoice>()? {
                    ProviderChoice::Urls(urls) if urls.iter().all(|u| u.name.is_some()) => {
                        all.extend(urls)
                    }
                    _ => {
                        return Err(format!(
                            "{part:?} in {s:?}: several providers in one {} are NAME=URL each, comma-separated", Input::Provider
                        ))
                    }
                }
            }
            return Ok(ProviderChoice::Urls(all));
        }
        let is_url = |u: &str| u.starts_with("http://") || u.starts_with("https://");
        let at = |name: Option<&str>, u: &str| {
            ProviderChoice::Urls(vec![ProviderAt {
                name: name.map(str::to_string),
                url: u.trim_end_matches('/').to_string(),
            }])
        };
        match s {
            "in-process" => Ok(ProviderChoice::IN_PROCESS),
            u if is_url(u) => Ok(at(None, u)),
            "external" => Ok(ProviderChoice::External),
            other => match other.split_once('=') {
                Some((name, u)) if wire::is_provider_name(name) && is_url(u) => Ok(at(Some(name), u)),
                Some((name, _)) if !wire::is_provider_name(name) => Err(format!(
                    "{name:?}: a provider's name is 1 to 64 of a-z, 0-9, _ and - ({} NAME=URL)", Input::Provider
                )),
                _ => Err(format!(
                    "{other:?}: {} is in-process, external, the URL of a rehearse provider, or NAME=URL (one for each of the scenario's providers)", Input::Provider
                )),
            },
        }
    }
}

impl ProviderChoice {
    /// The `--provider` flags given, as one choice: none is in-process;
    /// `in-process` or `external` alone; else every flag a URL, together.
    ///
    /// ```
    /// use harness::ProviderChoice;
    /// let flags = ["a=http://h:1", "b=http://h:2"].map(|f| f.parse().unwrap());
    /// let ProviderChoice::Urls(urls) = ProviderChoice::combine(flags.to_vec()).unwrap() else { panic!() };
    /// assert_eq!(urls.len(), 2);
    /// assert_eq!(ProviderChoice::combine(Vec::new()), Ok(ProviderChoice::IN_PROCESS));
    /// let mixed = ["external", "http://h:1"].map(|f| f.parse().unwrap());
    /// assert!(ProviderChoice::combine(mixed.to_vec()).is_err());
    /// ```
    pub fn combine(flags: Vec<ProviderChoice>) -> Result<ProviderChoice, String> {
        if flags.len() <= 1 {
            return Ok(flags.into_iter().next().unwrap_or_default());
        }
        let mut all = Vec::new();
        for f in flags {
            match f {
                ProviderChoice::Urls(urls) => all.extend(urls),
                other => {
                    return Err(format!(
                        "{} {}: given with other {} values (several are NAME=URL, one for each provider)",
                        Input::Provider,
                        if other == ProviderChoice::External { "external" } else { "in-process" },
                        Input::Provider
                    ))
                }
            }
        }
        Ok(ProviderChoice::Urls(all))
    }

    /// The remote providers `flags` give, in order: each flag a URL,
    /// `NAME=URL` or several of those comma-separated (no flag: none);
    /// `in-process` or `external` among them is an error saying so.
    ///
    /// ```
    /// use harness::ProviderChoice;
    /// let flags = ["a=http://h:1,b=http://h:2", "c=http://h:3"].map(|f| f.parse().unwrap());
    /// assert_eq!(ProviderChoice::urls_of(flags.to_vec()).unwrap().len(), 3);
    /// assert!(ProviderChoice::urls_of(Vec::new()).unwrap().is_empty());
    /// assert!(ProviderChoice::urls_of(vec!["external".parse().unwrap()]).is_err());
    /// ```
    pub fn urls_of(flags: Vec<ProviderChoice>) -> Result<Vec<ProviderAt>, String> {
        let mut all = Vec::new();
        for f in flags {
            match f {
                ProviderChoice::Urls(urls) => all.extend(urls),
                _ => {
                    return Err(
                        "is the URL of a rehearse provider, or NAME=URL for each of several".into(),
                    )
                }
            }
        }
        Ok(all)
    }

    /// The URL of each of the scenario's providers (`names`, in its
    /// order), as `urls` gives them: one unnamed URL for a scenario of one
    /// provider, else each name exactly once. Says what is wrong otherwise.
    pub(crate) fn match_names(
        urls: &[ProviderAt],
        names: &[&str],
    ) -> Result<Vec<(String, String)>, String> {
        if let [ProviderAt { name: None, url }] = urls {
            if let [only] = names {
                return Ok(vec![(only.to_string(), url.clone())]);
            }
        }
        let listed = names.join(", ");
        let mut out = Vec::new();
        for name in names {
            let mut given = urls.iter().filter(|u| u.name.as_deref() == Some(*name));
            match (given.next(), given.next()) {
                (Some(at), None) => out.push((name.to_string(), at.url.clone())),
                (None, _) => {
                    return Err(format!(
                        "no URL for provider {name:?}: give {} NAME=URL for each of the scenario's providers ({listed})", Input::Provider
                    ))
                }
                (Some(_), Some(_)) => return Err(format!("provider {name:?} is given twice")),
            }
        }
        if let Some(extra) = urls
            .iter()
            .find(|u| u.name.as_deref().is_none_or(|n| !names.contains(&n)))
        {
            return Err(match &extra.name {
                Some(n) => format!("{n:?}: the scenario has no provider of that name ({listed})"),
                None => format!(
                    "{}: name it ({} NAME=URL), the scenario has several providers ({listed})",
                    extra.url,
                    Input::Provider
                ),
            });
        }
        Ok(out)
    }
}

/// Where the in-process providers listen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ProviderListen {
    /// At this address (`--provider-listen`; port 0: a free one), the
    /// providers after the first on the ports after it.
    At(String),
    /// On the first free port from this address's up, each provider after
    /// the first above the one before: a gateway already running is
    /// pointed at an address a person writes once (127.0.0.1:8080 when it
    /// is free).
    FirstFree(std::net::SocketAddr),
}

/// Where the provider listens for a gateway already running, unless
/// `--provider-listen` says: a port people write into a gateway's config.
pub(crate) const TARGET_PROVIDER_LISTEN: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 8080);

/// How many ports from [`ProviderListen::FirstFree`]'s are tried.
const PORTS_TRIED: u16 = 100;

impl ProviderListen {
    /// The address asked for (`listen`), else the default for a run whose
    /// gateway is already running (`for_target`) or started by the harness.
    fn of(listen: &Option<String>, for_target: bool) -> ProviderListen {
        match (listen, for_target) {
            (Some(at), _) => ProviderListen::At(at.clone()),
            (None, true) => ProviderListen::FirstFree(TARGET_PROVIDER_LISTEN),
            (None, false) => ProviderListen::At("127.0.0.1:0".into()),
        }
    }

    /// A listener for the `i`-th provider (`after`: the port the one
    /// before it got), and the address asked for, for an error.
    async fn bind(
        &self,
        i: usize,
        after: Option<u16>,
    ) -> Result<tokio::net::TcpListener, RunError> {
        match self {
            ProviderListen::At(listen) => {
                let listen = nth_listen(listen, i);
                fake_provider::listen(&listen)
                    .await
                    .map_err(|source| RunError::ProviderListen { listen, source })
            }
            ProviderListen::FirstFree(from) => {
                let first = after.map_or(from.port(), |p| p.saturating_add(1));
                let mut last = None;
                for port in first..first.saturating_add(PORTS_TRIED) {
                    match fake_provider::listen((from.ip(), port)).await {
                        Ok(l) => return Ok(l),
                        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
                        Err(source) => {
                            return Err(RunError::ProviderListen {
                                listen: format!("{}:{port}", from.ip()),
                                source,
                            })
                        }
                    }
                }
                Err(RunError::ProviderListen {
                    listen: format!(
                        "{}, ports {first} to {} (give {} ADDR)",
                        from.ip(),
                        first.saturating_add(PORTS_TRIED - 1),
                        Input::ProviderListen
                    ),
                    source: last.unwrap_or_else(|| std::io::Error::other("no port tried")),
                })
            }
        }
    }
}

/// Round trips per clock-offset measurement.
const OFFSET_ROUNDS: usize = 8;

/// How far ahead of now the load and a remote provider's timeline start,
/// so both can be ready (the reset travels, the load probes its target).
const REMOTE_LEAD: Duration = Duration::from_secs(2);

/// One remote provider of a run.
pub(crate) struct Remote {
    /// The scenario's name for it.
    name: String,
    remote: RemoteProvider,
    /// Its clock against ours, before the run.
    before: ClockOffset,
}

/// The run's providers.
pub(crate) enum ProviderSide {
    /// Each of the scenario's, by name, in its order.
    Local(Vec<(String, ProviderHandle)>),
    /// None the harness sees: the gateway's own upstream.
    External,
    Remote {
        remotes: Vec<Remote>,
        /// When the load and the providers' timelines start (our clock).
        start_at: SystemTime,
        /// The run it holds the providers' leases for.
        run_id: String,
    },
}

/// Where provider `name`'s records go before they are merged into
/// `provider.jsonl` (a run of several providers).
fn part_path(out: &Path, name: &str) -> PathBuf {
    out.join(format!("provider-{name}.jsonl"))
}

/// The address the `i`-th in-process provider listens on: `listen` for
/// the first, the ports after it for the others (port 0: each a free one).
fn nth_listen(listen: &str, i: usize) -> String {
    match listen.rsplit_once(':').map(|(h, p)| (h, p.parse::<u16>())) {
        Some((host, Ok(port))) if port != 0 && i > 0 => {
            format!("{host}:{}", usize::from(port) + i)
        }
        _ => listen.to_string(),
    }
}

impl ProviderSide {
    /// True if and only if the providers run in this process.
    pub(crate) fn is_local(&self) -> bool {
        matches!(self, ProviderSide::Local(_))
    }

    /// Starts the in-process providers (writing their records into
    /// `out`: `provider.jsonl` for one, a part each to be merged into it
    /// for several), or readies the remote ones: clock offset, the
    /// provider table uploaded, a reset whose timeline starts with the
    /// load (over `https://`, its certificate checked as `tls` says).
    /// `for_target`: the gateway is already running (an in-process
    /// provider with no address of its own then listens where a person
    /// can point the gateway once, 127.0.0.1:8080 or the next free port).
    pub(crate) async fn start(
        choice: &ProviderChoice,
        tls: &loadgen::TlsOptions,
        configs: &[ProviderConfig],
        for_target: bool,
        out: &Path,
        run_id: &str,
        lease: Duration,
    ) -> Result<ProviderSide, RunError> {
        let names: Vec<&str> = configs
            .iter()
            .map(ProviderConfig::name_or_default)
            .collect();
        match choice {
            ProviderChoice::External => Ok(ProviderSide::External),
            ProviderChoice::InProcess { listen } => {
                let listen = ProviderListen::of(listen, for_target);
                let mut handles: Vec<(String, ProviderHandle)> = Vec::new();
                for (i, config) in configs.iter().enumerate() {
                    let records = match configs.len() {
                        1 => out.join(files::PROVIDER_RECORDS),
                        _ => part_path(out, names[i]),
                    };
                    let after = handles.last().map(|(_, h)| h.addr().port());
                    let listener = listen.bind(i, after).await?;
                    let at = listener
                        .local_addr()
                        .map_or_else(|_| "?".into(), |a| a.to_string());
                    let handle = FakeProvider::new(config.clone())
                        .record_to(records)
                        .serve(listener)
                        .map_err(|source| RunError::ProviderListen { listen: at, source })?;
                    handles.push((names[i].to_string(), handle));
                }
                Ok(ProviderSide::Local(handles))
            }
            ProviderChoice::Urls(urls) => {
                let urls = ProviderChoice::match_names(urls, &names)
                    .map_err(|m| RunError::flag(Input::Provider, m))?;
                let start_at = SystemTime::now() + REMOTE_LEAD;
                let ours_ms = start_at
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as i64);
                let mut remotes = Vec::new();
                for ((name, url), config) in urls.into_iter().zip(configs) {
                    let remote = RemoteProvider::new(&url).trusting(tls);
                    let before = remote.clock_offset(OFFSET_ROUNDS).await?;
                    let version = remote.upload_config(config).await?;
                    remote
                        .reset(&Reset {
                            run_id: run_id.to_string(),
                            start_at_unix_ms: Some(
                                (ours_ms + before.offset_us / 1000).max(0) as u64
                            ),
                            lease_s: lease.as_secs().max(60),
                            force: false,
                            config_version: version,
                        })
                        .await?;
                    remotes.push(Remote {
                        name,
                        remote,
                        before,
                    });
                }
                Ok(ProviderSide::Remote {
                    remotes,
                    start_at,
                    run_id: run_id.to_string(),
                })
            }
        }
    }

    /// The base URL of each provider, by name, that the gateway calls
    /// (`--provider external`: the word `external`).
    pub(crate) fn urls(&self) -> ProviderUrls {
        let urls = match self {
            ProviderSide::External => Vec::new(),
            ProviderSide::Local(hs) => hs.iter().map(|(n, h)| (n.clone(), h.base_url())).collect(),
            ProviderSide::Remote { remotes, .. } => remotes
                .iter()
                .map(|r| (r.name.clone(), r.remote.base_url().to_string()))
                .collect(),
        };
        ProviderUrls::new(urls).unwrap_or_else(|| ProviderUrls::one("external"))
    }

    /// The first provider's base URL (`{provider_url}`).
    pub(crate) fn base_url(&self) -> String {
        self.urls().first().to_string()
    }

    /// When the load must start, agreed with remote providers' timelines.
    pub(crate) fn start_at(&self) -> Option<SystemTime> {
        match self {
            ProviderSide::Local(_) | ProviderSide::External => None,
            ProviderSide::Remote { start_at, .. } => Some(*start_at),
        }
    }

    /// What starts the in-process providers' timelines at the instant the
    /// load's schedule starts (told by the load generator, after its
    /// set-up); `None` for providers not in this process (a remote one's
    /// starts at the `start_at` its reset agreed).
    pub(crate) fn timelines_start(&self) -> Option<loadgen::OnStart> {
        let ProviderSide::Local(hs) = self else {
            return None;
        };
        let starters: Vec<_> = hs.iter().map(|(_, h)| h.timeline_starter()).collect();
        Some(loadgen::OnStart(std::sync::Arc::new(move |at| {
            for start in &starters {
                start(at);
            }
        })))
    }

    /// The calls the in-process providers have received, together, this
    /// run; `None` for providers not in this process (not watched).
    pub(crate) fn received(&self) -> Option<u64> {
        match self {
            ProviderSide::Local(hs) => Some(hs.iter().map(|(_, h)| h.stats().received).sum()),
            ProviderSide::External | ProviderSide::Remote { .. } => None,
        }
    }

    /// Their calls in flight, together (a remote provider that cannot be
    /// asked: 0).
    pub(crate) async fn in_flight(&self) -> u64 {
        match self {
            ProviderSide::External => 0,
            ProviderSide::Local(hs) => hs.iter().map(|(_, h)| h.stats().in_flight).sum(),
            ProviderSide::Remote { remotes, .. } => {
                let mut n = 0;
                for r in remotes {
                    n += r.remote.in_flight().await.unwrap_or(0);
                }
                n
            }
        }
    }

    /// Ends the providers' part: the in-process ones shut down (their
    /// records are in `out` already; several merged into one file), the
    /// remote ones' records fetched into `out` on our clock, with a note
    /// of each offset. Returns the (first provider's) offset used.
    pub(crate) async fn finish(self, out: &Path, notes: &mut Vec<String>) -> Option<ClockOffset> {
        match self {
            ProviderSide::External => {
                // No provider records: an empty file, so the run directory
                // reads as every other.
                let _ = std::fs::File::create(out.join(files::PROVIDER_RECORDS));
                notes.push("provider: external (the gateway's own upstream); the harness saw no provider call, so the run is judged from the client's records and the gateway's metrics".into());
                None
            }
            ProviderSide::Local(hs) => {
                let several = hs.len() > 1;
                let mut parts = Vec::new();
                for (name, h) in hs {
                    h.shutdown().await;
                    parts.push(part_path(out, &name));
                }
                if several {
                    merge_parts(&parts, out, notes);
                }
                None
            }
            ProviderSide::Remote {
                remotes, run_id, ..
            } => {
                let several = remotes.len() > 1;
                let mut first = None;
                let mut parts = Vec::new();
                for r in remotes {
                    let path = match several {
                        false => out.join(files::PROVIDER_RECORDS),
                        true => part_path(out, &r.name),
                    };
                    let offset = finish_remote(r, &path, &run_id, notes).await;
                    first.get_or_insert(offset);
                    parts.push(path);
                }
                if several {
                    merge_parts(&parts, out, notes);
                }
                first
            }
        }
    }
}

/// The parts merged into `out/provider.jsonl` in end order, then removed.
fn merge_parts(parts: &[PathBuf], out: &Path, notes: &mut Vec<String>) {
    let into = out.join(files::PROVIDER_RECORDS);
    match crate::run::rundir::merge_by_end(parts, &into) {
        Ok(_) => {
            for p in parts {
                let _ = std::fs::remove_file(p);
            }
        }
        Err(e) => notes.push(format!(
            "the providers' records could not be merged into {} ({e}): they are left in {}",
            into.display(),
            parts
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// One remote provider's end: its clock read again, its records fetched
/// into `path` and moved onto ours, its lease given back, all noted.
async fn finish_remote(
    r: Remote,
    path: &Path,
    run_id: &str,
    notes: &mut Vec<String>,
) -> ClockOffset {
    let Remote {
        name,
        remote,
        before,
    } = r;
    let who = match name.as_str() {
        wire::DEFAULT_PROVIDER => String::new(),
        n => format!(" ({n})"),
    };
    let after = match remote.clock_offset(OFFSET_ROUNDS).await {
        Ok(a) => a,
        Err(e) => {
            notes.push(format!("the provider{who}'s clock could not be read after the run ({e}); its offset from before is used"));
            before
        }
    };
    let offset = ClockOffset::mean(before, after);
    match remote.fetch_records(path, offset).await {
        Ok(n) => notes.push(format!(
            "the fake provider{who} at {}: {n} call records fetched; its clock is {:+.1} ms from ours (± {:.1} ms; {:+.1} ms before the run, {:+.1} ms after), and its record times were moved onto ours by it",
            remote.base_url(),
            offset.offset_us as f64 / 1000.0,
            offset.uncertainty_us as f64 / 1000.0,
            before.offset_us as f64 / 1000.0,
            after.offset_us as f64 / 1000.0,
        )),
        Err(e) => {
            notes.push(format!(
                "the fake provider{who}'s records could not be fetched ({e}): the run is judged without them"
            ));
            if !path.exists() {
                let _ = std::fs::File::create(path);
            }
        }
    }
    if let Err(e) = remote.release(run_id).await {
        notes.push(format!(
            "the provider{who}'s lease could not be given back ({e}): it expires by itself"
        ));
    }
    offset
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(name: Option<&str>, url: &str) -> ProviderAt {
        ProviderAt {
            name: name.map(str::to_string),
            url: url.into(),
        }
    }

    #[test]
    fn provider_choices_read_and_refuse_with_the_reason() {
        assert_eq!("in-process".parse(), Ok(ProviderChoice::IN_PROCESS));
        assert_eq!(
            "http://10.0.0.2:8080/".parse(),
            Ok(ProviderChoice::Urls(vec![at(None, "http://10.0.0.2:8080")]))
        );
        assert_eq!(
            "east-1=https://p.example:8443".parse(),
            Ok(ProviderChoice::Urls(vec![at(
                Some("east-1"),
                "https://p.example:8443"
            )]))
        );
        assert!("East=http://x"
            .parse::<ProviderChoice>()
            .unwrap_err()
            .contains("a-z"));
        assert!("east=ftp://x"
            .parse::<ProviderChoice>()
            .unwrap_err()
            .contains("NAME=URL"));
        assert_eq!("external".parse(), Ok(ProviderChoice::External));
        assert!("ftp://x"
            .parse::<ProviderChoice>()
            .unwrap_err()
            .contains("in-process"));
    }

    #[test]
    fn several_named_urls_read_from_one_comma_separated_value() {
        assert_eq!(
            "primary=http://p:8080, backup=http://p:8081/".parse(),
            Ok(ProviderChoice::Urls(vec![
                at(Some("primary"), "http://p:8080"),
                at(Some("backup"), "http://p:8081")
            ]))
        );
        // Every part named: an unnamed URL among several says which.
        let err = "primary=http://p:8080,http://p:8081"
            .parse::<ProviderChoice>()
            .unwrap_err();
        assert!(err.contains("\"http://p:8081\" in"), "{err}");
        assert!(err.contains("NAME=URL each"), "{err}");
        // A bad part keeps its own reason; an empty part is refused.
        assert!("a=http://p:1,B=http://p:2"
            .parse::<ProviderChoice>()
            .unwrap_err()
            .contains("a-z"));
        assert!("a=http://p:1,"
            .parse::<ProviderChoice>()
            .unwrap_err()
            .contains("in-process"));
        assert!("external,a=http://p:1"
            .parse::<ProviderChoice>()
            .unwrap_err()
            .contains("\"external\" in"));
        // A list and a repeated flag combine alike.
        let flags = ["a=http://p:1,b=http://p:2", "c=http://p:3"].map(|f| f.parse().unwrap());
        let ProviderChoice::Urls(urls) = ProviderChoice::combine(flags.to_vec()).unwrap() else {
            panic!("urls")
        };
        assert_eq!(urls.len(), 3);
    }

    #[test]
    fn remote_urls_are_matched_to_the_scenarios_providers_by_name() {
        let one = [at(None, "http://h:1")];
        assert_eq!(
            ProviderChoice::match_names(&one, &["default"]).unwrap(),
            [("default".to_string(), "http://h:1".to_string())]
        );
        let err = ProviderChoice::match_names(&one, &["a", "b"]).unwrap_err();
        assert!(err.contains("no URL for provider \"a\""), "{err}");
        let two = [at(Some("b"), "http://h:2"), at(Some("a"), "http://h:1")];
        assert_eq!(
            ProviderChoice::match_names(&two, &["a", "b"]).unwrap(),
            [
                ("a".to_string(), "http://h:1".to_string()),
                ("b".to_string(), "http://h:2".to_string())
            ]
        );
        let extra = [at(Some("a"), "http://h:1"), at(Some("c"), "http://h:3")];
        let err = ProviderChoice::match_names(&extra, &["a"]).unwrap_err();
        assert!(err.contains("\"c\": the scenario has no provider"), "{err}");
        let twice = [at(Some("a"), "http://h:1"), at(Some("a"), "http://h:3")];
        assert!(ProviderChoice::match_names(&twice, &["a"])
            .unwrap_err()
            .contains("twice"));
    }

    #[test]
    fn later_in_process_providers_listen_on_the_ports_after_the_first() {
        assert_eq!(nth_listen("127.0.0.1:0", 2), "127.0.0.1:0");
        assert_eq!(nth_listen("0.0.0.0:9000", 0), "0.0.0.0:9000");
        assert_eq!(nth_listen("0.0.0.0:9000", 2), "0.0.0.0:9002");
    }
}
