//! Fuzz targets for the parsers that read what the outside world writes:
//! scenario and config TOML, provider request bodies, Retry-After and
//! rate-limit reset headers, and replay logs.
//!
//! Each target is a function from bytes to nothing that must not panic
//! (and, for the round trips, asserts what must hold). The same functions
//! are driven three ways:
//! - `cargo test` (`tests/targets.rs`) replays every file of
//!   `corpus/<target>/` and then feeds each target random and spliced
//!   inputs for a couple of seconds (`arbtest`);
//! - `fuzz/run.sh TARGET SECONDS` builds `src/bin/afl.rs` with `cargo afl`
//!   and runs AFL++ (coverage-guided) on it, from the same corpus;
//! - `REHEARSE_FUZZ_SECONDS=600 cargo test -p rehearse-fuzz --release`
//!   runs the random driver longer, where AFL++ is not installed.

// No function over 120 lines outside tests (the threshold is in clippy.toml).
#![cfg_attr(not(test), warn(clippy::too_many_lines))]

use std::path::Path;
use std::time::{Duration, SystemTime};

use fake_provider::ProviderDialect;

/// A fuzz target: its name (the folder under `corpus/`) and its function.
pub struct FuzzTarget {
    /// The name, as given to `run.sh` and used as the corpus folder.
    pub name: &'static str,
    /// Runs one input; panics if and only if it found a bug.
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[FuzzTarget] = &[
    FuzzTarget {
        name: "scenario_toml",
        run: scenario_toml,
    },
    FuzzTarget {
        name: "provider_request",
        run: provider_request,
    },
    FuzzTarget {
        name: "retry_after",
        run: retry_after,
    },
    FuzzTarget {
        name: "go_duration",
        run: go_duration,
    },
    FuzzTarget {
        name: "replay_log",
        run: replay_log,
    },
];

/// Returns the target named `name`, if there is one.
pub fn target(name: &str) -> Option<&'static FuzzTarget> {
    TARGETS.iter().find(|t| t.name == name)
}

/// A scenario (or a provider or gateway config) as TOML, read by every
/// library loader and then scaled as `rehearse run --time-scale` would.
pub fn scenario_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = toml_located::from_str::<toml::Table>(text, "fuzz.toml");
    if let Ok(cfg) = fake_provider::ProviderConfig::from_toml(text, "fuzz.toml") {
        let _ = cfg.scaled(wire::Scale {
            time: 10.0,
            quota: 10.0,
        });
        let _ = cfg.scaled(wire::Scale {
            time: 0.5,
            quota: 1000.0,
        });
    }
    if let Ok(cfg) = reference_gateway::GatewayConfig::from_toml(text, "fuzz.toml") {
        let _ = cfg.clone().time_scaled(10.0);
        let _ = cfg.time_scaled(0.01);
    }
    // A replay path resolves against a folder that does not exist, so no
    // input can make the target read the disk.
    let base = Path::new("/nonexistent/rehearse-fuzz");
    if let Ok(plan) = loadgen::LoadPlan::from_scenario_str(text, "fuzz.toml", base) {
        let _ = plan.schedule_length();
        let _ = plan.expected_arrivals();
        let _ = plan.send_lag_bound();
        let plan = plan.scaled(wire::Scale {
            time: 10.0,
            quota: 10.0,
        });
        let _ = plan.schedule_length();
    }
    // The whole scenario, as `rehearse run` reads it: validated once, then
    // every part scaled by the one rule, and planned at full and run scale.
    let path = base.join("fuzz.toml");
    if let Ok(mut scenario) = harness::Scenario::from_str(text, "fuzz.toml", &path) {
        for time in [scenario.meta.time_scale, 10.0, 0.01] {
            scenario.meta.time_scale = time;
            let _ = scenario.rehearsal();
            let _ = harness::plan(&scenario);
        }
    }
}

/// A request body, parsed as both dialects and as each of the four APIs.
pub fn provider_request(data: &[u8]) {
    for dialect in wire::Dialect::ALL {
        let _ = dialect.parse(data);
    }
    for api in wire::Api::ALL {
        let _ = fake_provider::parse_request(api, data);
    }
}

/// The first byte picks which header(s) carry the rest: `retry-after-ms`,
/// `retry-after`, or both (split at the first newline).
pub fn retry_after(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    // What a client reads: the bytes a header value may hold, as text.
    let value = |bytes: &[u8]| {
        http::HeaderValue::from_bytes(bytes)
            .ok()
            .and_then(|v| v.to_str().ok().map(str::to_string))
    };
    let (ms, secs) = match which % 3 {
        0 => (value(rest), None),
        1 => (None, value(rest)),
        _ => {
            let cut = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
            (
                value(&rest[..cut]),
                value(rest.get(cut + 1..).unwrap_or_default()),
            )
        }
    };
    // Two clocks: now, and a date near the edge of what SystemTime holds.
    for now in [SystemTime::now(), SystemTime::UNIX_EPOCH] {
        if let Some(wait) = wire::parse_retry_after(ms.as_deref(), secs.as_deref(), now) {
            // The wait is used as a delay: it must survive the arithmetic a
            // client does with it.
            let _ = wait.as_secs_f64();
        }
    }
}

/// Go durations (`x-ratelimit-reset-*`): arbitrary text must not panic, and
/// a duration formatted then parsed comes back the same at millisecond
/// precision.
pub fn go_duration(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = wire::parse_go_duration(text);
    }
    if data.len() >= 8 {
        let raw = u64::from_le_bytes(data[..8].try_into().expect("8 bytes"));
        // Go's range is 2^63 − 1 ns, about 9.2e12 ms.
        let ms = raw % (i64::MAX as u64 / 1_000_000 + 1);
        let d = Duration::from_millis(ms);
        let text = wire::go_duration(d);
        assert_eq!(
            wire::parse_go_duration(&text),
            Some(d),
            "{ms} ms formatted as {text:?}"
        );
    }
}

/// A replay log. The first byte picks the format and timestamp unit; the
/// rest is the log, its timestamp column named `ts`.
pub fn replay_log(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    // Bit 0: CSV or JSON lines; bits 3 and 4: ours, or a public trace's
    // format of that kind (BurstGPT or Azure; Mooncake or Bailian).
    use loadgen::ReplayFormat::*;
    let format = match (which & 1, (which >> 3) % 3) {
        (0, 0) => Csv,
        (0, 1) => Burstgpt,
        (0, _) => Azure,
        (_, 0) => Jsonl,
        (_, 1) => Mooncake,
        _ => Bailian,
    };
    let unit = match (which >> 1) % 3 {
        0 => loadgen::TimestampUnit::S,
        1 => loadgen::TimestampUnit::Ms,
        _ => loadgen::TimestampUnit::Us,
    };
    if let Ok(offsets) = loadgen::parse_replay_log(text, "fuzz.log", format, "ts", unit) {
        assert!(!offsets.is_empty(), "an accepted log has rows");
        assert!(
            offsets.windows(2).all(|w| w[0] <= w[1]),
            "rows come back in time order"
        );
        assert_eq!(offsets[0], Duration::ZERO, "offsets count from the first");
    }
}
