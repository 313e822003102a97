//! The seam between the fetcher and the network: one GET, answered with a response head
//! and a streaming body. The proxy's pooled upstream client implements [`PolicyTransport`]
//! (`proxy::policy_transport`), so policy fetches share its pool, resolver and TLS trust.

use std::future::Future;
use std::pin::Pin;

use http::{HeaderMap, Response, Uri};
use hyper::body::Incoming;

use crate::policy::FetchError;

/// What a transport hands back: the response head, and the body still streaming.
pub type PolicyResponse = Response<Incoming>;

/// The future a [`PolicyTransport`] returns.
pub type TransportFuture<'a> = Pin<Box<dyn Future<Output = Result<PolicyResponse, FetchError>> + Send + 'a>>;

/// Sends one GET for a policy file. Redirects, the size cap and the timeout are the
/// fetcher's: a transport makes exactly one request and returns whatever the origin
/// answered, 3xx included.
pub trait PolicyTransport: Send + Sync + 'static {
    /// GET `url` (absolute, `http` or `https`) with `headers`.
    ///
    /// # Errors
    /// [`FetchError::Network`] naming the URL and the whole cause (DNS, connect, TLS,
    /// protocol).
    fn get(&self, url: Uri, headers: HeaderMap) -> TransportFuture<'_>;
}
