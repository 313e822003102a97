//! The idle timeout of one agent connection (`[connections] idle_timeout`): [`Activity`]
//! counts the connection's requests in flight, from the service call until the response body
//! has been sent or dropped, and [`Activity::quiet_for`] completes once there has been none
//! for the timeout. [`InFlight`] is the service wrapper that does the counting, for any
//! service whose responses carry a [`ProxyBody`]: its responses carry a [`Counted`] body,
//! which holds the request's place in the count until it ends or is dropped.
//!
//! hyper has no idle timeout for HTTP/2 server connections (its HTTP/1.1 header read timeout
//! covers keep-alive only), and a stream in flight must never be cut: the count is what
//! tells an idle connection from a long download. Never closes a connection itself: the
//! caller (`serve::serve_connection`) asks hyper for a graceful shutdown.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::service::Service;
use tokio::time::Instant;

use crate::proxy::body::{BodyError, ProxyBody};

/// The requests in flight on one connection; clones share the count.
///
/// Counted with atomics, and looked at only when [`Activity::quiet_for`]'s timer fires: a
/// request wakes nothing. (A `watch` channel woke the connection's task when a request
/// started and when it ended, and each wake polled the whole connection and armed a new
/// timer: ~3,000 instructions a request, bench/RESULTS.md Round 16.)
#[derive(Clone)]
pub(crate) struct Activity {
    shared: Arc<Shared>,
}

struct Shared {
    in_flight: AtomicUsize,
    /// When the count last dropped to zero (or the connection began), in nanoseconds since
    /// `since`.
    quiet_from: AtomicU64,
    since: Instant,
}

/// One request in flight; dropping it ends the request for the count.
struct Active {
    shared: Arc<Shared>,
}

impl Activity {
    /// A connection with nothing in flight yet: the quiet starts now.
    pub(crate) fn new() -> Self {
        let shared = Shared { in_flight: AtomicUsize::new(0), quiet_from: AtomicU64::new(0), since: Instant::now() };
        Activity { shared: Arc::new(shared) }
    }

    fn start(&self) -> Active {
        self.shared.in_flight.fetch_add(1, Ordering::AcqRel);
        Active { shared: Arc::clone(&self.shared) }
    }

    /// Completes once no request has been in flight for `timeout`: the clock starts at the
    /// call, restarts when the last request in flight ends, and stops while any is in flight.
    /// It sleeps until the earliest moment the connection can have been quiet for `timeout`,
    /// and checks then.
    pub(crate) async fn quiet_for(&self, timeout: Duration) {
        let shared = &*self.shared;
        let called = Instant::now();
        loop {
            let deadline = if shared.in_flight.load(Ordering::Acquire) > 0 {
                // Nothing can be quiet before the request in flight ends and `timeout` passes.
                Instant::now() + timeout
            } else {
                // Read after the count: an end that took it to zero stored its time first
                // (`Active::drop`), so the time read here is at least that end's.
                let ended = shared.since + Duration::from_nanos(shared.quiet_from.load(Ordering::Acquire));
                let quiet_from = ended.max(called);
                if Instant::now() >= quiet_from + timeout {
                    return;
                }
                quiet_from + timeout
            };
            tokio::time::sleep_until(deadline).await;
        }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        let shared = &*self.shared;
        let now = u64::try_from(shared.since.elapsed().as_nanos()).unwrap_or(u64::MAX);
        // Stored before the count drops, so a check that sees zero in flight sees this end.
        shared.quiet_from.fetch_max(now, Ordering::AcqRel);
        shared.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// `service` with each request counted in an [`Activity`] until its response body ends.
#[derive(Clone)]
pub(crate) struct InFlight<S> {
    pub(crate) service: S,
    pub(crate) activity: Activity,
}

impl<S> Service<Request<Incoming>> for InFlight<S>
where
    S: Service<Request<Incoming>, Response = Response<ProxyBody>>,
    S::Future: Unpin,
{
    type Response = Response<Counted>;
    type Error = S::Error;
    type Future = Counting<S::Future>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let active = self.activity.start();
        Counting { handled: self.service.call(request), active: Some(active) }
    }
}

/// The service's future, its request counted from the call; the count passes to the response
/// body when it resolves. A plain struct, not an `async` block: that cost a box and a move of
/// the service's future per request.
pub(crate) struct Counting<F> {
    handled: F,
    /// Given to the response; `None` once it has been.
    active: Option<Active>,
}

impl<F, E> Future for Counting<F>
where
    F: Future<Output = Result<Response<ProxyBody>, E>> + Unpin,
{
    type Output = Result<Response<Counted>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let response = ready!(Pin::new(&mut self.handled).poll(cx))?;
        let active = self.active.take();
        Poll::Ready(Ok(response.map(|body| Counted { body, _active: active })))
    }
}

/// A response body that holds its request's place in the count until it ends or is dropped
/// (the client hung up mid-response).
pub(crate) struct Counted {
    body: ProxyBody,
    _active: Option<Active>,
}

impl Body for Counted {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn quiet_waits_for_the_last_request_in_flight_then_the_whole_timeout() {
        let activity = Activity::new();
        let timeout = Duration::from_secs(30);
        // Nothing in flight: quiet after the timeout from the start.
        let started = tokio::time::Instant::now();
        activity.quiet_for(timeout).await;
        assert_eq!(started.elapsed(), timeout);

        // A request in flight for far longer than the timeout holds the connection open.
        let request = activity.start();
        let quiet = activity.quiet_for(timeout);
        tokio::pin!(quiet);
        assert!(
            tokio::time::timeout(timeout * 10, quiet.as_mut()).await.is_err(),
            "quiet while a request is in flight"
        );
        let ended = tokio::time::Instant::now();
        drop(request);
        quiet.await;
        assert_eq!(ended.elapsed(), timeout, "the clock restarts when the last request ends");

        // Called again on a connection long quiet: the whole timeout from the call (the time
        // an h2 client gets to acknowledge a GOAWAY, `Drain::serve`).
        tokio::time::sleep(timeout * 3).await;
        let again = tokio::time::Instant::now();
        activity.quiet_for(timeout).await;
        assert_eq!(again.elapsed(), timeout, "the clock starts at the call");
    }
}
