//! The record writer: one thread that turns records into lines of
//! `client.jsonl` and feeds the run's aggregates, so that no file write
//! ever blocks the runtime.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::mpsc;
use tracing::warn;
use wire::ClientRecord;

use super::line;
use super::LoadRunError;
use crate::stats::Stats;

/// Records are written out once this many bytes of whole lines are
/// waiting (or whenever no record is), in one write each.
const RECORDS_FLUSH_AT: usize = 256 * 1024;

/// A backlog of records waiting for the writer past which it says, once,
/// that the writer is behind the run (about 13 MB of records held).
const RECORDS_BACKLOG_WARN: usize = 100_000;

/// Writes records as JSON lines and feeds the aggregates, on its own thread
/// so file writes never block the runtime.
///
/// Lines are gathered whole in a buffer and the buffer is written whole,
/// so `client.jsonl` only ever grows by complete lines: a run killed at any
/// moment leaves a file that ends on a line boundary, every line of it a
/// record.
///
/// The channel from the person tasks is unbounded on purpose: a bounded one
/// would make a person wait to hand in its record when the disk stalls, and
/// a waiting person (its task, up to 2 KiB) costs more than its record
/// queued (about 130 bytes); blocking the dispatcher or dropping records is
/// out of the question. What bounds the queue is the writer keeping up: it
/// holds the records of the last few milliseconds (one poll interval) while
/// the disk takes them. When a write stalls, records queue at the rate
/// attempts end (1,000/s: about 130 KB per second of stall) and the queue
/// empties once the write returns. The largest backlog is measured and
/// reported (`records_backlog_max` in summary.json), with a warning past
/// [`RECORDS_BACKLOG_WARN`].
///
/// Without a file (`records` off), records are counted and dropped.
pub(super) fn spawn_writer(
    mut rx: mpsc::UnboundedReceiver<ClientRecord>,
    mut file: Option<std::fs::File>,
    path: PathBuf,
    mut stats: Stats,
) -> std::thread::JoinHandle<Result<Stats, LoadRunError>> {
    std::thread::Builder::new()
        .name("loadgen-records".into())
        .spawn(move || {
            writer_yields_to_the_runtime();
            let mut lines: Vec<u8> = Vec::with_capacity(RECORDS_FLUSH_AT + 4096);
            let mut failed: Option<std::io::Error> = None;
            let writing = file.is_some();
            let mut flush = |lines: &mut Vec<u8>, failed: &mut Option<std::io::Error>| {
                if let Some(file) = file.as_mut() {
                    if failed.is_none() && !lines.is_empty() {
                        *failed = file.write_all(lines).err();
                    }
                }
                lines.clear();
            };
            let mut backlog = Backlog::default();
            loop {
                // Polling every few milliseconds instead of blocking on the
                // channel: a blocked receiver would be woken (a futex call
                // and a context switch) by every record sent.
                let rec = match rx.try_recv() {
                    Ok(rec) => rec,
                    Err(mpsc::error::TryRecvError::Empty) => {
                        // A quiet moment: what is gathered goes to disk, so
                        // a killed run loses at most the last few ms.
                        flush(&mut lines, &mut failed);
                        std::thread::sleep(Duration::from_millis(5));
                        // The most the queue holds: what came in while the
                        // writer slept or wrote.
                        backlog.saw(rx.len());
                        continue;
                    }
                    Err(mpsc::error::TryRecvError::Disconnected) => break,
                };
                stats.add(&rec);
                // Keep draining after a failure so senders never block;
                // report it at the end. A line is made whole before the
                // buffer can be written, so no write holds half of one.
                if writing && failed.is_none() {
                    line::push_record(&mut lines, &rec);
                    if lines.len() >= RECORDS_FLUSH_AT {
                        flush(&mut lines, &mut failed);
                        backlog.saw(rx.len());
                    }
                }
            }
            flush(&mut lines, &mut failed);
            stats.records_backlog_max = backlog.max as u64;
            match failed {
                Some(source) => Err(LoadRunError::Output { path, source }),
                None => Ok(stats),
            }
        })
        .expect("spawning a thread")
}

