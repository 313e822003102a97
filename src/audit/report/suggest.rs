//! `agentgate audit suggest`: the `allow_hosts` each agent needs, learned from decision logs
//! (a monitor-mode run, typically: `docs/operator-guide.md`, "Locking an agent down"). Per
//! agent, every host it sent a request to, with the number of requests, as the TOML line to
//! put in that agent's table in place of its lists; a port only where it is not 80 or 443.
//! A host is suggested when the agent reached it at least once, whatever else happened to
//! it: a port the network guard refused (`network.*`, `transparent.host_mismatch`; agentgate's
//! own admin address among them) is never suggested, and the host's reached ports are then
//! named one by one so the entry does not open the refused one; a host the agent's
//! `deny_hosts` refused is never suggested at all; both are listed in a comment. A host whose
//! every request ended in an `error` (it never resolved, or never answered) is not suggested.
//! Logs are read as `audit summary` reads them: rotated and gzip'd, one record per request.
//! On MCP servers (`[[mcp]]`, docs/mcp.md), the tools each agent called and was not refused
//! (`agentgate.mcp.tool` of a record allowed or `would_deny`) are suggested as an `[[mcp]]`
//! table per host, whose `allow_tools` then refuses every other tool.
//!
//! Never: writes a config file, or suggests a host or a tool an agent never asked for.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::str::FromStr;

use http::uri::Authority;

use super::input::for_each_line;
use super::query::{LoggedRecord, OnePerRequest};
use super::summary::MalformedLine;
use crate::audit::{AuditError, Outcome, is_checkpoint};
use crate::policy::OperatorCode;

/// What `audit suggest` found in the logs.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Suggestion {
    /// One entry per agent that sent a request, by agent id.
    pub agents: Vec<AgentHosts>,
    /// Lines that were not a record.
    pub malformed_lines: u64,
    /// The first of them, to show where.
    pub first_malformed: Option<MalformedLine>,
}

/// The hosts one agent asked for.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct AgentHosts {
    /// The agent id as logged.
    pub agent: String,
    /// Its requests counted (one per `event.id`).
    pub requests: u64,
    /// The `allow_hosts` entries to suggest (`host` or `host:port`) with their requests, by entry.
    pub hosts: Vec<(String, u64)>,
    /// Hosts left out, with the code that refused them and their requests: the network
    /// guard's refusals and the agent's `deny_hosts`.
    pub left_out: Vec<(String, String, u64)>,
    /// The MCP tools it called, per host (by host), each with its calls (by tool).
    pub tools: Vec<(String, Vec<(String, u64)>)>,
}

/// Reads the logs at `paths` (plain or gzip'd, oldest first) and suggests each agent's
/// `allow_hosts`, or only `agent`'s when given. A record counts once per request; records of
/// clients no agent was identified for (`auth.*`) and of `agentgate.local` are not hosts an
/// agent needs.
///
/// # Errors
/// [`AuditError::ReadOpen`] or [`AuditError::Read`] when a file cannot be read; malformed
/// lines are counted, never an error.
pub fn suggest(paths: &[impl AsRef<Path>], agent: Option<&str>) -> Result<Suggestion, AuditError> {
    let mut requests = OnePerRequest::default();
    let mut tally = Tally::default();
    let mut suggestion = Suggestion::default();
    for_each_line(paths, |path, line, bytes| {
        if bytes.trim_ascii().is_empty() || is_checkpoint(bytes) {
            return;
        }
        match LoggedRecord::parse(bytes) {
            Ok(record) => {
                if let Some(record) = requests.next(record) {
                    tally.count(&record, agent);
                }
            }
            Err(not_a_record) => {
                suggestion.malformed_lines += 1;
                suggestion.first_malformed.get_or_insert_with(|| MalformedLine {
                    file: path.to_owned(),
                    line,
                    error: not_a_record.0,
                });
            }
        }
    })?;
    for record in requests.unfinished() {
        tally.count(&record, agent);
    }
    suggestion.agents = tally.finish();
    Ok(suggestion)
}

/// Requests per agent, host and port; refusals per agent and host.
#[derive(Default)]
struct Tally {
    agents: BTreeMap<String, AgentTally>,
}

#[derive(Default)]
struct AgentTally {
    requests: u64,
    /// Host as written in an entry (IPv6 without brackets) → port → requests.
    hosts: BTreeMap<String, BTreeMap<u16, u64>>,
    /// (host, port) → (the refusing code, requests).
    left_out: BTreeMap<(String, u16), (String, u64)>,
    /// MCP host → tool → calls.
    tools: BTreeMap<String, BTreeMap<String, u64>>,
}

