//! The budget of TCP sockets towards origins (`[upstream] max_connections`): every one
//! counts, pooled connections busy or idle, policy fetches, WebSocket upgrades and
//! passthrough tunnels. A socket is dialled only with a [`SocketPermit`] (the guarded
//! connector takes one by value), and the permit lives inside the stream ([`Counted`]), so it
//! is given back exactly when the socket is closed.
//!
//! At the cap, the least recently used idle pooled connection is closed to make room (the
//! pool is the [`CloseIdle`]); only when none is idle does a new connection wait, at most
//! `[upstream] connect_queue_timeout`, and then fail with [`AtCapacity`] (a 503). While a
//! connection waits, a pooled connection that goes idle is closed for it
//! ([`Sockets::went_idle`]). See `docs/upstream.md`.
//!
//! Never: dials, resolves, knows what a connection carries, or counts agents' sockets
//! (`[connections] max_connections` does).

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::metrics::{OpenSocket, UpstreamMetrics};

/// Closes idle connections to make room under the cap: the pool.
pub(crate) trait CloseIdle: Send + Sync {
    /// Closes the least recently used idle connection; false when none was idle.
    fn close_least_recent(&self) -> bool;
}

/// No socket came free under the cap within the wait.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "all {max} connections to origins allowed by [upstream] max_connections are busy, and none came free within {waited:?} ([upstream] connect_queue_timeout)"
)]
pub(crate) struct AtCapacity {
    /// The cap.
    pub(crate) max: usize,
    /// How long the connection waited.
    pub(crate) waited: Duration,
}

/// The cap, the connections waiting under it, and the idle connections to close for them.
pub(crate) struct Sockets {
    permits: Arc<Semaphore>,
    max: usize,
    queue_timeout: Duration,
    /// New connections waiting for a permit now.
    waiting: AtomicUsize,
    /// The pool, which owns this budget: weak, so neither keeps the other alive.
    idle: Weak<dyn CloseIdle>,
    metrics: UpstreamMetrics,
}

impl Sockets {
    /// A budget of `max` sockets; a new connection over it waits at most `queue_timeout`.
    pub(crate) fn new(
        max: usize,
        queue_timeout: Duration,
        idle: Weak<dyn CloseIdle>,
        metrics: UpstreamMetrics,
    ) -> Self {
        metrics.set_max(max);
        let permits = Arc::new(Semaphore::new(max.min(Semaphore::MAX_PERMITS)));
        Sockets { permits, max, queue_timeout, waiting: AtomicUsize::new(0), idle, metrics }
    }

    /// A permit for one new socket: at once under the cap; at the cap, after closing the least
    /// recently used idle connection (its socket's permit comes back when its task has
    /// dropped it) or, when none is idle, after waiting for a busy one to end.
    ///
    /// # Errors
    /// [`AtCapacity`] when no permit came within `[upstream] connect_queue_timeout`.
    pub(crate) async fn acquire(&self) -> Result<SocketPermit, AtCapacity> {
        let permit = match Arc::clone(&self.permits).try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => self.wait().await?,
        };
        Ok(SocketPermit { _permit: permit, _open: self.metrics.opened() })
    }

    async fn wait(&self) -> Result<OwnedSemaphorePermit, AtCapacity> {
        let _waiting = Waiting::enter(&self.waiting);
        self.metrics.waited();
        // After counting ourselves as waiting, so a connection that goes idle from now on
        // is closed for us by `went_idle` even if none is idle yet.
        self.close_idle();
        let acquired = tokio::time::timeout(self.queue_timeout, Arc::clone(&self.permits).acquire_owned()).await;
        match acquired {
            Ok(Ok(permit)) => Ok(permit),
            // The semaphore is never closed; a closed one could give nothing anyway.
            Ok(Err(_)) | Err(_) => {
                self.metrics.refused();
                Err(AtCapacity { max: self.max, waited: self.queue_timeout })
            }
        }
    }

    /// Called by the pool after a connection went idle: when a new connection is waiting for
    /// a socket, the least recently used idle one is closed for it (perhaps this one).
    pub(crate) fn went_idle(&self) {
        if self.waiting.load(Ordering::SeqCst) > 0 {
            self.close_idle();
        }
    }

    fn close_idle(&self) {
        if self.idle.upgrade().is_some_and(|idle| idle.close_least_recent()) {
            self.metrics.idle_closed();
        }
    }

    /// The idle gauge, which the pool sets.
    pub(crate) fn metrics(&self) -> &UpstreamMetrics {
        &self.metrics
    }
}

