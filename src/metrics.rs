//! The proxy's metrics: one Prometheus registry with typed families, counted at the edges
//! where the facts are (a completed decision record, a policy fetch, a cache lookup, a tunnel)
//! and encoded as OpenMetrics text for the admin API's `/metrics` (which answers it, or the
//! classic Prometheus text made from it, by the scraper's `Accept`: [`Exposition`]).
//!
//! Owns: every metric name, its labels and help text (the reference is `docs/admin.md`), and
//! the one call the request path makes per request ([`Metrics::record`]), which also feeds
//! the console's per-agent counts ([`AgentTally`]). Values that other
//! modules already count (written and refused log records, minted certificates, open
//! connections, the policy cache's weight) are copied in at scrape time ([`Scraped`]) rather
//! than counted twice.
//!
//! Never: allocates per request (labels are small enums, `&'static str` or a reason code that
//! is almost always borrowed; an agent's name is copied once, on its first request), decides anything, or does I/O.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::time::Duration;

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::audit::{AgentTally, DecisionRecord, Outcome};
use crate::policy::{FetchError, FetchOutcome};

mod exposition;
pub use exposition::Exposition;

/// Requests by what happened and which source decided.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// `event.outcome`: allow, deny, needs_approval, rate_limited, would_deny, error.
    outcome: &'static str,
    /// The source of the first (deciding) reason, or `none` when the record has no reason.
    source: &'static str,
}

/// Blocked requests by the code of their deciding reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BlockLabels {
    reason: Cow<'static, str>,
}

/// Policy fetches by file and what came back.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FetchLabels {
    /// The path fetched, e.g. `/robots.txt`.
    file: &'static str,
    status: FetchStatus,
}

/// A fetch's HTTP status, or why there was none.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
enum FetchStatus {
    Code(u16),
    Timeout,
    NetworkError,
    Unreachable,
    TooManyRedirects,
    InsecureRedirect,
    AtCapacity,
    Parent,
}

impl EncodeLabelValue for FetchStatus {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        use std::fmt::Write as _;
        match self {
            FetchStatus::Code(code) => write!(encoder, "{code}"),
            FetchStatus::Timeout => encoder.write_str("timeout"),
            FetchStatus::NetworkError => encoder.write_str("network_error"),
            FetchStatus::Unreachable => encoder.write_str("unreachable"),
            FetchStatus::TooManyRedirects => encoder.write_str("too_many_redirects"),
            FetchStatus::InsecureRedirect => encoder.write_str("insecure_redirect"),
            FetchStatus::AtCapacity => encoder.write_str("at_capacity"),
            FetchStatus::Parent => encoder.write_str("parent_failed"),
        }
    }
}

/// Requests a human was asked about, by how their wait ended (`agentgate.approval.decision`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ApprovalLabels {
    decision: &'static str,
}

/// Shared policy store calls by result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    result: &'static str,
}

/// Lines of a recording not written, by why.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DroppedLabels {
    reason: &'static str,
}

/// Config reloads by result.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReloadLabels {
    result: &'static str,
}

/// Facts other modules keep, copied into the registry when `/metrics` is scraped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Scraped {
    /// Decision-log lines written and flushed (`crate::audit::AuditLog::written_records`).
    pub audit_written: u64,
    /// Records not written: refused, cancelled or lost (`AuditLog::failed_records`).
    pub audit_failures: u64,
    /// Records queued and not yet written or lost.
    pub audit_queue_depth: u64,
    /// Leaf certificates minted (`crate::tls::LeafCertCache::minted_count`).
    pub certs_minted: u64,
    /// Connections open on the proxy port.
    pub connections: u64,
    /// Origins in the policy cache.
    pub cache_origins: u64,
    /// Bytes of parsed policies the cache holds (its weighted size).
    pub cache_weight_bytes: u64,
    /// Limit checks the shared store (`[limits] store = "redis"`) did not answer in time or
    /// answered with an error, each settled by `[limits.redis] on_failure`; 0 in memory.
    pub limits_store_failures: u64,
    /// Requests held for a human's approval now (`crate::approvals::Approvals`).
    pub approvals_pending: u64,
}

