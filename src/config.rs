//! Configuration: the TOML file as written, turned into a checked [`Config`].
//!
//! Owns: the config model, composed from the tables the modules that read them own (each
//! with its defaults and its own `problems`), the embedded default file
//! (`config/agentgate.toml`, which documents every key), parsing with errors that point at
//! `file:line:column`, and a validation pass that reports every semantic problem at once.
//!
//! Never does: network I/O, open sockets, read policy files or the files the config names
//! (the CA, extra CA files and the audit log are opened by the modules that use them), or
//! stop at the first problem it finds. Hot reload (which settings change live) is `crate::reload`.
//!
//! Every table rejects unknown keys (a typo is an error, never a silently ignored setting) and
//! takes its defaults for missing keys, so a file only needs the keys it changes. Relative paths
//! are relative to the working directory of the process. The reference is `docs/config.md`.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use ipnet::IpNet;
use serde::Deserialize;

use crate::admin::AdminConfig;
use crate::agents::{AgentConfig, Agents, AuthConfig};
use crate::agents::{agent_problems, holding_tables};
use crate::approvals::{ApprovalMode, ApprovalsConfig};
use crate::audit::AuditConfig;
use crate::explain::{ExplainError, Operator};
use crate::fetch::CacheConfig;
use crate::gate::GateSettings;
use crate::inspect::InspectConfig;
use crate::limits::LimitsConfig;
use crate::mcp::McpConfig;
use crate::net::{ConnectConfig, NetworkConfig, canonical_pattern, is_host_pattern};
use crate::policy;
use crate::policy::operator::{Mode, OperatorRule, OperatorRules, RuleAction};
use crate::proxy;
use crate::proxy::config::{ConnectionsConfig, MitmConfig, TransparentConfig, UpstreamConfig};
use crate::record::RecordConfig;
use crate::secrets::{SecretConfig, overlap_problems};
use crate::setting::{duration, nonzero_caps, socket_addr};
use crate::signing::Keys;

mod parse;

/// The documented default config file, exactly as shipped in `config/agentgate.toml`.
pub const EMBEDDED_DEFAULT: &str = include_str!("../config/agentgate.toml");

/// The smallest `[cache] max_bytes`: below it one large origin would not fit.
const MIN_CACHE_BYTES: u64 = 1024 * 1024;
/// The longest `shutdown_grace` accepted: past that, a stuck connection only delays restarts.
const MAX_SHUTDOWN_GRACE: Duration = Duration::from_secs(60 * 60);

/// The whole agentgate configuration.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where the proxy listens for agents (`listen`, default `127.0.0.1:8080`).
    #[serde(deserialize_with = "socket_addr")]
    pub listen: SocketAddr,
    /// Whether decisions block requests or are only logged (`mode`, default `enforce`).
    pub mode: Mode,
    /// This replica's name in every decision record (`instance`, `agentgate.instance`);
    /// empty (the default) for the host name ([`crate::audit::instance_name`]).
    pub instance: String,
    /// How long shutdown waits for in-flight requests before closing them (`shutdown_grace`, default `10s`).
    #[serde(deserialize_with = "duration")]
    pub shutdown_grace: Duration,
    /// Hosts that skip site policies (e.g. the model API the agent talks to); their requests
    /// are still logged (`bypass_hosts`, same patterns as `[mitm] passthrough_hosts`, plus `*`).
    pub bypass_hosts: Vec<String>,
    /// The operator's own rules, applied before any site policy; the first match wins (`[[rules]]`).
    pub rules: Vec<RuleConfig>,
    /// The default agent: clients that match no `[[agents]]` entry (`[agent]`).
    pub agent: AgentConfig,
    /// The agents this proxy knows, each with its credential or client networks (`[[agents]]`).
    pub agents: Vec<AgentConfig>,
    /// Proxy authentication (`[auth]`).
    pub auth: AuthConfig,
    /// Optional robots.txt extensions (`[robots]`).
    pub robots: RobotsConfig,
    /// How strictly AGENTS.md's advisory keys are read (`[agents_md]`).
    pub agents_md: AgentsMdConfig,
    /// How usage preferences treat an agent without a declared purpose (`[usage]`).
    pub usage: UsageConfig,
    /// The per-origin policy cache (`[cache]`).
    pub cache: CacheConfig,
    /// The proxy's own CA (`[ca]`).
    pub ca: CaConfig,
    /// Connections from the proxy to origins (`[upstream]`).
    pub upstream: UpstreamConfig,
    /// Which CONNECT tunnels are intercepted (`[mitm]`).
    pub mitm: MitmConfig,
    /// Which destinations may be reached (`[network]`).
    pub network: NetworkConfig,
    /// Which ports CONNECT tunnels may open (`[connect]`).
    pub connect: ConnectConfig,
    /// Timeouts and caps for agents' connections to the proxy (`[connections]`).
    pub connections: ConnectionsConfig,
    /// The decision log (`[audit]`).
    pub audit: AuditConfig,
    /// Where rate and concurrency counters live (`[limits]`).
    pub limits: LimitsConfig,
    /// The admin API (`[admin]`).
    pub admin: AdminConfig,
    /// What a request that needs a human's approval gets (`[approvals]`).
    pub approvals: ApprovalsConfig,
    /// Listeners for connections the kernel redirects to agentgate (`[transparent]`).
    pub transparent: TransparentConfig,
    /// Credentials the agents never hold, injected at the gate (`[[secrets]]`, docs/secrets.md).
    pub secrets: Vec<SecretConfig>,
    /// Inspection of what agents send, before it is forwarded (`[inspect]`).
    pub inspect: InspectConfig,
    /// Which tools each agent may call on which MCP server (`[[mcp]]`, docs/mcp.md).
    pub mcp: McpConfig,
    /// Recording a run for HAR export and replay (`[record]`, docs/evaluation-guide.md).
    pub record: RecordConfig,
}

