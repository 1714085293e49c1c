//! Routing events to deliveries by topic.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use regex::Regex;

use super::{
    Delivery, DeliveryPart, DeliveryParts, DeliveryReport, NOT_ATTEMPTED, deliver_in_key_order,
    deliver_parts,
};
use crate::error::{DeliveryError, Error, Result};
use crate::event::OutboxEvent;
use crate::topic::{TopicFilter, TopicPattern};

/// Sends each event to the delivery of its topic: the route named exactly by the topic first,
/// else the first glob route that matches it, in declaration order, else the default. An event no
/// route takes fails (it is retried and dead-lettered, never marked published).
///
/// Glob routes use shell-style patterns as Python's `fnmatch.fnmatchcase` reads them: `*` any
/// text (dots included), `?` one character, `[abc]` / `[a-z]` a class, `[!abc]` a negated class;
/// `[^a]` is the class "`^` or `a`"; `{` and `}` are literal; matching is case-sensitive.
///
/// ```
/// use hare_outbox_core::delivery::TopicRouter;
/// use hare_outbox_core::{FnDelivery, OutboxEvent};
///
/// let router = TopicRouter::new()
///     .route("library.loan.*", FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }))?
///     .route("notify.*", FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }))?
///     .with_default(FnDelivery::new(|_e: OutboxEvent| async { Ok(()) }));
/// assert_eq!(router.route_of("library.loan.created"), Some("library.loan.*"));
/// assert_eq!(router.route_of("billing.paid"), Some("(default)"));
/// # Ok::<(), hare_outbox_core::Error>(())
/// ```
#[derive(Default)]
pub struct TopicRouter {
    exact: HashMap<String, usize>,
    globs: Vec<(Regex, usize)>,
    routes: Vec<(String, Arc<dyn Delivery>)>,
    default: Option<Arc<dyn Delivery>>,
}

impl std::fmt::Debug for TopicRouter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicRouter")
            .field(
                "routes",
                &self
                    .routes
                    .iter()
                    .map(|(p, _)| p.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("default", &self.default.is_some())
            .finish()
    }
}

impl TopicRouter {
    /// A router with no routes and no default.
    pub fn new() -> Self {
        TopicRouter::default()
    }

    /// Adds a route: `pattern` is an exact topic (no `*`, `?` or `[`) or a glob.
    ///
    /// # Errors
    /// [`Error::Configuration`] for an empty pattern or one declared twice.
    pub fn route(mut self, pattern: &str, delivery: impl Delivery) -> Result<Self> {
        if pattern.is_empty() {
            return Err(Error::configuration("route pattern \"\" is empty"));
        }
        if self.routes.iter().any(|(p, _)| p == pattern) {
            return Err(Error::configuration(format!(
                "route {pattern:?} is declared twice"
            )));
        }
        let index = self.routes.len();
        if pattern.contains(['*', '?', '[']) {
            self.globs.push((fnmatch_regex(pattern)?, index));
        } else {
            self.exact.insert(pattern.to_owned(), index);
        }
        self.routes.push((pattern.to_owned(), Arc::new(delivery)));
        Ok(self)
    }

    /// Sets the delivery for topics no route takes. Unset by default: such events fail.
    pub fn with_default(mut self, delivery: impl Delivery) -> Self {
        self.default = Some(Arc::new(delivery));
        self
    }

    /// The pattern of the route `topic` goes to, `"(default)"`, or `None`.
    pub fn route_of(&self, topic: &str) -> Option<&str> {
        match self.index_of(topic) {
            Some(Some(i)) => Some(self.routes[i].0.as_str()),
            Some(None) => Some(DEFAULT_ROUTE),
            None => None,
        }
    }

    /// `Some(Some(route))`, `Some(None)` for the default, `None` when nothing takes the topic.
    fn index_of(&self, topic: &str) -> Option<Option<usize>> {
        if let Some(&i) = self.exact.get(topic) {
            return Some(Some(i));
        }
        if let Some((_, i)) = self.globs.iter().find(|(re, _)| re.is_match(topic)) {
            return Some(Some(*i));
        }
        self.default.as_ref().map(|_| None)
    }

    fn delivery_of(&self, topic: &str) -> Option<&Arc<dyn Delivery>> {
        match self.index_of(topic)? {
            Some(i) => Some(&self.routes[i].1),
            None => self.default.as_ref(),
        }
    }
}

