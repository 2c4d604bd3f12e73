//! The run directory: every file a run leaves, written whole through a
//! temporary name, or read back record by record.

use std::fs::File;
use std::io::{BufRead as _, BufReader};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use wire::{files, RunMeta};

use crate::error::RunError;
use crate::Rehearsal;

/// The run directory of a run being made (`rehearse run`) or staged
/// (`rehearse stage`): the one writer of what the run was asked to do
/// (`scenario.toml`, `plan.json`) and of what it made of it (`run.json`).
pub(crate) struct RunDir {
    path: PathBuf,
}

impl RunDir {
    /// Makes the directory at `path` (and its parents) when it is missing.
    pub(crate) fn create(path: &Path) -> Result<RunDir, RunError> {
        std::fs::create_dir_all(path).map_err(RunError::create_dir(path))?;
        Ok(RunDir {
            path: path.to_path_buf(),
        })
    }

    /// Writes the run's inputs: the document as run (after `--set`), not
    /// values (`rehearse report` judges from this file, and shards' load
    /// processes play its `[load]`), and the plan.
    pub(crate) fn write_inputs(&self, r: &Rehearsal) -> Result<(), RunError> {
        write_atomic(&self.path.join(files::SCENARIO), r.text.as_bytes())?;
        write_json(&self.path.join(files::PLAN), &r.plan)
    }

    /// Writes `run.json`: how the run went, and what its checks compare
    /// against.
    pub(crate) fn write_meta(&self, meta: &RunMeta) -> Result<(), RunError> {
        write_json(&self.path.join(files::RUN), meta)
    }
}

/// Writes `value` as pretty JSON, whole (see [`write_atomic`]).
fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<(), RunError> {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    write_atomic(path, text.as_bytes())
}

/// Writes a whole file through a temporary name and a rename
/// ([`wire::files::write_atomic`]), so a reader never sees half of it.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), RunError> {
    wire::files::write_atomic(path, bytes).map_err(RunError::write(path))
}

/// Merges the provider record files `parts` (each one provider's, as it
/// wrote them) into one at `into`, in call-end order as one provider
/// writes its own, each line copied as it is. A line that is not a record
/// is copied at once (the judge's reading of the file then says so).
/// Returns the lines written.
pub(crate) fn merge_by_end(parts: &[std::path::PathBuf], into: &Path) -> std::io::Result<u64> {
    use std::io::Write as _;
    struct Part {
        reader: BufReader<File>,
        /// Its next line and that call's end, when it has one.
        next: Option<(u64, String)>,
    }
    impl Part {
        /// Reads the next line; a line that is no record is written to
        /// `out` at once.
        fn advance(&mut self, out: &mut impl std::io::Write) -> std::io::Result<()> {
            self.next = None;
            let mut line = String::new();
            while self.reader.read_line(&mut line)? > 0 {
                match serde_json::from_str::<wire::ProviderRecord>(line.trim_end()) {
                    Ok(r) => {
                        self.next = Some((assertions::call_end_us(&r), line));
                        return Ok(());
                    }
                    Err(_) => {
                        out.write_all(line.as_bytes())?;
                        if !line.ends_with('\n') {
                            out.write_all(b"\n")?;
                        }
                        line.clear();
                    }
                }
            }
            Ok(())
        }
    }
    let mut out = std::io::BufWriter::new(File::create(into)?);
    let mut open = Vec::new();
    for p in parts {
        let mut part = Part {
            reader: BufReader::with_capacity(256 * 1024, File::open(p)?),
            next: None,
        };
        part.advance(&mut out)?;
        open.push(part);
    }
    let mut written = 0;
    while let Some(i) = (0..open.len())
        .filter(|&i| open[i].next.is_some())
        .min_by_key(|&i| open[i].next.as_ref().map_or(u64::MAX, |(end, _)| *end))
    {
        if let Some((_, line)) = open[i].next.take() {
            out.write_all(line.as_bytes())?;
            if !line.ends_with('\n') {
                out.write_all(b"\n")?;
            }
            written += 1;
        }
        open[i].advance(&mut out)?;
    }
    out.flush()?;
    Ok(written)
}

/// One record file read line by line: yields its records, and keeps what
/// was wrong with it ([`Health`]) instead of stopping at the first bad line,
/// so a killed run (its last line cut off) or a stray bad line is judged
/// from what can be read, and said so.
pub(crate) struct Records<T> {
    reader: Option<BufReader<File>>,
    name: String,
    line: String,
    health: Health,
    _record: PhantomData<T>,
}

