//! Who is asking (DESIGN §3): the agents of the config and proxy authentication. A client is
//! the `[[agents]]` entry its `Proxy-Authorization` names (Basic `id:token`, or `Bearer
//! token`), else the entry whose `clients` networks hold its address, else the default
//! `[agent]`. Tokens are compared as SHA-256 digests in constant time, so neither the
//! token's length nor its first differing byte shows in the timing. Owns the `[agent]`,
//! `[[agents]]` and `[auth]` tables and their checks (`agent_problems`, and the boundaries
//! that hold only for cooperating agents in `advisory`), and compiles each
//! agent's egress lists (`allow_hosts`, `deny_hosts`) into canonical form for the gate.
//!
//! Never: writes responses (the proxy answers 407), logs or keeps a credential (only the
//! digest of a configured token is held), counts requests (`crate::limits` does).

mod advisory;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine as _;
use http::HeaderValue;
use ipnet::IpNet;
use serde::Deserialize;

use crate::net::{canonical_pattern, is_host_pattern};
use crate::policy::operator::{EgressLists, HostList, Mode, split_host_port};
use crate::policy::{Direction, Limit, LimitKind, LimitScope, OperatorCode, Reason, Source};
use crate::setting::byte_size;
use crate::setting::{Located, networks};
use crate::signing::{Keys, Signer, SigningConfig};
use crate::token::{HOW_TO_HASH, TokenDigest, is_sha256_hex};

pub use advisory::advisories;

/// `[auth]`: proxy authentication (`Proxy-Authorization`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// Whether every client must be a known agent, by credentials or by `clients` network;
    /// others get `407 Proxy Authentication Required` (default false). A client matched by
    /// `clients` is never challenged. Clients that send proxy credentials only after a `407`
    /// (git: libcurl's "anyauth") are named by their token only with it.
    pub required: bool,
}

/// Whether an `[[agents]]` entry has a token while `[auth] required = false`: a client that
/// sends its token only when challenged (git) is then never asked, and is the default
/// `[agent]` under its address. What `agentgate run` says at start-up (`crate::recipe`).
pub fn tokens_unchallenged(auth: &AuthConfig, agents: &[AgentConfig]) -> bool {
    !auth.required && agents.iter().any(|a| a.token.is_some() || a.token_sha256.is_some())
}

/// `[agent]` (the default agent, for clients that match no entry) and each `[[agents]]`
/// entry: who an agent is, what it may claim, and the operator's limits for it.
/// `token`, `token_sha256` and `clients` only make sense in `[[agents]]`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentConfig {
    /// The agent id in the log and in `Proxy-Authorization: Basic id:token`; required in
    /// `[[agents]]`. Unset in `[agent]`: the client's IP address is the agent id.
    pub id: Option<String>,
    /// The agent's secret, sent as the password of `Proxy-Authorization: Basic` or as a
    /// `Bearer` token (`[[agents]]` only; prefer `token_sha256`).
    pub token: Option<String>,
    /// Hex SHA-256 of the token, so the config file holds no secret (`[[agents]]` only).
    pub token_sha256: Option<String>,
    /// Client networks that identify this agent without credentials, e.g. its containers'
    /// addresses (`[[agents]]` only; CIDR or single addresses).
    #[serde(deserialize_with = "networks")]
    pub clients: Vec<IpNet>,
    /// The product token matched against robots.txt and automation-preferences user-agent
    /// groups; unset means it is derived from each request's `User-Agent` header.
    pub product_token: Option<String>,
    /// The AGENTS.md trust level, 0 to 5 (default 0).
    pub trust_level: u8,
    /// Purposes the agent declares for automation-preferences `allowed-purposes`, e.g. `["search"]`.
    pub purposes: Vec<String>,
    /// `enforce` or `monitor` for this agent only; unset follows the global `mode`.
    pub mode: Option<Mode>,
    /// The value of the AGENTS.md identification header injected for this agent (C24);
    /// unset means the agent id.
    pub identity: Option<String>,
    /// The operator's rate limits for this agent (`limits`); 0 means none.
    pub limits: AgentLimits,
    /// The only hosts this agent may reach (`docs.example`, `*.example.com`,
    /// `api.example:8443`, an address or a CIDR); unset: every host. `[]` admits none.
    pub allow_hosts: Option<Located<Vec<String>>>,
    /// Hosts this agent may never reach, whatever `allow_hosts` says (same patterns).
    pub deny_hosts: Option<Located<Vec<String>>>,
    /// What a host `allow_hosts` does not list gets: refused (`deny`, the default) or held
    /// for a human's approval (`hold`).
    pub unlisted: Unlisted,
    /// Web Bot Auth: every forwarded request of this agent is signed (`crate::signing`).
    pub signing: Option<SigningConfig>,
    /// Without `signing`: whether `Signature`, `Signature-Input` and `Signature-Agent` the
    /// agent sent reach the origin (default false: removed).
    pub pass_signatures: bool,
    /// Whether this agent's exchanges are recorded under `[record] dir` (default false;
    /// `[record] all = true` records every agent's, `crate::record`).
    pub record: bool,
}

