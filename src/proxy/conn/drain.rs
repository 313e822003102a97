//! Graceful shutdown as one signal every connection and tunnel holds: serving, then draining
//! (finish what is in flight, take nothing new), then stopped (the grace period is over).
//!
//! hyper-util's `GracefulShutdown` hands out one non-`Clone` watcher per connection, but a
//! CONNECT tunnel is born inside a connection's service and outlives it; a cloneable handle
//! lets the tunnel carry its own. Never decides when to shut down: the listener does.
//!
//! A connection's task looks at the signal each time it is polled, several times a request,
//! so looking is an atomic load: a handle keeps its own waker slot, put in the signal's list
//! the first time the handle waits and taken out when it is dropped. (A `watch` channel,
//! shared by every connection, took its waiters' lock at each of those polls.)

use std::collections::HashMap;
use std::error::Error as StdError;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use atomic_waker::AtomicWaker;
use hyper::body::{Body, Incoming};
use hyper::rt::bounds::Http2ServerConnExec;
use hyper::rt::{Read, Write};
use hyper::server::conn::{http1, http2};
use hyper::service::HttpService;
use tokio::sync::Notify;
use tokio::time::Instant;

/// The most the shutdown waits, once the grace period is over, for what it cut off to end
/// (and for the records of the requests cut off to be handed to the decision log).
const CUT_OFF_RECORDS: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Phase {
    Serving,
    Draining,
    Stopped,
}

/// What the controller and every handle share.
struct Signal {
    /// The [`Phase`], as its `u8`; it only moves forward.
    phase: AtomicU8,
    /// The controller is gone without draining: every wait ends, as if the phase were reached
    /// (the phase itself stays, so a request is not called cut off by a shutdown that never
    /// happened).
    abandoned: AtomicBool,
    /// Handles alive; the controller's drain waits for none.
    holders: AtomicUsize,
    /// Told when the last handle is dropped.
    gone: Notify,
    /// The slots of the handles that have waited, by the slot's address: woken at each change.
    waiting: Mutex<HashMap<usize, Arc<AtomicWaker>>>,
}

impl Signal {
    fn reached(&self, phase: Phase) -> bool {
        self.phase.load(Ordering::Acquire) >= phase as u8 || self.abandoned.load(Ordering::Acquire)
    }

    /// Wakes every handle waiting; called after the phase (or `abandoned`) changed, so a
    /// handle that puts its slot in after the list was read sees the change when it looks again.
    /// The wakers are taken under the lock and woken after it: a wake on a runtime that is
    /// shutting down may drop its task there and then, and with it a handle, whose drop takes
    /// the lock.
    fn wake_all(&self) {
        let wakers: Vec<Waker> = {
            let waiting = self.waiting.lock().unwrap_or_else(PoisonError::into_inner);
            waiting.values().filter_map(|slot| slot.take()).collect()
        };
        wakers.into_iter().for_each(Waker::wake);
    }

    fn advance(&self, phase: Phase) {
        self.phase.fetch_max(phase as u8, Ordering::AcqRel);
        self.wake_all();
    }
}

/// The listener's end: starts draining and waits for every handle to be dropped.
pub(crate) struct DrainController {
    signal: Arc<Signal>,
}

/// Held by every connection and tunnel task; dropping it tells the controller the task is done.
pub(crate) struct Drain {
    signal: Arc<Signal>,
    /// This handle's waker, in `signal.waiting` once the handle has waited.
    slot: Option<Arc<AtomicWaker>>,
}

impl Clone for Drain {
    fn clone(&self) -> Self {
        Drain::new(&self.signal)
    }
}

impl Drop for Drain {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            let key = Arc::as_ptr(&slot) as usize;
            self.signal.waiting.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
        }
        if self.signal.holders.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.signal.gone.notify_waiters();
        }
    }
}

impl DrainController {
    pub(crate) fn new() -> Self {
        let signal = Signal {
            phase: AtomicU8::new(Phase::Serving as u8),
            abandoned: AtomicBool::new(false),
            holders: AtomicUsize::new(0),
            gone: Notify::new(),
            waiting: Mutex::new(HashMap::new()),
        };
        DrainController { signal: Arc::new(signal) }
    }

    /// A handle for a new connection or tunnel.
    pub(crate) fn handle(&self) -> Drain {
        Drain::new(&self.signal)
    }

    /// Tells every holder to drain, waits until `deadline` (the end of the grace period) for
    /// all of them to finish, then tells the rest to stop and lets them end (at most
    /// [`CUT_OFF_RECORDS`]). Returns how many were still running when the grace period ended.
    pub(crate) async fn drain(self, deadline: Instant) -> usize {
        self.signal.advance(Phase::Draining);
        let remaining = match tokio::time::timeout_at(deadline, self.all_gone()).await {
            Ok(()) => 0,
            Err(_elapsed) => self.signal.holders.load(Ordering::Acquire),
        };
        self.signal.advance(Phase::Stopped);
        if remaining > 0 {
            // What is cut off now ends at its next poll, and a request cut off writes its
            // decision record then (`record::RequestRecord`): let those reach the log before
            // it closes. Bounded, should anything hold a handle without being cut off.
            let _ = tokio::time::timeout(CUT_OFF_RECORDS, self.all_gone()).await;
        }
        remaining
    }

    /// Resolves once no handle is left.
    async fn all_gone(&self) {
        loop {
            let mut gone = pin!(self.signal.gone.notified());
            // Listening before looking: a last drop between the two still wakes this.
            gone.as_mut().enable();
            if self.signal.holders.load(Ordering::Acquire) == 0 {
                return;
            }
            gone.await;
        }
    }
}

