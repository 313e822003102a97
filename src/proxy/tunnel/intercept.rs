//! An intercepted tunnel, from the client's first bytes to the end of its inner connection:
//! a TLS handshake record means TLS, terminated with a leaf minted for the SNI name (or the
//! destination's host) within `[connections] tls_handshake_timeout`, then h2 or HTTP/1.1 by
//! ALPN; anything else is plain HTTP/1.1 with upgrades. The bytes read to tell them apart are
//! replayed (`conn::rewind`). Every inner request is served by the request service, routed to
//! the tunnel's destination and decided as the agent identified for the whole tunnel; or, in
//! a tunnel whose CONNECT was refused before its `200`, answered with that refusal
//! (`refused`).
//!
//! Never mints certificates itself (the TLS module does); never routes an inner request
//! anywhere but the tunnel's destination.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use bytes::BytesMut;
use http::uri::Authority;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio_rustls::LazyConfigAcceptor;
use tracing::{debug, info};

use super::refused::serve_refusal;
use crate::agents::Identity;
use crate::error_chain::error_chain;
use crate::gate::{Admitted, Blocked};
use crate::proxy::conn::{Drain, Rewind};
use crate::proxy::context::{Entry, ProxyState};
use crate::proxy::error::TunnelError;
use crate::proxy::serve::{ServerProtocols, serve_connection};
use crate::proxy::service::ProxyService;

/// The first byte of a TLS record carrying a handshake message (RFC 8446 §5.1).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// What answers the requests inside an intercepted tunnel.
pub(super) enum Inside {
    /// The request service, deciding each as this agent's (with a human's admission of the
    /// tunnel's host, when there is one).
    Served(Identity, Option<Arc<Admitted>>),
    /// The refusal of the tunnel's CONNECT, decided before its `200` and already recorded:
    /// the first request gets it, then the tunnel closes (`refused`).
    Refused(Arc<Blocked>),
}

/// An intercepted tunnel, from the upgrade to the end of the inner connection. The client
/// sends its first bytes within `[connections] first_byte_timeout` after the `200` and
/// finishes the TLS handshake within `tls_handshake_timeout`: a tunnel to a
/// server-speaks-first protocol waits that long and then closes (such hosts belong in
/// `[mitm] passthrough_hosts`).
pub(super) async fn intercept(
    state: Arc<ProxyState>,
    client: SocketAddr,
    inside: Inside,
    authority: Authority,
    on_upgrade: OnUpgrade,
    drain: Drain,
) -> Result<(), TunnelError> {
    let handshake_failed = |cause: String| TunnelError::ClientHandshake { authority: authority.to_string(), cause };
    let upgraded = on_upgrade.await.map_err(|error| handshake_failed(error_chain(&error)))?;
    let mut io = TokioIo::new(upgraded);
    let mut first = BytesMut::with_capacity(4096);
    let settings = &state.settings.connections;
    let first_byte_timeout = settings.first_byte_timeout;
    let read = tokio::time::timeout(first_byte_timeout, io.read_buf(&mut first)).await;
    match read {
        Ok(Ok(0)) => return Ok(()),
        Ok(Ok(_)) => {}
        Ok(Err(error)) => return Err(handshake_failed(error_chain(&error))),
        Err(_elapsed) => return Err(handshake_failed(format!("the client sent nothing for {first_byte_timeout:?}"))),
    }
    let is_tls = starts_tls(&first);
    let io = Rewind::new(first.freeze(), io);
    if !is_tls {
        debug!("no TLS ClientHello: serving the tunnel as plain HTTP");
        let tunnel = (authority, Entry::PlainTunnel);
        serve_inside(state, client, inside, tunnel, io, ServerProtocols::Http1, drain).await;
        return Ok(());
    }
    // Boxed, as every stage of a tunnel: a future held by value in an async fn is stored
    // twice in its caller (once as the argument, once as the awaited local), so nesting them
    // unboxed multiplied an idle tunnel's task to ~26 KiB (bench/RESULTS.md, round 8).
    Box::pin(serve_intercepted(state, client, inside, authority, io, Entry::Mitm, drain)).await
}