/// `unlisted` of an agent: what a request to a host outside its `allow_hosts` gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unlisted {
    /// `403 operator.not_allowlisted` at once.
    #[default]
    Deny,
    /// Held in the approval queue until an operator admits the host (for this request, or
    /// for the agent for a while) or denies it (`docs/approvals.md`).
    Hold,
}

impl Unlisted {
    /// The value as the config and the admin API write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Unlisted::Deny => "deny",
            Unlisted::Hold => "hold",
        }
    }
}

impl AgentConfig {
    /// Records the file and line of the egress lists (`origin` is the file name, `text` its
    /// whole content), so their reasons point at them.
    pub(crate) fn locate(&mut self, text: &str, origin: &str) {
        for list in [&mut self.allow_hosts, &mut self.deny_hosts].into_iter().flatten() {
            list.locate(text, origin);
        }
    }
}

/// `limits` of an agent: the operator's own rate limits, on top of every site's (all apply).
/// 0 means no limit.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentLimits {
    /// Requests per minute over every origin together.
    pub requests_per_minute: u32,
    /// Requests per hour over every origin together.
    pub requests_per_hour: u32,
    /// Requests per minute to any one origin.
    pub per_origin_requests_per_minute: u32,
    /// Requests per hour to any one origin.
    pub per_origin_requests_per_hour: u32,
    /// Request body bytes per hour over every origin together (bytes, or `"100MiB"`).
    #[serde(deserialize_with = "byte_size")]
    pub sent_bytes_per_hour: u64,
    /// Response body bytes per hour over every origin together.
    #[serde(deserialize_with = "byte_size")]
    pub received_bytes_per_hour: u64,
    /// Request body bytes per hour to any one origin.
    #[serde(deserialize_with = "byte_size")]
    pub per_origin_sent_bytes_per_hour: u64,
    /// Response body bytes per hour from any one origin.
    #[serde(deserialize_with = "byte_size")]
    pub per_origin_received_bytes_per_hour: u64,
}

/// One agent as the gate uses it: identity, what it claims towards sites, its mode and the
/// operator's limits for it.
#[derive(Debug)]
pub struct Agent {
    /// The configured id; `None` for a default agent without one (the client's address is used).
    id: Option<Arc<str>>,
    /// The product token for robots.txt and automation-preferences groups (SEMANTICS X2).
    pub product_token: Option<String>,
    /// The AGENTS.md trust level (C22).
    pub trust_level: u8,
    /// Purposes declared in the config (D13), shared with every record that states them.
    pub purposes: Arc<[String]>,
    /// This agent's mode, or `None` to follow the global one.
    pub mode: Option<Mode>,
    /// The AGENTS.md identification header value (C24); `None` means the agent id.
    identity: Option<String>,
    /// The operator's limits for this agent, as [`Limit`]s with source `operator`.
    pub limits: Vec<Limit>,
    /// The hosts it may and may not reach, in canonical form.
    pub egress: EgressLists,
    /// What a host its allowlist does not name gets.
    pub unlisted: Unlisted,
    /// Its Web Bot Auth key, when its requests are signed.
    signer: Option<Arc<Signer>>,
    /// Without a key: whether the signature headers it sent itself reach the origin.
    pass_signatures: bool,
    credential: Option<TokenDigest>,
    clients: Vec<IpNet>,
}

impl Agent {
    fn from_config(config: &AgentConfig, table: &str, keys: &Keys) -> Agent {
        let credential = match (&config.token, &config.token_sha256) {
            (Some(token), _) => Some(TokenDigest::of(token)),
            (None, Some(hex_digest)) => TokenDigest::from_hex(hex_digest),
            (None, None) => None,
        };
        let id = config.id.as_deref().map(Arc::from);
        let name = config.id.as_deref().map_or_else(|| table.to_owned(), |id| format!("{table} id = {id:?}"));
        Agent {
            id,
            product_token: config.product_token.clone(),
            trust_level: config.trust_level,
            purposes: config.purposes.as_slice().into(),
            mode: config.mode,
            identity: config.identity.clone(),
            limits: operator_limits(config, &name),
            egress: EgressLists::new(
                config.allow_hosts.as_ref().map(|list| host_list(&name, "allow_hosts", list)),
                config.deny_hosts.as_ref().map(|list| host_list(&name, "deny_hosts", list)),
            ),
            unlisted: config.unlisted,
            signer: config.signing.as_ref().and_then(|_| keys.of(config.id.as_deref())),
            pass_signatures: config.pass_signatures,
            credential,
            clients: config.clients.clone(),
        }
    }

