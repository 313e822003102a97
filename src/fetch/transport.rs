//! The seam between the fetcher and the network: one GET, answered with a response head
//! and a streaming body. [`HttpsTransport`] is the default, built with the same TLS trust
//! as proxied traffic (`tls::upstream::client_config`); the proxy's own pooled client can
//! implement [`PolicyTransport`] too, so both share one pool.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, Uri};
use http_body_util::Empty;
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use crate::config::UpstreamConfig;
use crate::policy::FetchError;
use crate::tls::TlsError;

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

/// Building the default transport failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the policy fetch client: {source}")]
pub struct TransportError {
    /// Why the upstream TLS config could not be built (an unreadable `[upstream] extra_ca_files`
    /// entry, say).
    #[from]
    source: TlsError,
}

/// The default transport: a pooled hyper-util client over hyper-rustls, HTTP/1.1 or h2 by
/// ALPN, trusting the same roots as proxied traffic (webpki, system, `[upstream]
/// extra_ca_files`).
#[derive(Clone, Debug)]
pub struct HttpsTransport {
    client: Client<HttpsConnector<HttpConnector>, Empty<Bytes>>,
}

impl HttpsTransport {
    /// A client from `[upstream]`: its extra CAs, connect timeout and idle timeout.
    ///
    /// # Errors
    /// [`TransportError`] when the TLS config cannot be built from `extra_ca_files`.
    pub fn new(config: &UpstreamConfig) -> Result<Self, TransportError> {
        let tls = crate::tls::upstream::client_config(&config.extra_ca_files)?;
        let mut http = HttpConnector::new();
        // The HTTPS connector picks TLS from the scheme; this one only opens TCP
        // (CRATES.md pitfall 7).
        http.enforce_http(false);
        http.set_connect_timeout(Some(config.connect_timeout));
        let https = HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            // Without a timer, idle connections are only evicted at checkout (pitfall 9).
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(config.idle_timeout)
            .build(https);
        Ok(HttpsTransport { client })
    }
}

impl PolicyTransport for HttpsTransport {
    fn get(&self, url: Uri, headers: HeaderMap) -> TransportFuture<'_> {
        Box::pin(async move {
            let mut request = Request::new(Empty::new());
            *request.method_mut() = Method::GET;
            *request.uri_mut() = url.clone();
            *request.headers_mut() = headers;
            self.client.request(request).await.map_err(|e| FetchError::Network(format!("{url}: {}", error_chain(&e))))
        })
    }
}

/// An error and its sources, `outer: inner: innermost`, since hyper's `Display` shows one
/// level only.
pub(crate) fn error_chain(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}
