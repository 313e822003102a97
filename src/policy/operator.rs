//! The operator's own rules from the agentgate config: each agent's egress lists
//! (`allow_hosts`, `deny_hosts`: which hosts it may reach at all), `bypass_hosts` (skip site
//! policies, e.g. for the agent's model API) and `[[rules]]` (allow or deny by host, path and
//! method, for every agent or the agents a rule names), applied before any site policy file.
//! Pure, like the rest of `policy/`: compiled once per config, evaluated per request.
//!
//! Hosts are compared in canonical form: the gate hands over canonical patterns and the
//! request's canonical host (`crate::net::host`), so every spelling of an address matches.
//! A rule whose host is an address or a CIDR (`host = "10.0.0.0/8"`) is matched against the
//! addresses the network guard vetted for the request, which the gate passes in: a deny
//! matches when any of them is inside, an allow only when all of them are. An egress list is
//! decided before anything is resolved: its allowlist admits an address or CIDR entry only for
//! a host written as an address (a name is never resolved to be checked against it), its
//! denylist also catches the vetted addresses once there are some.
//!
//! Never: reads the config file (the gate hands the values over), resolves names, fetches, logs.

use std::net::IpAddr;

use ipnet::IpNet;

use super::path::{Reading, decide_all_spellings, decide_both_readings};
use super::pattern::{Pattern, normalized_path};
use super::{Decision, OperatorCode, Outcome, Reason, RequestView};

/// Whether the gate blocks (`enforce`) or only reports (`monitor`), DESIGN §8: the operator's
/// choice (`mode`, per agent `[[agents]] mode`), applied by the gate and written to the log.
/// It lives here, at the bottom of the crate, so config, agents, the gate and the audit record
/// share it without pointing up. Deserializes from the lower-case names, like [`RuleAction`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Block what policies forbid.
    #[default]
    Enforce,
    /// Forward everything; log `would_deny` for what enforce mode would block.
    Monitor,
    /// Answer every request from a recording (`[record] dir`, `crate::record`), deciding
    /// as `enforce` does: what enforce mode would block is blocked.
    Replay,
}

impl Mode {
    /// The value written to `agentgate.mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Monitor => "monitor",
            Mode::Replay => "replay",
        }
    }
}

/// What an operator rule does when it matches (`action = "allow" | "deny"` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleAction {
    /// Forward without consulting the site's policy files.
    Allow,
    /// Block.
    Deny,
}

/// One `[[rules]]` entry, compiled.
#[derive(Debug, Clone)]
pub struct OperatorRule {
    host: HostRule,
    path: Pattern,
    methods: Vec<String>,
    /// The agent ids it applies to; empty for every agent.
    agents: Vec<String>,
    action: RuleAction,
    /// How the rule reads in reasons: `[[rules]] #2 host=*.internal path=/ deny: <reason>`.
    described: String,
}

/// What a rule's `host` names.
#[derive(Debug, Clone)]
enum HostRule {
    /// A host pattern (`example.com`, `*.example.com`, `*`), canonical.
    Pattern(String),
    /// An address or a CIDR, matched against the request's addresses.
    Network(IpNet),
}

impl HostRule {
    /// `host` as the config wrote it once canonical: an address or CIDR, else a pattern.
    fn new(host: &str) -> HostRule {
        match (host.parse::<IpNet>(), host.parse::<IpAddr>()) {
            (Ok(net), _) => HostRule::Network(net),
            (_, Ok(ip)) => HostRule::Network(IpNet::from(ip)),
            _ => HostRule::Pattern(host.to_owned()),
        }
    }

