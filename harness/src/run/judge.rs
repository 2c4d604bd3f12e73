//! Judging a run directory from its files alone (the end of `rehearse run`,
//! and all of `rehearse report`): read the records, judge the checklist,
//! write the reports.

use std::path::{Path, PathBuf};

use assertions::Status;
use wire::{ClientOutcome, ClientRecord, GatewayEvent, ProviderRecord, RssSample, RunMeta};

use wire::{files, Scale};

use crate::error::RunError;
use crate::run::rundir::{write_atomic, Records};
use crate::scenario::SavedScenario;

/// A run judged: its verdict, and what to tell a person about it.
#[derive(Debug, Clone)]
pub struct Judged {
    /// The overall verdict.
    pub status: Status,
    /// The checklist, to print for a terminal's style.
    pub checklist: report::Checklist,
    /// Where report.json is.
    pub report_json: PathBuf,
    /// Where report.html is.
    pub report_html: PathBuf,
    /// Why the run was stopped before its end by the harness itself (a
    /// gateway that answers without calling the fake provider), for the
    /// last line a person reads; `None` otherwise.
    pub stopped: Option<String>,
}

/// Judges the run in `dir` from its files (with `sets` applied to the
/// saved scenario's checklist), rewrites report.json, junit.xml,
/// summary.md, timeline.csv, report.html and its chart PNGs (and the JUnit report at
/// `junit` too, when given), and returns the verdict with the checklist.
pub fn judge_dir(dir: &Path, sets: &[String], junit: Option<&Path>) -> Result<Judged, RunError> {
    let meta_path = dir.join(files::RUN);
    let missing = |file: &'static str| {
        move |reason| RunError::NotARunDir {
            dir: dir.to_path_buf(),
            file,
            reason,
        }
    };
    let meta_text = std::fs::read_to_string(&meta_path).map_err(missing(files::RUN))?;
    // Read below as a scenario: a missing one is said as this directory's.
    std::fs::metadata(dir.join(files::SCENARIO)).map_err(missing(files::SCENARIO))?;
    let mut meta: RunMeta =
        serde_json::from_str(&meta_text).map_err(|source| RunError::RunJson {
            path: meta_path,
            source,
        })?;
    // The run directory's scenario is a new input here (a saved run judged
    // again, perhaps with `--set` edits to its checklist): read once.
    let saved = SavedScenario::read(&dir.join(files::SCENARIO), sets)?;
    if meta.expectations.drain_baseline.is_none() {
        let scale = Scale {
            time: meta.time_scale,
            quota: meta.quota_scale,
        };
        let note = replan_baseline(dir, sets, &mut meta.expectations, scale);
        meta.notes.push(note);
    }
    let thresholds = saved.checklist.scaled(Scale {
        time: meta.time_scale,
        quota: meta.quota_scale,
    });
    let mut client = Records::<ClientRecord>::open(dir, files::CLIENT_RECORDS)?;
    let mut provider = Records::<ProviderRecord>::open(dir, files::PROVIDER_RECORDS)?;
    let mut memory = Records::<RssSample>::open(dir, files::RSS_RECORDS)?;
    // The timeline's rows are seconds of scenario time, whatever the scale.
    let mut judge =
        assertions::Judge::with_time_scale(&meta.expectations, &thresholds, meta.time_scale);
    if let Some(plan) = several_providers(dir, sets, &meta) {
        judge.providers(&plan.providers, &plan.troubles, scale(&meta));
    }
    for (died, back) in downtime(&meta.gateway_events) {
        judge.gateway_died(died, back);
    }
    for e in &meta.gateway_events {
        if e.kind == "died"
            && e.detail
                .contains(crate::gateway::supervise::KILLED_BY_LIMIT)
        {
            judge.gateway_oom_killed();
        }
    }
    for sample in memory.by_ref() {
        judge.rss(sample);
    }
    if meta.provider_external {
        // One sample per sampling period: a small file, read whole.
        let mut gauges = Records::<wire::GatewaySample>::open(dir, files::GATEWAY_SAMPLES).ok();
        let samples: Vec<_> = gauges.iter_mut().flat_map(|g| g.by_ref()).collect();
        judge.external(samples, meta.gauge_period_s, meta.allow_unjudged.clone());
    }
    // Connects that failed for want of a descriptor, and attempts the
    // load generator never sent for want of a connection under its own
    // bound, are this machine's limit, not the gateway's doing: they make
    // the run invalid. Those the callers' own pool or connect rate held
    // past their patience are the scenario's callers': said, not invalid.
    let (mut out_of_files, mut not_sent, mut held) = (0u64, 0u64, 0u64);
    let counted = client.by_ref().inspect(|a| {
        let reason = a
            .reason
            .as_deref()
            .filter(|_| a.outcome == ClientOutcome::ConnectError);
        out_of_files += u64::from(reason.is_some_and(crate::run::fds::is_out_of_files));
        let in_client = reason.is_some_and(|r| r.starts_with(loadgen::NOT_SENT_IN_CLIENT));
        not_sent += u64::from(!in_client && reason.is_some_and(loadgen::was_not_sent));
        held += u64::from(in_client);
    });
    feed(&mut judge, counted, &mut provider);
    meta.untrusted
        .extend(crate::run::fds::out_of_files_note(out_of_files));
    meta.untrusted.extend(not_sent_note(not_sent));
    meta.untrusted.extend(own_bound_note(dir));
    meta.notes.extend((held > 0).then(|| {
        format!(
            "{} attempts got no connection within their patience from the callers' own pool or connect rate ([load.clients]) and were never sent: the scenario's callers, not the gateway (no loss of its)",
            wire::number::count(held)
        )
    }));
    for (name, health) in [
        (files::CLIENT_RECORDS, client.health()),
        (files::PROVIDER_RECORDS, provider.health()),
        (files::RSS_RECORDS, memory.health()),
    ] {
        meta.notes.extend(health.notes(name));
        meta.untrusted.extend(health.untrusted(name));
    }
    meta.notes.extend(meta.untrusted.iter().cloned());
    let j = judge.finish();
    meta.notes.extend(pass_notes(&j.pass));
    meta.notes
        .extend(gateway_view_note(dir, &j, meta.time_scale));
    let report = report::report_json(&meta, &j);
    write_atomic(
        &dir.join(files::REPORT_JSON),
        serde_json::to_string_pretty(&report)
            .unwrap_or_default()
            .as_bytes(),
    )?;
    let junit_xml = report::junit(&meta, &j);
    write_atomic(&dir.join(files::JUNIT), junit_xml.as_bytes())?;
    if let Some(extra) = junit {
        write_atomic(extra, junit_xml.as_bytes())?;
    }
    let checklist = report::Checklist::new(&meta, &j);
    checklist.write_markdown(dir)?;
    write_atomic(&dir.join(files::TIMELINE), j.timeline.to_csv().as_bytes())?;
    let html = report::write_html(dir, &meta, &j, &thresholds, saved.description.as_deref())?;
    Ok(Judged {
        status: report::verdict(&meta, &j),
        checklist,
        report_json: dir.join(files::REPORT_JSON),
        report_html: html,
        stopped: None,
    })
}

