//! The record file: one JSON line ([`ProviderRecord`]) per finished call,
//! written by a thread of its own; no record is kept in memory.
//!
//! A call's guard serializes its record into a line when the call ends and
//! sends it down a bounded channel. The writer thread takes every line
//! waiting, writes them with one `write` (whole lines only: a process
//! killed between writes leaves whole lines, one killed inside a write at
//! most a cut-off last line) as soon as the channel is empty (or a reader
//! asks for a sync, or 1 MiB is gathered), and counts them: that count is
//! a record's *position*, in write order, the unit of
//! [`RecordsWritten`] and of `GET /_fake/records?after=N`. Calls finish out
//! of arrival order, so a position is not a record's `seq`.
//!
//! A new run rotates the file it is given (FILE to FILE.1, FILE.1 to
//! FILE.2, ...) instead of truncating it: when the provider starts, and at
//! each reset (`POST /_fake/reset`). Each line is handed over with its
//! run's number: a line of an earlier run (a call still open at the
//! reset) is appended to FILE.1, the file of the run before, so FILE
//! holds the current run's calls only. The cap bounds FILE and its
//! rotated copies together: the oldest run's file is deleted first, and
//! once the current run's file alone would pass the cap, every later
//! record is dropped and counted.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures_util::Stream;
use tokio::io::AsyncReadExt as _;
use tokio::sync::oneshot;
use tracing::warn;
use wire::ProviderRecord;

/// The writer remembers the byte offset of every `STRIDE`-th line, so a
/// read from position N seeks near it and skips at most `STRIDE - 1`
/// lines, while the index costs 8 bytes per `STRIDE` records (about 100 KB
/// for a 1 GiB file).
const STRIDE: u64 = 256;

/// Lines waiting for the writer, at most. Past it a finishing call waits
/// for the disk instead of the queue (and the memory) growing without end:
/// at 80,000 calls/s it is 200 ms of records, about 7 MB.
const QUEUE: usize = 16 * 1024;

/// The writer writes what it has gathered once it holds this much, even
/// with more waiting, so its buffer stays small.
const BATCH_BYTES: usize = 1 << 20;

/// A line's one allocation: a record is about 350 bytes, so it is written
/// without growing (and 512 is one of jemalloc's size classes).
const LINE_CAPACITY: usize = 512;

/// What a read of the file sends at a time.
const CHUNK: usize = 64 * 1024;

/// What the record file holds: whole lines only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordsWritten {
    /// Records (lines) in the file: the position, in write order, of a
    /// reader who has read all of them.
    pub records: u64,
    /// The file's length up to the end of its last whole line.
    pub bytes: u64,
}

/// The record file as the server sees it: where lines go, and what the
/// writer has written.
pub(crate) struct RecordFile {
    tx: SyncSender<Msg>,
    state: Arc<State>,
    path: PathBuf,
    temporary: bool,
}

/// What the writer publishes for the server.
#[derive(Default)]
struct State {
    progress: Mutex<Progress>,
    dropped: AtomicU64,
}

#[derive(Default)]
struct Progress {
    written: RecordsWritten,
    /// The byte offset of line `i * STRIDE`, for each such line written.
    index: Vec<u64>,
}

enum Msg {
    /// A record's line, and its run's number.
    Line(u64, Vec<u8>),
    /// Start run N's file: FILE becomes FILE.1 (the earlier runs' files
    /// move up by one), and FILE starts empty.
    Rotate(u64, oneshot::Sender<io::Result<Rotated>>),
    /// Answer once everything sent before is written.
    Sync(Reply),
    /// Write everything sent before, close the file, answer, stop.
    Close(Reply),
}

/// Where the writer answers: a task, or a thread that blocks.
enum Reply {
    Task(oneshot::Sender<RecordsWritten>),
    Thread(mpsc::Sender<RecordsWritten>),
}

impl Reply {
    fn send(self, written: RecordsWritten) {
        // The asker may have gone away; nothing to do then.
        match self {
            Reply::Task(tx) => {
                let _ = tx.send(written);
            }
            Reply::Thread(tx) => {
                let _ = tx.send(written);
            }
        }
    }
}

/// What a rotation did: the run before's file, and what it held.
#[derive(Debug, Clone)]
pub(crate) struct Rotated {
    pub(crate) previous: PathBuf,
    pub(crate) written: RecordsWritten,
}

