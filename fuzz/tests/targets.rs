//! Every fuzz target, briefly: each file of `corpus/<target>/` is replayed
//! (the seeds and every crash ever found), then the target is fed random
//! inputs and corpus files with random splices for `REHEARSE_FUZZ_SECONDS`
//! (default 2) seconds. A failure prints the arbtest seed that reproduces it.

use std::path::{Path, PathBuf};
use std::time::Duration;

use arbtest::arbitrary::Unstructured;
use rehearse_fuzz::{FuzzTarget, TARGETS};

fn corpus(target: &FuzzTarget) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target.name);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).expect("read corpus file");
            (p, bytes)
        })
        .collect();
    files.sort();
    files
}

fn budget() -> Duration {
    let secs = std::env::var("REHEARSE_FUZZ_SECONDS")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .unwrap_or(2.0);
    Duration::from_secs_f64(secs)
}

/// One input: random bytes, or a corpus file with a random stretch replaced
/// by random bytes or by a stretch of another corpus file.
fn input(
    u: &mut Unstructured<'_>,
    seeds: &[(PathBuf, Vec<u8>)],
) -> arbtest::arbitrary::Result<Vec<u8>> {
    if seeds.is_empty() || u.ratio(1, 4)? {
        let len = u.arbitrary_len::<u8>()?;
        return Ok(u.bytes(len)?.to_vec());
    }
    let mut data = u.choose(seeds)?.1.clone();
    for _ in 0..u.int_in_range(1..=4)? {
        let at = u.int_in_range(0..=data.len())?;
        let cut = u.int_in_range(0..=(data.len() - at).min(16))?;
        let insert: Vec<u8> = if u.arbitrary()? {
            let donor = &u.choose(seeds)?.1;
            let from = u.int_in_range(0..=donor.len())?;
            let n = u.int_in_range(0..=(donor.len() - from).min(64))?;
            donor[from..from + n].to_vec()
        } else {
            let n = u.int_in_range(0..=8)?;
            u.bytes(n)?.to_vec()
        };
        data.splice(at..at + cut, insert);
    }
    Ok(data)
}

fn fuzz_briefly(target: &FuzzTarget) {
    let seeds = corpus(target);
    assert!(!seeds.is_empty(), "corpus/{} has no seeds", target.name);
    for (path, bytes) in &seeds {
        let outcome = std::panic::catch_unwind(|| (target.run)(bytes));
        assert!(
            outcome.is_ok(),
            "{} panics on {}",
            target.name,
            path.display()
        );
    }
    arbtest::arbtest(|u| {
        let data = input(u, &seeds)?;
        (target.run)(&data);
        Ok(())
    })
    .budget(budget())
    .run();
}

#[test]
fn every_target_has_a_test_here() {
    let names: Vec<_> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(
        names,
        [
            "scenario_toml",
            "provider_request",
            "retry_after",
            "go_duration",
            "replay_log"
        ]
    );
}

#[test]
fn scenario_toml() {
    fuzz_briefly(rehearse_fuzz::target("scenario_toml").unwrap());
}

#[test]
fn provider_request() {
    fuzz_briefly(rehearse_fuzz::target("provider_request").unwrap());
}

#[test]
fn retry_after() {
    fuzz_briefly(rehearse_fuzz::target("retry_after").unwrap());
}

#[test]
fn go_duration() {
    fuzz_briefly(rehearse_fuzz::target("go_duration").unwrap());
}

#[test]
fn replay_log() {
    fuzz_briefly(rehearse_fuzz::target("replay_log").unwrap());
}
