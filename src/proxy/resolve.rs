//! Name resolution for every connection to an origin: the pooled client's `HttpConnector`
//! and passthrough tunnels both resolve here, so a DNS failure has one recognisable error
//! type, and the SSRF guard (DESIGN.md §9: vet the resolved address, connect to exactly
//! that) has one place to go.
//!
//! Never connects; never caches (the system resolver does).

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};

use hyper_util::client::legacy::connect::dns::Name;

/// A host name that did not resolve to any address.
#[derive(Debug, thiserror::Error)]
#[error("cannot resolve {host}")]
pub(crate) struct ResolveError {
    host: String,
    #[source]
    pub(crate) source: io::Error,
}

/// The resolver plugged into the upstream `HttpConnector` (a `tower_service::Service<Name>`).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Resolver;

impl tower_service::Service<Name> for Resolver {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = ResolveError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ResolveError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ResolveError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        // Port 0: HttpConnector fills in the port of the URI.
        Box::pin(async move { resolve(name.as_str(), 0).await.map(Vec::into_iter) })
    }
}

/// The addresses of `host` (a name or an IP literal, brackets allowed) with `port`.
pub(crate) async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, ResolveError> {
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let error = |source| ResolveError { host: host.to_owned(), source };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((bare, port)).await.map_err(error)?.collect();
    if addrs.is_empty() {
        return Err(error(io::Error::new(io::ErrorKind::NotFound, "the name has no addresses")));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn ip_literals_skip_the_resolver() {
        let v6 = resolve("[::1]", 443).await.map_err(|e| e.to_string());
        assert_eq!(v6, Ok(vec![SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, 443))]));
        let v4 = resolve("127.0.0.1", 80).await.map_err(|e| e.to_string());
        assert_eq!(v4, Ok(vec![SocketAddr::from(([127, 0, 0, 1], 80))]));
    }
}