/// `?after=N` could not be served.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReadError {
    #[error("after={after} is past the last record written ({end})")]
    PastEnd { after: u64, end: u64 },
    #[error("a reset started the records file anew while it was read: ask again")]
    Reset,
    #[error("cannot read the records file: {0}")]
    Io(#[from] io::Error),
}

/// Poisoning means the writer panicked mid-update; the figures it left are
/// still whole numbers, so go on.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn with_path(path: &Path, what: &str, err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("{what} {}: {err}", path.display()))
}

impl RecordFile {
    /// Opens the record file at `to` (rotating an earlier run's, and
    /// trimming earlier runs' files to `max_bytes`), or a new one in a
    /// temporary directory, removed when the writer stops; starts the
    /// writer thread.
    pub(crate) fn open(to: Option<PathBuf>, max_bytes: u64) -> io::Result<RecordFile> {
        let (path, temporary) = match to {
            Some(path) => (path, false),
            None => (temporary_path()?, true),
        };
        let mut old = rotate(&path).map_err(|e| with_path(&path, "cannot rotate", e))?;
        let mut old_bytes = old.iter().map(|(_, n)| n).sum();
        trim(&mut old, &mut old_bytes, max_bytes);
        // Append: after a failed write the file is cut back to its last
        // whole line, and the next write goes there.
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| with_path(&path, "cannot open", e))?;
        // An empty file of an earlier run is not rotated: it is reused.
        file.set_len(0)?;
        let state = Arc::new(State::default());
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let writer = Writer {
            file,
            path: path.clone(),
            temporary,
            rx,
            state: state.clone(),
            cap: max_bytes,
            old,
            old_bytes,
            written: RecordsWritten::default(),
            batch: Vec::with_capacity(64 * 1024),
            batch_lines: 0,
            batch_index: Vec::new(),
            full: false,
            failed: false,
            run: 0,
            previous: None,
        };
        std::thread::Builder::new()
            .name("provider-records".into())
            .spawn(move || writer.run())?;
        Ok(RecordFile {
            tx,
            state,
            path,
            temporary,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Removes a temporary file and its directory now, for a provider
    /// dropped without a shutdown: the writer would remove them once every
    /// call is gone, but the process may end first. (It may go on writing
    /// to the unlinked file meanwhile; no reader is left to see it.)
    pub(crate) fn remove_if_temporary(&self) {
        if self.temporary {
            remove_temporary(&self.path);
        }
    }

    /// Hands a finished call's record, of run number `run`, to the
    /// writer. The hot path: one allocation (the line), no lock. With the
    /// writer's queue full, waits for the disk.
    pub(crate) fn push(&self, run: u64, record: &ProviderRecord) {
        let mut line = Vec::with_capacity(LINE_CAPACITY);
        // Serializing a plain struct into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut line, record);
        line.push(b'\n');
        if self.tx.send(Msg::Line(run, line)).is_err() {
            // The writer has closed the file (shutdown).
            self.state.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// What the writer has written so far (records still queued are not).
    pub(crate) fn written(&self) -> RecordsWritten {
        lock(&self.state.progress).written
    }

    /// Records dropped: over the cap, after a failed write, or after the
    /// file was closed.
    pub(crate) fn dropped(&self) -> u64 {
        self.state.dropped.load(Ordering::Relaxed)
    }

    /// Waits until every record handed over before is written.
    pub(crate) async fn sync(&self) -> RecordsWritten {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Sync(Reply::Task(tx))).is_ok() {
            if let Ok(written) = rx.await {
                return written;
            }
        }
        self.written()
    }

    /// [`RecordFile::sync`] for a caller that is not a task: blocks the
    /// thread (the writer is a thread of its own, so even a runtime's only
    /// thread can wait for it).
    pub(crate) fn sync_blocking(&self) -> RecordsWritten {
        let (tx, rx) = mpsc::channel();
        if self.tx.send(Msg::Sync(Reply::Thread(tx))).is_ok() {
            if let Ok(written) = rx.recv() {
                return written;
            }
        }
        self.written()
    }

    /// Starts run number `run`'s file (a larger number than any before):
    /// what is handed over before is written first, FILE becomes FILE.1
    /// (an empty FILE.1, a run whose file stayed empty, is replaced rather
    /// than moved up), FILE starts empty, and the written and dropped
    /// counts start from zero. Lines of earlier runs handed over later are
    /// appended to FILE.1.
    pub(crate) async fn rotate(&self, run: u64) -> io::Result<Rotated> {
        let (tx, rx) = oneshot::channel();
        let closed = || io::Error::other("the records writer has stopped");
        self.tx.send(Msg::Rotate(run, tx)).map_err(|_| closed())?;
        rx.await.map_err(|_| closed())?
    }

    /// Writes every record handed over before, closes the file and stops
    /// the writer (a temporary file is removed). Records handed over later
    /// are dropped.
    pub(crate) async fn close(&self) -> RecordsWritten {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Close(Reply::Task(tx))).is_ok() {
            if let Ok(written) = rx.await {
                return written;
            }
        }
        self.written()
    }

    /// Every record in the file, after a sync. Reads the whole file into
    /// memory: for tests and small runs.
    pub(crate) fn read_all(&self) -> Vec<ProviderRecord> {
        let end = self.sync_blocking();
        let Ok(file) = File::open(&self.path) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for line in BufReader::new(file.take(end.bytes)).split(b'\n') {
            let Ok(line) = line else { break };
            if let Ok(record) = serde_json::from_slice(&line) {
                out.push(record);
            }
        }
        out
    }

    /// The lines after position `after`, up to the position current after
    /// a sync, as a stream read from the file a chunk at a time; and that
    /// end position.
    pub(crate) async fn read_after(
        &self,
        after: u64,
    ) -> Result<(impl Stream<Item = io::Result<Bytes>>, RecordsWritten), ReadError> {
        let end = self.sync().await;
        if after > end.records {
            return Err(ReadError::PastEnd {
                after,
                end: end.records,
            });
        }
        // From the indexed line at or before `after`, or from the end.
        let (line, byte) = if after == end.records {
            (after, end.bytes)
        } else {
            let i = after / STRIDE;
            // Line i·STRIDE ≤ after < end.records is written, so indexed,
            // unless a reset started the file anew since.
            let byte = lock(&self.state.progress).index.get(i as usize).copied();
            (i * STRIDE, byte.ok_or(ReadError::Reset)?)
        };
        let path = self.path.clone();
        let (file, start) =
            tokio::task::spawn_blocking(move || seek_line(&path, byte, after - line))
                .await
                .map_err(io::Error::other)??;
        let file = tokio::fs::File::from_std(file);
        let left = end.bytes - start;
        let stream = futures_util::stream::unfold((file, left), |(mut file, left)| async move {
            if left == 0 {
                return None;
            }
            let mut buf = vec![0; CHUNK.min(left as usize)];
            match file.read(&mut buf).await {
                Ok(0) => Some((Err(io::ErrorKind::UnexpectedEof.into()), (file, 0))),
                Ok(n) => {
                    buf.truncate(n);
                    Some((Ok(Bytes::from(buf)), (file, left - n as u64)))
                }
                Err(e) => Some((Err(e), (file, 0))),
            }
        });
        Ok((stream, end))
    }
}

/// Opens `path` at `byte` (the start of a line), skips `skip` lines, and
/// gives the file positioned there with that offset.
fn seek_line(path: &Path, byte: u64, skip: u64) -> io::Result<(File, u64)> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(byte))?;
    let mut at = byte;
    if skip > 0 {
        let mut reader = BufReader::new(file);
        let mut buf = Vec::new();
        for _ in 0..skip {
            buf.clear();
            let n = reader.read_until(b'\n', &mut buf)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            at += n as u64;
        }
        file = reader.into_inner();
        file.seek(SeekFrom::Start(at))?;
    }
    Ok((file, at))
}

