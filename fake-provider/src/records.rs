//! The record file: one JSON line ([`ProviderRecord`]) per finished call,
//! written by a thread of its own; no record is kept in memory longer
//! than the writer's period.
//!
//! A call's guard serializes its record into a line when the call ends,
//! into its thread's *lane*: a buffer of its own for each thread that
//! serves calls, behind a lock that only the writer ever shares (and only
//! for the moment it takes the lines). Handing a line over wakes no one:
//! the writer takes every lane's lines on a period ([`PERIOD`], while
//! calls end), at once when a lane holds a batch ([`LANE_BATCH_BYTES`]:
//! one wake-up per batch), and before it answers a sync, a rotation or a
//! close. With no calls ending it sleeps, and the first line after wakes
//! it, to take the lines a period later. A record is thus in the file
//! within a period of its call's end (and the time the disk takes).
//! Each thread's lane holds at most [`LANE_MAX_BYTES`]: past it the call
//! that pushes waits for the writer to take them, so a slow disk holds
//! calls back instead of the memory growing without end.
//!
//! The writer writes what it has taken with one `write` (whole lines
//! only: a process killed between writes leaves whole lines, one killed
//! inside a write at most a cut-off last line; 1 MiB at most at a time),
//! and counts them: that count is a record's *position*, in write order,
//! the unit of [`RecordsWritten`] and of `GET /_fake/records?after=N`.
//! Calls finish out of arrival order, so a position is not a record's
//! `seq`.
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
//!
//! Its room `line` writes a record's line by hand, field by field, in the
//! bytes serde_json would write.

use std::cell::RefCell;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::Stream;
use tokio::io::AsyncReadExt as _;
use tokio::sync::oneshot;
use tracing::warn;
use wire::ProviderRecord;

mod line;

/// The writer remembers the byte offset of every `STRIDE`-th line, so a
/// read from position N seeks near it and skips at most `STRIDE - 1`
/// lines, while the index costs 8 bytes per `STRIDE` records (about 100 KB
/// for a 1 GiB file).
const STRIDE: u64 = 256;

/// While calls end, the writer takes the lanes' lines this often: 100
/// wake-ups a second whatever the rate (one per call before: a fifth of
/// a core's samples at 27,000 calls a second went to waking the writer
/// and switching to it and back), and a record in the file 10 ms after
/// its call at most, well inside the 100 ms a reader may count on.
const PERIOD: Duration = Duration::from_millis(10);

/// A lane holding this much asks the writer to take it now rather than
/// at its period's end: at 100,000 calls a second on one thread a period
/// gathers about 350 KB, so this keeps a lane (and the writer's batch)
/// small with a wake-up per 700 records or so.
const LANE_BATCH_BYTES: usize = 256 * 1024;

/// The most a lane holds: past it the call that pushed waits until the
/// writer has taken the lane's lines (a slow disk), instead of the memory
/// growing without end. About 12,000 records, 150 ms of one thread's calls
/// at 80,000 a second; the bound of the whole is this times the threads
/// that serve calls.
const LANE_MAX_BYTES: usize = 4 * 1024 * 1024;

/// The writer writes what it has gathered once it holds this much, even
/// with more waiting, so its buffer stays small.
const BATCH_BYTES: usize = 1 << 20;

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
    /// Which record file this is, for the threads' lanes into it.
    id: u64,
    tx: Sender<Msg>,
    state: Arc<State>,
    path: PathBuf,
    temporary: bool,
}

/// What the writer and the threads that push share.
struct State {
    progress: Mutex<Progress>,
    dropped: AtomicU64,
    /// Every thread's lane, for the writer to take their lines.
    lanes: Mutex<Lanes>,
    /// The writer sleeps until a line comes (the next push wakes it).
    asleep: AtomicBool,
    /// Times a push woke the writer or asked it to take a batch.
    asks: AtomicU64,
    limits: Limits,
}

/// When a lane asks the writer to take it, and when a push waits.
#[derive(Debug, Clone, Copy)]
struct Limits {
    /// [`LANE_BATCH_BYTES`].
    batch: usize,
    /// [`LANE_MAX_BYTES`].
    max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            batch: LANE_BATCH_BYTES,
            max: LANE_MAX_BYTES,
        }
    }
}

