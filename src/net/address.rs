//! Which addresses agentgate may connect to. Denied by default: every block of the IANA IPv4
//! and IPv6 Special-Purpose Address Registries that is not globally reachable (loopback,
//! RFC 1918, CGNAT, link-local and cloud metadata, `192.0.0.0/24`, benchmarking,
//! documentation, discard-only, unique-local, ...), except the registry's globally reachable
//! exceptions inside them (`192.0.0.9`, `2001:3::/32`, ...); multicast, reserved and
//! broadcast IPv4; IPv6 multicast and deprecated site-local `fec0::/10`; and the
//! IPv4-mapped, IPv4-compatible, NAT64, 6to4 and Teredo forms of a denied IPv4 address
//! (Teredo by its server and its decoded client, RFC 4380 §4). The tables are
//! `SPECIAL_V4` and `SPECIAL_V6`, one row per registry entry, the most specific row
//! deciding. `[network] allow_cidrs` punches holes in that default, `[network] deny_cidrs`
//! wins over both, and agentgate's own listen and admin addresses are refused whatever the
//! lists say: for a listener on `0.0.0.0` or `::`, its port on loopback and on every address
//! of the host's interfaces ([`super::interfaces`]).
//!
//! Never: resolves or dials; apart from reading the host's interface addresses, this is
//! arithmetic on addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use arc_swap::ArcSwap;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use serde::{Deserialize, Deserializer};

use super::host::canonical_ip;
use super::interfaces;
use crate::policy::OperatorCode;
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

/// How far a special-purpose block reaches: the registry's "Globally Reachable" column, or
/// how agentgate reads a block the registry marks "N/A" or does not list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reach {
    /// Globally reachable: allowed (rows of this kind are exceptions inside wider blocks).
    Global,
    /// Not globally reachable: denied by default.
    Local,
    /// Carries IPv4 addresses a connection ends up at: judged as those addresses.
    Embeds(Embedding),
}

/// Where an IPv6 address carries the IPv4 addresses it leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Embedding {
    /// The last 32 bits (IPv4-mapped, IPv4-compatible, NAT64).
    Last32,
    /// Bits 16–47 (6to4, RFC 3056 §2).
    SixToFour,
    /// The Teredo server in bits 32–63 and the client in the last 32 bits, inverted
    /// (RFC 4380 §4): the relay talks to both.
    Teredo,
}

use Reach::{Embeds, Global, Local};