/// The destination name of the default delivery: its [`Destination`](crate::Destination)
/// name, else `(default)`.
fn default_name(delivery: &dyn Delivery) -> String {
    delivery
        .destination()
        .map_or_else(|| DEFAULT_ROUTE.to_owned(), |spec| spec.name.clone())
}

/// How [`TopicRouter::route_of`] names the default route.
const DEFAULT_ROUTE: &str = "(default)";

impl TopicRouter {
    /// The destination name of route `i`: its delivery's [`Destination`](crate::Destination)
    /// name, else its pattern.
    fn route_name(&self, i: usize) -> String {
        let (pattern, delivery) = &self.routes[i];
        delivery
            .destination()
            .map_or_else(|| pattern.clone(), |spec| spec.name.clone())
    }

    /// The batch split by route, with the events no route takes and those held behind an
    /// earlier event of their key on another route settled.
    fn split_batch(&self, events: &[OutboxEvent]) -> DeliveryParts {
        let mut parts: Vec<DeliveryPart> = Vec::new();
        let mut part_of: HashMap<usize, usize> = HashMap::new();
        let mut settled: Vec<(usize, DeliveryReport)> = Vec::new();
        // The route of each key's first event; a later event of the key on another route waits.
        let mut key_route: HashMap<&str, usize> = HashMap::new();
        let mut held_keys: std::collections::HashSet<&str> = std::collections::HashSet::new();
        for (i, event) in events.iter().enumerate() {
            let key = event.ordering_key.as_deref();
            if key.is_some_and(|k| held_keys.contains(k)) {
                settled.push((i, Err(DeliveryError::not_attempted(NOT_ATTEMPTED)).into()));
                continue;
            }
            let Some(route) = self.index_of(&event.topic) else {
                settled.push((i, Err(unrouted(&event.topic)).into()));
                if let Some(k) = key {
                    held_keys.insert(k);
                }
                continue;
            };
            let slot = route.unwrap_or(usize::MAX);
            if let Some(k) = key
                && *key_route.entry(k).or_insert(slot) != slot
            {
                held_keys.insert(k);
                settled.push((i, Err(DeliveryError::not_attempted(NOT_ATTEMPTED)).into()));
                continue;
            }
            let (name, delivery) = match route {
                Some(r) => (self.route_name(r), self.routes[r].1.clone()),
                None => match &self.default {
                    Some(d) => (default_name(d.as_ref()), d.clone()),
                    None => {
                        settled.push((i, Err(unrouted(&event.topic)).into()));
                        continue;
                    }
                },
            };
            let n = *part_of.entry(slot).or_insert_with(|| {
                parts.push(DeliveryPart::new(name, delivery, Vec::new()));
                parts.len() - 1
            });
            parts[n].events.push(i);
        }
        DeliveryParts { parts, settled }
    }
}

fn unrouted(topic: &str) -> DeliveryError {
    DeliveryError::new(format!(
        "no route takes topic {topic:?} and the router has no default"
    ))
}

#[async_trait]
impl Delivery for TopicRouter {
    async fn deliver(&self, event: &OutboxEvent) -> std::result::Result<(), DeliveryError> {
        match self.delivery_of(&event.topic) {
            Some(delivery) => delivery.deliver(event).await,
            None => Err(unrouted(&event.topic)),
        }
    }