    /// Whether the request's canonical `host`, reaching `addresses`, is named: a pattern by
    /// the host, a network by the host when it is an address, else by the addresses.
    fn matches(&self, host: &str, addresses: &[IpAddr], action: RuleAction) -> bool {
        match self {
            HostRule::Pattern(pattern) => host_matches(pattern, host),
            HostRule::Network(net) => {
                let literal = host.parse::<IpAddr>().ok();
                let inside = |ip: &IpAddr| net.contains(ip);
                match action {
                    // A deny must catch the request whichever address it would reach.
                    RuleAction::Deny => literal.iter().chain(addresses).any(inside),
                    // An allow must not open a name that also resolves outside the network.
                    RuleAction::Allow => match literal {
                        Some(ip) => inside(&ip),
                        None => !addresses.is_empty() && addresses.iter().all(inside),
                    },
                }
            }
        }
    }
}

impl OperatorRule {
    /// Compiles a rule; `number` is its 1-based position among `[[rules]]`; `host` is the
    /// canonical pattern, an IP address or a CIDR; `agents` the ids it is scoped to (empty:
    /// every agent).
    pub fn new(
        number: usize,
        host: &str,
        path: &str,
        methods: &[String],
        agents: &[String],
        action: RuleAction,
        reason: &str,
    ) -> Self {
        let verb = match action {
            RuleAction::Allow => "allow",
            RuleAction::Deny => "deny",
        };
        let methods_text = if methods.is_empty() { String::new() } else { format!(" methods={}", methods.join(",")) };
        let agents_text = if agents.is_empty() { String::new() } else { format!(" agents={}", agents.join(",")) };
        let why = if reason.is_empty() { String::new() } else { format!(": {reason}") };
        OperatorRule {
            host: HostRule::new(host),
            path: Pattern::new(path),
            methods: methods.to_vec(),
            agents: agents.to_vec(),
            action,
            described: format!("[[rules]] #{number}{agents_text} host={host} path={path}{methods_text} {verb}{why}"),
        }
    }

    fn matches(&self, req: &RequestView<'_>, agent: &str, addresses: &[IpAddr], path: &str, reading: Reading) -> bool {
        (self.agents.is_empty() || self.agents.iter().any(|a| a == agent))
            && self.host.matches(req.host, addresses, self.action)
            && (self.methods.is_empty() || self.methods.iter().any(|m| m.eq_ignore_ascii_case(req.method)))
            && self.path.matches_in(reading, path)
    }
}

/// All operator rules of one config.
#[derive(Debug, Clone, Default)]
pub struct OperatorRules {
    bypass_hosts: Vec<String>,
    rules: Vec<OperatorRule>,
    /// True when a rule's path reads differently decoded (SEMANTICS R9).
    has_decoded: bool,
}

impl OperatorRules {
    /// The rules of one config, in file order.
    pub fn new(bypass_hosts: Vec<String>, rules: Vec<OperatorRule>) -> Self {
        let has_decoded = rules.iter().any(|rule| rule.path.has_decoded());
        OperatorRules { bypass_hosts, rules, has_decoded }
    }

    /// Whether requests to `host` skip site policies (they are still logged).
    pub fn is_bypassed(&self, host: &str) -> bool {
        self.bypass_hosts.iter().any(|p| host_matches(p, host))
    }

    /// The operator's decision, when a bypass host or a rule decides; `None` leaves the
    /// request to the site policies. The first rule that matches and applies to `agent` (the
    /// agent id: unscoped rules apply to every agent) wins; a bypass host is checked after the
    /// rules, so a deny rule still applies to a bypassed host.
    ///
    /// A deny on an equivalent spelling of the path (`/%61dmin` for `/admin`, see
    /// [`super::path`]) denies too, and so does a deny whose path matches decoded (`/%7Eops`
    /// stops `/~ops`); an allow's decoded path never opens more than as written. `addresses`
    /// are the vetted addresses of the request's host, for rules naming an address or a
    /// CIDR (empty when none are known, as in `explain`).
    pub fn evaluate(&self, req: &RequestView<'_>, agent: &str, addresses: &[IpAddr]) -> Option<Decision> {
        decide_all_spellings(req, |req| {
            // Borrowed when the path is already normal, as most are: no copy per request.
            let path = normalized_path(req.path_and_query);
            decide_both_readings(self.has_decoded, |reading| {
                self.evaluate_as_sent(req, agent, addresses, &reading.path(&path), reading)
            })
        })
    }

