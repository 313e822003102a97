//! The operator's own rules from the agentgate config: `bypass_hosts` (skip site policies,
//! e.g. for the agent's model API) and `[[rules]]` (allow or deny by host, path and method),
//! applied before any site policy file. Pure, like the rest of `policy/`: compiled once per
//! config, evaluated per request.
//!
//! Hosts are compared in canonical form: the gate hands over canonical patterns and the
//! request's canonical host (`crate::net::host`), so every spelling of an address matches.
//! A rule whose host is an address or a CIDR (`host = "10.0.0.0/8"`) is matched against the
//! addresses the network guard vetted for the request, which the gate passes in: a deny
//! matches when any of them is inside, an allow only when all of them are.
//!
//! Never: reads the config file (the gate hands the values over), resolves names, fetches, logs.

use std::net::IpAddr;

use ipnet::IpNet;

use super::path::{Reading, decide_all_spellings, decide_both_readings};
use super::pattern::Pattern;
use super::{Decision, Outcome, Reason, RequestView, Source};

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
}

impl Mode {
    /// The value written to `agentgate.mode`.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Monitor => "monitor",
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

impl OperatorRule {
    /// Compiles a rule; `number` is its 1-based position among `[[rules]]`; `host` is the
    /// canonical pattern, an IP address or a CIDR.
    pub fn new(number: usize, host: &str, path: &str, methods: &[String], action: RuleAction, reason: &str) -> Self {
        let verb = match action {
            RuleAction::Allow => "allow",
            RuleAction::Deny => "deny",
        };
        let methods_text = if methods.is_empty() { String::new() } else { format!(" methods={}", methods.join(",")) };
        let why = if reason.is_empty() { String::new() } else { format!(": {reason}") };
        OperatorRule {
            host: match (host.parse::<IpNet>(), host.parse::<IpAddr>()) {
                (Ok(net), _) => HostRule::Network(net),
                (_, Ok(ip)) => HostRule::Network(IpNet::from(ip)),
                _ => HostRule::Pattern(host.to_owned()),
            },
            path: Pattern::new(path),
            methods: methods.to_vec(),
            action,
            described: format!("[[rules]] #{number} host={host} path={path}{methods_text} {verb}{why}"),
        }
    }

    fn matches(&self, req: &RequestView<'_>, addresses: &[IpAddr], path: &str, reading: Reading) -> bool {
        self.matches_host(req.host, addresses)
            && (self.methods.is_empty() || self.methods.iter().any(|m| m.eq_ignore_ascii_case(req.method)))
            && self.path.matches_in(reading, path)
    }

