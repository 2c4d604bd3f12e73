//! Golden run directories: records of real rehearsals, with the report.json
//! and timeline.csv the judge gave them when they were committed. Judging
//! them again must give the same figures and verdicts, however the judge is
//! rewritten (one pass, streamed, windowed): a change of any count,
//! percentile or status here is a change of behaviour, not a refactor.
//!
//! - `pool-demo-bounded`, `pool-demo-naive`: `scenarios/pool-demo.toml`
//!   against the bounded and the naive reference gateway;
//! - `retries-hangups`: `scenarios/ci-smoke.toml` with 1.5 s of patience
//!   and `expected_service = "100ms"`: sheds, retries honouring
//!   Retry-After, and callers hanging up;
//! - `cut-off`: pool-demo-bounded with `client.jsonl` cut in the middle of
//!   its last line, as a killed run leaves it; its expected report is the
//!   one judged from the whole lines, and a note says what was cut.
//!
//! Their run.json files predate the plan's figure for the waiting after
//! the overload (`drain`'s baseline without 10 s of the run's own), and
//! their records name no Retry-After header (a second's granularity): they
//! are judged as old run directories are.
//!
//! When the judge is meant to change its figures, rewrite the expected
//! files with `REHEARSE_BLESS=1 cargo test -p harness --test golden`, and
//! say in the commit which figures and verdicts changed, and why.

use std::path::{Path, PathBuf};

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

/// A copy of the golden directory to judge (judging rewrites its reports).
fn copy(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rehearse-golden-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(golden(name)).unwrap() {
        let path = entry.unwrap().path();
        std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
    }
    dir
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Judges the golden directory `name` again and compares: every field of
/// report.json but `notes`, and timeline.csv byte for byte. Returns the
/// new report's notes.
fn judge_again(name: &str) -> Vec<String> {
    let dir = copy(name);
    let judged = harness::judge_dir(&dir, &[], None).unwrap();
    if std::env::var_os("REHEARSE_BLESS").is_some() {
        for (from, to) in [
            ("report.json", "expected-report.json"),
            ("timeline.csv", "expected-timeline.csv"),
        ] {
            std::fs::copy(dir.join(from), golden(name).join(to)).unwrap();
        }
    }
    let mut now = json(&dir.join("report.json"));
    let mut then = json(&golden(name).join("expected-report.json"));
    let notes = now["notes"].take();
    then["notes"].take();
    for (key, value) in then.as_object().unwrap() {
        assert_eq!(
            now.get(key),
            Some(value),
            "{name}: report.json `{key}` changed"
        );
    }
    assert_eq!(
        std::fs::read_to_string(dir.join("timeline.csv")).unwrap(),
        std::fs::read_to_string(golden(name).join("expected-timeline.csv")).unwrap(),
        "{name}: timeline.csv changed"
    );
    assert_eq!(
        judged.status.as_str(),
        then["verdict"].as_str().unwrap(),
        "{name}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    notes
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn pool_demo_bounded_is_judged_as_it_was() {
    judge_again("pool-demo-bounded");
}

/// Its run.json predates the plan's figure for the waiting after the
/// overload: the saved scenario is planned again, and `drain` is judged
/// (nothing arrives after the overload: the naive backlog takes 27 s).
#[test]
fn pool_demo_naive_is_judged_as_it_was() {
    let notes = judge_again("pool-demo-naive");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("predates the plan's figure") && n.contains("planned again")),
        "{notes:?}"
    );
}

#[test]
fn retries_and_hang_ups_are_judged_as_they_were() {
    judge_again("retries-hangups");
}

#[test]
fn a_run_cut_off_mid_line_is_judged_up_to_its_last_whole_line() {
    let notes = judge_again("cut-off");
    assert!(
        notes
            .iter()
            .any(|n| n.contains("client.jsonl") && n.contains("cut off")),
        "{notes:?}"
    );
}