    fn evaluate_as_sent(
        &self,
        req: &RequestView<'_>,
        agent: &str,
        addresses: &[IpAddr],
        path: &str,
        reading: Reading,
    ) -> Option<Decision> {
        if let Some(rule) = self.rules.iter().find(|r| r.matches(req, agent, addresses, path, reading)) {
            let (outcome, code) = match rule.action {
                RuleAction::Allow => (Outcome::Allow, OperatorCode::Allow),
                RuleAction::Deny => (Outcome::Deny, OperatorCode::Deny),
            };
            return Some(Decision::single(outcome, Reason::new(code, rule.described.clone())));
        }
        if self.is_bypassed(req.host) {
            let reason = Reason::new(OperatorCode::Bypass, format!("bypass_hosts: {} skips site policies", req.host));
            return Some(Decision::single(Outcome::Allow, reason));
        }
        None
    }
}

/// How many entries of a list a reason quotes; the rest are counted.
const QUOTED_ENTRIES: usize = 8;

/// Splits an egress list entry into its host and its port: `docs.example`,
/// `api.example:8443`, `*.example.com:443`, `[::1]:8443`, `::1`, `10.0.0.0/8` (a CIDR takes no
/// port). `None` when the port is not a number from 1 to 65535 or a bracket is unclosed.
pub fn split_host_port(entry: &str) -> Option<(&str, Option<u16>)> {
    let port = |text: &str| text.parse::<u16>().ok().filter(|p| *p > 0);
    if let Some(bracketed) = entry.strip_prefix('[') {
        let (host, rest) = bracketed.split_once(']')?;
        return match rest {
            "" => Some((host, None)),
            _ => Some((host, Some(port(rest.strip_prefix(':')?)?))),
        };
    }
    if entry.contains('/') || entry.parse::<IpAddr>().is_ok() {
        return Some((entry, None));
    }
    match entry.rsplit_once(':') {
        Some((host, text)) => Some((host, Some(port(text)?))),
        None => Some((entry, None)),
    }
}

/// One entry of an egress list: a host (pattern, address or CIDR) and, when it names one,
/// the only port it admits.
#[derive(Debug, Clone)]
struct HostEntry {
    host: HostRule,
    port: Option<u16>,
    /// As the config wrote it, for reasons.
    written: String,
}

/// One of an agent's egress lists (`allow_hosts` or `deny_hosts`), compiled.
#[derive(Debug, Clone)]
pub struct HostList {
    entries: Vec<HostEntry>,
    /// How the list reads in reasons: `agentgate.toml:12: [[agents]] id = "sbx" allow_hosts`.
    described: String,
    /// Its line in the config file, when known.
    line: Option<u32>,
}

impl HostList {
    /// A list of `entries`, each `(written, canonical host, port)`: the canonical host is a
    /// pattern (`*` too), an address or a CIDR, as [`split_host_port`] and the canonical form
    /// of the host make it. `described` names the agent and the key, with the file and line
    /// when known.
    pub fn new(described: String, line: Option<u32>, entries: Vec<(String, String, Option<u16>)>) -> Self {
        let entries = entries
            .into_iter()
            .map(|(written, host, port)| HostEntry { host: HostRule::new(&host), port, written })
            .collect();
        HostList { entries, described, line }
    }

    /// The first entry naming `host` on `port` (an entry without a port admits every port).
    fn find(&self, host: &str, port: u16, addresses: &[IpAddr], action: RuleAction) -> Option<&HostEntry> {
        self.entries.iter().find(|e| e.port.is_none_or(|p| p == port) && e.host.matches(host, addresses, action))
    }

    /// `["a", "b", … 3 more]`: the list as a reason quotes it.
    fn quoted(&self) -> String {
        let shown: Vec<String> = self.entries.iter().take(QUOTED_ENTRIES).map(|e| format!("{:?}", e.written)).collect();
        let more = self.entries.len().saturating_sub(QUOTED_ENTRIES);
        let more = if more > 0 { format!(", … {more} more") } else { String::new() };
        format!("[{}{more}]", shown.join(", "))
    }

