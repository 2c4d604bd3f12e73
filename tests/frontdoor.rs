//! The way in, as a newcomer walks it (issue 43): `rehearse init` for each
//! kind of gateway and the file edited as its comments say, the plan,
//! the flags every subcommand shares, and the errors met first.

use std::path::Path;

use crate::common::{rehearse, scratch, text};

/// Uncomments the first line `# KEY = ...` of `text` (the `[gateway]`
/// table's, for `url` and `command`), and comments out the first line
/// `OUT = ...` when given.
fn edit(text: &str, key: &str, out: Option<&str>) -> String {
    let (mut uncommented, mut commented) = (false, out.is_none());
    let mut lines = Vec::new();
    for l in text.lines() {
        match l.strip_prefix("# ") {
            Some(body) if !uncommented && body.starts_with(&format!("{key} = ")) => {
                uncommented = true;
                lines.push(body.to_string());
                continue;
            }
            _ => {}
        }
        if out.is_some_and(|o| !commented && l.starts_with(&format!("{o} = "))) {
            commented = true;
            lines.push(format!("# {l}"));
            continue;
        }
        lines.push(l.to_string());
    }
    assert!(
        uncommented && commented,
        "no `# {key} = ` or `{out:?} = ` in:\n{text}"
    );
    lines.join("\n") + "\n"
}

/// An example line to uncomment, and the line it replaces (commented out).
type Edit<'a> = (&'a str, Option<&'a str>);