#[derive(Default)]
struct Lanes {
    all: Vec<Arc<Lane>>,
    /// The file was closed: a lane made now starts closed.
    closed: bool,
}

/// One thread's lines waiting for the writer.
#[derive(Default)]
struct Lane {
    held: Mutex<Held>,
    /// Signalled when the writer takes the lines of a lane a push waits on.
    taken: Condvar,
}

#[derive(Default)]
struct Held {
    /// Whole lines, one after another.
    bytes: Vec<u8>,
    /// Each line's run number and where it ends in `bytes`.
    lines: Vec<(u64, usize)>,
    /// The writer was asked to take this lane (once per batch).
    asked: bool,
    /// A push waits for the writer to take this lane.
    waiting: bool,
    /// The file is closed: a line pushed now is dropped (and counted).
    closed: bool,
}

thread_local! {
    /// This thread's lane into each record file it has pushed to, by the
    /// file's id (a process serves one provider, tests a few).
    static LANES: RefCell<Vec<(u64, Arc<Lane>)>> = const { RefCell::new(Vec::new()) };
}

#[derive(Default)]
struct Progress {
    written: RecordsWritten,
    /// The byte offset of line `i * STRIDE`, for each such line written.
    index: Vec<u64>,
}

enum Msg {
    /// Lines came while the writer slept: take them a period from now.
    Wake,
    /// A lane holds a batch: take the lines now.
    Take,
    /// Start run N's file: FILE becomes FILE.1 (the earlier runs' files
    /// move up by one), and FILE starts empty.
    Rotate(u64, oneshot::Sender<io::Result<Rotated>>),
    /// Answer once everything handed over before is written.
    Sync(Reply),
    /// Write everything handed over before, close the file, answer, stop.
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
        RecordFile::open_with(to, max_bytes, Limits::default())
    }

    fn open_with(to: Option<PathBuf>, max_bytes: u64, limits: Limits) -> io::Result<RecordFile> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
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
        let state = Arc::new(State {
            progress: Mutex::default(),
            dropped: AtomicU64::new(0),
            lanes: Mutex::default(),
            // Nothing to take yet: the first line wakes the writer.
            asleep: AtomicBool::new(true),
            asks: AtomicU64::new(0),
            limits,
        });
        let (tx, rx) = mpsc::channel();
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
            spare: Held::default(),
            pace: Pace::new(PERIOD),
            full: false,
            failed: false,
            run: 0,
            previous: None,
        };
        std::thread::Builder::new()
            .name("provider-records".into())
            .spawn(move || writer.run())?;
        Ok(RecordFile {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
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
    /// writer. The hot path: the line is serialized into this thread's
    /// lane, under a lock the writer takes only to empty the lane; no
    /// allocation once the lane has grown, and no wake-up but the first
    /// line after the writer fell asleep and one per batch. With the
    /// lane full, waits for the disk.
    ///
    /// `provider` is the name the line carries when the record names none
    /// (the provider's, borrowed from its config: no copy per call), and
    /// `run_id` the run's id it carries when the record's is empty (the
    /// run's own, likewise).
    pub(crate) fn push_named(
        &self,
        run: u64,
        record: &ProviderRecord,
        run_id: &str,
        provider: Option<&str>,
    ) {
        let pushed = LANES.try_with(|lanes| {
            let mut lanes = lanes.borrow_mut();
            let lane = match lanes.iter().find(|(id, _)| *id == self.id) {
                Some((_, lane)) => lane,
                None => {
                    // A file not seen on this thread: forget the lanes of
                    // files closed since (a test's providers), and join.
                    lanes.retain(|(_, lane)| !lock(&lane.held).closed);
                    lanes.push((self.id, self.state.join()));
                    &lanes.last().expect("just pushed").1
                }
            };
            self.push_into(lane, run, record, run_id, provider);
        });
        if pushed.is_err() {
            // This thread is ending (its locals are gone): a lane for
            // this one line, which the writer takes and then forgets.
            self.push_into(&self.state.join(), run, record, run_id, provider);
        }
    }

    /// [`RecordFile::push_named`] for the default provider.
    #[cfg(test)]
    pub(crate) fn push(&self, run: u64, record: &ProviderRecord) {
        self.push_named(run, record, "", None);
    }

    fn push_into(
        &self,
        lane: &Lane,
        run: u64,
        record: &ProviderRecord,
        run_id: &str,
        provider: Option<&str>,
    ) {
        let limits = self.state.limits;
        let mut held = lock(&lane.held);
        if held.closed {
            self.state.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        line::push_record(&mut held.bytes, record, run_id, provider);
        let end = held.bytes.len();
        held.lines.push((run, end));
        let ask = end >= limits.batch && !held.asked;
        if ask {
            held.asked = true;
            self.ask(Msg::Take);
        }
        if end >= limits.max {
            // Asked already (the bound is past the batch): wait for the
            // writer, behind the disk.
            while held.bytes.len() >= limits.max && !held.closed {
                held.waiting = true;
                held = lane.taken.wait(held).unwrap_or_else(|e| e.into_inner());
            }
            return;
        }
        drop(held);
        // After the line is in (the lock released): a writer that looked
        // at this lane before and fell asleep has said so by now.
        if !ask
            && self.state.asleep.load(Ordering::Relaxed)
            && self.state.asleep.swap(false, Ordering::AcqRel)
        {
            self.ask(Msg::Wake);
        }
    }

    fn ask(&self, msg: Msg) {
        self.state.asks.fetch_add(1, Ordering::Relaxed);
        // The writer gone (closed) marks every lane closed first: the
        // line was dropped and counted, or taken.
        let _ = self.tx.send(msg);
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

impl State {
    /// A new lane, registered with the writer (closed if the file is).
    fn join(&self) -> Arc<Lane> {
        let lane = Arc::new(Lane::default());
        let mut lanes = lock(&self.lanes);
        lock(&lane.held).closed = lanes.closed;
        lanes.all.push(lane.clone());
        lane
    }

    /// Marks every lane closed (a push then drops its line) and frees the
    /// pushes waiting: the writer is stopping. Lines still in a lane are
    /// left there, dropped with it, and counted.
    fn close_lanes(&self) {
        let mut lanes = lock(&self.lanes);
        lanes.closed = true;
        for lane in &lanes.all {
            let mut held = lock(&lane.held);
            held.closed = true;
            self.dropped
                .fetch_add(held.lines.len() as u64, Ordering::Relaxed);
            held.bytes = Vec::new();
            held.lines = Vec::new();
            if std::mem::take(&mut held.waiting) {
                lane.taken.notify_all();
            }
        }
        lanes.all.clear();
    }
}

/// Closes the lanes when the writer stops, however it stops (a panic
/// included), so no push waits for it for ever.
struct LanesClosed(Arc<State>);

impl Drop for LanesClosed {
    fn drop(&mut self) {
        self.0.close_lanes();
    }
}

/// When the writer next takes the lanes' lines: a period after a push
/// woke it, then every period while lines keep coming; never while none
/// come (it sleeps until a push wakes it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Pace {
    period: Duration,
    due: Option<Instant>,
}

impl Pace {
    fn new(period: Duration) -> Pace {
        Pace { period, due: None }
    }

    /// A line came while the writer slept: take it a period from `now`.
    /// Already due: unchanged (wake-ups do not put the taking off).
    fn woken(&mut self, now: Instant) {
        self.due.get_or_insert(now + self.period);
    }

    /// The lines were taken at `now`, the period over: if any came, the
    /// next are due a period later; else the writer sleeps.
    fn taken(&mut self, now: Instant, any: bool) {
        self.due = any.then(|| now + self.period);
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
    /// An emptied lane's buffers, swapped into the next lane taken, so
    /// taking allocates nothing.
    spare: Held,
    pace: Pace,
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
        let _closed = LanesClosed(self.state.clone());
        loop {
            let msg = match self.pace.due {
                None => self.rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Some(due) => self
                    .rx
                    .recv_timeout(due.saturating_duration_since(Instant::now())),
            };
            match msg {
                Ok(Msg::Wake) => self.pace.woken(Instant::now()),
                Ok(Msg::Take) => {
                    self.take();
                    self.write();
                }
                Ok(Msg::Rotate(run, reply)) => {
                    self.take();
                    let _ = reply.send(self.rotate(run));
                }
                Ok(Msg::Sync(reply)) => {
                    self.take();
                    self.write();
                    reply.send(self.written);
                }
                Ok(Msg::Close(reply)) => {
                    self.take();
                    self.write();
                    // Before answering: a line pushed after the answer
                    // finds its lane closed, and is counted dropped.
                    self.state.close_lanes();
                    let written = self.finish();
                    reply.send(written);
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {
                    let any = self.take();
                    self.write();
                    self.pace.taken(Instant::now(), any);
                    if !any {
                        self.fall_asleep();
                    }
                }
                // Every sender is gone: the provider was dropped without
                // a shutdown.
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        self.take();
        self.write();
        self.finish();
    }

    /// Says it sleeps, then looks at every lane once more: a line pushed
    /// before the saying was not followed by a wake-up, so it is taken a
    /// period from now; one pushed after it wakes the writer. (A push
    /// reads `asleep` after releasing its lane's lock, and this reads the
    /// lanes after setting it, each under that lock: one sees the other.)
    fn fall_asleep(&mut self) {
        self.state.asleep.store(true, Ordering::SeqCst);
        let waiting = lock(&self.state.lanes)
            .all
            .iter()
            .any(|lane| !lock(&lane.held).lines.is_empty());
        if waiting && self.state.asleep.swap(false, Ordering::AcqRel) {
            self.pace.woken(Instant::now());
        }
    }

    /// Takes every lane's lines into the batch (writing it whenever it
    /// passes [`BATCH_BYTES`]); true if there were any. Forgets the lanes
    /// of threads gone (nothing but this list holds them) once empty.
    fn take(&mut self) -> bool {
        let state = self.state.clone();
        let mut lanes = lock(&state.lanes);
        let mut any = false;
        lanes.all.retain(|lane| {
            {
                let mut held = lock(&lane.held);
                if held.lines.is_empty() {
                    return Arc::strong_count(lane) > 1;
                }
                std::mem::swap(&mut held.bytes, &mut self.spare.bytes);
                std::mem::swap(&mut held.lines, &mut self.spare.lines);
                held.asked = false;
                if std::mem::take(&mut held.waiting) {
                    lane.taken.notify_all();
                }
            }
            any = true;
            self.gather_taken();
            true
        });
        any
    }

    /// The lines just taken from a lane (in `spare`), each to its run's
    /// file; `spare` left empty (its room kept).
    fn gather_taken(&mut self) {
        let mut spare = std::mem::take(&mut self.spare);
        let mut start = 0;
        for &(run, end) in &spare.lines {
            let line = &spare.bytes[start..end];
            if run < self.run {
                self.earlier(line);
            } else {
                self.gather(line);
            }
            start = end;
            if self.batch.len() >= BATCH_BYTES {
                self.write();
            }
        }
        spare.bytes.clear();
        spare.lines.clear();
        self.spare = spare;
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

    #[test]
    fn the_writer_takes_the_lines_a_period_after_a_wake_up_and_then_every_period() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut pace = Pace::new(Duration::from_millis(10));
        assert_eq!(pace.due, None, "asleep until a line comes");
        pace.woken(ms(3));
        assert_eq!(pace.due, Some(ms(13)));
        // More wake-ups do not put the taking off.
        pace.woken(ms(9));
        assert_eq!(pace.due, Some(ms(13)));
        // Lines were there: the next are due a period later.
        pace.taken(ms(13), true);
        assert_eq!(pace.due, Some(ms(23)));
        pace.taken(ms(24), true);
        assert_eq!(pace.due, Some(ms(34)));
        // A period with none: asleep again, until the next wake-up.
        pace.taken(ms(34), false);
        assert_eq!(pace.due, None);
        pace.woken(ms(500));
        assert_eq!(pace.due, Some(ms(510)));
    }

    /// Polls `what` every millisecond for up to 2 s (a period is 10 ms:
    /// the margin is for a busy machine, not the writer).
    fn within_2s(what: impl Fn() -> bool) -> bool {
        let deadline = Instant::now() + Duration::from_secs(2);
        while Instant::now() < deadline {
            if what() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        what()
    }

    #[tokio::test]
    async fn records_reach_the_file_without_a_sync_and_without_a_wake_up_each() {
        let d = dir("period");
        let f = d.join("p.jsonl");
        let file = RecordFile::open(Some(f.clone()), u64::MAX).unwrap();
        file.push(0, &record("first", "r0"));
        assert!(
            within_2s(|| file.written().records == 1),
            "the line is not in the file 2 s after it was pushed"
        );
        assert_eq!(ids(&f), ["first"]);
        let asks = file.state.asks.load(Ordering::Relaxed);
        assert_eq!(asks, 1, "the first line woke the writer");
        // 10,000 more in a row: a wake-up each would be 10,000 asks; a
        // batch is about 700 of these lines, a period a wake-up at most.
        for i in 0..10_000 {
            file.push(0, &record(&format!("r{i}"), "r0"));
        }
        let asks = file.state.asks.load(Ordering::Relaxed) - asks;
        assert!(asks < 1_000, "{asks} wake-ups for 10,000 lines");
        assert!(within_2s(|| file.written().records == 10_001));
        assert_eq!(ids(&f).len(), 10_001);
        // Once closed, a line is dropped and counted.
        assert_eq!(file.close().await.records, 10_001);
        file.push(0, &record("late", "r0"));
        assert_eq!(file.dropped(), 1);
        assert_eq!(ids(&f).len(), 10_001);
        fs::remove_dir_all(&d).unwrap();
    }

    #[tokio::test]
    async fn each_thread_has_its_lane_and_a_gone_threads_lane_is_forgotten() {
        let d = dir("lanes");
        let f = d.join("p.jsonl");
        let file = Arc::new(RecordFile::open(Some(f.clone()), u64::MAX).unwrap());
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let file = file.clone();
                std::thread::spawn(move || {
                    for i in 0..1_000 {
                        file.push(0, &record(&format!("t{t}-{i}"), "r0"));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(file.sync().await.records, 4_000);
        let mut got = ids(&f);
        got.sort();
        got.dedup();
        assert_eq!(got.len(), 4_000, "every line once");
        // Positions index the file: line 3,000 onwards is 1,000 lines.
        let (stream, end) = file.read_after(3_000).await.unwrap();
        let bytes: Vec<Bytes> = futures_util::StreamExt::collect::<Vec<_>>(stream)
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        assert_eq!(end.records, 4_000);
        assert_eq!(bytes.concat().split(|b| *b == b'\n').count() - 1, 1_000);
        // The threads are gone, their lanes emptied: forgotten at the next take.
        file.sync().await;
        assert_eq!(lock(&file.state.lanes).all.len(), 0);
        file.close().await;
        fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn a_full_lane_holds_its_thread_until_the_writer_takes_it() {
        let d = dir("full");
        let f = d.join("p.jsonl");
        let line = serde_json::to_vec(&record("x", "r0")).unwrap().len() + 1;
        let limits = Limits {
            batch: 2 * line,
            max: 4 * line,
        };
        let file = Arc::new(RecordFile::open_with(Some(f.clone()), u64::MAX, limits).unwrap());
        let (joined_tx, joined) = mpsc::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let (done_tx, done) = mpsc::channel();
        let pusher = std::thread::spawn({
            let file = file.clone();
            move || {
                file.push(0, &record("x", "r0"));
                joined_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                for _ in 0..20 {
                    file.push(0, &record("x", "r0"));
                }
                done_tx.send(()).unwrap();
            }
        });
        joined.recv().unwrap();
        // The writer cannot take any lane while this is held: the disk
        // is as slow as it gets.
        let stalled = lock(&file.state.lanes);
        go.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(done.try_recv().is_err(), "the pusher went past the bound");
        let held = lock(&stalled.all[0].held).bytes.len();
        assert!(
            held <= limits.max,
            "{held} bytes held, bound {}",
            limits.max
        );
        drop(stalled);
        done.recv_timeout(Duration::from_secs(10))
            .expect("the pusher goes on once the writer takes its lane");
        pusher.join().unwrap();
        assert_eq!(file.sync_blocking().records, 21);
        assert_eq!(file.dropped(), 0);
        fs::remove_dir_all(&d).unwrap();
    }
}
