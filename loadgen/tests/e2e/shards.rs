//! Shards: two processes' worth of load (two runs here, started at one
//! agreed instant) play exactly the unsharded schedule: the same request
//! ids, the same intended offsets from the start, the same outcomes when
//! nothing overloads.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use fake_provider::{FakeProvider, ProviderConfig};
use loadgen::{LoadOptions, LoadPlan, Shard, Target};
use tokio_util::sync::CancellationToken;
use wire::files;

use crate::read_client_records;

const SCENARIO: &str = r#"
[load]
seed = 29
patience = { fixed = "5s" }
[[load.phases]]
duration = "1500ms"
rate = 120
arrivals = "poisson"
[load.request]
prompt_tokens = { lognormal = { median = 40, p99 = 400 } }
max_tokens = { fixed = 8 }
stream = 0.3
"#;

/// First attempts by id: (intended offset from the run's start, outcome,
/// tokens).
type People = BTreeMap<String, (u64, String, u64)>;

async fn play(target: &Target, shard: Shard, start_at: Option<SystemTime>) -> (People, u64) {
    let plan = LoadPlan::from_scenario_str(SCENARIO, "s.toml", std::path::Path::new("."))
        .expect("a valid [load] table");
    let out = tempfile::tempdir().expect("a temp dir");
    let mut options = LoadOptions::new(out.path());
    options.shard = shard;
    options.start_at = start_at;
    let report = loadgen::run(&plan, target, &options, CancellationToken::new())
        .await
        .expect("the run succeeds");
    let people = read_client_records(&out.path().join(files::CLIENT_RECORDS))
        .into_iter()
        .filter(|r| r.attempt == 1)
        .map(|r| {
            let outcome = r.outcome.as_str().to_string();
            (r.id, (r.intended_us - report.start_us, outcome, r.tokens))
        })
        .collect();
    (people, report.start_us)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shards_play_the_unsharded_schedule() {
    let config = ProviderConfig::from_toml("completion_tokens = { fixed = 8 }\n", "p.toml")
        .expect("provider config");
    let handle = FakeProvider::new(config)
        .bind("127.0.0.1:0")
        .await
        .expect("bind the fake provider");
    let target = Target::parse(&handle.base_url()).expect("the provider's URL");
    let (whole, _) = play(&target, Shard::default(), None).await;

    let at = SystemTime::now() + Duration::from_millis(300);
    let (a, b) = tokio::join!(
        play(&target, "0/2".parse().unwrap(), Some(at)),
        play(&target, "1/2".parse().unwrap(), Some(at)),
    );
    // Both started at the agreed instant (the records' clocks are one here).
    assert!(a.1.abs_diff(b.1) < 2_000, "{} vs {}", a.1, b.1);
    assert!(!a.0.is_empty() && !b.0.is_empty());
    assert!(
        a.0.keys().all(|id| !b.0.contains_key(id)),
        "a person in two shards"
    );
    let mut merged = a.0;
    merged.extend(b.0);
    assert_eq!(merged.len(), whole.len());
    for (id, (offset, outcome, tokens)) in &whole {
        let (o, out, t) = &merged[id];
        assert_eq!(o, offset, "{id}: intended offset");
        assert_eq!((out, t), (outcome, tokens), "{id}");
    }

    // A start that has passed is refused, not played late.
    let plan = LoadPlan::from_scenario_str(SCENARIO, "s.toml", std::path::Path::new(".")).unwrap();
    let out = tempfile::tempdir().unwrap();
    let mut options = LoadOptions::new(out.path());
    options.start_at = Some(SystemTime::now() - Duration::from_secs(2));
    let e = loadgen::run(&plan, &target, &options, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("start time passed"), "{e}");
    handle.shutdown().await;
}