/// A fresh file in a directory of its own under the system's temporary
/// directory: `rehearse-provider-PID-N/provider.jsonl`.
fn temporary_path() -> io::Result<PathBuf> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("rehearse-provider-{}-{n}", std::process::id()));
    fs::create_dir_all(&dir).map_err(|e| with_path(&dir, "cannot create", e))?;
    Ok(dir.join(wire::files::PROVIDER_RECORDS))
}

/// Removes a temporary record file, its earlier runs' files (a reset's)
/// and its directory (gone already: fine).
fn remove_temporary(path: &Path) {
    let _ = fs::remove_file(path);
    let mut k = 1;
    while fs::remove_file(numbered(path, k)).is_ok() {
        k += 1;
    }
    if let Some(dir) = path.parent() {
        let _ = fs::remove_dir(dir);
    }
}

/// `path` with `.k` added: an earlier run's file.
fn numbered(path: &Path, k: usize) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{k}"));
    PathBuf::from(name)
}

/// Moves an earlier run's file at `path` to `path.1`, `path.1` to
/// `path.2` and so on; gives the earlier runs' files, newest first, with
/// their sizes. An empty file at `path` is left to be reused.
fn rotate(path: &Path) -> io::Result<Vec<(PathBuf, u64)>> {
    let mut sizes = Vec::new();
    while let Ok(meta) = fs::metadata(numbered(path, sizes.len() + 1)) {
        sizes.push(meta.len());
    }
    match fs::metadata(path) {
        Ok(meta) if meta.is_file() && meta.len() > 0 => {
            for k in (1..=sizes.len()).rev() {
                fs::rename(numbered(path, k), numbered(path, k + 1))?;
            }
            fs::rename(path, numbered(path, 1))?;
            sizes.insert(0, meta.len());
        }
        _ => {}
    }
    Ok(sizes
        .into_iter()
        .enumerate()
        .map(|(i, n)| (numbered(path, i + 1), n))
        .collect())
}

