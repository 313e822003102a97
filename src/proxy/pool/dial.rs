//! Opening one connection to an origin for the pool: TCP through the guarded connector
//! (`resolve.rs`) on a socket permit the pool took, TLS verified against the upstream roots
//! with ALPN `h2` and `http/1.1` (or `http/1.1` alone for an upgrade), then hyper's HTTP/1.1
//! or h2 handshake by what the origin picked, the connection's task spawned; all of it
//! within `[upstream] connect_timeout`. Passthrough tunnels get the bare TCP stream.
//!
//! Never: takes a socket permit (the pool does, so every socket is counted), keeps a
//! connection (the pool's idle lists do), or sends a request.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::client::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tracing::debug;

use super::super::conn::{Counted, SocketPermit};
use super::super::resolve::GuardedConnector;
use super::{Conn, ConnectFailure, Key};
use crate::error_chain::error_chain;

/// What opens connections: the guarded connector and the two TLS set-ups.
pub(super) struct Dialer {
    tcp: GuardedConnector,
    /// ALPN `h2`, `http/1.1`: the origin picks.
    tls: TlsConnector,
    /// ALPN `http/1.1` only: for upgrades, which have no meaning over h2.
    tls_h1: TlsConnector,
    pub(super) connect_timeout: Duration,
}

impl Dialer {
    /// A dialer through `tcp` with `tls` (no ALPN set; the dialer sets it).
    pub(super) fn new(tcp: GuardedConnector, tls: &rustls::ClientConfig, connect_timeout: Duration) -> Self {
        // Both share `tls`'s session store: a new connection resumes whichever was before.
        let with_alpn = |protocols: &[&[u8]]| {
            let mut config = tls.clone();
            config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
            TlsConnector::from(Arc::new(config))
        };
        Dialer { tcp, tls: with_alpn(&[b"h2", b"http/1.1"]), tls_h1: with_alpn(&[b"http/1.1"]), connect_timeout }
    }

    /// A TCP connection to `host:port` on `permit`, within `connect_timeout`.
    pub(super) async fn tunnel(
        &self,
        permit: SocketPermit,
        host: &str,
        port: u16,
    ) -> Result<Counted<TcpStream>, ConnectFailure> {
        match tokio::time::timeout(self.connect_timeout, self.tcp.connect(permit, host, port)).await {
            Ok(connected) => connected.map_err(ConnectFailure::from),
            Err(_elapsed) => Err(ConnectFailure::TimedOut(self.connect_timeout)),
        }
    }

    /// Opens a new connection to `key` on `permit`: TCP through the guard, TLS for `https`
    /// (HTTP/1.1 only when `upgrade`), then hyper's HTTP/1.1 or h2 by ALPN, its task spawned.
    pub(super) async fn open(&self, permit: SocketPermit, key: &Key, upgrade: bool) -> Result<Conn, ConnectFailure> {
        let host = key.authority.host();
        let connecting = async {
            let tcp = self.tcp.connect(permit, host, key.port()).await.map_err(ConnectFailure::from)?;
            if !key.https() {
                return Ok::<_, ConnectFailure>((Stream::Plain(tcp), false));
            }
            let name = ServerName::try_from(host.trim_start_matches('[').trim_end_matches(']').to_owned())
                .map_err(|error| ConnectFailure::Tls(io::Error::new(io::ErrorKind::InvalidInput, error)))?;
            let tls = if upgrade { &self.tls_h1 } else { &self.tls };
            let stream = tls.connect(name, tcp).await.map_err(ConnectFailure::Tls)?;
            let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
            Ok((Stream::Tls(Box::new(stream)), h2))
        };
        let (stream, h2) = match tokio::time::timeout(self.connect_timeout, connecting).await {
            Ok(connected) => connected?,
            Err(_elapsed) => return Err(ConnectFailure::TimedOut(self.connect_timeout)),
        };
        let io = TokioIo::new(stream);
        if h2 {
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder.timer(TokioTimer::new());
            let (mut sender, connection) = builder.handshake(io).await.map_err(ConnectFailure::Handshake)?;
            tokio::spawn(async move {
                if let Err(error) = connection.await {
                    debug!(error = %error_chain(&error), "upstream h2 connection ended with an error");
                }
            });
            sender.ready().await.map_err(ConnectFailure::Handshake)?;
            Ok(Conn::H2(sender))
        } else {
            let (mut sender, connection) =
                http1::Builder::new().handshake(io).await.map_err(ConnectFailure::Handshake)?;
            tokio::spawn(async move {
                if let Err(error) = connection.with_upgrades().await {
                    debug!(error = %error_chain(&error), "upstream connection ended with an error");
                }
            });
            sender.ready().await.map_err(ConnectFailure::Handshake)?;
            Ok(Conn::H1(sender))
        }
    }
}

/// A socket to an origin, with TLS or without.
enum Stream {
    Plain(Counted<TcpStream>),
    Tls(Box<TlsStream<Counted<TcpStream>>>),
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_read(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write(cx, buf),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_write_vectored(cx, bufs),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(tcp) => tcp.is_write_vectored(),
            Stream::Tls(tls) => tls.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_flush(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(tcp) => Pin::new(tcp).poll_shutdown(cx),
            Stream::Tls(tls) => Pin::new(tls.as_mut()).poll_shutdown(cx),
        }
    }
}
