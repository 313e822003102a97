//! Which addresses agentgate may connect to. Denied by default: loopback, RFC 1918, CGNAT,
//! link-local (cloud metadata), `0.0.0.0/8`, multicast, reserved and broadcast IPv4; IPv6
//! loopback, unspecified, unique-local, link-local and multicast, `fd00:ec2::254`; and the
//! IPv4-mapped, IPv4-compatible, NAT64 and 6to4 forms of a denied IPv4 address.
//! `[network] allow_cidrs` punches holes in that default, `[network] deny_cidrs` wins over
//! both, and agentgate's own listen and admin addresses are refused whatever the lists say.
//!
//! Never: resolves or dials; this is arithmetic on addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, PoisonError, RwLock};

use arc_swap::ArcSwap;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Deserializer};

use super::host::canonical_ip;
use crate::setting::networks;

/// `[network]`: destinations the network guard lets through (`crate::net`, `docs/security.md`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// Networks that may be reached although they are loopback, private or link-local
    /// (CIDR like `10.0.0.0/8`, or a single address). Default none.
    #[serde(deserialize_with = "networks")]
    pub allow_cidrs: Vec<IpNet>,
    /// Networks that are never reached, whatever `allow_cidrs` says (e.g. a public range
    /// the agent has no business in). Default none.
    #[serde(deserialize_with = "networks")]
    pub deny_cidrs: Vec<IpNet>,
}
/// `[connect]`: what CONNECT tunnels may reach.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectConfig {
    /// Ports a CONNECT may name: numbers or `"low-high"` ranges (default `[443, 80]`);
    /// anything else is refused with `network.port_not_allowed`.
    pub allowed_ports: Vec<PortRange>,
}

impl Default for ConnectConfig {
    fn default() -> Self {
        Self { allowed_ports: vec![PortRange::single(443), PortRange::single(80)] }
    }
}

impl ConnectConfig {
    /// Whether a CONNECT to `port` may open a tunnel.
    pub fn allows(&self, port: u16) -> bool {
        self.allowed_ports.iter().any(|range| range.contains(port))
    }

    /// Problems in `[connect]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        if self.allowed_ports.is_empty() {
            problems.push(
                "[connect] allowed_ports = []: no CONNECT could open a tunnel; the default is [443, 80]".to_owned(),
            );
        }
    }
}

/// One `[connect] allowed_ports` entry: a port (`443`) or an inclusive range (`"8000-8999"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    /// The first port.
    pub first: u16,
    /// The last port (equal to `first` for a single port).
    pub last: u16,
}

impl PortRange {
    /// Just `port`.
    pub const fn single(port: u16) -> Self {
        PortRange { first: port, last: port }
    }

    /// Whether `port` is in the range.
    pub fn contains(self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Port(i64),
            Range(String),
        }
        let bad = |shown: String| {
            serde::de::Error::custom(format!(
                "{shown}: invalid port; expected a port 1-65535 such as 443, or a range such as \"8000-8999\""
            ))
        };
        let port = |n: i64| u16::try_from(n).ok().filter(|p| *p != 0);
        match Written::deserialize(deserializer)? {
            Written::Port(n) => port(n).map(PortRange::single).ok_or_else(|| bad(n.to_string())),
            Written::Range(text) => {
                let (first, last) = text.split_once('-').unwrap_or((&text, &text));
                let parse = |s: &str| s.trim().parse::<i64>().ok().and_then(port);
                match (parse(first), parse(last)) {
                    (Some(first), Some(last)) if first <= last => Ok(PortRange { first, last }),
                    _ => Err(bad(format!("{text:?}"))),
                }
            }
        }
    }
}

