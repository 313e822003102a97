//! The host's own interface addresses: what a listener bound to `0.0.0.0` or `::` answers
//! on besides loopback. An address on a loopback interface (`lo`) brings its whole prefix:
//! Linux delivers every address of `10.231.0.1/24` on `lo` locally (the `local` route it
//! adds covers the /24), so `10.231.0.2` reaches the listener too. Other `local` routes (an
//! AnyIP `ip route add local …` on another interface) are not read. The address rules ask for them when a destination's port is the port
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

use ipnet::IpNet;

/// The host's own addresses, IPv4 and IPv6 (link-local included, without its zone), in the
/// kernel's order, possibly with repeats: each configured address as a single address, or
/// with its prefix when it is on a loopback interface.
///
/// # Errors
/// The system's error when the list cannot be read (e.g. no file descriptor left), or
/// `Unsupported` on systems other than Linux.
#[cfg(target_os = "linux")]
pub fn addresses() -> io::Result<Vec<IpNet>> {
    use nix::net::if_::InterfaceFlags;
    use nix::sys::socket::SockaddrStorage;

    let ip = |address: &SockaddrStorage| {
        let v4 = address.as_sockaddr_in().map(|a| IpAddr::V4(a.ip()));
        v4.or_else(|| address.as_sockaddr_in6().map(|a| IpAddr::V6(a.ip())))
    };
    let interfaces = nix::ifaddrs::getifaddrs().map_err(io::Error::from)?;
    Ok(interfaces
        .filter_map(|interface| {
            let address = ip(interface.address.as_ref()?)?;
            let netmask = interface.netmask.as_ref().and_then(ip);
            Some(own(address, netmask, interface.flags.contains(InterfaceFlags::IFF_LOOPBACK)))
        })
        .collect())
}

/// What `address` (with `netmask`, on a loopback interface or not) makes this host's own:
/// on a loopback interface its whole prefix, elsewhere itself (`addr()` is the address).
fn own(address: IpAddr, netmask: Option<IpAddr>, loopback: bool) -> IpNet {
    let prefix = match (loopback, netmask) {
        (true, Some(IpAddr::V4(mask))) => mask.to_bits().count_ones() as u8,
        (true, Some(IpAddr::V6(mask))) => mask.to_bits().count_ones() as u8,
        _ => {
            if address.is_ipv4() {
                32
            } else {
                128
            }
        }
    };
    IpNet::new(address, prefix).unwrap_or_else(|_| IpNet::from(address))
}

/// Every address configured on the host's interfaces: not enumerated on this system.
///
/// # Errors
/// Always `Unsupported`: agentgate reads interface addresses on Linux only.
#[cfg(not(target_os = "linux"))]
pub fn addresses() -> io::Result<Vec<IpNet>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "agentgate reads the host's interface addresses on Linux only; bind listeners to a specific address",
    ))
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_interface_is_listed_with_its_prefix() {
        let addresses = addresses().expect("getifaddrs");
        let loopback: IpNet = "127.0.0.1/8".parse().expect("a network");
        assert!(addresses.contains(&loopback), "lo has 127.0.0.1/8: {addresses:?}");
    }

    #[test]
    fn an_address_on_a_loopback_interface_brings_its_prefix_and_elsewhere_only_itself() {
        let ip = |text: &str| text.parse::<IpAddr>().expect("an address");
        let net = |text: &str| text.parse::<IpNet>().expect("a network");
        let on_lo = own(ip("10.231.0.1"), Some(ip("255.255.255.0")), true);
        assert_eq!(on_lo, net("10.231.0.1/24"));
        assert!(on_lo.contains(&ip("10.231.0.2")));
        assert_eq!(own(ip("10.231.0.1"), Some(ip("255.255.255.0")), false), net("10.231.0.1/32"));
        assert_eq!(own(ip("fd00::1"), Some(ip("ffff:ffff:ffff:ffff::")), true), net("fd00::1/64"));
        assert_eq!(own(ip("fd00::1"), None, true), net("fd00::1/128"), "no netmask: the address only");
    }
}
