//! The terminal at a glance, tested on the binary: every line that `run`,
//! `report`, `plan` and `compare` print (but `--verbose` and `--json`'s
//! document) fits 100 display columns, a wide character counting as two;
//! colour only on a terminal and never with NO_COLOR; `--json` and
//! `--quiet`; `rehearse init`'s scenario (every field of the provider,
//! gateway, load and checklist tables written, and read back as the
//! defaults); the bash completion script and the man page naming every
//! subcommand.

use crate::common;

use common::{one_at_a_time, rehearse, scratch, text};

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use unicode_width::UnicodeWidthStr as _;

/// The CI smoke scenario with a long description in wide characters (the
/// banner wraps it), at a tenth of its length, and two variants whose long
/// names make the comparison's table wider than 100 columns.
fn scenario(dir: &Path) -> PathBuf {
    let smoke = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios/ci-smoke.toml"),
    )
    .unwrap();
    let text = smoke.replace(
        "description = \"30 requests/s for 10 s against a provider that serves 10/s\"",
        "description = \"限流の検証: 30 requests/s for 10 s against a provider that serves 10/s, \
             ゲートウェイが待ち行列を抑えて、締め切りに間に合わない要求を早めに断るかどうか\"",
    );
    let text = format!(
        "{text}\n[[variants]]\nname = \"deadline, paced a little under the provider's quota (as shipped)\"\n\n\
         [[variants]]\nname = \"naive 限流なし: every request forwarded at once, nothing refused\"\n\
         set = {{ \"gateway.reference.mode\" = \"naive\" }}\n"
    );
    let path = dir.join("smoke.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// Every line of `out` (stdout and stderr) that is over 100 display
/// columns, or that carries an escape (none is on a terminal here).
fn too_wide(out: &Output, skip_stdout: bool) -> Vec<String> {
    let mut bad = Vec::new();
    let streams: &[&[u8]] = if skip_stdout {
        &[&out.stderr]
    } else {
        &[&out.stdout, &out.stderr]
    };
    for stream in streams {
        for line in String::from_utf8_lossy(stream).lines() {
            if line.width() > 100 || line.contains('\x1b') {
                bad.push(format!("{:>3} {line}", line.width()));
            }
        }
    }
    bad
}

/// The invocations whose every line must fit, in order (a later one may
/// read what an earlier one wrote), with whether their stdout is a JSON
/// document rather than lines. `rehearse calibrate` joins this list once
/// it exists.
fn invocations(dir: &Path, scenario: &Path) -> Vec<(Vec<String>, bool)> {
    let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let path = |p: &Path| p.display().to_string();
    let run = path(&dir.join("run"));
    let mut list = vec![
        (
            s(&[
                "run",
                &path(scenario),
                "--time-scale",
                "10",
                "--no-progress",
                "--json",
                "--out",
                &run,
            ]),
            true,
        ),
        (s(&["report", &run]), false),
        // Two checks failed: their explanations, wrapped.
        (
            s(&[
                "report",
                &run,
                "--set",
                "checklist.drain.within=1ms",
                "--set",
                "checklist.served_latency.p99_ms=1",
            ]),
            false,
        ),
        (s(&["report", &run, "--quiet"]), false),
        (
            s(&[
                "compare",
                &path(scenario),
                "--time-scale",
                "10",
                "--no-progress",
                "--out",
                &path(&dir.join("compare")),
            ]),
            false,
        ),
        // A run directory beside itself (its figures' changes all 0).
        (
            s(&[
                "compare",
                &run,
                &run,
                "--out",
                &path(&dir.join("runs-compared")),
            ]),
            false,
        ),
    ];
    for entry in std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("scenarios")).unwrap()
    {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "toml") {
            list.push((s(&["plan", &path(&p)]), false));
        }
    }
    list
}

#[test]
fn every_line_of_run_report_plan_and_compare_fits_100_columns() {
    let _one = one_at_a_time();
    let dir = scratch("terminal", "fit");
    let scenario = scenario(&dir);
    for (args, json) in invocations(&dir, &scenario) {
        let out = rehearse()
            .args(&args)
            .env_remove("NO_COLOR")
            .output()
            .unwrap();
        // Any verdict will do (a busy machine may make a run invalid): the
        // layout is what is tested.
        let code = out.status.code();
        assert!(
            matches!(code, Some(0 | 1 | 3)),
            "rehearse {}: {}",
            args.join(" "),
            text(&out)
        );
        let bad = too_wide(&out, json);
        assert!(
            bad.is_empty(),
            "rehearse {}: lines over 100 columns or coloured:\n{}\n\n{}",
            args.join(" "),
            bad.join("\n"),
            text(&out)
        );
        if json {
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
                .unwrap_or_else(|e| panic!("--json: {e}\n{}", text(&out)));
            assert!(
                doc["checks"]
                    .as_array()
                    .is_some_and(|c| c.len() == assertions::always_judged().count()),
                "{doc}"
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                err.contains("Checklist: ci-smoke") && err.contains("report: "),
                "{err}"
            );
        }
    }
    // The failed checks' lines, their explanations, and summary.md's table.
    let run = dir.join("run");
    let out = rehearse()
        .arg("report")
        .arg(&run)
        .args(["--set", "checklist.drain.within=1ms"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(matches!(out.status.code(), Some(1 | 3)), "{}", text(&out));
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("  FAIL    drain ") && l.contains("(bound 0 s)")),
        "{stdout}"
    );
    assert!(stdout.contains("\nWhy:\n  drain: the backlog"), "{stdout}");
    let md = std::fs::read_to_string(run.join("summary.md")).unwrap();
    assert!(md.contains("| ❌ FAIL | `drain` | drained in"), "{md}");
    let junit = std::fs::read_to_string(run.join("junit.xml")).unwrap();
    assert!(junit.contains("message=\"drained in"), "{junit}");
}

