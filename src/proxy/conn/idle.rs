//! The idle timeout of one agent connection (`[connections] idle_timeout`): [`Activity`]
//! counts the connection's requests in flight, from the service call until the response body
//! has been sent or dropped, and [`Activity::quiet_for`] completes once there has been none
//! for the timeout. [`InFlight`] is the service wrapper that does the counting, for any
//! service whose responses carry a [`ProxyBody`].
//!
//! hyper has no idle timeout for HTTP/2 server connections (its HTTP/1.1 header read timeout
//! covers keep-alive only), and a stream in flight must never be cut: the count is what
//! tells an idle connection from a long download. Never closes a connection itself: the
//! caller (`serve::serve_connection`) asks hyper for a graceful shutdown.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::service::Service;
use tokio::sync::watch;

use crate::proxy::body::{ProxyBody, hold_until_body_ends};

/// The requests in flight on one connection; clones share the count.
#[derive(Clone)]
pub(crate) struct Activity {
    in_flight: Arc<watch::Sender<usize>>,
}

/// One request in flight; dropping it ends the request for the count.
struct Active {
    in_flight: Arc<watch::Sender<usize>>,
}

impl Activity {
    /// A connection with nothing in flight yet: the quiet starts now.
    pub(crate) fn new() -> Self {
        Activity { in_flight: Arc::new(watch::Sender::new(0)) }
    }

    fn start(&self) -> Active {
        self.in_flight.send_modify(|count| *count += 1);
        Active { in_flight: Arc::clone(&self.in_flight) }
    }

    /// Completes once no request has been in flight for `timeout`: the clock restarts when
    /// the last request in flight ends, and stops while any is in flight.
    pub(crate) async fn quiet_for(&self, timeout: Duration) {
        let mut count = self.in_flight.subscribe();
        loop {
            // `self` holds the sender, so the channel cannot close while this runs.
            let _ = count.wait_for(|in_flight| *in_flight == 0).await;
            tokio::select! {
                () = tokio::time::sleep(timeout) => return,
                _ = count.changed() => {}
            }
        }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.in_flight.send_modify(|count| *count = count.saturating_sub(1));
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
    S::Future: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = Response<ProxyBody>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ProxyBody>, S::Error>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let active = self.activity.start();
        let handled = self.service.call(request);
        Box::pin(async move { Ok(hold_until_body_ends(handled.await?, active)) })
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
    }
}