/// `[ca]`: where the proxy's CA lives.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CaConfig {
    /// Directory holding `agentgate-ca.pem` and `agentgate-ca.key`, created on first run (default `certs`).
    pub dir: PathBuf,
}

/// `[[rules]]`: one operator rule. Applied before site policies, in file order; the first
/// rule whose host, path and method all match decides.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Host pattern: `example.com`, `*.example.com` (subdomains), or `*` (every host).
    pub host: String,
    /// Path pattern in robots.txt syntax: a prefix, `*` for any run of characters, `$` to
    /// anchor the end (default `/`, every path).
    #[serde(default = "every_path")]
    pub path: String,
    /// Methods the rule applies to, e.g. `["POST", "DELETE"]` (default: every method).
    #[serde(default)]
    pub methods: Vec<String>,
    /// The agent ids the rule applies to, e.g. `["sbx"]` (default: every agent).
    #[serde(default)]
    pub agents: Vec<String>,
    /// `allow` (forward without consulting site policies) or `deny` (block).
    pub action: RuleAction,
    /// Why, shown to the agent and in the log (default: the rule itself).
    #[serde(default)]
    pub reason: String,
}

fn every_path() -> String {
    "/".to_owned()
}

/// `[robots]`: robots.txt extensions beyond RFC 9309.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RobotsConfig {
    /// Whether the `Crawl-delay` of the group that applies to the agent is enforced as one
    /// request per delay per (agent, origin), answered 429 (default false).
    pub honor_crawl_delay: bool,
}

/// `[usage]`: usage preferences (SEMANTICS §6.6, docs/usage.md).
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UsageConfig {
    /// An agent that declares no purpose: `"record"` (default: preferences are logged, never
    /// enforced) or `"deny"` (it counts as declaring every label, so any "no" refuses it).
    pub undeclared: crate::policy::usage::Undeclared,
}

/// `[agents_md]`: how AGENTS.md's advisory keys are read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AgentsMdConfig {
    /// Whether `authentication: required` denies a write that carries neither
    /// `Authorization` nor `Cookie` (SEMANTICS C23's strict mode; default false: logged only).
    pub strict_authentication: bool,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            mode: Mode::Enforce,
            instance: String::new(),
            shutdown_grace: Duration::from_secs(10),
            bypass_hosts: Vec::new(),
            rules: Vec::new(),
            agent: AgentConfig::default(),
            agents: Vec::new(),
            auth: AuthConfig::default(),
            robots: RobotsConfig::default(),
            agents_md: AgentsMdConfig::default(),
            usage: UsageConfig::default(),
            cache: CacheConfig::default(),
            ca: CaConfig::default(),
            upstream: UpstreamConfig::default(),
            mitm: MitmConfig::default(),
            network: NetworkConfig::default(),
            connect: ConnectConfig::default(),
            connections: ConnectionsConfig::default(),
            audit: AuditConfig::default(),
            limits: LimitsConfig::default(),
            admin: AdminConfig::default(),
            approvals: ApprovalsConfig::default(),
            transparent: TransparentConfig::default(),
            secrets: Vec::new(),
            inspect: InspectConfig::default(),
            mcp: McpConfig::default(),
            record: RecordConfig::default(),
        }
    }
}

impl Default for CaConfig {
    fn default() -> Self {
        Self { dir: PathBuf::from("certs") }
    }
}

impl Config {
    /// The built-in configuration: `config/agentgate.toml` as compiled into the binary.
    ///
    /// Used when no `--config` is given; the file documents every key with its default.
    pub fn embedded_default() -> Config {
        Self::from_toml_str(EMBEDDED_DEFAULT, "config/agentgate.toml (built in)")
            .expect("the embedded default config parses and validates: unit test `embedded_default_parses`")
    }