/// `--json --quiet`: the document on stdout, nothing on stderr, from `run`
/// (its banner too) and `report`.
#[test]
fn json_and_quiet_print_the_document_alone() {
    let _one = one_at_a_time();
    let dir = scratch("terminal", "json");
    let scenario = scenario(&dir);
    let run = dir.join("run");
    let out = rehearse()
        .arg("run")
        .arg(&scenario)
        .args([
            "--time-scale",
            "10",
            "--no-progress",
            "--json",
            "--quiet",
            "--out",
        ])
        .arg(&run)
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1 | 3)),
        "{}",
        text(&out)
    );
    assert!(out.stderr.is_empty(), "{}", text(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("report.json")).unwrap()).unwrap();
    assert_eq!(doc, file);
    let out = rehearse()
        .arg("report")
        .arg(&run)
        .args(["--json", "--quiet"])
        .output()
        .unwrap();
    assert!(out.stderr.is_empty(), "{}", text(&out));
    serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap();
    // --quiet alone: the verdict line and the paths.
    let out = rehearse()
        .arg("report")
        .arg(&run)
        .arg("--quiet")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines[0].starts_with("Checklist: ci-smoke against "),
        "{stdout}"
    );
    assert!(
        lines[1].starts_with("report: ") && lines[2].starts_with("charts: "),
        "{stdout}"
    );
}

/// `rehearse report DIR --quiet` on a terminal (`script` gives it one):
/// coloured, unless NO_COLOR is set.
#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("harness/tests/golden/pool-demo-naive");
    let copy = scratch("terminal", "colour");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, copy.join(p.file_name().unwrap())).unwrap();
    }
    let command = format!(
        "{} report {} --quiet",
        common::rehearse_bin().display(),
        copy.display()
    );
    let on_a_terminal = |no_color: Option<&str>| {
        let mut c = Command::new("script");
        c.args(["-qec", &command, "/dev/null"]);
        c.env_remove("NO_COLOR");
        if let Some(v) = no_color {
            c.env("NO_COLOR", v);
        }
        let out = c
            .output()
            .expect("`script` (util-linux) runs a command on a terminal");
        String::from_utf8_lossy(&out.stdout).to_string()
    };
    let plain = on_a_terminal(Some("1"));
    assert!(
        plain.contains("FAIL") && !plain.contains('\x1b'),
        "{plain:?}"
    );
    let coloured = on_a_terminal(None);
    assert!(coloured.contains("\x1b[1;31mFAIL\x1b[0m"), "{coloured:?}");
    // An empty NO_COLOR does not count (no-color.org).
    assert!(on_a_terminal(Some("")).contains('\x1b'));
    let piped = rehearse().arg("report").arg(&copy).output().unwrap();
    assert!(!piped.stdout.contains(&0x1b), "{}", text(&piped));
}

/// The dotted keys written in a scenario text, commented out or not, and
/// its tables.
fn keys_written(text: &str) -> std::collections::BTreeSet<String> {
    let mut written = std::collections::BTreeSet::new();
    let mut table = String::new();
    for line in text.lines() {
        let line = line.strip_prefix("# ").unwrap_or(line);
        if let Some(h) = line.strip_prefix('[') {
            table = h
                .trim_start_matches('[')
                .split(']')
                .next()
                .unwrap()
                .to_string();
            written.insert(table.clone());
        } else if let Some((k, _)) = line.split_once(" = ") {
            written.insert(format!("{table}.{k}"));
        }
    }
    written
}

