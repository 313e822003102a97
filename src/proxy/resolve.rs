//! The one way agentgate opens a TCP connection to an origin: the guarded connector. The
//! connection pool (proxied HTTP, MITM'd requests, WebSocket, and the policy fetches with
//! every redirect hop) and passthrough tunnels all dial through [`GuardedConnector::connect`],
//! which asks the network guard (`crate::net::Guard`) for the vetted addresses of the host
//! and dials only those. A refused destination fails before any dial. It takes a
//! [`SocketPermit`] by value: no socket is opened outside the `[upstream] max_connections`
//! budget (`conn::sockets`), and the socket it returns carries the permit until it is closed.
//!
//! With `[upstream] parent` (`super::parent`), a host not in `parent_bypass` is reached
//! through a `CONNECT` tunnel opened by the parent, asked only after the guard vetted the
//! destination: the tunnel is the origin connection, counted under the same permit.
//!
//! Never resolves on its own (the guard does, once, and pins the answer); never retries
//! another address than the guard handed out.

use std::io;
use std::sync::Arc;

use tokio::net::TcpStream;

use super::conn::{Counted, SocketPermit};
use super::parent::{Parent, ParentError};
use crate::net::{Dial, Guard, GuardError};

/// The guard, the dialer and the parent proxy if any, shared by every connection of one
/// proxy.
#[derive(Clone)]
pub(crate) struct GuardedConnector {
    pub(crate) guard: Arc<Guard>,
    pub(crate) dialer: Arc<dyn Dial>,
    pub(crate) parent: Option<Arc<Parent>>,
}

impl GuardedConnector {
    /// Connects to `host:port` under `permit`: the vetted addresses, in the resolver's order,
    /// first success wins; through the parent proxy when there is one and `host` is not in
    /// `parent_bypass`. `host` may be a bracketed IPv6 literal.
    ///
    /// # Errors
    /// [`GuardError`] (refused, unresolvable, bad host) before any dial; the last
    /// [`io::Error`] when every vetted address failed; [`ParentError`] when the parent could
    /// not be reached or refused. The permit is given back either way.
    pub(crate) async fn connect(
        &self,
        permit: SocketPermit,
        host: &str,
        port: u16,
    ) -> Result<Counted<TcpStream>, ConnectError> {
        let addrs = self.guard.addresses_to_dial(host, port).await?;
        if let Some(parent) = self.parent.as_ref().filter(|parent| parent.routes(host)) {
            let stream = parent.tunnel(self.dialer.as_ref(), host, port, &addrs).await?;
            return Ok(Counted::new(stream, permit));
        }
        let mut last = io::Error::new(io::ErrorKind::NotFound, "no address to connect to");
        for addr in addrs {
            match self.dialer.dial(addr).await {
                Ok(stream) => return Ok(Counted::new(stream, permit)),
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
    /// The parent proxy could not be reached or refused the tunnel.
    #[error(transparent)]
    Parent(#[from] ParentError),
}
