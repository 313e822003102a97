//! The composition root: start-up wiring. From one checked [`Config`] it builds what the
//! running proxy is made of (the CA and its leaf cache, the recording session, the network
//! guard, the upstream clients, the policy cache, the limits store, the gate, the approvals
//! queue, the decision log and its writer), binds the listeners (`listen`, `[admin] listen`,
//! `[transparent] listen`), and makes the [`Reloader`] that swaps the proxy's generation.
//! Each owner is given its own table or the settings built for it here (the gate a
//! `gate::GateSettings` from `Config::gate_settings`, the proxy a `proxy::Settings` from
//! `Config::proxy_settings`), never asked to find them in `Config`; the config in force is
//! held here, for the admin API's closures and the `Reloader` that swaps it.
//!
//! Never: accepts a connection, serves a request or drains at shutdown (`crate::proxy` does,
//! on what is built here), or decides a setting's meaning (the owners do).

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tracing::{debug, info};

use std::sync::atomic::AtomicBool;

use crate::admin::{AdminAccess, AdminServer, AdminState, LiveAgents};
use crate::approvals::{Approvals, Fleet};
use crate::archive::PolicyArchive;
use crate::audit::{AuditLog, instance_name};
use crate::config::Config;
use crate::fetch::{CacheSettings, CacheStore, PolicyCache, PolicyTransport};
use crate::gate::Gate;
use crate::limits::Limiter;
use crate::metrics::{Metrics, UpstreamMetrics};
use crate::net::{AddressPolicy, Dial, Guard, Resolve, SystemResolver, TcpDialer};
use crate::proxy::{Admission, GuardedConnector, Listeners, ProxyState, StartError, Upstream};
use crate::record::Session;
use crate::reload::{ConfigSource, Reloader};
use crate::signing::Keys;
use crate::tls::{CertificateAuthority, LeafCertCache};

/// The proxy, ready to bind: the CA is loaded (or created), the leaf cache, the upstream
/// clients, the policy cache, the limits store and the gate are built.
pub struct Proxy {
    config: Arc<Config>,
    certs: LeafCertCache,
    upstream: Arc<Upstream>,
    guard: Arc<Guard>,
    gate: Gate,
    ca_cert_path: PathBuf,
    /// The gate's policy cache, shared with the admin API.
    cache: PolicyCache,
    metrics: Arc<Metrics>,
    /// The gate's limits store, warmed before the proxy binds.
    limiter: Arc<Limiter>,
    /// What is recorded or replayed (`[record]`, `mode = "replay"`).
    record: Session,
}

/// A proxy bound to its listen addresses; [`run_until`](Self::run_until) serves it.
pub struct RunningProxy {
    listeners: Listeners,
    ca_cert_path: PathBuf,
    /// The config in force: the one it started with, until a reload (its [`Reloader`])
    /// puts another in force.
    running: Arc<ArcSwap<Config>>,
}

impl Proxy {
    /// Builds the proxy from `config`: loads the CA from `[ca] dir` (creating it on first
    /// run), sets up the leaf cache (`[mitm] cert_cache_size`) and the upstream clients
    /// (`[upstream]`). Call `crate::tls::install_default_provider()` once before, as for any
    /// rustls use in the process.
    ///
    /// # Errors
    /// [`StartError::Ca`] when the CA cannot be loaded or created;
    /// [`StartError::UpstreamClient`] when an `[upstream] extra_ca_files` entry is unusable.
    pub fn new(config: Arc<Config>) -> Result<Self, StartError> {
        Proxy::with_network(config, Arc::new(SystemResolver), Arc::new(TcpDialer))
    }

