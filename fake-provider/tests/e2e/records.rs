//! The record file: written as calls end, read while serving (the file
//! itself, `?after=N`), rotated on a new run, capped, whole at shutdown.

use std::path::{Path, PathBuf};

use fake_provider::{RecordsWritten, RECORDS_NEXT_HEADER};

use super::*;

/// A fresh directory for one test's files.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!(
            "rehearse-records-e2e-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn file(&self) -> PathBuf {
        self.0.join(wire::files::PROVIDER_RECORDS)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn numbered(path: &Path, k: usize) -> PathBuf {
    PathBuf::from(format!("{}.{k}", path.display()))
}

async fn start_recording(toml: &str, file: &Path, max_bytes: Option<u64>) -> ProviderHandle {
    let config = ProviderConfig::from_toml(toml, "test.toml").expect("test config is valid");
    let mut provider = FakeProvider::new(config).record_to(file);
    if let Some(max) = max_bytes {
        provider = provider.records_max_bytes(max);
    }
    provider
        .bind("127.0.0.1:0")
        .await
        .expect("bind 127.0.0.1:0")
}

/// `n` calls, `width` at a time, with ids `{prefix}{i}`.
async fn calls(p: &ProviderHandle, prefix: &str, n: usize, width: usize) {
    let client = client();
    let url = format!("{}/v1/chat/completions", p.base_url());
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..width {
        let (client, url, prefix) = (client.clone(), url.clone(), prefix.to_string());
        tasks.spawn(async move {
            for i in (w..n).step_by(width) {
                let resp = client
                    .post(&url)
                    .header("x-request-id", format!("{prefix}{i}"))
                    .json(&chat("hi", 4))
                    .send()
                    .await
                    .expect("request sent");
                assert_eq!(resp.status(), 200);
                resp.bytes().await.expect("the body");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
}

/// The file's whole lines, each checked to be a record.
fn file_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(
        text.is_empty() || text.ends_with('\n'),
        "the file ends mid-line"
    );
    text.lines()
        .map(|l| {
            serde_json::from_str::<ProviderRecord>(l)
                .unwrap_or_else(|e| panic!("not a record ({e}): {l:?}"));
            l.to_string()
        })
        .collect()
}

/// `GET /_fake/records[?after=N]`: status, the next position, the body.
async fn read_after(p: &ProviderHandle, after: Option<&str>) -> (u16, Option<u64>, String) {
    let query = after.map(|a| format!("?after={a}")).unwrap_or_default();
    let resp = client()
        .get(format!("{}/_fake/records{query}", p.base_url()))
        .send()
        .await
        .unwrap();
    let next = resp
        .headers()
        .get(RECORDS_NEXT_HEADER)
        .map(|v| v.to_str().unwrap().parse().unwrap());
    (resp.status().as_u16(), next, resp.text().await.unwrap())
}

#[tokio::test]
async fn records_are_written_as_calls_end_and_read_by_a_second_reader_while_serving() {
    let dir = Dir::new("live");
    let p = start_recording("[latency]\nttft = { fixed = \"1s\" }\n", &dir.file(), None).await;
    assert_eq!(p.records_path(), dir.file());

    // A slow call still open while quicker ones (other dialect) end.
    let slow = tokio::spawn({
        let url = format!("{}/v1/chat/completions", p.base_url());
        async move {
            client()
                .post(url)
                .header("x-request-id", "slow")
                .json(&chat("hi", 4))
                .send()
                .await
                .unwrap()
                .status()
        }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    p.set_overrides(Some(
        serde_json::from_value(json!({"latency": {"ttft": {"fixed": "0ms"}}})).unwrap(),
    ));
    calls(&p, "quick", 3, 1).await;
    let written = p.sync_records().await;
    assert_eq!(written.records, 3, "the slow call is not over yet");
    // A second reader, the file itself, while the provider serves.
    let lines = file_lines(&dir.file());
    assert_eq!(lines.len(), 3);
    assert_eq!(written.bytes, std::fs::metadata(dir.file()).unwrap().len());
    assert!(lines.iter().all(|l| l.contains("\"quick")));

    assert_eq!(slow.await.unwrap(), 200);
    let written = p.sync_records().await;
    assert_eq!(written.records, 4);
    let lines = file_lines(&dir.file());
    assert!(lines[3].contains("\"id\":\"slow\""), "{}", lines[3]);
    // records() reads the same file back.
    let ids: Vec<String> = p.records().into_iter().map(|r| r.id).collect();
    assert_eq!(ids, ["quick0", "quick1", "quick2", "slow"]);
    let stats = p.stats();
    assert_eq!((stats.records_written, stats.records_dropped), (4, 0));
    let end = p.shutdown().await;
    assert_eq!(end, written);
    assert_eq!(file_lines(&dir.file()).len(), 4, "kept after shutdown");
}

/// A record reaches the file (and `/_fake/stats`) on the writer's own
/// period, without any reader asking for a sync: the writer takes the
/// lines every 10 ms while calls end; 2 s is for a busy machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_is_in_the_file_soon_after_its_call_without_a_sync() {
    let dir = Dir::new("soon");
    let p = start_recording("", &dir.file(), None).await;
    for round in 1..=3u64 {
        calls(&p, &format!("soon{round}-"), 5, 1).await;
        let ended = Instant::now();
        let written = loop {
            let stats: Value = client()
                .get(format!("{}/_fake/stats", p.base_url()))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let written = stats["records_written"].as_u64().unwrap();
            if written == 5 * round || ended.elapsed() > Duration::from_secs(2) {
                break written;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        assert_eq!(
            written,
            5 * round,
            "records written 2 s after the calls ended"
        );
        assert_eq!(file_lines(&dir.file()).len() as u64, 5 * round);
        // A pause long enough for the writer to fall asleep: the next
        // round's first line wakes it.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    p.shutdown().await;
}

#[tokio::test]
async fn after_n_gives_exactly_the_lines_after_n_and_where_to_ask_next() {
    let dir = Dir::new("after");
    let p = start_recording("", &dir.file(), None).await;
    // Past two strides of the writer's index (256 lines), out of arrival
    // order (8 connections at once).
    calls(&p, "a", 600, 8).await;
    // The writer may still hold the last few; a reader of the file syncs.
    assert_eq!(p.sync_records().await.records, 600);
    let lines = file_lines(&dir.file());
    assert_eq!(lines.len(), 600);

    let (status, next, body) = read_after(&p, None).await;
    assert_eq!((status, next), (200, Some(600)));
    assert_eq!(body.lines().collect::<Vec<_>>(), lines);
    for n in [0usize, 1, 255, 256, 257, 511, 512, 599] {
        let (status, next, body) = read_after(&p, Some(&n.to_string())).await;
        assert_eq!((status, next), (200, Some(600)), "after={n}");
        assert_eq!(body.lines().collect::<Vec<_>>(), lines[n..], "after={n}");
    }
    let (status, next, body) = read_after(&p, Some("600")).await;
    assert_eq!((status, next, body.as_str()), (200, Some(600), ""));

    // A poller asks from where it was told, and sees just the new ones.
    calls(&p, "b", 10, 2).await;
    let (status, next, body) = read_after(&p, Some("600")).await;
    assert_eq!((status, next), (200, Some(610)));
    assert_eq!(body.lines().count(), 10);
    assert!(body.lines().all(|l| l.contains("\"id\":\"b")), "{body}");

    for bad in ["611", "x", "-1", "", "1.5"] {
        let (status, next, body) = read_after(&p, Some(bad)).await;
        assert_eq!((status, next), (400, None), "after={bad}: {body}");
        let v: Value = serde_json::from_str(&body).expect("a JSON error body");
        assert!(v["error"].is_string(), "{v}");
    }
    p.shutdown().await;
}

/// Five thousand records (over a megabyte, many reads of the file) come back
/// whole, streamed without a length. (Twenty thousand took 12 s of real
/// calls on a shared machine and showed nothing more.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_records_are_streamed_chunked() {
    let p = start("").await;
    calls(&p, "r", 5_000, 32).await;
    let resp = client()
        .get(format!("{}/_fake/records", p.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()[RECORDS_NEXT_HEADER], "5000");
    assert_eq!(resp.headers()["transfer-encoding"], "chunked");
    assert!(resp.headers().get("content-length").is_none());
    let body = resp.text().await.unwrap();
    let mut ids: Vec<String> = body
        .lines()
        .map(|l| serde_json::from_str::<ProviderRecord>(l).unwrap().id)
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 5_000);
    p.shutdown().await;
}

#[tokio::test]
async fn a_new_run_rotates_earlier_files_and_the_cap_deletes_the_oldest_first() {
    let dir = Dir::new("rotate");
    let file = dir.file();
    std::fs::write(&file, "run 3\n".repeat(500)).unwrap(); // 3,000 bytes
    std::fs::write(numbered(&file, 1), "run 2\n".repeat(500)).unwrap();
    std::fs::write(numbered(&file, 2), "run 1\n".repeat(300)).unwrap(); // 1,800
                                                                        // Earlier runs hold 7,800 bytes; the cap leaves room for 6,000 and
                                                                        // this run's file: the oldest run goes at once.
    let cap = 7_000;
    let p = start_recording("", &file, Some(cap)).await;
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 0);
    let kept = |k: usize| std::fs::read_to_string(numbered(&file, k)).ok();
    assert_eq!(kept(1).unwrap(), "run 3\n".repeat(500));
    assert_eq!(kept(2).unwrap(), "run 2\n".repeat(500));
    assert_eq!(kept(3), None, "the oldest run went first");

    // This run grows: an earlier run's file is deleted, oldest first, just
    // when the total would pass the cap.
    let mut made = 0;
    let mut last = RecordsWritten::default();
    while p.stats().records_dropped == 0 {
        calls(&p, "c", 1, 1).await;
        made += 1;
        last = p.sync_records().await;
        let size = last.bytes;
        assert_eq!(kept(2).is_some(), size + 6_000 <= cap, "{size} bytes");
        assert_eq!(kept(1).is_some(), size + 3_000 <= cap, "{size} bytes");
        assert!(made < 100, "the cap never struck");
    }
    // This run's file alone would pass the cap: later records are dropped
    // and counted, what is written stays whole.
    calls(&p, "d", 5, 1).await;
    let written = p.sync_records().await;
    assert_eq!(written, last, "nothing written past the cap");
    let stats = p.stats();
    assert_eq!(stats.records_written, written.records);
    assert_eq!(stats.records_dropped, 6);
    assert_eq!(written.records + 6, made + 5);
    let (_, next, _) = read_after(&p, Some("0")).await;
    assert_eq!(next, Some(written.records));
    let metrics = client()
        .get(format!("{}/metrics", p.base_url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("fake_provider_records_dropped_total 6"),
        "{metrics}"
    );
    p.shutdown().await;
    let lines = file_lines(&file);
    assert_eq!(lines.len() as u64, written.records);
    assert!(std::fs::metadata(&file).unwrap().len() <= cap);
    assert_eq!((kept(1), kept(2)), (None, None));

    // The next run rotates this one, and starts writing again.
    let p = start_recording("", &file, Some(cap)).await;
    assert_eq!(file_lines(&numbered(&file, 1)), lines);
    calls(&p, "e", 1, 1).await;
    assert_eq!(p.sync_records().await.records, 1);
    p.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_records_open_calls_and_leaves_whole_lines() {
    let dir = Dir::new("shutdown");
    let p = start_recording("", &dir.file(), None).await;
    calls(&p, "done", 200, 8).await;
    // Streams still going (5 s each) when the provider stops.
    p.set_overrides(Some(
        serde_json::from_value(json!({
            "completion_tokens": {"fixed": 50},
            "latency": {"per_token": {"fixed": "100ms"}},
        }))
        .unwrap(),
    ));
    let mut open = Vec::new();
    for i in 0..50 {
        let mut body = chat("hi", 100);
        body["stream"] = json!(true);
        let req = client()
            .post(format!("{}/v1/chat/completions", p.base_url()))
            .header("x-request-id", format!("open{i}"))
            .json(&body);
        open.push(tokio::spawn(async move {
            if let Ok(resp) = req.send().await {
                let _ = resp.bytes().await;
            }
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while p.stats().in_flight < 50 {
        assert!(Instant::now() < deadline, "the streams did not start");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let received = p.stats().received;
    let started = Instant::now();
    let written = p.shutdown().await;
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(written.records, received);
    let lines = file_lines(&dir.file());
    assert_eq!(lines.len() as u64, received);
    assert_eq!(written.bytes, std::fs::metadata(dir.file()).unwrap().len());
    let hung_up = lines
        .iter()
        .map(|l| serde_json::from_str::<ProviderRecord>(l).unwrap())
        .filter(|r| r.id.starts_with("open"))
        .inspect(|r| assert!(r.hung_up_us.is_some(), "{r:?}"))
        .count();
    assert_eq!(hung_up, 50);
    for task in open {
        let _ = task.await;
    }
}

#[tokio::test]
async fn without_record_to_a_temporary_file_is_used_and_removed() {
    let p = start("").await;
    let path = p.records_path().to_path_buf();
    assert!(path.starts_with(std::env::temp_dir()), "{}", path.display());
    calls(&p, "t", 2, 1).await;
    p.sync_records().await;
    assert_eq!(file_lines(&path).len(), 2);
    p.shutdown().await;
    assert!(!path.exists());
    assert!(!path.parent().unwrap().exists());

    // Dropped without a shutdown: removed at once all the same.
    let p = start("").await;
    let other = p.records_path().to_path_buf();
    assert_ne!(other, path, "each provider has a file of its own");
    calls(&p, "u", 1, 1).await;
    drop(p);
    assert!(!other.exists());
    assert!(!other.parent().unwrap().exists());
}

/// A named provider's lines carry its name; a quota refusal's carry the
/// Retry-After it answered with, as its headers said it; the default
/// provider's answered calls carry neither (their lines are as before).
#[tokio::test]
async fn a_named_providers_records_carry_its_name_and_the_retry_after_it_sent() {
    let dir = Dir::new("named");
    let text = "name = \"east-1\"\n[quota]\nrequests_per_minute = 60\nwindow = \"1s\"\n";
    let config = ProviderConfig::from_toml(text, "named.toml").unwrap();
    let p = FakeProvider::new(config)
        .record_to(dir.file())
        .bind("127.0.0.1:0")
        .await
        .unwrap();
    let first = post(&p, "/v1/chat/completions", &chat("[rehearse:id=q1]", 4)).await;
    assert_eq!(first.status(), 200);
    let refused = post(&p, "/v1/chat/completions", &chat("[rehearse:id=q2]", 4)).await;
    assert_eq!(refused.status(), 429);
    let header = |n: &str| {
        refused.headers()[n]
            .to_str()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let (secs, ms) = (header("retry-after"), header("retry-after-ms"));
    // Its metrics carry its name, beside their own labels.
    let metrics = client()
        .get(format!("{}/metrics", p.base_url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("fake_provider_calls_received_total{provider=\"east-1\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains(
            "fake_provider_calls_finished_total{provider=\"east-1\",outcome=\"quota_exceeded\"} 1"
        ),
        "{metrics}"
    );
    p.shutdown().await;
    let text = std::fs::read_to_string(dir.file()).unwrap();
    let records: Vec<ProviderRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(
        records.iter().all(|r| r.provider_name() == "east-1"),
        "{text}"
    );
    let q2 = records.iter().find(|r| r.id == "q2").unwrap();
    assert_eq!(
        (q2.retry_after_s, q2.retry_after_ms),
        (Some(secs), Some(ms)),
        "{text}"
    );
    let q1 = records.iter().find(|r| r.id == "q1").unwrap();
    assert_eq!((q1.retry_after_s, q1.retry_after_ms), (None, None));
    assert!(
        text.lines()
            .all(|l| l.ends_with("\"provider\":\"east-1\"}")),
        "{text}"
    );
    // The default provider: no name written.
    let p = start("").await;
    post(&p, "/v1/chat/completions", &chat("[rehearse:id=d1]", 4)).await;
    assert_eq!(p.sync_records().await.records, 1);
    let line = std::fs::read_to_string(p.records_path()).unwrap();
    assert!(
        !line.contains("provider") && !line.contains("retry_after"),
        "{line}"
    );
    p.shutdown().await;
}
