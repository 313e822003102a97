//! What the proxy is given of the operator's config: the tables it reads while it serves,
//! each typed by the module that owns it, and nothing else of the file. Built from a checked
//! config in one place (`Config::proxy_settings`), by the composition root (`crate::app`)
//! at start and by `crate::reload` for each generation it puts in force.
//!
//! Never: parses, checks or defaults a table (its owner does), or reads the whole config, so
//! the proxy does not import `crate::config`.

use std::time::Duration;

use super::config::{ConnectionsConfig, MitmConfig};
use crate::agents::AgentConfig;
use crate::approvals::ApprovalsConfig;
use crate::inspect::InspectConfig;
use crate::mcp::McpConfig;
use crate::net::{ConnectConfig, NetworkConfig};
use crate::policy::operator::Mode;
use crate::record::RecordConfig;

/// The tables the proxy reads. The start's value is kept for the settings a reload cannot
/// change (`ProxyState::settings`: `[connections]`, `[audit] log_query`), and each generation
/// carries its own for the rest (`Generation::settings`).
#[derive(Debug, Clone)]
pub struct Settings {
    /// `mode`: whose requests are recorded (none in replay), and the mode of the proxy's own
    /// answers' records.
    pub mode: Mode,
    /// `shutdown_grace`: how long shutdown waits for what is in flight.
    pub shutdown_grace: Duration,
    /// `[agent]`, the default agent: whether it is recorded (`[record]`).
    pub agent: AgentConfig,
    /// `[[agents]]`: which of them are recorded (`[record]`).
    pub agents: Vec<AgentConfig>,
    /// `[mitm]`: which CONNECT tunnels are passed through rather than intercepted.
    pub mitm: MitmConfig,
    /// `[network]`: put in the network guard by a reload.
    pub network: NetworkConfig,
    /// `[connect]`: the ports a CONNECT may open.
    pub connect: ConnectConfig,
    /// `[connections]`: the timeouts and caps of agents' connections to the proxy.
    pub connections: ConnectionsConfig,
    /// `[audit] log_query`: whether the URL of a request held for approval keeps its query.
    pub log_query: bool,
    /// `[approvals]`: whether a request that needs a human's approval is held, and how long.
    pub approvals: ApprovalsConfig,
    /// `[inspect]`: what is read of a request body before it is forwarded.
    pub inspect: InspectConfig,
    /// `[[mcp]]`: which hosts' MCP traffic is read, and which tools each agent may call.
    pub mcp: McpConfig,
    /// `[record]`: what is recorded.
    pub record: RecordConfig,
}
