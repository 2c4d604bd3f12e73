//! A record as a line of `client.jsonl`: the fields in the order
//! `wire::ClientRecord` declares them, written one by one; each string
//! quoted and escaped as serde_json does it, each number by itoa
//! (`wire::json`, the provider's records' writer too).
//!
//! Why not `serde_json::to_writer(record)`: its derived serializer cost
//! about 3,600 instructions a record (callgrind; a tenth of the load
//! generator's work per request), most of it in the generic map machinery.
//! This writes the same bytes (the test below compares the two on every
//! outcome and on strings that need escaping) in about a fifth of that.
//! `wire` stays the one definition of the record: a field added there
//! without one here fails the test.

use wire::ClientRecord;

use wire::json::{push_opt, push_str, push_u64};

/// Appends `r` as one JSON object and a newline, exactly as
/// `serde_json::to_writer` then `\n` would.
pub(crate) fn push_record(out: &mut Vec<u8>, r: &ClientRecord) {
    out.extend_from_slice(b"{\"id\":");
    push_str(out, &r.id);
    out.extend_from_slice(b",\"attempt\":");
    push_u64(out, u64::from(r.attempt));
    out.extend_from_slice(b",\"intended_us\":");
    push_u64(out, r.intended_us);
    out.extend_from_slice(b",\"sent_us\":");
    push_u64(out, r.sent_us);
    if r.client_wait_us != 0 {
        out.extend_from_slice(b",\"client_wait_us\":");
        push_u64(out, r.client_wait_us);
    }
    out.extend_from_slice(b",\"first_byte_us\":");
    push_opt(out, r.first_byte_us);
    out.extend_from_slice(b",\"done_us\":");
    push_u64(out, r.done_us);
    out.extend_from_slice(b",\"status\":");
    push_opt(out, r.status.map(u64::from));
    out.extend_from_slice(b",\"outcome\":\"");
    // Outcome names are snake_case ASCII: nothing to escape.
    out.extend_from_slice(r.outcome.as_str().as_bytes());
    out.extend_from_slice(b"\",\"retry_after_ms\":");
    push_opt(out, r.retry_after_ms);
    if let Some(header) = r.retry_after_header {
        // Header names are snake_case ASCII: nothing to escape.
        out.extend_from_slice(b",\"retry_after_header\":\"");
        out.extend_from_slice(header.as_str().as_bytes());
        out.push(b'"');
    }
    out.extend_from_slice(b",\"tokens\":");
    push_u64(out, r.tokens);
    out.extend_from_slice(if r.stream {
        b",\"stream\":true"
    } else {
        b",\"stream\":false"
    });
    out.extend_from_slice(if r.last {
        b",\"last\":true"
    } else {
        b",\"last\":false"
    });
    out.extend_from_slice(b",\"patience_ms\":");
    push_u64(out, r.patience_ms);
    if let Some(reason) = &r.reason {
        out.extend_from_slice(b",\"reason\":");
        push_str(out, reason);
    }
    if let Some(tenant) = &r.tenant {
        out.extend_from_slice(b",\"tenant\":");
        push_str(out, tenant);
    }
    if let Some(reads) = r.body_reads {
        out.extend_from_slice(b",\"body_reads\":");
        push_u64(out, u64::from(reads));
    }
    if let Some(gap) = r.longest_gap_us {
        out.extend_from_slice(b",\"longest_gap_us\":");
        push_u64(out, gap);
    }
    out.extend_from_slice(b"}\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use wire::ClientOutcome;

    fn serde_line(r: &ClientRecord) -> Vec<u8> {
        let mut v = serde_json::to_vec(r).unwrap();
        v.push(b'\n');
        v
    }

    #[test]
    fn lines_are_the_bytes_serde_json_writes() {
        let base = ClientRecord {
            id: "r000042".into(),
            attempt: 1,
            intended_us: 1_796_133_204_234_182,
            sent_us: 1_796_133_204_630_865,
            client_wait_us: 0,
            first_byte_us: Some(1_796_133_204_787_291),
            done_us: 1_796_133_204_845_646,
            status: Some(200),
            outcome: ClientOutcome::Ok,
            retry_after_ms: None,
            retry_after_header: None,
            tokens: 16,
            stream: false,
            last: true,
            patience_ms: 2000,
            reason: None,
            tenant: None,
            body_reads: None,
            longest_gap_us: None,
        };
        let mut records = vec![base.clone()];
        for (i, o) in ClientOutcome::ALL.iter().enumerate() {
            records.push(ClientRecord {
                outcome: *o,
                attempt: i as u32 + 2,
                first_byte_us: None,
                status: (i % 2 == 0).then_some(429 + i as u16),
                retry_after_ms: Some(i as u64 * 997),
                retry_after_header: [
                    None,
                    Some(wire::RetryAfterHeader::RetryAfterMs),
                    Some(wire::RetryAfterHeader::RetryAfter),
                    Some(wire::RetryAfterHeader::HttpDate),
                ][i % 4],
                stream: i % 3 == 0,
                last: i % 2 == 1,
                reason: (i % 2 == 0).then(|| format!("reason_{i}")),
                tenant: (i % 3 == 1).then(|| format!("tenant {i}")),
                body_reads: (i % 3 == 0).then_some(i as u32 * 7),
                longest_gap_us: (i % 3 == 0).then_some(i as u64 * 20_011),
                client_wait_us: (i % 4) as u64 * 1_234,
                ..base.clone()
            });
        }
        for v in [0, 1, 9, 10, 99, 100, 101, 999, 1000, u64::MAX / 3, u64::MAX] {
            records.push(ClientRecord {
                intended_us: v,
                sent_us: v,
                client_wait_us: v,
                done_us: v,
                tokens: v,
                patience_ms: v,
                retry_after_ms: Some(v),
                body_reads: Some(v as u32),
                longest_gap_us: Some(v),
                ..base.clone()
            });
        }
        // Every control character, quotes, backslashes, DEL and beyond.
        let awkward: String = (0u8..0x80).map(char::from).collect::<String>() + "\"\\é😀";
        records.push(ClientRecord {
            id: awkward.clone(),
            reason: Some(awkward.clone()),
            tenant: Some(format!("{awkward}{awkward}")),
            ..base.clone()
        });
        records.push(ClientRecord {
            reason: Some(String::new()),
            tenant: Some("t".into()),
            ..base
        });
        for r in &records {
            let mut ours = Vec::new();
            push_record(&mut ours, r);
            assert_eq!(
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(&serde_line(r))
            );
        }
    }
}