/// The run's scale.
fn scale(meta: &RunMeta) -> Scale {
    Scale {
        time: meta.time_scale,
        quota: meta.quota_scale,
    }
}

/// With several providers, the plan of the run's saved scenario at the
/// run's scale: each provider's phases and troubles, which `failover` is
/// judged against. `None` with one provider, or when the saved scenario
/// cannot be read here (then `failover` has no trouble to judge).
fn several_providers(dir: &Path, sets: &[String], meta: &RunMeta) -> Option<wire::Plan> {
    let mut s = crate::scenario::Scenario::load(&dir.join(files::SCENARIO), sets).ok()?;
    if s.providers.len() < 2 {
        return None;
    }
    s.meta.time_scale = meta.time_scale;
    s.meta.quota_scale = meta.quota_scale;
    Some(crate::plan::plan(&s))
}

/// For a run directory written before `run.json` said what a healthy
/// system holds after the overload: plans its saved scenario again at the
/// run's scale and sets `expect.drain_baseline`, returning the note that
/// says so (or, when the scenario cannot be planned here, why `drain` is
/// judged against the run's own baseline alone).
fn replan_baseline(
    dir: &Path,
    sets: &[String],
    expect: &mut wire::Expectations,
    scale: Scale,
) -> String {
    let replanned =
        crate::scenario::Scenario::load(&dir.join(files::SCENARIO), sets).map(|mut s| {
            s.meta.time_scale = scale.time;
            s.meta.quota_scale = scale.quota;
            crate::plan::plan(&s).drain_baseline
        });
    match replanned {
        Ok(Some(b)) => {
            expect.drain_baseline = Some(b);
            format!(
                "{} predates the plan's figure for the waiting after the overload; it was planned again from {}",
                files::RUN,
                files::SCENARIO
            )
        }
        Ok(None) => format!(
            "{} predates the plan's figure for the waiting after the overload, and the plan gives none: drain is judged against the run's own baseline alone",
            files::RUN
        ),
        Err(e) => format!(
            "{} predates the plan's figure for the waiting after the overload, and {} cannot be planned again here ({e}): drain is judged against the run's own baseline alone",
            files::RUN,
            files::SCENARIO
        ),
    }
}