    /// Like [`new`](Self::new), resolving names with `resolver` and opening every TCP
    /// connection to an origin with `dialer`: the seams through which tests prove that a
    /// refused destination is never dialled.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_network(
        config: Arc<Config>,
        resolver: Arc<dyn Resolve>,
        dialer: Arc<dyn Dial>,
    ) -> Result<Self, StartError> {
        let ca = CertificateAuthority::load_or_create(&config.ca.dir)
            .map_err(|source| StartError::Ca { dir: config.ca.dir.clone(), source })?;
        let ca_cert_path = ca.cert_path().to_owned();
        let certs = LeafCertCache::new(Arc::new(ca), config.mitm.cert_cache_size)
            .map_err(|source| StartError::LeafKey { source })?;
        let metrics = Arc::new(Metrics::new());
        // Recording or replaying (`[record]`): a replay resolves from the recording and dials
        // nothing; a recording keeps what the resolver answered.
        let (record, (resolver, dialer)) = Session::start(&config.record, config.mode, (resolver, dialer), &metrics)
            .map_err(|source| StartError::Record { source })?;
        let guard = Arc::new(guard(&config, resolver));
        // One pool for proxied requests and policy fetches: one socket budget, guard and
        // trust store.
        let tcp = GuardedConnector { guard: Arc::clone(&guard), dialer, parent: None };
        let agents = config.connections.max_connections;
        let upstream = Arc::new(Upstream::new(&config.upstream, agents, tcp, metrics.upstream())?);
        let settings = CacheSettings::from(config.cache.clone());
        let cache = PolicyCache::with_store(
            record.transport(upstream.clone()),
            settings,
            Arc::clone(&metrics),
            &config.limits.redis,
            &config.upstream.extra_ca_files,
        )
        .map_err(|source| StartError::PolicyStore { source })?;
        if let Some(dir) = config.audit.archive_dir() {
            cache.archive_to(PolicyArchive::new(dir, config.audit.archive_max_bytes, Arc::clone(&metrics)));
        }
        let limiter = Limiter::from_config(&config.limits, &config.upstream.extra_ca_files, metrics.limits_store())
            .map_err(|source| StartError::Limits { source })?;
        let limiter = Arc::new(limiter);
        let keys = Keys::load(&config.ca.dir, crate::agents::signing_tables(&config.agent, &config.agents))
            .map_err(|source| StartError::Signing { source })?;
        let gate = Gate::new(config.gate_settings(&keys), cache.clone(), Arc::clone(&limiter));
        Ok(Proxy { config, certs, upstream, guard, gate, ca_cert_path, cache, metrics, limiter, record })
    }

    /// The PEM file of the CA that agents must trust.
    pub fn ca_cert_path(&self) -> &Path {
        &self.ca_cert_path
    }

    /// Gets the limits store ready ([`Limiter::warm`]: for Redis, waits a bounded time and
    /// logs when it cannot be reached), then binds `listen` from the config (port 0 picks a
    /// free port; see [`RunningProxy::local_addr`]), `[admin] listen` and `[transparent]
    /// listen`, and opens the decision log.
    ///
    /// # Errors
    /// [`StartError::Bind`] when the address is taken or not available,
    /// [`StartError::AdminBind`] when `[admin] listen` is.
    pub async fn bind(self) -> Result<RunningProxy, StartError> {
        let Proxy { config, certs, upstream, guard, gate, ca_cert_path, cache, metrics, limiter, record } = self;
        limiter.warm().await;
        let addr = config.listen;
        let bind_error = |source| StartError::Bind { addr, source };
        let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
        let local_addr = listener.local_addr().map_err(bind_error)?;
        // The real port (when `listen` said 0) is only known now.
        guard.policy().add_own(local_addr);
        debug!(%local_addr, "proxy port bound");
        let admin = match config.admin.listen {
            Some(addr) => {
                let admin = AdminServer::bind(addr).await.map_err(|source| StartError::AdminBind { addr, source })?;
                guard.policy().add_own(admin.local_addr());
                Some(admin)
            }
            None => None,
        };
        let mut transparent = Vec::with_capacity(config.transparent.listen.len());
        for &addr in &config.transparent.listen {
            let bind_error = |source| StartError::TransparentBind { addr, source };
            let listener = TcpListener::bind(addr).await.map_err(bind_error)?;
            let local_addr = listener.local_addr().map_err(bind_error)?;
            // A connection whose original destination is this port was not redirected: refused.
            guard.policy().add_own(local_addr);
            info!(%local_addr, "transparent listener bound: redirect agents' outbound 80/443 here (docs/transparent.md)");
            transparent.push(listener);
        }
        let replica = instance_name(&config.instance);
        let fleet = match config.approvals.fleet_connection(&config.limits) {
            Some(connection) => {
                let extra = &config.upstream.extra_ca_files;
                let fleet = Fleet::new(&connection, &replica, extra, Arc::clone(&metrics))
                    .map_err(|source| StartError::ApprovalsStore { source })?;
                Some(fleet)
            }
            None => None,
        };
        let approvals = Approvals::of_replica(&replica, fleet);
        // Opened last, so a failure above leaves no writer behind; opened before the first
        // accept, so a bad log path stops start-up instead of the first request.
        let key = crate::signing::load_or_create(&config.audit.signing_key_path(&config.ca.dir))
            .map_err(|source| StartError::AuditKey { source })?;
        let (audit, audit_writer) =
            AuditLog::start(config.audit.clone(), key).map_err(|source| StartError::Audit { source })?;
        let settings = Arc::new(config.proxy_settings());
        let mut state =
            ProxyState::new(settings, certs, upstream, guard, gate, audit, metrics).with_approvals(approvals);
        state.record = record;
        let state = Arc::new(state);
        let admission = Admission::new(&config.connections);
        let running = Arc::new(ArcSwap::new(config));
        let admin = admin.map(|server| (server, admin_state(&state, &running, cache, &admission)));
        let listeners = Listeners { state, audit_writer, listener, local_addr, admin, admission, transparent };
        Ok(RunningProxy { listeners, ca_cert_path, running })
    }
}