/// What reading a record file found.
#[derive(Debug, Default, Clone)]
pub(crate) struct Health {
    /// Lines read (blank ones included).
    pub(crate) lines: u64,
    /// Lines that are not records (a cut-off last line not counted).
    pub(crate) bad: u64,
    /// The first bad line, as `file:line: error`.
    pub(crate) first_bad: Option<String>,
    /// True if a good record follows a bad line: the file was damaged in
    /// the middle, not just at its end.
    pub(crate) bad_then_good: bool,
    /// The line number of a last line cut off mid-way (no newline, no record).
    pub(crate) cut_off: Option<u64>,
}

impl<T: serde::de::DeserializeOwned> Records<T> {
    /// Opens `dir/name`; a missing file has no records.
    pub(crate) fn open(dir: &Path, name: &str) -> Result<Records<T>, RunError> {
        let path = dir.join(name);
        let reader = match File::open(&path) {
            Ok(f) => Some(BufReader::with_capacity(256 * 1024, f)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(RunError::ReadRecords { path, source }),
        };
        Ok(Records {
            reader,
            name: name.to_string(),
            line: String::new(),
            health: Health::default(),
            _record: PhantomData,
        })
    }

    /// What was found so far (all of it once the records are exhausted).
    pub(crate) fn health(&self) -> &Health {
        &self.health
    }
}

impl<T: serde::de::DeserializeOwned> Iterator for Records<T> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        let reader = self.reader.as_mut()?;
        loop {
            self.line.clear();
            match reader.read_line(&mut self.line) {
                Ok(0) => return None,
                Ok(_) => {}
                Err(e) => {
                    // Unreadable from here on (not UTF-8, an I/O error):
                    // counted as one bad line, and the file ends here.
                    self.health.lines += 1;
                    self.health.bad_line(&self.name, format!("{e}"));
                    self.reader = None;
                    return None;
                }
            }
            self.health.lines += 1;
            let text = self.line.trim();
            if text.is_empty() {
                continue;
            }
            match serde_json::from_str::<T>(text) {
                Ok(record) => {
                    if self.health.bad > 0 {
                        self.health.bad_then_good = true;
                    }
                    return Some(record);
                }
                Err(_) if !self.line.ends_with('\n') => {
                    self.health.cut_off = Some(self.health.lines);
                    return None;
                }
                Err(e) => self.health.bad_line(&self.name, e.to_string()),
            }
        }
    }
}

impl Health {
    /// Counts the line just read as bad.
    fn bad_line(&mut self, name: &str, error: String) {
        self.bad += 1;
        if self.first_bad.is_none() {
            self.first_bad = Some(format!("{name}:{}: {error}", self.lines));
        }
    }

    /// What a reader of the report should know about this file, `name`.
    pub(crate) fn notes(&self, name: &str) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(line) = self.cut_off {
            notes.push(format!(
                "{name}:{line}: cut off mid-line (the run was stopped while writing it); judged up to the last whole line"
            ));
        }
        if let Some(first) = &self.first_bad {
            notes.push(format!(
                "{name}: {} of {} lines are not records, skipped (the first: {first})",
                self.bad, self.lines
            ));
        }
        notes
    }

    /// Why the records cannot be trusted, if they cannot: more than 0.1% of
    /// the lines bad, or a bad line followed by good ones (damage in the
    /// middle). Garbage must never judge green.
    pub(crate) fn untrusted(&self, name: &str) -> Option<String> {
        if self.bad_then_good || self.bad * 1000 > self.lines {
            Some(format!(
                "{name} is damaged ({} bad lines of {}{}): the run is invalid",
                self.bad,
                self.lines,
                if self.bad_then_good {
                    ", some before good records"
                } else {
                    ""
                }
            ))
        } else {
            None
        }
    }
}