/// `rehearse plan FILE`, which must accept it; its stdout.
fn plans(file: &Path, extra: &[&str]) -> String {
    let out = rehearse()
        .arg("plan")
        .arg(file)
        .args(extra)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// For each gateway init writes (the reference gateway, a target, a
/// command): the scales stay 10 and 10 and init says so; the file plans;
/// the example line of another gateway, uncommented as its comment says,
/// plans too.
#[test]
fn init_then_one_example_line_uncommented_plans_for_each_gateway() {
    let dir = scratch("frontdoor", "init");
    let cases: [(&str, &[&str], &[Edit]); 3] = [
        ("reference", &[], &[("url", None), ("command", None)]),
        (
            "target",
            &["--target", "http://127.0.0.1:19000"],
            &[("command", Some("url"))],
        ),
        (
            "command",
            &[
                "--gateway-command",
                "my-gw --listen {listen} --upstream {provider_url}",
            ],
            &[("url", Some("command"))],
        ),
    ];
    for (gateway, flags, edits) in cases {
        let file = dir.join(format!("{gateway}.toml"));
        // The shape's own figures given as flags: the scales do not move.
        let out = rehearse()
            .arg("init")
            .arg(&file)
            .args(flags)
            .args([
                "--peak-rate",
                "2000/min",
                "--peak-duration",
                "40m",
                "--normal-rate",
                "200/min",
            ])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{gateway}: {}", text(&out));
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(said.starts_with("Plan for my-gateway"), "{gateway}: {said}");
        for line in [
            "The rehearsal written (quota ÷ 10, time ÷ 10): 33.3 requests/s at the peak",
            "quota ÷ 10: the default",
            "time ÷ 10: the default",
        ] {
            assert!(
                said.replace("\n    ", " ").contains(line),
                "{gateway}: {line}\n{said}"
            );
        }
        let written = std::fs::read_to_string(&file).unwrap();
        assert!(written.contains("\nquota_scale = 10.0  #"), "{gateway}");
        assert!(written.contains("\ntime_scale = 10.0  #"), "{gateway}");
        assert!(written.contains("\nrate = \"2000/min\"  #"), "{gateway}");
        assert_eq!(
            written.contains("\n[gateway.reference]"),
            gateway == "reference",
            "{gateway}: the reference tables are the gateway's, or commented out"
        );
        plans(&file, &[]);
        for (key, out) in edits {
            let edited = dir.join(format!("{gateway}-{key}.toml"));
            std::fs::write(&edited, edit(&written, key, *out)).unwrap();
            plans(&edited, &[]);
        }
    }
    // init -q: what was written, not the plan.
    let out = rehearse()
        .arg("init")
        .arg(dir.join("quiet.toml"))
        .args(["-q", "--time-scale", "5", "--quota-scale", "2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("written: "), "{said}");
    assert!(said.contains("quota ÷ 2: from --quota-scale"), "{said}");
}

/// `plan --time-scale` as `run` takes it; a rate with its unit plans as
/// the number per `per` does; a unit that is none names file, line and
/// field (exit 2).
#[test]
fn plan_takes_the_time_scale_and_rates_with_their_unit() {
    let dir = scratch("frontdoor", "rates");
    let scenario = |rate: &str| {
        format!(
            "[scenario]\nname = \"r\"\n[provider.quota]\ntokens_per_minute = 60000\n\
             [gateway]\nreference = {{ mode = \"naive\" }}\n[load]\n[[load.phases]]\n\
             duration = \"2m\"\n{rate}\n"
        )
    };
    let with_unit = dir.join("unit.toml");
    std::fs::write(&with_unit, scenario("rate = \"120/min\"")).unwrap();
    let bare = dir.join("bare.toml");
    std::fs::write(&bare, scenario("rate = 120\nper = \"minute\"")).unwrap();
    let plan = plans(&with_unit, &["--time-scale", "4", "--no-progress"]);
    assert!(
        plan.contains("Rehearsal scale (quota ÷ 1, time ÷ 4)"),
        "{plan}"
    );
    assert_eq!(plan, plans(&bare, &["--time-scale", "4"]));
    let hourly = dir.join("hourly.toml");
    std::fs::write(&hourly, scenario("rate = \"7200/h\"")).unwrap();
    assert_eq!(plans(&hourly, &[]), plans(&bare, &[]));
    let bad = dir.join("bad.toml");
    std::fs::write(&bad, scenario("rate = \"120/fortnight\"")).unwrap();
    let out = rehearse().arg("plan").arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:10:")
            && err.contains("load.phases[0].rate")
            && err.contains("N/min"),
        "{err}"
    );
    let out = rehearse()
        .arg("plan")
        .arg(&bare)
        .args(["--time-scale", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// A script gives every subcommand the flags it gives `run`: each is
/// read wherever it means something, short or long (`-o`, `-q`, `-v`,
/// `--no-progress`, `--time-scale`). Each command line is given a
/// scenario that does not exist, so that it ends (exit 2) right after
/// its flags are read; a flag refused would be clap's error ("try '--help'").
#[test]
fn shared_flags_read_alike_on_every_subcommand() {
    let dir = scratch("frontdoor", "flags");
    let missing = dir.join("missing.toml");
    let missing = missing.to_str().unwrap();
    let exists = dir.join("exists.toml");
    std::fs::write(&exists, "").unwrap();
    let exists = exists.to_str().unwrap();
    let accepted: [&[&str]; 13] = [
        &["run", missing, "-o", "d", "-q", "--no-progress"],
        &["run", missing, "--out", "d", "-v", "--time-scale", "5"],
        &["report", missing, "-q", "--no-progress"],
        &["report", missing, "-v"],
        &["plan", missing, "--time-scale", "10", "--no-progress"],
        &["compare", missing, "-o", "d", "-q", "--no-progress"],
        &[
            "load",
            missing,
            "--target",
            "http://127.0.0.1:9",
            "-o",
            "d",
            "--no-progress",
        ],
        &[
            "calibrate",
            missing,
            "--target",
            "http://127.0.0.1:9",
            "-o",
            "d",
        ],
        &[
            "stage",
            missing,
            "-o",
            "d",
            "--provider",
            "http://p",
            "--start-at",
            "1",
        ],
        &[
            "init",
            exists,
            "-q",
            "--time-scale",
            "5",
            "--quota-scale",
            "2",
        ],
        &[
            "init",
            exists,
            "--peak-rate",
            "2000/min",
            "--peak-duration",
            "5m",
        ],
        &["init", exists, "--normal-rate", "7200/h"],
        &["init", exists, "--normal-rate", "3.5"],
    ];
    for args in accepted {
        let out = rehearse().args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("try '--help'"), "{args:?}: {err}");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
    }
    for refused in [
        &["report", missing, "-q", "-v"][..],
        &["init", exists, "--normal-rate", "2000/fortnight"],
    ] {
        let out = rehearse().args(refused).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{refused:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("try '--help'"),
            "{refused:?}"
        );
    }
}

/// A port nothing listens on (bound, then let go).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `--target` where nothing listens: "connection refused" at once (not a
/// 10 s wait ending "not ready"), naming `[gateway] ready_timeout`; with
/// `ready_timeout` written, that long a wait, naming it again. Then
/// `rehearse report` on the directory the run left names the file it
/// lacks and the command that writes it.
#[test]
fn a_target_where_nothing_listens_is_said_at_once_and_its_directory_too() {
    let dir = scratch("frontdoor", "refused");
    let target = format!("http://127.0.0.1:{}", closed_port());
    let out_dir = dir.join("run");
    let started = std::time::Instant::now();
    let out = rehearse()
        .args(["run", "--target", &target, "--no-progress", "-o"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("the gateway at {target} refused the connection"))
            && err.contains("nothing listens there")
            && err.contains("ready_timeout"),
        "{err}"
    );
    // The readiness wait it replaces was the default 10 s.
    assert!(took < std::time::Duration::from_secs(8), "{took:?}");

    let out = rehearse().arg("report").arg(&out_dir).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{}: No such file",
            out_dir.join("run.json").display()
        )) && err.contains("`rehearse run` writes it when its rehearsal ends"),
        "{err}"
    );

    // Asked to wait: it waits, and says what gives it more time.
    let out = rehearse()
        .args(["run", "--target", &target, "--no-progress", "-q", "-o"])
        .arg(dir.join("waited"))
        .args(["--set", "gateway.ready_timeout=\"1s\""])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "was not ready within 1s (the scenario's [gateway] ready_timeout gives it more time)"
        ),
        "{err}"
    );
}