    fn reason(&self, code: OperatorCode, rule: String) -> Reason {
        let reason = Reason::new(code, rule);
        match self.line {
            Some(line) => reason.at_line(line),
            None => reason,
        }
    }
}

/// What an agent's egress lists say about a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Egress {
    /// On the allowlist (or there is none) and not on the denylist.
    Admitted,
    /// On the denylist, which wins over the allowlist: [`OperatorCode::DeniedHost`].
    Denied(Reason),
    /// Not on the allowlist: [`OperatorCode::NotAllowlisted`].
    Unlisted(Reason),
}

/// An agent's egress lists: `allow_hosts` (when set, only those hosts) and `deny_hosts`
/// (never those). Empty by default: every host, as before lists existed.
#[derive(Debug, Clone, Default)]
pub struct EgressLists {
    allow: Option<HostList>,
    deny: Option<HostList>,
}

impl EgressLists {
    /// The lists of one agent.
    pub fn new(allow: Option<HostList>, deny: Option<HostList>) -> Self {
        EgressLists { allow, deny }
    }

    /// Whether the agent has an allowlist (so a host can be unlisted).
    pub fn has_allowlist(&self) -> bool {
        self.allow.is_some()
    }

    /// The lists' verdict on the canonical `host` and `port` the request is routed to.
    /// `addresses` are the vetted addresses once the host was resolved (empty before): only
    /// the denylist reads them (a CIDR entry catches a name that resolves inside it); the
    /// allowlist admits a host by its name or, for an address, by the address itself.
    pub fn decide(&self, host: &str, port: u16, addresses: &[IpAddr]) -> Egress {
        if let Some(deny) = &self.deny
            && let Some(entry) = deny.find(host, port, addresses, RuleAction::Deny)
        {
            let rule = format!(
                "{} entry {:?} matches {host}:{port}: this agent may not reach it",
                deny.described, entry.written
            );
            return Egress::Denied(deny.reason(OperatorCode::DeniedHost, rule));
        }
        match &self.allow {
            Some(allow) if allow.find(host, port, &[], RuleAction::Allow).is_none() => {
                let rule = format!("{} = {} does not list {host}:{port}", allow.described, allow.quoted());
                Egress::Unlisted(allow.reason(OperatorCode::NotAllowlisted, rule))
            }
            _ => Egress::Admitted,
        }
    }
}

