//! Where a request goes: the upstreams a gateway routes over, in failover
//! order (the lowest `priority` first, then the order written) or by
//! weight (smooth weighted round robin, as nginx does), each left out
//! while it cools down after refusing.
//!
//! An upstream that answers 429, 503 or 529, times out or cannot be
//! reached is cooled down for the Retry-After it gave (`retry-after-ms`,
//! else `retry-after` in seconds or as an HTTP date), else for
//! `cooldown`; the request it refused is sent on to the next upstream not
//! cooling, at most once per upstream. A cooldown is one atomic per
//! upstream (the instant it ends): routing a request takes no lock,
//! except the weighted pick's few additions. With one upstream and no
//! cooldowns (a lone `upstream = URL`) nothing is ever marked.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use http::{HeaderMap, HeaderValue, Uri};
use wire::headers::{RETRY_AFTER, RETRY_AFTER_MS};

use crate::config::{GatewayConfig, Routing};

/// One upstream: where its calls go, and until when it cools down.
pub(crate) struct Route {
    /// Its name, as configured (`default` for a lone `upstream`).
    pub(crate) name: String,
    /// Its name as the `x-gateway-upstream` header carries it.
    pub(crate) header: HeaderValue,
    origin: String,
    prefix: String,
    weight: u32,
    /// Microseconds after the router's epoch when its cooldown ends (0:
    /// never cooled).
    cooling_until: AtomicU64,
}

impl Route {
    /// The URI of `path_and_query` at this upstream.
    pub(crate) fn uri(&self, path_and_query: &str) -> Result<Uri, http::uri::InvalidUri> {
        format!("{}{}{}", self.origin, self.prefix, path_and_query).parse()
    }

    /// The caller's path and query in `uri`, a URI of this upstream's
    /// ([`Route::uri`]): without its prefix.
    pub(crate) fn path_of<'u>(&self, uri: &'u Uri) -> &'u str {
        let full = uri.path_and_query().map_or("/", |p| p.as_str());
        full.strip_prefix(self.prefix.as_str()).unwrap_or(full)
    }
}

/// The set of upstreams a request has been sent to already: a bit each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tried(u64);

impl Tried {
    pub(crate) fn add(&mut self, i: usize) {
        self.0 |= 1 << i;
    }

    pub(crate) fn has(self, i: usize) -> bool {
        self.0 & (1 << i) != 0
    }

    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// The upstreams and how requests are spread over them.
pub(crate) struct Router {
    routes: Vec<Route>,
    /// Indices into `routes` in failover order.
    order: Vec<usize>,
    routing: Routing,
    cooldowns: bool,
    cooldown: Duration,
    epoch: Instant,
    total_weight: u64,
    /// Each upstream's current weight, for the smooth weighted round robin
    /// (weighted routing over more than one upstream only).
    current: Option<Mutex<Vec<i64>>>,
    /// Named `upstreams` were configured (not a lone `upstream`).
    pub(crate) named: bool,
}

impl Router {
    /// The routes of a validated `config`.
    pub(crate) fn new(config: &GatewayConfig) -> Router {
        let routes: Vec<Route> = config
            .routes()
            .into_iter()
            .map(|u| {
                let url = u.url.unwrap_or_default();
                let uri: Uri = url.parse().unwrap_or_default();
                Route {
                    header: HeaderValue::from_str(&u.name).unwrap_or(HeaderValue::from_static("-")),
                    name: u.name,
                    origin: format!(
                        "{}://{}",
                        uri.scheme_str().unwrap_or("http"),
                        uri.authority().map(|a| a.as_str()).unwrap_or_default()
                    ),
                    prefix: uri.path().trim_end_matches('/').to_string(),
                    weight: u.weight.max(1),
                    cooling_until: AtomicU64::new(0),
                }
            })
            .collect();
        let priorities: Vec<u32> = config.routes().iter().map(|u| u.priority).collect();
        let mut order: Vec<usize> = (0..routes.len()).collect();
        // Stable: equal priorities keep the order written.
        order.sort_by_key(|&i| priorities[i]);
        let weighted = config.routing == Routing::Weighted && routes.len() > 1;
        Router {
            total_weight: routes.iter().map(|r| u64::from(r.weight)).sum(),
            current: weighted.then(|| Mutex::new(vec![0; routes.len()])),
            order,
            routes,
            routing: config.routing,
            cooldowns: config.cooldowns_on(),
            cooldown: config.cooldown,
            epoch: Instant::now(),
            named: !config.upstreams.is_empty(),
        }
    }

