//! The charts of `report.html`: the run on one shared time axis (traffic,
//! where the requests are, latency, memory, Retry-After against the drain
//! time), with the scenario's phases as shaded bands, and the distribution
//! of end-to-end latency as an HDR percentile plot; and `calibrate.html`'s
//! two curves, latency and throughput against concurrency.
//!
//! Charts are drawn with plotters into SVG strings (inlined in the HTML) and
//! rasterised with resvg into PNG copies for pasting into a ticket. Every
//! time chart has the same width, margins and x range, so their time axes
//! line up one above the other; legends sit below the plot area, band labels
//! above it, so neither covers data.
//!
//! The rooms:
//! - this file: what the HTML reads ([`Band`], [`ChartData`], [`Chart`],
//!   [`render_all`]), and the number formatting it shares with the charts
//!   (`count`, `num`: [`wire::number`]'s);
//! - `axes`: nice steps, the linear, logarithmic and time axes, tick labels;
//! - `timeline`: the run's seconds in buckets of a few for a long run;
//! - `draw`: fonts, colours, the SVG document, title, legend, the time
//!   chart's frame with its bands, series and lines;
//! - `time_charts`: the time charts (traffic, calls per provider with
//!   several, requests, latency, memory, Retry-After);
//! - `distribution`: chart 6, the HDR percentile plot;
//! - `curves`: a calibration sweep's latency and throughput against
//!   concurrency, the knee and the recommended limit marked
//!   ([`render_curves`]);
//! - `raster`: PNG copies with resvg, and their font database.

mod axes;
mod curves;
mod distribution;
mod draw;
mod raster;
mod time_charts;
mod timeline;

use assertions::{ProviderSeconds, RefusalLine, Second};
use hdrhistogram::Histogram;

use self::axes::TimeAxis;
use self::curves::{latency_curve, throughput_curve};
use self::distribution::distribution;
use self::draw::{DrawResult, Frame};
use self::time_charts::{latency, memory, providers, requests, retry_after, traffic};
use self::timeline::Rows;
use crate::calibration::Calibration;

pub(crate) use self::raster::png;
/// Numbers as the whole report prints them: `9,360`, `1,234.6`.
pub(crate) use wire::number::{count, num};

/// A stretch of the run drawn as a shaded band: a load phase, with the
/// provider's phase when one is active.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// Start, scenario seconds since the run started.
    pub from_s: f64,
    /// End, scenario seconds since the run started.
    pub to_s: f64,
    /// What the band is called (the plan's segment name).
    pub label: String,
    /// True if and only if the plan predicts overload during the band.
    pub overloaded: bool,
}

/// Everything the charts draw.
pub struct ChartData<'a> {
    /// The run scenario second by scenario second.
    pub seconds: &'a [Second],
    /// With several providers, each one's calls and refusals per second
    /// (as long as `seconds`); empty with one.
    pub providers: &'a [ProviderSeconds],
    /// Length of the time axis in scenario seconds: at least the timeline's and the
    /// load schedule's (so a run that ended early shows where it stopped).
    pub span_s: f64,
    /// The phases.
    pub bands: Vec<Band>,
    /// Q*, the predicted queue bound, if the scenario overloads.
    pub queue_bound: Option<f64>,
    /// The gateway's first shed: scenario seconds since start and depth then.
    pub first_shed: Option<(f64, u64)>,
    /// The served-latency SLO (p99), in milliseconds, if the check is on.
    pub slo_ms: Option<f64>,
    /// The gateway's memory ceiling, if any.
    pub memory_ceiling_bytes: Option<u64>,
    /// What happened to the gateway process (`died`, `restarted`), scenario
    /// seconds since start: drawn as vertical lines across every time chart.
    pub events: Vec<(f64, String)>,
    /// The run's refusals by kind, status and reason (the summary's): the
    /// traffic chart's legend names the statuses each kind was answered
    /// with.
    pub refusals: &'a [RefusalLine],
    /// End-to-end latency of answered attempts, in microseconds.
    pub served: &'a Histogram<u64>,
    /// End-to-end latency of every attempt, in microseconds.
    pub all: &'a Histogram<u64>,
}

/// One rendered chart.
#[derive(Debug, Clone)]
pub struct Chart {
    /// Short id: the HTML element id is `chart-{id}`, the PNG `chart-{id}.png`.
    pub id: &'static str,
    /// The chart's title.
    pub title: String,
    /// The chart as an SVG document, or why it could not be drawn.
    pub svg: Result<String, String>,
}