/// The IPv4 special-purpose blocks: every entry of the IANA IPv4 Special-Purpose Address
/// Registry (RFC 6890, RFC 8190), plus multicast. The most specific matching row decides;
/// an address no row matches is globally reachable.
const SPECIAL_V4: [(Ipv4Addr, u8, Reach); 26] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8, Local), // "this network" (RFC 791, RFC 1122 §3.2.1.3)
    (Ipv4Addr::new(0, 0, 0, 0), 32, Local), // "this host on this network" (RFC 1122)
    (Ipv4Addr::new(10, 0, 0, 0), 8, Local), // private-use (RFC 1918)
    (Ipv4Addr::new(100, 64, 0, 0), 10, Local), // shared, CGNAT (RFC 6598); Alibaba metadata 100.100.100.200
    (Ipv4Addr::new(127, 0, 0, 0), 8, Local), // loopback (RFC 1122)
    (Ipv4Addr::new(169, 254, 0, 0), 16, Local), // link-local (RFC 3927); cloud metadata 169.254.169.254
    (Ipv4Addr::new(172, 16, 0, 0), 12, Local), // private-use (RFC 1918)
    (Ipv4Addr::new(192, 0, 0, 0), 24, Local), // IETF protocol assignments (RFC 6890); Oracle metadata 192.0.0.192
    (Ipv4Addr::new(192, 0, 0, 0), 29, Local), // IPv4 service continuity, DS-Lite (RFC 7335)
    (Ipv4Addr::new(192, 0, 0, 8), 32, Local), // IPv4 dummy address (RFC 7600)
    (Ipv4Addr::new(192, 0, 0, 9), 32, Global), // Port Control Protocol anycast (RFC 7723)
    (Ipv4Addr::new(192, 0, 0, 10), 32, Global), // TURN anycast (RFC 8155)
    (Ipv4Addr::new(192, 0, 0, 170), 32, Local), // NAT64/DNS64 discovery (RFC 8880, RFC 7050)
    (Ipv4Addr::new(192, 0, 0, 171), 32, Local), // NAT64/DNS64 discovery (RFC 8880, RFC 7050)
    (Ipv4Addr::new(192, 0, 2, 0), 24, Local), // documentation, TEST-NET-1 (RFC 5737)
    (Ipv4Addr::new(192, 31, 196, 0), 24, Global), // AS112-v4 (RFC 7535)
    (Ipv4Addr::new(192, 52, 193, 0), 24, Global), // AMT (RFC 7450)
    (Ipv4Addr::new(192, 88, 99, 0), 24, Global), // deprecated 6to4 relay anycast (RFC 7526): "N/A", public relays
    (Ipv4Addr::new(192, 168, 0, 0), 16, Local), // private-use (RFC 1918)
    (Ipv4Addr::new(192, 175, 48, 0), 24, Global), // AS112 direct delegation (RFC 7534)
    (Ipv4Addr::new(198, 18, 0, 0), 15, Local), // benchmarking (RFC 2544)
    (Ipv4Addr::new(198, 51, 100, 0), 24, Local), // documentation, TEST-NET-2 (RFC 5737)
    (Ipv4Addr::new(203, 0, 113, 0), 24, Local), // documentation, TEST-NET-3 (RFC 5737)
    (Ipv4Addr::new(224, 0, 0, 0), 4, Local), // multicast (RFC 5771; not in the registry)
    (Ipv4Addr::new(240, 0, 0, 0), 4, Local), // reserved (RFC 1112)
    (Ipv4Addr::new(255, 255, 255, 255), 32, Local), // limited broadcast (RFC 8190, RFC 919)
];

