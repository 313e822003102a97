//! The proxy's serving loop: [`Listeners`] (the listeners `crate::app` bound and the state
//! they serve) run until shutdown, accepting on `listen` and `[transparent] listen`, serving
//! the admin API beside them, then draining for `shutdown_grace`; and [`shutdown_signal`]
//! for SIGTERM/SIGINT.
//!
//! Never builds what it serves (the composition root, `crate::app`, does) and never handles
//! a request itself: each accepted connection is served by `serve::serve_connection` with
//! the request service.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tracing::{Instrument, debug, info, info_span, warn};

use super::conn::{Admission, Drain, DrainController};
use super::context::ProxyState;
use super::serve::{ServerProtocols, serve_connection};
use super::service::ProxyService;
use super::tunnel;
use crate::admin::{AdminServer, AdminState};
use crate::audit::AuditWriter;
use crate::throttled::Throttled;

/// How long to pause accepting after an accept error (out of file descriptors, say), so the
/// loop does not spin while the condition lasts.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A proxy's bound listeners and what they serve, as the composition root (`crate::app`)
/// built them; [`run_until`](Self::run_until) serves them.
pub(crate) struct Listeners {
    /// What every connection shares.
    pub(crate) state: Arc<ProxyState>,
    /// The decision log's writer, flushed at shutdown.
    pub(crate) audit_writer: AuditWriter,
    /// `listen`, bound.
    pub(crate) listener: TcpListener,
    /// Its address (the real port when `listen` said 0).
    pub(crate) local_addr: SocketAddr,
    /// The admin API's listener (`[admin] listen`), bound, and what it reads of the proxy;
    /// it serves with the proxy.
    pub(crate) admin: Option<(AdminServer, AdminState)>,
    /// The caps on agents' connections (`[connections]`), which the admin API counts too.
    pub(crate) admission: Arc<Admission>,
    /// `[transparent] listen`, bound: connections the kernel redirected here.
    pub(crate) transparent: Vec<TcpListener>,
}

impl Listeners {
    /// Serves until `shutdown` completes, then stops accepting and lets in-flight requests,
    /// tunnels, WebSocket relays and admin requests finish for up to `shutdown_grace`, one
    /// period for all of them; whatever is still running then is closed. Returns when that
    /// is done and the decision log is flushed.
    pub(crate) async fn run_until(self, shutdown: impl Future<Output = ()>) {
        let Listeners { state, audit_writer, listener, local_addr, admin, admission, transparent } = self;
        let drain = DrainController::new();
        // Each stops accepting when draining starts; their connections count in the drain.
        for listener in transparent {
            let (state, admission) = (Arc::clone(&state), Arc::clone(&admission));
            tokio::spawn(tunnel::accept_loop(listener, state, admission, drain.handle()));
        }
        let admin = admin.map(|(server, admin_state)| server.start(admin_state));
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
        let grace = state.generation().settings.shutdown_grace;
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
        serve_connection(tcp, service, ServerProtocols::Http1, drain, &state.settings.connections).await;
        drop(admitted);
    });
    tokio::spawn(until_stopped.until_stopped(connection).instrument(span));
}

/// A future that completes on SIGTERM or SIGINT (Ctrl-C): the signal to pass to
/// `app::RunningProxy::run_until`. The handlers are installed when this is called, not when the
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
