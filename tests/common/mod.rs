//! What the binary's end-to-end tests share: the binary, scratch
//! directories, child processes that end with the test, their first line
//! and output, and the run directories they leave. Each test file uses
//! some of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::path::PathBuf;
use std::process::{Child, Command, Output};

/// The `rehearse` binary under test.
pub fn rehearse() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rehearse"))
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