    /// The configured id; `None` for a default agent without one.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// Its Web Bot Auth key, when its requests are signed.
    pub fn signer(&self) -> Option<&Signer> {
        self.signer.as_deref()
    }

    /// Whether signature headers it sent itself reach the origin (only without a key).
    pub fn passes_signatures(&self) -> bool {
        self.signer.is_none() && self.pass_signatures
    }
}

/// One egress list compiled: each entry split into host and port, the host canonical
/// (`crate::net::host`), so every spelling of an address and an IDN's U-label match.
/// `name` is the agent's table (`[[agents]] id = "sbx"`); the reasons it gives name it, the
/// key, and the file and line when the list was read from one.
fn host_list(name: &str, key: &str, list: &Located<Vec<String>>) -> HostList {
    let (described, line) = match &list.at {
        Some((file, line)) => (format!("{file}:{line}: {name} {key}"), Some(*line)),
        None => (format!("{name} {key}"), None),
    };
    let entries = list
        .value
        .iter()
        .filter_map(|written| {
            let (host, port) = split_host_port(written.trim())?;
            Some((written.clone(), canonical_pattern(host), port))
        })
        .collect();
    HostList::new(described, line, entries)
}

/// The problem with one egress list entry, if any: what it must look like.
fn entry_problem(entry: &str) -> Option<&'static str> {
    let entry = entry.trim();
    if entry.contains("://") {
        return Some("no scheme or path: write the host alone");
    }
    if entry.contains('/') {
        let cidr_with_port = entry.rsplit_once(':').is_some_and(|(net, _)| net.parse::<IpNet>().is_ok());
        return match entry.parse::<IpNet>() {
            Ok(_) => None,
            Err(_) if cidr_with_port => Some("a CIDR takes no port"),
            Err(_) => Some("not a CIDR (an address, `/` and a prefix length: `10.0.0.0/8`)"),
        };
    }
    let Some((host, _)) = split_host_port(entry) else {
        return Some("the port must be a number from 1 to 65535 after the host (`api.example:8443`, `[::1]:8443`)");
    };
    (host != "*" && !is_host_pattern(host)).then_some("not a host name, `*.suffix`, `*`, an address or a CIDR")
}

/// The operator's per-agent limits (`limits` of `[agent]` or `[[agents]]`) as limits the
/// limiter counts like any site's, then its byte budgets (per hour). A zero is no limit.
fn operator_limits(config: &AgentConfig, name: &str) -> Vec<Limit> {
    let l = &config.limits;
    let budgets = [
        ("sent_bytes_per_hour", l.sent_bytes_per_hour, Direction::Sent, LimitScope::Agent),
        ("received_bytes_per_hour", l.received_bytes_per_hour, Direction::Received, LimitScope::Agent),
        ("per_origin_sent_bytes_per_hour", l.per_origin_sent_bytes_per_hour, Direction::Sent, LimitScope::Origin),
        (
            "per_origin_received_bytes_per_hour",
            l.per_origin_received_bytes_per_hour,
            Direction::Received,
            LimitScope::Origin,
        ),
    ]
    .into_iter()
    .filter(|(_, bytes, _, _)| *bytes > 0)
    .map(|(key, bytes, direction, scope)| Limit {
        source: Source::Operator,
        kind: LimitKind::Bytes { direction, bytes, window_s: 3600 },
        scope,
        reason: Reason::new(OperatorCode::ByteBudget, format!("{name} limits.{key} = {bytes}")),
    });
    [
        ("requests_per_minute", l.requests_per_minute, 60, LimitScope::Agent),
        ("requests_per_hour", l.requests_per_hour, 3600, LimitScope::Agent),
        ("per_origin_requests_per_minute", l.per_origin_requests_per_minute, 60, LimitScope::Origin),
        ("per_origin_requests_per_hour", l.per_origin_requests_per_hour, 3600, LimitScope::Origin),
    ]
    .into_iter()
    .filter(|(_, requests, _, _)| *requests > 0)
    .map(|(key, requests, window_s, scope)| Limit {
        source: Source::Operator,
        kind: LimitKind::Rate { requests, window_s },
        scope,
        reason: Reason::new(OperatorCode::RateLimit, format!("{name} limits.{key} = {requests}")),
    })
    .chain(budgets)
    .collect()
}

/// Who one client is, once identified.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The agent's config.
    pub agent: Arc<Agent>,
    /// The agent id for the log and for limit keys: the configured id, else the client's address.
    pub id: Arc<str>,
}

impl Identity {
    /// The AGENTS.md identification header value (C24): the configured `identity`, else the id.
    pub fn header_value(&self) -> &str {
        self.agent.identity.as_deref().unwrap_or(&self.id)
    }

