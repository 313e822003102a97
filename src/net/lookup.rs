//! The two seams between the guard and the network: [`Resolve`] (a name to its addresses)
//! and [`Dial`] (a TCP connection to one vetted address). The running proxy uses the system
//! resolver and plain TCP; tests plug in doubles that answer chosen addresses and record
//! every address they are asked to dial, so "no connect was attempted" is proven without
//! sending a packet anywhere but loopback.
//!
//! Never: vets addresses (the guard does), caches (the guard pins what it vetted).

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

use tokio::net::TcpStream;

/// A boxed future of the seams.
pub type NetFuture<'a, T> = Pin<Box<dyn Future<Output = io::Result<T>> + Send + 'a>>;

/// Resolves a host name (never an IP literal: the guard handles those) to its addresses.
pub trait Resolve: Send + Sync + 'static {
    /// Every address of `name`, in the resolver's order.
    fn resolve<'a>(&'a self, name: &'a str) -> NetFuture<'a, Vec<IpAddr>>;
}

/// Opens a TCP connection to one address the guard vetted.
pub trait Dial: Send + Sync + 'static {
    /// A connected stream to `addr`.
    fn dial(&self, addr: SocketAddr) -> NetFuture<'_, TcpStream>;
}

/// The system resolver (`getaddrinfo`, so `/etc/hosts` included).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((name, 0)).await?.map(|addr| addr.ip()).collect()) })
    }
}

/// Plain TCP with `TCP_NODELAY` (proxied requests are latency-bound).
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpDialer;

impl Dial for TcpDialer {
    fn dial(&self, addr: SocketAddr) -> NetFuture<'_, TcpStream> {
        Box::pin(async move {
            let stream = TcpStream::connect(addr).await?;
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(%error, %addr, "cannot set TCP_NODELAY");
            }
            Ok(stream)
        })
    }
}