/// The IPv6 special-purpose blocks: every entry of the IANA IPv6 Special-Purpose Address
/// Registry (RFC 6890, RFC 8190), plus IPv4-compatible addresses, deprecated site-local and
/// multicast. The most specific matching row decides; an address no row matches is
/// globally reachable.
const SPECIAL_V6: [(Ipv6Addr, u8, Reach); 27] = [
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0, 0), 96, Embeds(Embedding::Last32)), // IPv4-compatible, deprecated (RFC 4291 §2.5.5.1)
    (Ipv6Addr::UNSPECIFIED, 128, Local),                                    // unspecified (RFC 4291)
    (Ipv6Addr::LOCALHOST, 128, Local),                                      // loopback (RFC 4291)
    // IPv4-mapped (RFC 4291): "False" as an address on the wire; a connect to it goes to the
    // IPv4 address, which is how `canonical_ip` reads it before it gets here.
    (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96, Embeds(Embedding::Last32)),
    (Ipv6Addr::new(0x64, 0xff9b, 0, 0, 0, 0, 0, 0), 96, Embeds(Embedding::Last32)), // NAT64 well-known prefix (RFC 6052)
    (Ipv6Addr::new(0x64, 0xff9b, 1, 0, 0, 0, 0, 0), 48, Local), // local-use IPv4/IPv6 translation (RFC 8215)
    (Ipv6Addr::new(0x100, 0, 0, 0, 0, 0, 0, 0), 64, Local),     // discard-only (RFC 6666)
    (Ipv6Addr::new(0x100, 0, 0, 1, 0, 0, 0, 0), 64, Local),     // dummy IPv6 prefix (RFC 9780)
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 23, Local),    // IETF protocol assignments (RFC 2928)
    (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32, Embeds(Embedding::Teredo)), // Teredo (RFC 4380): "N/A"
    (Ipv6Addr::new(0x2001, 1, 0, 0, 0, 0, 0, 1), 128, Global),  // Port Control Protocol anycast (RFC 7723)
    (Ipv6Addr::new(0x2001, 1, 0, 0, 0, 0, 0, 2), 128, Global),  // TURN anycast (RFC 8155)
    (Ipv6Addr::new(0x2001, 2, 0, 0, 0, 0, 0, 0), 48, Local),    // benchmarking (RFC 5180)
    (Ipv6Addr::new(0x2001, 3, 0, 0, 0, 0, 0, 0), 32, Global),   // AMT (RFC 7450)
    (Ipv6Addr::new(0x2001, 4, 0x112, 0, 0, 0, 0, 0), 48, Global), // AS112-v6 (RFC 7535)
    (Ipv6Addr::new(0x2001, 0x10, 0, 0, 0, 0, 0, 0), 28, Local), // deprecated, previously ORCHID (RFC 4843)
    (Ipv6Addr::new(0x2001, 0x20, 0, 0, 0, 0, 0, 0), 28, Global), // ORCHIDv2 (RFC 7343)
    (Ipv6Addr::new(0x2001, 0x30, 0, 0, 0, 0, 0, 0), 28, Global), // drone remote ID entity tags (RFC 9374)
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0), 32, Local), // documentation (RFC 3849)
    (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16, Embeds(Embedding::SixToFour)), // 6to4 (RFC 3056): "N/A"
    (Ipv6Addr::new(0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0), 48, Global), // AS112 direct delegation (RFC 7534)
    (Ipv6Addr::new(0x3fff, 0, 0, 0, 0, 0, 0, 0), 20, Local),    // documentation (RFC 9637)
    (Ipv6Addr::new(0x5f00, 0, 0, 0, 0, 0, 0, 0), 16, Local),    // segment routing SIDs (RFC 9602)
    (Ipv6Addr::new(0xfc00, 0, 0, 0, 0, 0, 0, 0), 7, Local),     // unique-local (RFC 4193); AWS metadata fd00:ec2::254
    (Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 0), 10, Local),    // link-local (RFC 4291)
    (Ipv6Addr::new(0xfec0, 0, 0, 0, 0, 0, 0, 0), 10, Local), // site-local, deprecated (RFC 3879; not in the registry)
    (Ipv6Addr::new(0xff00, 0, 0, 0, 0, 0, 0, 0), 8, Local),  // multicast (RFC 4291; not in the registry)
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
    #[error(
        "{host} is or resolves to agentgate's own listen or admin address or its shared policy store; agentgate never connects to itself"
    )]
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
    pub fn code(&self) -> OperatorCode {
        match self {
            Refusal::PrivateAddress { .. } => OperatorCode::PrivateAddress,
            Refusal::DeniedCidr { .. } => OperatorCode::DeniedCidr,
            Refusal::OwnAddress { .. } => OperatorCode::OwnAddress,
            Refusal::NotOriginalDestination { .. } => OperatorCode::HostMismatch,
            Refusal::PortNotAllowed { .. } => OperatorCode::PortNotAllowed,
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
        let in_list = |list: &[IpNet], ip: IpAddr| list.iter().find(|net| net.contains(&ip)).copied();
        if let Some(cidr) = leads_to(ip).find_map(|ip| in_list(&lists.deny, ip)) {
            return Err(Refusal::DeniedCidr { host: host.to_owned(), addr: ip, cidr });
        }
        if in_list(&lists.allow, ip).is_some() {
            return Ok(());
        }
        // An embedded IPv4 address goes out through a translator or relay to that IPv4
        // address, so it is judged as that address; only allow-listing the IPv6 form itself
        // opens it.
        if is_denied_by_default(ip) {
            return Err(Refusal::PrivateAddress { host: host.to_owned(), addr: ip });
        }
        Ok(())
    }

    /// Whether `addr` is one of agentgate's own listen or admin addresses. A listener on
    /// `0.0.0.0` or `::` owns its port on loopback and on every interface address of the
    /// host (read afresh, [`interfaces::addresses`]); a connect to an unspecified address
    /// reaches this host; an address carrying an IPv4 address (NAT64, 6to4, Teredo) is own
    /// when that address is.
    pub fn is_own(&self, addr: SocketAddr) -> bool {
        let targets = leads_to(canonical_ip(addr.ip()));
        let (exact, unspecified_listener) = {
            let own = self.own.read().unwrap_or_else(PoisonError::into_inner);
            let on_port = own.iter().filter(|own| own.port() == addr.port()).map(|own| canonical_ip(own.ip()));
            on_port.fold((false, false), |(exact, unspecified), own| {
                let exact = exact || targets.clone().any(|t| t == own || t.is_unspecified());
                (exact, unspecified || own.is_unspecified())
            })
        };
        if exact || !unspecified_listener {
            return exact;
        }
        // A listener on 0.0.0.0 or :: answers on loopback and on every interface address.
        targets.clone().any(|t| t.is_loopback()) || on_this_host(targets)
    }
}

