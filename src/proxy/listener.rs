//! The proxy's public face: [`Proxy`] (built from the config: CA, leaf cache, upstream
//! clients), [`RunningProxy`] (bound to `listen`, running the accept loop), graceful
//! shutdown, and [`shutdown_signal`] for SIGTERM/SIGINT.
//!
//! Never handles a request itself: each accepted connection is served by
//! `serve::serve_connection` with the request service.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tracing::{Instrument, debug, info, info_span, warn};

use super::conn::{Admission, Drain, DrainController};
use super::context::ProxyState;
use super::error::StartError;
use super::resolve::GuardedConnector;
use super::serve::{ServerProtocols, serve_connection};
use super::service::ProxyService;
use super::tunnel;
use super::upstream::Upstream;
use crate::admin::{AdminAccess, AdminServer, AdminState};
use crate::audit::{AuditLog, AuditWriter};
use crate::config::Config;
use crate::fetch::{CacheSettings, PolicyCache, PolicyTransport};
use crate::gate::Gate;
use crate::limits::Limiter;
use crate::metrics::{Metrics, UpstreamMetrics};
use crate::net::{AddressPolicy, Dial, Guard, Resolve, SystemResolver, TcpDialer};
use crate::record::Session;
use crate::reload::{ConfigSource, Reloader};
use crate::throttled::Throttled;
use crate::tls::{CertificateAuthority, LeafCertCache};

/// How long to pause accepting after an accept error (out of file descriptors, say), so the
/// loop does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The proxy, ready to bind: the CA is loaded (or created), the leaf cache and the upstream
/// clients are built.
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

/// A proxy bound to its listen address; [`run_until`](Self::run_until) serves it.
pub struct RunningProxy {
    state: Arc<ProxyState>,
    audit_writer: AuditWriter,
    ca_cert_path: PathBuf,
    listener: TcpListener,
    local_addr: SocketAddr,
    /// The admin API's listener (`[admin] listen`), bound; it serves with the proxy.
    admin: Option<AdminServer>,
    /// `[transparent] listen`, bound: connections the kernel redirected here.
    transparent: Vec<TcpListener>,
    cache: PolicyCache,
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
            cache.archive_to(crate::archive::PolicyArchive::new(
                dir,
                config.audit.archive_max_bytes,
                Arc::clone(&metrics),
            ));
        }
        let limiter = Limiter::from_config(&config.limits, &config.upstream.extra_ca_files, metrics.limits_store())
            .map_err(|source| StartError::Limits { source })?;
        let limiter = Arc::new(limiter);
        let keys =
            crate::signing::Keys::load(&config.ca.dir, crate::agents::signing_tables(&config.agent, &config.agents))
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
    /// free port; see [`RunningProxy::local_addr`]).
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
        let replica = crate::audit::instance_name(&config.instance);
        let fleet = match config.approvals.fleet_connection(&config.limits) {
            Some(connection) => {
                let extra = &config.upstream.extra_ca_files;
                let fleet = crate::approvals::Fleet::new(&connection, &replica, extra, Arc::clone(&metrics))
                    .map_err(|source| StartError::ApprovalsStore { source })?;
                Some(fleet)
            }
            None => None,
        };
        let approvals = crate::approvals::Approvals::of_replica(&replica, fleet);
        // Opened last, so a failure above leaves no writer behind; opened before the first
        // accept, so a bad log path stops start-up instead of the first request.
        let key = crate::signing::load_or_create(&config.audit.signing_key_path(&config.ca.dir))
            .map_err(|source| StartError::AuditKey { source })?;
        let (audit, audit_writer) =
            AuditLog::start(config.audit.clone(), key).map_err(|source| StartError::Audit { source })?;
        let mut state = ProxyState::new(config, certs, upstream, guard, gate, audit, metrics).with_approvals(approvals);
        state.record = record;
        let state = Arc::new(state);
        Ok(RunningProxy { state, audit_writer, ca_cert_path, listener, local_addr, admin, transparent, cache })
    }
}

impl RunningProxy {
    /// The proxy's shared state, for the unit tests of what runs on it (`record::tests`).
    #[cfg(test)]
    pub(crate) fn state(&self) -> &Arc<ProxyState> {
        &self.state
    }

    /// The address the proxy listens on (the real port when `listen` had port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The PEM file of the CA that agents must trust.
    pub fn ca_cert_path(&self) -> &Path {
        &self.ca_cert_path
    }

    /// The reloader of this proxy's config, read from `source` (`crate::reload`):
    /// [`Reloader::start`] reloads on SIGHUP and file changes, [`Reloader::reload`] at once.
    pub fn reloader(&self, source: ConfigSource) -> Arc<Reloader> {
        Arc::new(Reloader::new(source, Arc::clone(&self.state)))
    }

    /// The addresses `[transparent] listen` is bound to (the real ports where it said 0).
    pub fn transparent_addrs(&self) -> Vec<SocketAddr> {
        self.transparent.iter().filter_map(|listener| listener.local_addr().ok()).collect()
    }