    /// Splits the batch by route, hands each part to its delivery's `deliver_batch` (all parts at
    /// once), and puts the results back in the batch's order.
    async fn deliver_batch(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<std::result::Result<(), DeliveryError>> {
        self.deliver_batch_reported(events, concurrency, timeout)
            .await
            .into_iter()
            .map(|report| report.result)
            .collect()
    }

    /// Like [`TopicRouter::deliver_batch`], keeping each route's records of its attempts.
    ///
    /// Each route's part goes out through [`deliver_in_key_order`] with its delivery, so a key's
    /// run keeps its order whatever the route's delivery. A key whose run changes route midway
    /// sends only the events before the change; the rest are reported [`NOT_ATTEMPTED`] and leased
    /// again later, after the first part is delivered. The parts run at the same time but share
    /// the relay's `concurrency`: each holds a share of it (at least 1) while it runs.
    async fn deliver_batch_reported(
        &self,
        events: &[OutboxEvent],
        concurrency: usize,
        timeout: Duration,
    ) -> Vec<DeliveryReport> {
        let split = self.split_batch(events);
        deliver_parts(split, events, concurrency, |_, delivery, batch, share| {
            Box::pin(async move {
                deliver_in_key_order(delivery.as_ref(), &batch, share, timeout).await
            })
        })
        .await
    }

    /// One part per route taking events of the batch, named by its delivery's
    /// [`Destination`](crate::Destination) name, else its pattern (`(default)` for the default
    /// delivery); see [`TopicRouter::deliver_batch_reported`] for the events held back.
    fn split(&self, events: &[OutboxEvent]) -> Option<DeliveryParts> {
        Some(self.split_batch(events))
    }

    /// Every topic but those only open routes take: for each route whose destination is paused,
    /// its pattern when it is a name or a `prefix*` glob and no route taking precedence over it
    /// (an exact route, an earlier glob) could take a topic it matches while still open; with
    /// the default paused, only topics some route's pattern (all names or `prefix*` globs)
    /// matches. Patterns that cannot be written as a topic filter leave their topics leasable:
    /// their events are leased and deferred to the destination's next probe instead.
    fn leasable_topics(&self, is_paused: &dyn Fn(&str) -> bool) -> TopicFilter {
        let route_paused = |i: usize| is_paused(&self.route_name(i));
        let as_filter = |pattern: &str| -> Option<TopicPattern> {
            let body = pattern.strip_suffix('*').unwrap_or(pattern);
            if body.contains(['*', '?', '[']) {
                return None;
            }
            TopicPattern::parse(pattern).ok()
        };
        let mut exclude = Vec::new();
        for (i, (pattern, _)) in self.routes.iter().enumerate() {
            if !route_paused(i) {
                continue;
            }
            let Some(own) = as_filter(pattern) else {
                continue;
            };
            // A topic it matches may go to an exact route or an earlier glob instead: exclude
            // only when every such route is paused too.
            let blocks_open_route = self.routes.iter().enumerate().any(|(j, (other, _))| {
                if j == i || route_paused(j) {
                    return false;
                }
                let exact = !other.contains(['*', '?', '[']);
                if exact {
                    return own.matches(other);
                }
                if j > i {
                    return false;
                }
                match as_filter(other) {
                    Some(TopicPattern::Prefix(q)) => match &own {
                        TopicPattern::Prefix(p) => {
                            p.starts_with(q.as_str()) || q.starts_with(p.as_str())
                        }
                        TopicPattern::Exact(n) => n.starts_with(q.as_str()),
                    },
                    Some(TopicPattern::Exact(n)) => own.matches(&n),
                    None => true,
                }
            });
            if !blocks_open_route {
                exclude.push(own);
            }
        }
        let include = match &self.default {
            Some(default) if is_paused(&default_name(default.as_ref())) => {
                let patterns: Option<Vec<TopicPattern>> =
                    self.routes.iter().map(|(p, _)| as_filter(p)).collect();
                patterns
            }
            _ => None,
        };
        TopicFilter::from_patterns(include, exclude)
    }
    /// `true`: the router keeps each key's order itself (see
    /// [`TopicRouter::deliver_batch_reported`]).
    fn keeps_key_order(&self) -> bool {
        true
    }

    async fn close(&self) -> std::result::Result<(), DeliveryError> {
        let mut first_error = None;
        for delivery in self
            .routes
            .iter()
            .map(|(_, d)| d)
            .chain(self.default.iter())
        {
            if let Err(e) = delivery.close().await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Translates a shell pattern to an anchored regex the way `fnmatch.translate` does.
fn fnmatch_regex(pattern: &str) -> Result<Regex> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::from("(?s)^");
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        i += 1;
        match c {
            '*' => {
                while i < chars.len() && chars[i] == '*' {
                    i += 1;
                }
                out.push_str(".*");
            }
            '?' => out.push('.'),
            '[' => {
                // Find the closing bracket: a `]` right after `[` or `[!` belongs to the class.
                let mut j = i;
                if j < chars.len() && chars[j] == '!' {
                    j += 1;
                }
                if j < chars.len() && chars[j] == ']' {
                    j += 1;
                }
                while j < chars.len() && chars[j] != ']' {
                    j += 1;
                }
                if j >= chars.len() {
                    out.push_str("\\[");
                    continue;
                }
                let body: String = chars[i..j].iter().collect();
                i = j + 1;
                let (negate, body) = match body.strip_prefix('!') {
                    Some(rest) => (true, rest.to_owned()),
                    None => (false, body),
                };
                let mut class = String::new();
                for ch in body.chars() {
                    // Escape what regex classes treat specially; keep `-` for ranges.
                    if matches!(ch, '\\' | '[' | ']' | '^' | '&' | '~') {
                        class.push('\\');
                    }
                    class.push(ch);
                }
                if class.is_empty() {
                    // `[!]` matches any character, `[]` nothing (as in Python).
                    out.push_str(if negate { "." } else { "(?!)" });
                } else {
                    out.push('[');
                    if negate {
                        out.push('^');
                    }
                    out.push_str(&class);
                    out.push(']');
                }
            }
            other => out.push_str(&regex::escape(&other.to_string())),
        }
    }
    out.push('$');
    Regex::new(&out).map_err(|e| {
        Error::configuration(format!(
            "route pattern {pattern:?} is not a valid glob: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delivery::FnDelivery;

    fn matches(pattern: &str, topic: &str) -> bool {
        fnmatch_regex(pattern).unwrap().is_match(topic)
    }

    #[test]
    fn globs_read_like_fnmatchcase() {
        assert!(matches("library.loan.*", "library.loan.created"));
        assert!(
            matches("library.*", "library.loan.created"),
            "* crosses dots"
        );
        assert!(!matches("library.*", "Library.loan"), "case-sensitive");
        assert!(matches("a?c", "abc") && !matches("a?c", "ac"));
        assert!(matches("[ab]x", "bx") && !matches("[ab]x", "cx"));
        assert!(matches("[!ab]x", "cx") && !matches("[!ab]x", "ax"));
        assert!(matches("[^a]x", "^x") && matches("[^a]x", "ax") && !matches("[^a]x", "bx"));
        assert!(
            matches("{a,b}", "{a,b}") && !matches("{a,b}", "a"),
            "braces are literal"
        );
        assert!(matches("[a-c]", "b") && !matches("[a-c]", "d"));
        assert!(
            matches("a.b", "a.b") && !matches("a.b", "axb"),
            "dots are literal"
        );
        assert!(
            matches("[", "[") && matches("x[", "x["),
            "an unclosed bracket is literal"
        );
        assert!(matches("[]]", "]"));
        assert!(matches("a\\b", "a\\b"));
    }

    fn ok() -> FnDelivery<
        impl Fn(OutboxEvent) -> futures::future::Ready<std::result::Result<(), DeliveryError>>,
    > {
        FnDelivery::new(|_e: OutboxEvent| futures::future::ready(Ok(())))
    }

    #[test]
    fn exact_first_then_globs_in_order_then_default() {
        let router = TopicRouter::new()
            .route("a.*", ok())
            .unwrap()
            .route("a.b.*", ok())
            .unwrap()
            .route("a.b.c", ok())
            .unwrap();
        assert_eq!(
            router.route_of("a.b.c"),
            Some("a.b.c"),
            "exact wins over an earlier glob"
        );
        assert_eq!(
            router.route_of("a.b.d"),
            Some("a.*"),
            "first matching glob in declaration order"
        );
        assert_eq!(router.route_of("z"), None);
        let router = router.with_default(ok());
        assert_eq!(router.route_of("z"), Some("(default)"));
        assert!(TopicRouter::new().route("", ok()).is_err());
        assert!(
            TopicRouter::new()
                .route("x", ok())
                .unwrap()
                .route("x", ok())
                .is_err()
        );
    }

    /// Three routes × 10 events each, relay concurrency 2: never more than 2 deliveries in
    /// flight in total (each route used to get the full limit).
    #[tokio::test]
    async fn routes_share_the_relay_concurrency() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let in_flight = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let slow = || {
            let (in_flight, most) = (in_flight.clone(), most.clone());
            FnDelivery::new(move |_e: OutboxEvent| {
                let (in_flight, most) = (in_flight.clone(), most.clone());
                async move {
                    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    Ok(())
                }
            })
        };
        let router = TopicRouter::new()
            .route("a", slow())
            .unwrap()
            .route("b", slow())
            .unwrap()
            .route("c", slow())
            .unwrap();
        let events: Vec<OutboxEvent> = (0..30)
            .map(|i| OutboxEvent::new(["a", "b", "c"][i % 3].to_owned(), serde_json::json!(i)))
            .collect();
        let reports = router
            .deliver_batch_reported(&events, 2, Duration::from_secs(5))
            .await;
        assert!(reports.iter().all(|r| r.result.is_ok()));
        assert!(
            most.load(Ordering::SeqCst) <= 2,
            "{} in flight",
            most.load(Ordering::SeqCst)
        );
        assert!(most.load(Ordering::SeqCst) >= 1);
    }

    /// A key whose run moves from one route to another sends only the part before the move; the
    /// rest is reported not attempted, and a key's events on one route go out in order.
    #[tokio::test]
    async fn a_run_that_changes_route_stops_at_the_change() {
        let seen: Arc<std::sync::Mutex<Vec<i64>>> = Arc::default();
        let record = |seen: &Arc<std::sync::Mutex<Vec<i64>>>| {
            let seen = seen.clone();
            FnDelivery::new(move |e: OutboxEvent| {
                let seen = seen.clone();
                async move {
                    seen.lock().unwrap().push(e.payload.as_i64().unwrap());
                    Ok(())
                }
            })
        };
        let router = TopicRouter::new()
            .route("a", record(&seen))
            .unwrap()
            .route("b", record(&seen))
            .unwrap();
        let keyed = |topic: &str, n: i64| OutboxEvent {
            ordering_key: Some("k".into()),
            ..OutboxEvent::new(topic.to_owned(), serde_json::json!(n))
        };
        let events = [keyed("a", 0), keyed("a", 1), keyed("b", 2), keyed("a", 3)];
        let reports = router
            .deliver_batch_reported(&events, 4, Duration::from_secs(5))
            .await;
        assert!(reports[0].result.is_ok() && reports[1].result.is_ok());
        for report in &reports[2..] {
            assert!(report.result.as_ref().unwrap_err().is_not_attempted());
        }
        assert_eq!(*seen.lock().unwrap(), vec![0, 1]);
    }

    /// The topics left out of leases follow which routes are paused, never taking a topic that
    /// a route still open would send.
    #[test]
    fn leasable_topics_leave_out_only_what_paused_routes_alone_take() {
        let router = TopicRouter::new()
            .route("billing.*", ok())
            .unwrap()
            .route("audit.login", ok())
            .unwrap()
            .route("audit.*", ok())
            .unwrap()
            .route("x?z", ok())
            .unwrap()
            .with_default(crate::Destination::new("rest", ok()).unwrap());
        let leasable = |paused: &[&str]| {
            let paused: Vec<String> = paused.iter().map(|s| s.to_string()).collect();
            router.leasable_topics(&|name| paused.iter().any(|p| p == name))
        };
        assert!(leasable(&[]).is_all());
        let f = leasable(&["billing.*"]);
        assert!(!f.matches("billing.paid") && f.matches("audit.x") && f.matches("other"));
        // audit.* is paused but audit.login (exact, open) takes one of its topics: nothing is
        // left out, the paused route's events are deferred after the lease instead.
        let f = leasable(&["audit.*"]);
        assert!(f.is_all(), "{f:?}");
        let f = leasable(&["audit.*", "audit.login"]);
        assert!(!f.matches("audit.login") && !f.matches("audit.x") && f.matches("billing.a"));
        // A glob that is not a prefix cannot be written as a filter.
        assert!(leasable(&["x?z"]).is_all());
        // The default paused: only topics some route takes (x?z cannot be written: no filter).
        assert!(leasable(&["rest"]).is_all());
        let router = TopicRouter::new()
            .route("billing.*", ok())
            .unwrap()
            .with_default(crate::Destination::new("rest", ok()).unwrap());
        let f = router.leasable_topics(&|name| name == "rest");
        assert!(f.matches("billing.paid") && !f.matches("other"));
        let f = router.leasable_topics(&|name| name == "rest" || name == "billing.*");
        assert!(!f.matches("billing.paid") && !f.matches("other"));
    }

    /// Parts are named by the route's destination name, else its pattern, and a route's events
    /// keep their batch order.
    #[test]
    fn split_names_parts_by_destination_or_pattern() {
        let router = TopicRouter::new()
            .route("a", crate::Destination::new("alpha", ok()).unwrap())
            .unwrap()
            .route("b.*", ok())
            .unwrap();
        let events = [
            OutboxEvent::new("a".to_owned(), serde_json::json!(0)),
            OutboxEvent::new("b.x".to_owned(), serde_json::json!(1)),
            OutboxEvent::new("a".to_owned(), serde_json::json!(2)),
            OutboxEvent::new("nowhere".to_owned(), serde_json::json!(3)),
        ];
        let split = router.split(&events).unwrap();
        let parts: Vec<(&str, &[usize])> = split
            .parts
            .iter()
            .map(|p| (p.name.as_str(), p.events.as_slice()))
            .collect();
        assert_eq!(parts, [("alpha", &[0, 2][..]), ("b.*", &[1][..])]);
        assert_eq!(split.settled.len(), 1);
        assert_eq!(split.settled[0].0, 3);
        assert!(
            split.settled[0]
                .1
                .result
                .as_ref()
                .unwrap_err()
                .to_string()
                .contains("no route")
        );
    }
}