/// What the gateway's own metrics (`gateway-metrics.txt`, when saved) say
/// of the provider's latency against the records, when they disagree.
/// The note that makes a run invalid when `n` of its attempts were never
/// sent (`loadgen::was_not_sent`): the load generator's own bound on open
/// connections was reached and they got no connection within their
/// patience, or it came to them only after their patience had ended;
/// `None` when none.
fn not_sent_note(n: u64) -> Option<String> {
    (n > 0).then(|| {
        format!(
            "the load generator did not send {} attempts (its bound on open connections reached, or it came to them only after their patience had ended; each record's reason says which): a limit of the harness rather than the gateway's doing, so the run is invalid (summary.json's notes say more)",
            wire::number::count(n)
        )
    })
}

/// The note that makes a run invalid when attempts waited at the load
/// generator's own bound on open connections (summary.json's
/// `connection_bound.waited_at_own_bound`): it could not open the
/// connections its callers would have (the open files gave out, most
/// likely), so the gateway did not see the load the scenario says. Their
/// waits are in their latency as `client_wait_us`, not in the send lag,
/// so the send lag alone no longer says so. `None` when none waited, or
/// for a run directory without the figure.
fn own_bound_note(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(files::LOAD_SUMMARY)).ok()?;
    let summary: serde_json::Value = serde_json::from_str(&text).ok()?;
    let n = summary["connection_bound"]["waited_at_own_bound"].as_u64()?;
    (n > 0).then(|| {
        format!(
            "{} attempts waited for a connection at the load generator's own bound on open connections: it could not open the connections its callers would have, a limit of the harness's machine rather than the gateway's doing, so the run is invalid (summary.json's notes say which limit)",
            wire::number::count(n)
        )
    })
}

fn gateway_view_note(dir: &Path, j: &assertions::Judgement, time_scale: f64) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(files::GATEWAY_METRICS)).ok()?;
    let provider_p50_ms = j.summary.latency_ms.provider.p50?;
    crate::gateway::metrics::provider_latency_note(&text, provider_p50_ms, time_scale)
}

/// The gateway's deaths in `run.json`'s events: when it died, and when the
/// next `restarted` brought it back (`None`: it stayed down, its restart
/// failed or none was asked for).
fn downtime(events: &[GatewayEvent]) -> Vec<(u64, Option<u64>)> {
    let mut out = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if e.kind != "died" {
            continue;
        }
        let back = events[i + 1..]
            .iter()
            .take_while(|n| n.kind != "died")
            .find(|n| n.kind == "restarted")
            .map(|n| n.at_us);
        out.push((e.at_us, back));
    }
    out
}