/// Deletes earlier runs' files, oldest first, until they hold `cap` bytes
/// at most.
fn trim(old: &mut Vec<(PathBuf, u64)>, old_bytes: &mut u64, cap: u64) {
    while *old_bytes > cap {
        let Some((path, bytes)) = old.pop() else {
            break;
        };
        remove_old(&path);
        *old_bytes -= bytes;
    }
}

fn remove_old(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => {
            tracing::info!(path = %path.display(), "an earlier run's records file removed (over the cap)")
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        // Counted as gone all the same: trying again at every line would
        // not free the disk either.
        Err(e) => {
            warn!(path = %path.display(), cause = %e, "cannot remove an earlier run's records file")
        }
    }
}

/// The writer thread's state.
struct Writer {
    file: File,
    path: PathBuf,
    temporary: bool,
    rx: Receiver<Msg>,
    state: Arc<State>,
    cap: u64,
    /// Earlier runs' files, newest first, with their sizes.
    old: Vec<(PathBuf, u64)>,
    old_bytes: u64,
    written: RecordsWritten,
    /// Whole lines gathered, not yet written.
    batch: Vec<u8>,
    batch_lines: u64,
    /// Index entries for lines in `batch`.
    batch_index: Vec<u64>,
    /// The current run's file reached the cap: later records are dropped.
    full: bool,
    /// The current run's number: lines of a smaller one go to `previous`.
    run: u64,
    /// FILE.1 (the run before's file), open for the lines of calls still
    /// open at the reset; `None` before the first reset, or once the cap
    /// removed it.
    previous: Option<File>,
    /// A write failed (said once).
    failed: bool,
}

impl Writer {
    fn run(mut self) {
        while let Ok(first) = self.rx.recv() {
            let mut next = Some(first);
            while let Some(msg) = next {
                match msg {
                    Msg::Line(run, line) if run < self.run => self.earlier(&line),
                    Msg::Line(_, line) => self.gather(&line),
                    Msg::Rotate(run, reply) => {
                        let _ = reply.send(self.rotate(run));
                    }
                    // Answered at once, not when the channel is next
                    // empty: under a steady stream of calls that could be
                    // a while.
                    Msg::Sync(reply) => {
                        self.write();
                        reply.send(self.written);
                    }
                    Msg::Close(reply) => {
                        self.write();
                        let written = self.finish();
                        reply.send(written);
                        return;
                    }
                }
                if self.batch.len() >= BATCH_BYTES {
                    self.write();
                }
                next = self.rx.try_recv().ok();
            }
            // The channel is empty: write what is gathered.
            self.write();
        }
        // Every sender is gone: the provider was dropped without a shutdown.
        self.finish();
    }

