//! The gateway under test during a run: the built-in reference gateway or a
//! command, spawned and supervised, or a URL already serving; started, and
//! ended at the end.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use wire::{files, GatewayEvent};

use crate::clock::now_us;
use crate::error::RunError;
use crate::process::{self, MemoryLimit};
use crate::provider_urls::ProviderUrls;
use crate::rundir::write_atomic;
use crate::scenario::{GatewayKind, Scenario};
use crate::supervise::{wait_ready, Launch, Supervised};
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
}

impl Running {
    /// Starts the scenario's gateway (or waits for `target`, a gateway
    /// already serving, whose certificate `tls` checks when it is an
    /// `https://` one) in front of the providers at `urls`.
    pub(crate) async fn start(
        s: &Scenario,
        r: &Rehearsal,
        target: Option<&str>,
        tls: &loadgen::TlsOptions,
        urls: &ProviderUrls,
        dir: &Path,
    ) -> Result<Running, RunError> {
        let g = &s.gateway;
        let limit = g.memory_limit.map(|bytes| {
            Arc::new(MemoryLimit::new(
                g.memory_at(bytes, r.scale),
                &format!("rehearse-{}-{}", std::process::id(), now_us()),
            ))
        });
        if let Some(url) = target {
            let url = url.trim_end_matches('/').to_string();
            let not_ready = || RunError::NotReady {
                url: url.clone(),
                waited: g.ready_timeout,
            };
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
                url,
                limit,
                supervised: None,
            });
        }
        let listen = process::free_port().map_err(RunError::NoFreePort)?;
        let Command { argv, env, name } = match &s.gateway.kind {
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
            restart_delay: r.scale.duration(g.restart_delay),
        };
        let supervised = Supervised::start(launch).await?;
        Ok(Running {
            url: format!("http://{listen}"),
            name,
            limit,
            supervised: Some(supervised),
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
    resolve_reference_upstreams(&mut config, urls);
    config.listen = listen;
    let path = dir.join(files::GATEWAY_CONFIG);
    let text = toml::to_string(&config).map_err(RunError::GatewayConfig)?;
    write_atomic(&path, text.as_bytes())?;
    let exe = std::env::current_exe().map_err(RunError::NoBinary)?;
    let argv = vec![
        exe.display().to_string(),
        "gateway".into(),
        "--config".into(),
        path.display().to_string(),
    ];
    Ok(Command {
        argv,
        env: Vec::new(),
        name: format!("reference gateway ({})", config.mode),
    })
}

/// Points the reference gateway's config at the run's providers: today its
/// one `upstream` is the first provider's URL (`{provider_url}`).
///
/// This is where its several upstreams (issue 27: `upstreams = [{ provider
/// = NAME, .. }]` inside a scenario) resolve: each NAME's base URL is
/// `urls.url_of(NAME)` (a name the scenario does not have is refused when
/// the scenario loads, as `{provider_url:NAME}` is), every provider's is
/// in `urls.iter()`.
fn resolve_reference_upstreams(config: &mut reference_gateway::GatewayConfig, urls: &ProviderUrls) {
    config.upstream = urls.first().to_string();
}