/// The IPv4 networks denied by default.
const DENIED_V4: [(Ipv4Addr, u8); 9] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8),      // "this network" (RFC 791)
    (Ipv4Addr::new(10, 0, 0, 0), 8),     // private (RFC 1918)
    (Ipv4Addr::new(100, 64, 0, 0), 10),  // CGNAT (RFC 6598), Alibaba metadata 100.100.100.200
    (Ipv4Addr::new(127, 0, 0, 0), 8),    // loopback
    (Ipv4Addr::new(169, 254, 0, 0), 16), // link-local, cloud metadata 169.254.169.254
    (Ipv4Addr::new(172, 16, 0, 0), 12),  // private (RFC 1918)
    (Ipv4Addr::new(192, 168, 0, 0), 16), // private (RFC 1918)
    (Ipv4Addr::new(224, 0, 0, 0), 4),    // multicast
    (Ipv4Addr::new(240, 0, 0, 0), 4),    // reserved, and broadcast 255.255.255.255
];

/// The IPv6 networks denied by default (the embedded-IPv4 forms are checked separately).
const DENIED_V6: [(Ipv6Addr, u8); 6] = [
    (Ipv6Addr::UNSPECIFIED, 128),
    (Ipv6Addr::LOCALHOST, 128),
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7),  // unique-local
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10), // link-local
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8),  // multicast
    (Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254), 128), // AWS metadata (inside fc00::/7 too)
];

/// Why a destination address is refused. Each names the host and the setting that would
/// change the answer; none says anything about whether the port is open (no connect was
/// attempted), and none shows the agent the address a name resolved to.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// In the default deny set (loopback, private, link-local, metadata, ...) and not in
    /// `[network] allow_cidrs`.
    #[error(
        "{host} is or resolves to a loopback, private, link-local or other internal address; agentgate does not connect there unless [network] allow_cidrs lists it"
    )]
    PrivateAddress {
        /// The host as canonicalized.
        host: String,
        /// The refused address.
        addr: IpAddr,
    },
    /// In `[network] deny_cidrs`.
    #[error("{host} is or resolves to an address in [network] deny_cidrs entry {cidr}")]
    DeniedCidr {
        /// The host as canonicalized.
        host: String,
        /// The refused address.
        addr: IpAddr,
        /// The matching `deny_cidrs` entry.
        cidr: IpNet,
    },
    /// agentgate's own proxy or admin address: a request there would loop or reach the admin API.
    #[error("{host} is or resolves to agentgate's own listen or admin address; agentgate never connects to itself")]
    OwnAddress {
        /// The host as canonicalized.
        host: String,
        /// The refused address and port.
        addr: SocketAddr,
    },
    /// A connection redirected to `[transparent] listen` whose SNI or `Host` names another
    /// site than the address the client really connected to (domain fronting), or a name
    /// that does not resolve to it.
    #[error(
        "{host} does not resolve to {original}, the address this connection was made to; a transparent connection may only reach the site it was addressed to"
    )]
    NotOriginalDestination {
        /// The SNI or `Host` name as sent.
        host: String,
        /// The original destination (`SO_ORIGINAL_DST`).
        original: SocketAddr,
    },
    /// A CONNECT to a port outside `[connect] allowed_ports`.
    #[error("CONNECT to port {port} is not allowed; [connect] allowed_ports lists the ports tunnels may open")]
    PortNotAllowed {
        /// The refused port.
        port: u16,
    },
}

impl Refusal {
    /// The stable reason code in the block answer and the decision log.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::PrivateAddress { .. } => "network.private_address",
            Refusal::DeniedCidr { .. } => "network.denied_cidr",
            Refusal::OwnAddress { .. } => "network.own_address",
            Refusal::NotOriginalDestination { .. } => "transparent.host_mismatch",
            Refusal::PortNotAllowed { .. } => "network.port_not_allowed",
        }
    }
}

/// The address rules of one running proxy.
#[derive(Debug)]
pub struct AddressPolicy {
    /// `[network]`, replaced whole by a config reload.
    lists: ArcSwap<Lists>,
    /// agentgate's own listen (the bound address, once known) and admin addresses.
    own: RwLock<Vec<SocketAddr>>,
}

/// `[network] allow_cidrs` and `deny_cidrs`.
#[derive(Debug)]
struct Lists {
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
}

impl Lists {
    fn new(network: &NetworkConfig) -> Self {
        Lists { allow: network.allow_cidrs.clone(), deny: network.deny_cidrs.clone() }
    }
}

