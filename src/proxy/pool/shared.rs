//! What a pool's bodies, its socket budget and its reaper share: the idle lists
//! (`lru`) behind one lock, the budget (`conn::sockets`), and the fetch turns (`turn`). A
//! connection given back goes idle here; the budget closes the least recently used idle one
//! to make room; the reaper task closes what has been idle for `[upstream] idle_timeout`,
//! sleeping until the next is due and woken when the lists stop being empty.
//!
//! Never: opens a connection (`dial`), or decides which connection a request takes (the
//! pool's `connection`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use super::super::conn::{CloseIdle, Sockets};
use super::lru::{Found, Idle};
use super::turn::Turns;
use super::{H1, H2, Key, PoolSettings};
use crate::metrics::UpstreamMetrics;

/// What the pool's bodies, the budget and the reaper share: the idle lists behind one lock.
pub(super) struct Shared {
    pub(super) sockets: Sockets,
    idle: Mutex<Idle<H1, H2>>,
    max_idle_per_host: usize,
    idle_timeout: Duration,
    /// Wakes the reaper when the idle list stops being empty, and when the pool goes.
    wake: Arc<Notify>,
    reaper_started: AtomicBool,
    /// Whose go it is on each origin's fetch connection.
    pub(super) turns: Turns,
}

impl Shared {
    /// The shared state of a pool built from `settings`, counted in `metrics`; the budget
    /// closes idle connections through it (its weak reference, so the pool can go).
    pub(super) fn new(settings: &PoolSettings, metrics: UpstreamMetrics) -> Arc<Shared> {
        Arc::new_cyclic(|shared: &Weak<Shared>| {
            let idle: Weak<dyn CloseIdle> = shared.clone();
            Shared {
                sockets: Sockets::new(settings.max_connections, settings.connect_queue_timeout, idle, metrics),
                idle: Mutex::new(Idle::default()),
                max_idle_per_host: settings.max_idle_per_host,
                idle_timeout: settings.idle_timeout,
                wake: Arc::new(Notify::new()),
                reaper_started: AtomicBool::new(false),
                turns: Turns::default(),
            }
        })
    }

    fn lock(&self) -> MutexGuard<'_, Idle<H1, H2>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An idle connection to `key`, or its shared h2 connection; closed ones are dropped.
    pub(super) fn take(&self, key: &Key) -> Option<Found<H1, H2>> {
        let mut idle = self.lock();
        let found = idle.take(key);
        self.sockets.metrics().set_idle(idle.len());
        found
    }

    /// Makes `sender` the shared h2 connection of `key` (one request in flight) unless it
    /// already has one; the id its lease gives back.
    pub(super) fn share_h2(&self, key: &Key, sender: &H2) -> Option<u64> {
        self.lock().share_h2(key, sender)
    }

    /// An HTTP/1.1 connection whose response ended cleanly, idle from now.
    pub(super) fn put_h1(self: &Arc<Self>, key: &Key, sender: H1) {
        let (evicted, first) = {
            let mut idle = self.lock();
            let first = idle.is_empty();
            let evicted = idle.put_h1(key, sender, self.max_idle_per_host, Instant::now());
            self.sockets.metrics().set_idle(idle.len());
            (evicted, first && !idle.is_empty())
        };
        drop(evicted);
        self.went_idle(first);
    }

    /// One request fewer on `key`'s shared h2 connection `id`: idle from now when it was
    /// the last (closed then when no idle connection may be kept); closed at once when
    /// `discard`.
    pub(super) fn finish_h2(self: &Arc<Self>, key: &Key, id: u64, discard: bool) {
        let (dropped, first) = {
            let mut idle = self.lock();
            let first = idle.is_empty();
            let dropped = idle.finish_h2(key, id, discard, self.max_idle_per_host, Instant::now());
            self.sockets.metrics().set_idle(idle.len());
            (dropped, first && !idle.is_empty())
        };
        drop(dropped);
        self.went_idle(first);
    }

    /// After a connection went idle: the reaper learns of the first, and a connection
    /// waiting for a socket gets one closed for it.
    fn went_idle(self: &Arc<Self>, first: bool) {
        if first {
            if self.reaper_started.load(Ordering::Acquire) {
                self.wake.notify_one();
            } else if let Ok(runtime) = tokio::runtime::Handle::try_current()
                && !self.reaper_started.swap(true, Ordering::AcqRel)
            {
                runtime.spawn(reap(Arc::downgrade(self), Arc::clone(&self.wake)));
            }
        }
        self.sockets.went_idle();
    }

    /// Closes what has been idle for `idle_timeout` at `now`; how long until the next one is
    /// due, `None` when nothing is idle.
    fn expire(&self, now: Instant) -> Option<Duration> {
        loop {
            let closed = {
                let mut idle = self.lock();
                let since = idle.oldest_since()?;
                let due = since + self.idle_timeout;
                if due > now {
                    return Some(due - now);
                }
                let closed = idle.close_oldest();
                self.sockets.metrics().set_idle(idle.len());
                closed
            };
            drop(closed);
        }
    }
}

impl CloseIdle for Shared {
    fn close_least_recent(&self) -> bool {
        loop {
            let closed = {
                let mut idle = self.lock();
                let closed = idle.close_oldest();
                self.sockets.metrics().set_idle(idle.len());
                closed
            };
            match closed {
                None => return false,
                // Already closed by the origin: its socket was given back then.
                Some(closed) if closed.is_closed() => {}
                Some(closed) => {
                    drop(closed);
                    return true;
                }
            }
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // The reaper holds only a weak reference: this lets it see the pool is gone.
        self.wake.notify_one();
    }
}

/// Closes idle connections once they have been idle for `[upstream] idle_timeout`, the
/// least recently used first; sleeps until the next is due, or until one goes idle.
async fn reap(shared: Weak<Shared>, wake: Arc<Notify>) {
    loop {
        let next = match shared.upgrade() {
            Some(shared) => shared.expire(Instant::now()),
            None => return,
        };
        match next {
            Some(due) => tokio::time::sleep(due).await,
            None => wake.notified().await,
        }
    }
}
