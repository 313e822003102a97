//! The one place HTTP server connections are configured and driven: the proxy port, the
//! inside of CONNECT tunnels (intercepted TLS or plain HTTP) and redirected plain-HTTP
//! connections are all served by [`serve_connection`], HTTP/1.1 with upgrades or h2, under
//! the `[connections]` timeouts and graceful shutdown.
//!
//! Generic over the service: never handles a request itself.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;

use http::{Request, Response};
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper::service::Service;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tracing::debug;

use super::body::ProxyBody;
use super::config::ConnectionsConfig;
use super::conn::{Activity, Drain, FirstByte, InFlight};
use crate::error_chain::error_chain;

/// Which HTTP version a server connection speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServerProtocols {
    /// HTTP/1.1 with upgrades: the proxy port and plain tunnels (CONNECT and Upgrade live
    /// there), and intercepted TLS that did not negotiate `h2`.
    Http1,
    /// HTTP/2: intercepted TLS whose ALPN chose `h2` (RFC 9113 §3.3: h2 over TLS is chosen by
    /// ALPN only, never sniffed).
    Http2,
}

/// Serves one client connection (the proxy port, or the inside of a tunnel) with `service`
/// until it closes or shutdown ends it, under the `[connections]` timeouts: the first byte
/// within `first_byte_timeout`, then each HTTP/1.1 head within `header_read_timeout` (hyper's
/// limits on head size, about 400 KiB of buffer and 100 header fields, stay at their
/// defaults), and a graceful close (h2: GOAWAY) once no request has been in flight for
/// `idle_timeout` (`conn::idle`). Connection-level errors (a client hanging up mid-request) are
/// routine for a proxy and logged at debug. The first-byte clock starts when this is called.
///
/// Not an `async fn`: hyper's connection (with `io` in it, for a tunnel its whole TLS session)
/// is built here and boxed, so the returned future holds a pointer to it and nothing else of
/// size. An `async fn` kept `io` twice for the connection's life (as its argument and in
/// hyper's connection), and room for a connection of either version inline (a future is as
/// large as its largest state). With the same change to its callers (`intercept::serve_inside`,
/// `refused::serve_refusal`, `Drain::serve`): an idle MITM tunnel ~5 KiB smaller, an idle
/// keep-alive connection ~3 KiB (bench/idle.py, 1,000 connections, LTO builds).
pub(crate) fn serve_connection<I, S>(
    io: I,
    service: S,
    protocols: ServerProtocols,
    drain: Drain,
    settings: &ConnectionsConfig,
) -> impl Future<Output = ()> + Send + 'static
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: Service<Request<Incoming>, Response = Response<ProxyBody>, Error = Infallible> + Send + 'static,
    S::Future: Send + Unpin + 'static,
{
    let io = TokioIo::new(FirstByte::new(io, settings.first_byte_timeout));
    let activity = Activity::new();
    let service = InFlight { service, activity: activity.clone() };
    let idle_timeout = settings.idle_timeout;
    // hyper's own connections, one per version: hyper-util's `auto`, which sniffs for an h2
    // preface itself before hyper reads the request, costs ~5.5 KiB more per idle connection
    // (bench/RESULTS.md, Round 5).
    let connection = match protocols {
        ServerProtocols::Http1 => {
            let mut builder = http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(settings.header_read_timeout);
            Connection::Http1(Box::pin(builder.serve_connection(io, service).with_upgrades()))
        }
        ServerProtocols::Http2 => {
            let mut builder = http2::Builder::new(TokioExecutor::new());
            builder.timer(TokioTimer::new());
            Connection::Http2(Box::pin(builder.serve_connection(io, service)))
        }
    };
    async move {
        let quiet = || activity.quiet_for(idle_timeout);
        let served = match connection {
            Connection::Http1(connection) => drain.serve(connection, quiet).await,
            Connection::Http2(connection) => drain.serve(connection, quiet).await,
        };
        if let Err(error) = served {
            debug!(error = %error_chain(&*error), "connection closed with an error");
        }
    }
}

/// hyper's server connection of either version, boxed (`serve_connection`).
enum Connection<H1, H2> {
    Http1(Pin<Box<H1>>),
    Http2(Pin<Box<H2>>),
}