    /// Parses and validates a config from TOML text; `origin` (usually the file name) prefixes every message.
    ///
    /// # Errors
    /// [`ConfigError::Syntax`] when the text is not TOML (the parse stops there);
    /// [`ConfigError::Invalid`] listing every unknown key and every value of the wrong type or
    /// form (each at `origin:line:column`), then every semantic problem.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Config, ConfigError> {
        parse::Parsed::new(text, origin)?.into_config()
    }

    /// Reads, parses and validates the config file at `path`.
    ///
    /// # Errors
    /// [`ConfigError::Read`] when the file cannot be read; otherwise as [`from_toml_str`](Self::from_toml_str).
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read(path)?;
        Self::from_toml_str(&text, &path.display().to_string())
    }

    /// What `agentgate config check` reports: [`load`](Self::load), and whether every file
    /// the config names that can be tried without starting is usable (each `[upstream]
    /// extra_ca_files` entry, read by `crate::tls::upstream`), each problem at its line.
    ///
    /// # Errors
    /// As [`load`](Self::load), with the unusable files among the problems.
    pub fn check(path: &Path) -> Result<Config, ConfigError> {
        let text = read(path)?;
        let origin = path.display().to_string();
        let mut parsed = parse::Parsed::new(&text, &origin)?;
        let files = parsed.config.as_ref().map(|c| c.upstream.extra_ca_files.clone()).unwrap_or_default();
        for (index, file) in files.iter().enumerate() {
            if let Err(error) = crate::tls::upstream::check_extra_ca_file(file) {
                parsed.problem_at_entry("upstream", "extra_ca_files", index, &error.to_string());
            }
        }
        parsed.into_config()
    }

    /// Every semantic problem in the config, each naming the key, its value and the fix.
    /// A reload checks again the config it would put in force, whose restart-only tables are
    /// the running ones (`crate::reload::in_force`).
    pub(crate) fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        let grace = self.shutdown_grace;
        if grace.is_zero() || grace > MAX_SHUTDOWN_GRACE {
            problems.push(format!(
                "shutdown_grace = \"{}\": must be more than 0s and at most 1h; the default is \"10s\"",
                humantime::format_duration(grace)
            ));
        }
        self.upstream.problems(self.connections.max_connections, &mut problems);
        self.connections.problems(&mut problems);
        self.mitm.problems(&mut problems);
        self.admin.problems(&mut problems);
        self.approvals.problems(&mut problems);
        self.approvals.fleet_problems(&self.limits, &mut problems);
        if self.approvals.mode == ApprovalMode::Hold {
            self.admin.holding_problems("[approvals] mode = \"hold\"", &mut problems);
        }
        for (i, secret) in self.secrets.iter().enumerate() {
            secret.problems(i + 1, |host| self.mitm.is_passthrough(host), &mut problems);
        }
        overlap_problems(&self.secrets, &mut problems);
        for pattern in &self.bypass_hosts {
            if pattern != "*" && !is_host_pattern(pattern) {
                problems.push(format!(
                    "bypass_hosts entry {pattern:?}: not a host name, `*.suffix` or `*`; write e.g. \"api.openai.com\""
                ));
            }
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.host != "*" && !is_host_pattern(&rule.host) && IpNet::from_str(&rule.host).is_err() {
                problems.push(format!(
                    "[[rules]] #{} host = {:?}: not a host name, `*.suffix`, `*` or a CIDR; write e.g. \"*.example.com\" or \"10.0.0.0/8\"",
                    i + 1,
                    rule.host
                ));
            }
            if !rule.path.starts_with('/') && !rule.path.starts_with('*') {
                problems.push(format!(
                    "[[rules]] #{} path = {:?}: must start with `/` (robots.txt pattern syntax, e.g. \"/admin/\" or \"/*.pdf$\")",
                    i + 1,
                    rule.path
                ));
            }
            for method in &rule.methods {
                if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphabetic()) {
                    problems.push(format!(
                        "[[rules]] #{} methods entry {method:?}: not an HTTP method; write e.g. \"POST\"",
                        i + 1
                    ));
                }
            }
            let known: Vec<&str> =
                std::iter::once(&self.agent).chain(&self.agents).filter_map(|a| a.id.as_deref()).collect();
            for agent in rule.agents.iter().filter(|a| !known.contains(&a.as_str())) {
                problems.push(format!(
                    "[[rules]] #{} agents entry {agent:?}: no [agent] or [[agents]] has this id (configured: {}); write one of them",
                    i + 1,
                    if known.is_empty() { "none".to_owned() } else { known.join(", ") }
                ));
            }
        }
        agent_problems(&self.agent, &self.agents, &mut problems);
        self.record.problems(self.mode, &self.agent, &self.agents, &mut problems);
        // Replicas that share limits or policy copies through Redis are one fleet: one key.
        let shared =
            self.limits.store == crate::limits::Store::Redis || self.cache.store == crate::fetch::CacheStore::Redis;
        crate::agents::signing_problems(&self.agent, &self.agents, shared, &mut problems);
        for table in holding_tables(&self.agent, &self.agents) {
            self.admin.holding_problems(&format!("{table} unlisted = \"hold\""), &mut problems);
        }
        self.connect.problems(&mut problems);
        nonzero_caps(
            &mut problems,
            &[("[cache] max_origins", self.cache.max_origins, CacheConfig::default().max_origins)],
        );
        if self.cache.max_bytes < MIN_CACHE_BYTES {
            problems.push(format!(
                "[cache] max_bytes = {}: must be at least {MIN_CACHE_BYTES} (1 MiB: one origin's parsed policies \
                 can weigh that much); the default is 268435456 (256 MiB)",
                self.cache.max_bytes
            ));
        }
        self.cache.redis.problems(&mut problems);
        self.audit.problems(&mut problems);
        self.limits.problems(&mut problems);
        crate::audit::instance_problems(&self.instance, &mut problems);
        if self.ca.dir.as_os_str().is_empty() {
            problems.push("[ca] dir = \"\": must not be empty".to_owned());
        }
        if let Some(admin) = self.admin.listen
            && same_socket(self.listen, admin)
        {
            problems.push(format!(
                "listen = \"{}\" and [admin] listen = \"{admin}\" use the same address; give the admin API its own port, e.g. \"127.0.0.1:9090\"",
                self.listen
            ));
        }
        self.transparent.problems(&mut problems);
        self.inspect_problems(&mut problems);
        self.mcp_problems(&mut problems);
        for addr in &self.transparent.listen {
            let taken = [("listen", Some(self.listen)), ("[admin] listen", self.admin.listen)];
            for (key, other) in taken {
                if let Some(other) = other
                    && same_socket(*addr, other)
                {
                    problems.push(format!(
                        "[transparent] listen entry \"{addr}\" and {key} = \"{other}\" use the same address; give transparent mode its own port, e.g. \"0.0.0.0:8443\""
                    ));
                }
            }
        }
        problems
    }
}