    pub(crate) fn route(&self, i: usize) -> &Route {
        &self.routes[i]
    }

    /// The names of the upstreams, in the order configured.
    pub(crate) fn names(&self) -> Vec<String> {
        self.routes.iter().map(|r| r.name.clone()).collect()
    }

    /// Returns true if and only if cooldowns are on.
    pub(crate) fn cools(&self) -> bool {
        self.cooldowns
    }

    fn micros(&self, at: Instant) -> u64 {
        // +1: 0 is "never cooled".
        at.saturating_duration_since(self.epoch).as_micros() as u64 + 1
    }

    /// What is left of upstream `i`'s cooldown at `now` (zero: none).
    pub(crate) fn cooling_left(&self, i: usize, now: Instant) -> Duration {
        let until = self.routes[i].cooling_until.load(Ordering::Acquire);
        Duration::from_micros(until.saturating_sub(self.micros(now)))
    }

    fn cooling(&self, i: usize, now: Instant) -> bool {
        self.cooldowns && !self.cooling_left(i, now).is_zero()
    }

    /// What is left of each upstream's cooldown, in the order configured.
    pub(crate) fn cooling_all(&self, now: Instant) -> Vec<Duration> {
        (0..self.routes.len())
            .map(|i| self.cooling_left(i, now))
            .collect()
    }

    /// Cools upstream `i` down for `wait` from `now` (a cooldown already
    /// running past that is kept). Returns true if and only if it was
    /// marked: cooldowns are on and `wait` is above zero.
    pub(crate) fn cool(&self, i: usize, wait: Duration, now: Instant) -> bool {
        if !self.cooldowns || wait.is_zero() {
            return false;
        }
        let until = self.micros(now + wait);
        self.routes[i]
            .cooling_until
            .fetch_max(until, Ordering::AcqRel);
        true
    }

    /// How long an upstream that refused with `headers` is to cool down:
    /// its Retry-After (`retry-after-ms` first, then `retry-after` in
    /// seconds or as an HTTP date), else `cooldown`.
    pub(crate) fn cooldown_for(&self, headers: Option<&HeaderMap>) -> Duration {
        let text = |name: &str| headers?.get(name)?.to_str().ok();
        wire::parse_retry_after(text(RETRY_AFTER_MS), text(RETRY_AFTER), SystemTime::now())
            .unwrap_or(self.cooldown)
    }

    /// When every upstream is cooling at `now`: the shortest cooldown left
    /// (the Retry-After of an `all_upstreams_cooling` refusal). None while
    /// one is not, and always without cooldowns.
    pub(crate) fn all_cooling(&self, now: Instant) -> Option<Duration> {
        if !self.cooldowns {
            return None;
        }
        let mut shortest = Duration::MAX;
        for i in 0..self.routes.len() {
            let left = self.cooling_left(i, now);
            if left.is_zero() {
                return None;
            }
            shortest = shortest.min(left);
        }
        Some(shortest)
    }

    /// The share of the upstreams' weight not cooling at `now`, from 0 to
    /// 1; never below the smallest upstream's share, so that jobs already
    /// queued still leave the queue (to be refused at dispatch if every
    /// upstream is still cooling then). 1 without cooldowns.
    pub(crate) fn share(&self, now: Instant) -> f64 {
        if !self.cooldowns {
            return 1.0;
        }
        let mut open = 0u64;
        let mut least = u64::MAX;
        for (i, r) in self.routes.iter().enumerate() {
            least = least.min(u64::from(r.weight));
            if !self.cooling(i, now) {
                open += u64::from(r.weight);
            }
        }
        open.max(least) as f64 / self.total_weight as f64
    }

