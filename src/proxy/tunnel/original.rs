//! A redirected connection's original destination, and the names that may stand for it: an
//! SNI or a `Host` names the original destination only when the network guard resolves it to
//! that very address (no domain fronting), and requests are routed to `name:original-port`.
//! The plain-HTTP `Host` check runs per request in the request service ([`check_host`]); the
//! TLS one once per connection (`transparent`).
//!
//! Never dials, never decides policy beyond holding a name to its address.

use std::net::{IpAddr, SocketAddr};
use std::sync::LazyLock;

use http::header::HOST;
use http::uri::{Authority, Scheme};
use http::{HeaderMap, Request};
use hyper::body::Incoming;
use tracing::info;

use super::admit::connection;
use crate::agents::Identity;
use crate::fetch::Origin;
use crate::gate::GateRequest;
use crate::net::{GuardError, Refusal, canonical_host};
use crate::proxy::answer::Exit;
use crate::proxy::context::{Entry, ProxyState, RequestContext};
use crate::proxy::error::ProxyError;
use crate::proxy::record::RequestRecord;

/// Checks that `host` (an SNI or `Host` name, or an IP) names `original`, the address the
/// client connected to: the IP itself, or a name whose addresses, as the network guard
/// resolves and vets them, include it. Returns the authority requests are routed to:
/// `host:original-port`.
///
/// # Errors
/// [`Refusal::NotOriginalDestination`] for another site or a name that does not resolve;
/// the guard's own refusal when the name's addresses are refused (so the agent hears the
/// same `network.*` reason a proxied request would).
pub(super) async fn names_destination(
    state: &ProxyState,
    host: &str,
    original: SocketAddr,
) -> Result<Authority, Refusal> {
    let mismatch = || Refusal::NotOriginalDestination { host: host.to_owned(), original };
    let authority = authority_for(host, original.port()).ok_or_else(mismatch)?;
    let canonical = canonical_host(host).map_err(|_| mismatch())?;
    let addresses = match state.guard.check(&canonical, original.port()).await {
        Ok(vetted) => vetted.addresses().to_vec(),
        Err(GuardError::Refused(refusal)) => return Err(refusal),
        Err(GuardError::Resolve { .. } | GuardError::BadHost(_)) => return Err(mismatch()),
    };
    if names_address(&addresses, original.ip()) { Ok(authority) } else { Err(mismatch()) }
}

/// Whether `original` is one of `addresses` (an IPv4 address matches its IPv4-mapped IPv6
/// form: a dual-stack listener sees IPv4 clients that way).
fn names_address(addresses: &[IpAddr], original: IpAddr) -> bool {
    let canonical = |ip: IpAddr| ip.to_canonical();
    addresses.iter().any(|ip| canonical(*ip) == canonical(original))
}

/// `host:port`, with brackets around an IPv6 address; `None` when `host` cannot be a URI
/// host (a malformed SNI or `Host`).
pub(super) fn authority_for(host: &str, port: u16) -> Option<Authority> {
    let text = match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
        _ => format!("{host}:{port}"),
    };
    text.parse().ok()
}

/// The original destination as an authority (`10.0.0.5:443`, `[2001:db8::5]:443`).
pub(super) fn original_authority(original: SocketAddr) -> Authority {
    // `SocketAddr`'s display is `ip:port`, brackets around IPv6: always an authority.
    original.to_string().parse().expect("a socket address is a valid URI authority")
}

/// The authority a plain-HTTP request on a transparent connection is routed to: the host its
/// `Host` names, on the original destination's port; the original destination itself when
/// there is no usable `Host` (HTTP/1.0). [`check_host`] then holds the name to that address.
pub(crate) fn named_authority(headers: &HeaderMap, original: SocketAddr) -> Authority {
    let named =
        headers.get(HOST).and_then(|value| value.to_str().ok()).and_then(|value| value.parse::<Authority>().ok());
    match named {
        Some(named) => authority_for(named.host().trim_start_matches('[').trim_end_matches(']'), original.port())
            .unwrap_or_else(|| original_authority(original)),
        None => original_authority(original),
    }
}

