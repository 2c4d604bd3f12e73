//! How long finding the request-id marker takes in a body without one
//! (a caller that is not the load generator, behind a gateway that drops
//! the `x-request-id` header): `wire::marker_id` against the byte-by-byte
//! search it used before 2026-12-03 (`windows().position()`), over prompts
//! of several lengths. Figures go to BENCHMARKS.md (section "Issue 29").
//!
//! ```sh
//! cargo run --release -p wire --example marker_scan
//! ```

use std::hint::black_box;
use std::time::Instant;

/// The search as it was: a comparison of the opening at every byte.
fn marker_at_by_windows(body: &[u8]) -> Option<usize> {
    let open = wire::MARKER_OPEN.as_bytes();
    body.windows(open.len()).position(|w| w == open)
}

/// Nanoseconds a call of `f` over `body`, the best of five timings of
/// enough calls to take about 50 ms each.
fn ns_per_call(body: &[u8], f: impl Fn(&[u8]) -> bool) -> f64 {
    let calls = (50_000_000 / body.len().max(1)).clamp(1_000, 5_000_000);
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..calls {
                black_box(f(black_box(body)));
            }
            t.elapsed().as_nanos() as f64 / calls as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    println!("body bytes   marker_id ns   by windows ns   ratio");
    for len in [200usize, 2_000, 16_000, 128_000] {
        // A chat body whose prompt is plain words and has no marker.
        let mut body = br#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":""#.to_vec();
        while body.len() + 3 < len {
            body.extend_from_slice(b"sun cat map red oak sky [tea] ink ");
        }
        body.extend_from_slice(br#""}]}"#);
        assert!(wire::marker_id(&body).is_none() && marker_at_by_windows(&body).is_none());
        let now = ns_per_call(&body, |b| wire::marker_id(b).is_some());
        let before = ns_per_call(&body, |b| marker_at_by_windows(b).is_some());
        println!(
            "{:>10}   {:>12.0}   {:>13.0}   {:>5.1}x",
            body.len(),
            now,
            before,
            before / now
        );
    }
}
