//! End-to-end tests of the load generator against the fake provider, both
//! on 127.0.0.1 port 0. Each test stops by itself well within a minute.

use std::path::Path;
use std::time::Duration;

use fake_provider::{FakeProvider, ProviderConfig, ProviderHandle};
use loadgen::{LoadOptions, LoadPlan, RunReport, Target};
use tokio_util::sync::CancellationToken;
use wire::{files, ClientRecord, ProviderRecord};

#[path = "e2e/basics.rs"]
mod basics;
#[path = "e2e/bound.rs"]
mod bound;
#[path = "e2e/hangup.rs"]
mod hangup;
#[path = "e2e/headers.rs"]
mod headers;
#[path = "e2e/omission.rs"]
mod omission;
#[path = "e2e/replay.rs"]
mod replay;
#[path = "e2e/retry_after.rs"]
mod retry_after;
#[path = "e2e/shards.rs"]
mod shards;
#[path = "e2e/stream_pace.rs"]
mod stream_pace;
#[path = "e2e/tls.rs"]
mod tls;

/// What one rehearsal left behind.
pub struct Rehearsal {
    pub report: RunReport,
    pub client: Vec<ClientRecord>,
    pub provider: Vec<ProviderRecord>,
    pub out: tempfile::TempDir,
}

/// Starts a fake provider from `provider_toml`, runs the scenario text
/// `scenario` against it, and collects both sides' records.
pub async fn rehearse(scenario: &str, provider_toml: &str) -> Rehearsal {
    rehearse_in(Path::new("."), scenario, provider_toml).await
}

/// [`rehearse`], with a replay log's path taken relative to `base_dir`.
pub async fn rehearse_in(base_dir: &Path, scenario: &str, provider_toml: &str) -> Rehearsal {
    rehearse_with(base_dir, scenario, provider_toml, |_| {}).await
}

/// [`rehearse_in`], with the run's options changed by `options`.
pub async fn rehearse_with(
    base_dir: &Path,
    scenario: &str,
    provider_toml: &str,
    options: impl FnOnce(&mut LoadOptions),
) -> Rehearsal {
    let config =
        ProviderConfig::from_toml(provider_toml, "provider.toml").expect("provider config");
    let handle = FakeProvider::new(config)
        .bind("127.0.0.1:0")
        .await
        .expect("bind the fake provider");
    let plan = LoadPlan::from_scenario_str(scenario, "scenario.toml", base_dir)
        .expect("a valid [load] table");
    let out = tempfile::tempdir().expect("a temp dir");
    let target = Target::parse(&handle.base_url()).expect("the provider's URL");
    let mut opts = LoadOptions::new(out.path());
    options(&mut opts);
    let report = tokio::time::timeout(
        Duration::from_secs(50),
        loadgen::run(&plan, &target, &opts, CancellationToken::new()),
    )
    .await
    .expect("the run ends by itself")
    .expect("the run succeeds");
    eprintln!("{}", report.table());
    let client = read_client_records(&out.path().join(files::CLIENT_RECORDS));
    let provider = settled_records(&handle).await;
    handle.shutdown().await;
    Rehearsal {
        report,
        client,
        provider,
        out,
    }
}

/// The provider's records once every call has ended (a hang-up is noticed
/// when the provider sees the connection close, a moment after the client
/// dropped it).
async fn settled_records(handle: &ProviderHandle) -> Vec<ProviderRecord> {
    for _ in 0..50 {
        if handle.stats().in_flight == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    handle.records()
}

pub fn read_client_records(path: &Path) -> Vec<ClientRecord> {
    std::fs::read_to_string(path)
        .expect("client.jsonl exists")
        .lines()
        .map(|l| serde_json::from_str(l).expect("a ClientRecord per line"))
        .collect()
}
#[path = "e2e/hostile.rs"]
mod hostile;
