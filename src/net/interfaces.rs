//! The host's own interface addresses: what a listener bound to `0.0.0.0` or `::` answers
//! on besides loopback. The address rules ask for them when a destination's port is the port
//! of such a listener, so an agent cannot reach agentgate's admin API or its own proxy port
//! through the host's LAN address (`AddressPolicy::is_own`). They are read afresh on every
//! such ask (`getifaddrs`, a netlink dump on Linux): a new DHCP lease or a VPN coming up is
//! seen at once, with no reload and nothing cached to go stale.
//!
//! On Linux the list is `getifaddrs(3)` through `nix`. On other systems agentgate does not
//! enumerate interfaces (`nix` is a Linux-only dependency): [`addresses`] says so with an
//! `Unsupported` error. The address rules fail closed on any error: the port of an
//! unspecified listener is then refused on every host (`network.own_address`), so bind
//! listeners to a specific address there.
//!
//! Never: resolves, dials or decides; this reads the host's address list.

use std::io;
use std::net::IpAddr;

/// Every address configured on the host's interfaces, IPv4 and IPv6 (link-local included,
/// without its zone), in the kernel's order, possibly with repeats.
///
/// # Errors
/// The system's error when the list cannot be read (e.g. no file descriptor left), or
/// `Unsupported` on systems other than Linux.
#[cfg(target_os = "linux")]
pub fn addresses() -> io::Result<Vec<IpAddr>> {
    let interfaces = nix::ifaddrs::getifaddrs().map_err(io::Error::from)?;
    Ok(interfaces
        .filter_map(|interface| interface.address)
        .filter_map(|address| {
            let v4 = address.as_sockaddr_in().map(|a| IpAddr::V4(a.ip()));
            v4.or_else(|| address.as_sockaddr_in6().map(|a| IpAddr::V6(a.ip())))
        })
        .collect())
}

/// Every address configured on the host's interfaces: not enumerated on this system.
///
/// # Errors
/// Always `Unsupported`: agentgate reads interface addresses on Linux only.
#[cfg(not(target_os = "linux"))]
pub fn addresses() -> io::Result<Vec<IpAddr>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "agentgate reads the host's interface addresses on Linux only; bind listeners to a specific address",
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_interface_is_listed() {
        let addresses = addresses().expect("getifaddrs");
        assert!(addresses.iter().any(IpAddr::is_loopback), "lo has 127.0.0.1 or ::1: {addresses:?}");
    }
}
