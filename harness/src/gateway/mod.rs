//! The gateway under test during a run: the built-in reference gateway or a
//! command, spawned and supervised, or a URL already serving; started, and
//! ended at the end.
//!
//! The rooms beside this one:
//! - `process`: the gateway as a child process group, its memory limit and its resident memory from /proc;
//! - `supervise`: a spawned gateway watched, its deaths noted, restarted;
//! - `memory`: its resident memory sampled every 100 ms while the run goes (`rss.jsonl`);
//! - `gauges`: its own gauges named in the scenario, sampled while the load runs (`gateway-samples.jsonl`);
//! - `metrics`: its `/metrics` read once as the load ends (`gateway-metrics.txt`), and what its histograms say.

pub(crate) mod gauges;
pub(crate) mod memory;
pub(crate) mod metrics;
pub(crate) mod process;
pub(crate) mod supervise;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use wire::{files, GatewayEvent};

use crate::error::RunError;
use crate::gateway::process::MemoryLimit;
use crate::gateway::supervise::{wait_ready, Launch, Supervised};
use crate::provider::urls::ProviderUrls;
use crate::run::clock::now_us;
use crate::run::rundir::write_atomic;
use crate::scenario::GatewayKind;
use crate::Rehearsal;

/// The gateway of a run, ready for load.
pub(crate) struct Running {
    /// Its base URL.
    pub(crate) url: String,
    /// As a person would name it.
    pub(crate) name: String,
    /// Its memory limit, when the scenario sets one.
    pub(crate) limit: Option<Arc<MemoryLimit>>,
    /// Its process, when the harness spawned it.
    pub(crate) supervised: Option<Supervised>,
    /// Where its `/metrics` are (see [`Rehearsal::metrics_url_at`]).
    pub(crate) metrics_url: Option<String>,
}

impl Running {
    /// Starts the rehearsal's gateway (or waits for its target, a gateway
    /// already serving, whose certificate `tls` checks when it is an
    /// `https://` one) in front of the providers at `urls`.
    pub(crate) async fn start(
        r: &Rehearsal,
        tls: &loadgen::TlsOptions,
        urls: &ProviderUrls,
        dir: &Path,
    ) -> Result<Running, RunError> {
        let g = &r.gateway;
        let limit = g.memory_limit.map(|bytes| {
            Arc::new(MemoryLimit::new(
                bytes,
                &format!("rehearse-{}-{}", std::process::id(), now_us()),
            ))
        });
        if let Some(url) = &r.target {
            let url = url.trim_end_matches('/').to_string();
            let not_ready = || RunError::NotReady {
                url: url.clone(),
                waited: g.ready_timeout,
            };
            // Nothing listening where a gateway already runs is said at
            // once, unless the scenario asks to wait for it.
            if !g.ready_timeout_written {
                if let Some(refusal) = refused(&url).await {
                    return Err(RunError::TargetRefused { url, refusal });
                }
            }
            // Listening first; then, over https, a certificate this run
            // does not trust is bad input (exit 2), said at once rather
            // than as a readiness timeout; then the ready path.
            if !wait_ready(&url, None, g.ready_timeout, tls).await {
                return Err(not_ready());
            }
            check_tls(&url, tls, g.ready_timeout).await?;
            if g.ready_path.is_some()
                && !wait_ready(&url, g.ready_path.as_deref(), g.ready_timeout, tls).await
            {
                return Err(not_ready());
            }
            return Ok(Running {
                name: format!("gateway at {url}"),
                metrics_url: r.metrics_url_at(&url),
                url,
                limit,
                supervised: None,
            });
        }
        let listen = process::free_port().map_err(RunError::NoFreePort)?;
        let Command { argv, env, name } = match &g.kind {
            GatewayKind::Reference(_) => reference_command(r, urls, listen, dir)?,
            GatewayKind::Command(argv) => {
                let argv: Vec<String> = argv.iter().map(|a| urls.fill(a, &listen)).collect();
                // A command scales itself by this (see wire::Scale); a
                // script finds the providers in its environment too.
                let mut env = vec![("REHEARSE_TIME_SCALE".to_string(), r.scale.time.to_string())];
                env.extend(urls.env());
                Command {
                    name: format!("`{}`", argv.join(" ")),
                    argv,
                    env,
                }
            }
            GatewayKind::Url(_) => unreachable!("a url gateway is passed as the target"),
        };
        let launch = Launch {
            argv,
            env,
            log: dir.join(files::GATEWAY_LOG),
            listen,
            ready_path: g.ready_path.clone(),
            ready_timeout: g.ready_timeout,
            limit: limit.clone(),
            restart: g.restart,
            restart_delay: g.restart_delay,
        };
        let supervised = Supervised::start(launch).await?;
        let url = format!("http://{listen}");
        Ok(Running {
            metrics_url: r.metrics_url_at(&url),
            url,
            name,
            limit,
            supervised: Some(supervised),
        })
    }