    /// The mode for this agent: its own, else `global`.
    pub fn mode(&self, global: Mode) -> Mode {
        self.agent.mode.unwrap_or(global)
    }
}

/// Why a client was not identified: answered `407 Proxy Authentication Required`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AuthFailure {
    /// `[auth] required = true` and the client sent no credentials and matches no `clients`.
    #[error(
        "proxy authentication required: send Proxy-Authorization: Basic id:token (e.g. HTTPS_PROXY=http://id:token@proxy:port)"
    )]
    Missing,
    /// Credentials were sent but name no agent, or the token is wrong.
    #[error(
        "proxy credentials rejected: unknown agent id or wrong token; check the id and token the operator gave this agent"
    )]
    Invalid,
}

impl AuthFailure {
    /// The reason code in the log and the block answer.
    pub fn code(self) -> OperatorCode {
        match self {
            AuthFailure::Missing => OperatorCode::AuthRequired,
            AuthFailure::Invalid => OperatorCode::AuthInvalid,
        }
    }
}

/// Every agent the config defines, and whether authentication is required.
#[derive(Debug)]
pub struct Agents {
    entries: Vec<Arc<Agent>>,
    default: Arc<Agent>,
    required: bool,
    /// The id of each client an agent without an `id` was named by (its address's text),
    /// made once and shared by its requests: made per request it cost two allocations.
    client_ids: Mutex<HashMap<IpAddr, Arc<str>>>,
}

/// Above this many client ids kept, the next new client empties [`Agents`]'s list.
const MAX_CLIENT_IDS: usize = 1024;

impl Agents {
    /// The agents of a config: `agents` (`[[agents]]`) in file order, `default` (`[agent]`)
    /// for clients no entry names, proxy authentication as `auth` (`[auth]`) asks; none signs.
    pub fn new(default: &AgentConfig, agents: &[AgentConfig], auth: &AuthConfig) -> Self {
        Agents::with_keys(default, agents, auth, &Keys::default())
    }

    /// The same agents, each `signing` agent with its key from `keys`.
    pub fn with_keys(default: &AgentConfig, agents: &[AgentConfig], auth: &AuthConfig, keys: &Keys) -> Self {
        let entries = agents
            .iter()
            .enumerate()
            .map(|(i, a)| Arc::new(Agent::from_config(a, &format!("[[agents]] #{}", i + 1), keys)))
            .collect();
        let default = Arc::new(Agent::from_config(default, "[agent]", keys));
        Agents { entries, default, required: auth.required, client_ids: Mutex::default() }
    }

    /// Phase `identify_agent`: the agent behind a request (or a CONNECT) from `client`.
    ///
    /// # Errors
    /// Only with `[auth] required`: [`AuthFailure::Invalid`] when `Proxy-Authorization` names
    /// no agent or carries a wrong token, [`AuthFailure::Missing`] when the client sent no
    /// credentials and is in no agent's `clients`. Without `required`, credentials that prove
    /// nothing are ignored (a client may carry proxy credentials meant for another proxy), and
    /// the client is matched by address, else it is the default agent.
    pub fn identify(&self, client: IpAddr, proxy_authorization: Option<&HeaderValue>) -> Result<Identity, AuthFailure> {
        let client = client.to_canonical();
        if let Some(value) = proxy_authorization {
            match self.by_credentials(value) {
                Some(agent) => return Ok(self.identity(agent, client)),
                None if self.required => return Err(AuthFailure::Invalid),
                None => {}
            }
        }
        if let Some(agent) = self.entries.iter().find(|a| a.clients.iter().any(|net| net.contains(&client))) {
            return Ok(self.identity(agent, client));
        }
        if self.required {
            return Err(AuthFailure::Missing);
        }
        Ok(self.identity(&self.default, client))
    }

    /// The Web Bot Auth key ids of the signing agents, `[[agents]]` in file order then `[agent]`.
    pub fn keyids(&self) -> Vec<String> {
        self.entries.iter().chain([&self.default]).filter_map(|a| a.signer()).map(|s| s.keyid().to_owned()).collect()
    }

    /// The `[[agents]]` entry whose id is `id`, or the `[agent]` table when `id` is `None` or
    /// is its id: what `agentgate explain --agent` and the admin `/explain` decide for.
    pub fn named(&self, id: Option<&str>) -> Option<&Arc<Agent>> {
        match id {
            None => Some(&self.default),
            Some(id) => self.entries.iter().chain([&self.default]).find(|agent| agent.id() == Some(id)),
        }
    }

    fn identity(&self, agent: &Arc<Agent>, client: IpAddr) -> Identity {
        let id = agent.id.clone().unwrap_or_else(|| self.client_id(client.to_canonical()));
        Identity { agent: Arc::clone(agent), id }
    }

