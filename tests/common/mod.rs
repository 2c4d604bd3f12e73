//! What the binary's end-to-end tests share: the binary, scratch
//! directories, child processes that end with the test, their first line
//! and output, the run directories they leave, and the rules every
//! rehearsal test follows on a busy machine (one rehearsal at a time, and
//! [`on_schedule`]'s re-run). Each test file uses some of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::path::PathBuf;
use std::process::{Child, Command, Output};

/// Rehearsals under `cargo test` run one at a time, held for the whole of
/// a rehearsal (all its tries): a lock on a file of the target directory,
/// which two test threads, or two test processes, cannot both hold.
/// Under `cargo nextest` (`.ci/run`) the lock is not taken: nextest runs
/// each test in a process of its own and schedules the rehearsals itself
/// (`.config/nextest.toml`: a group of four at once, since a rehearsal
/// of these tests mostly waits on its time-scaled schedule: 0.1 to 0.4 of
/// a core for the release binary, measured per test), and a file lock
/// there would only hold a thread it gave out.
pub fn one_at_a_time() -> Turn {
    if std::env::var_os("NEXTEST").is_some() {
        return Turn(None);
    }
    let path = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rehearsals.lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let locked = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("lock {}: {e}", path.display()));
    Turn(Some(locked))
}

/// A rehearsal's turn ([`one_at_a_time`]): the locked file, if any
/// (unlocked when it drops).
pub struct Turn(Option<nix::fcntl::Flock<std::fs::File>>);

/// The runs under `dir` (`dir` itself, or each variant of a comparison)
/// whose load generator fell behind its own schedule: its send lag p99
/// over the scenario's bound, as their run.json records them. The
/// harness declares such a run invalid (`harness_valid`, exit 3), and it
/// proves nothing about the gateway. One line per run, for a message.
pub fn fell_behind(dir: &Path) -> Vec<String> {
    let mut runs = vec![dir.to_path_buf()];
    if let Ok(entries) = std::fs::read_dir(dir) {
        runs.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    runs.iter()
        .filter_map(|run| {
            let meta: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(run.join("run.json")).ok()?).ok()?;
            let e = &meta["expectations"];
            let (p99, bound) = (
                e["send_lag_p99_ms"].as_f64()?,
                e["send_lag_bound_ms"].as_f64()?,
            );
            (p99 > bound)
                .then(|| format!("{}: send lag p99 {p99} ms, bound {bound} ms", run.display()))
        })
        .collect()
}

/// The re-run rule of every rehearsal test whose assertions need a run
/// that kept its schedule (a test whose assertions hold on any run, the
/// mechanism only, needs no re-run and does not call this). `attempt(n)`
/// makes the rehearsal (n = 1, then 2), into a directory of its own each
/// time, and returns its result and that directory. A run that fell
/// behind its schedule ([`fell_behind`]) is made once more; a second that
/// falls behind fails the test, saying so: the machine was too busy for
/// this rehearsal to show anything. A run invalid for another reason (a
/// signal, a gateway that died or never started, open files run out, a
/// provider bypassed) is returned as it is, for the test to judge.
pub fn on_schedule<T>(mut attempt: impl FnMut(u32) -> (T, PathBuf)) -> T {
    let (first, dir) = attempt(1);
    let behind = fell_behind(&dir);
    if behind.is_empty() {
        return first;
    }
    eprintln!(
        "the load generator fell behind; the rehearsal is made again:\n{}",
        behind.join("\n")
    );
    let (second, dir) = attempt(2);
    let again = fell_behind(&dir);
    assert!(
        again.is_empty(),
        "the load generator fell behind its schedule twice, so neither run shows anything about the gateway (the machine is too busy):\n{}\n{}",
        behind.join("\n"),
        again.join("\n")
    );
    second
}

/// The `rehearse` binary under test: `REHEARSE_BIN` when it is set (a
/// path), else the one cargo built for these tests. `.ci/run` sets it to
/// the release binary it has just built from the same sources for the
/// container image: a rehearsal there costs the machine about a third of
/// the CPU a debug build's does (pool-demo at time scale 5: 0.40 against
/// 1.04 CPU seconds), so a busy machine leaves its load generator on
/// schedule, and the tests judge the binary users run.
pub fn rehearse_bin() -> PathBuf {
    match std::env::var_os("REHEARSE_BIN") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_rehearse")),
    }
}

/// The `rehearse` binary under test ([`rehearse_bin`]).
pub fn rehearse() -> Command {
    Command::new(rehearse_bin())
}

/// An empty scratch directory of this test process: `test` names the
/// test file, `name` the test.
pub fn scratch(test: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rehearse-{test}-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A command's exit code and output, for an assertion's message.
pub fn text(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Kills the child when dropped, so a failing test leaves no server behind.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The first line of a child's stdout, without `prefix`.
pub fn first_line(child: &mut Child, prefix: &str) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string()
}

/// Asserts a command succeeded, with its output when it did not.
pub fn ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A JSON file.
pub fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A run directory's first attempts: (id, intended offset from `start_us`
/// in ms, rounded), sorted.
pub fn first_attempts(dir: &Path, start_us: u64) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = std::fs::read_to_string(dir.join("client.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<wire::ClientRecord>(l).unwrap())
        .filter(|r| r.attempt == 1)
        .map(|r| (r.id, (r.intended_us - start_us + 500) / 1000))
        .collect();
    v.sort();
    v
}

/// Asserts two schedules have the same people at the same offsets
/// (within 5 ms: the clocks' offsets are measured, not known).
pub fn same_schedule(a: &[(String, u64)], b: &[(String, u64)]) {
    assert_eq!(a.len(), b.len());
    for ((x, tx), (y, ty)) in a.iter().zip(b) {
        assert_eq!(x, y);
        assert!(tx.abs_diff(*ty) <= 5, "{x}: {tx} ms vs {ty} ms");
    }
}
