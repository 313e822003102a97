//! What travels with a request through the phases: the state every connection shares
//! (`ProxyState`), the config generation a request is decided under (`Generation`, swapped
//! by a reload), and the per-request `RequestContext` (who asked, for which origin, how it
//! came in, since when).
//!
//! The context is built once the request is parsed and before anything is forwarded; the
//! gate reads it to identify the agent and the origin. Nothing here does I/O.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use http::uri::{Authority, Scheme};

use super::mcp::OpenStreams;
use super::settings::Settings;
use super::upstream::Upstream;
use crate::approvals::Approvals;
use crate::audit::AuditLog;
pub(crate) use crate::gate::Entry;
use crate::gate::{Gate, GateSettings};
use crate::metrics::Metrics;
use crate::net::Guard;
use crate::tls::LeafCertCache;

/// Everything the connections of one proxy share; cheap to reach through an `Arc`.
pub(crate) struct ProxyState {
    /// The settings the proxy was started with: only for what a reload cannot change
    /// (`[connections]`, `[audit] log_query`; `crate::reload`). Everything else comes from
    /// [`generation`](Self::generation).
    pub(crate) settings: Arc<Settings>,
    /// The settings and gate in force, replaced whole by a reload.
    live: ArcSwap<Generation>,
    /// Minted leaf certificates for intercepted hosts.
    pub(crate) certs: LeafCertCache,
    /// The pooled clients to origins.
    pub(crate) upstream: Arc<Upstream>,
    /// The network guard: vets every destination before the gate and at connect time.
    pub(crate) guard: Arc<Guard>,
    /// Where every decision is recorded.
    pub(crate) audit: AuditLog,
    /// What `/metrics` shows; counted where records are completed and tunnels open.
    pub(crate) metrics: Arc<Metrics>,
    /// Requests held for a human's approval, shared with the admin API that answers them.
    pub(crate) approvals: Approvals,
    /// The older MCP transport's event streams open through the proxy (`super::mcp`).
    pub(crate) mcp_streams: Arc<OpenStreams>,
    /// What is recorded, or replayed from (`[record]`, `crate::record`); set once at bind.
    pub(crate) record: crate::record::Session,
    next_request_id: AtomicU64,
}

impl ProxyState {
    pub(crate) fn new(
        settings: Arc<Settings>,
        certs: LeafCertCache,
        upstream: Arc<Upstream>,
        guard: Arc<Guard>,
        gate: Gate,
        audit: AuditLog,
        metrics: Arc<Metrics>,
    ) -> Self {
        let live = ArcSwap::from_pointee(Generation { settings: Arc::clone(&settings), gate });
        let approvals = Approvals::new();
        ProxyState {
            settings,
            live,
            certs,
            upstream,
            guard,
            audit,
            metrics,
            approvals,
            mcp_streams: Arc::default(),
            record: crate::record::Session::default(),
            next_request_id: AtomicU64::new(1),
        }
    }

    /// The generation in force: a request takes it once, when it starts, and is decided under
    /// it to the end, whatever a reload swaps in meanwhile.
    pub(crate) fn generation(&self) -> Arc<Generation> {
        self.live.load_full()
    }

    /// Puts `settings` in force for every request that starts from now on: the network
    /// guard's `[network]` lists, then a gate deciding with `gate` (built from the same config)
    /// and sharing the policy cache and limit counters of the one it replaces. `settings`
    /// must keep those that need a restart as they run.
    pub(crate) fn reconfigure(&self, settings: Arc<Settings>, gate: GateSettings) {
        self.guard.policy().set_network(&settings.network);
        let gate = self.live.load().gate.reconfigured(gate);
        self.live.store(Arc::new(Generation { settings, gate }));
    }

    /// This state with `approvals` (the queue of a replica of a fleet) in place of its own.
    pub(crate) fn with_approvals(self, approvals: Approvals) -> Self {
        ProxyState { approvals, ..self }
    }

    /// A new request id, unique for the life of this proxy.
    pub(crate) fn next_request_id(&self) -> RequestId {
        RequestId(self.next_request_id.fetch_add(1, Ordering::Relaxed))
    }
}

/// One generation of the live config: the proxy's settings a reload changes, and the gate
/// built from the same config (operator rules, bypass hosts, agents and modes, limits,
/// `[robots]`, `[agents_md]`).
pub(crate) struct Generation {
    /// The proxy's settings in force (its restart-only ones are those it started with).
    pub(crate) settings: Arc<Settings>,
    /// The one place requests are decided.
    pub(crate) gate: Gate,
}

/// The id of one request, for logs now and the audit record later.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RequestId(u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The facts about one request that every phase may need, fixed once the request is parsed.
///
/// `authority` is where the request is routed: the CONNECT target for tunnelled requests
/// (never the inner `Host` or SNI), the absolute URI's host and port otherwise.
///
/// The request id and how the request came in are in its tracing span; the gate reads the
/// client address (the agent's identity falls back to it, DESIGN.md §3) and the origin.
#[derive(Clone, Debug)]
pub(crate) struct RequestContext {
    /// The agent's TCP peer address.
    pub(crate) client: SocketAddr,
    /// `http` or `https`: the scheme used towards the origin.
    pub(crate) scheme: Scheme,
    /// The origin's host and port as routed (no user info).
    pub(crate) authority: Authority,
    /// When the request head was handed to the service.
    pub(crate) started: Instant,
}
