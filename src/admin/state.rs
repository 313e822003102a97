//! What the admin API reads ([`AdminState`]): the proxy's own parts, shared, never a copy of
//! its state; the agents and the operator's side of `/explain` as the config in force has
//! them ([`LiveAgents`], read at each call); and the facts it counts for `/metrics`. It is
//! given all of it by the composition root (`crate::app`), never the whole `Config`.
//!
//! Never: serves a connection (`super::server`) or answers a request (`super::routes`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::access::AdminAccess;
use super::stream::Streams;
use crate::agents::AgentConfig;
use crate::approvals::Approvals;
use crate::audit::{AuditConfig, AuditLog};
use crate::explain::{ExplainError, Operator};
use crate::fetch::PolicyCache;
use crate::metrics::{Metrics, Scraped};
use crate::policy::operator::Mode;
use crate::tls::LeafCertCache;

/// What the admin API reads: the proxy's own parts, shared, never a copy of its state, and
/// what it is given of the config.
pub(crate) struct AdminState {
    /// The agents as the config in force has them (a reload swaps it: `crate::reload`), for
    /// `/agents` and `/explain`.
    pub(crate) agents: Box<dyn Fn() -> LiveAgents + Send + Sync>,
    /// The operator's side of `/explain` for agent `id` (`None`: `[agent]`) under the config
    /// in force: the agent, the operator's rules and the switches of the site files.
    pub(crate) operator: Box<OperatorOf>,
    /// `[audit]` as the decision log was opened with (it needs a restart): the files
    /// `/report` reads.
    pub(crate) log: AuditConfig,
    /// The policy cache the gate decides with.
    pub(crate) cache: PolicyCache,
    /// The decision log.
    pub(crate) audit: AuditLog,
    /// The proxy's metrics.
    pub(crate) metrics: Arc<Metrics>,
    /// The leaf cache, for the CA and the count of minted certificates.
    pub(crate) certs: LeafCertCache,
    /// Connections open on the proxy port.
    pub(crate) connections: Box<dyn Fn() -> u64 + Send + Sync>,
    /// Limit checks the shared store failed (`crate::limits::Limiter::store_failures`).
    pub(crate) limits_store_failures: Box<dyn Fn() -> u64 + Send + Sync>,
    /// Who may call: the accepted hosts, the tokens, the console sessions and the throttle
    /// of failed attempts, built from the `[admin]` table in force at start.
    pub(crate) access: AdminAccess,
    /// The held requests an operator approves or denies (`/approvals`).
    pub(crate) approvals: Approvals,
    /// Set once the proxy stops accepting: `/readyz` answers 503 from then on.
    pub(crate) draining: AtomicBool,
    /// The console's live decision streams, ended when the server stops.
    pub(crate) streams: Streams,
}

/// The operator's side for an agent id under the config in force (`Config::operator`).
pub(crate) type OperatorOf = dyn Fn(Option<&str>) -> Result<Operator, ExplainError> + Send + Sync;

/// The agents of the config in force, as `/agents` lists them and `/explain` finds one.
pub(crate) struct LiveAgents {
    /// `mode`: what an agent without its own mode runs in.
    pub(crate) mode: Mode,
    /// `[agent]`.
    pub(crate) default: AgentConfig,
    /// `[[agents]]`, in file order.
    pub(crate) agents: Vec<AgentConfig>,
}

impl AdminState {
    /// The facts other modules count, for `/metrics`.
    pub(crate) async fn scraped(&self) -> Scraped {
        // The cache's counts lag until its housekeeping runs.
        self.cache.run_pending_tasks().await;
        Scraped {
            audit_written: self.audit.written_records(),
            audit_failures: self.audit.failed_records(),
            audit_queue_depth: self.audit.queue_depth(),
            certs_minted: self.certs.minted_count(),
            connections: (self.connections)(),
            limits_store_failures: (self.limits_store_failures)(),
            cache_origins: self.cache.len(),
            cache_weight_bytes: self.cache.weighted_size(),
            approvals_pending: self.approvals.pending_count() as u64,
        }
    }

    /// True once the proxy has stopped accepting.
    pub(crate) fn is_draining(&self) -> bool {
        self.draining.load(Ordering::Relaxed)
    }
}
