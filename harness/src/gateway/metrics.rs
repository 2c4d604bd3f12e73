//! The gateway's own view of the run: its `/metrics` read once as the load
//! ends (`gateway-metrics.txt`), and what its histograms say against the
//! records. A gateway that times the wait for a pooled connection as
//! provider latency blames the provider for its own queue; set beside the
//! provider's records, the two medians show it.

use std::path::Path;
use std::time::Duration;

use wire::files;

use crate::http::tls::Trusting as _;

/// Reads `url` once and writes the text to `gateway-metrics.txt` in `dir`;
/// says why in a note when it cannot.
pub(crate) async fn save(url: &str, tls: &loadgen::TlsOptions, dir: &Path) -> Option<String> {
    let client = match crate::http::resolve::client()
        .timeout(Duration::from_secs(5))
        .trusting(tls)
        .build()
    {
        Ok(c) => c,
        Err(e) => return Some(format!("the gateway's metrics were not read: {e}")),
    };
    let text = match client.get(url).send().await {
        Ok(r) if r.status().is_success() => r.text().await.map_err(|e| e.to_string()),
        Ok(r) => Err(format!("HTTP {}", r.status())),
        Err(e) => Err(e.to_string()),
    };
    match text {
        Ok(text) => files::write_atomic(&dir.join(files::GATEWAY_METRICS), text.as_bytes())
            .err()
            .map(|e| format!("the gateway's metrics were not saved: {e}")),
        Err(e) => Some(format!("the gateway's metrics at {url} were not read: {e}")),
    }
}

/// The `q` quantile (0 to 1) of the Prometheus histogram `name` in `text`
/// (its `name_bucket{le="..."}` lines), interpolated linearly inside the
/// bucket it falls in, as Prometheus's `histogram_quantile` does; `None`
/// without observations. A quantile in the `+Inf` bucket is the largest
/// finite bound.
///
/// ```
/// let text = "h_bucket{le=\"1\"} 10\nh_bucket{le=\"2\"} 30\nh_bucket{le=\"+Inf\"} 30\n";
/// assert_eq!(harness::histogram_quantile(text, "h", 0.5), Some(1.25));
/// ```
pub fn histogram_quantile(text: &str, name: &str, q: f64) -> Option<f64> {
    let prefix = format!("{name}_bucket{{le=\"");
    let mut buckets: Vec<(f64, f64)> = text
        .lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (le, count) = rest.split_once("\"}")?;
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().ok()?
            };
            Some((le, count.trim().parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q.clamp(0.0, 1.0) * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, count) in &buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(lower);
            }
            let inside = count - below;
            let share = if inside > 0.0 {
                (rank - below) / inside
            } else {
                0.0
            };
            return Some(lower + (le - lower) * share);
        }
        (lower, below) = (le, count);
    }
    Some(lower)
}

/// A note for the report when the gateway's own provider-latency median
/// (`gateway_upstream_seconds`) reads more than twice the provider's, as
/// its records give it (`provider_p50_ms`): its metric holds a wait of its
/// own. Scenario seconds: `time_scale` multiplies both back.
pub fn provider_latency_note(text: &str, provider_p50_ms: f64, time_scale: f64) -> Option<String> {
    let own_s = histogram_quantile(text, "gateway_upstream_seconds", 0.5)?;
    let own_ms = own_s * 1000.0;
    if !(provider_p50_ms > 0.0 && own_ms > 2.0 * provider_p50_ms) {
        return None;
    }
    let scale = if time_scale > 0.0 { time_scale } else { 1.0 };
    let split = if text.contains("gateway_pool_wait_seconds") {
        ""
    } else {
        " (no pool wait is exported apart)"
    };
    Some(format!(
        "the gateway's own provider latency (gateway_upstream_seconds) reads a median of {:.1} s while the provider's records say {:.1} s ({:.0}x): the gateway times a wait of its own, such as its connection pool's, as the provider's{split}",
        own_ms * scale / 1000.0,
        provider_p50_ms * scale / 1000.0,
        own_ms / provider_p50_ms,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# TYPE gateway_upstream_seconds histogram\n\
        gateway_upstream_seconds_bucket{le=\"0.5\"} 0\n\
        gateway_upstream_seconds_bucket{le=\"1\"} 4\n\
        gateway_upstream_seconds_bucket{le=\"10\"} 4\n\
        gateway_upstream_seconds_bucket{le=\"60\"} 100\n\
        gateway_upstream_seconds_bucket{le=\"+Inf\"} 100\n\
        gateway_upstream_seconds_sum 3000\n\
        gateway_upstream_seconds_count 100\n";

    #[test]
    fn quantiles_interpolate_inside_their_bucket() {
        let p50 = histogram_quantile(TEXT, "gateway_upstream_seconds", 0.5).unwrap();
        // 50 of 100: 46 into the 96 of the (10, 60] bucket.
        assert!((p50 - (10.0 + 50.0 * 46.0 / 96.0)).abs() < 1e-9, "{p50}");
        assert_eq!(
            histogram_quantile(TEXT, "gateway_upstream_seconds", 0.02),
            Some(0.75)
        );
        assert_eq!(histogram_quantile(TEXT, "other", 0.5), None);
        let empty = "h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\n";
        assert_eq!(histogram_quantile(empty, "h", 0.5), None);
        let beyond = "h_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 3\n";
        assert_eq!(histogram_quantile(beyond, "h", 0.5), Some(1.0));
    }

    #[test]
    fn a_gateway_metric_far_above_the_providers_records_is_noted() {
        // The provider's records: 4 s; the gateway's metric: about 34 s.
        let note = provider_latency_note(TEXT, 4000.0, 1.0).unwrap();
        assert!(note.contains("34.0 s") && note.contains("4.0 s"), "{note}");
        assert!(note.contains("no pool wait is exported apart"), "{note}");
        // At time scale 10 the figures are told in scenario seconds.
        let scaled = provider_latency_note(TEXT, 400.0, 10.0).unwrap();
        assert!(
            scaled.contains("339.6 s") && scaled.contains("4.0 s"),
            "{scaled}"
        );
        assert_eq!(
            provider_latency_note(TEXT, 30_000.0, 1.0),
            None,
            "close enough"
        );
    }
}