/// What the gate and the proxy are given of a config: the one conversion each, made by the
/// composition root (`crate::app`) at start, by a reload, and (the gate's) by the offline runners (`crate::explain`,
/// `crate::evidence`), which decide as the proxy does.
impl Config {
    /// The gate's settings ([`GateSettings`]), its signing agents with their keys from `keys`.
    pub fn gate_settings(&self, keys: &Keys) -> GateSettings {
        GateSettings {
            mode: self.mode,
            agents: Agents::with_keys(&self.agent, &self.agents, &self.auth, keys),
            rules: self.operator_rules(),
            policy: self.policy_settings(),
            instance: crate::audit::instance_name(&self.instance),
            secrets: self.secrets.clone(),
        }
    }

    /// The operator's side of `agentgate explain --config` (and of the admin API's
    /// `/explain`, and of `agentgate audit shadow`) for agent `id` (`None`: the `[agent]`
    /// table): the agent, the operator's rules and the switches, as the gate has them.
    ///
    /// # Errors
    /// [`ExplainError::UnknownAgent`] when no agent of the config has the id.
    pub fn operator(&self, id: Option<&str>) -> Result<Operator, ExplainError> {
        let agents = Agents::new(&self.agent, &self.agents, &self.auth);
        let agent = agents.named(id).ok_or_else(|| {
            let known: Vec<&str> =
                std::iter::once(&self.agent).chain(&self.agents).filter_map(|a| a.id.as_deref()).collect();
            let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
            ExplainError::UnknownAgent { id: id.unwrap_or_default().to_owned(), known }
        })?;
        Ok(Operator::new(std::sync::Arc::clone(agent), self.operator_rules(), self.policy_settings()))
    }

    /// The operator's switches that change what the site files mean (`[robots]`,
    /// `[agents_md]`, `[usage]`): what the gate decides with, and `agentgate audit shadow`
    /// with it.
    pub fn policy_settings(&self) -> policy::Settings {
        policy::Settings {
            honor_crawl_delay: self.robots.honor_crawl_delay,
            strict_authentication: self.agents_md.strict_authentication,
            usage_undeclared: self.usage.undeclared,
        }
    }

    /// The operator's `[[rules]]` and `bypass_hosts`, compiled with canonical hosts: what the
    /// gate applies, and `agentgate explain --config` with it.
    pub fn operator_rules(&self) -> OperatorRules {
        let rules = self
            .rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let host = canonical_pattern(&r.host);
                OperatorRule::new(i + 1, &host, &r.path, &r.methods, &r.agents, r.action, &r.reason)
            })
            .collect();
        let bypass_hosts = self.bypass_hosts.iter().map(|p| canonical_pattern(p)).collect();
        OperatorRules::new(bypass_hosts, rules)
    }

    /// The proxy's settings ([`proxy::Settings`]): the tables it reads while it serves, made
    /// by `crate::app` at start and by a reload, as the gate's are.
    pub fn proxy_settings(&self) -> proxy::Settings {
        proxy::Settings {
            mode: self.mode,
            shutdown_grace: self.shutdown_grace,
            agent: self.agent.clone(),
            agents: self.agents.clone(),
            mitm: self.mitm.clone(),
            network: self.network.clone(),
            connect: self.connect.clone(),
            connections: self.connections.clone(),
            log_query: self.audit.log_query,
            approvals: self.approvals.clone(),
            inspect: self.inspect.clone(),
            mcp: self.mcp.clone(),
            record: self.record.clone(),
        }
    }
}

impl Config {
    /// `[inspect]`'s own problems, then across tables: each of its `agents` must be a
    /// configured id, and none of its `hosts` a `[mitm] passthrough_hosts` host (a spliced
    /// tunnel is never read, so it cannot be inspected).
    fn inspect_problems(&self, problems: &mut Vec<String>) {
        self.inspect.problems(problems);
        self.unknown_agents("[inspect]", &self.inspect.agents, problems);
        self.passthrough_clashes("[inspect]", &self.inspect.hosts, problems);
    }

    /// `[[mcp]]`'s own problems, then across tables, as for `[inspect]`: its `agents` must be
    /// configured ids, and its `hosts` not passthrough (an MCP body in a spliced tunnel cannot
    /// be read, so its tools could not be ruled).
    fn mcp_problems(&self, problems: &mut Vec<String>) {
        self.mcp.problems(problems);
        for (i, table) in self.mcp.tables.iter().enumerate() {
            let at = format!("[[mcp]] #{}", i + 1);
            self.unknown_agents(&at, &table.agents, problems);
            self.passthrough_clashes(&at, &table.hosts, problems);
        }
    }

