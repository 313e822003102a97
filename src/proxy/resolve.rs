//! The one way agentgate opens a TCP connection to an origin: the guarded connector. The
//! pooled client's HTTPS connector (proxied HTTP, MITM'd requests, WebSocket, and the policy
//! fetches with every redirect hop) and passthrough tunnels all dial through [`connect`],
//! which asks the network guard (`crate::net::Guard`) for the vetted addresses of the host
//! and dials only those. A refused destination fails before any dial.
//!
//! Never resolves on its own (the guard does, once, and pins the answer); never retries
//! another address than the guard handed out.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::net::{Dial, Guard, GuardError};

/// The guard and the dialer, shared by every connection of one proxy.
#[derive(Clone)]
pub(crate) struct GuardedConnector {
    pub(crate) guard: Arc<Guard>,
    pub(crate) dialer: Arc<dyn Dial>,
}

impl GuardedConnector {
    /// Connects to `host:port`: the vetted addresses, in the resolver's order, first success wins.
    ///
    /// # Errors
    /// [`GuardError`] (refused, unresolvable, bad host) before any dial; the last
    /// [`io::Error`] when every vetted address failed.
    pub(crate) async fn connect(&self, host: &str, port: u16) -> Result<TcpStream, ConnectError> {
        let addrs = self.guard.addresses_to_dial(host, port).await?;
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address to connect to");
        for addr in addrs {
            match self.dialer.dial(addr).await {
                Ok(stream) => return Ok(stream),
                Err(error) => last = error,
            }
        }
        Err(ConnectError::Io(last))
    }
}

/// Why a connection to an origin was not opened.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConnectError {
    /// The guard gave no address: refused, unresolvable or not a host.
    #[error(transparent)]
    Guard(#[from] GuardError),
    /// Every vetted address failed to connect.
    #[error(transparent)]
    Io(io::Error),
}

impl tower_service::Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connector = self.clone();
        Box::pin(async move {
            let host = uri.host().unwrap_or_default();
            let default_port = if uri.scheme() == Some(&http::uri::Scheme::HTTPS) { 443 } else { 80 };
            let port = uri.port_u16().unwrap_or(default_port);
            connector.connect(host, port).await.map(TokioIo::new)
        })
    }
}
