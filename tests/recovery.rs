//! `recovery` in real rehearsals of `scenarios/recovery.toml` (a brownout
//! of 10 s that ends, 25 s of healthy traffic after it): the reference
//! gateway in every mode that bounds its queue (bounded, deadline, aimd)
//! answers everyone offered after the trouble; given the fault
//! `leak-slots` (a slot never given back by a call that timed out) it
//! answers no one, and with `leak-slots=5` too few. Five times faster than
//! written; the figures asserted leave room for a busy machine.

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::common::{json, on_schedule, one_at_a_time, rehearse, scratch, text};

fn scenario() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/recovery.toml")
}

/// `rehearse run scenarios/recovery.toml --time-scale 5 ARGS`: its exit
/// code and report, made again if the load generator fell behind its
/// schedule (the machine too busy: [`on_schedule`]).
fn run(name: &str, args: &[&str]) -> (Option<i32>, serde_json::Value) {
    let _turn = one_at_a_time();
    on_schedule(|attempt| {
        let dir = scratch("recovery", &format!("{name}-{attempt}"));
        let out = rehearse()
            .arg("run")
            .arg(scenario())
            .args(["--time-scale", "5", "--no-progress", "--out"])
            .arg(&dir)
            .args(args)
            .output()
            .unwrap();
        let report = dir.join("report.json");
        assert!(report.exists(), "{name}: no report.json: {}", text(&out));
        ((out.status.code(), json(&report)), dir)
    })
}

fn recovery(report: &serde_json::Value) -> &serde_json::Value {
    report["checks"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["id"] == "recovery"))
        .unwrap_or_else(|| panic!("no recovery verdict in {report}"))
}

/// The people offered after the trouble, from the verdict's observed line
/// ("400 people offered from 17 s to 37 s, ...").
fn offered(v: &serde_json::Value) -> u64 {
    let observed = v["observed"].as_str().unwrap_or_default();
    observed
        .split(' ')
        .next()
        .and_then(|n| n.replace(',', "").parse().ok())
        .unwrap_or_else(|| panic!("no count in {observed:?}"))
}

/// Bounded (as written), deadline (paced at 8 slots' worth, 40 calls a
/// scenario second of 110 tokens) and aimd (from 8 slots, the same queue
/// and wait budget) come out of the brownout whole: from 17 s to 37 s
/// every person is answered, or nearly (the bound is 90% of a healthy
/// system's 100%). Bounded passes every check as written.
#[test]
fn the_reference_gateway_recovers_in_every_mode_that_bounds_its_queue() {
    let started = Instant::now();
    let modes: [(&str, &[&str]); 3] = [
        ("bounded", &[]),
        (
            "deadline",
            &[
                "--set",
                "gateway.reference.mode=deadline",
                "--set",
                "gateway.reference.deadline.tokens_per_minute=264000",
                "--set",
                "gateway.reference.deadline.expected_service=200ms",
            ],
        ),
        (
            "aimd",
            &[
                "--set",
                "gateway.reference.mode=aimd",
                "--set",
                "gateway.reference.aimd.ceiling=12",
                "--set",
                "gateway.reference.aimd.queue=11",
            ],
        ),
    ];
    for (mode, args) in modes {
        let (code, report) = run(mode, args);
        let v = recovery(&report);
        assert_eq!(v["status"], "pass", "{mode}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("the gateway recovered: from 17 s to 37 s"),
            "{mode}: {detail}"
        );
        assert!(
            detail.contains("after the last trouble ended at 12 s"),
            "{mode}: {detail}"
        );
        // 20 people a scenario second for 20 s.
        let n = offered(v);
        assert!((380..=420).contains(&n), "{mode}: {n} offered: {v}");
        let share = v["figure"]["value"].as_f64().unwrap();
        assert!(share >= 0.95, "{mode}: {share}");
        assert_eq!(v["figure"]["unit"], "share");
        if mode == "bounded" {
            assert_eq!(code, Some(0), "bounded passes every check: {report}");
        }
    }
    eprintln!("three recoveries in {:?}", started.elapsed());
}

/// The scenario's named fault: every call cut by the upstream timeout in
/// the brownout keeps its slot, half the calls are, so the eight slots
/// are gone within seconds and the gateway refuses everyone on a healthy
/// provider after it (measured: 0 of 400). Room: one slot surviving the
/// brownout (a few runs in a hundred) would leave about a quarter.
/// `leak-slots=5` leaves three slots: 15 a second of the 20 at most
/// (measured: 68%), a failure with its share.
#[test]
fn a_gateway_that_leaks_its_slots_on_timeouts_does_not_recover() {
    let started = Instant::now();
    for (fault, low, high) in [("leak-slots", 0.0, 0.3), ("leak-slots=5", 0.4, 0.85)] {
        let set = format!("gateway.reference.fault=\"{fault}\"");
        let (code, report) = run(fault, &["--set", &set]);
        let v = recovery(&report);
        assert_eq!(v["status"], "fail", "{fault}: {v}");
        assert_ne!(code, Some(0), "{fault}");
        let share = v["figure"]["value"].as_f64().unwrap();
        assert!((low..=high).contains(&share), "{fault}: {share}: {v}");
        let detail = v["detail"].as_str().unwrap();
        assert!(
            detail.starts_with("the gateway did not recover: from 17 s to 37 s"),
            "{fault}: {detail}"
        );
        let n = offered(v);
        assert!((380..=420).contains(&n), "{fault}: {n} offered: {v}");
        // The share the verdict's line gives is the share measured.
        let short = v["short"].as_str().unwrap();
        assert!(
            short.ends_with("answered after trouble (need 90% of healthy 100%)"),
            "{fault}: {short}"
        );
    }
    eprintln!("two leaking gateways in {:?}", started.elapsed());
}
