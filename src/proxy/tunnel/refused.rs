//! The inside of a tunnel whose CONNECT was refused before its `200` (the agent's egress
//! lists, the network guard, `[connect] allowed_ports`): an HTTPS client shows nothing of a
//! refused CONNECT but its status, so the refusal is answered to the first request inside
//! instead (its TLS terminated by `intercept` with a leaf minted as for any intercepted
//! tunnel, HTTP/1.1 or h2 by ALPN; plain HTTP when the first bytes are not TLS), with the
//! same block answer a request refused for the same reason gets (`answer::blocked_response_to`:
//! status, `agentgate-decision` header, body). Then the tunnel closes: HTTP/1.1 after that
//! answer (`Connection: close`), h2 with a GOAWAY. Every wait in it is one of the `[connections]` timeouts: the
//! first byte and the TLS handshake (`intercept`), the request head, the idle timeout.
//!
//! Never resolves, dials or relays anything, never decides, and writes no decision record:
//! the CONNECT's own record was written when it was answered `200`
//! (`RequestRecord::answered_inside`), and the answer carries its `event.id`.

use std::convert::Infallible;
use std::future::{Future, Ready, ready};
use std::sync::Arc;

use http::header::{CONNECTION, HeaderValue};
use http::{Request, Response, Version};
use hyper::body::Incoming;
use hyper::service::Service;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::debug;

use crate::gate::Blocked;
use crate::proxy::answer::blocked_response_to;
use crate::proxy::body::ProxyBody;
use crate::proxy::config::ConnectionsConfig;
use crate::proxy::conn::{Drain, DrainController};
use crate::proxy::serve::{ServerProtocols, serve_connection};

/// Serves the inner connection `io` of a refused CONNECT's tunnel until its first request is
/// answered with `blocked`, then closes it gracefully (or sooner, when agentgate drains);
/// the close waits at most `[connections] idle_timeout` before the connection is dropped.
/// Not an `async fn`, as `serve_connection` is not: `io` is held once, in the connection.
pub(super) fn serve_refusal<I>(
    io: I,
    blocked: Arc<Blocked>,
    protocols: ServerProtocols,
    mut drain: Drain,
    settings: &ConnectionsConfig,
) -> impl Future<Output = ()> + Send + 'static
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let answered = Arc::new(Notify::new());
    let service = Refusal { blocked, answered: Arc::clone(&answered) };
    // The connection's own shutdown signal, given once it has had its answer: hyper then
    // finishes that answer and closes (h2: GOAWAY).
    let close = DrainController::new();
    let mut served = Box::pin(serve_connection(io, service, protocols, close.handle(), settings));
    let idle_timeout = settings.idle_timeout;
    async move {
        tokio::select! {
            () = &mut served => return,
            () = answered.notified() => debug!("refused CONNECT answered inside its tunnel; closing it"),
            () = drain.draining() => {}
        }
        let deadline = Instant::now() + idle_timeout;
        let ((), _still_open) = tokio::join!(served, close.drain(deadline));
    }
}

/// The service inside a refused CONNECT's tunnel: every request it is handed (the first, and
/// any an h2 client sends before the GOAWAY reaches it) gets the refusal; over HTTP/1.1 with
/// `Connection: close`.
#[derive(Clone)]
struct Refusal {
    blocked: Arc<Blocked>,
    answered: Arc<Notify>,
}

impl Service<Request<Incoming>> for Refusal {
    type Response = Response<ProxyBody>;
    type Error = Infallible;
    type Future = Ready<Result<Response<ProxyBody>, Infallible>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let mut answer = blocked_response_to(&self.blocked, request.method().as_str(), request.headers());
        if request.version() < Version::HTTP_2 {
            // HTTP/1.1 reads no request after this one, pipelined or not (RFC 9112 §9.6).
            answer.headers_mut().insert(CONNECTION, HeaderValue::from_static("close"));
        }
        self.answered.notify_one();
        ready(Ok(answer))
    }
}
