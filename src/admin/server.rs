//! The admin listener: binds `[admin] listen` at start-up (so a taken port stops `run`
//! before any agent is served), serves HTTP/1.1 connections with hyper until the proxy shuts
//! down, then lets the admin requests in flight finish until the proxy's shutdown deadline
//! (the same `shutdown_grace`, not one more) and closes the rest. Each connection holds a
//! place under the admin port's caps (`super::admission`) and is closed when pushed out.
//!
//! Never: answers a request itself (`super::routes` does), or serves the proxy port.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::admission::Admission;
use super::hosts::Arrival;
use super::routes;
use super::state::AdminState;
use crate::error_chain::error_chain;

/// How long a client may take to send a request head.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// The admin API while it serves.
pub(crate) struct RunningAdmin {
    state: Arc<AdminState>,
    /// Carries the deadline for the admin requests in flight.
    stop: oneshot::Sender<Instant>,
    task: JoinHandle<()>,
}

impl RunningAdmin {
    /// The proxy stopped accepting: `/readyz` answers 503 from now on, the rest still works
    /// (metrics during the drain).
    pub(crate) fn start_draining(&self) {
        self.state.draining.store(true, Ordering::Relaxed);
    }

    /// Stops accepting, lets admin requests in flight finish until `deadline` (the proxy's
    /// shutdown deadline), closes what is still open then, and returns.
    pub(crate) async fn stop(self, deadline: Instant) {
        let _ = self.stop.send(deadline);
        if let Err(error) = self.task.await {
            warn!(%error, "the admin API task failed");
        }
    }
}

/// The admin API's listener, bound and not yet serving.
pub(crate) struct AdminServer {
    listener: TcpListener,
    local_addr: SocketAddr,
}

impl AdminServer {
    /// Binds `addr` (port 0 picks a free port; see [`AdminServer::local_addr`]).
    ///
    /// # Errors
    /// The operating system's error when the address is taken or not available.
    pub(crate) async fn bind(addr: SocketAddr) -> io::Result<AdminServer> {
        let listener = TcpListener::bind(addr).await?;
        let local_addr = listener.local_addr()?;
        Ok(AdminServer { listener, local_addr })
    }

    /// The address the admin API listens on.
    pub(crate) fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Starts serving `state` in its own task; the handle stops it.
    pub(crate) fn start(self, state: AdminState) -> RunningAdmin {
        let state = Arc::new(state);
        let (stop, stopped) = oneshot::channel::<Instant>();
        let shutdown = async move {
            // Dropped rather than sent: the proxy is gone, so nothing waits for the rest.
            stopped.await.unwrap_or_else(|_| Instant::now())
        };
        let task = tokio::spawn(self.serve(Arc::clone(&state), shutdown));
        RunningAdmin { state, stop, task }
    }

    /// Serves until `shutdown` completes with a deadline, then lets the admin requests in
    /// flight (a live `/explain` may be fetching policies) finish until it, and closes the
    /// rest: their connection tasks end, so nothing answers past the deadline.
    async fn serve(self, state: Arc<AdminState>, shutdown: impl Future<Output = Instant>) {
        let AdminServer { listener, local_addr } = self;
        info!(%local_addr, "admin API listening");
        let graceful = GracefulShutdown::new();
        let admission = Arc::new(Admission::default());
        let (close, closed) = watch::channel(false);
        tokio::pin!(shutdown);
        let deadline = loop {
            let (tcp, client) = tokio::select! {
                deadline = &mut shutdown => break deadline,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        warn!(%error, %local_addr, "admin API cannot accept a connection; pausing briefly");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            // Until it has a place, no other connection is accepted: they wait in order.
            let (ticket, pushed_out) = tokio::select! {
                deadline = &mut shutdown => break deadline,
                admitted = admission.admit(client.ip()) => admitted,
            };
            let ticket = Arc::new(ticket);
            // The address it arrived on: one of the host's own when `listen` is unspecified.
            let local = tcp.local_addr().unwrap_or(local_addr);
            let at = Arrival { listen: local_addr, local, peer: client };
            let state = Arc::clone(&state);
            let place = Arc::clone(&ticket);
            let service = service_fn(move |request| {
                let (state, place) = (Arc::clone(&state), Arc::clone(&place));
                async move { Ok::<_, std::convert::Infallible>(routes::handle(&state, request, at, &place).await) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(TokioIo::new(tcp), service);
            let conn = graceful.watch(conn);
            let mut closed = closed.clone();
            tokio::spawn(async move {
                tokio::select! {
                    served = conn => if let Err(error) = served {
                        debug!(error = %error_chain(&error), %client, "admin connection closed with an error");
                    },
                    _ = closed.wait_for(|closed| *closed) => debug!(%client, "admin connection closed: shutdown grace period over"),
                    Ok(()) = pushed_out => debug!(%client, "admin connection closed: pushed out by newer ones of its client"),
                }
                drop(ticket);
            });
        };
        drop(listener);
        // A live stream never ends by itself: end them, or each would hold the grace period.
        state.streams.close();
        if tokio::time::timeout_at(deadline, graceful.shutdown()).await.is_err() {
            warn!("admin requests still running at the end of the grace period; closing them");
        }
        let _ = close.send(true);
    }
}