impl RunningProxy {
    /// The proxy's shared state, for the unit tests of what runs on it (`proxy::record`'s).
    #[cfg(test)]
    pub(crate) fn state(&self) -> &Arc<ProxyState> {
        &self.listeners.state
    }

    /// The address the proxy listens on (the real port when `listen` had port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.listeners.local_addr
    }

    /// The PEM file of the CA that agents must trust.
    pub fn ca_cert_path(&self) -> &Path {
        &self.ca_cert_path
    }

    /// The reloader of this proxy's config, read from `source` (`crate::reload`):
    /// [`Reloader::start`] reloads on SIGHUP and file changes, [`Reloader::reload`] at once.
    pub fn reloader(&self, source: ConfigSource) -> Arc<Reloader> {
        Arc::new(Reloader::new(source, Arc::clone(&self.listeners.state), Arc::clone(&self.running)))
    }

    /// The addresses `[transparent] listen` is bound to (the real ports where it said 0).
    pub fn transparent_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.transparent.iter().filter_map(|listener| listener.local_addr().ok()).collect()
    }

    /// The address the admin API listens on (the real port when `[admin] listen` had port
    /// 0); `None` when it is off.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.listeners.admin.as_ref().map(|(server, _)| server.local_addr())
    }

    /// Serves until `shutdown` completes, then stops accepting and lets in-flight requests,
    /// tunnels, WebSocket relays and admin requests finish for up to `shutdown_grace`, one
    /// period for all of them; whatever is still running then is closed. Returns when that
    /// is done and the decision log is flushed.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) {
        self.listeners.run_until(shutdown).await;
    }
}

/// What the admin API is given of the running proxy: its shared parts, the `[admin]` and
/// `[audit]` tables it started with, and the agents and the operator's side of `/explain`,
/// read from the config in force (`running`) at each call (a reload swaps it), the limits
/// store's failures from the generation's gate.
fn admin_state(
    state: &Arc<ProxyState>,
    running: &Arc<ArcSwap<Config>>,
    cache: PolicyCache,
    admission: &Arc<Admission>,
) -> AdminState {
    let admission = Arc::clone(admission);
    let (agents, operator, limiter) = (Arc::clone(running), Arc::clone(running), Arc::clone(state));
    let started = running.load();
    AdminState {
        agents: Box::new(move || {
            let config = agents.load();
            LiveAgents { mode: config.mode, default: config.agent.clone(), agents: config.agents.clone() }
        }),
        operator: Box::new(move |id| operator.load().operator(id)),
        log: started.audit.clone(),
        limits_store_failures: Box::new(move || limiter.generation().gate.limits_store_failures()),
        cache,
        audit: state.audit.clone(),
        metrics: Arc::clone(&state.metrics),
        certs: state.certs.clone(),
        connections: Box::new(move || admission.open_connections() as u64),
        access: AdminAccess::new(&started.admin),
        approvals: state.approvals.clone(),
        draining: AtomicBool::new(false),
        streams: Default::default(),
    }
}

/// The client the proxy forwards with, as a policy-file transport: for tools and tests that
/// fetch policies the way the running proxy does, behind the same network guard
/// (`[network]`, `[upstream]` and `[admin] listen` of `config`).
///
/// # Errors
/// [`StartError::UpstreamClient`] when an `[upstream] extra_ca_files` entry cannot be used.
pub fn policy_transport(config: &Config) -> Result<Arc<dyn PolicyTransport>, StartError> {
    let tcp = GuardedConnector {
        guard: Arc::new(guard(config, Arc::new(SystemResolver))),
        dialer: Arc::new(TcpDialer),
        parent: None,
    };
    let agents = config.connections.max_connections;
    Ok(Arc::new(Upstream::new(&config.upstream, agents, tcp, UpstreamMetrics::default())?))
}

/// The network guard for `config`: `[network]`, with the admin address and the Redis of
/// each shared store in use (`[limits] store = "redis"`, `[cache] store = "redis"`,
/// `[approvals] store = "redis"`) as agentgate's own, pinning answers as long as `[upstream]
/// idle_timeout` keeps connections.
fn guard(config: &Config, resolver: Arc<dyn Resolve>) -> Guard {
    let policy = AddressPolicy::new(&config.network, config.admin.listen);
    // A store that counts an agent's budget, decides its policy or answers its held
    // requests: never its destination.
    let limits = (config.limits.store == crate::limits::Store::Redis).then(|| config.limits.redis.connection());
    let cache = (config.cache.store == CacheStore::Redis).then(|| config.cache.redis.connection(&config.limits.redis));
    let approvals = config.approvals.fleet_connection(&config.limits);
    for store in limits.iter().chain(cache.iter()).chain(approvals.iter()) {
        store.addresses().into_iter().for_each(|addr| policy.add_own(addr));
    }
    Guard::new(policy, resolver, config.upstream.idle_timeout)
}