/// Why a record's host must not be suggested: refused by the network guard, or by the
/// agent's own `deny_hosts` (the suggested line replaces the lists, so it would open them).
fn refused_code(record: &LoggedRecord) -> Option<String> {
    record.deciding_reasons().into_iter().find_map(|reason| {
        let code = reason.split_once(' ').map_or(reason.as_str(), |(_, code)| code);
        let refused = code.starts_with("network.")
            || code == OperatorCode::HostMismatch.as_str()
            || code == OperatorCode::DeniedHost.as_str();
        refused.then(|| code.to_owned())
    })
}

impl Tally {
    fn count(&mut self, record: &LoggedRecord, only: Option<&str>) {
        if only.is_some_and(|agent| agent != record.agent()) {
            return;
        }
        let unidentified = record.reason_codes().any(|code| code.starts_with("auth."));
        let local = record.reason_codes().any(|code| code == OperatorCode::ServedLocally.as_str());
        let Some((host, port)) = record.origin().and_then(host_and_port) else { return };
        if unidentified || local {
            return;
        }
        let agent = self.agents.entry(record.agent().to_owned()).or_default();
        agent.requests += 1;
        // A call the agent made and the gate let through (or would have refused: monitor mode).
        if matches!(Outcome::parse(record.outcome()), Some(Outcome::Allow | Outcome::WouldDeny)) {
            for tool in record.mcp_tools() {
                *agent.tools.entry(host.clone()).or_default().entry(tool.to_owned()).or_default() += 1;
            }
        }
        match refused_code(record) {
            Some(code) => {
                let left = agent.left_out.entry((host, port)).or_insert((code, 0));
                left.1 += 1;
            }
            // Not resolved, not reached: nothing says the agent can use it.
            None if Outcome::parse(record.outcome()) == Some(Outcome::Error) => {}
            None => *agent.hosts.entry(host).or_default().entry(port).or_default() += 1,
        }
    }

    fn finish(self) -> Vec<AgentHosts> {
        self.agents
            .into_iter()
            .map(|(agent, tally)| {
                let mut hosts = Vec::new();
                for (host, ports) in tally.hosts {
                    let refused = tally.left_out.iter().filter(|((refused, _), _)| *refused == host);
                    let mut refused_codes = refused.map(|(_, (code, _))| code.as_str()).peekable();
                    let guard_refused_a_port = refused_codes.peek().is_some();
                    // The agent's own deny_hosts: the suggested line replaces it, so never open it.
                    if refused_codes.any(|code| code == OperatorCode::DeniedHost.as_str()) {
                        continue;
                    }
                    // An entry without a port admits every port: one for 80/443 covers the rest,
                    // unless the guard refused a port of this host (agentgate's own address).
                    if !guard_refused_a_port && ports.keys().any(|port| matches!(port, 80 | 443)) {
                        hosts.push((entry(&host, None), ports.values().sum()));
                    } else {
                        hosts.extend(ports.into_iter().map(|(port, n)| (entry(&host, Some(port)), n)));
                    }
                }
                let left_out = tally
                    .left_out
                    .into_iter()
                    .map(|((host, port), (code, n))| (entry(&host, Some(port)), code, n))
                    .collect();
                let tools = tally.tools.into_iter().map(|(host, tools)| (host, tools.into_iter().collect())).collect();
                AgentHosts { agent, requests: tally.requests, hosts, left_out, tools }
            })
            .collect()
    }
}

/// The host (IPv6 without brackets) and port of a logged origin, `scheme://host[:port]`.
fn host_and_port(origin: &str) -> Option<(String, u16)> {
    let (scheme, authority) = origin.split_once("://")?;
    let default = match scheme {
        "http" => 80,
        "https" => 443,
        _ => return None,
    };
    let authority = Authority::from_str(authority).ok()?;
    let host = authority.host().trim_start_matches('[').trim_end_matches(']').to_ascii_lowercase();
    Some((host, authority.port_u16().unwrap_or(default)))
}

/// An `allow_hosts` entry: the host, with `:port` when given (IPv6 in brackets then).
fn entry(host: &str, port: Option<u16>) -> String {
    match port {
        Some(port) if host.contains(':') => format!("[{host}]:{port}"),
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
    }
}

fn plural(n: u64) -> &'static str {
    if n == 1 { "" } else { "s" }
}

