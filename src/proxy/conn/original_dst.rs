//! Where a redirected connection was going: the original destination the kernel keeps for
//! a connection that nftables or iptables `REDIRECT` (NAT) sent to `[transparent] listen`
//! (`SO_ORIGINAL_DST` for IPv4, `IP6T_SO_ORIGINAL_DST` for IPv6, read through `nix`, no
//! unsafe code). Linux only: elsewhere `[transparent] listen` is refused at config check
//! (`TransparentConfig::problems`), so nothing here is reached.
//!
//! Never decides what to do with the answer (`transparent.rs` does).

use std::io;
use std::net::SocketAddr;

use tokio::net::TcpStream;

/// The destination the client connected to before the kernel redirected it here. A
/// connection that was not redirected either has no NAT record (an error) or answers the
/// listener's own address; the caller refuses both.
///
/// # Errors
/// The `getsockopt` error: `ENOENT` when the kernel has no NAT record of the connection.
#[cfg(target_os = "linux")]
pub(crate) fn original_destination(tcp: &TcpStream) -> io::Result<SocketAddr> {
    use nix::sys::socket::sockopt::{Ip6tOriginalDst, OriginalDst};
    use nix::sys::socket::{SockaddrIn, SockaddrIn6, getsockopt};

    let local = tcp.local_addr()?;
    // The family of the accepted socket says which table the kernel looked in; an IPv4
    // client on a dual-stack `[::]` listener still has an IPv4 NAT record.
    let v4 = || getsockopt(tcp, OriginalDst).map(|raw| SocketAddr::V4(SockaddrIn::from(raw).into()));
    let original = match local {
        SocketAddr::V4(_) => v4(),
        SocketAddr::V6(v6) if v6.ip().to_ipv4_mapped().is_some() => v4(),
        SocketAddr::V6(_) => getsockopt(tcp, Ip6tOriginalDst).map(|raw| SocketAddr::V6(SockaddrIn6::from(raw).into())),
    };
    original.map_err(io::Error::from)
}

/// Not Linux: there is no original destination to read.
///
/// # Errors
/// Always [`io::ErrorKind::Unsupported`].
#[cfg(not(target_os = "linux"))]
pub(crate) fn original_destination(_tcp: &TcpStream) -> io::Result<SocketAddr> {
    Err(io::Error::new(io::ErrorKind::Unsupported, "transparent mode needs Linux (SO_ORIGINAL_DST)"))
}