    /// The upstream to send a request to next: not yet `tried` by it and
    /// not cooling at `now`, by the routing. None when there is none.
    pub(crate) fn pick(&self, tried: Tried, now: Instant) -> Option<usize> {
        let open = |i: usize| !tried.has(i) && !self.cooling(i, now);
        if self.routes.len() == 1 {
            return open(0).then_some(0);
        }
        match (&self.current, self.routing) {
            (Some(current), Routing::Weighted) => {
                let mut current = current.lock().unwrap_or_else(|e| e.into_inner());
                smooth_weighted(&mut current, &self.routes, open)
            }
            _ => self.order.iter().copied().find(|&i| open(i)),
        }
    }

    /// The first upstream in failover order not cooling (for reads such as
    /// `/v1/models`, which are not routed by weight); the first of all if
    /// all are cooling.
    pub(crate) fn first_open(&self, now: Instant) -> usize {
        self.order
            .iter()
            .copied()
            .find(|&i| !self.cooling(i, now))
            .unwrap_or(self.order[0])
    }
}

/// One pick of a smooth weighted round robin among the routes `open`
/// allows: each gains its weight, the highest is picked and loses the sum
/// of the weights that took part. Over any run of picks with the same
/// routes open, each is picked in proportion to its weight, spread out
/// (weights 3 and 1 give a a b a, not a a a b).
fn smooth_weighted(
    current: &mut [i64],
    routes: &[Route],
    open: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut best: Option<usize> = None;
    let mut total = 0i64;
    for (i, r) in routes.iter().enumerate() {
        if !open(i) {
            continue;
        }
        current[i] += i64::from(r.weight);
        total += i64::from(r.weight);
        if best.is_none_or(|b| current[i] > current[b]) {
            best = Some(i);
        }
    }
    let b = best?;
    current[b] -= total;
    Some(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Mode, UpstreamConfig};

    fn upstream(name: &str, weight: u32, priority: u32) -> UpstreamConfig {
        UpstreamConfig {
            name: name.into(),
            url: Some(format!("http://127.0.0.1:9/{name}")),
            provider: None,
            weight,
            priority,
        }
    }

    fn router(routing: Routing, upstreams: Vec<UpstreamConfig>) -> Router {
        let mut c = GatewayConfig::new(Mode::Bounded, "");
        c.upstreams = upstreams;
        c.routing = routing;
        c.cooldown = Duration::from_secs(5);
        c.validate().unwrap();
        Router::new(&c)
    }

    #[test]
    fn failover_goes_by_priority_then_by_the_order_written() {
        let r = router(
            Routing::Failover,
            vec![
                upstream("c", 1, 2),
                upstream("a", 1, 0),
                upstream("b", 1, 2),
            ],
        );
        let now = Instant::now();
        let mut tried = Tried::default();
        let mut seen = Vec::new();
        while let Some(i) = r.pick(tried, now) {
            seen.push(r.route(i).name.as_str());
            tried.add(i);
        }
        assert_eq!(seen, ["a", "c", "b"], "once each");
        assert_eq!(r.pick(Tried::default(), now), Some(1), "always a first");
        let uri = r.route(1).uri("/v1/x?y=1").unwrap();
        assert_eq!(uri.to_string(), "http://127.0.0.1:9/a/v1/x?y=1");
        // Sent on, the caller's path goes under the next one's prefix.
        let on = r.route(0).uri(r.route(1).path_of(&uri)).unwrap();
        assert_eq!(on.to_string(), "http://127.0.0.1:9/c/v1/x?y=1");
    }

    #[test]
    fn a_cooling_upstream_is_left_out_until_its_cooldown_ends() {
        let r = router(
            Routing::Failover,
            vec![upstream("a", 1, 0), upstream("b", 1, 1)],
        );
        let now = Instant::now();
        assert!(r.cool(0, Duration::from_secs(2), now));
        assert_eq!(r.pick(Tried::default(), now), Some(1));
        let later = now + Duration::from_millis(1500);
        assert_eq!(r.cooling_left(0, later), Duration::from_millis(500));
        assert_eq!(r.pick(Tried::default(), later), Some(1));
        let after = now + Duration::from_secs(2);
        assert_eq!(r.pick(Tried::default(), after), Some(0), "back in");
        // A shorter cooldown does not cut a longer one short.
        assert!(r.cool(0, Duration::from_secs(10), now));
        assert!(r.cool(0, Duration::from_secs(1), now));
        assert_eq!(r.cooling_left(0, now), Duration::from_secs(10));
        assert!(!r.cool(1, Duration::ZERO, now), "a zero wait marks nothing");
    }

    #[test]
    fn when_all_cool_the_shortest_cooldown_left_is_the_retry_after() {
        let r = router(
            Routing::Failover,
            vec![upstream("a", 1, 0), upstream("b", 1, 1)],
        );
        let now = Instant::now();
        r.cool(0, Duration::from_secs(30), now);
        assert_eq!(r.all_cooling(now), None, "b is open");
        r.cool(1, Duration::from_millis(2500), now);
        let at = now + Duration::from_millis(500);
        assert_eq!(r.all_cooling(at), Some(Duration::from_secs(2)));
        assert_eq!(r.pick(Tried::default(), at), None);
        assert_eq!(r.first_open(at), 0, "reads still go somewhere");
        let (secs, ms) = wire::retry_after_values(r.all_cooling(at).unwrap());
        assert_eq!((secs, ms), (2, 2000));
        assert_eq!(r.all_cooling(now + Duration::from_secs(3)), None);
    }

    #[test]
    fn without_cooldowns_nothing_is_marked() {
        let mut c = GatewayConfig::new(Mode::Bounded, "");
        c.upstreams = vec![upstream("a", 1, 0), upstream("b", 1, 1)];
        c.cooldowns = Some(false);
        let r = Router::new(&c);
        let now = Instant::now();
        assert!(!r.cool(0, Duration::from_secs(5), now));
        assert_eq!(
            r.pick(Tried::default(), now),
            Some(0),
            "tried again at once"
        );
        assert_eq!(r.all_cooling(now), None);
        assert_eq!(r.share(now), 1.0);
        // A lone `upstream` has none by default.
        let lone = Router::new(&GatewayConfig::new(Mode::Naive, "http://127.0.0.1:9"));
        assert!(!lone.cools() && !lone.named);
        assert!(!lone.cool(0, Duration::from_secs(5), now));
        assert_eq!(lone.route(0).name, "default");
    }

    #[test]
    fn weighted_picks_follow_the_weights_spread_out() {
        let r = router(
            Routing::Weighted,
            vec![upstream("a", 3, 0), upstream("b", 1, 0)],
        );
        let now = Instant::now();
        let picks: String = (0..8)
            .map(|_| r.route(r.pick(Tried::default(), now).unwrap()).name.clone())
            .collect();
        // 3 and 1: a a b a, again and again (ties go to the first written).
        assert_eq!(picks, "aabaaaba");
        // Among those not cooling only; and a request's own tries are left out.
        r.cool(0, Duration::from_secs(5), now);
        for _ in 0..4 {
            assert_eq!(r.pick(Tried::default(), now), Some(1));
        }
        let mut tried = Tried::default();
        tried.add(1);
        assert_eq!(r.pick(tried, now), None);
    }

    #[test]
    fn the_share_not_cooling_is_by_weight() {
        let r = router(
            Routing::Failover,
            vec![upstream("a", 3, 0), upstream("b", 1, 1)],
        );
        let now = Instant::now();
        assert_eq!(r.share(now), 1.0);
        r.cool(0, Duration::from_secs(5), now);
        assert_eq!(r.share(now), 0.25);
        r.cool(1, Duration::from_secs(5), now);
        assert_eq!(r.share(now), 0.25, "never below the smallest share");
    }

    #[test]
    fn the_cooldown_is_the_retry_after_given_else_the_configured_one() {
        let r = router(Routing::Failover, vec![upstream("a", 1, 0)]);
        let mut h = HeaderMap::new();
        assert_eq!(r.cooldown_for(None), Duration::from_secs(5));
        assert_eq!(r.cooldown_for(Some(&h)), Duration::from_secs(5));
        h.insert("retry-after", HeaderValue::from_static("7"));
        assert_eq!(r.cooldown_for(Some(&h)), Duration::from_secs(7));
        h.insert("retry-after-ms", HeaderValue::from_static("1250"));
        assert_eq!(r.cooldown_for(Some(&h)), Duration::from_millis(1250));
        // An HTTP date is read as such: one in the past means no wait
        // (and marks nothing), not the configured cooldown.
        let mut date = HeaderMap::new();
        date.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(r.cooldown_for(Some(&date)), Duration::ZERO);
    }
}