    /// Each of `agents` (of table `at`) that no `[agent]` or `[[agents]]` has as its id.
    fn unknown_agents(&self, at: &str, agents: &[String], problems: &mut Vec<String>) {
        let known: Vec<&str> =
            std::iter::once(&self.agent).chain(&self.agents).filter_map(|a| a.id.as_deref()).collect();
        for agent in agents.iter().filter(|a| !known.contains(&a.as_str())) {
            problems.push(format!(
                "{at} agents entry {agent:?}: no [agent] or [[agents]] has this id (configured: {}); write one of them",
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            ));
        }
    }

    /// Each of `hosts` (of table `at`, which reads bodies) that is a `[mitm]
    /// passthrough_hosts` host, whose tunnel is spliced unread.
    fn passthrough_clashes(&self, at: &str, hosts: &[String], problems: &mut Vec<String>) {
        for pattern in hosts {
            // A wildcard stands for the hosts under it: one of them passthrough is a clash.
            let example = pattern.strip_prefix("*.").map_or_else(|| pattern.clone(), |suffix| format!("x.{suffix}"));
            let same = self.mitm.passthrough_hosts().iter().any(|p| p.eq_ignore_ascii_case(pattern));
            if pattern != "*" && (same || self.mitm.is_passthrough(&example)) {
                problems.push(format!(
                    "{at} hosts entry {pattern:?} is also a [mitm] passthrough_hosts host: a passthrough tunnel \
                     is spliced unread, so it cannot be read; remove it from one of the two lists"
                ));
            }
        }
    }
}

/// Whether two listeners would collide: same port (other than 0, which picks a free one) on the
/// same address, or on any address when either binds all interfaces.
fn same_socket(a: SocketAddr, b: SocketAddr) -> bool {
    a.port() != 0 && a.port() == b.port() && (a.ip() == b.ip() || a.ip().is_unspecified() || b.ip().is_unspecified())
}

/// Everything that can be wrong with a config file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error(
        "cannot read config file {path}: {source}; check the --config path, or leave it out to use the built-in default"
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML (the parse stops at the first such error).
    #[error("{location}: {message}")]
    Syntax {
        /// `file:line:column` of the problem (1-based), or just the file when TOML gave no position.
        location: String,
        /// What is wrong, with the offending line and what is expected.
        message: String,
    },
    /// The file is TOML, but keys are unknown, values have the wrong type or form, or do not
    /// make sense; every problem is listed.
    #[error("{origin}: {} invalid setting(s):{}", problems.len(), Bullets(problems))]
    Invalid {
        /// The file (or other origin) the config came from.
        origin: String,
        /// Every problem: those at a place in the file first, in file order.
        problems: Vec<Problem>,
    },
}

/// One problem in a config file, naming the key, its value and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// `file:line:column` (1-based) when the problem is at one place in the file: a key or
    /// value that did not parse, a file named there that cannot be used.
    pub location: Option<String>,
    /// What is wrong and the fix; a located problem starts with its table and line as written.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.location {
            Some(location) => write!(f, "{location}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

/// Formats problems as an indented list, one per line.
struct Bullets<'a>(&'a [Problem]);

impl fmt::Display for Bullets<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|problem| write!(f, "\n  - {problem}"))
    }
}

/// Reads a config file, naming it in the error.
fn read(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_owned(), source })
}

