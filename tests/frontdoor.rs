//! The way in, as a newcomer walks it (issue 43): `rehearse init` for each
//! kind of gateway and the file edited as its comments say, the plan,
//! the flags every subcommand shares, and the errors met first.

use std::path::Path;

use crate::common::{json, one_at_a_time, rehearse, scratch, text};

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

/// Where a [`relay`] sends what it is given: set later, when the test has
/// read it.
type Upstream = std::sync::Arc<std::sync::Mutex<Option<std::net::SocketAddr>>>;

/// A tiny gateway: each connection passed through, byte for byte, to the
/// upstream set in `upstream` when the connection comes. Its base URL.
fn relay(rt: &tokio::runtime::Runtime, upstream: Upstream) -> String {
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    rt.spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let to = *upstream.lock().unwrap();
            tokio::spawn(async move {
                let Some(to) = to else { return };
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    url
}

/// `http://127.0.0.1:PORT` after `fake provider: ` in a run's stderr.
fn provider_said(err: &str) -> String {
    err.lines()
        .find_map(|l| l.strip_prefix("fake provider: "))
        .unwrap_or_else(|| panic!("no provider line:\n{err}"))
        .trim()
        .to_string()
}

/// A gateway already running that calls another upstream (a relay to a
/// second fake provider on its own port): the run's provider listens on
/// 127.0.0.1:8080 or the next free port, the banner says before any load
/// the base URL the gateway must call, and once the gateway has answered
/// 20 requests while the provider saw none the run stops (exit 3), saying
/// so last and where the gateway should call, in seconds rather than the
/// built-in scenario's 29.
#[test]
fn a_gateway_calling_elsewhere_stops_the_run_early_saying_where_to_call() {
    let _one = one_at_a_time();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let elsewhere = rt
        .block_on(
            fake_provider::FakeProvider::new(fake_provider::ProviderConfig::default())
                .bind("127.0.0.1:0"),
        )
        .unwrap();
    let target = relay(
        &rt,
        std::sync::Arc::new(std::sync::Mutex::new(Some(elsewhere.addr()))),
    );
    let dir = scratch("frontdoor", "elsewhere");
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
    let provider = provider_said(&err);
    let port: u16 = provider.rsplit(':').next().unwrap().parse().unwrap();
    assert!((8080..8180).contains(&port), "{provider}");
    let flat = err.replace("\n  ", " ");
    let upstream = flat
        .find(&format!(
            "must call the fake provider: set its upstream base URL to {provider} "
        ))
        .unwrap_or_else(|| panic!("{err}"));
    let banner = flat
        .find(&format!("gateway: gateway at {target}\n"))
        .expect(&err);
    let stopping = flat
        .find("stopping: the gateway is not calling the fake provider")
        .expect(&err);
    assert!(upstream < banner && banner < stopping, "{err}");
    assert!(
        !flat.contains(&format!("at {target} at")),
        "the gateway said once: {err}"
    );
    assert!(
        flat.contains("phases as played: baseline 300/min for 10s"),
        "{err}"
    );
    let last = err.trim_end().lines().last().unwrap();
    assert!(
        last.starts_with(&format!(
            "error: stopped early: the gateway at {target} answered "
        )) && last.contains("it is not calling the fake provider")
            && last.contains(&format!("Set its upstream base URL to {provider} ")),
        "{err}"
    );
    // The built-in scenario lasts 29 s; the 20th answer comes after 4 s.
    assert!(took < std::time::Duration::from_secs(20), "{took:?}");
    let report = json(&out_dir.join("report.json"));
    assert_eq!(report["partial"], true, "{report}");
    assert_eq!(report["verdict"], "invalid", "{report}");
    let ok = report["counts"]["ok"].as_u64().unwrap();
    assert!(
        (20..60).contains(&ok),
        "{ok} answers, the baseline's 50 would be its end"
    );
    assert!(
        report["notes"].to_string().contains("stopped early"),
        "{report}"
    );
    assert!(
        elsewhere.stats().received >= 20,
        "the relay's own upstream answered"
    );
}

/// The same relay pointed, once the run has said it, at the base URL the
/// run printed: the provider receives its calls and the run is not
/// stopped (it plays to its end, judged as any run).
#[test]
fn a_gateway_pointed_where_the_run_says_is_rehearsed_to_the_end() {
    use std::io::{BufRead as _, BufReader};
    let _one = one_at_a_time();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let upstream: Upstream = std::sync::Arc::new(std::sync::Mutex::new(None));
    let target = relay(&rt, upstream.clone());
    let dir = scratch("frontdoor", "pointed");
    let out_dir = dir.join("run");
    let mut child = rehearse()
        .args([
            "run",
            "--target",
            &target,
            "--no-progress",
            "--time-scale",
            "4",
        ])
        .args(["--allow-time-scale", "-o"])
        .arg(&out_dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut err = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        err.push_str(&line);
        err.push('\n');
        if line.starts_with("fake provider: ") {
            let url = provider_said(&line);
            let addr = url.trim_start_matches("http://").parse().unwrap();
            *upstream.lock().unwrap() = Some(addr);
            break;
        }
    }
    for line in lines {
        err.push_str(&line.unwrap());
        err.push('\n');
    }
    let out = child.wait_with_output().unwrap();
    assert!(!err.contains("stopped early"), "{err}");
    assert_ne!(out.status.code(), Some(2), "{err}");
    let report = json(&out_dir.join("report.json"));
    assert_eq!(report["partial"], false, "{report}");
    let calls = report["provider"]["calls"].as_u64().unwrap();
    assert!(calls >= 20, "{calls} provider calls: {report}");
}