impl AddressPolicy {
    /// The rules of `[network]`, with the admin address (`[admin] listen`) as one of
    /// agentgate's own; the proxy adds its bound listen address with [`Self::add_own`].
    pub fn new(network: &NetworkConfig, admin: Option<SocketAddr>) -> Self {
        AddressPolicy {
            lists: ArcSwap::from_pointee(Lists::new(network)),
            own: RwLock::new(admin.into_iter().collect()),
        }
    }

    /// Replaces the `[network]` lists (a config reload); agentgate's own addresses stay.
    /// Connections vetted from now on, including those to hosts already pinned, use them.
    pub fn set_network(&self, network: &NetworkConfig) {
        self.lists.store(Arc::new(Lists::new(network)));
    }

    /// Adds one of agentgate's own addresses (the real bound port when `listen` said 0).
    pub fn add_own(&self, addr: SocketAddr) {
        self.own.write().unwrap_or_else(PoisonError::into_inner).push(addr);
    }

    /// Whether `addr` (of `host`, for the message) may be connected to.
    ///
    /// # Errors
    /// The [`Refusal`] naming why not.
    pub fn vet(&self, host: &str, addr: SocketAddr) -> Result<(), Refusal> {
        let ip = canonical_ip(addr.ip());
        let addr = SocketAddr::new(ip, addr.port());
        if self.is_own(addr) {
            return Err(Refusal::OwnAddress { host: host.to_owned(), addr });
        }
        let lists = self.lists.load();
        let embedded = embedded_ipv4(ip).map(IpAddr::V4);
        let in_list = |list: &[IpNet], ip: IpAddr| list.iter().find(|net| net.contains(&ip)).copied();
        if let Some(cidr) = in_list(&lists.deny, ip).or_else(|| embedded.and_then(|v4| in_list(&lists.deny, v4))) {
            return Err(Refusal::DeniedCidr { host: host.to_owned(), addr: ip, cidr });
        }
        if in_list(&lists.allow, ip).is_some() {
            return Ok(());
        }
        // An embedded IPv4 address goes out through a translator to that IPv4 address, so
        // it is judged as that address; only allow-listing the IPv6 form itself opens it.
        if is_denied_by_default(ip) || embedded.is_some_and(is_denied_by_default) {
            return Err(Refusal::PrivateAddress { host: host.to_owned(), addr: ip });
        }
        Ok(())
    }

    /// Whether `addr` is one of agentgate's own listen or admin addresses (a listener on
    /// `0.0.0.0` or `::` owns its port on loopback too).
    pub fn is_own(&self, addr: SocketAddr) -> bool {
        let addr = SocketAddr::new(canonical_ip(addr.ip()), addr.port());
        let own = self.own.read().unwrap_or_else(PoisonError::into_inner);
        own.iter().any(|own| {
            let own_ip = canonical_ip(own.ip());
            // A listener on 0.0.0.0 or :: answers on loopback too; a connect to an
            // unspecified address reaches this host.
            let same_host = own_ip == addr.ip()
                || addr.ip().is_unspecified()
                || (own_ip.is_unspecified() && addr.ip().is_loopback());
            own.port() == addr.port() && same_host
        })
    }
}

/// Whether `ip` is in the default deny set.
pub fn is_denied_by_default(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => DENIED_V4.iter().any(|&(net, len)| in_v4(net, len, v4)),
        IpAddr::V6(v6) => DENIED_V6.iter().any(|&(net, len)| in_v6(net, len, v6)),
    }
}

fn in_v4(net: Ipv4Addr, len: u8, ip: Ipv4Addr) -> bool {
    Ipv4Net::new(net, len).is_ok_and(|net| net.contains(&ip))
}

fn in_v6(net: Ipv6Addr, len: u8, ip: Ipv6Addr) -> bool {
    Ipv6Net::new(net, len).is_ok_and(|net| net.contains(&ip))
}