/// What the config tests of every module share.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Config, ConfigError};

    /// The validation problems of `text` (none when it is valid); a syntax error fails the test.
    pub(crate) fn problems(text: &str) -> Vec<String> {
        match Config::from_toml_str(text, "agentgate.toml") {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid { problems, .. }) => problems.iter().map(ToString::to_string).collect(),
            Err(other) => panic!("expected validation problems for {text:?}, got {other}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::problems;
    use super::*;
    use crate::inspect::OnUnreadable;

    /// The one problem of `text` that is at a place in the file: a TOML syntax error, an
    /// unknown key, a value of the wrong type or form.
    fn syntax(text: &str) -> String {
        match Config::from_toml_str(text, "agentgate.toml") {
            Err(err @ ConfigError::Syntax { .. }) => err.to_string(),
            Err(ConfigError::Invalid { problems, .. }) if problems.len() == 1 && problems[0].location.is_some() => {
                problems[0].to_string()
            }
            other => panic!("expected one located problem for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn embedded_default_parses() {
        // The shipped file and the code's defaults must never drift apart.
        assert_eq!(Config::embedded_default(), Config::default());
        assert_eq!(Config::from_toml_str("", "empty.toml").unwrap(), Config::default());
    }

    #[test]
    fn container_config_parses() {
        // Docker cannot run in CI, so this is the check that the image's config is valid.
        let text = include_str!("../docker/agentgate.toml");
        let config = Config::from_toml_str(text, "docker/agentgate.toml").unwrap();
        assert_eq!(config.listen, "0.0.0.0:8080".parse().unwrap());
        assert_eq!(config.admin.listen, Some("127.0.0.1:9090".parse().unwrap()));
        assert_eq!(config.ca.dir, PathBuf::from("/var/lib/agentgate/certs"));
    }

    #[test]
    fn defaults_are_the_documented_ones() {
        let config = Config::default();
        assert_eq!(config.listen, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(config.mode, Mode::Enforce);
        assert_eq!(config.shutdown_grace, Duration::from_secs(10));
        assert_eq!(config.ca.dir, PathBuf::from("certs"));
        assert_eq!(config.upstream.connect_timeout, Duration::from_secs(10));
        assert_eq!(config.upstream.idle_timeout, Duration::from_secs(90));
        assert_eq!(config.mitm.cert_cache_size, 10_000);
        assert_eq!(config.audit.path, PathBuf::from("logs/decisions.jsonl"));
        assert_eq!(config.admin.listen, Some("127.0.0.1:9090".parse().unwrap()));
    }

    #[test]
    fn partial_file_is_completed_from_defaults() {
        let text = r#"
mode = "monitor"
[mitm]
passthrough_hosts = ["bank.example", "*.pinned.example"]
[network]
allow_cidrs = ["10.0.0.0/8", "192.168.1.5", "fd00::/8"]
[admin]
listen = "off"
"#;
        let config = Config::from_toml_str(text, "partial.toml").unwrap();
        assert_eq!(config.mode, Mode::Monitor);
        assert_eq!(config.mitm.cert_cache_size, 10_000);
        assert_eq!(config.listen, Config::default().listen);
        assert_eq!(config.admin.listen, None);
        let nets: Vec<String> = config.network.allow_cidrs.iter().map(ToString::to_string).collect();
        assert_eq!(nets, ["10.0.0.0/8", "192.168.1.5/32", "fd00::/8"]);
    }

    #[test]
    fn unknown_key_names_key_place_and_valid_keys() {
        let message = syntax("listen = \"127.0.0.1:8080\"\n\n[mitm]\npassthrough = []\n");
        assert!(message.starts_with("agentgate.toml:4:1: [mitm] passthrough = []:"), "{message}");
        assert!(message.contains("unknown field `passthrough`"), "{message}");
        assert!(message.contains("`passthrough_hosts`") && message.contains("`cert_cache_size`"), "{message}");

        let message = syntax("[proxy]\nlisten = \"127.0.0.1:8080\"\n");
        assert!(message.starts_with("agentgate.toml:1:"), "{message}");
        assert!(message.contains("unknown field `proxy`") && message.contains("`upstream`"), "{message}");
    }

    #[test]
    fn bad_values_name_key_value_and_expectation() {
        let message = syntax("# proxy\n\nlisten = \"0.0.0.0:99999\"\n");
        assert!(
            message.starts_with("agentgate.toml:3:10: listen = \"0.0.0.0:99999\": invalid socket address; "),
            "{message}"
        );
        assert!(message.contains("expected host:port such as 127.0.0.1:8080"), "{message}");

        let message = syntax("[upstream]\nconnect_timeout = \"10 parsecs\"\n");
        assert!(message.starts_with("agentgate.toml:2:19: [upstream] connect_timeout"), "{message}");
        assert!(message.contains("\"10 parsecs\"") && message.contains("\"10s\""), "{message}");

        let message = syntax("mode = \"block\"\n");
        assert!(message.contains("mode = \"block\"") && message.contains("`enforce`"), "{message}");

        let message = syntax("[network]\nallow_cidrs = [\"10.0.0.0/33\"]\n");
        assert!(message.contains("\"10.0.0.0/33\"") && message.contains("CIDR"), "{message}");

        let message = syntax("[mitm]\ncert_cache_size = \"big\"\n");
        assert!(message.starts_with("agentgate.toml:2:19: [mitm] cert_cache_size = \"big\""), "{message}");

        let message = syntax("listen = \n");
        assert!(message.starts_with("agentgate.toml:1:"), "{message}");
    }

    #[test]
    fn validation_reports_every_problem() {
        let text = r#"
listen = "127.0.0.1:8080"
shutdown_grace = "2h"
[upstream]
connect_timeout = "0s"
[mitm]
cert_cache_size = 0
passthrough_hosts = ["https://bank.example/", "ok.example", "*.ok.example", "*", "a..b"]
[admin]
listen = "127.0.0.1:8080"
"#;
        let problems = problems(text);
        let joined = problems.join("\n");
        assert_eq!(problems.len(), 7, "{joined}");
        assert!(joined.contains("shutdown_grace = \"2h\""), "{joined}");
        assert!(joined.contains("[upstream] connect_timeout"), "{joined}");
        assert!(joined.contains("[mitm] cert_cache_size = 0"), "{joined}");
        assert!(joined.contains("\"https://bank.example/\""), "{joined}");
        assert!(joined.contains("entry \"*\""), "{joined}");
        assert!(joined.contains("entry \"a..b\""), "{joined}");
        assert!(joined.contains("same address"), "{joined}");

        let err = Config::from_toml_str(text, "agentgate.toml").unwrap_err().to_string();
        assert!(err.starts_with("agentgate.toml: 7 invalid setting(s):\n  - "), "{err}");
    }

    #[test]
    fn agents_parse_with_every_key() {
        let text = r#"
[agent]
mode = "monitor"
limits = { requests_per_hour = 100 }
[[agents]]
id = "research-agent"
token_sha256 = "9F86D081884C7D659A2FEAA0C55AD015A3BF4F1B2B0B822CD15D6C15B0F00A08"
clients = ["10.1.2.0/24", "127.0.0.2"]
product_token = "ResearchBot"
trust_level = 2
purposes = ["search"]
mode = "enforce"
identity = "research-agent (+https://example.com)"
limits = { requests_per_minute = 60, per_origin_requests_per_minute = 10 }
[auth]
required = true
"#;
        let config = Config::from_toml_str(text, "agents.toml").unwrap();
        assert_eq!(config.agent.mode, Some(Mode::Monitor));
        assert_eq!(config.agent.limits.requests_per_hour, 100);
        let agent = &config.agents[0];
        assert_eq!(agent.id.as_deref(), Some("research-agent"));
        assert_eq!(agent.clients.len(), 2);
        assert_eq!(agent.limits.per_origin_requests_per_minute, 10);
        assert!(config.auth.required);
        assert!(syntax("[[agents]]\nid = \"a\"\ntoken = \"t\"\npasword = \"x\"\n").contains("unknown field `pasword`"));
        assert!(syntax("[agent.limits]\nrequests_per_day = 1\n").contains("unknown field `requests_per_day`"));
    }

    #[test]
    fn agent_problems_name_the_entry_and_the_fix() {
        let text = r#"
[agent]
token = "x"
[[agents]]
token = "t"
[[agents]]
id = "a:b"
token = "t"
token_sha256 = "abc"
trust_level = 9
[[agents]]
id = "lonely"
[[agents]]
id = "lonely"
clients = ["127.0.0.2"]
identity = "bad\u0001value"
"#;
        let problems = problems(text);
        let joined = problems.join("\n");
        for expected in [
            "[agent] token: the default agent",
            "[[agents]] #1: id is missing",
            "[[agents]] #2 id = \"a:b\": must not contain `:`",
            "[[agents]] #2: both token and token_sha256",
            "[[agents]] #2 token_sha256 = \"abc\": must be 64 hex digits",
            "[[agents]] #2 trust_level = 9",
            "[[agents]] #3: no token, token_sha256 or clients",
            "[[agents]] #4 id = \"lonely\": used by another entry",
            "[[agents]] #4 identity",
        ] {
            assert!(joined.contains(expected), "{expected:?} missing from:\n{joined}");
        }
        assert_eq!(problems.len(), 9, "{joined}");
    }

    #[test]
    fn network_and_connect_keys() {
        let text = "[network]\ndeny_cidrs = [\"10.9.0.0/16\", \"192.0.2.1\"]\n[connect]\nallowed_ports = [443, \"8000-8999\"]\n";
        let config = Config::from_toml_str(text, "t.toml").unwrap();
        assert_eq!(
            config.network.deny_cidrs,
            vec!["10.9.0.0/16".parse::<IpNet>().unwrap(), "192.0.2.1/32".parse().unwrap()]
        );
        assert!(config.connect.allows(443) && config.connect.allows(8500) && !config.connect.allows(80));
        assert!(Config::default().connect.allows(80) && !Config::default().connect.allows(22));

        for (value, shown) in
            [("[0]", "0: invalid port"), ("[70000]", "70000: invalid port"), ("[\"9-1\"]", "\"9-1\": invalid port")]
        {
            let message = syntax(&format!("[connect]\nallowed_ports = {value}\n"));
            assert!(message.contains(shown) && message.contains("8000-8999"), "{message}");
        }
        let problems = problems("[connect]\nallowed_ports = []\n");
        assert!(
            problems[0].contains("[connect] allowed_ports = []") && problems[0].contains("[443, 80]"),
            "{problems:?}"
        );
        let message = syntax("[network]\ndeny_cidrs = [\"10.0.0.0/33\"]\n");
        assert!(message.contains("[network] deny_cidrs") && message.contains("CIDR"), "{message}");
    }

    #[test]
    fn rule_hosts_may_be_cidrs_and_idns() {
        let rule = |host: &str| format!("[[rules]]\nhost = \"{host}\"\naction = \"deny\"\n");
        for host in ["10.0.0.0/8", "fd00::/8", "127.1", "bücher.example", "*.bücher.example"] {
            assert!(Config::from_toml_str(&rule(host), "t.toml").is_ok(), "{host}");
        }
        let problems = problems(&rule("10.0.0.0/33"));
        assert!(problems[0].contains("or a CIDR"), "{problems:?}");
        let mitm = MitmConfig::new(vec!["127.0.0.1".into(), "*.Bücher.example".into()], 10_000);
        assert!(mitm.is_passthrough("0x7f.1") && mitm.is_passthrough("a.xn--bcher-kva.example"));
    }

    #[test]
    fn listeners_on_port_zero_never_collide() {
        let text = "listen = \"127.0.0.1:0\"\n[admin]\nlisten = \"127.0.0.1:0\"\n";
        assert!(Config::from_toml_str(text, "test.toml").is_ok());
        assert_eq!(problems("shutdown_grace = \"0s\"\n").len(), 1);
    }

    #[test]
    fn passthrough_matching() {
        let mitm = MitmConfig::new(
            vec!["Bank.Example".into(), "*.pinned.example".into(), "10.0.0.5".into(), "::1".into()],
            10_000,
        );
        for host in ["bank.example", "BANK.example.", "a.pinned.example", "a.b.PINNED.example", "10.0.0.5", "[::1]"] {
            assert!(mitm.is_passthrough(host), "{host}");
        }
        for host in ["www.bank.example", "pinned.example", "xpinned.example", "10.0.0.6", "example", ""] {
            assert!(!mitm.is_passthrough(host), "{host}");
        }
    }

    #[test]
    fn transparent_listen_must_be_its_own_address() {
        let text = "listen = \"127.0.0.1:8080\"\n[transparent]\nlisten = [\"0.0.0.0:8080\", \"127.0.0.1:9090\", \"[::]:8443\"]\n";
        let found = problems(text);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0].contains("\"0.0.0.0:8080\" and listen = \"127.0.0.1:8080\""), "{found:?}");
        assert!(found[0].contains("give transparent mode its own port"), "{found:?}");
        assert!(found[1].contains("[admin] listen = \"127.0.0.1:9090\""), "{found:?}");
        let ok = Config::from_toml_str("[transparent]\nlisten = [\"0.0.0.0:8443\", \"[::]:8443\"]\n", "t.toml");
        assert_eq!(ok.map(|c| c.transparent.listen.len()).ok(), Some(2));
        let twice = problems("[transparent]\nlisten = [\"0.0.0.0:8443\", \"0.0.0.0:8443\"]\n");
        assert!(twice[0].contains("listed twice"), "{twice:?}");
        let bad = syntax("[transparent]\nlisten = [\"8443\"]\n");
        assert!(bad.contains("invalid socket address \"8443\""), "{bad}");
        assert!(syntax("[transparent]\nport = 1\n").contains("unknown field"));
    }

    #[test]
    fn load_names_a_missing_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nope.toml");
        let err = Config::load(&path).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }), "{err:?}");
        assert!(err.to_string().contains(&path.display().to_string()), "{err}");

        let path = dir.path().join("agentgate.toml");
        std::fs::write(&path, "listen = 8080\n").unwrap();
        let err = Config::load(&path).unwrap_err().to_string();
        assert!(err.contains(&format!("\n  - {}:1:10: listen = 8080", path.display())), "{err}");
    }

    #[test]
    fn mcp_tables_parse_and_are_checked_across_tables() {
        let text = r#"
[[agents]]
id = "sbx"
clients = ["10.0.0.0/8"]
[mitm]
passthrough_hosts = ["bank.example"]
[[mcp]]
hosts = ["mcp.example", "bank.example"]
agents = ["sbx", "nobody"]
allow_tools = ["search", "create_*"]
"#;
        let Err(ConfigError::Invalid { problems, .. }) = Config::from_toml_str(text, "mcp.toml") else {
            panic!("a passthrough host and an unknown agent are problems");
        };
        let text_of: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 2, "{text_of:#?}");
        assert!(text_of[0].contains("[[mcp]] #1 agents entry \"nobody\""), "{text_of:#?}");
        assert!(text_of[1].contains("[[mcp]] #1 hosts entry \"bank.example\" is also a [mitm]"), "{text_of:#?}");
        let good = text.replace(", \"nobody\"", "").replace(", \"bank.example\"]\nagents", "]\nagents");
        let config = Config::from_toml_str(&good, "mcp.toml").unwrap();
        let served = config.mcp.served("mcp.example", "sbx").and_then(|s| s.table);
        assert!(served.is_some_and(|t| t.refusal("delete_repo").is_some() && t.refusal("create_issue").is_none()));
    }

    #[test]
    fn inspect_table_parses_and_is_checked_across_tables() {
        let text = r#"
[[agents]]
id = "sbx"
clients = ["10.0.0.0/8"]
[mitm]
passthrough_hosts = ["bank.example", "*.pinned.example"]
[inspect]
hosts = ["paste.example", "bank.example", "a.pinned.example", "*.pinned.example", "*"]
agents = ["sbx", "nobody"]
max_body = 2048
on_unreadable = "allow"
[[inspect.patterns]]
name = "internal_token"
regex = "itok_[a-z0-9]{8}"
"#;
        let Err(ConfigError::Invalid { problems, .. }) = Config::from_toml_str(text, "inspect.toml") else {
            panic!("passthrough hosts and an unknown agent are problems");
        };
        let text_of: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 4, "{text_of:#?}");
        assert!(text_of[0].contains("[inspect] agents entry \"nobody\""), "{text_of:#?}");
        for (i, host) in ["bank.example", "a.pinned.example", "*.pinned.example"].iter().enumerate() {
            let message = &text_of[i + 1];
            assert!(
                message.contains(&format!("hosts entry {host:?} is also a [mitm] passthrough_hosts host")),
                "{message}"
            );
        }
        let good = text
            .replace(r#", "bank.example", "a.pinned.example", "*.pinned.example""#, "")
            .replace(r#", "nobody""#, "");
        let config = Config::from_toml_str(&good, "inspect.toml").unwrap();
        assert_eq!(config.inspect.max_body, 2048);
        assert_eq!(config.inspect.on_unreadable, OnUnreadable::Allow);
        assert_eq!(config.inspect.patterns[0].name, "internal_token");
        assert!(config.inspect.applies("x.test", "sbx") && !config.inspect.applies("x.test", "other"));
    }

    #[test]
    fn an_inspect_pattern_that_does_not_compile_is_an_error_at_its_line() {
        let text = "[[inspect.patterns]]\nname = \"broken\"\nregex = \"itok_[\"\n";
        let err = Config::from_toml_str(text, "inspect.toml").unwrap_err().to_string();
        assert!(err.contains("inspect.toml:1:1") && err.contains("\"broken\": regex does not compile"), "{err}");
    }
}