/// A chart's id, its title without its number, and how it is drawn.
type Entry = (&'static str, &'static str, fn(&Frame) -> DrawResult<String>);

/// Draws the charts, numbered in order: six, and with several providers a
/// seventh after the traffic, each provider's calls and refusals. The time
/// charts come first (all but the last, the distribution).
pub fn render_all(d: &ChartData) -> Vec<Chart> {
    let rows = Rows::of(d.seconds);
    let x = TimeAxis::new(d.span_s.max(rows.end()));
    let mut entries: Vec<Entry> = vec![("traffic", "Traffic per second", traffic)];
    if !d.providers.is_empty() {
        entries.push((
            "providers",
            "Calls and refusals per provider per second",
            providers,
        ));
    }
    entries.extend([
        (
            "requests",
            "Where the requests are",
            requests as fn(&Frame) -> _,
        ),
        ("latency", "Latency per second, p50 and p99", latency),
        ("memory", "Gateway memory (RSS)", memory),
        (
            "retry-after",
            "Retry-After given vs backlog drain time measured",
            retry_after,
        ),
        (
            "distribution",
            "End-to-end latency distribution (HDR percentile plot)",
            distribution,
        ),
    ]);
    entries
        .into_iter()
        .enumerate()
        .map(|(k, (id, title, f))| {
            let title = format!("{}. {title}", k + 1);
            drawn(id, &title, || {
                f(&Frame {
                    d,
                    rows: &rows,
                    x: &x,
                    title: &title,
                })
            })
        })
        .collect()
}

/// Draws `rehearse calibrate`'s two curves: latency (p50, p90, p99) and
/// throughput against concurrency, the knee and the recommended limit
/// marked on both. Their ids are `latency-curve` and `throughput-curve`.
pub fn render_curves(c: &Calibration) -> Vec<Chart> {
    let title = "Latency against concurrency";
    let latency = drawn("latency-curve", title, || latency_curve(c, title));
    let title = "Throughput against concurrency";
    let throughput = drawn("throughput-curve", title, || throughput_curve(c, title));
    vec![latency, throughput]
}