/// Whether `first`, the first bytes of a connection, start a TLS handshake record.
pub(super) fn starts_tls(first: &[u8]) -> bool {
    first.first() == Some(&TLS_HANDSHAKE_RECORD)
}

/// Terminates the client's TLS on `io` (whose first bytes are a ClientHello) with a leaf
/// minted for its SNI name (or `authority`'s host when it sent none), within
/// `[connections] tls_handshake_timeout`, then serves the inner HTTP/1.1 or h2: every
/// request routed to `authority` and answered as `inside` says. A CONNECT tunnel and a
/// transparent TLS connection (`transparent.rs`) are served here alike; the leaf of a
/// refused CONNECT's tunnel is minted the same way.
///
/// # Errors
/// [`TunnelError`] when the handshake fails or a leaf cannot be minted.
pub(super) async fn serve_intercepted<I>(
    state: Arc<ProxyState>,
    client: SocketAddr,
    inside: Inside,
    authority: Authority,
    io: I,
    entry: Entry,
    drain: Drain,
) -> Result<(), TunnelError>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let handshake_failed = |cause: String| TunnelError::ClientHandshake { authority: authority.to_string(), cause };
    let tls_failed = |error: std::io::Error| handshake_error(&authority, &error);
    let handshake_timeout = state.settings.connections.tls_handshake_timeout;
    let accept = async {
        let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io).await.map_err(tls_failed)?;
        let sni = start.client_hello().server_name().map(str::to_owned);
        if let Some(sni) = &sni
            && !sni.eq_ignore_ascii_case(authority.host())
        {
            info!(sni = %sni, "SNI differs from the CONNECT host; routing to the CONNECT host");
        }
        // IP targets come without SNI: mint for the CONNECT host (an IP SAN).
        let name = sni.unwrap_or_else(|| authority.host().to_owned());
        let config = state
            .certs
            .server_config(&name)
            .await
            .map_err(|source| TunnelError::LeafCertificate { host: name.clone(), source })?;
        let tls = start.into_stream(config).await.map_err(tls_failed)?;
        // Asked here, not of `tls` below: a local borrowed in an async fn keeps its place in
        // the future until its scope ends, so the TLS session would be held twice.
        let h2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
        Ok((tls, if h2 { ServerProtocols::Http2 } else { ServerProtocols::Http1 }))
    };
    // Boxed: the handshake's state is freed once it is done, not kept for the connection's life.
    let (tls, protocols) = match Box::pin(tokio::time::timeout(handshake_timeout, accept)).await {
        Ok(result) => result?,
        Err(_elapsed) => {
            return Err(handshake_failed(format!("the TLS handshake did not finish in {handshake_timeout:?}")));
        }
    };
    serve_inside(state, client, inside, (authority, entry), tls, protocols, drain).await;
    Ok(())
}

/// Serves the inner HTTP of a tunnel (its TLS terminated, or plain) as `inside` says. Not an
/// `async fn`, for the reason `serve_connection` is not: the future it returns holds a
/// pointer to the served connection, not `io` a second time.
fn serve_inside<I>(
    state: Arc<ProxyState>,
    client: SocketAddr,
    inside: Inside,
    tunnel: (Authority, Entry),
    io: I,
    protocols: ServerProtocols,
    drain: Drain,
) -> Pin<Box<dyn Future<Output = ()> + Send>>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let settings = &state.settings.connections;
    match inside {
        Inside::Served(agent, admitted) => {
            let service = ProxyService::for_tunnel(Arc::clone(&state), client, tunnel, agent, admitted, drain.clone());
            Box::pin(serve_connection(io, service, protocols, drain, settings))
        }
        Inside::Refused(blocked) => Box::pin(serve_refusal(io, blocked, protocols, drain, settings)),
    }
}

