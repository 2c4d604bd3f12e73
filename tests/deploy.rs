//! The deploy files, tested where they can be here:
//!
//! - the container image (`Containerfile`, built by `deploy/image/build.sh`,
//!   which `.ci/run` runs before `cargo test`): exported with podman and
//!   its binary run from the extracted root with chroot (a container
//!   cannot run on these machines): `--version`, a `plan`, a name found in
//!   the root's own `/etc/hosts` (no NSS in a scratch image) and a chart
//!   with its labels (no fonts in it either);
//! - `deploy/kubernetes/`: validated offline against the Kubernetes schemas
//!   (`kubernetes-validate --strict`), and read for what a schema cannot
//!   check (one N of shards, every `$(VAR)` defined, one image);
//! - `deploy/ci/`: the GitHub workflow and the GitLab job validated against
//!   their schemas (`check-jsonschema`), and their scripts run against a
//!   stand-in `rehearse` for each exit code.
//!
//! A missing tool or image fails these tests with the command that
//! provides it; none of them passes by skipping.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common;

/// The image `deploy/image/build.sh` builds (`IMAGE` there, `REHEARSE_IMAGE`
/// here to test another).
const DEFAULT_IMAGE: &str = "localhost/rehearse:latest";
/// The numeric user the image runs as.
const IMAGE_USER: &str = "65532:65532";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// Runs a command to its end; panics with `hint` when it cannot start.
fn run(cmd: &mut Command, hint: &str) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}; {hint}"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A scratch folder of this test, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("deploy-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Reads YAML documents (every document of every file) as JSON, with the
/// YAML library check-jsonschema brings (ruamel.yaml).
pub(crate) fn yaml_docs(files: &[PathBuf]) -> Vec<Value> {
    let script = "import json, sys\n\
                  from ruamel.yaml import YAML\n\
                  y = YAML(typ='safe')\n\
                  docs = [d for f in sys.argv[1:] for d in y.load_all(open(f)) if d is not None]\n\
                  print(json.dumps(docs))";
    let out = run(
        Command::new("python3").arg("-c").arg(script).args(files),
        "python3 is needed",
    );
    assert!(
        out.status.success(),
        "reading {files:?} as YAML failed (ruamel.yaml comes with check-jsonschema: \
         `python3 -m pip install check-jsonschema`, as .ci/run does):\n{}",
        text(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn python_module(module: &str, package: &str) {
    let ok = Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "the Python package {package} is missing: `python3 -m pip install {package}` \
         (.ci/run installs it{})",
        if in_ci() {
            "; CI=true and it is still missing"
        } else {
            ""
        }
    );
}

/// The `.yaml` files of a folder of the repository, sorted.
fn yaml_files(dir: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    files
}

fn manifests() -> Vec<PathBuf> {
    let files = yaml_files("deploy/kubernetes");
    assert!(files.len() >= 5, "{files:?}");
    files
}

/// The manifests of a scenario of several providers: `several-providers/`'s
/// files in place of their namesakes (the provider's Deployment and
/// Service, the run's ConfigMap), the Jobs as they are.
pub(crate) fn several_provider_manifests() -> Vec<PathBuf> {
    let several = yaml_files("deploy/kubernetes/several-providers");
    assert!(several.len() >= 2, "{several:?}");
    let mut files: Vec<PathBuf> = manifests()
        .into_iter()
        .filter(|f| !several.iter().any(|s| s.file_name() == f.file_name()))
        .collect();
    files.extend(several);
    files
}

/// Both sets of manifests, each with what it is for.
fn manifest_sets() -> [(&'static str, Vec<PathBuf>); 2] {
    [
        ("one provider", manifests()),
        ("several providers", several_provider_manifests()),
    ]
}

// ---------------------------------------------------------------- manifests

fn kubernetes_validate(args: &[&str], files: &[PathBuf]) -> Output {
    run(
        Command::new("python3")
            .args(["-m", "kubernetes_validate", "--strict"])
            .args(args)
            .args(files),
        "python3 is needed",
    )
}

/// Every manifest is valid against the Kubernetes API's schemas, strictly
/// (no unknown field), for the newest Kubernetes the validator knows and
/// for 1.28; and the validator does catch a wrong field.
#[test]
fn manifests_validate_offline_against_the_kubernetes_schemas() {
    python_module("kubernetes_validate", "kubernetes-validate");
    let mut files = manifests();
    files.extend(yaml_files("deploy/kubernetes/several-providers"));
    for version in [&[][..], &["--kubernetes-version", "1.28"][..]] {
        let out = kubernetes_validate(version, &files);
        assert!(
            out.status.success(),
            "kubernetes-validate {version:?}:\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
    }
    // The same check fails a manifest with a misspelt field.
    let dir = scratch("bad-manifest");
    let job = std::fs::read_to_string(repo().join("deploy/kubernetes/load-job.yaml")).unwrap();
    let bad = dir.join("load-job.yaml");
    std::fs::write(
        &bad,
        job.replace("completionMode: Indexed", "completionmode: Indexed"),
    )
    .unwrap();
    let out = kubernetes_validate(&[], &[bad]);
    assert!(!out.status.success(), "{}", text(&out.stdout));
    assert!(
        text(&out.stdout).contains("completionmode"),
        "{}",
        text(&out.stdout)
    );
}

/// The containers of a pod template (init containers first).
pub(crate) fn containers(pod_spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers"]
        .iter()
        .flat_map(|k| pod_spec[*k].as_array().into_iter().flatten())
        .collect()
}

pub(crate) fn pod_spec(doc: &Value) -> &Value {
    match doc["kind"].as_str() {
        Some("Pod") => &doc["spec"],
        _ => &doc["spec"]["template"]["spec"],
    }
}

pub(crate) fn by_name<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/kubernetes/"))
}

pub(crate) fn args(container: &Value) -> Vec<&str> {
    container["args"]
        .as_array()
        .unwrap_or_else(|| panic!("no args: {container}"))
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect()
}

/// The value of a plain `env` entry.
fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a str> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?
        .get("value")?
        .as_str()
}

/// What the schemas cannot check: the manifests agree with each other and
/// with the image.
#[test]
fn manifests_agree_with_each_other_and_the_image() {
    python_module("ruamel.yaml", "check-jsonschema");
    for (what, files) in manifest_sets() {
        agree(what, &yaml_docs(&files));
    }
}

/// [`manifests_agree_with_each_other_and_the_image`] for one set (`what`).
fn agree(what: &str, docs: &[Value]) {
    let run_config = by_name(docs, "ConfigMap", "rehearse-run");
    let config_keys: BTreeSet<&str> = run_config["data"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut images = BTreeSet::new();
    for doc in docs.iter().filter(|d| d["kind"] != "ConfigMap") {
        let Some(spec) = Some(pod_spec(doc)).filter(|s| s.is_object()) else {
            continue;
        };
        let name = &format!("{what}: {}", doc["metadata"]["name"].as_str().unwrap());
        // Not root, in the pod and in every container.
        assert_eq!(spec["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(spec["securityContext"]["runAsUser"], 65532, "{name}");
        for c in containers(spec) {
            let image = c["image"].as_str().unwrap();
            if !image.starts_with("busybox") {
                images.insert(image);
            }
            assert_eq!(
                c["securityContext"]["readOnlyRootFilesystem"], true,
                "{name}"
            );
            assert!(
                c["resources"]["requests"].is_object(),
                "{name}: resource requests"
            );
            // Every $(VAR) in the arguments is defined in the container's env
            // (Kubernetes leaves an undefined one as it is, silently).
            let defined: BTreeSet<&str> = c["env"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| e["name"].as_str().unwrap())
                .collect();
            for arg in c["args"].as_array().into_iter().flatten() {
                let arg = arg.as_str().unwrap();
                for var in arg.split("$(").skip(1).filter_map(|s| s.split(')').next()) {
                    assert!(
                        defined.contains(var),
                        "{name}: $({var}) in {arg:?} is not in env"
                    );
                }
            }
            for e in c["env"].as_array().into_iter().flatten() {
                if let Some(r) = e["valueFrom"].get("configMapKeyRef") {
                    assert_eq!(r["name"], "rehearse-run", "{name}");
                    let key = r["key"].as_str().unwrap();
                    assert!(
                        config_keys.contains(key),
                        "{name}: no key {key} in rehearse-run"
                    );
                }
                if let Some(r) = e["valueFrom"].get("secretKeyRef") {
                    assert_eq!(r["name"], "rehearse-admin", "{name}");
                    assert_eq!(r["key"], "token", "{name}");
                    // The admin token only ever comes from the Secret.
                    let want = match doc["metadata"]["name"].as_str().unwrap() {
                        "rehearse-provider" => "REHEARSE_ADMIN_TOKEN",
                        _ => "REHEARSE_PROVIDER_TOKEN",
                    };
                    assert_eq!(e["name"], want, "{name}");
                }
            }
        }
        for v in spec["volumes"].as_array().into_iter().flatten() {
            if let Some(claim) = v.get("persistentVolumeClaim") {
                assert_eq!(claim["claimName"], "rehearse-results", "{name}");
            }
        }
    }
    assert_eq!(images.len(), 1, "one rehearse image everywhere: {images:?}");

    // The provider: one replica behind its Service, token from the Secret,
    // a readiness probe, an emptyDir for the record files it writes.
    let provider = by_name(docs, "Deployment", "rehearse-provider");
    let service = by_name(docs, "Service", "rehearse-provider");
    assert_eq!(provider["spec"]["replicas"], 1);
    let labels = &provider["spec"]["template"]["metadata"]["labels"];
    for (k, v) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(&labels[k], v, "the Service selects the provider's pods");
    }
    let spec = pod_spec(provider);
    let c = containers(spec)[0];
    let a = args(c);
    assert_eq!(a[0], "provider");
    // Each --listen (NAME=ADDR for each of several providers) has its
    // container port and a Service port of the same number, in order, and
    // the run's provider flag names each at that Service port, in order.
    let listens: Vec<(Option<&str>, u16)> = a
        .windows(2)
        .filter(|w| w[0] == "--listen")
        .map(|w| {
            let (name, addr) = match w[1].split_once('=') {
                Some((n, addr)) => (Some(n), addr),
                None => (None, w[1]),
            };
            (name, addr.rsplit_once(':').unwrap().1.parse().unwrap())
        })
        .collect();
    assert!(!listens.is_empty(), "{what}: {a:?}");
    for (i, (name, port)) in listens.iter().enumerate() {
        let container_port = &c["ports"][i];
        assert_eq!(container_port["containerPort"], *port, "{what}");
        let service_port = &service["spec"]["ports"][i];
        assert_eq!(service_port["port"], *port, "{what}");
        assert_eq!(service_port["targetPort"], container_port["name"], "{what}");
        if let Some(name) = name {
            assert_eq!(
                container_port["name"], *name,
                "{what}: ports named as their providers"
            );
        }
    }
    let probe = &c["readinessProbe"]["httpGet"];
    assert!(probe["path"].is_string(), "{what}");
    assert_eq!(probe["port"], c["ports"][0]["name"], "{what}");
    let records = a[a.iter().position(|x| *x == "--records").unwrap() + 1];
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| records.starts_with(m["mountPath"].as_str().unwrap()))
        .expect("the record file is on a mounted volume");
    let volume = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == mount["name"])
        .unwrap();
    assert!(volume["emptyDir"].is_object(), "{volume}");
    let url = |port: &u16| format!("http://rehearse-provider:{port}");
    let want = match listens.as_slice() {
        [(None, port)] => url(port),
        _ => listens
            .iter()
            .map(|(name, port)| format!("{}={}", name.expect("several are named"), url(port)))
            .collect::<Vec<_>>()
            .join(","),
    };
    assert_eq!(run_config["data"]["provider"], want.as_str(), "{what}");

    // The load: an Indexed Job of N pods at once, shard I/N each, one
    // start, results on the ReadWriteMany claim.
    let load = by_name(docs, "Job", "rehearse-load");
    let job = &load["spec"];
    assert_eq!(job["completionMode"], "Indexed");
    let n = job["completions"].as_u64().unwrap();
    assert!(n >= 2);
    assert_eq!(job["parallelism"].as_u64(), Some(n), "every shard at once");
    let c = containers(pod_spec(load))[0];
    assert_eq!(env_value(c, "SHARDS"), Some(n.to_string().as_str()));
    let a = args(c);
    assert_eq!(a[0], "load");
    let flag = |f: &str| a[a.iter().position(|x| *x == f).unwrap() + 1];
    assert_eq!(flag("--shard"), "$(JOB_COMPLETION_INDEX)/$(SHARDS)");
    assert_eq!(flag("--start-at"), "$(START_AT)");
    assert_eq!(
        flag("--out"),
        "/results/$(RUN_ID)/shards/$(JOB_COMPLETION_INDEX)"
    );
    let claim = by_name(docs, "PersistentVolumeClaim", "rehearse-results");
    assert_eq!(claim["spec"]["accessModes"][0], "ReadWriteMany");

    // stage writes the run directory collect merges the N shards into and
    // report judges; all with the same start.
    let stage = containers(pod_spec(by_name(docs, "Job", "rehearse-stage")))[0];
    let a = args(stage);
    assert_eq!(a[0], "stage");
    let out = a[a.iter().position(|x| *x == "--out").unwrap() + 1];
    assert_eq!(out, "/results/$(RUN_ID)/run");
    assert!(a.windows(2).any(|w| w == ["--start-at", "$(START_AT)"]));
    let collect_job = by_name(docs, "Job", "rehearse-collect");
    let [collect, report] = containers(pod_spec(collect_job))[..] else {
        panic!("collect, then report");
    };
    let a = args(collect);
    assert_eq!(a[..2], ["collect", out]);
    let shards: Vec<String> = (0..n)
        .map(|i| format!("/results/$(RUN_ID)/shards/{i}"))
        .collect();
    assert_eq!(
        a[2..2 + n as usize],
        shards,
        "collect lists the N shard folders"
    );
    assert_eq!(args(report), ["report", out]);
}

/// Every rehearse command line of the manifests, with its `$(VAR)`s
/// replaced by the values the pod would have, is accepted by this
/// binary's flags (`--help` appended: parsed, not run).
#[test]
fn manifest_command_lines_parse_with_this_binary() {
    python_module("ruamel.yaml", "check-jsonschema");
    for (what, files) in manifest_sets() {
        let docs = yaml_docs(&files);
        let checked = parse_command_lines(&docs);
        let want: BTreeSet<String> = ["provider", "stage", "load", "collect", "report"]
            .map(String::from)
            .into();
        assert_eq!(checked, want, "{what}");
    }
}

/// A container's command line as its pod would run it: each `$(VAR)`
/// replaced by its env value (a plain value, or the run ConfigMap's key;
/// `JOB_COMPLETION_INDEX`: `index`).
pub(crate) fn pod_argv(c: &Value, run_config: &Value, index: u32) -> Vec<String> {
    let mut values: BTreeMap<String, String> = BTreeMap::new();
    values.insert("JOB_COMPLETION_INDEX".into(), index.to_string());
    for e in c["env"].as_array().into_iter().flatten() {
        let name = e["name"].as_str().unwrap().to_string();
        let value = match (&e["value"], &e["valueFrom"]["configMapKeyRef"]["key"]) {
            (Value::String(v), _) => v.clone(),
            (_, Value::String(k)) => run_config["data"][k].as_str().unwrap().to_string(),
            _ => continue,
        };
        values.entry(name).or_insert(value);
    }
    args(c)
        .iter()
        .map(|a| {
            values
                .iter()
                .fold(a.to_string(), |a, (k, v)| a.replace(&format!("$({k})"), v))
        })
        .collect()
}

/// Each rehearse command line of `docs`, its `$(VAR)`s replaced, parsed by
/// the binary; the subcommands checked.
fn parse_command_lines(docs: &[Value]) -> BTreeSet<String> {
    let run_config = by_name(docs, "ConfigMap", "rehearse-run");
    let mut checked = BTreeSet::new();
    for doc in docs {
        let spec = pod_spec(doc);
        for c in containers(spec)
            .into_iter()
            .filter(|c| c["args"].is_array())
        {
            if c["image"]
                .as_str()
                .is_some_and(|i| i.starts_with("busybox"))
            {
                continue;
            }
            let argv = pod_argv(c, run_config, 3);
            assert!(!argv.iter().any(|a| a.contains("$(")), "{argv:?}");
            let out = run(
                Command::new(common::rehearse_bin())
                    .args(&argv)
                    .arg("--help"),
                "the binary",
            );
            assert!(
                out.status.success(),
                "rehearse {argv:?}: {}",
                text(&out.stderr)
            );
            checked.insert(argv[0].clone());
        }
    }
    checked
}

// ---------------------------------------------------------------- CI files

fn check_jsonschema(schema: &str, file: &Path) -> Output {
    run(
        Command::new("python3")
            .args(["-m", "check_jsonschema", "--builtin-schema", schema])
            .arg(file),
        "python3 is needed",
    )
}

/// The GitHub workflow and the GitLab job are valid against their
/// schemas (shipped with check-jsonschema: no network), and the check does
/// catch a wrong key.
#[test]
fn ci_files_validate_against_their_schemas() {
    python_module("check_jsonschema", "check-jsonschema");
    let dir = scratch("bad-ci");
    for (file, schema, good, bad) in [
        (
            "github-workflow.yml",
            "vendor.github-workflows",
            "runs-on:",
            "runs_on:",
        ),
        (
            "gitlab-ci.yml",
            "vendor.gitlab-ci",
            "when: always",
            "when: sometimes",
        ),
    ] {
        let path = repo().join("deploy/ci").join(file);
        let out = check_jsonschema(schema, &path);
        assert!(
            out.status.success(),
            "{file}:\n{}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        let wrong = dir.join(file);
        let body = std::fs::read_to_string(&path).unwrap();
        assert!(body.contains(good));
        std::fs::write(&wrong, body.replacen(good, bad, 1)).unwrap();
        let out = check_jsonschema(schema, &wrong);
        assert!(!out.status.success(), "{file} with {bad:?} passed");
    }
}

/// A stand-in for `rehearse`: records its arguments, writes junit.xml
/// (and summary.md when asked) into the run directory, exits as told.
const STAND_IN: &str = r#"#!/bin/sh
printf '%s\n' "$@" > args.txt
mkdir -p "$OUT"
echo '<testsuites/>' > "$OUT/junit.xml"
if [ -n "$STAND_IN_SUMMARY" ]; then echo "$STAND_IN_SUMMARY" > "$OUT/summary.md"; fi
echo "checklist printed here"
exit "$STAND_IN_EXIT"
"#;

/// The rehearsal step of each CI file, as its CI runs it, against the
/// stand-in: exit 0 passes; every other exit code fails the job with that
/// code and its reason spelled out; the command line is the one the issue
/// names; junit.xml and report.html are published whatever the outcome.
#[test]
fn ci_jobs_fail_on_every_exit_code_but_0_and_say_why() {
    python_module("ruamel.yaml", "check-jsonschema");
    let ci = repo().join("deploy/ci");
    let docs = yaml_docs(&[ci.join("github-workflow.yml"), ci.join("gitlab-ci.yml")]);
    let (github, gitlab) = (&docs[0], &docs[1]);

    let job = &github["jobs"]["rehearse"];
    let steps = job["steps"].as_array().unwrap();
    let step = steps
        .iter()
        .find(|s| {
            s["run"]
                .as_str()
                .is_some_and(|r| r.contains("./rehearse run"))
        })
        .expect("a step runs ./rehearse run");
    assert_eq!(step["shell"], "bash");
    assert_eq!(
        job["env"]["REHEARSE_PROVIDER_TOKEN"],
        "${{ secrets.REHEARSE_PROVIDER_TOKEN }}"
    );
    let upload = steps
        .iter()
        .find(|s| {
            s["uses"]
                .as_str()
                .is_some_and(|u| u.starts_with("actions/upload-artifact"))
        })
        .expect("an upload step");
    assert_eq!(upload["if"], "always()");
    let paths = upload["with"]["path"].as_str().unwrap();
    assert!(paths.contains("rehearsal/junit.xml") && paths.contains("rehearsal/report.html"));

    let job = &gitlab["rehearse-staging"];
    let script = job["script"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|s| s.contains("./rehearse run"))
        .expect("a script item runs ./rehearse run");
    assert_eq!(job["artifacts"]["when"], "always");
    assert_eq!(job["artifacts"]["reports"]["junit"], "rehearsal/junit.xml");
    let paths: Vec<&str> = job["artifacts"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(paths.contains(&"rehearsal/junit.xml") && paths.contains(&"rehearsal/report.html"));

    // GitHub runs a bash step as `bash --noprofile --norc -eo pipefail`;
    // GitLab's shell stops at the first failing command (set -e).
    let shells: [(&str, &[&str], &str); 2] = [
        (
            "github",
            &["bash", "--noprofile", "--norc", "-eo", "pipefail"],
            step["run"].as_str().unwrap(),
        ),
        ("gitlab", &["sh", "-e"], script),
    ];
    let reasons = [
        (0, "every check passed"),
        (1, "a check failed (exit 1)"),
        (2, "bad input (exit 2)"),
        (3, "invalid run (exit 3)"),
        (130, "exit 130 (a signal or a crash)"),
    ];
    for (ci_name, shell, body) in shells {
        for (code, reason) in reasons {
            let dir = scratch(&format!("ci-{ci_name}-{code}"));
            std::fs::write(dir.join("job.sh"), body).unwrap();
            let rehearse = dir.join("rehearse");
            std::fs::write(&rehearse, STAND_IN).unwrap();
            let mut perms = std::fs::metadata(&rehearse).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            std::fs::set_permissions(&rehearse, perms).unwrap();
            let out = run(
                Command::new(shell[0])
                    .args(&shell[1..])
                    .arg("job.sh")
                    .current_dir(&dir)
                    .env("SCENARIO", "rehearse/staging.toml")
                    .env("STAGING_URL", "https://gateway.staging.test")
                    .env("PROVIDER_URL", "http://rehearse-provider.test:8080")
                    .env("OUT", "rehearsal")
                    .env("GITHUB_STEP_SUMMARY", dir.join("step-summary.md"))
                    .env("STAND_IN_EXIT", code.to_string())
                    .env(
                        "STAND_IN_SUMMARY",
                        if code == 1 { "| check | verdict |" } else { "" },
                    ),
                "bash and sh are needed",
            );
            let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert_eq!(
                out.status.code(),
                Some(code),
                "{ci_name}, exit {code}: {said}"
            );
            assert!(said.contains(reason), "{ci_name}, exit {code}: {said}");
            let argv = std::fs::read_to_string(dir.join("args.txt")).unwrap();
            assert_eq!(
                argv.lines().collect::<Vec<_>>(),
                [
                    "run",
                    "rehearse/staging.toml",
                    "--target",
                    "https://gateway.staging.test",
                    "--provider",
                    "http://rehearse-provider.test:8080",
                    "--allow-remote",
                    "--out",
                    "rehearsal",
                    "--no-progress"
                ],
                "{ci_name}"
            );
            let mut parsed = Command::new(common::rehearse_bin());
            let parsed = run(parsed.args(argv.lines()).arg("--help"), "the binary");
            assert!(
                parsed.status.success(),
                "{ci_name}: {}",
                text(&parsed.stderr)
            );
            if ci_name == "github" {
                let summary = std::fs::read_to_string(dir.join("step-summary.md")).unwrap();
                assert!(summary.contains(reason), "{summary}");
                // The run's summary file is appended when there is one.
                assert_eq!(
                    summary.contains("| check | verdict |"),
                    code == 1,
                    "{summary}"
                );
            }
        }
    }
}

/// A stand-in for `rehearse compare`: records its arguments, writes the
/// comparison's summary.md, exits as told.
const COMPARE_STAND_IN: &str = r#"#!/bin/sh
printf '%s\n' "$@" > args.txt
mkdir -p comparison
echo '| check | baseline |' > comparison/summary.md
exit "$STAND_IN_EXIT"
"#;

/// The comparison with the main branch's last run, in each CI file: the
/// command line (one the binary parses), a regression's exit 1 failing
/// the job with its reason, 0 passing, GitHub's summary getting the
/// comparison's table; the baseline is kept (GitHub: uploaded from main;
/// GitLab: the whole run directory in the artifacts).
#[test]
fn ci_jobs_compare_with_the_main_branchs_last_run() {
    python_module("ruamel.yaml", "check-jsonschema");
    let ci = repo().join("deploy/ci");
    let docs = yaml_docs(&[ci.join("github-workflow.yml"), ci.join("gitlab-ci.yml")]);
    let (github, gitlab) = (&docs[0], &docs[1]);
    let steps = github["jobs"]["rehearse"]["steps"].as_array().unwrap();
    let step = steps
        .iter()
        .find(|s| {
            s["run"]
                .as_str()
                .is_some_and(|r| r.contains("./rehearse compare"))
        })
        .expect("a step runs ./rehearse compare");
    assert!(step["if"].as_str().unwrap().contains("baseline/run.json"));
    let keep = steps
        .iter()
        .find(|s| s["with"]["name"] == "rehearse-baseline")
        .expect("a step uploads the baseline");
    assert!(keep["if"].as_str().unwrap().contains("refs/heads/main"));
    assert!(steps.iter().any(|s| s["run"]
        .as_str()
        .is_some_and(|r| r.contains("--name rehearse-baseline"))));
    let job = &gitlab["rehearse-baseline"];
    let script = job["script"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .find(|s| s.contains("./rehearse compare"))
        .expect("a script item runs ./rehearse compare");
    assert!(gitlab["rehearse-staging"]["artifacts"]["paths"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p == "rehearsal/"));
    let cases: [(&str, &[&str], &str, &str); 2] = [
        (
            "github",
            &["bash", "--noprofile", "--norc", "-eo", "pipefail"],
            step["run"].as_str().unwrap(),
            "baseline",
        ),
        ("gitlab", &["sh", "-e"], script, "baseline/rehearsal"),
    ];
    for (ci_name, shell, body, baseline) in cases {
        for (code, reason) in [(0, "no figure got worse"), (1, "worse than the")] {
            let dir = scratch(&format!("ci-compare-{ci_name}-{code}"));
            std::fs::write(dir.join("job.sh"), body).unwrap();
            let rehearse = dir.join("rehearse");
            std::fs::write(&rehearse, COMPARE_STAND_IN).unwrap();
            let mut perms = std::fs::metadata(&rehearse).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            std::fs::set_permissions(&rehearse, perms).unwrap();
            let out = run(
                Command::new(shell[0])
                    .args(&shell[1..])
                    .arg("job.sh")
                    .current_dir(&dir)
                    .env("OUT", "rehearsal")
                    .env("GITHUB_STEP_SUMMARY", dir.join("step-summary.md"))
                    .env("STAND_IN_EXIT", code.to_string()),
                "bash and sh are needed",
            );
            let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
            assert_eq!(
                out.status.code(),
                Some(code),
                "{ci_name}, exit {code}: {said}"
            );
            let argv = std::fs::read_to_string(dir.join("args.txt")).unwrap();
            assert_eq!(
                argv.lines().collect::<Vec<_>>(),
                [
                    "compare",
                    baseline,
                    "rehearsal",
                    "--fail-on-regression",
                    "--out",
                    "comparison",
                    "--no-progress"
                ],
                "{ci_name}"
            );
            let mut parsed = Command::new(common::rehearse_bin());
            let parsed = run(parsed.args(argv.lines()).arg("--help"), "the binary");
            assert!(
                parsed.status.success(),
                "{ci_name}: {}",
                text(&parsed.stderr)
            );
            if ci_name == "github" {
                let summary = std::fs::read_to_string(dir.join("step-summary.md")).unwrap();
                assert!(
                    summary.contains(reason) && summary.contains("| check | baseline |"),
                    "{summary}"
                );
            } else {
                assert!(said.contains(reason), "{ci_name}, exit {code}: {said}");
            }
        }
    }
}

// ---------------------------------------------------------------- the image

fn image() -> String {
    std::env::var("REHEARSE_IMAGE").unwrap_or_else(|_| DEFAULT_IMAGE.to_string())
}

/// Fails unless podman, the image and root (for chroot) are here, saying
/// how to get them.
fn require_image(image: &str) {
    let build = "build it with `bash deploy/image/build.sh` (.ci/run does, before cargo test)";
    let podman = Command::new("podman").arg("--version").output();
    assert!(
        podman.is_ok_and(|o| o.status.success()),
        "podman is not installed: `apt-get install podman`, then {build}"
    );
    let exists = run(
        Command::new("podman").args(["image", "exists", image]),
        build,
    );
    assert!(
        exists.status.success(),
        "the image {image} is missing{}: {build}",
        if in_ci() { " (CI=true)" } else { "" }
    );
    let uid = run(Command::new("id").arg("-u"), "id is needed");
    assert_eq!(
        text(&uid.stdout).trim(),
        "0",
        "running the image's binary from its extracted root needs chroot, so root"
    );
}

/// The image's root file system, exported from a created (never started)
/// container and unpacked with its owners.
fn export_root(image: &str, into: &Path) -> PathBuf {
    let created = run(Command::new("podman").args(["create", image]), "podman");
    assert!(created.status.success(), "{}", text(&created.stderr));
    let id = text(&created.stdout).trim().to_string();
    let tar = into.join("root.tar");
    let exported = run(
        Command::new("podman")
            .args(["export", "-o"])
            .arg(&tar)
            .arg(&id),
        "podman",
    );
    let _ = Command::new("podman").args(["rm", &id]).output();
    assert!(exported.status.success(), "{}", text(&exported.stderr));
    let root = into.join("root");
    std::fs::create_dir_all(&root).unwrap();
    let unpacked = run(
        Command::new("tar")
            .args(["--numeric-owner", "--same-owner", "-xf"])
            .arg(&tar)
            .arg("-C")
            .arg(&root),
        "tar is needed",
    );
    assert!(unpacked.status.success(), "{}", text(&unpacked.stderr));
    let _ = std::fs::remove_file(&tar);
    root
}

/// `/rehearse ARGS` inside `root`, as the image's user, with the image's
/// environment and nothing of this process's.
fn in_image(root: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("chroot");
    cmd.arg(format!("--userspec={IMAGE_USER}"))
        .arg(root)
        .arg("/rehearse")
        .args(args)
        .env_clear()
        // The image's own PATH (podman's default; nothing is on it), by
        // which chroot itself is found here.
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("HOME", "/work")
        .env("TMPDIR", "/tmp");
    cmd
}

fn pixels_darker_than(png: &[u8], level: u8, rows: std::ops::Range<u32>) -> usize {
    let pixmap = resvg::tiny_skia::Pixmap::decode_png(png).unwrap();
    let width = pixmap.width();
    pixmap
        .pixels()
        .iter()
        .enumerate()
        .filter(|(i, _)| rows.contains(&(*i as u32 / width)))
        .filter(|(_, p)| p.red().max(p.green()).max(p.blue()) < level)
        .count()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Kills the provider this test started, however the test ends.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The image as built: scratch (no shell, no libraries), a numeric user,
/// `/work` writable by it, `rehearse` the entrypoint; and its binary,
/// run from the exported root with chroot, answers `--version`, plans a
/// shipped scenario, finds a host by the root's own `/etc/hosts` (the
/// load generator's name lookup without NSS, against a fake provider also
/// run from the image) and draws a chart with its labels.
#[test]
fn the_image_runs_from_its_extracted_root() {
    let started = Instant::now();
    let image = image();
    require_image(&image);

    let inspect = run(
        Command::new("podman").args(["image", "inspect", "--format", "{{json .Config}}", &image]),
        "podman",
    );
    assert!(inspect.status.success(), "{}", text(&inspect.stderr));
    let config: Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(config["User"], IMAGE_USER);
    assert_eq!(config["Entrypoint"], serde_json::json!(["/rehearse"]));
    assert_eq!(config["WorkingDir"], "/work");
    let revision = config["Labels"]["org.opencontainers.image.revision"].as_str();
    let head = run(
        Command::new("git")
            .args(["rev-parse", "HEAD"])
            .current_dir(repo()),
        "git",
    );
    if revision != Some(text(&head.stdout).trim()) {
        eprintln!(
            "note: {image} was built at revision {revision:?}, not at HEAD: rebuild it with \
             `bash deploy/image/build.sh` to test this tree's binary"
        );
    }

    let dir = scratch("image");
    let root = export_root(&image, &dir);
    for absent in ["bin", "lib", "lib64", "usr", "sbin"] {
        assert!(!root.join(absent).exists(), "/{absent} in a scratch image");
    }
    let tmp = std::fs::metadata(root.join("tmp")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&tmp.permissions()) & 0o7777,
        0o1777,
        "/tmp is open to all, sticky"
    );
    let work = std::fs::metadata(root.join("work")).unwrap();
    assert_eq!(
        (
            std::os::unix::fs::MetadataExt::uid(&work),
            std::os::unix::fs::MetadataExt::gid(&work)
        ),
        (65532, 65532),
        "/work belongs to the image's user"
    );

    // --version.
    let out = run(&mut in_image(&root, &["--version"]), "chroot is needed");
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("rehearse {}", env!("CARGO_PKG_VERSION"))
    );

    // A plan of a shipped scenario, written by the image's user in /work.
    std::fs::copy(
        repo().join("scenarios/ci-smoke.toml"),
        root.join("work/ci-smoke.toml"),
    )
    .unwrap();
    let out = run(
        &mut in_image(&root, &["plan", "/work/ci-smoke.toml", "--json"]),
        "chroot",
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let plan: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(plan["scenario"], "ci-smoke");
    assert!(
        plan["phases"].as_array().is_some_and(|p| p.len() >= 2),
        "{plan}"
    );

    look_up_a_name_from_the_hosts_file(&root);
    draw_a_chart_with_labels(&root);

    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(60),
        "the image test took {took:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fake provider from the image listens on loopback; the root's
/// `/etc/hosts` (written here: a scratch image has none, Kubernetes
/// mounts one) names it; `rehearse load` from the image reaches it by
/// that name, through its own resolver (`loadgen::resolve`: no NSS, no
/// `nsswitch.conf`, whatever glibc the binary was linked with). A name in
/// no hosts file and no DNS is a clear error.
fn look_up_a_name_from_the_hosts_file(root: &Path) {
    // As in a Kubernetes pod: a Service's short name, completed by the
    // search domains of resolv.conf, found in the hosts file (the name
    // server, on a closed loopback port, answers nothing).
    let name = "fake-provider";
    std::fs::write(
        root.join("etc/hosts"),
        "127.0.0.1 localhost\n127.0.0.1 fake-provider.rehearse.test\n",
    )
    .unwrap();
    std::fs::write(
        root.join("etc/resolv.conf"),
        "nameserver 127.0.0.1\nsearch rehearse.test\noptions ndots:5 timeout:1 attempts:1\n",
    )
    .unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let provider = in_image(
        root,
        &[
            "provider",
            "--listen",
            &listen,
            "--records",
            "/work/provider.jsonl",
        ],
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .expect("chroot");
    let _provider = Child(provider);
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&listen).is_err() {
        assert!(
            Instant::now() < deadline,
            "the provider did not listen on {listen}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    std::fs::write(
        root.join("work/lookup.toml"),
        "[scenario]\nname = \"lookup\"\n\n[load]\nseed = 3\npatience = { fixed = \"5s\" }\n\
         [[load.phases]]\nduration = \"2s\"\nrate = 10\n",
    )
    .unwrap();
    let target = format!("http://{name}:{port}");
    let load = |target: &str, out: &str| {
        run(
            &mut in_image(
                root,
                &[
                    "load",
                    "/work/lookup.toml",
                    "--target",
                    target,
                    "--out",
                    out,
                    "--no-progress",
                ],
            ),
            "chroot",
        )
    };
    let out = load(&target, "/work/load");
    let said = format!("{}{}", text(&out.stdout), text(&out.stderr));
    // 3: the schedule slipped on a busy machine; the records still count.
    assert!(matches!(out.status.code(), Some(0 | 3)), "{said}");
    let records = std::fs::read_to_string(root.join("work/load/client.jsonl")).unwrap();
    let outcomes: BTreeMap<String, usize> = records.lines().fold(BTreeMap::new(), |mut m, line| {
        let r: Value = serde_json::from_str(line).unwrap();
        *m.entry(r["outcome"].as_str().unwrap().to_string())
            .or_default() += 1;
        m
    });
    assert_eq!(outcomes.get("ok"), Some(&20), "{outcomes:?}\n{said}");
    // The provider writes its records on a 10 ms period (within 100 ms of
    // a call's end): the last may land a moment after the client's answer.
    let recorded = || {
        std::fs::read_to_string(root.join("work/provider.jsonl"))
            .unwrap()
            .lines()
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while recorded() < 20 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(recorded(), 20, "the provider answered them");

    // Without a name server (no resolv.conf), a name the hosts file lacks
    // is refused at once, by name.
    std::fs::remove_file(root.join("etc/resolv.conf")).unwrap();
    let out = load(&format!("http://nowhere:{port}"), "/work/nowhere");
    let said = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{said}");
    assert!(said.contains("cannot resolve `nowhere`"), "{said}");
}

/// `rehearse report` from the image on a small saved run: the PNG charts
/// are written, and their titles are drawn (the title band holds text
/// alone, dark pixels only where there are glyphs: none without a font).
fn draw_a_chart_with_labels(root: &Path) {
    let run_dir = root.join("work/golden");
    std::fs::create_dir_all(&run_dir).unwrap();
    let golden = repo().join("harness/tests/golden/pool-demo-bounded");
    for entry in std::fs::read_dir(&golden).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("expected-")
        {
            std::fs::copy(&path, run_dir.join(path.file_name().unwrap())).unwrap();
        }
    }
    let chown = run(
        Command::new("chown").args(["-R", IMAGE_USER]).arg(&run_dir),
        "chown",
    );
    assert!(chown.status.success());
    let out = run(&mut in_image(root, &["report", "/work/golden"]), "chroot");
    // A judged run's exit code is its verdict: 0, or 1 for a failed check.
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "{}",
        text(&out.stderr)
    );
    for chart in [
        "chart-traffic.png",
        "chart-requests.png",
        "chart-latency.png",
        "chart-memory.png",
        "chart-retry-after.png",
        "chart-distribution.png",
    ] {
        let png = std::fs::read(run_dir.join(chart)).unwrap_or_else(|e| panic!("{chart}: {e}"));
        // The title, bold dark text in the top 40 rows (of the 1.5x PNG).
        let title = pixels_darker_than(&png, 100, 0..40);
        assert!(
            title > 300,
            "{chart}: {title} dark pixels where its title is drawn"
        );
    }
}