/// The IPv4 address an IPv6 address carries: IPv4-mapped `::ffff:0:0/96`, IPv4-compatible
/// `::/96` (deprecated, RFC 4291 §2.5.5.1), NAT64 `64:ff9b::/96` (RFC 6052) and its local
/// `64:ff9b:1::/48` (RFC 8215, last 32 bits), and 6to4 `2002::/16` (RFC 3056, bits 16–48).
fn embedded_ipv4(ip: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = ip else { return None };
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    if let Some(mapped) = v6.to_ipv4_mapped() {
        return Some(mapped);
    }
    // `::` and `::1` are IPv6's own unspecified and loopback, judged as such.
    if s[..6] == [0; 6] && !matches!(v6, Ipv6Addr::UNSPECIFIED | Ipv6Addr::LOCALHOST) {
        return Some(low);
    }
    if in_v6(Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96, v6)
        || in_v6(Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48, v6)
    {
        return Some(low);
    }
    if s[0] == 0x2002 {
        return Some(Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> AddressPolicy {
        let nets = |list: &[&str]| list.iter().map(|n| n.parse().expect("test CIDR")).collect();
        let network = NetworkConfig { allow_cidrs: nets(allow), deny_cidrs: nets(deny) };
        AddressPolicy::new(&network, Some(SocketAddr::from(([127, 0, 0, 1], 9090))))
    }

    fn code(policy: &AddressPolicy, addr: &str, port: u16) -> &'static str {
        let ip: IpAddr = addr.parse().expect("test address");
        policy.vet("h", SocketAddr::new(ip, port)).map_or_else(|r| r.code(), |()| "ok")
    }

    #[test]
    fn issue_8_internal_addresses_are_denied_by_default() {
        let p = policy(&[], &[]);
        for addr in [
            "127.0.0.1",
            "127.0.0.2",
            "10.0.0.1",
            "172.16.5.4",
            "192.168.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "169.254.169.254",
            "0.0.0.0",
            "0.1.2.3",
            "255.255.255.255",
            "224.0.0.1",
            "240.0.0.1",
            "::1",
            "::",
            "fd00::1",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::10.0.0.1",
            "64:ff9b::a00:1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b:1::7f00:1",
            "2002:a00:1::1",
            "2002:7f00:1::",
        ] {
            assert_eq!(code(&p, addr, 80), "network.private_address", "{addr}");
        }
        for addr in ["93.184.215.14", "203.0.113.7", "2606:4700::1", "64:ff9b::5db8:d70e", "2002:5db8:d70e::1"] {
            assert_eq!(code(&p, addr, 80), "ok", "{addr}");
        }
    }

    #[test]
    fn allow_punches_holes_deny_wins_over_both() {
        let p = policy(&["127.0.0.0/8", "10.0.0.0/8"], &["10.9.0.0/16", "203.0.113.0/24"]);
        assert_eq!(code(&p, "127.0.0.1", 8080), "ok");
        assert_eq!(code(&p, "::ffff:127.0.0.1", 8080), "ok");
        assert_eq!(code(&p, "10.1.2.3", 80), "ok");
        assert_eq!(code(&p, "10.9.1.1", 80), "network.denied_cidr");
        assert_eq!(code(&p, "203.0.113.9", 80), "network.denied_cidr");
        assert_eq!(code(&p, "64:ff9b::cb00:7109", 80), "network.denied_cidr");
        // Allowing the IPv4 network does not open translators to it.
        assert_eq!(code(&p, "64:ff9b::7f00:1", 80), "network.private_address");
        assert_eq!(code(&p, "::1", 80), "network.private_address");
    }

    #[test]
    fn own_addresses_are_refused_whatever_the_allow_list_says() {
        let p = policy(&["0.0.0.0/0", "::/0"], &[]);
        p.add_own(SocketAddr::from(([0, 0, 0, 0], 8080)));
        assert_eq!(code(&p, "127.0.0.1", 9090), "network.own_address");
        assert_eq!(code(&p, "127.0.0.1", 8080), "network.own_address");
        assert_eq!(code(&p, "::1", 8080), "network.own_address");
        assert_eq!(code(&p, "0.0.0.0", 9090), "network.own_address");
        assert_eq!(code(&p, "127.0.0.1", 8081), "ok");
        assert_eq!(code(&p, "127.0.0.2", 9090), "ok");
    }
}