#[test]
fn init_writes_every_field_and_reads_back_as_the_defaults() {
    let dir = scratch("terminal", "init");
    let file = dir.join("mine.toml");
    let out = rehearse().arg("init").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("Plan for my-gateway") && stdout.contains("Rehearsal scale"),
        "{stdout}"
    );
    let written = std::fs::read_to_string(&file).unwrap();
    let keys = keys_written(&written);
    for key in harness::scenario_keys() {
        assert!(
            keys.contains(&key),
            "{key} is not in init's scenario:\n{written}"
        );
    }
    assert!(written.contains("# placeholder") || written.contains("placeholder:"));
    // Read back: the flash-promotion shape's figures, every other field at its default.
    let s = harness::Scenario::load(&file, &[]).unwrap();
    let mut checklist = assertions::Thresholds::default();
    checklist.served_latency.p99_ms = 25_000.0;
    checklist.goodput.min_share = 0.7;
    assert_eq!(s.checklist, checklist);
    let mut provider = fake_provider::ProviderConfig::default();
    provider.completion_tokens = fake_provider::config::Dist::Fixed(200);
    provider.latency = s.provider().latency.clone();
    provider.quota.tokens_per_minute = Some(500_000);
    provider.quota.requests_per_minute = Some(10_000);
    assert_eq!(s.provider(), &provider);
    assert_eq!(s.provider().latency.multiplier, 1.0);
    assert_eq!(s.provider().latency.knee, None);
    // Never over a file without --force.
    std::fs::write(&file, "mine").unwrap();
    let out = rehearse().arg("init").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--force"),
        "{}",
        text(&out)
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "mine");
    // The flags, a gateway command split as a shell would.
    let out = rehearse()
        .arg("init")
        .arg(&file)
        .args([
            "--force",
            "--gateway-command",
            "my-gw --listen {listen} --upstream '{provider_url}' --name 'two words'",
            "--normal-rate",
            "2/s",
            "--peak-rate",
            "30/s",
            "--peak-duration",
            "90s",
            "--quota-tokens-per-minute",
            "90000",
            "--tokens-per-request",
            "600",
            "--patience",
            "12s",
            "--dialect",
            "anthropic",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let written = std::fs::read_to_string(&file).unwrap();
    let keys = keys_written(&written);
    for key in harness::scenario_keys() {
        assert!(
            keys.contains(&key),
            "{key} is not in init's scenario:\n{written}"
        );
    }
    let s = harness::Scenario::load(&file, &[]).unwrap();
    assert_eq!(
        s.gateway.kind,
        harness::GatewayKind::Command(
            [
                "my-gw",
                "--listen",
                "{listen}",
                "--upstream",
                "{provider_url}",
                "--name",
                "two words"
            ]
            .map(String::from)
            .to_vec()
        )
    );
    assert_eq!(s.provider().quota.tokens_per_minute, Some(90_000));
    assert_eq!(s.provider().quota.requests_per_minute, None);
    assert_eq!(s.load_plan.dialect(), wire::Dialect::Anthropic);
    assert_eq!(s.load_plan.phases()[1].from_per_sec, 30.0);
    // The scales stay init's defaults, whatever the figures and the gateway.
    assert_eq!((s.meta.quota_scale, s.meta.time_scale), (10.0, 10.0));
    let mut checklist = assertions::Thresholds::default();
    checklist.served_latency.p99_ms = 12_000.0;
    checklist.goodput.min_share = 0.7;
    assert_eq!(s.checklist, checklist);
    // A gateway command that does not say where to listen is refused.
    let out = rehearse()
        .arg("init")
        .arg(dir.join("other.toml"))
        .args(["--gateway-command", "my-gw --port 9"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(!dir.join("other.toml").exists());
}

/// The subcommands `rehearse --help` lists.
fn subcommands() -> Vec<String> {
    let out = rehearse().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout).to_string();
    let list: Vec<String> = help
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .filter(|c| c != "help")
        .collect();
    assert!(
        list.len() >= 12 && list.contains(&"init".to_string()),
        "{help}"
    );
    list
}

#[test]
fn the_bash_completion_script_completes_every_subcommand() {
    let dir = scratch("terminal", "completions");
    let script = dir.join("rehearse.bash");
    let out = rehearse().args(["completions", "bash"]).output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(&script, &out.stdout).unwrap();
    let completed = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "source {}; COMP_WORDS=(rehearse ''); COMP_CWORD=1; COMP_LINE='rehearse '; COMP_POINT=9; \
             _rehearse rehearse '' rehearse; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            script.display()
        ))
        .output()
        .unwrap();
    let words = String::from_utf8_lossy(&completed.stdout).to_string();
    for command in subcommands() {
        assert!(
            words.lines().any(|w| w == command),
            "{command} not completed: {words}"
        );
    }
    for shell in ["zsh", "fish"] {
        let out = rehearse().args(["completions", shell]).output().unwrap();
        assert!(
            out.status.success() && out.stdout.len() > 1000,
            "{shell}: {}",
            text(&out)
        );
    }
}

#[test]
fn man_renders_the_page_and_names_every_subcommand() {
    let dir = scratch("terminal", "man");
    let page = dir.join("rehearse.1");
    let out = rehearse().arg("man").output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    std::fs::write(&page, &out.stdout).unwrap();
    let rendered = Command::new("man")
        .arg("-l")
        .arg(&page)
        .env("MANPAGER", "cat")
        .env("MANWIDTH", "80")
        .output()
        .expect("man (man-db) renders a page: .ci/run installs it");
    let text = String::from_utf8_lossy(&rendered.stdout);
    assert!(
        rendered.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    assert!(text.contains("rehearse"), "{text}");
    for command in subcommands() {
        assert!(
            text.contains(&command),
            "{command} not in the man page:\n{text}"
        );
    }
}