/// One new connection counted as waiting while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::SeqCst);
        Waiting(waiting)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The right to one socket towards an origin, given back (and counted closed) when dropped.
#[derive(Debug)]
pub(crate) struct SocketPermit {
    _permit: OwnedSemaphorePermit,
    _open: OpenSocket,
}

/// A socket and its permit: the permit goes when the socket does.
#[derive(Debug)]
pub(crate) struct Counted<T> {
    inner: T,
    _permit: SocketPermit,
}

impl<T> Counted<T> {
    /// `inner`, counted under `permit`.
    pub(crate) fn new(inner: T, permit: SocketPermit) -> Self {
        Counted { inner, _permit: permit }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

// Writes pass straight through to the wrapped stream.
super::write_through!(Counted);

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// Idle connections as a count; closing one gives its permit back, as the pool's
    /// connection task does when it drops the socket.
    #[derive(Default)]
    struct FakeIdle(Mutex<Vec<SocketPermit>>);

    impl CloseIdle for FakeIdle {
        fn close_least_recent(&self) -> bool {
            let mut idle = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if idle.is_empty() {
                return false;
            }
            drop(idle.remove(0));
            true
        }
    }

    /// A bound on a wait that must end by a permit, not a timing.
    const GENEROUS: Duration = Duration::from_secs(30);

    fn sockets(max: usize, idle: &Arc<FakeIdle>, wait: Duration) -> Sockets {
        let idle: Arc<dyn CloseIdle> = idle.clone();
        Sockets::new(max, wait, Arc::downgrade(&idle), UpstreamMetrics::default())
    }

    #[tokio::test]
    async fn at_the_cap_an_idle_socket_makes_room() {
        let idle = Arc::new(FakeIdle::default());
        let budget = sockets(2, &idle, GENEROUS);
        let busy = budget.acquire().await.expect("under the cap");
        let pooled = budget.acquire().await.expect("under the cap");
        idle.0.lock().expect("lock").push(pooled);
        let third = budget.acquire().await.expect("the idle socket was closed for it");
        assert!(idle.0.lock().expect("lock").is_empty());
        drop((busy, third));
    }

    #[tokio::test]
    async fn with_every_socket_busy_a_new_one_is_refused_after_the_wait() {
        let idle = Arc::new(FakeIdle::default());
        let budget = sockets(1, &idle, Duration::from_millis(20));
        let busy = budget.acquire().await.expect("under the cap");
        let refused = budget.acquire().await.expect_err("every socket is busy");
        assert_eq!(refused.max, 1);
        assert!(refused.to_string().contains("[upstream] max_connections"), "{refused}");
        assert_eq!(budget.waiting.load(Ordering::SeqCst), 0, "no longer waiting");
        drop(busy);
        budget.acquire().await.expect("a closed socket gives its permit back");
    }

    #[tokio::test]
    async fn a_connection_going_idle_while_another_waits_is_closed_for_it() {
        let idle = Arc::new(FakeIdle::default());
        let budget = Arc::new(sockets(1, &idle, GENEROUS));
        let busy = budget.acquire().await.expect("under the cap");
        let waiter = {
            let budget = Arc::clone(&budget);
            tokio::spawn(async move { budget.acquire().await })
        };
        while budget.waiting.load(Ordering::SeqCst) == 0 {
            tokio::task::yield_now().await;
        }
        idle.0.lock().expect("lock").push(busy);
        budget.went_idle();
        waiter.await.expect("task").expect("the connection that went idle was closed for the waiter");
    }
}