    /// Returns false if and only if the harness spawned the gateway and no
    /// process of it runs now (it died, and is not restarted or not yet).
    pub(crate) fn running(&self) -> bool {
        self.supervised.as_ref().is_none_or(|sup| {
            sup.state
                .lock()
                .map_or(true, |state| state.process.is_some())
        })
    }

    /// Stops watching the gateway, ends its process group (with a shorter
    /// grace when the run was interrupted), and returns what happened to it.
    pub(crate) async fn stop(self, interrupted: bool) -> Vec<GatewayEvent> {
        let grace = if interrupted {
            Duration::from_millis(300)
        } else {
            Duration::from_secs(2)
        };
        match self.supervised {
            Some(sup) => sup.stop(grace).await,
            None => Vec::new(),
        }
    }
}

/// The refusal of a connection to `url`'s host and port, when that is
/// what one try gets (nothing listens there); `None` when it connects, or
/// fails otherwise (a name not resolved yet, a timeout: those are waited
/// for).
async fn refused(url: &str) -> Option<std::io::Error> {
    let authority = crate::http::tls::host_port(url)?;
    let addrs = loadgen::resolve_authority(&authority).await.ok()?;
    let connect = tokio::net::TcpStream::connect(&addrs[..]);
    match tokio::time::timeout(Duration::from_secs(2), connect).await {
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(e),
        _ => None,
    }
}

/// For an `https://` gateway: a TLS session can be made with it under
/// `tls`. A refused certificate (or no TLS at all) is bad input.
async fn check_tls(url: &str, tls: &loadgen::TlsOptions, within: Duration) -> Result<(), RunError> {
    let target = loadgen::Target::parse(url)?;
    if !target.is_tls() {
        return Ok(());
    }
    let url = url.to_string();
    match loadgen::probe_tls(&target, tls, within).await {
        Ok(_) => Ok(()),
        Err(source @ (loadgen::LoadRunError::Handshake { .. } | loadgen::LoadRunError::Tls(_))) => {
            Err(RunError::GatewayTls { url, source })
        }
        Err(source) => Err(RunError::GatewayUnreachable { url, source }),
    }
}

/// How a gateway is started, and what to call it.
struct Command {
    argv: Vec<String>,
    env: Vec<(String, String)>,
    name: String,
}

/// The reference gateway's command line: `rehearse gateway --config
/// gateway.toml`, that file being the scenario's `[gateway.reference]` at
/// rehearsal scale with the harness's upstream and listen address. It is
/// already scaled, so it gets no `REHEARSE_TIME_SCALE`.
fn reference_command(
    r: &Rehearsal,
    urls: &ProviderUrls,
    listen: std::net::SocketAddr,
    dir: &Path,
) -> Result<Command, RunError> {
    let Some(config) = &r.reference else {
        unreachable!("a reference gateway has a reference config");
    };
    let mut config = config.clone();
    resolve_reference_upstreams(&mut config, urls).map_err(|(field, message)| {
        RunError::GatewayUpstream {
            path: r.path.clone(),
            field: format!("gateway.reference.{field}"),
            message,
        }
    })?;
    config.listen = listen;
    let path = dir.join(files::GATEWAY_CONFIG);
    let text = toml::to_string(&config).map_err(RunError::GatewayConfig)?;
    write_atomic(&path, text.as_bytes())?;
    let exe = std::env::current_exe().map_err(RunError::NoBinary)?;
    let host = crate::host::host().ok_or(RunError::no_host("the reference gateway"))?;
    let argv = std::iter::once(exe.into_os_string())
        .chain((host.reference_gateway)(&path))
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    Ok(Command {
        argv,
        env: vec![returns_idle_memory(r.scale.time)],
        name: format!("reference gateway ({})", config.mode),
    })
}