impl AgentHosts {
    /// The `allow_hosts` line (an array, one entry per line with its requests as a comment),
    /// then the hosts left out as comments.
    pub fn render(&self) -> String {
        let mut out = String::from("allow_hosts = [\n");
        let quoted: Vec<String> = self.hosts.iter().map(|(host, _)| format!("\"{host}\",")).collect();
        let width = quoted.iter().map(String::len).max().unwrap_or(0);
        for (quoted, (_, n)) in quoted.iter().zip(&self.hosts) {
            let _ = writeln!(out, "    {quoted:<width$}  # {n} request{}", plural(*n));
        }
        out.push_str("]\n");
        if !self.left_out.is_empty() {
            out.push_str("# left out, never suggested (refused by the network guard or by deny_hosts):\n");
            for (host, code, n) in &self.left_out {
                let _ = writeln!(out, "#   {host}: {code}, {n} request{}", plural(*n));
            }
        }
        for (host, tools) in &self.tools {
            let _ = writeln!(
                out,
                "# the MCP tools it called on {host}: a top-level [[mcp]] table; every other tool is refused\n\
                 [[mcp]]\nhosts = [\"{host}\"]\nagents = [{:?}]\nallow_tools = [",
                self.agent
            );
            let quoted: Vec<String> = tools.iter().map(|(tool, _)| format!("\"{tool}\",")).collect();
            let width = quoted.iter().map(String::len).max().unwrap_or(0);
            for (quoted, (_, n)) in quoted.iter().zip(tools) {
                let _ = writeln!(out, "    {quoted:<width$}  # {n} call{}", plural(*n));
            }
            out.push_str("]\n");
        }
        out
    }
}