/// Whether one of `targets` is an address of this host's interfaces; `true` when they
/// cannot be read (fail closed: the caller's port is agentgate's own on some address).
fn on_this_host(mut targets: impl Iterator<Item = IpAddr>) -> bool {
    match interfaces::addresses() {
        Ok(host) => targets.any(|t| host.iter().any(|own| own.contains(&t))),
        Err(error) => {
            static SAID: AtomicBool = AtomicBool::new(false);
            if !SAID.swap(true, Ordering::Relaxed) {
                tracing::warn!(%error, "cannot read the host's interface addresses; every destination on the port of a listener on 0.0.0.0 or :: is refused as agentgate's own");
            }
            true
        }
    }
}

/// Whether `ip` is in the default deny set: the most specific row of `SPECIAL_V4` or
/// `SPECIAL_V6` says not globally reachable, or the IPv4 address it carries is.
pub fn is_denied_by_default(ip: IpAddr) -> bool {
    leads_to(ip).any(|ip| reach(ip) == Some(Local))
}

/// The row of the special-purpose tables deciding for `ip`: the most specific one.
fn reach(ip: IpAddr) -> Option<Reach> {
    match ip {
        IpAddr::V4(v4) => {
            SPECIAL_V4.iter().filter(|(net, len, _)| in_v4(*net, *len, v4)).max_by_key(|(_, len, _)| *len).map(|r| r.2)
        }
        IpAddr::V6(v6) => {
            SPECIAL_V6.iter().filter(|(net, len, _)| in_v6(*net, *len, v6)).max_by_key(|(_, len, _)| *len).map(|r| r.2)
        }
    }
}

fn in_v4(net: Ipv4Addr, len: u8, ip: Ipv4Addr) -> bool {
    Ipv4Net::new(net, len).is_ok_and(|net| net.contains(&ip))
}

fn in_v6(net: Ipv6Addr, len: u8, ip: Ipv6Addr) -> bool {
    Ipv6Net::new(net, len).is_ok_and(|net| net.contains(&ip))
}

impl Embedding {
    /// The IPv4 addresses a connection to `v6` ends up at.
    fn ipv4(self, v6: Ipv6Addr) -> [Option<Ipv4Addr>; 2] {
        let bits = u128::from(v6);
        // The 32 bits at `shift` (the cast keeps the low 32 bits).
        let at = |shift: u32| (bits >> shift) as u32;
        match self {
            Embedding::Last32 => [Some(Ipv4Addr::from(at(0))), None],
            Embedding::SixToFour => [Some(Ipv4Addr::from(at(80))), None],
            Embedding::Teredo => [Some(Ipv4Addr::from(at(64))), Some(Ipv4Addr::from(!at(0)))],
        }
    }
}