/// Feeds the judge both record files, a line at a time, merged by end time
/// (an attempt's `done_us`, a call's latest time field): the order both
/// were written in, roughly, which is the order the judge needs to keep
/// only a window of the run (see [`assertions::Judge`]). Ties go to the
/// attempt.
fn feed<C, P>(judge: &mut assertions::Judge, client: C, provider: P)
where
    C: Iterator<Item = ClientRecord>,
    P: Iterator<Item = ProviderRecord>,
{
    let (mut client, mut provider) = (client.peekable(), provider.peekable());
    loop {
        let call_first = match (client.peek(), provider.peek()) {
            (Some(a), Some(c)) => assertions::call_end_us(c) < a.done_us,
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (None, None) => return,
        };
        if call_first {
            if let Some(c) = provider.next() {
                judge.call(c);
            }
        } else if let Some(a) = client.next() {
            judge.attempt(a);
        }
    }
}

/// What the report should say about the judging pass itself: records that
/// came more than its window out of order, or calls received after their
/// attempt had settled; nothing for records written as a run writes them.
fn pass_notes(pass: &assertions::Pass) -> Vec<String> {
    let mut notes = Vec::new();
    if pass.out_of_order > 0 {
        notes.push(format!(
            "{} records came more than the judging window ({} s) out of order; they are counted and joined, but their levels are taken from where the judging had reached",
            wire::number::count(pass.out_of_order),
            wire::number::num(pass.window_s, 1)
        ));
    }
    if pass.settled_before_dispatch > 0 {
        notes.push(format!(
            "{} provider calls were received more than a patience after their caller left with no call: counted as stale dispatches, but not in the gateway depth or the drain time",
            wire::number::count(pass.settled_before_dispatch)
        ));
    }
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of a golden run directory (tests/golden), to judge again.
    fn golden_copy(name: &str, tag: &str) -> PathBuf {
        let from = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden")
            .join(name);
        let dir = std::env::temp_dir().join(format!("rehearse-judge-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(&from).unwrap() {
            let path = entry.unwrap().path();
            std::fs::copy(&path, dir.join(path.file_name().unwrap())).unwrap();
        }
        dir
    }

    fn report(dir: &Path) -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join(files::REPORT_JSON)).unwrap())
            .unwrap()
    }

    #[test]
    fn each_death_is_down_until_the_next_restart() {
        let event = |kind: &str, at_us| GatewayEvent {
            kind: kind.into(),
            at_us,
            detail: String::new(),
        };
        let events = [
            event("died", 10),
            event("restarted", 20),
            event("died", 30),
            event("restart_failed", 40),
            event("died", 50),
        ];
        assert_eq!(downtime(&events), [(10, Some(20)), (30, None), (50, None)]);
        assert!(downtime(&[]).is_empty());
    }

    #[test]
    fn records_far_out_of_order_are_still_counted_and_said_to_be() {
        let dir = golden_copy("retries-hangups", "order");
        judge_dir(&dir, &[], None).unwrap();
        let in_order = report(&dir);
        assert!(
            !in_order["notes"].to_string().contains("out of order"),
            "{}",
            in_order["notes"]
        );
        // client.jsonl backwards: the first attempts come about 12 s late,
        // past the window (1.5 s of patience, calls of 0.4 s, 5 s).
        let path = dir.join(files::CLIENT_RECORDS);
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines: Vec<&str> = text.lines().collect();
        lines.reverse();
        std::fs::write(&path, lines.join("\n") + "\n").unwrap();
        judge_dir(&dir, &[], None).unwrap();
        let reversed = report(&dir);
        assert!(
            reversed["notes"].to_string().contains("out of order"),
            "{}",
            reversed["notes"]
        );
        assert_eq!(reversed["summary"]["counts"], in_order["summary"]["counts"]);
        assert_eq!(
            reversed["summary"]["provider"],
            in_order["summary"]["provider"]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
