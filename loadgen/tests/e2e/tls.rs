//! `https://` targets: the fake provider behind a TLS relay whose
//! certificate a private CA made in the test signed (test_support::tls).
//! With the CA given, every attempt is served over kept-alive TLS
//! connections; without it the run refuses to start, naming the
//! certificate problem; with `insecure` it runs.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use fake_provider::{FakeProvider, ProviderConfig, ProviderHandle};
use loadgen::{LoadOptions, LoadPlan, LoadRunError, RunReport, Target, TlsOptions};
use test_support::tls::{relay, Relay, TestCa};
use tokio_util::sync::CancellationToken;
use wire::{files, ClientOutcome, ClientRecord};

use crate::{read_client_records, settled_records};

const SCENARIO: &str = r#"
[load]
seed = 11
send_lag_p99_max = "100ms"
[[load.phases]]
duration = "2s"
rate = 60
[load.request]
prompt_tokens = { fixed = 20 }
max_tokens = { fixed = 8 }
stream = 0.5
"#;

/// The fake provider (20 ms to the first token) and a TLS relay in front.
async fn provider_behind_tls(ca: &TestCa) -> (ProviderHandle, Relay) {
    let config = ProviderConfig::from_toml(
        "[completion_tokens]\nfixed = 8\n[latency]\nttft = { fixed = \"20ms\" }\n",
        "provider.toml",
    )
    .expect("provider config");
    let provider = FakeProvider::new(config)
        .bind("127.0.0.1:0")
        .await
        .expect("bind the fake provider");
    let addr = provider
        .base_url()
        .trim_start_matches("http://")
        .parse()
        .expect("an address");
    let relay = relay(Some(ca), addr).await.expect("the TLS relay");
    (provider, relay)
}

async fn run(url: &str, tls: TlsOptions, out: &std::path::Path) -> Result<RunReport, LoadRunError> {
    let plan = LoadPlan::from_scenario_str(SCENARIO, "tls.toml", std::path::Path::new("."))
        .expect("a valid [load] table");
    let mut options = LoadOptions::new(out);
    options.tls = tls;
    let target = Target::parse(url).expect("an https URL");
    assert!(target.is_tls());
    tokio::time::timeout(
        Duration::from_secs(20),
        loadgen::run(&plan, &target, &options, CancellationToken::new()),
    )
    .await
    .expect("the run ends by itself")
}

fn all_served(records: &[ClientRecord], people: usize) {
    assert_eq!(records.len(), people, "one record per person");
    assert!(
        records
            .iter()
            .all(|c| c.outcome == ClientOutcome::Ok && c.tokens == 8),
        "{:?}",
        records.iter().find(|c| c.outcome != ClientOutcome::Ok)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_https_target_with_its_ca_file_is_served_in_full() {
    let ca = TestCa::new();
    let (provider, relay) = provider_behind_tls(&ca).await;
    let out = tempfile::tempdir().unwrap();
    let tls = TlsOptions {
        ca_file: Some(ca.write_ca(out.path())),
        insecure: false,
    };
    let report = run(&relay.https_url(), tls, out.path())
        .await
        .expect("the run succeeds");
    eprintln!("{}", report.table());
    let client = read_client_records(&out.path().join(files::CLIENT_RECORDS));
    all_served(&client, 120);
    assert!(report.valid, "{}", report.table());
    let streamed = client.iter().filter(|c| c.stream).count();
    assert!(
        (30..=90).contains(&streamed),
        "{streamed} streamed over TLS"
    );
    for c in &client {
        assert!(c
            .first_byte_us
            .is_some_and(|fb| c.sent_us <= fb && fb <= c.done_us));
    }
    // Every request reached the provider through the relay, ids intact.
    let provider_ids: HashSet<_> = settled_records(&provider)
        .await
        .into_iter()
        .map(|p| p.id)
        .collect();
    let client_ids: HashSet<_> = client.iter().map(|c| c.id.clone()).collect();
    assert_eq!(client_ids, provider_ids);
    // Connections were kept alive: one handshake each (and one for the
    // probe), far fewer than requests.
    let handshakes = relay.accepted();
    assert!(
        (2..=40).contains(&handshakes),
        "{handshakes} TLS connections for 120 requests"
    );
    provider.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_untrusted_certificate_fails_fast_and_insecure_accepts_it() {
    let ca = TestCa::new();
    let (provider, relay) = provider_behind_tls(&ca).await;
    let out = tempfile::tempdir().unwrap();

    // Public roots only: the private CA's certificate is refused at the
    // probe, before any arrival, and the error says why and what to do.
    let began = Instant::now();
    let e = run(&relay.https_url(), TlsOptions::default(), out.path())
        .await
        .expect_err("an untrusted certificate stops the run");
    assert!(
        began.elapsed() < Duration::from_secs(2),
        "{:?}",
        began.elapsed()
    );
    assert!(matches!(e, LoadRunError::Handshake { .. }), "{e:?}");
    let message = e.to_string();
    assert!(message.contains("certificate"), "{message}");
    assert!(message.contains("UnknownIssuer"), "{message}");
    assert!(message.contains("--ca-file"), "{message}");
    assert!(
        !out.path().join(files::CLIENT_RECORDS).exists(),
        "no run was made"
    );
    assert!(
        provider.records().is_empty(),
        "no request reached the provider"
    );

    // A CA file that is not one is refused before connecting.
    let junk = out.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate\n").unwrap();
    let junk_ca = TlsOptions {
        ca_file: Some(junk),
        insecure: false,
    };
    let e = run(&relay.https_url(), junk_ca, out.path())
        .await
        .unwrap_err();
    assert!(matches!(e, LoadRunError::Tls(_)), "{e:?}");
    assert!(e.to_string().contains("--ca-file"), "{e}");

    // A plain HTTP server behind an https:// URL: no TLS session.
    let plain = provider
        .base_url()
        .replace("http://127.0.0.1", "https://localhost");
    let e = run(&plain, TlsOptions::default(), out.path())
        .await
        .unwrap_err();
    assert!(matches!(e, LoadRunError::Handshake { .. }), "{e:?}");

    // --insecure: any certificate is accepted, and the run is served.
    let insecure = TlsOptions {
        ca_file: None,
        insecure: true,
    };
    let report = run(&relay.https_url(), insecure, out.path())
        .await
        .expect("the run succeeds");
    let client = read_client_records(&out.path().join(files::CLIENT_RECORDS));
    all_served(&client, 120);
    assert!(report.valid, "{}", report.table());
    provider.shutdown().await;
}
