//! End to end: `cancel_on_hangup` on scenarios/hangups.toml as shipped
//! (every call takes 3 s, callers give up after 1 s, 100 requests), at
//! `--time-scale 5`: the reference gateway in its bounded, deadline,
//! aimd and timeout modes hangs up on the provider call of every caller
//! who left, within a few milliseconds, and the scenario passes; in naive
//! mode (one detached task per request, the relay that does not cancel)
//! every call runs to its end, about 14 tokens each made for nobody, and
//! the check fails with them; so it does with the bounded gateway given
//! the fault `no-cancel` (it keeps the upstream call running when its
//! client hangs up). Each run takes about 4 s.

use crate::common;

use common::{on_schedule, one_at_a_time, rehearse, scratch, text};

use std::path::Path;
use std::time::{Duration, Instant};

/// A run's exit code, report and output.
struct Rehearsal {
    code: Option<i32>,
    report: serde_json::Value,
    output: String,
}

impl Rehearsal {
    fn check(&self, id: &str) -> &serde_json::Value {
        self.report["checks"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["id"] == id))
            .unwrap_or_else(|| panic!("no check {id} in {}", self.report))
    }

    fn provider(&self, what: &str) -> u64 {
        self.report["provider"][what]
            .as_u64()
            .unwrap_or_else(|| panic!("no provider.{what} in {}", self.report))
    }
}

/// `rehearse run scenarios/hangups.toml` at time scale 5 with the
/// reference gateway in `mode` and `sets` (`--set` each), made again once if the load generator
/// fell behind; panics when the run is invalid (it would prove nothing).
/// The send-lag bound is 100 ms (half the patience at this scale) instead
/// of the scenario's 20 ms: five of these at once on a busy machine send
/// up to 30 ms late, and a late send shortens a caller's wait without
/// moving what the check times (the gateway's hang-up from the caller's
/// leaving); a send later than the patience is not made at all.
fn hangups(mode: &str, sets: &[&str]) -> Rehearsal {
    let _one = one_at_a_time();
    let scenario = Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/hangups.toml");
    let run = on_schedule(|attempt| {
        let dir = scratch("cancel-on-hangup", &format!("{mode}-{attempt}"));
        let started = Instant::now();
        let out = rehearse()
            .arg("run")
            .arg(&scenario)
            .args(["--time-scale", "5", "--no-progress", "--out"])
            .arg(&dir)
            .args(["--set", &format!("gateway.reference.mode={mode}")])
            .args(["--set", "load.send_lag_p99_max=\"100ms\""])
            .args(sets.iter().flat_map(|s| ["--set", s]))
            .output()
            .unwrap();
        let elapsed = started.elapsed();
        assert!(
            elapsed < Duration::from_secs(60),
            "a rehearsal in a test must take under a minute: {elapsed:?}"
        );
        let output = text(&out);
        let report = std::fs::read_to_string(dir.join("report.json"))
            .unwrap_or_else(|e| panic!("no report.json ({e})\n{output}"));
        let run = Rehearsal {
            code: out.status.code(),
            report: serde_json::from_str(&report).unwrap(),
            output,
        };
        (run, dir)
    });
    assert_ne!(
        run.report["harness"]["valid"], false,
        "the run is invalid; it proves nothing:\n{}",
        run.output
    );
    run
}

/// A gateway that cancels on a hang-up: at least 90% of the calls still
/// running when their caller left (nearly all the calls the provider saw)
/// were hung up on within 200 ms (1 s at this scale), with next to no
/// tokens made after. (The other checks are not asserted: on a machine
/// busy enough to send 60 ms late, a request sent late can be dispatched
/// after its caller left, and `stale_dispatch` and `drain` see it.)
fn cancels(mode: &str) {
    let run = hangups(mode, &[]);
    let v = run.check("cancel_on_hangup");
    assert_eq!(v["status"], "pass", "{mode}: {v}\n{}", run.output);
    let share = v["figure"]["value"].as_f64().unwrap();
    assert!(share >= 0.9, "{mode}: {v}");
    assert_eq!(v["figure"]["unit"], "share");
    let calls = run.provider("calls");
    let running = run.provider("running_at_hangup");
    // aimd sheds a quarter at its starting limit of 8; the others send
    // all 100 on. Every call is still running when its caller leaves.
    assert!(running >= 50, "{mode}: {}", run.report["provider"]);
    assert!(
        running * 10 >= calls * 9,
        "{mode}: {}",
        run.report["provider"]
    );
    assert!(run.provider("cancelled_at_hangup") * 10 >= running * 9);
    // A stream hung up on at once made its tokens before its caller
    // left; a few late hang-ups may add one or two.
    let tokens = run.provider("tokens_after_hangup");
    assert!(tokens <= running, "{mode}: {}", run.report["provider"]);
}

#[test]
fn the_bounded_gateway_hangs_up_on_callers_who_left() {
    cancels("bounded");
}

#[test]
fn the_deadline_gateway_hangs_up_on_callers_who_left() {
    cancels("deadline");
}

#[test]
fn the_aimd_gateway_hangs_up_on_callers_who_left() {
    cancels("aimd");
}

#[test]
fn the_timeout_gateway_hangs_up_on_callers_who_left() {
    cancels("timeout");
}

/// The naive gateway never notices a hang-up: every call runs its 3 s to
/// the end, and the tokens made after the callers left (about 14 of each
/// call's 20) are in the verdict and in report.json.
#[test]
fn the_naive_gateway_lets_every_call_run_for_nobody() {
    runs_for_nobody(&hangups("naive", &[]));
}

/// The bounded gateway as shipped but for the fault that keeps the
/// upstream call running after the client hung up (`no-cancel`): the
/// same as naive.
#[test]
fn a_gateway_that_does_not_cancel_lets_every_call_run_for_nobody() {
    runs_for_nobody(&hangups(
        "bounded",
        &["gateway.reference.fault=\"no-cancel\""],
    ));
}

/// `cancel_on_hangup` fails with the calls run to their end and the tokens
/// made for nobody in report.json and the verdict.
fn runs_for_nobody(run: &Rehearsal) {
    let v = run.check("cancel_on_hangup");
    assert_eq!(v["status"], "fail", "{v}\n{}", run.output);
    assert_eq!(run.code, Some(1), "{}", run.output);
    assert!(v["figure"]["value"].as_f64().unwrap() <= 0.1, "{v}");
    let running = run.provider("running_at_hangup");
    assert!(running >= 90, "{}", run.report["provider"]);
    assert!(run.provider("cancelled_at_hangup") * 10 <= running);
    let tokens = run.provider("tokens_after_hangup");
    assert!(
        (10 * running..=20 * running).contains(&tokens),
        "{}",
        run.report["provider"]
    );
    let detail = v["detail"].as_str().unwrap();
    let said = format!(
        "{} tokens made after their callers left",
        wire::number::count(tokens)
    );
    assert!(detail.contains(&said), "{detail}");
    assert!(
        detail.contains("cancel the upstream call when the client disconnects"),
        "{detail}"
    );
    assert!(
        detail.ends_with("started after their caller had left (stale_dispatch)"),
        "{detail}"
    );
}