/// The reference gateway's allocator (jemalloc, the binary's) told to give
/// back the memory it no longer uses, as a deployment of a long-running
/// service configures it: a background thread purges pages unused for 5 s
/// of scenario time (half `memory_ceiling`'s default `settle`, so that a
/// gateway holding nothing is back near its baseline by the wait's last
/// second), straight to the system (no lazily freed pages, which /proc
/// still counts as resident). Without it jemalloc purges only when it is
/// called, so a gateway idle after a load keeps its peak: 39.7 MiB of
/// anonymous memory for the CI smoke scenario's 3.4 at rest, retained
/// whole; with it, 8.6. `_RJEM_` is the prefix of the jemalloc the binary
/// links (tikv-jemallocator's, its symbols prefixed).
fn returns_idle_memory(time_scale: f64) -> (String, String) {
    let scale = if time_scale.is_finite() && time_scale > 0.0 {
        time_scale
    } else {
        1.0
    };
    let decay_ms = (5_000.0 / scale).round().max(1.0);
    (
        "_RJEM_MALLOC_CONF".to_string(),
        format!("background_thread:true,dirty_decay_ms:{decay_ms},muzzy_decay_ms:0"),
    )
}

/// Points the reference gateway's config at the run's providers: a lone
/// `upstream` is the first provider's URL (`{provider_url}`); each of
/// several `upstreams = [{ provider = NAME, .. }]` gets provider NAME's.
/// A name the run has no provider of (the scenario refuses its own
/// unknown names when it loads; `--provider external` has none) is the
/// upstream's field and why.
fn resolve_reference_upstreams(
    config: &mut reference_gateway::GatewayConfig,
    urls: &ProviderUrls,
) -> Result<(), (String, String)> {
    let by_name: BTreeMap<String, String> = urls
        .iter()
        .map(|(name, url)| (name.to_string(), url.to_string()))
        .collect();
    config.set_providers(urls.first(), &by_name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reference_gateway::{GatewayConfig, Mode, UpstreamConfig};

    fn upstream(name: &str, provider: &str) -> UpstreamConfig {
        UpstreamConfig {
            name: name.into(),
            url: None,
            provider: Some(provider.into()),
            weight: 1,
            priority: 0,
        }
    }

    #[test]
    fn the_reference_gateways_allocator_purges_within_5_scenario_seconds() {
        let (name, value) = returns_idle_memory(10.0);
        assert_eq!(name, "_RJEM_MALLOC_CONF");
        assert_eq!(
            value,
            "background_thread:true,dirty_decay_ms:500,muzzy_decay_ms:0"
        );
        assert!(returns_idle_memory(1.0).1.contains("dirty_decay_ms:5000,"));
        assert!(returns_idle_memory(f64::NAN)
            .1
            .contains("dirty_decay_ms:5000,"));
        assert!(returns_idle_memory(1e9).1.contains("dirty_decay_ms:1,"));
    }

    #[test]
    fn a_lone_upstream_is_the_first_provider_and_several_resolve_by_name() {
        let urls = ProviderUrls::new(vec![
            ("primary".into(), "http://127.0.0.1:1".into()),
            ("secondary".into(), "http://127.0.0.1:2".into()),
        ])
        .unwrap();
        let mut lone = GatewayConfig::new(Mode::Naive, "");
        resolve_reference_upstreams(&mut lone, &urls).unwrap();
        assert_eq!(lone.upstream, "http://127.0.0.1:1");
        let mut two = GatewayConfig::new(Mode::Bounded, "");
        two.upstreams = vec![upstream("b", "secondary"), upstream("a", "primary")];
        resolve_reference_upstreams(&mut two, &urls).unwrap();
        let got: Vec<_> = two.upstreams.iter().map(|u| u.url.as_deref()).collect();
        assert_eq!(
            got,
            [Some("http://127.0.0.1:2"), Some("http://127.0.0.1:1")]
        );
        assert!(two.upstream.is_empty());
        assert!(two.validate().is_ok());
    }

    #[test]
    fn an_upstream_naming_no_provider_of_the_run_is_its_field() {
        let mut c = GatewayConfig::new(Mode::Bounded, "");
        c.upstreams = vec![upstream("a", "default"), upstream("b", "elsewhere")];
        let (field, message) =
            resolve_reference_upstreams(&mut c, &ProviderUrls::one("http://x")).unwrap_err();
        assert_eq!(field, "upstreams[1].provider");
        assert!(message.contains("elsewhere"), "{message}");
        let e = RunError::GatewayUpstream {
            path: "scenarios/x.toml".into(),
            field: format!("gateway.reference.{field}"),
            message,
        };
        assert!(
            e.to_string()
                .starts_with("scenarios/x.toml: field `gateway.reference.upstreams[1].provider`: "),
            "{e}"
        );
        assert_eq!(e.kind(), crate::error::RunErrorKind::BadInput);
    }
}