/// The `Host` check of a plain-HTTP request on a transparent connection: the site it names
/// (`context.authority`, from [`named_authority`]) must be `original`, and a port in `Host`
/// must be the original port. A mismatch is answered `403` with `transparent.host_mismatch`
/// (recorded), a refused address with the guard's own reason: never forwarded elsewhere.
///
/// # Errors
/// The block answer, already recorded.
pub(crate) async fn check_host(
    state: &ProxyState,
    record: &mut RequestRecord,
    original: SocketAddr,
    agent: &Identity,
    context: &RequestContext,
    request: &Request<Incoming>,
) -> Result<(), Exit> {
    let headers = request.headers();
    let host = context.authority.host().trim_start_matches('[').trim_end_matches(']');
    let port_named =
        headers.get(HOST).and_then(|value| value.to_str().ok()).and_then(|value| value.parse::<Authority>().ok());
    let other_port = port_named.and_then(|named| named.port_u16()).is_some_and(|port| port != original.port());
    let refusal = match names_destination(state, host, original).await {
        Ok(_) if other_port => Refusal::NotOriginalDestination { host: host.to_owned(), original },
        Ok(_) => return Ok(()),
        Err(refusal) => refusal,
    };
    info!(code = refusal.code().as_str(), %original, named = %host, "transparent request refused: {refusal}");
    let Some(origin) = refused_origin(&Scheme::HTTP, host, original) else {
        let authority = context.authority.to_string();
        let method = request.method().to_string();
        return Err(ProxyError::BadTunnelRequest { method, target: host.into(), authority }.into());
    };
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let url = format!("http://{}:{}{path}", origin.host(), origin.port());
    let refused = GateRequest {
        method: request.method().as_str(),
        path_and_query: path,
        headers,
        entry: Entry::Transparent { tls: false },
        ..connection(context.client, agent, &origin, &url, &NO_HEADERS, Entry::Transparent { tls: false })
    };
    let blocked = state.generation().gate.refuse(&refusal, &refused);
    Err(record.block(blocked, headers))
}

/// No headers: what a redirected connection's host-level request has (it sent none, or
/// TLS).
pub(super) static NO_HEADERS: LazyLock<HeaderMap> = LazyLock::new(HeaderMap::new);

/// The origin of a refused connection's record: `host` on the original port, or the original
/// destination itself when `host` is not a usable host (a bad SNI).
pub(super) fn refused_origin(scheme: &Scheme, host: &str, original: SocketAddr) -> Option<Origin> {
    authority_for(host, original.port())
        .and_then(|authority| Origin::from_parts(scheme, &authority).ok())
        .or_else(|| Origin::from_parts(scheme, &original_authority(original)).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_original_destination_matches_in_any_spelling_of_its_family() {
        let v4: IpAddr = [10, 200, 2, 2].into();
        let mapped: IpAddr = "::ffff:10.200.2.2".parse().expect("an IPv6 literal");
        assert!(names_address(&[v4], v4));
        assert!(names_address(&[[10, 200, 2, 9].into(), v4], mapped), "a dual-stack listener's view");
        assert!(names_address(&[mapped], v4));
        assert!(!names_address(&[[10, 200, 2, 9].into()], v4), "another site");
        assert!(!names_address(&[], v4), "no address at all");
    }

    #[test]
    fn the_host_header_names_the_site_on_the_original_port() {
        let original: SocketAddr = "10.200.2.2:80".parse().expect("a socket address");
        let headers = |host: &str| HeaderMap::from_iter([(HOST, host.parse().expect("a header value"))]);
        assert_eq!(named_authority(&headers("origin.test"), original).as_str(), "origin.test:80");
        assert_eq!(named_authority(&headers("origin.test:8080"), original).as_str(), "origin.test:80");
        assert_eq!(named_authority(&headers("[2001:db8::1]:80"), original).as_str(), "[2001:db8::1]:80");
        assert_eq!(named_authority(&HeaderMap::new(), original).as_str(), "10.200.2.2:80", "HTTP/1.0: no Host");
        assert_eq!(named_authority(&headers("a b"), original).as_str(), "10.200.2.2:80", "unparsable");
        let v6: SocketAddr = "[2001:db8::5]:443".parse().expect("a socket address");
        assert_eq!(original_authority(v6).as_str(), "[2001:db8::5]:443");
        assert_eq!(authority_for("a b", 443), None, "a malformed SNI or Host routes nowhere");
    }
}
