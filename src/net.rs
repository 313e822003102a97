//! The network guard (DESIGN.md §9): agentgate must never be the way into the operator's
//! network. This module owns the one canonical spelling of a host ([`host`]), which
//! addresses may be reached ([`address`]: the default deny set, `[network] allow_cidrs` and
//! `deny_cidrs`, agentgate's own addresses, with the host's [`interfaces`] for listeners on
//! `0.0.0.0` or `::`), and the [`Guard`] that resolves a name once,
//! vets every address, and pins that vetted answer so the connector dials nothing else
//! ([`guard`]). The resolver and the dialer are seams ([`lookup`]), so tests can prove that
//! no connect to a refused address is ever attempted.
//!
//! Never: decides policy (the gate does), writes responses (the proxy does), dials on its
//! own (the proxy's connector dials the addresses the guard hands out). See
//! `docs/security.md`.

pub mod address;
pub mod guard;
pub mod host;
pub mod interfaces;
pub mod lookup;

pub use address::{AddressPolicy, ConnectConfig, NetworkConfig, PortRange, Refusal};
pub use guard::{Guard, GuardError, Vetted};
pub use host::{HostError, canonical_host, canonical_hosts, canonical_pattern, is_host_pattern};
pub use lookup::{Dial, NetFuture, Resolve, SystemResolver, TcpDialer};