    /// Adds a line to the batch, within the cap.
    fn gather(&mut self, line: &[u8]) {
        if self.full {
            self.state.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let size = self.written.bytes + (self.batch.len() + line.len()) as u64;
        while size.saturating_add(self.old_bytes) > self.cap {
            let Some((path, bytes)) = self.old.pop() else {
                break;
            };
            remove_old(&path);
            self.old_bytes -= bytes;
            if self.old.is_empty() {
                self.previous = None;
            }
        }
        if size > self.cap {
            self.full = true;
            self.state.dropped.fetch_add(1, Ordering::Relaxed);
            warn!(
                path = %self.path.display(),
                cap = self.cap,
                records = self.written.records + self.batch_lines,
                "the records file reached its size cap: later records are dropped (counted as records_dropped)"
            );
            return;
        }
        if (self.written.records + self.batch_lines) % STRIDE == 0 {
            self.batch_index
                .push(self.written.bytes + self.batch.len() as u64);
        }
        self.batch.extend_from_slice(line);
        self.batch_lines += 1;
    }

    /// A line of an earlier run: appended to FILE.1 at once (there are
    /// few: the calls open at a reset), within the cap.
    fn earlier(&mut self, line: &[u8]) {
        let fits =
            self.written.bytes + self.batch.len() as u64 + self.old_bytes + line.len() as u64
                <= self.cap;
        let written = match self.previous.as_mut() {
            Some(file) if fits => file.write_all(line).is_ok(),
            _ => false,
        };
        if written {
            self.old_bytes += line.len() as u64;
            if let Some(first) = self.old.first_mut() {
                first.1 += line.len() as u64;
            }
        } else {
            self.state.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// [`RecordFile::rotate`], on the writer's side.
    fn rotate(&mut self, run: u64) -> io::Result<Rotated> {
        self.write();
        let first = numbered(&self.path, 1);
        let before = self.written;
        if run <= self.run {
            return Ok(Rotated {
                previous: first,
                written: RecordsWritten::default(),
            });
        }
        // An empty FILE.1 is a run whose file stayed empty: replaced, so
        // resets without calls do not pile up empty files.
        let replace = matches!(self.old.first(), Some((_, 0)));
        if !replace {
            for k in (1..=self.old.len()).rev() {
                fs::rename(numbered(&self.path, k), numbered(&self.path, k + 1))
                    .map_err(|e| with_path(&numbered(&self.path, k), "cannot rotate", e))?;
            }
            self.old.insert(0, (first.clone(), 0));
            for (k, entry) in self.old.iter_mut().enumerate() {
                entry.0 = numbered(&self.path, k + 1);
            }
        }
        fs::rename(&self.path, &first).map_err(|e| with_path(&self.path, "cannot rotate", e))?;
        self.old[0].1 = before.bytes;
        self.old_bytes += before.bytes;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| with_path(&self.path, "cannot open", e))?;
        file.set_len(0)?;
        // The open file moved with its name: it is FILE.1 now.
        self.previous = Some(std::mem::replace(&mut self.file, file));
        self.run = run;
        self.written = RecordsWritten::default();
        self.full = false;
        self.state.dropped.store(0, Ordering::Relaxed);
        {
            let mut progress = lock(&self.state.progress);
            progress.written = self.written;
            progress.index.clear();
        }
        Ok(Rotated {
            previous: first,
            written: before,
        })
    }

    /// Writes the batch with one `write` (whole lines), then publishes
    /// what the file holds. No lock is held while writing.
    fn write(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        match self.file.write_all(&self.batch) {
            Ok(()) => {
                self.written.records += self.batch_lines;
                self.written.bytes += self.batch.len() as u64;
                let mut progress = lock(&self.state.progress);
                progress.written = self.written;
                progress.index.append(&mut self.batch_index);
            }
            Err(err) => {
                // Whole lines only: cut off what part of the batch went in.
                let _ = self.file.set_len(self.written.bytes);
                self.state
                    .dropped
                    .fetch_add(self.batch_lines, Ordering::Relaxed);
                self.batch_index.clear();
                if !self.failed {
                    self.failed = true;
                    warn!(path = %self.path.display(), cause = %err, "cannot write records: they are dropped (counted as records_dropped)");
                }
            }
        }
        self.batch.clear();
        self.batch_lines = 0;
    }

    /// Closes the file (removing it if temporary) and stops taking lines.
    fn finish(self) -> RecordsWritten {
        let Writer {
            file,
            path,
            temporary,
            rx,
            written,
            ..
        } = self;
        drop(rx);
        drop(file);
        if temporary {
            remove_temporary(&path);
        }
        written
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "rehearse-records-unit-{}-{name}",
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn rotation_shifts_every_earlier_file_by_one() {
        let d = dir("rotate");
        let f = d.join("p.jsonl");
        fs::write(&f, "c\n").unwrap();
        fs::write(numbered(&f, 1), "bb\n").unwrap();
        fs::write(numbered(&f, 2), "aaa\n").unwrap();
        let old = rotate(&f).unwrap();
        assert_eq!(
            old,
            vec![
                (numbered(&f, 1), 2),
                (numbered(&f, 2), 3),
                (numbered(&f, 3), 4)
            ]
        );
        assert!(!f.exists());
        assert_eq!(fs::read_to_string(numbered(&f, 3)).unwrap(), "aaa\n");
        assert_eq!(fs::read_to_string(numbered(&f, 1)).unwrap(), "c\n");
        // An empty file is reused, not rotated.
        fs::write(&f, "").unwrap();
        assert_eq!(rotate(&f).unwrap().len(), 3);
        assert!(!numbered(&f, 4).exists());
        fs::remove_dir_all(&d).unwrap();
    }

    fn record(id: &str, run_id: &str) -> ProviderRecord {
        serde_json::from_value(serde_json::json!({
            "id": id, "run_id": run_id, "received_us": 1, "admitted_us": null,
            "first_byte_us": null, "finished_us": 2, "hung_up_us": null,
            "prompt_tokens": 1, "completion_tokens": 1, "phase": "base",
            "outcome": "ok", "status": 200,
        }))
        .unwrap()
    }

    fn ids(path: &Path) -> Vec<String> {
        fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str::<ProviderRecord>(l).unwrap().id)
            .collect()
    }

    #[tokio::test]
    async fn a_reset_starts_the_file_anew_and_an_earlier_runs_lines_go_to_its_file() {
        let d = dir("reset");
        let f = d.join("p.jsonl");
        let file = RecordFile::open(Some(f.clone()), u64::MAX).unwrap();
        file.push(0, &record("a", "r0"));
        let rotated = file.rotate(1).await.unwrap();
        assert_eq!(rotated.previous, numbered(&f, 1));
        assert_eq!(rotated.written.records, 1);
        assert_eq!(file.written(), RecordsWritten::default());
        // A call of run 0 ends after the reset: its line goes to FILE.1.
        file.push(0, &record("late", "r0"));
        file.push(1, &record("b", "r1"));
        assert_eq!(file.sync().await.records, 1);
        assert_eq!(ids(&f), ["b"]);
        assert_eq!(ids(&numbered(&f, 1)), ["a", "late"]);
        // Run 2 starts: run 1's file moves up; an empty run's file is
        // replaced by the next one instead of piling up.
        file.rotate(2).await.unwrap();
        file.rotate(3).await.unwrap();
        assert_eq!(ids(&numbered(&f, 1)), Vec::<String>::new());
        assert_eq!(ids(&numbered(&f, 2)), ["b"]);
        file.rotate(4).await.unwrap();
        assert_eq!(ids(&numbered(&f, 2)), ["b"], "the empty file was replaced");
        assert!(!numbered(&f, 4).exists());
        // A stale rotation (an older run number) changes nothing.
        file.push(4, &record("c", "r4"));
        file.rotate(3).await.unwrap();
        assert_eq!(file.sync().await.records, 1);
        file.close().await;
        fs::remove_dir_all(&d).unwrap();
    }

    #[tokio::test]
    async fn a_temporary_file_goes_with_its_earlier_runs() {
        let file = RecordFile::open(None, u64::MAX).unwrap();
        file.push(0, &record("a", "r0"));
        file.rotate(1).await.unwrap();
        let (path, dir) = (
            file.path().to_path_buf(),
            file.path().parent().unwrap().to_path_buf(),
        );
        assert!(numbered(&path, 1).exists());
        file.close().await;
        assert!(!dir.exists(), "{}", dir.display());
    }

    #[test]
    fn trimming_deletes_the_oldest_first() {
        let d = dir("trim");
        let f = d.join("p.jsonl");
        for k in 1..=3 {
            fs::write(numbered(&f, k), "x".repeat(10)).unwrap();
        }
        let mut old = rotate(&f).unwrap();
        let mut bytes = 30;
        trim(&mut old, &mut bytes, 25);
        assert_eq!(bytes, 20);
        assert!(!numbered(&f, 3).exists());
        assert!(numbered(&f, 2).exists());
        fs::remove_dir_all(&d).unwrap();
    }
}