/// Every metric of one proxy. Cheap to share behind an `Arc`; every method takes `&self`.
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    blocks: Family<BlockLabels, Counter>,
    rate_limited: Counter,
    approvals: Family<ApprovalLabels, Counter>,
    approvals_pending: Gauge,
    approvals_store_errors: Counter,
    request_duration: Histogram,
    policy_fetches: Family<FetchLabels, Counter>,
    policy_store: Family<ResultLabels, Counter>,
    policy_archive: Family<ResultLabels, Counter>,
    record_dropped: Family<DroppedLabels, Counter>,
    cache_hits: Counter,
    cache_misses: Counter,
    cache_evictions: Counter,
    tunnels: Gauge,
    config_reloads: Family<ReloadLabels, Counter>,
    audit_written: Counter,
    audit_failures: Counter,
    audit_queue_depth: Gauge,
    certs_minted: Counter,
    limits_store_failures: Counter,
    limits_store: StoreMetrics,
    upstream: UpstreamMetrics,
    connections: Gauge,
    cache_origins: Gauge,
    cache_weight_bytes: Gauge,
    agents: AgentTally,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl Metrics {
    /// A registry holding every family at zero, all named `agentgate_*`.
    pub fn new() -> Self {
        let mut m = Metrics {
            registry: Registry::with_prefix("agentgate"),
            requests: Family::default(),
            blocks: Family::default(),
            rate_limited: Counter::default(),
            approvals: Family::default(),
            approvals_pending: Gauge::default(),
            approvals_store_errors: Counter::default(),
            // 1 ms to about 33 s: a cached allow is a millisecond, a first fetch up to the
            // 10 s fetch timeout, a long download more.
            request_duration: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            policy_fetches: Family::default(),
            policy_store: Family::default(),
            policy_archive: Family::default(),
            record_dropped: Family::default(),
            cache_hits: Counter::default(),
            cache_misses: Counter::default(),
            cache_evictions: Counter::default(),
            tunnels: Gauge::default(),
            config_reloads: Family::default(),
            audit_written: Counter::default(),
            audit_failures: Counter::default(),
            audit_queue_depth: Gauge::default(),
            certs_minted: Counter::default(),
            limits_store_failures: Counter::default(),
            limits_store: StoreMetrics::default(),
            upstream: UpstreamMetrics::default(),
            connections: Gauge::default(),
            cache_origins: Gauge::default(),
            cache_weight_bytes: Gauge::default(),
            agents: AgentTally::default(),
        };
        let r = &mut m.registry;
        r.register("requests", "Requests decided, by outcome and deciding source", m.requests.clone());
        r.register("blocks", "Requests blocked (403, 407 or 429), by deciding reason code", m.blocks.clone());
        r.register("rate_limited", "Requests refused by a rate or concurrency limit (429)", m.rate_limited.clone());
        r.register(
            "approvals",
            "Requests that needed a human's approval, by how it ended (approved, denied, timeout, hung_up, queue_full, shutdown, remembered)",
            m.approvals.clone(),
        );
        r.register("approvals_pending", "Requests held for a human's approval now", m.approvals_pending.clone());
        r.register(
            "approvals_store_errors",
            "Calls to the fleet's approvals store ([approvals] store = \"redis\") that failed or timed out; the replica held and decided on its own",
            m.approvals_store_errors.clone(),
        );
        r.register(
            "request_duration_seconds",
            "Request head to response head (to tunnel open for CONNECT), every outcome",
            m.request_duration.clone(),
        );
        r.register("policy_fetches", "Policy file fetches, by file and HTTP status or error", m.policy_fetches.clone());
        r.register(
            "policy_store",
            "Shared policy store ([cache] store = \"redis\") lookups and calls, by result (hit, miss, corrupt, wait_timeout, failure)",
            m.policy_store.clone(),
        );
        r.register(
            "policy_archive",
            "Policy file bodies written to or removed from the policy archive ([audit] archive_dir), by result (stored, evicted, failed)",
            m.policy_archive.clone(),
        );
        r.register(
            "record_dropped",
            "Exchanges and policy files not recorded under [record] dir, by reason (queue_full, max_bytes, write_failed)",
            m.record_dropped.clone(),
        );
        r.register("policy_cache_hits", "Policy lookups answered from the cache", m.cache_hits.clone());
        r.register("policy_cache_misses", "Policy lookups that loaded an origin first", m.cache_misses.clone());
        r.register(
            "policy_cache_evictions",
            "Origins evicted from the policy cache to stay within [cache] bounds",
            m.cache_evictions.clone(),
        );
        r.register("policy_cache_origins", "Origins in the policy cache", m.cache_origins.clone());
        r.register(
            "policy_cache_weight_bytes",
            "Bytes of parsed policies in the cache (bounded by [cache] max_bytes)",
            m.cache_weight_bytes.clone(),
        );
        r.register("connections", "Client connections open on the proxy port", m.connections.clone());
        r.register("tunnels", "CONNECT tunnels open (intercepted or passthrough)", m.tunnels.clone());
        r.register("certs_minted", "Leaf certificates minted for intercepted hosts", m.certs_minted.clone());
        r.register("audit_records_written", "Decision-log lines written and flushed", m.audit_written.clone());
        r.register(
            "audit_failures",
            "Decision records not written (refused, cancelled, or lost to an I/O error)",
            m.audit_failures.clone(),
        );
        r.register("audit_queue_depth", "Decision records queued for the writer", m.audit_queue_depth.clone());
        r.register(
            "limits_store_failures",
            "Limit checks the shared store did not answer (timeout or error), settled by [limits.redis] on_failure",
            m.limits_store_failures.clone(),
        );
        r.register(
            "limits_store_seconds",
            "Round trip of each limit check to the shared store, answered or not",
            m.limits_store.round_trips.clone(),
        );
        r.register(
            "limits_store_fallbacks",
            "Limit checks counted in this replica only because the shared store did not answer (on_failure = local)",
            m.limits_store.fallbacks.clone(),
        );
        r.register("config_reloads", "Config reloads, by result (ok or error)", m.config_reloads.clone());
        m.upstream.register(r);
        m
    }

    /// Counts one completed decision record: the request by outcome and deciding source, a
    /// block by its reason code, a rate-limited request, how a wait for approval ended, and its
    /// duration. The one call the request path makes, where the record is completed.
    pub fn record(&self, record: &DecisionRecord) {
        let deciding = record.reasons.first();
        let source = deciding.map_or("none", |reason| reason.source.as_str());
        self.requests.get_or_create(&RequestLabels { outcome: record.outcome.as_str(), source }).inc();
        if matches!(record.outcome, Outcome::Deny | Outcome::NeedsApproval | Outcome::RateLimited) {
            let reason = Cow::Borrowed(deciding.map_or("none", |reason| reason.code.as_str()));
            self.blocks.get_or_create(&BlockLabels { reason }).inc();
        }
        if record.outcome == Outcome::RateLimited {
            self.rate_limited.inc();
        }
        if let Some(approval) = &record.approval {
            self.approvals.get_or_create(&ApprovalLabels { decision: approval.decision.as_str() }).inc();
        }
        if let Some(duration) = record.duration {
            self.request_duration.observe(duration.as_secs_f64());
        }
        self.agents.count(record);
    }

    /// Requests per outcome for each agent since start (the console's `/agents/summary`).
    pub fn agents(&self) -> &AgentTally {
        &self.agents
    }

    /// The shared limits store's metrics, for [`crate::limits::Limiter::from_config`].
    pub fn limits_store(&self) -> StoreMetrics {
        self.limits_store.clone()
    }

    /// The upstream sockets' gauges and counters, for [`crate::proxy`]'s socket budget.
    pub fn upstream(&self) -> UpstreamMetrics {
        self.upstream.clone()
    }

    /// Counts one policy fetch of `file` (its path) and what it came back with.
    pub fn policy_fetch(&self, file: &'static str, outcome: &FetchOutcome) {
        let status = match outcome {
            FetchOutcome::Response { status, .. } => FetchStatus::Code(*status),
            FetchOutcome::Failed(error) => match error {
                FetchError::Timeout => FetchStatus::Timeout,
                FetchError::Network(_) => FetchStatus::NetworkError,
                FetchError::Unreachable { .. } => FetchStatus::Unreachable,
                FetchError::TooManyRedirects => FetchStatus::TooManyRedirects,
                FetchError::InsecureRedirect => FetchStatus::InsecureRedirect,
                FetchError::AtCapacity { .. } => FetchStatus::AtCapacity,
                FetchError::Parent { .. } => FetchStatus::Parent,
            },
        };
        self.policy_fetches.get_or_create(&FetchLabels { file, status }).inc();
    }

    /// Counts a revalidation of `file` the origin answered `304 Not Modified`: a fetch with
    /// status `304` that renewed the stored copy.
    pub fn policy_not_modified(&self, file: &'static str) {
        self.policy_fetches.get_or_create(&FetchLabels { file, status: FetchStatus::Code(304) }).inc();
    }

    /// Counts a call to the fleet's approvals store that failed or timed out
    /// (`crate::approvals`, `[approvals] store = "redis"`).
    pub fn approvals_store_error(&self) {
        self.approvals_store_errors.inc();
    }

    /// Counts one result of the shared policy store (`crate::fetch`, `[cache] store =
    /// "redis"`): `hit`, `miss`, `corrupt`, `wait_timeout` or `failure` (Redis did not answer
    /// in time or answered an error, and the replica fetched for itself).
    pub fn policy_store(&self, result: &'static str) {
        self.policy_store.get_or_create(&ResultLabels { result }).inc();
    }

    /// Counts one line of a recording not written (`crate::record`): `queue_full` (the
    /// writer was behind), `max_bytes` (past `[record] max_bytes`) or `write_failed`.
    pub fn record_dropped(&self, reason: &'static str) {
        self.record_dropped.get_or_create(&DroppedLabels { reason }).inc();
    }

    /// Counts one body of the policy archive (`crate::archive`): `stored` (a new body
    /// written), `evicted` (removed, oldest first, past `[audit] archive_max_bytes`) or
    /// `failed` (a write the disk refused).
    pub fn policy_archive(&self, result: &'static str) {
        self.policy_archive.get_or_create(&ResultLabels { result }).inc();
    }

    /// Counts a policy lookup: `hit` when the origin was cached, else a miss (it was loaded).
    pub fn policy_lookup(&self, hit: bool) {
        if hit {
            self.cache_hits.inc()
        } else {
            self.cache_misses.inc()
        };
    }

    /// Counts an origin the policy cache evicted to stay within its bounds.
    pub fn policy_eviction(&self) {
        self.cache_evictions.inc();
    }

    /// Counts a CONNECT tunnel as open until the returned guard is dropped.
    pub fn tunnel_opened(&self) -> OpenTunnel {
        self.tunnels.inc();
        OpenTunnel(self.tunnels.clone())
    }

    /// Counts one config reload: `ok` when the new config is in force, else an error (the
    /// file was rejected and the last good config keeps running).
    pub fn config_reload(&self, ok: bool) {
        let result = if ok { "ok" } else { "error" };
        self.config_reloads.get_or_create(&ReloadLabels { result }).inc();
    }

    /// Config reloads so far: put in force, and rejected.
    pub fn config_reloads(&self) -> (u64, u64) {
        let count = |result| self.config_reloads.get_or_create(&ReloadLabels { result }).get();
        (count("ok"), count("error"))
    }

    /// The registry as OpenMetrics text (which Prometheus reads), with `scraped` copied in.
    pub fn encode(&self, scraped: Scraped) -> String {
        // Counters kept elsewhere only grow, so storing their current value keeps them
        // monotonic even when two scrapes race.
        self.audit_written.inner().fetch_max(scraped.audit_written, Ordering::Relaxed);
        self.audit_failures.inner().fetch_max(scraped.audit_failures, Ordering::Relaxed);
        self.certs_minted.inner().fetch_max(scraped.certs_minted, Ordering::Relaxed);
        self.limits_store_failures.inner().fetch_max(scraped.limits_store_failures, Ordering::Relaxed);
        self.audit_queue_depth.set(gauge(scraped.audit_queue_depth));
        self.approvals_pending.set(gauge(scraped.approvals_pending));
        self.connections.set(gauge(scraped.connections));
        self.cache_origins.set(gauge(scraped.cache_origins));
        self.cache_weight_bytes.set(gauge(scraped.cache_weight_bytes));
        let mut text = String::new();
        // Writing into a String cannot fail, and our label values hold no invalid characters.
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::error!(%error, "cannot encode the metrics; this is a bug");
        }
        text
    }
}

