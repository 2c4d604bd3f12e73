//! A record as a line of `provider.jsonl`: the fields in the order
//! `wire::ProviderRecord` declares them, written one by one; each string
//! quoted and escaped as serde_json does it (`wire::json`), each number
//! by itoa.
//!
//! Why not `serde_json::to_writer(record)`: its derived serializer cost
//! about 5,400 instructions a record (callgrind), an eighth of a
//! zero-latency call's whole cost, most of it in the generic map
//! machinery. This writes the same bytes (the test below compares the
//! two on every outcome, dialect and API, on strings that need escaping and on
//! the edges of each number) in a fraction of that. `wire` stays the one
//! definition of the record: a field added there without one here fails
//! the test.

use wire::ProviderRecord;

use wire::json::{push_opt, push_str, push_u64};

/// Appends `r` as one JSON object and a newline, exactly as
/// `serde_json::to_writer` then `\n` would, its `provider` being
/// `provider` when the record names none: the record file's provider's
/// name, given once for all its calls rather than copied into each
/// (`None` for the provider named `default`); and its `run_id` being
/// `run_id` when the record's is empty (the run's, likewise).
pub(super) fn push_record(
    out: &mut Vec<u8>,
    r: &ProviderRecord,
    run_id: &str,
    provider: Option<&str>,
) {
    out.extend_from_slice(b"{\"id\":");
    push_str(out, &r.id);
    // Skipped when empty, as the record's serde attribute says.
    let run_id = if r.run_id.is_empty() {
        run_id
    } else {
        &r.run_id
    };
    if !run_id.is_empty() {
        out.extend_from_slice(b",\"run_id\":");
        push_str(out, run_id);
    }
    out.extend_from_slice(b",\"seq\":");
    push_u64(out, r.seq);
    // Dialect and outcome names are lowercase ASCII: nothing to escape.
    out.extend_from_slice(b",\"dialect\":\"");
    out.extend_from_slice(r.dialect.as_str().as_bytes());
    out.extend_from_slice(b"\",\"api\":\"");
    out.extend_from_slice(r.api.as_str().as_bytes());
    out.extend_from_slice(b"\",\"model\":");
    push_str(out, &r.model);
    out.extend_from_slice(if r.stream {
        b",\"stream\":true"
    } else {
        b",\"stream\":false"
    });
    out.extend_from_slice(b",\"received_us\":");
    push_u64(out, r.received_us);
    out.extend_from_slice(b",\"admitted_us\":");
    push_opt(out, r.admitted_us);
    out.extend_from_slice(b",\"first_byte_us\":");
    push_opt(out, r.first_byte_us);
    out.extend_from_slice(b",\"finished_us\":");
    push_opt(out, r.finished_us);
    out.extend_from_slice(b",\"hung_up_us\":");
    push_opt(out, r.hung_up_us);
    out.extend_from_slice(b",\"prompt_tokens\":");
    push_u64(out, u64::from(r.prompt_tokens));
    out.extend_from_slice(b",\"max_tokens\":");
    push_opt(out, r.max_tokens.map(u64::from));
    out.extend_from_slice(b",\"completion_tokens\":");
    push_u64(out, u64::from(r.completion_tokens));
    out.extend_from_slice(b",\"reserved_tokens\":");
    push_u64(out, r.reserved_tokens);
    out.extend_from_slice(b",\"phase\":");
    push_str(out, &r.phase);
    out.extend_from_slice(b",\"outcome\":\"");
    out.extend_from_slice(r.outcome.as_str().as_bytes());
    out.extend_from_slice(b"\",\"status\":");
    push_u64(out, u64::from(r.status));
    // Each skipped when None, as the record's serde attributes say.
    if let Some(s) = r.retry_after_s {
        out.extend_from_slice(b",\"retry_after_s\":");
        push_u64(out, s);
    }
    if let Some(ms) = r.retry_after_ms {
        out.extend_from_slice(b",\"retry_after_ms\":");
        push_u64(out, ms);
    }
    if let Some(name) = r.provider.as_deref().or(provider) {
        out.extend_from_slice(b",\"provider\":");
        push_str(out, name);
    }
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::{Api, Dialect, ProviderOutcome};

    fn serde_line(r: &ProviderRecord) -> String {
        let mut v = serde_json::to_vec(r).unwrap();
        v.push(b'\n');
        String::from_utf8(v).unwrap()
    }

    fn ours(r: &ProviderRecord) -> String {
        let mut v = Vec::new();
        push_record(&mut v, r, "", None);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn the_files_provider_name_is_written_as_the_records_own_would_be() {
        let r: ProviderRecord = serde_json::from_value(serde_json::json!({
            "id": "r1", "received_us": 1, "admitted_us": null,
            "first_byte_us": null, "finished_us": 2, "hung_up_us": null,
            "prompt_tokens": 1, "completion_tokens": 0, "phase": "base",
            "outcome": "quota_exceeded", "status": 429,
            "retry_after_s": 2, "retry_after_ms": 1500,
        }))
        .unwrap();
        let mut line = Vec::new();
        push_record(&mut line, &r, "", Some("east-1"));
        let named = ProviderRecord {
            provider: Some("east-1".into()),
            ..r.clone()
        };
        assert_eq!(String::from_utf8(line).unwrap(), serde_line(&named));
        let back: ProviderRecord = serde_json::from_str(&serde_line(&named)).unwrap();
        assert_eq!(back.provider_name(), "east-1");
        assert_eq!(
            (back.retry_after_s, back.retry_after_ms),
            (Some(2), Some(1500))
        );
        // The run's id, given, is written as the record's own would be.
        let mut line = Vec::new();
        push_record(&mut line, &r, "run-7-0", Some("east-1"));
        let with_run = ProviderRecord {
            run_id: "run-7-0".into(),
            ..named.clone()
        };
        assert_eq!(String::from_utf8(line).unwrap(), serde_line(&with_run));
        let mut line = Vec::new();
        push_record(&mut line, &with_run, "other", None);
        assert_eq!(String::from_utf8(line).unwrap(), serde_line(&with_run));
        // The default provider's lines are those of before: no field.
        let mut line = Vec::new();
        push_record(&mut line, &r, "", None);
        let line = String::from_utf8(line).unwrap();
        assert!(!line.contains("provider"), "{line}");
        assert!(
            line.ends_with("\"status\":429,\"retry_after_s\":2,\"retry_after_ms\":1500}\n"),
            "{line}"
        );
    }

    #[test]
    fn lines_are_the_bytes_serde_json_writes() {
        let base = ProviderRecord {
            id: "r000042".into(),
            run_id: "run-1796133204234-0".into(),
            seq: 41,
            dialect: Dialect::OpenAi,
            api: Api::Chat,
            model: "gpt-4o-mini".into(),
            stream: false,
            received_us: 1_796_133_204_234_182,
            admitted_us: Some(1_796_133_204_234_190),
            first_byte_us: Some(1_796_133_204_787_291),
            finished_us: Some(1_796_133_204_845_646),
            hung_up_us: None,
            prompt_tokens: 16,
            max_tokens: Some(16),
            completion_tokens: 16,
            reserved_tokens: 32,
            phase: "base".into(),
            outcome: ProviderOutcome::Ok,
            status: 200,
            retry_after_s: None,
            retry_after_ms: None,
            provider: None,
        };
        let mut records = vec![base.clone()];
        for (i, o) in ProviderOutcome::ALL.iter().enumerate() {
            records.push(ProviderRecord {
                outcome: *o,
                dialect: if i % 2 == 0 {
                    Dialect::Anthropic
                } else {
                    Dialect::OpenAi
                },
                api: Api::ALL[i % Api::ALL.len()],
                stream: i % 3 == 0,
                run_id: if i % 2 == 1 {
                    String::new()
                } else {
                    format!("run-{i}")
                },
                admitted_us: None,
                first_byte_us: (i % 2 == 0).then_some(i as u64),
                finished_us: (i % 3 != 0).then_some(7),
                hung_up_us: (i % 2 == 1).then_some(9),
                max_tokens: (i % 2 == 0).then_some(i as u32),
                status: [0, 429, 529, 500, 503][i % 5],
                retry_after_s: (i % 2 == 0).then_some(i as u64 + 1),
                retry_after_ms: (i % 3 == 0).then_some(i as u64 * 250),
                provider: (i % 4 == 1).then(|| format!("p{i}")),
                phase: format!("spike+brownout{i}"),
                ..base.clone()
            });
        }
        for v in [
            0,
            1,
            9,
            10,
            99,
            100,
            999,
            1000,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let v32 = u32::try_from(v).unwrap_or(u32::MAX);
            records.push(ProviderRecord {
                seq: v,
                received_us: v,
                admitted_us: Some(v),
                finished_us: Some(v),
                prompt_tokens: v32,
                max_tokens: Some(v32),
                completion_tokens: v32,
                reserved_tokens: v,
                status: u16::try_from(v).unwrap_or(u16::MAX),
                ..base.clone()
            });
        }
        // Every control character, quotes, backslashes, DEL and beyond.
        let awkward: String = (0u8..0x80).map(char::from).collect::<String>() + "\"\\é😀";
        records.push(ProviderRecord {
            id: awkward.clone(),
            run_id: awkward.clone(),
            model: awkward.clone(),
            phase: format!("{awkward}{awkward}"),
            provider: Some(awkward.clone()),
            ..base.clone()
        });
        records.push(ProviderRecord {
            id: String::new(),
            model: String::new(),
            phase: String::new(),
            ..base
        });
        for r in &records {
            assert_eq!(ours(r), serde_line(r));
        }
    }
}