    /// The address the admin API listens on (the real port when `[admin] listen` had port
    /// 0); `None` when it is off.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().map(AdminServer::local_addr)
    }

    /// Serves until `shutdown` completes, then stops accepting and lets in-flight requests,
    /// tunnels, WebSocket relays and admin requests finish for up to `shutdown_grace`, one
    /// period for all of them; whatever is still running then is closed. Returns when that
    /// is done and the decision log is flushed.
    pub async fn run_until(self, shutdown: impl Future<Output = ()>) {
        let RunningProxy { state, audit_writer, listener, local_addr, admin, transparent, cache, .. } = self;
        let drain = DrainController::new();
        let admission = Admission::new(&state.config.connections);
        // Each stops accepting when draining starts; their connections count in the drain.
        for listener in transparent {
            let (state, admission) = (Arc::clone(&state), Arc::clone(&admission));
            tokio::spawn(tunnel::accept_loop(listener, state, admission, drain.handle()));
        }
        let admin = admin.map(|server| server.start(admin_state(&state, cache, &admission)));
        let accept_errors = Throttled::default();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok((tcp, client)) => accept(&state, &admission, tcp, client, drain.handle()),
                    Err(error) => {
                        if let Some(counts) = accept_errors.count() {
                            warn!(%error, %local_addr, errors_since_last_log = counts.since_last_log,
                                errors_total = counts.total, "cannot accept a connection; pausing briefly");
                        }
                        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    }
                },
            }
        }
        // One grace period for everything that serves: were the admin API's own grace to
        // begin where the proxy's ended, a 10 s grace could answer for 20 s.
        let grace = state.generation().config.shutdown_grace;
        let deadline = tokio::time::Instant::now() + grace;
        drop(listener);
        if let Some(admin) = &admin {
            admin.start_draining();
        }
        info!(?grace, "shutting down: no new connections, waiting for in-flight requests");
        let remaining = drain.drain(deadline).await;
        if remaining > 0 {
            warn!(remaining, "shutdown grace period over; closing the connections still open");
        }
        if let Some(admin) = admin {
            admin.stop(deadline).await;
        }
        // Every request has recorded its decision by now (or was cut off by the grace
        // period): drain the queue to disk.
        let stats = audit_writer.shutdown().await;
        info!(written = stats.written, failed = stats.failed, "decision log closed");
    }
}

/// What the admin API reads of the running proxy.
fn admin_state(state: &Arc<ProxyState>, cache: PolicyCache, admission: &Arc<Admission>) -> AdminState {
    let admission = Arc::clone(admission);
    let (live, limiter) = (Arc::clone(state), Arc::clone(state));
    AdminState {
        config: Box::new(move || Arc::clone(&live.generation().config)),
        limits_store_failures: Box::new(move || limiter.generation().gate.limits_store_failures()),
        cache,
        audit: state.audit.clone(),
        metrics: Arc::clone(&state.metrics),
        certs: state.certs.clone(),
        connections: Box::new(move || admission.open_connections() as u64),
        access: AdminAccess::new(&state.config.admin),
        approvals: state.approvals.clone(),
        draining: AtomicBool::new(false),
        streams: Default::default(),
    }
}

/// Phase `accept`: one task per client connection, serving HTTP/1.1 with upgrades (CONNECT
/// and WebSocket hand the connection over when the response is written). A connection over
/// a `[connections]` cap is closed at once (dropped: the client sees the close).
fn accept(state: &Arc<ProxyState>, admission: &Arc<Admission>, tcp: TcpStream, client: SocketAddr, drain: Drain) {
    let Ok(admitted) = admission.admit(client.ip()) else { return };
    if let Err(error) = tcp.set_nodelay(true) {
        debug!(%error, %client, "cannot set TCP_NODELAY");
    }
    let service = ProxyService::for_proxy_port(Arc::clone(state), client, drain.clone());
    let state = Arc::clone(state);
    // At `info`, once per connection: the client of every line its requests write.
    let span = info_span!("connection", client = %client);
    let until_stopped = drain.clone();
    // Boxed, so the wrappers below hold a pointer, not (twice) the connection's future.
    let connection = Box::pin(async move {
        debug!("accepted");
        serve_connection(tcp, service, ServerProtocols::Http1, drain, &state.config.connections).await;
        drop(admitted);
    });
    tokio::spawn(until_stopped.until_stopped(connection).instrument(span));
}

/// A future that completes on SIGTERM or SIGINT (Ctrl-C): the signal to pass to
/// [`RunningProxy::run_until`]. The handlers are installed when this is called, not when the
/// future is first polled, so a signal sent as soon as the start-up banner is printed (call
/// this before printing it) is a graceful shutdown, never the default action that kills the
/// process. If a handler cannot be installed, that signal is logged and ignored rather than
/// taken as a request to stop.
///
/// Must be called inside the runtime.
#[cfg(unix)]
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let install = |kind: SignalKind, name: &'static str, other: &'static str| match signal(kind) {
        Ok(signal) => Some(signal),
        Err(error) => {
            warn!(%error, "cannot listen for {name}; use {other} to stop");
            None
        }
    };
    let interrupt = install(SignalKind::interrupt(), "SIGINT", "SIGTERM");
    let terminate = install(SignalKind::terminate(), "SIGTERM", "SIGINT");
    let received = |signal: Option<tokio::signal::unix::Signal>| async move {
        match signal {
            Some(mut signal) => {
                signal.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    async move {
        tokio::select! {
            () = received(interrupt) => info!("SIGINT received"),
            () = received(terminate) => info!("SIGTERM received"),
        }
    }
}

/// A future that completes on Ctrl-C (the only stop signal off Unix).
#[cfg(not(unix))]
pub fn shutdown_signal() -> impl Future<Output = ()> + Send + 'static {
    let interrupt = tokio::signal::ctrl_c();
    async move {
        if let Err(error) = interrupt.await {
            warn!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
        info!("Ctrl-C received");
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
    let cache = (config.cache.store == crate::fetch::CacheStore::Redis)
        .then(|| config.cache.redis.connection(&config.limits.redis));
    let approvals = config.approvals.fleet_connection(&config.limits);
    for store in limits.iter().chain(cache.iter()).chain(approvals.iter()) {
        store.addresses().into_iter().for_each(|addr| policy.add_own(addr));
    }
    Guard::new(policy, resolver, config.upstream.idle_timeout)
}