/// Names a failed client handshake truthfully: a certificate alert from the client means it
/// does not trust the CA; an EOF or reset without one is a hang-up, which says nothing about
/// trust (telling them apart keeps operators from installing a CA the client already trusts).
fn handshake_error(authority: &Authority, error: &std::io::Error) -> TunnelError {
    use rustls::AlertDescription as Alert;
    let authority = authority.to_string();
    let cause = error_chain(error);
    let alert = error.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>());
    if let Some(rustls::Error::AlertReceived(
        alert @ (Alert::UnknownCA
        | Alert::BadCertificate
        | Alert::CertificateUnknown
        | Alert::UnsupportedCertificate
        | Alert::CertificateExpired
        | Alert::AccessDenied),
    )) = alert
    {
        return TunnelError::ClientRejectedCertificate { authority, cause: format!("alert {alert:?}") };
    }
    let hung_up = matches!(
        error.kind(),
        std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::BrokenPipe
    );
    if hung_up {
        TunnelError::ClientHungUp { authority, cause }
    } else {
        TunnelError::ClientHandshake { authority, cause }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The errors rustls and tokio-rustls really produce, through the same acceptor calls
    /// `intercept` makes: a client that trusts no root rejects the minted certificate with an
    /// alert; a client that sends half a ClientHello and closes has hung up.
    #[tokio::test]
    async fn real_handshake_failures_are_told_apart() {
        use tokio::io::AsyncWriteExt;

        crate::tls::install_default_provider();
        let dir = tempfile::tempdir().expect("a temp dir");
        let ca = crate::tls::CertificateAuthority::create(dir.path(), false).expect("a CA");
        let certs = crate::tls::LeafCertCache::new(Arc::new(ca), 4).expect("a leaf key");
        let authority: Authority = "example.com:443".parse().expect("an authority");
        let accept = |io: tokio::io::DuplexStream| {
            let certs = &certs;
            async move {
                let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), io).await?;
                let config = certs.server_config("example.com").await.expect("a leaf is minted");
                start.into_stream(config).await.map(drop)
            }
        };

        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let client_config = rustls::ClientConfig::builder_with_provider(crate::tls::crypto_provider())
            .with_safe_default_protocol_versions()
            .expect("the provider supports the default versions")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config));
        let name = rustls::pki_types::ServerName::try_from("example.com").expect("a DNS name");
        let client = tokio::spawn(async move { connector.connect(name, client_io).await.map(drop) });
        let error = accept(server_io).await.expect_err("the client rejects the certificate");
        assert!(client.await.expect("the client task ends").is_err());
        let classified = handshake_error(&authority, &error);
        assert!(matches!(classified, TunnelError::ClientRejectedCertificate { .. }), "{error:?} -> {classified:?}");

        let (mut client_io, server_io) = tokio::io::duplex(64 * 1024);
        // A TLS handshake record header announcing 80 bytes, then 3 of them, then EOF.
        client_io.write_all(&[0x16, 0x03, 0x01, 0x00, 0x50, 0x01, 0x00, 0x00]).await.expect("written");
        drop(client_io);
        let error = accept(server_io).await.expect_err("the client went away");
        let classified = handshake_error(&authority, &error);
        assert!(matches!(classified, TunnelError::ClientHungUp { .. }), "{error:?} -> {classified:?}");
    }

    #[test]
    fn a_hang_up_is_not_advice_to_install_the_ca() {
        let authority: Authority = "example.com:443".parse().expect("an authority");
        let alert = |a| std::io::Error::new(std::io::ErrorKind::InvalidData, rustls::Error::AlertReceived(a));
        let rejected = handshake_error(&authority, &alert(rustls::AlertDescription::UnknownCA));
        assert!(matches!(rejected, TunnelError::ClientRejectedCertificate { .. }), "{rejected:?}");
        assert!(rejected.to_string().contains("install agentgate's CA in the client"), "{rejected}");
        assert!(rejected.to_string().contains("UnknownCA"), "{rejected}");

        let eof = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "tls handshake eof");
        let hung_up = handshake_error(&authority, &eof);
        assert!(matches!(hung_up, TunnelError::ClientHungUp { .. }), "{hung_up:?}");
        assert!(!hung_up.to_string().contains("CA"), "{hung_up}");
        let reset = handshake_error(&authority, &std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(matches!(reset, TunnelError::ClientHungUp { .. }), "{reset:?}");

        let other = handshake_error(&authority, &alert(rustls::AlertDescription::ProtocolVersion));
        assert!(matches!(other, TunnelError::ClientHandshake { .. }), "{other:?}");
        assert!(!other.to_string().contains("install"), "{other}");
    }
}