/// Puts the calling thread (the record writer) under Linux's `SCHED_IDLE`
/// policy: it runs only when nothing else on its core wants to. Sharing a
/// core with the runtime as an equal, the writer took the core for its
/// batch of records (stats and lines, about 0.5 ms for 5 ms of records at
/// 50,000/s) whenever it woke, and answers waiting on the runtime meanwhile
/// were timed late: latency p99 4.1 ms against 0.33 ms of send lag (five
/// runs, bench/loadgen/run.sh with RT=0). Under a real-time policy (chrt)
/// it was worse: a thread of equal priority is never preempted. The cost
/// is the other way: when the runtime holds the core, records queue in
/// memory until it lets go (measured as `records_backlog_max`, with a
/// warning past [`RECORDS_BACKLOG_WARN`]). Where the policy is refused
/// the writer runs as before.
fn writer_yields_to_the_runtime() {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: sched_setscheduler reads `param` for the calling thread
    // (pid 0) and has no other effect on memory.
    let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
}

/// The largest number of records seen waiting for the writer.
#[derive(Debug, Default)]
struct Backlog {
    max: usize,
    warned: bool,
}

impl Backlog {
    fn saw(&mut self, waiting: usize) {
        self.max = self.max.max(waiting);
        if waiting > RECORDS_BACKLOG_WARN && !self.warned {
            self.warned = true;
            warn!(
                waiting,
                "the record writer is behind: the disk, or the share of the core it gets, is slower than the run, and records queue in memory until it catches up"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::{files, ClientOutcome};

    fn record(i: u64) -> ClientRecord {
        ClientRecord {
            id: format!("r{i:06}"),
            attempt: 1,
            intended_us: i,
            sent_us: i,
            client_wait_us: 0,
            first_byte_us: None,
            done_us: i + 10,
            status: Some(200),
            outcome: ClientOutcome::Ok,
            retry_after_ms: None,
            retry_after_header: None,
            tokens: 1,
            stream: false,
            last: true,
            patience_ms: 1000,
            reason: None,
            tenant: None,
            body_reads: None,
            longest_gap_us: None,
        }
    }

    #[test]
    fn the_writer_measures_its_backlog_and_drains_it() {
        // Records handed in faster than the writer takes them (all before
        // it starts, as in a stalled write): it reports how many waited,
        // and writes every one.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(files::CLIENT_RECORDS);
        let (tx, rx) = mpsc::unbounded_channel();
        for i in 0..20_000u64 {
            tx.send(record(i)).unwrap();
        }
        drop(tx);
        let file = std::fs::File::create(&path).unwrap();
        let stats = spawn_writer(rx, Some(file), path.clone(), Stats::new(0))
            .join()
            .unwrap()
            .unwrap();
        // Measured after the first 256 KiB went out: most were still waiting.
        assert!(
            (10_000..20_000).contains(&stats.records_backlog_max),
            "{}",
            stats.records_backlog_max
        );
        let written = std::fs::read_to_string(&path).unwrap();
        assert_eq!(written.lines().count(), 20_000);
    }

    /// The scheduling policy of this process's thread named `name`, from
    /// /proc (field 41 of its stat line).
    fn policy_of(name: &str) -> Option<i32> {
        for task in std::fs::read_dir("/proc/self/task").ok()? {
            let dir = task.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            if comm.trim_end() != name {
                continue;
            }
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // The name, in parentheses, may hold spaces: count after it
            // (field 3 is the first after the name).
            let rest = &stat[stat.rfind(')')? + 2..];
            return rest.split(' ').nth(41 - 3)?.parse().ok();
        }
        None
    }

    #[test]
    fn the_writer_runs_only_when_its_core_is_idle() {
        let (tx, rx) = mpsc::unbounded_channel();
        let writer = spawn_writer(rx, None, PathBuf::from("unused"), Stats::new(0));
        tx.send(record(1)).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let policy = loop {
            match policy_of("loadgen-records") {
                Some(p) if p == libc::SCHED_IDLE => break p,
                _ if std::time::Instant::now() > deadline => break -1,
                _ => std::thread::sleep(Duration::from_millis(5)),
            }
        };
        drop(tx);
        writer.join().unwrap().unwrap();
        assert_eq!(policy, libc::SCHED_IDLE, "policy of the writer thread");
    }
}