/// `ip` and the IPv4 addresses it carries (NAT64, 6to4, Teredo, ...): every address a
/// connection to `ip` may end up at.
fn leads_to(ip: IpAddr) -> impl Iterator<Item = IpAddr> + Clone {
    let embedded = match (reach(ip), ip) {
        (Some(Embeds(embedding)), IpAddr::V6(v6)) => embedding.ipv4(v6),
        _ => [None, None],
    };
    std::iter::once(ip).chain(embedded.into_iter().flatten().map(IpAddr::V4))
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
        policy.vet("h", SocketAddr::new(ip, port)).map_or_else(|r| r.code().as_str(), |()| "ok")
    }

    #[test]
    fn internal_addresses_are_denied_by_default() {
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
        for addr in ["93.184.215.14", "2606:4700::1", "64:ff9b::5db8:d70e", "2002:5db8:d70e::1"] {
            assert_eq!(code(&p, addr, 80), "ok", "{addr}");
        }
    }

    /// A Teredo address (RFC 4380 §4): server, flags, port 40000 and client, both obfuscated.
    fn teredo(server: [u8; 4], client: [u8; 4]) -> String {
        let server = u128::from(u32::from(Ipv4Addr::from(server))) << 64;
        let client = u128::from(!u32::from(Ipv4Addr::from(client)));
        Ipv6Addr::from((0x2001_0000_u128 << 96) | server | (0x8000_63bf_u128 << 32) | client).to_string()
    }

    #[test]
    fn special_purpose_blocks_are_denied_and_their_reachable_exceptions_are_not() {
        let p = policy(&[], &[]);
        for addr in [
            "192.0.0.1",
            "192.0.0.8",
            "192.0.0.170",
            "192.0.0.192",
            "192.0.2.1",
            "198.18.0.1",
            "198.19.255.254",
            "198.51.100.7",
            "203.0.113.7",
            "fec0::1",
            "100::1",
            "100:0:0:1::1",
            "2001:db8::1",
            "2001:10::1",
            "2001:2::1",
            "2001:1ff::1",
            "3fff::1",
            "5f00::1",
            "64:ff9b:1::5db8:d70e",
            // Embedded forms of the new IPv4 blocks.
            "64:ff9b::c000:201",
            "2002:c612:1::1",
            "::198.18.0.1",
        ] {
            assert_eq!(code(&p, addr, 80), "network.private_address", "{addr}");
        }
        for addr in [
            "192.0.0.9",
            "192.0.0.10",
            "192.31.196.1",
            "192.52.193.1",
            "192.88.99.1",
            "192.175.48.1",
            "198.17.255.255",
            "198.20.0.0",
            "2001:1::1",
            "2001:1::2",
            "2001:3::1",
            "2001:4:112::1",
            "2001:20::1",
            "2001:30::1",
            "2001:200::1",
            "2620:4f:8000::1",
            "3fff:1000::1",
        ] {
            assert_eq!(code(&p, addr, 80), "ok", "{addr}");
        }
    }

    #[test]
    fn teredo_is_judged_by_its_server_and_its_decoded_client() {
        let p = policy(&[], &[]);
        let server = [65, 54, 227, 120];
        // The literal pins the decoding: client bits 80ff:fffe are 127.0.0.1 inverted.
        assert_eq!(teredo(server, [127, 0, 0, 1]), "2001:0:4136:e378:8000:63bf:80ff:fffe");
        assert_eq!(code(&p, "2001:0:4136:e378:8000:63bf:80ff:fffe", 80), "network.private_address");
        for client in [[169, 254, 169, 254], [10, 0, 0, 1], [192, 0, 2, 1], [0, 0, 0, 0], [255, 255, 255, 255]] {
            let addr = teredo(server, client);
            assert_eq!(code(&p, &addr, 80), "network.private_address", "{addr} carries {client:?}");
        }
        let private_server = teredo([10, 0, 0, 1], [93, 184, 215, 14]);
        assert_eq!(code(&p, &private_server, 80), "network.private_address", "{private_server}");
        // A Teredo address whose server and client are globally reachable is too (RFC 4380).
        let public = teredo(server, [93, 184, 215, 14]);
        assert_eq!(code(&p, &public, 80), "ok", "{public}");
        // deny_cidrs sees the client too.
        let p = policy(&[], &["93.184.215.0/24"]);
        assert_eq!(code(&p, &public, 80), "network.denied_cidr", "{public}");
    }

    #[test]
    fn allow_cidrs_opens_any_special_purpose_block() {
        let loopback_client = teredo([65, 54, 227, 120], [127, 0, 0, 1]);
        let p = policy(
            &["192.0.0.0/24", "198.18.0.0/15", "203.0.113.7/32", "fec0::/10", "100::/64", "2001:db8::/32", "2001::/32"],
            &[],
        );
        for addr in ["192.0.0.192", "198.19.0.1", "203.0.113.7", "fec0::1", "100::1", "2001:db8::1", &loopback_client] {
            assert_eq!(code(&p, addr, 80), "ok", "{addr}");
        }
        assert_eq!(code(&p, "203.0.113.8", 80), "network.private_address");
        // Allowing 127.0.0.0/8 does not open the Teredo form of it.
        let p = policy(&["127.0.0.0/8"], &[]);
        assert_eq!(code(&p, &loopback_client, 80), "network.private_address");
    }

    #[test]
    fn the_special_purpose_tables_are_well_formed() {
        for (i, &(net, len, _)) in SPECIAL_V4.iter().enumerate() {
            let block = Ipv4Net::new(net, len).expect("prefix length");
            assert_eq!(block.network(), net, "{net}/{len} has host bits set");
            assert!(SPECIAL_V4[..i].iter().all(|r| (r.0, r.1) != (net, len)), "{net}/{len} twice");
        }
        for (i, &(net, len, _)) in SPECIAL_V6.iter().enumerate() {
            let block = Ipv6Net::new(net, len).expect("prefix length");
            assert_eq!(block.network(), net, "{net}/{len} has host bits set");
            assert!(SPECIAL_V6[..i].iter().all(|r| (r.0, r.1) != (net, len)), "{net}/{len} twice");
        }
    }

    #[test]
    fn allow_punches_holes_deny_wins_over_both() {
        let p = policy(&["127.0.0.0/8", "10.0.0.0/8"], &["10.9.0.0/16", "93.184.215.0/24"]);
        assert_eq!(code(&p, "127.0.0.1", 8080), "ok");
        assert_eq!(code(&p, "::ffff:127.0.0.1", 8080), "ok");
        assert_eq!(code(&p, "10.1.2.3", 80), "ok");
        assert_eq!(code(&p, "10.9.1.1", 80), "network.denied_cidr");
        assert_eq!(code(&p, "93.184.215.9", 80), "network.denied_cidr");
        assert_eq!(code(&p, "64:ff9b::5db8:d709", 80), "network.denied_cidr");
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

    #[test]
    #[cfg(target_os = "linux")]
    fn an_unspecified_listener_owns_its_port_on_every_interface_address() {
        let p = policy(&["0.0.0.0/0", "::/0"], &[]);
        p.add_own(SocketAddr::from(([0, 0, 0, 0], 8080)));
        p.add_own(SocketAddr::from((Ipv6Addr::UNSPECIFIED, 9443)));
        let host = interfaces::addresses().expect("getifaddrs");
        assert!(!host.is_empty(), "every Linux host has loopback");
        for ip in host.iter().map(IpNet::addr) {
            for port in [8080, 9443] {
                assert_eq!(code(&p, &ip.to_string(), port), "network.own_address", "{ip}:{port}");
            }
            assert_eq!(code(&p, &ip.to_string(), 8081), "ok", "{ip}: another port is not agentgate's");
            if let IpAddr::V4(v4) = canonical_ip(ip) {
                // Through a translator, the interface address is still this host.
                let nat64 = Ipv6Addr::from((0x64_ff9b_u128 << 96) | u128::from(u32::from(v4)));
                assert_eq!(code(&p, &nat64.to_string(), 8080), "network.own_address", "{nat64}");
            }
        }
        // A documentation address is no interface of any host.
        assert_eq!(code(&p, "2001:db8::7", 8080), "ok");
        // A listener on a specific address owns that address only (127.0.0.1:9090 here).
        assert!(!host.iter().any(|net| net.addr() == IpAddr::from([127, 0, 0, 2])));
        assert_eq!(code(&p, "127.0.0.2", 9090), "ok");
    }
}