fn gauge(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// What the shared limits store (`[limits] store = "redis"`) counts itself: its round trips
/// and its fallbacks. Its failures are read at scrape time ([`Scraped`]), as they are also
/// what its log line reports.
#[derive(Clone, Debug)]
pub struct StoreMetrics {
    round_trips: Histogram,
    fallbacks: Counter,
}

impl Default for StoreMetrics {
    /// Registered nowhere: for a store built outside a proxy (benches).
    fn default() -> Self {
        // 0.1 ms to about 3.3 s: a loopback Redis answers in well under a millisecond, and
        // `[limits.redis] timeout` is at most 5 s (the last bucket is +Inf).
        StoreMetrics {
            round_trips: Histogram::new(exponential_buckets(0.0001, 2.0, 16)),
            fallbacks: Counter::default(),
        }
    }
}

impl StoreMetrics {
    /// Observes one check's round trip, from sending it to its answer, error or timeout.
    pub fn round_trip(&self, elapsed: Duration) {
        self.round_trips.observe(elapsed.as_secs_f64());
    }

    /// Counts one check settled by this replica's own store instead of the shared one.
    pub fn fallback(&self) {
        self.fallbacks.inc();
    }
}

/// What the upstream socket budget counts (`[upstream] max_connections`, `crate::proxy`):
/// sockets open and idle, the cap, waits for a socket, refusals at the cap and idle
/// connections closed to make room. Updated where it happens: per socket, and the idle
/// gauge once when a pooled connection is taken or given back.
#[derive(Clone, Debug, Default)]
pub struct UpstreamMetrics {
    open: Gauge,
    idle: Gauge,
    max: Gauge,
    waits: Counter,
    at_capacity: Counter,
    idle_closed: Counter,
}

impl UpstreamMetrics {
    fn register(&self, r: &mut Registry) {
        r.register(
            "upstream_connections",
            "TCP connections to origins open now: pooled (busy or idle), policy fetches, WebSocket, passthrough tunnels",
            self.open.clone(),
        );
        r.register("upstream_connections_idle", "Pooled connections to origins idle now", self.idle.clone());
        r.register(
            "upstream_connections_max",
            "The cap on connections to origins ([upstream] max_connections, or the value derived from the open-file limit)",
            self.max.clone(),
        );
        r.register(
            "upstream_connection_waits",
            "New connections to origins that found every socket under the cap busy and waited for one",
            self.waits.clone(),
        );
        r.register(
            "upstream_at_capacity",
            "New connections to origins refused after [upstream] connect_queue_timeout at the cap (a 503)",
            self.at_capacity.clone(),
        );
        r.register(
            "upstream_idle_closed",
            "Idle pooled connections closed, least recently used first, to make room under the cap",
            self.idle_closed.clone(),
        );
    }

    /// The cap in force.
    pub(crate) fn set_max(&self, max: usize) {
        self.max.set(i64::try_from(max).unwrap_or(i64::MAX));
    }

    /// Counts a socket as open until the returned guard is dropped.
    pub(crate) fn opened(&self) -> OpenSocket {
        self.open.inc();
        OpenSocket(self.open.clone())
    }

    /// Pooled connections idle now.
    pub(crate) fn set_idle(&self, idle: usize) {
        self.idle.set(i64::try_from(idle).unwrap_or(i64::MAX));
    }

    /// A new connection waited for a socket.
    pub(crate) fn waited(&self) {
        self.waits.inc();
    }

    /// A new connection was refused at the cap.
    pub(crate) fn refused(&self) {
        self.at_capacity.inc();
    }

    /// An idle connection was closed to make room.
    pub(crate) fn idle_closed(&self) {
        self.idle_closed.inc();
    }
}

/// An upstream socket counted as open; dropping it counts it closed.
#[derive(Debug)]
pub struct OpenSocket(Gauge);

impl Drop for OpenSocket {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// A tunnel counted as open; dropping it counts it closed.
#[derive(Debug)]
pub struct OpenTunnel(Gauge);

impl Drop for OpenTunnel {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::*;
    use crate::policy::operator::Mode;
    use crate::policy::{AgentsMdCode, Reason, RobotsCode};

    fn record(outcome: Outcome, reason: Option<Reason>) -> DecisionRecord {
        let client = SocketAddr::from(([127, 0, 0, 1], 5000));
        let mut record = DecisionRecord::new(outcome, Mode::Enforce, client, "bot", "GET", "http://e.test/");
        record.reasons.extend(reason);
        record.duration = Some(Duration::from_millis(3));
        record
    }

    fn sample<'a>(text: &'a str, line_start: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(line_start)).and_then(|l| l.rsplit(' ').next())
    }

    #[test]
    fn a_record_counts_its_outcome_source_block_reason_and_duration() {
        let metrics = Metrics::new();
        metrics.record(&record(Outcome::Allow, None));
        metrics.record(&record(Outcome::Deny, Some(Reason::new(RobotsCode::Disallow, "Disallow: /"))));
        let limit = Reason::new(AgentsMdCode::RateLimit, "rate-limit: 1/minute");
        metrics.record(&record(Outcome::RateLimited, Some(limit)));
        let text = metrics.encode(Scraped::default());
        assert_eq!(sample(&text, r#"agentgate_requests_total{outcome="allow",source="none"}"#), Some("1"), "{text}");
        assert_eq!(sample(&text, r#"agentgate_requests_total{outcome="deny",source="robots.txt"}"#), Some("1"));
        assert_eq!(sample(&text, r#"agentgate_blocks_total{reason="robots.disallow"}"#), Some("1"), "{text}");
        assert_eq!(sample(&text, r#"agentgate_blocks_total{reason="agents_md.rate_limit"}"#), Some("1"));
        assert_eq!(sample(&text, "agentgate_rate_limited_total "), Some("1"), "{text}");
        assert_eq!(sample(&text, "agentgate_request_duration_seconds_count "), Some("3"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn fetches_scraped_values_tunnels_and_reloads() {
        let metrics = Metrics::new();
        metrics.policy_fetch("/robots.txt", &FetchOutcome::not_found());
        metrics.policy_fetch("/agents.txt", &FetchOutcome::Failed(FetchError::Timeout));
        metrics.policy_lookup(false);
        metrics.policy_lookup(true);
        metrics.policy_lookup(true);
        let tunnel = metrics.tunnel_opened();
        metrics.config_reload(false);
        let store = metrics.limits_store();
        store.round_trip(Duration::from_micros(300));
        store.round_trip(Duration::from_millis(50));
        store.fallback();
        let scraped = Scraped { audit_failures: 4, certs_minted: 2, connections: 7, ..Scraped::default() };
        let text = metrics.encode(scraped);
        assert_eq!(sample(&text, r#"agentgate_policy_fetches_total{file="/robots.txt",status="404"}"#), Some("1"));
        assert_eq!(sample(&text, r#"agentgate_policy_fetches_total{file="/agents.txt",status="timeout"}"#), Some("1"));
        assert_eq!(sample(&text, "agentgate_policy_cache_hits_total "), Some("2"), "{text}");
        assert_eq!(sample(&text, "agentgate_policy_cache_misses_total "), Some("1"));
        assert_eq!(sample(&text, "agentgate_tunnels "), Some("1"), "{text}");
        assert_eq!(sample(&text, r#"agentgate_config_reloads_total{result="error"}"#), Some("1"));
        assert_eq!(sample(&text, "agentgate_audit_failures_total "), Some("4"), "{text}");
        assert_eq!(sample(&text, "agentgate_certs_minted_total "), Some("2"));
        assert_eq!(sample(&text, "agentgate_connections "), Some("7"));
        assert_eq!(sample(&text, "agentgate_limits_store_seconds_count "), Some("2"), "{text}");
        assert_eq!(sample(&text, r#"agentgate_limits_store_seconds_bucket{le="0.0004"}"#), Some("1"), "{text}");
        assert_eq!(sample(&text, "agentgate_limits_store_fallbacks_total "), Some("1"), "{text}");
        drop(tunnel);
        let text = metrics.encode(Scraped::default());
        assert_eq!(sample(&text, "agentgate_tunnels "), Some("0"), "{text}");
        assert_eq!(sample(&text, "agentgate_audit_failures_total "), Some("4"), "a counter never goes back");
    }
}
