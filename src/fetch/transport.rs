//! The seam between the fetcher and the network: one GET, answered with a response head
//! and a streaming body. The proxy's upstream pool implements [`PolicyTransport`]
//! (`app::policy_transport`), so policy fetches share its connections, its cap on them,
//! its resolver and its TLS trust.

use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http::{HeaderMap, Response, Uri};
use http_body_util::combinators::UnsyncBoxBody;

use crate::policy::FetchError;

/// A policy file's body as it streams in; dropping it before its end lets its connection go.
pub type PolicyBody = UnsyncBoxBody<Bytes, hyper::Error>;

/// What a transport hands back: the response head, and the body still streaming.
pub type PolicyResponse = Response<PolicyBody>;

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
    /// protocol); [`FetchError::Unreachable`] when no connection opened;
    /// [`FetchError::AtCapacity`] when the proxy had no connection to spare.
    fn get(&self, url: Uri, headers: HeaderMap) -> TransportFuture<'_>;
}