/// One chart, drawn by `f`. A chart that cannot be drawn must not cost the
/// run its verdict and other reports: it becomes a sentence in the page
/// instead, whether plotters returned an error or panicked.
fn drawn(id: &'static str, title: &str, f: impl FnOnce() -> DrawResult<String>) -> Chart {
    let svg = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err("the chart library panicked".into()))
        .map_err(|e| e.to_string());
    Chart {
        id,
        title: title.to_string(),
        svg,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn second(t: u64) -> Second {
        Second {
            t,
            offered: 40,
            sent: 40,
            provider_calls: 46,
            dispatched: 40,
            ok: 30,
            shed: 10,
            stale: 0,
            tenant_limited: 0,
            upstream_refused: 0,
            gateway_timeout: 0,
            timeout: 0,
            errors: 0,
            client_outstanding: 20,
            provider_in_flight: 12,
            provider_in_service: 12,
            gateway_depth: 8,
            backlog: 8,
            e2e_p50_ms: Some(210.0),
            e2e_p99_ms: Some(1900.0),
            queue_wait_p50_ms: Some(3.0),
            queue_wait_p99_ms: Some(1700.0),
            provider_p50_ms: Some(200.0),
            provider_p99_ms: Some(1400.0),
            rss_bytes: Some(19 << 20),
            retry_after_ms: Some(1500),
            relayed_retry_after_ms: None,
            drain_s: 1.2,
        }
    }

    fn hist(values_ms: &[u64]) -> Histogram<u64> {
        let mut h = Histogram::new(3).unwrap();
        for v in values_ms {
            h.record(v * 1000).unwrap();
        }
        h
    }

    fn bands() -> Vec<Band> {
        vec![
            Band {
                from_s: 0.0,
                to_s: 2.0,
                label: "40 requests/s".into(),
                overloaded: false,
            },
            Band {
                from_s: 2.0,
                to_s: 10.0,
                label: "40 requests/s / provider 7x slower".into(),
                overloaded: true,
            },
        ]
    }

    fn render(seconds: &[Second], span_s: f64, first_shed: Option<(f64, u64)>) -> Vec<Chart> {
        let served = hist(&[200, 210, 220, 900, 1900]);
        let all = hist(&[1, 2, 200, 210, 220, 900, 1900]);
        render_all(&ChartData {
            seconds,
            providers: &[],
            span_s,
            bands: bands(),
            queue_bound: Some(245.0),
            first_shed,
            slo_ms: Some(5000.0),
            memory_ceiling_bytes: Some(256 << 20),
            events: vec![(6.2, "died".into()), (7.0, "restarted".into())],
            refusals: &[],
            served: &served,
            all: &all,
        })
    }

    /// Every chart drew, and is a well-formed SVG document resvg can read.
    fn assert_drawn(charts: &[Chart]) {
        assert_eq!(charts.len(), 6);
        let ids: Vec<_> = charts.iter().map(|c| c.id).collect();
        assert_eq!(
            ids,
            [
                "traffic",
                "requests",
                "latency",
                "memory",
                "retry-after",
                "distribution"
            ]
        );
        for c in charts {
            let svg = c.svg.as_ref().unwrap_or_else(|e| panic!("{}: {e}", c.id));
            assert!(svg.starts_with("<svg"), "{}", c.id);
            assert!(svg.contains(&c.title), "{}: no title", c.id);
            let png = png(svg).unwrap_or_else(|e| panic!("{}: {e}", c.id));
            assert_eq!(&png[1..4], b"PNG");
        }
    }

    #[test]
    fn a_ten_second_run_with_sheds() {
        let seconds: Vec<_> = (0..12).map(second).collect();
        let charts = render(&seconds, 10.0, Some((2.3, 8)));
        assert_drawn(&charts);
        let requests = charts[1].svg.as_ref().unwrap();
        assert!(requests.contains("Q* = 245 (predicted bound)"));
        assert!(requests.contains("first shed: 8 waiting, 2.3 s in"));
        // Band labels above the plot, the overloaded one cut to its width
        // only if it has to be.
        assert!(requests.contains("40 requests/s / provider 7x slower"));
        // Seconds on the time axis.
        assert!(requests.contains("time since start (s)"));
        let latency = charts[2].svg.as_ref().unwrap();
        assert!(latency.contains("SLO: p99 ≤ 5 s"));
        assert!(charts[3].svg.as_ref().unwrap().contains("ceiling 256 MiB"));
        // The gateway's death and restart, on every time chart.
        for c in &charts[..5] {
            let svg = c.svg.as_ref().unwrap();
            assert!(svg.contains("gateway died at 6.2 s"), "{}", c.id);
            assert!(svg.contains("gateway restarted at 7 s"), "{}", c.id);
        }
    }

    /// Pointed at, each second of the traffic chart says the attempts
    /// sent, the provider calls made for them and calls per attempt; in
    /// a long run, per bucket.
    #[test]
    fn the_traffic_chart_says_calls_per_attempt_when_pointed_at() {
        let mut seconds: Vec<_> = (0..10).map(second).collect();
        seconds[9].sent = 3;
        seconds[9].dispatched = 0;
        seconds[9].provider_calls = 0;
        let charts = render(&seconds, 10.0, None);
        let traffic = charts[0].svg.as_ref().unwrap();
        assert_eq!(traffic.matches("<title>").count(), 10);
        assert!(traffic.contains(
            "<title>3 s: 40 attempts sent, 40 reached a provider, 46 provider calls for them: 1.15 calls per attempt</title>"
        ));
        assert!(traffic.contains(
            "<title>9 s: 3 attempts sent, 0 reached a provider, 0 provider calls for them: no attempt reached a provider</title>"
        ));
        // Laid over the plot, painting nothing, so the PNG copy is as it
        // was without them.
        let bare = traffic.replace(
            &traffic[traffic.find("<g class=\"tips\">").unwrap()..traffic.rfind("</svg>").unwrap()],
            "",
        );
        assert_eq!(png(traffic).unwrap(), png(&bare).unwrap());
        let long: Vec<_> = (0..2400).map(second).collect();
        let charts = render(&long, 2400.0, None);
        let traffic = charts[0].svg.as_ref().unwrap();
        assert_eq!(traffic.matches("<title>").count(), 1200);
        assert!(traffic.contains(
            "<title>2–4 s, mean per second: 40 attempts sent, 40 reached a provider, 46 provider calls for them: 1.15 calls per attempt</title>"
        ));
    }

    #[test]
    fn no_sheds_at_all() {
        let seconds: Vec<_> = (0..10)
            .map(|t| Second {
                shed: 0,
                retry_after_ms: None,
                drain_s: 0.0,
                ..second(t)
            })
            .collect();
        let charts = render(&seconds, 10.0, None);
        assert_drawn(&charts);
        assert!(charts[1]
            .svg
            .as_ref()
            .unwrap()
            .contains("the gateway never shed"));
        assert!(charts[4]
            .svg
            .as_ref()
            .unwrap()
            .contains("no Retry-After given"));
    }

    /// The traffic legend names each kind of refusal with the statuses
    /// the run's refusals of that kind were answered with: a pass-through
    /// proxy whose every refusal was the provider's 429 reads "429", not
    /// a 504 it never gave.
    #[test]
    fn the_traffic_legend_names_the_statuses_it_saw() {
        use assertions::RefusalLine;
        use wire::RefusalClass;
        let line = |class, status, count| RefusalLine {
            class,
            status,
            reason: None,
            tenant: None,
            count,
        };
        let seconds: Vec<_> = (0..10)
            .map(|t| Second {
                shed: 0,
                upstream_refused: 12,
                ..second(t)
            })
            .collect();
        let served = hist(&[200]);
        let traffic = |refusals: &[RefusalLine]| {
            render_all(&ChartData {
                seconds: &seconds,
                providers: &[],
                span_s: 10.0,
                bands: bands(),
                queue_bound: None,
                first_shed: None,
                slo_ms: None,
                memory_ceiling_bytes: None,
                events: Vec::new(),
                refusals,
                served: &served,
                all: &served,
            })[0]
                .svg
                .clone()
                .unwrap()
        };
        let relayed = traffic(&[line(RefusalClass::AfterDispatch, 429, 120)]);
        assert!(
            relayed.contains("refused after dispatch (429)"),
            "{relayed}"
        );
        assert!(!relayed.contains("(504"), "{relayed}");
        // The gateway's own timeouts beside the provider's 503s, and its
        // sheds at admission with the 429s it gave.
        let both = traffic(&[
            line(RefusalClass::AtAdmission, 429, 3),
            line(RefusalClass::AfterDispatch, 504, 2),
            line(RefusalClass::AfterDispatch, 503, 7),
        ]);
        assert!(both.contains("refused after dispatch (503, 504)"), "{both}");
        assert!(both.contains("shed at admission (429)"), "{both}");
        // Nothing seen, no status named.
        let none = traffic(&[]);
        assert!(none.contains(">\nrefused after dispatch\n<"), "{none}");
    }

    /// Chart 5 draws each kind of Retry-After apart, named as the judge
    /// classes its refusal: a gateway that relayed the provider's 429s
    /// and shed nothing itself shows them as relayed, beside "the gateway
    /// shed nothing of its own", never as Retry-After it gave.
    #[test]
    fn chart_5_names_whose_retry_after_it_shows() {
        let relayed: Vec<_> = (0..10)
            .map(|t| Second {
                shed: 0,
                upstream_refused: 12,
                retry_after_ms: None,
                relayed_retry_after_ms: Some(2000),
                ..second(t)
            })
            .collect();
        let svg = |seconds: &[Second]| render(seconds, 10.0, None)[4].svg.clone().unwrap();
        let chart = svg(&relayed);
        assert!(
            chart.contains("Retry-After relayed from the provider"),
            "{chart}"
        );
        assert!(chart.contains("the gateway shed nothing of its own"));
        assert!(!chart.contains("own sheds"));
        assert!(!chart.contains("no Retry-After given"));
        // The gateway's own sheds only: no relayed series named.
        let own: Vec<_> = (0..10).map(second).collect();
        let chart = svg(&own);
        assert!(chart.contains("Retry-After of the gateway&apos;s own sheds"));
        assert!(!chart.contains("relayed"));
        // Both: both named.
        let both: Vec<_> = (0..10)
            .map(|t| Second {
                relayed_retry_after_ms: Some(4000),
                ..second(t)
            })
            .collect();
        let chart = svg(&both);
        assert!(chart.contains("own sheds") && chart.contains("relayed from the provider"));
        assert_eq!(&png(&chart).unwrap()[1..4], b"PNG");
    }

    #[test]
    fn a_run_that_ended_early_keeps_the_planned_axis() {
        // Records for 4 s of a 10 s schedule: the axis still runs to 10 s.
        let seconds: Vec<_> = (0..4).map(second).collect();
        let charts = render(&seconds, 10.0, Some((2.3, 8)));
        assert_drawn(&charts);
        assert!(charts[0].svg.as_ref().unwrap().contains(">\n10\n</text>"));
    }

    #[test]
    fn a_single_second_run() {
        let charts = render(&[second(0)], 0.0, None);
        assert_drawn(&charts);
        // One point per series still shows, as a dot.
        assert!(charts[0].svg.as_ref().unwrap().contains("<circle"));
    }

    #[test]
    fn an_empty_run() {
        let empty = Histogram::new(3).unwrap();
        let charts = render_all(&ChartData {
            seconds: &[],
            providers: &[],
            span_s: 0.0,
            bands: Vec::new(),
            queue_bound: None,
            first_shed: None,
            slo_ms: None,
            memory_ceiling_bytes: None,
            events: Vec::new(),
            refusals: &[],
            served: &empty,
            all: &empty,
        });
        assert_drawn(&charts);
        assert!(charts[0]
            .svg
            .as_ref()
            .unwrap()
            .contains("no attempts recorded"));
        assert!(charts[3]
            .svg
            .as_ref()
            .unwrap()
            .contains("no memory samples"));
    }

    #[test]
    fn a_forty_minute_run_reads_in_minutes_and_is_bucketed() {
        let seconds: Vec<_> = (0..2400).map(second).collect();
        let charts = render(&seconds, 2400.0, Some((200.0, 245)));
        assert_drawn(&charts);
        let traffic = charts[0].svg.as_ref().unwrap();
        assert!(traffic.contains("time since start (min)"));
        assert!(traffic.contains("each point is 2 s"));
        let axis = TimeAxis::new(2400.0);
        assert_eq!(axis.step, 300.0);
        assert_eq!(axis.label(600.0), "10");
        assert!(charts[1]
            .svg
            .as_ref()
            .unwrap()
            .contains("first shed: 245 waiting, 3:20 in"));
    }

    #[test]
    fn several_providers_get_their_own_chart_after_the_traffic() {
        let seconds: Vec<_> = (0..10).map(second).collect();
        // The primary refuses from second 4 on and its calls fall away; the
        // secondary takes them.
        let providers = vec![
            ProviderSeconds {
                name: "primary".into(),
                calls: vec![30, 30, 30, 30, 12, 3, 0, 0, 0, 0],
                refusals: vec![0, 0, 0, 0, 12, 3, 0, 0, 0, 0],
            },
            ProviderSeconds {
                name: "secondary".into(),
                calls: vec![0, 0, 0, 0, 18, 27, 30, 30, 30, 30],
                refusals: vec![0; 10],
            },
        ];
        let served = hist(&[200, 210]);
        let charts = render_all(&ChartData {
            seconds: &seconds,
            providers: &providers,
            span_s: 10.0,
            bands: bands(),
            queue_bound: None,
            first_shed: None,
            slo_ms: None,
            memory_ceiling_bytes: None,
            events: Vec::new(),
            refusals: &[],
            served: &served,
            all: &served,
        });
        let ids: Vec<_> = charts.iter().map(|c| c.id).collect();
        assert_eq!(
            ids,
            [
                "traffic",
                "providers",
                "requests",
                "latency",
                "memory",
                "retry-after",
                "distribution"
            ]
        );
        // Numbered in order, the rest moved down by one.
        assert_eq!(
            charts[1].title,
            "2. Calls and refusals per provider per second"
        );
        assert_eq!(charts[2].title, "3. Where the requests are");
        assert!(charts[6].title.starts_with("7. End-to-end latency"));
        let svg = charts[1].svg.as_ref().unwrap();
        for label in [
            "primary: calls",
            "primary: refused (429, 503, 529)",
            "secondary: calls",
            "provider calls per second",
        ] {
            assert!(svg.contains(label), "{label}");
        }
        assert!(!svg.contains("no provider calls recorded"));
        assert_eq!(&png(svg).unwrap()[1..4], b"PNG");
        // A long run is bucketed like the other series: 2,400 seconds, one
        // point per two, each the mean of its seconds.
        let rows = Rows::of(&(0..2400).map(second).collect::<Vec<_>>());
        let calls: Vec<u64> = (0..2400).map(|t| t % 2 * 10).collect();
        let pts = rows.per_second(&calls);
        assert_eq!(pts.len(), 1200);
        assert_eq!(pts[0], (1.0, 5.0));
    }

    #[test]
    fn phase_names_are_escaped_in_the_svg() {
        let served = hist(&[200]);
        let charts = render_all(&ChartData {
            seconds: &[second(0), second(1)],
            providers: &[],
            span_s: 2.0,
            bands: vec![Band {
                from_s: 0.0,
                to_s: 2.0,
                label: "<script>x</script> & co".into(),
                overloaded: false,
            }],
            queue_bound: None,
            first_shed: None,
            slo_ms: None,
            memory_ceiling_bytes: None,
            events: Vec::new(),
            refusals: &[],
            served: &served,
            all: &served,
        });
        for c in &charts {
            assert!(!c.svg.as_ref().unwrap().contains("<script"), "{}", c.id);
        }
    }
}