impl Suggestion {
    /// With `one_agent`, that agent's line alone; otherwise one block per agent, each
    /// opening with a comment naming the agent (a block goes in that agent's table).
    pub fn render(&self, one_agent: bool) -> String {
        if one_agent {
            return self.agents.first().map_or_else(|| "allow_hosts = []\n".to_owned(), AgentHosts::render);
        }
        let blocks: Vec<String> = self
            .agents
            .iter()
            .map(|agent| {
                let hosts = agent.hosts.len();
                format!(
                    "# agent {:?}: {} request{} to {hosts} host{}; in its [[agents]] table (or [agent]), in place of \
                     allow_hosts and deny_hosts\n{}",
                    agent.agent,
                    agent.requests,
                    plural(agent.requests),
                    plural(hosts as u64),
                    agent.render()
                )
            })
            .collect();
        if blocks.is_empty() { "# no agent sent a request in these logs\n".to_owned() } else { blocks.join("\n") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(agent: &str, outcome: &str, url: &str, code: Option<&str>) -> String {
        let reasons = code.map_or_else(String::new, |code| {
            format!(r#","agentgate.reasons":[{{"source":"operator","code":"{code}","rule":"r","blocking":true}}]"#)
        });
        format!(
            r#"{{"event.id":"{}","agentgate.agent":"{agent}","event.outcome":"{outcome}","url.full":"{url}","http.response.status_code":200{reasons}}}"#,
            rand_id()
        )
    }

    fn rand_id() -> String {
        format!("{:032x}", rand::random::<u128>())
    }

    #[test]
    fn hosts_are_counted_per_agent_with_ports_where_not_80_or_443() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let lines = [
            record("sbx", "would_deny", "http://docs.test/a", Some("operator.not_allowlisted")),
            record("sbx", "allow", "https://docs.test:443/b", None),
            record("sbx", "allow", "http://api.test:8443/v1", None),
            record("sbx", "allow", "http://api.test:9000/v1", None),
            record("sbx", "allow", "http://[::1]:8080/", None),
            record("sbx", "deny", "http://meta.test/latest", Some("network.private_address")),
            record("sbx", "deny", "https://bank.test:443/", Some("operator.denied_host")),
            record("sbx", "deny", "http://x.test/", Some("auth.required")),
            record("sbx", "allow", "http://agentgate.local/", Some("operator.served_locally")),
            record("other", "allow", "https://elsewhere.test/", None),
            "not a record".to_owned(),
        ];
        std::fs::write(&path, lines.join("\n")).expect("writes");
        let found = suggest(&[&path], None).expect("reads");
        assert_eq!(found.malformed_lines, 1);
        assert_eq!(found.agents.len(), 2);
        let sbx = &found.agents[1];
        assert_eq!(sbx.agent, "sbx");
        assert_eq!(sbx.requests, 7);
        let hosts: Vec<(&str, u64)> = sbx.hosts.iter().map(|(h, n)| (h.as_str(), *n)).collect();
        assert_eq!(hosts, [("[::1]:8080", 1), ("api.test:8443", 1), ("api.test:9000", 1), ("docs.test", 2)]);
        assert_eq!(
            sbx.left_out,
            [
                ("bank.test:443".to_owned(), "operator.denied_host".to_owned(), 1),
                ("meta.test:80".to_owned(), "network.private_address".to_owned(), 1)
            ]
        );
        let ipv6 = AgentHosts { hosts: vec![("::1".to_owned(), 1)], ..AgentHosts::default() };
        assert_eq!(ipv6.render(), "allow_hosts = [\n    \"::1\",  # 1 request\n]\n");
        let only = suggest(&[&path], Some("other")).expect("reads");
        assert_eq!(only.render(true), "allow_hosts = [\n    \"elsewhere.test\",  # 1 request\n]\n");
        let text = found.render(false);
        assert!(text.starts_with("# agent \"other\": 1 request to 1 host;"), "{text}");
        assert!(text.contains("\"api.test:8443\",  # 1 request\n"), "{text}");
        assert!(text.contains("#   meta.test:80: network.private_address, 1 request\n"), "{text}");
        let port: Vec<&str> = text.lines().filter(|l| l.contains("[::1]")).collect();
        assert_eq!(port, ["    \"[::1]:8080\",     # 1 request"], "{text}");
    }

    #[test]
    fn the_mcp_tools_an_agent_called_are_suggested_per_host_but_never_one_refused() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let call = |outcome: &str, tool: &str, code: Option<&str>| {
            let line = record("sbx", outcome, "https://mcp.test/mcp", code);
            line.replacen('{', &format!(r#"{{"agentgate.mcp.method":"tools/call","agentgate.mcp.tool":"{tool}","#), 1)
        };
        let lines = [
            call("allow", "search", None),
            call("allow", "search", None),
            call("would_deny", "create_issue", Some("mcp.tool_refused")),
            call("deny", "delete_repo", Some("mcp.tool_refused")),
            call("allow", "a,b", None),
            record("sbx", "allow", "https://mcp.test/mcp", None),
        ];
        std::fs::write(&path, lines.join("\n")).expect("writes");
        let found = suggest(&[&path], Some("sbx")).expect("reads");
        let tools = &found.agents[0].tools;
        assert_eq!(tools.len(), 1, "{found:?}");
        let called: Vec<(&str, u64)> = tools[0].1.iter().map(|(t, n)| (t.as_str(), *n)).collect();
        assert_eq!(called, [("a", 1), ("b", 1), ("create_issue", 1), ("search", 2)]);
        let text = found.render(true);
        assert!(text.contains("[[mcp]]\nhosts = [\"mcp.test\"]\nagents = [\"sbx\"]\nallow_tools = [\n"), "{text}");
        assert!(text.contains("    \"search\",        # 2 calls\n"), "{text}");
        assert!(!text.contains("delete_repo"), "{text}");
    }

    #[test]
    fn a_host_reached_once_is_suggested_but_never_a_port_the_guard_refused_nor_an_unresolved_host() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("decisions.jsonl");
        let mut lines = vec![
            // Refused by the guard at first (its name pointed inside), then reached 7 times.
            record("sbx", "deny", "http://site.test:8081/", Some("network.private_address")),
            record("sbx", "deny", "http://site.test:8081/", Some("network.private_address")),
            // agentgate's own admin address, and a local origin on the same host.
            record("sbx", "deny", "http://127.0.0.1:9090/approvals", Some("network.own_address")),
            record("sbx", "allow", "http://127.0.0.1:80/page", None),
            // Never resolved.
            record("sbx", "error", "http://nowhere.test/", None),
            // Reached once, then put on deny_hosts.
            record("sbx", "allow", "https://bank.test/", None),
            record("sbx", "deny", "https://bank.test/", Some("operator.denied_host")),
        ];
        lines.extend((0..7).map(|_| record("sbx", "allow", "http://site.test:8081/x", None)));
        std::fs::write(&path, lines.join("\n")).expect("writes");
        let found = suggest(&[&path], Some("sbx")).expect("reads");
        let hosts: Vec<(&str, u64)> = found.agents[0].hosts.iter().map(|(h, n)| (h.as_str(), *n)).collect();
        assert_eq!(hosts, [("127.0.0.1:80", 1), ("site.test:8081", 7)], "{found:?}");
        let text = found.render(true);
        assert!(text.contains("#   127.0.0.1:9090: network.own_address, 1 request\n"), "{text}");
        assert!(text.contains("#   bank.test:443: operator.denied_host, 1 request\n"), "{text}");
        assert!(!text.contains("nowhere.test") && !text.contains("\"bank.test"), "{text}");
    }
}
