//! Graceful shutdown as one signal every connection and tunnel holds: serving, then draining
//! (finish what is in flight, take nothing new), then stopped (the grace period is over).
//!
//! hyper-util's `GracefulShutdown` hands out one non-`Clone` watcher per connection, but a
//! CONNECT tunnel is born inside a connection's service and outlives it; a cloneable handle
//! lets the tunnel carry its own. Never decides when to shut down: the listener does.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;

use hyper::body::{Body, Incoming};
use hyper::rt::bounds::Http2ServerConnExec;
use hyper::rt::{Read, Write};
use hyper::server::conn::{http1, http2};
use hyper::service::HttpService;
use tokio::sync::watch;
use tokio::time::Instant;

/// The most the shutdown waits, once the grace period is over, for what it cut off to end
/// (and for the records of the requests cut off to be handed to the decision log).
const CUT_OFF_RECORDS: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Serving,
    Draining,
    Stopped,
}

/// The listener's end: starts draining and waits for every handle to be dropped.
pub(crate) struct DrainController {
    tx: watch::Sender<Phase>,
}

/// Held by every connection and tunnel task; dropping it tells the controller the task is done.
#[derive(Clone)]
pub(crate) struct Drain {
    rx: watch::Receiver<Phase>,
}

impl DrainController {
    pub(crate) fn new() -> Self {
        DrainController { tx: watch::Sender::new(Phase::Serving) }
    }

    /// A handle for a new connection or tunnel.
    pub(crate) fn handle(&self) -> Drain {
        Drain { rx: self.tx.subscribe() }
    }

    /// Tells every holder to drain, waits until `deadline` (the end of the grace period) for
    /// all of them to finish, then tells the rest to stop and lets them end (at most
    /// [`CUT_OFF_RECORDS`]). Returns how many were still running when the grace period ended.
    pub(crate) async fn drain(self, deadline: Instant) -> usize {
        self.tx.send_replace(Phase::Draining);
        let remaining = match tokio::time::timeout_at(deadline, self.tx.closed()).await {
            Ok(()) => 0,
            Err(_elapsed) => self.tx.receiver_count(),
        };
        self.tx.send_replace(Phase::Stopped);
        if remaining > 0 {
            // What is cut off now ends at its next poll, and a request cut off writes its
            // decision record then (`record::RequestRecord`): let those reach the log before
            // it closes. Bounded, should anything hold a handle without being cut off.
            let _ = tokio::time::timeout(CUT_OFF_RECORDS, self.tx.closed()).await;
        }
        remaining
    }
}

impl Drain {
    /// Resolves once draining has started (or the controller is gone).
    pub(crate) async fn draining(&mut self) {
        let _ = self.rx.wait_for(|phase| *phase >= Phase::Draining).await;
    }

    /// Whether the grace period is over: what is still running is being cut off.
    pub(crate) fn is_stopped(&self) -> bool {
        *self.rx.borrow() == Phase::Stopped
    }

    /// Resolves once the grace period is over (or the controller is gone).
    pub(crate) async fn stopped(&mut self) {
        let _ = self.rx.wait_for(|phase| *phase == Phase::Stopped).await;
    }

    /// Runs `task`, a connection's or tunnel's whole task, until it ends or the grace period
    /// is over, whichever comes first; then it is dropped and its connection closed. So no
    /// wait inside it (a first byte, a TLS handshake, an upgrade, a policy fetch) outlives
    /// shutdown, and a task the grace period ended before it began never runs.
    pub(crate) async fn until_stopped(mut self, task: impl Future<Output = ()>) {
        tokio::select! {
            biased;
            () = self.stopped() => tracing::debug!("closed: shutdown grace period over"),
            () = task => {}
        }
    }

    /// Drives one HTTP connection to completion: on draining, or once `quiet()` completes (the
    /// connection's idle timeout), asks hyper to finish the in-flight requests and close (h1:
    /// after the current response; h2: GOAWAY); on stop, or once `quiet()` completes again
    /// (an h2 client that never acknowledges the GOAWAY's PING), drops it.
    ///
    /// `conn` comes boxed: held by value, an `async fn` would keep it twice (as the argument
    /// and pinned in its body), and with it the connection's stream and buffers' heads.
    pub(crate) async fn serve<C, E, Q>(
        mut self,
        mut conn: Pin<Box<C>>,
        quiet: impl Fn() -> Q,
    ) -> Result<(), Box<dyn StdError + Send + Sync>>
    where
        C: Graceful<Output = Result<(), E>>,
        E: Into<Box<dyn StdError + Send + Sync>>,
        Q: Future<Output = ()>,
    {
        tokio::select! {
            result = conn.as_mut() => return result.map_err(Into::into),
            () = self.draining() => {}
            () = quiet() => {}
        }
        conn.as_mut().graceful_shutdown();
        tokio::select! {
            result = conn.as_mut() => result.map_err(Into::into),
            () = self.stopped() => Ok(()),
            () = quiet() => Ok(()),
        }
    }
}

/// A server connection that hyper can close gracefully: its HTTP/1.1 one (with upgrades) and
/// its HTTP/2 one.
pub(crate) trait Graceful: Future {
    /// Finish the in-flight requests and close (h1: after the current response; h2: GOAWAY).
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S> Graceful for http1::UpgradeableConnection<I, S>
where
    I: Read + Write + Unpin + Send + 'static,
    S: HttpService<Incoming>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    S::ResBody: 'static,
    <S::ResBody as Body>::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http1::UpgradeableConnection::graceful_shutdown(self);
    }
}

impl<I, S, E> Graceful for http2::Connection<I, S, E>
where
    I: Read + Write + Unpin,
    S: HttpService<Incoming>,
    S::Error: Into<Box<dyn StdError + Send + Sync>>,
    S::ResBody: 'static,
    <S::ResBody as Body>::Error: Into<Box<dyn StdError + Send + Sync>>,
    E: Http2ServerConnExec<S::Future, S::ResBody>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        http2::Connection::graceful_shutdown(self);
    }
}