    /// `client`'s address as an agent id, the one made for it before when there is one.
    fn client_id(&self, client: IpAddr) -> Arc<str> {
        let mut ids = self.client_ids.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(id) = ids.get(&client) {
            return Arc::clone(id);
        }
        if ids.len() >= MAX_CLIENT_IDS {
            ids.clear();
        }
        let id: Arc<str> = Arc::from(crate::net::host::ip_text(client));
        ids.insert(client, Arc::clone(&id));
        id
    }

    /// The agent whose credential `value` proves. Basic names the agent, then its token is
    /// checked; Bearer is checked against every agent (each in constant time).
    fn by_credentials(&self, value: &HeaderValue) -> Option<&Arc<Agent>> {
        let (scheme, rest) = value.to_str().ok()?.trim().split_once(' ')?;
        let rest = rest.trim();
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD.decode(rest).ok()?;
            let decoded = String::from_utf8(decoded).ok()?;
            let (id, token) = decoded.split_once(':')?;
            let agent = self.entries.iter().find(|a| a.id.as_deref() == Some(id))?;
            return token_matches(agent, token).then_some(agent);
        }
        if scheme.eq_ignore_ascii_case("bearer") {
            // Every entry is checked, so the time taken does not say which one matched.
            return self
                .entries
                .iter()
                .fold(None, |found, agent| found.or(token_matches(agent, rest).then_some(agent)));
        }
        None
    }
}

/// Problems in `[agent]` (`default`) and `[[agents]]`: ids, credentials, trust levels, identities.
/// The signing agents of a config, each as its id and `signing` table (`crate::signing`).
pub fn signing_tables<'a>(
    default: &'a AgentConfig,
    agents: &'a [AgentConfig],
) -> impl Iterator<Item = (Option<&'a str>, &'a SigningConfig)> {
    std::iter::once(default).chain(agents).filter_map(|a| Some((a.id.as_deref(), a.signing.as_ref()?)))
}

/// Problems of every `signing` table in `[agent]` and `[[agents]]`; `shared` when replicas
/// share limits or policy copies through Redis (each would mint its own key).
pub(crate) fn signing_problems(
    default: &AgentConfig,
    agents: &[AgentConfig],
    shared: bool,
    problems: &mut Vec<String>,
) {
    let tables = std::iter::once(("[agent]".to_owned(), default))
        .chain(agents.iter().enumerate().map(|(i, a)| (format!("[[agents]] #{}", i + 1), a)));
    for (table, agent) in tables {
        if let Some(signing) = &agent.signing {
            signing.problems(&table, agent.id.as_deref(), shared, problems);
            if agent.pass_signatures {
                problems.push(format!(
                    "{table} pass_signatures = true: has no effect with signing (a signing agent's own signature headers are always removed); remove one of them"
                ));
            }
        }
    }
}

pub(crate) fn agent_problems(default: &AgentConfig, agents: &[AgentConfig], problems: &mut Vec<String>) {
    for (key, set) in [
        ("token", default.token.is_some()),
        ("token_sha256", default.token_sha256.is_some()),
        ("clients", !default.clients.is_empty()),
    ] {
        if set {
            problems.push(format!(
                "[agent] {key}: the default agent is whoever matches no entry, so it has no credential or networks; put it in an [[agents]] entry"
            ));
        }
    }
    let tables = std::iter::once(("[agent]".to_owned(), default))
        .chain(agents.iter().enumerate().map(|(i, a)| (format!("[[agents]] #{}", i + 1), a)));
    for (table, agent) in tables {
        if agent.trust_level > 5 {
            problems
                .push(format!("{table} trust_level = {}: must be 0 to 5 (AGENTS.md trust levels)", agent.trust_level));
        }
        if let Some(identity) = &agent.identity
            && http::HeaderValue::from_str(identity).is_err()
        {
            problems.push(format!("{table} identity = {identity:?}: not a valid header value; use visible ASCII"));
        }
        for (key, list) in [("allow_hosts", &agent.allow_hosts), ("deny_hosts", &agent.deny_hosts)] {
            for entry in list.iter().flat_map(|list| &list.value) {
                if let Some(why) = entry_problem(entry) {
                    problems.push(format!(
                        "{table} {key} entry {entry:?}: {why}; write e.g. \"docs.example\", \"*.example.com\", \"api.example:8443\" or \"10.0.0.0/8\" (no scheme or path)"
                    ));
                }
            }
        }
        if agent.unlisted == Unlisted::Hold && agent.allow_hosts.is_none() {
            problems.push(format!(
                "{table} unlisted = \"hold\": has no effect without allow_hosts (every host is listed); add allow_hosts or remove unlisted"
            ));
        }
    }
    let mut seen = Vec::new();
    for (i, agent) in agents.iter().enumerate() {
        let table = format!("[[agents]] #{}", i + 1);
        match agent.id.as_deref() {
            None | Some("") => problems.push(format!("{table}: id is missing; write e.g. id = \"research-agent\"")),
            Some(id) if id.contains(':') || id.chars().any(char::is_control) => problems.push(format!(
                "{table} id = {id:?}: must not contain `:` or control characters (it is the Basic user name)"
            )),
            Some(id) if seen.contains(&id) => {
                problems.push(format!("{table} id = {id:?}: used by another entry; ids must be unique"));
            }
            Some(id) => seen.push(id),
        }
        if agent.token.is_some() && agent.token_sha256.is_some() {
            problems.push(format!("{table}: both token and token_sha256 are set; keep only token_sha256"));
        }
        if agent.token.as_deref() == Some("") {
            problems.push(format!("{table} token = \"\": must not be empty"));
        }
        if let Some(hash) = &agent.token_sha256
            && !is_sha256_hex(hash)
        {
            problems.push(format!("{table} token_sha256 = {hash:?}: must be 64 hex digits, e.g. {HOW_TO_HASH}"));
        }
        if agent.token.is_none() && agent.token_sha256.is_none() && agent.clients.is_empty() {
            problems.push(format!(
                "{table}: no token, token_sha256 or clients, so no client can ever be this agent; add one"
            ));
        }
    }
}