/// Whether `host` matches `pattern`, case-insensitively, ignoring a trailing dot and IPv6
/// brackets: `example.com` matches that host only, `*.example.com` matches `a.example.com`
/// and `a.b.example.com` but not `example.com` itself, and `*` matches every host.
pub fn host_matches(pattern: &str, host: &str) -> bool {
    let host = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    let host = host.strip_suffix('.').unwrap_or(host);
    match pattern.strip_prefix('*') {
        Some("") => true,
        // `suffix` keeps its leading dot, so `*.example.com` never matches `badexample.com`.
        Some(suffix) => {
            host.len() > suffix.len()
                && host.as_bytes()[host.len() - suffix.len()..].eq_ignore_ascii_case(suffix.as_bytes())
        }
        None => host.eq_ignore_ascii_case(pattern.strip_suffix('.').unwrap_or(pattern)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Headers, Source};

    fn view<'a>(method: &'a str, host: &'a str, path: &'a str, headers: &'a Headers) -> RequestView<'a> {
        RequestView {
            method,
            scheme: "https",
            host,
            port: 443,
            path_and_query: path,
            product_token: None,
            user_agent: None,
            agent_id: "a",
            trust_level: 0,
            purposes: &[],
            headers,
        }
    }

    #[test]
    fn host_patterns() {
        assert!(host_matches("example.com", "EXAMPLE.com."));
        assert!(!host_matches("example.com", "a.example.com"));
        assert!(host_matches("*.example.com", "a.b.example.com"));
        assert!(!host_matches("*.example.com", "example.com"));
        assert!(!host_matches("*.example.com", "badexample.com"));
        assert!(host_matches("*", "anything"));
        assert!(host_matches("::1", "[::1]"));
    }

    #[test]
    fn address_and_cidr_rules_match_the_vetted_addresses() {
        let h = Headers::default();
        let rules = OperatorRules::new(
            Vec::new(),
            vec![
                OperatorRule::new(1, "127.0.0.1", "/", &[], &[], RuleAction::Deny, ""),
                OperatorRule::new(2, "10.0.0.0/8", "/", &[], &[], RuleAction::Deny, ""),
                OperatorRule::new(3, "192.0.2.0/24", "/", &[], &[], RuleAction::Allow, ""),
            ],
        );
        let code = |host: &str, addresses: &[IpAddr]| {
            rules.evaluate(&view("GET", host, "/", &h), "a", addresses).map(|d| d.reasons[0].code.to_string())
        };
        assert_eq!(code("127.0.0.1", &[]).as_deref(), Some("operator.deny"));
        assert_eq!(code("intranet.test", &[[127, 0, 0, 1].into()]).as_deref(), Some("operator.deny"));
        assert_eq!(code("db.test", &[[203, 0, 113, 1].into(), [10, 1, 2, 3].into()]).as_deref(), Some("operator.deny"));
        assert_eq!(code("db.test", &[[203, 0, 113, 1].into()]), None);
        assert_eq!(code("app.test", &[[192, 0, 2, 5].into()]).as_deref(), Some("operator.allow"));
        assert_eq!(code("app.test", &[[192, 0, 2, 5].into(), [203, 0, 113, 1].into()]), None, "allow needs all");
        assert_eq!(code("app.test", &[]), None);
    }

    #[test]
    fn first_matching_rule_decides_with_its_reason() {
        let h = Headers::default();
        let rules = OperatorRules::new(
            vec!["api.model.example".into()],
            vec![
                OperatorRule::new(1, "*.internal", "/", &[], &[], RuleAction::Deny, "no internal services"),
                OperatorRule::new(2, "docs.example", "/public/", &[], &[], RuleAction::Allow, ""),
                OperatorRule::new(3, "*", "/", &["DELETE".into()], &[], RuleAction::Deny, ""),
                OperatorRule::new(4, "api.model.example", "/admin", &[], &[], RuleAction::Deny, ""),
            ],
        );
        let d = rules.evaluate(&view("GET", "db.internal", "/x", &h), "a", &[]).expect("rule 1");
        assert_eq!(d.outcome, Outcome::Deny);
        assert_eq!(d.reasons[0].code, "operator.deny");
        assert_eq!(&*d.reasons[0].rule, "[[rules]] #1 host=*.internal path=/ deny: no internal services");
        let d = rules.evaluate(&view("POST", "docs.example", "/public/a", &h), "a", &[]).expect("rule 2");
        assert_eq!((d.outcome, d.reasons[0].code.as_str()), (Outcome::Allow, "operator.allow"));
        assert!(rules.evaluate(&view("GET", "docs.example", "/private", &h), "a", &[]).is_none());
        let d = rules.evaluate(&view("delete", "site.example", "/x", &h), "a", &[]).expect("rule 3");
        assert_eq!(d.outcome, Outcome::Deny);
        let d = rules.evaluate(&view("GET", "api.model.example", "/v1/chat", &h), "a", &[]).expect("bypass");
        assert_eq!((d.outcome, d.reasons[0].code.as_str()), (Outcome::Allow, "operator.bypass"));
        let d =
            rules.evaluate(&view("GET", "api.model.example", "/admin/keys", &h), "a", &[]).expect("deny beats bypass");
        assert_eq!(d.outcome, Outcome::Deny);
    }

    #[test]
    fn host_entries_split_into_host_and_port() {
        assert_eq!(split_host_port("docs.example"), Some(("docs.example", None)));
        assert_eq!(split_host_port("api.example:8443"), Some(("api.example", Some(8443))));
        assert_eq!(split_host_port("*.example.com:443"), Some(("*.example.com", Some(443))));
        assert_eq!(split_host_port("[::1]:8443"), Some(("::1", Some(8443))));
        assert_eq!(split_host_port("[::1]"), Some(("::1", None)));
        assert_eq!(split_host_port("::1"), Some(("::1", None)));
        assert_eq!(split_host_port("10.0.0.0/8"), Some(("10.0.0.0/8", None)));
        assert_eq!(split_host_port("*:443"), Some(("*", Some(443))));
        for bad in ["a:0", "a:99999", "a:x", "[::1", "[::1]x", "[::1]:"] {
            assert_eq!(split_host_port(bad), None, "{bad}");
        }
    }

    fn list(entries: &[&str]) -> HostList {
        let entries = entries
            .iter()
            .map(|e| {
                let (host, port) = split_host_port(e).expect("a valid test entry");
                ((*e).to_owned(), host.to_owned(), port)
            })
            .collect();
        HostList::new("agentgate.toml:7: [[agents]] #1 id = \"sbx\" allow_hosts".to_owned(), Some(7), entries)
    }

    fn code(egress: Egress) -> Option<String> {
        match egress {
            Egress::Admitted => None,
            Egress::Denied(reason) | Egress::Unlisted(reason) => Some(reason.code.to_string()),
        }
    }

    #[test]
    fn an_allowlist_admits_its_hosts_and_ports_only() {
        let lists = EgressLists::new(
            Some(list(&["docs.example", "*.example.com", "api.example:8443", "192.0.2.0/24", "::1"])),
            None,
        );
        for (host, port) in
            [("docs.example", 80), ("docs.example", 9000), ("a.b.example.com", 443), ("api.example", 8443)]
        {
            assert_eq!(lists.decide(host, port, &[]), Egress::Admitted, "{host}:{port}");
        }
        assert_eq!(lists.decide("192.0.2.7", 80, &[]), Egress::Admitted, "an address inside a listed CIDR");
        assert_eq!(lists.decide("::1", 80, &[]), Egress::Admitted);
        for (host, port) in [("example.com", 443), ("api.example", 443), ("other.example", 80), ("192.0.3.1", 80)] {
            assert_eq!(
                code(lists.decide(host, port, &[])).as_deref(),
                Some(OperatorCode::NotAllowlisted.as_str()),
                "{host}:{port}"
            );
        }
        // A name is never resolved to meet an address entry: its vetted addresses are not read.
        assert_eq!(
            code(lists.decide("web.test", 80, &[[192, 0, 2, 7].into()])).as_deref(),
            Some(OperatorCode::NotAllowlisted.as_str())
        );
        let Egress::Unlisted(reason) = lists.decide("other.example", 80, &[]) else { panic!("unlisted") };
        assert_eq!(reason.line, Some(7));
        assert_eq!(reason.source, Source::Operator);
        assert_eq!(
            &*reason.rule,
            "agentgate.toml:7: [[agents]] #1 id = \"sbx\" allow_hosts = [\"docs.example\", \"*.example.com\", \"api.example:8443\", \"192.0.2.0/24\", \"::1\"] does not list other.example:80"
        );
    }

    #[test]
    fn the_denylist_wins_and_catches_vetted_addresses() {
        let deny = HostList::new(
            "[agent] deny_hosts".to_owned(),
            None,
            vec![
                ("secret.example.com".into(), "secret.example.com".into(), None),
                ("10.0.0.0/8".into(), "10.0.0.0/8".into(), None),
            ],
        );
        let lists = EgressLists::new(Some(list(&["*.example.com"])), Some(deny));
        assert_eq!(
            code(lists.decide("secret.example.com", 443, &[])).as_deref(),
            Some(OperatorCode::DeniedHost.as_str())
        );
        assert_eq!(lists.decide("www.example.com", 443, &[]), Egress::Admitted);
        assert_eq!(
            code(lists.decide("www.example.com", 443, &[[10, 1, 2, 3].into()])).as_deref(),
            Some(OperatorCode::DeniedHost.as_str()),
            "a listed name that resolves into a denied network"
        );
        let only_deny = EgressLists::new(None, Some(list(&["*.example.com"])));
        assert!(!only_deny.has_allowlist());
        assert_eq!(only_deny.decide("anything.test", 80, &[]), Egress::Admitted, "no allowlist: every other host");
        let nothing = EgressLists::new(Some(list(&[])), None);
        assert_eq!(
            code(nothing.decide("a.test", 80, &[])).as_deref(),
            Some(OperatorCode::NotAllowlisted.as_str()),
            "[] admits none"
        );
    }

    #[test]
    fn a_long_list_is_quoted_in_part() {
        let names: Vec<String> = (0..12).map(|i| format!("h{i}.test")).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let Egress::Unlisted(reason) = EgressLists::new(Some(list(&refs)), None).decide("x.test", 80, &[]) else {
            panic!("unlisted")
        };
        assert!(reason.rule.contains("\"h7.test\", … 4 more]"), "{}", reason.rule);
    }

    #[test]
    fn a_scoped_rule_applies_to_its_agents_only() {
        let h = Headers::default();
        let rules = OperatorRules::new(
            Vec::new(),
            vec![OperatorRule::new(1, "*", "/", &[], &["a".into()], RuleAction::Deny, "not for a")],
        );
        let d = rules.evaluate(&view("GET", "site.test", "/", &h), "a", &[]).expect("applies to a");
        assert_eq!(&*d.reasons[0].rule, "[[rules]] #1 agents=a host=* path=/ deny: not for a");
        assert!(rules.evaluate(&view("GET", "site.test", "/", &h), "b", &[]).is_none(), "b is not named");
    }

    /// The code of the first reason `rules` (path and action, for every agent and host, in
    /// order) give a GET of a path, `None` when no rule matches.
    fn codes(rules: &[(&str, RuleAction)]) -> impl Fn(&str) -> Option<String> {
        let rules = OperatorRules::new(
            Vec::new(),
            rules
                .iter()
                .zip(1..)
                .map(|(&(path, action), n)| OperatorRule::new(n, "*", path, &[], &[], action, ""))
                .collect(),
        );
        move |path| {
            let h = Headers::default();
            rules.evaluate(&view("GET", "site.example", path, &h), "", &[]).map(|d| d.reasons[0].code.to_string())
        }
    }

    #[test]
    fn semantics_r9_rule_paths_match_as_written_and_decoded() {
        let code = codes(&[("/%7Eops", RuleAction::Deny), ("/%7Epub", RuleAction::Allow)]);
        // A deny written with an escape stops the plain spelling, and the others.
        for path in ["/~ops/x", "/%7eops/x", "//~ops", "/%2F%7Eops"] {
            assert_eq!(code(path).as_deref(), Some("operator.deny"), "{path}");
        }
        // An allow's decoded path opens nothing the written one does not: `/~pub` is left to
        // the site policies, while the escaped spelling the rule names is allowed as sent.
        assert_eq!(code("/~pub/x"), None);
        assert_eq!(code("/%7Epub/x").as_deref(), Some("operator.allow"));
    }

    #[test]
    fn a_path_is_compared_percent_normalised_whether_or_not_it_needed_normalising() {
        let code = codes(&[("/caf%C3%A9/", RuleAction::Deny), ("/open/", RuleAction::Allow)]);
        // Non-ASCII and lower-case escapes are normalised before the comparison, as before;
        // a path that is already normal is compared as sent.
        for path in ["/café/x", "/caf%c3%a9/x", "/caf%C3%A9/x"] {
            assert_eq!(code(path).as_deref(), Some("operator.deny"), "{path}");
        }
        assert_eq!(code("/open/x?q=1").as_deref(), Some("operator.allow"));
        assert_eq!(code("/cafe/x"), None);
    }
}