impl Drop for DrainController {
    fn drop(&mut self) {
        if !self.signal.reached(Phase::Stopped) {
            self.signal.abandoned.store(true, Ordering::Release);
            self.signal.wake_all();
        }
    }
}

/// Resolves once the signal has reached `phase` (or the controller is gone).
struct Reached<'a> {
    drain: &'a mut Drain,
    phase: Phase,
}

impl Future for Reached<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let signal = &this.drain.signal;
        if signal.reached(this.phase) {
            return Poll::Ready(());
        }
        let slot = this.drain.slot.get_or_insert_with(|| {
            let slot = Arc::new(AtomicWaker::new());
            let key = Arc::as_ptr(&slot) as usize;
            signal.waiting.lock().unwrap_or_else(PoisonError::into_inner).insert(key, Arc::clone(&slot));
            slot
        });
        slot.register(cx.waker());
        // Looking again after registering: a change made before it is seen here, one made
        // after it wakes the slot.
        if signal.reached(this.phase) { Poll::Ready(()) } else { Poll::Pending }
    }
}

impl Drain {
    fn new(signal: &Arc<Signal>) -> Self {
        signal.holders.fetch_add(1, Ordering::AcqRel);
        Drain { signal: Arc::clone(signal), slot: None }
    }

    /// Resolves once draining has started (or the controller is gone).
    pub(crate) fn draining(&mut self) -> impl Future<Output = ()> + '_ {
        Reached { drain: self, phase: Phase::Draining }
    }

    /// Whether the grace period is over: what is still running is being cut off.
    pub(crate) fn is_stopped(&self) -> bool {
        self.signal.phase.load(Ordering::Acquire) == Phase::Stopped as u8
    }

    /// Resolves once the grace period is over (or the controller is gone).
    pub(crate) fn stopped(&mut self) -> impl Future<Output = ()> + '_ {
        Reached { drain: self, phase: Phase::Stopped }
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
            biased;
            result = conn.as_mut() => return result.map_err(Into::into),
            () = self.draining() => {}
            () = quiet() => {}
        }
        conn.as_mut().graceful_shutdown();
        tokio::select! {
            biased;
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn waiting(controller: &DrainController) -> usize {
        controller.signal.waiting.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    #[tokio::test]
    async fn waiting_handles_are_woken_at_each_phase_and_the_drain_counts_those_left() {
        let controller = DrainController::new();
        let (mut early, mut late, idle) = (controller.handle(), controller.handle(), controller.handle());
        let drained = tokio::spawn(async move {
            early.draining().await;
            early.is_stopped()
        });
        let stopped = tokio::spawn(async move {
            late.stopped().await;
            late.is_stopped()
        });
        // Both have waited once: two slots, and the handle that never waited has none.
        while waiting(&controller) < 2 {
            tokio::task::yield_now().await;
        }
        assert_eq!(waiting(&controller), 2);
        let signal = Arc::clone(&controller.signal);
        let draining = tokio::spawn(controller.drain(Instant::now() + Duration::from_millis(50)));
        assert!(!drained.await.expect("the early handle saw draining"), "draining is not stopped");
        assert!(stopped.await.expect("the late handle saw stopped"), "stopped once the grace period is over");
        assert_eq!(
            signal.waiting.lock().unwrap_or_else(PoisonError::into_inner).len(),
            0,
            "slots leave with their handles"
        );
        assert!(!draining.is_finished(), "the idle handle is still held");
        drop(idle);
        assert_eq!(
            draining.await.expect("the drain ends"),
            2,
            "the late and the idle handle were left at the deadline"
        );
    }

    #[tokio::test]
    async fn a_drain_whose_handles_all_end_in_time_counts_none_left() {
        let controller = DrainController::new();
        let mut handle = controller.handle();
        let task = tokio::spawn(async move { handle.draining().await });
        let left = controller.drain(Instant::now() + Duration::from_secs(30)).await;
        assert_eq!(left, 0);
        task.await.expect("the handle saw draining and ended");
    }

    #[test]
    fn a_wake_that_drops_a_waiting_handle_does_not_take_the_lock_twice() {
        /// A waker whose wake drops a handle, as a runtime shutting down may drop a task.
        struct DropsOnWake(Mutex<Option<Drain>>);
        impl std::task::Wake for DropsOnWake {
            fn wake(self: Arc<Self>) {
                self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
            }
        }
        let controller = DrainController::new();
        let mut dropped = controller.handle();
        // It has waited, so it has a slot, and its drop takes the list's lock.
        let mut noop = Context::from_waker(Waker::noop());
        assert!(pin!(dropped.draining()).poll(&mut noop).is_pending());
        let drops = Arc::new(DropsOnWake(Mutex::new(Some(dropped))));
        let waker = Waker::from(Arc::clone(&drops));
        let mut waiting = controller.handle();
        assert!(pin!(waiting.draining()).poll(&mut Context::from_waker(&waker)).is_pending());
        drop(controller);
        assert!(
            drops.0.lock().unwrap_or_else(PoisonError::into_inner).is_none(),
            "the wake ran and dropped its handle"
        );
        assert_eq!(waiting.signal.holders.load(Ordering::Acquire), 1);
    }

    #[tokio::test]
    async fn a_controller_dropped_without_draining_ends_every_wait_but_stops_nothing() {
        let controller = DrainController::new();
        let (mut handle, mut clone) = (controller.handle(), controller.handle().clone());
        let waits = tokio::spawn(async move {
            handle.stopped().await;
            clone.draining().await;
            (handle.is_stopped(), clone.is_stopped())
        });
        tokio::task::yield_now().await;
        drop(controller);
        let stopped = waits.await.expect("both waits end");
        assert_eq!(stopped, (false, false), "no shutdown happened, so nothing was cut off");
    }
}