/// The tables (`[agent]`, `[[agents]] #2`) whose `unlisted = "hold"` holds requests for a
/// human: what needs an admin token (`crate::config` checks it across tables).
pub(crate) fn holding_tables(default: &AgentConfig, agents: &[AgentConfig]) -> Vec<String> {
    let tables = std::iter::once(("[agent]".to_owned(), default))
        .chain(agents.iter().enumerate().map(|(i, a)| (format!("[[agents]] #{}", i + 1), a)));
    tables.filter(|(_, agent)| agent.unlisted == Unlisted::Hold).map(|(table, _)| table).collect()
}

/// Whether `token` is the agent's: the SHA-256 digests compared in constant time.
fn token_matches(agent: &Agent, token: &str) -> bool {
    agent.credential.is_some_and(|expected| expected.matches(token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::operator::Egress;

    fn agents(text: &str) -> Agents {
        let config = crate::config::Config::from_toml_str(text, "test.toml").expect("a valid test config");
        Agents::new(&config.agent, &config.agents, &config.auth)
    }

    fn basic(id: &str, token: &str) -> HeaderValue {
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{id}:{token}"));
        HeaderValue::from_str(&format!("Basic {encoded}")).expect("base64 is a valid header value")
    }

    const TWO_AGENTS: &str = r#"
[[agents]]
id = "alpha"
token = "alpha-secret"
[[agents]]
id = "beta"
# sha256("beta-secret")
token_sha256 = "d40ab4efae8afe82f0fda0f0fc785ff61bec7b5f329c6070c453594397e03568"
clients = ["127.0.0.3/32"]
"#;

    const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn a_client_named_by_its_address_gets_one_id_for_all_its_requests() {
        let agents = agents(TWO_AGENTS);
        let first = agents.identify(LOCAL, None).expect("the default agent");
        let again = agents.identify(LOCAL, None).expect("the default agent");
        assert_eq!(&*first.id, "127.0.0.1");
        assert!(Arc::ptr_eq(&first.id, &again.id), "the id made for the first request is shared");
        let mapped = agents.identify("::ffff:127.0.0.1".parse().expect("an address"), None).expect("mapped");
        assert!(Arc::ptr_eq(&first.id, &mapped.id), "an IPv4-mapped address is the same client");
        let other = agents.identify("2001:db8::7".parse().expect("an address"), None).expect("another client");
        assert_eq!(&*other.id, "2001:db8::7");
        // A client a `clients` network names gets the entry's id, not its address.
        let beta = agents.identify("127.0.0.3".parse().expect("an address"), None).expect("beta");
        assert_eq!(&*beta.id, "beta");
        // The list stays bounded: past its cap it starts again, and every id is still right.
        for n in 0..=u32::try_from(MAX_CLIENT_IDS).expect("a small cap") {
            let client = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + n));
            assert_eq!(*agents.identify(client, None).expect("default").id, *client.to_string());
        }
        assert!(agents.client_ids.lock().expect("not poisoned").len() <= MAX_CLIENT_IDS);
        assert_eq!(&*agents.identify(LOCAL, None).expect("the default agent").id, "127.0.0.1");
    }

    #[test]
    fn basic_names_the_agent_and_the_token_proves_it() {
        let agents = agents(&format!("{TWO_AGENTS}\n[auth]\nrequired = true\n"));
        let found = agents.identify(LOCAL, Some(&basic("alpha", "alpha-secret"))).expect("right token");
        assert_eq!(&*found.id, "alpha");
        assert_eq!(agents.identify(LOCAL, Some(&basic("alpha", "alpha-secreT"))).unwrap_err(), AuthFailure::Invalid);
        assert_eq!(agents.identify(LOCAL, Some(&basic("nobody", "alpha-secret"))).unwrap_err(), AuthFailure::Invalid);
        assert_eq!(agents.identify(LOCAL, Some(&basic("alpha", ""))).unwrap_err(), AuthFailure::Invalid);
        let garbage = HeaderValue::from_static("Basic !!!");
        assert_eq!(agents.identify(LOCAL, Some(&garbage)).unwrap_err(), AuthFailure::Invalid);
    }

    #[test]
    fn token_sha256_and_bearer() {
        let agents = agents(&format!("{TWO_AGENTS}\n[auth]\nrequired = true\n"));
        assert_eq!(&*agents.identify(LOCAL, Some(&basic("beta", "beta-secret"))).expect("hashed token").id, "beta");
        let bearer = HeaderValue::from_static("Bearer alpha-secret");
        assert_eq!(&*agents.identify(LOCAL, Some(&bearer)).expect("bearer").id, "alpha");
        let wrong = HeaderValue::from_static("Bearer nope");
        assert_eq!(agents.identify(LOCAL, Some(&wrong)).unwrap_err(), AuthFailure::Invalid);
    }

    #[test]
    fn clients_networks_then_the_default_agent() {
        let agents = agents(TWO_AGENTS);
        let by_network = agents.identify("127.0.0.3".parse().expect("an address"), None).expect("in clients");
        assert_eq!(&*by_network.id, "beta");
        let default = agents.identify("127.0.0.2".parse().expect("an address"), None).expect("not required");
        assert_eq!(&*default.id, "127.0.0.2", "the default agent without an id is its address");
        let foreign = agents.identify(LOCAL, Some(&basic("alpha", "wrong"))).expect("not required: ignored");
        assert_eq!(&*foreign.id, "127.0.0.1", "credentials that prove nothing are ignored");
        let required = self::agents(&format!("{TWO_AGENTS}\n[auth]\nrequired = true\n"));
        assert_eq!(
            required.identify("127.0.0.2".parse().expect("an address"), None).unwrap_err(),
            AuthFailure::Missing
        );
        assert!(required.identify("127.0.0.3".parse().expect("an address"), None).is_ok(), "clients satisfy auth");
    }

    #[test]
    fn tokens_go_unchallenged_only_without_required() {
        let unchallenged = |text: &str| {
            let config = crate::config::Config::from_toml_str(text, "test.toml").expect("a valid test config");
            tokens_unchallenged(&config.auth, &config.agents)
        };
        assert!(unchallenged(TWO_AGENTS), "tokens, and nobody is challenged");
        assert!(!unchallenged(&format!("{TWO_AGENTS}\n[auth]\nrequired = true\n")));
        let by_address = "[[agents]]\nid = \"box\"\nclients = [\"10.0.0.0/8\"]\n";
        assert!(!unchallenged(by_address), "no token to ask for");
        assert!(!unchallenged(""));
    }

    #[test]
    fn identity_header_mode_and_operator_limits() {
        let agents = agents(
            "[[agents]]\nid = \"gamma\"\ntoken = \"t\"\nidentity = \"gamma (+https://example.com)\"\nmode = \"monitor\"\nlimits = { requests_per_minute = 5, per_origin_requests_per_hour = 7, sent_bytes_per_hour = \"100KiB\", per_origin_received_bytes_per_hour = 4096 }\n",
        );
        let found = agents.identify(LOCAL, Some(&basic("gamma", "t"))).expect("right token");
        assert_eq!(found.header_value(), "gamma (+https://example.com)");
        assert_eq!(found.mode(Mode::Enforce), Mode::Monitor);
        let limits = &found.agent.limits;
        assert_eq!(limits.len(), 4);
        assert_eq!(limits[0].kind, LimitKind::Rate { requests: 5, window_s: 60 });
        assert_eq!(limits[0].scope, LimitScope::Agent);
        assert_eq!(&*limits[0].reason.rule, "[[agents]] #1 id = \"gamma\" limits.requests_per_minute = 5");
        assert_eq!(limits[1].kind, LimitKind::Rate { requests: 7, window_s: 3600 });
        assert_eq!(limits[1].scope, LimitScope::Origin);
        assert_eq!(limits[2].kind, LimitKind::Bytes { direction: Direction::Sent, bytes: 102_400, window_s: 3600 });
        assert_eq!((&limits[2].scope, limits[2].reason.code), (&LimitScope::Agent, OperatorCode::ByteBudget.into()));
        assert_eq!(&*limits[2].reason.rule, "[[agents]] #1 id = \"gamma\" limits.sent_bytes_per_hour = 102400");
        let received = LimitKind::Bytes { direction: Direction::Received, bytes: 4096, window_s: 3600 };
        assert_eq!((limits[3].kind, &limits[3].scope), (received, &LimitScope::Origin));
    }

    #[test]
    fn egress_lists_are_canonical_and_their_reasons_name_file_and_line() {
        let text = "[[agents]]\nid = \"sbx\"\ntoken = \"t\"\n# the agent's hosts\nallow_hosts = [\"Site.TEST.\", \"0x7f.1:8080\", \"*.Bücher.example\"]\ndeny_hosts = [\"bad.site.test\"]\n";
        let config = crate::config::Config::from_toml_str(text, "egress.toml").expect("a valid config");
        let listed = config.agents[0].allow_hosts.as_ref().expect("allow_hosts is set");
        assert_eq!(listed.value, ["Site.TEST.", "0x7f.1:8080", "*.Bücher.example"]);
        assert_eq!(listed.at, Some((Arc::from("egress.toml"), 5)));
        let agents = Agents::new(&config.agent, &config.agents, &config.auth);
        let sbx = agents.identify(LOCAL, Some(&basic("sbx", "t"))).expect("right token");
        let egress = &sbx.agent.egress;
        assert_eq!(egress.decide("site.test", 80, &[]), Egress::Admitted, "case and trailing dot");
        assert_eq!(egress.decide("127.0.0.1", 8080, &[]), Egress::Admitted, "every IPv4 spelling");
        assert_eq!(egress.decide("a.xn--bcher-kva.example", 443, &[]), Egress::Admitted, "IDN");
        let Egress::Unlisted(reason) = egress.decide("127.0.0.1", 80, &[]) else { panic!("another port") };
        assert!(
            reason.rule.starts_with("egress.toml:5: [[agents]] #1 id = \"sbx\" allow_hosts = [\"Site.TEST.\""),
            "{}",
            reason.rule
        );
        assert_eq!(reason.line, Some(5));
        let Egress::Denied(reason) = egress.decide("bad.site.test", 80, &[]) else { panic!("denied") };
        assert!(
            reason.rule.starts_with("egress.toml:6: [[agents]] #1 id = \"sbx\" deny_hosts entry \"bad.site.test\""),
            "{}",
            reason.rule
        );
        let default = agents.identify(LOCAL, None).expect("the default agent");
        assert_eq!(default.agent.egress.decide("anything.test", 80, &[]), Egress::Admitted, "no lists: every host");
    }

    #[test]
    fn egress_list_problems_name_the_entry_and_the_fix() {
        use crate::config::testing::problems;
        let found = problems(
            "[agent]\nallow_hosts = [\"https://a.example/\", \"a.example:0\", \"10.0.0.0/8:443\", \"10.0.0.0/33\", \"ok.example:443\", \"*\"]\n\
             [[agents]]\nid = \"a\"\ntoken = \"t\"\nunlisted = \"hold\"\n",
        );
        let joined = found.join("\n");
        for expected in [
            "[agent] allow_hosts entry \"https://a.example/\": no scheme or path",
            "[agent] allow_hosts entry \"a.example:0\": the port must be a number",
            "[agent] allow_hosts entry \"10.0.0.0/8:443\": a CIDR takes no port",
            "[agent] allow_hosts entry \"10.0.0.0/33\": not a CIDR",
            "[[agents]] #1 unlisted = \"hold\": has no effect without allow_hosts",
            "[[agents]] #1 unlisted = \"hold\" holds requests for a human's approval, but no admin token is configured",
        ] {
            assert!(joined.contains(expected), "{expected:?} missing from:\n{joined}");
        }
        assert_eq!(found.len(), 6, "{joined}");
        let with_token = "[admin]\ntoken_sha256 = \"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08\"\n\
                          [agent]\nallow_hosts = [\"a.example\"]\nunlisted = \"hold\"\n";
        assert!(problems(with_token).is_empty(), "{:?}", problems(with_token));
    }

    #[test]
    fn a_scoped_rule_must_name_configured_agents() {
        use crate::config::testing::problems;
        let rule = |agents: &str| {
            format!(
                "[[agents]]\nid = \"sbx\"\ntoken = \"t\"\n[[rules]]\nhost = \"*\"\nagents = {agents}\naction = \"deny\"\n"
            )
        };
        assert!(problems(&rule("[\"sbx\"]")).is_empty());
        assert_eq!(
            problems(&rule("[\"sbx\", \"sxb\"]")),
            [
                "[[rules]] #1 agents entry \"sxb\": no [agent] or [[agents]] has this id (configured: sbx); write one of them"
            ]
        );
    }
}