    fn matches_host(&self, host: &str, addresses: &[IpAddr]) -> bool {
        match &self.host {
            HostRule::Pattern(pattern) => host_matches(pattern, host),
            HostRule::Network(net) => {
                let literal = host.parse::<IpAddr>().ok();
                let inside = |ip: &IpAddr| net.contains(ip);
                match self.action {
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
    /// request to the site policies. The first matching rule wins; a bypass host is checked
    /// after the rules, so a deny rule still applies to a bypassed host.
    ///
    /// A deny on an equivalent spelling of the path (`/%61dmin` for `/admin`, see
    /// [`super::path`]) denies too, and so does a deny whose path matches decoded (`/%7Eops`
    /// stops `/~ops`); an allow's decoded path never opens more than as written. `addresses`
    /// are the vetted addresses of the request's host, for rules naming an address or a
    /// CIDR (empty when none are known, as in `explain`).
    pub fn evaluate(&self, req: &RequestView<'_>, addresses: &[IpAddr]) -> Option<Decision> {
        decide_all_spellings(req, |req| {
            let path = super::pattern::normalize(req.path_and_query);
            decide_both_readings(self.has_decoded, |reading| {
                self.evaluate_as_sent(req, addresses, &reading.path(&path), reading)
            })
        })
    }

    fn evaluate_as_sent(
        &self,
        req: &RequestView<'_>,
        addresses: &[IpAddr],
        path: &str,
        reading: Reading,
    ) -> Option<Decision> {
        if let Some(rule) = self.rules.iter().find(|r| r.matches(req, addresses, path, reading)) {
            let (outcome, code) = match rule.action {
                RuleAction::Allow => (Outcome::Allow, "operator.allow"),
                RuleAction::Deny => (Outcome::Deny, "operator.deny"),
            };
            return Some(Decision::single(outcome, Reason::new(Source::Operator, code, rule.described.clone())));
        }
        if self.is_bypassed(req.host) {
            let reason = Reason::new(
                Source::Operator,
                "operator.bypass",
                format!("bypass_hosts: {} skips site policies", req.host),
            );
            return Some(Decision::single(Outcome::Allow, reason));
        }
        None
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
    use crate::policy::Headers;

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
    fn issue_8_address_and_cidr_rules_match_the_vetted_addresses() {
        let h = Headers::default();
        let rules = OperatorRules::new(
            Vec::new(),
            vec![
                OperatorRule::new(1, "127.0.0.1", "/", &[], RuleAction::Deny, ""),
                OperatorRule::new(2, "10.0.0.0/8", "/", &[], RuleAction::Deny, ""),
                OperatorRule::new(3, "192.0.2.0/24", "/", &[], RuleAction::Allow, ""),
            ],
        );
        let code = |host: &str, addresses: &[IpAddr]| {
            rules.evaluate(&view("GET", host, "/", &h), addresses).map(|d| d.reasons[0].code.to_string())
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
                OperatorRule::new(1, "*.internal", "/", &[], RuleAction::Deny, "no internal services"),
                OperatorRule::new(2, "docs.example", "/public/", &[], RuleAction::Allow, ""),
                OperatorRule::new(3, "*", "/", &["DELETE".into()], RuleAction::Deny, ""),
                OperatorRule::new(4, "api.model.example", "/admin", &[], RuleAction::Deny, ""),
            ],
        );
        let d = rules.evaluate(&view("GET", "db.internal", "/x", &h), &[]).expect("rule 1");
        assert_eq!(d.outcome, Outcome::Deny);
        assert_eq!(d.reasons[0].code, "operator.deny");
        assert_eq!(&*d.reasons[0].rule, "[[rules]] #1 host=*.internal path=/ deny: no internal services");
        let d = rules.evaluate(&view("POST", "docs.example", "/public/a", &h), &[]).expect("rule 2");
        assert_eq!((d.outcome, d.reasons[0].code.as_ref()), (Outcome::Allow, "operator.allow"));
        assert!(rules.evaluate(&view("GET", "docs.example", "/private", &h), &[]).is_none());
        let d = rules.evaluate(&view("delete", "site.example", "/x", &h), &[]).expect("rule 3");
        assert_eq!(d.outcome, Outcome::Deny);
        let d = rules.evaluate(&view("GET", "api.model.example", "/v1/chat", &h), &[]).expect("bypass");
        assert_eq!((d.outcome, d.reasons[0].code.as_ref()), (Outcome::Allow, "operator.bypass"));
        let d = rules.evaluate(&view("GET", "api.model.example", "/admin/keys", &h), &[]).expect("deny beats bypass");
        assert_eq!(d.outcome, Outcome::Deny);
    }

    #[test]
    fn semantics_r9_rule_paths_match_as_written_and_decoded() {
        let h = Headers::default();
        let rules = OperatorRules::new(
            Vec::new(),
            vec![
                OperatorRule::new(1, "*", "/%7Eops", &[], RuleAction::Deny, ""),
                OperatorRule::new(2, "*", "/%7Epub", &[], RuleAction::Allow, ""),
            ],
        );
        let code = |path: &str| {
            rules.evaluate(&view("GET", "site.example", path, &h), &[]).map(|d| d.reasons[0].code.to_string())
        };
        // Issue 25: a deny written with an escape stops the plain spelling, and the others.
        for path in ["/~ops/x", "/%7eops/x", "//~ops", "/%2F%7Eops"] {
            assert_eq!(code(path).as_deref(), Some("operator.deny"), "{path}");
        }
        // An allow's decoded path opens nothing the written one does not: `/~pub` is left to
        // the site policies, while the escaped spelling the rule names is allowed as sent.
        assert_eq!(code("/~pub/x"), None);
        assert_eq!(code("/%7Epub/x").as_deref(), Some("operator.allow"));
    }
}