/// `runs/NAME-YYYYmmdd-HHMMSS` (UTC, now): the directory `rehearse run`
/// and `rehearse compare` write to when none is named.
///
/// ```
/// let dir = harness::default_run_dir("ci-smoke");
/// let name = dir.file_name().unwrap().to_str().unwrap();
/// assert!(dir.starts_with("runs") && name.starts_with("ci-smoke-"));
/// assert_eq!(name.len(), "ci-smoke-20261130-140000".len());
/// ```
pub fn default_run_dir(name: &str) -> std::path::PathBuf {
    // 2026-11-30T14:00:00Z → 20261130-140000
    let stamp: String = humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        .to_string()
        .chars()
        .filter_map(|c| match c {
            'T' => Some('-'),
            '0'..='9' => Some(c),
            _ => None,
        })
        .collect();
    std::path::PathBuf::from("runs").join(format!("{name}-{stamp}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rehearse report DIR` on a directory a run left without its end
    /// (a gateway that was not ready), or on a folder of something else:
    /// the file missing, and which command writes it.
    #[test]
    fn a_directory_missing_a_file_names_it_and_its_writer() {
        let dir = std::env::temp_dir().join(format!("rehearse-missing-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let said = |dir: &Path| match crate::judge_dir(dir, &[], None) {
            Err(e) => (e.to_string(), e.kind()),
            Ok(_) => panic!("judged"),
        };
        let (e, kind) = said(&dir);
        assert_eq!(kind, crate::RunErrorKind::BadInput);
        let run_json = dir.join(wire::files::RUN);
        assert!(
            e.contains(&format!("{}: No such file", run_json.display())),
            "{e}"
        );
        assert!(
            e.contains("`rehearse run` writes it when its rehearsal ends"),
            "{e}"
        );
        std::fs::write(&run_json, "{}").unwrap();
        let (e, _) = said(&dir);
        assert!(e.contains("scenario.toml: No such file"), "{e}");
        assert!(e.contains("`rehearse run` writes it first"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn provider_parts_merge_in_end_order_line_for_line() {
        let dir = std::env::temp_dir().join(format!("rehearse-merge-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let line = |id: &str, end: u64, name: &str| {
            format!(
                "{{\"id\":\"{id}\",\"received_us\":1,\"admitted_us\":null,\"first_byte_us\":null,\"finished_us\":{end},\"hung_up_us\":null,\"prompt_tokens\":1,\"completion_tokens\":0,\"phase\":\"base\",\"outcome\":\"ok\",\"status\":200,\"provider\":\"{name}\"}}\n"
            )
        };
        let a = dir.join("a.jsonl");
        let b = dir.join("b.jsonl");
        std::fs::write(&a, line("a1", 10, "a") + &line("a2", 30, "a")).unwrap();
        std::fs::write(&b, line("b1", 20, "b") + &line("b2", 40, "b")).unwrap();
        let into = dir.join("provider.jsonl");
        assert_eq!(merge_by_end(&[a, b], &into).unwrap(), 4);
        let merged = std::fs::read_to_string(&into).unwrap();
        assert_eq!(
            merged,
            line("a1", 10, "a")
                + &line("b1", 20, "b")
                + &line("a2", 30, "a")
                + &line("b2", 40, "b")
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn read(text: &str) -> (Vec<u32>, Health) {
        let dir = std::env::temp_dir().join(format!(
            "rehearse-records-{}-{}",
            std::process::id(),
            text.len()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("r.jsonl"), text).unwrap();
        let mut records = Records::<u32>::open(&dir, "r.jsonl").unwrap();
        let got: Vec<u32> = records.by_ref().collect();
        let health = records.health().clone();
        let _ = std::fs::remove_dir_all(&dir);
        (got, health)
    }

    #[test]
    fn whole_lines_are_records() {
        let (got, h) = read("1\n2\n\n3\n");
        assert_eq!(got, [1, 2, 3]);
        assert_eq!(h.bad, 0);
        assert!(h.notes("r.jsonl").is_empty() && h.untrusted("r.jsonl").is_none());
    }

    #[test]
    fn a_cut_off_last_line_ends_the_file_with_a_note() {
        let (got, h) = read("1\n2\n{\"id\":");
        assert_eq!(got, [1, 2]);
        assert_eq!(h.cut_off, Some(3));
        assert!(h.notes("r.jsonl")[0].starts_with("r.jsonl:3: cut off"));
        assert!(h.untrusted("r.jsonl").is_none());
    }

    #[test]
    fn a_bad_line_in_the_middle_is_counted_named_and_untrusted() {
        let (got, h) = read("1\nnot json\n3\n");
        assert_eq!(got, [1, 3]);
        assert_eq!(h.bad, 1);
        assert!(
            h.notes("r.jsonl")[0].contains("r.jsonl:2:"),
            "{:?}",
            h.notes("r.jsonl")
        );
        assert!(h.untrusted("r.jsonl").is_some());
    }

    #[test]
    fn one_bad_last_line_in_many_is_tolerated() {
        let mut text: String = (0..2000).map(|i| format!("{i}\n")).collect();
        text.push_str("oops\n");
        let (got, h) = read(&text);
        assert_eq!(got.len(), 2000);
        assert_eq!(h.bad, 1);
        assert!(h.untrusted("r.jsonl").is_none());
        let (_, h) = read("1\noops\n");
        assert!(h.untrusted("r.jsonl").is_some(), "1 of 2 is over 0.1%");
    }
}
