//! Where a reason comes from ([`Source`]) and its stable dotted code ([`Code`]), as the
//! decision log, the `agentgate-decision` header, block answers, `explain` and `/metrics`
//! write them. Those strings are a stable interface: each is written once, here, beside its
//! variant, and everything else names the variant, so a misspelt code does not compile and a
//! match over codes (the advice a blocked agent reads) must cover every one.
//!
//! Owns: the list of every reason code, one enum per source, their names, and [`Advice`],
//! which each source's codes implement. Never: decides anything, or says what a code means
//! to an agent (each format's module does for its codes, [`super::advice`] for the
//! operator's).

use std::fmt;

/// Where a reason or a limit comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// `/robots.txt` (RFC 9309).
    Robots,
    /// `/agents.txt` (draft-srijal-agents-policy-00).
    AgentsTxt,
    /// `/AGENTS.md` or `/.well-known/agents.md` (AGENTS-MD-SPEC-001).
    AgentsMd,
    /// `/automation-preferences.txt` (draft-liao-aipref-autoctl-core).
    Autoctl,
    /// The operator's own rules in the agentgate config, and agentgate's own refusals.
    Operator,
    /// A site's usage preferences (SEMANTICS §6.6): robots.txt `Content-Usage` and
    /// `Content-Signal`, the `Content-Usage` and `tdm-reservation` headers, tdmrep.json.
    Usage,
    /// `/.well-known/tdmrep.json` as a policy file (SEMANTICS U5), in `explain` and
    /// `/policies`; its refusals are [`Source::Usage`]'s `usage.refused`.
    Tdmrep,
}

impl Source {
    /// The name used in reasons, the decision log and `explain` output.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Robots => "robots.txt",
            Source::AgentsTxt => "agents.txt",
            Source::AgentsMd => "AGENTS.md",
            Source::Autoctl => "automation-preferences.txt",
            Source::Operator => "operator",
            Source::Usage => "usage",
            Source::Tdmrep => "tdmrep.json",
        }
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One enum of codes: each variant with its string, its `as_str`, `ALL` (every variant, in
/// the order written) and its conversion into [`Code`].
macro_rules! codes {
    ($(#[$meta:meta])* $name:ident => $outer:ident { $($(#[$doc:meta])* $variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$doc])* #[doc = concat!("\n\n`", $text, "`")] $variant,)*
        }

        impl $name {
            /// Every code of this source, in the order written.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// The code as the log, the header and block answers write it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }
        }

        impl From<$name> for Code {
            fn from(code: $name) -> Code {
                Code::$outer(code)
            }
        }
    };
}

codes! {
    /// The codes of robots.txt reasons.
    RobotsCode => Robots {
        /// A matched `Allow` line allows the path.
        Allow = "robots.allow",
        /// A matched `Disallow` line forbids the path, for every method.
        Disallow = "robots.disallow",
        /// The `User-agent` line that selected the group, cited beside the rule.
        Group = "robots.group",
        /// robots.txt answered 4xx: no path is restricted (RFC 9309 §2.3.1.3).
        Unavailable = "robots.unavailable",
        /// robots.txt answered 5xx or could not be fetched: every path is disallowed.
        Unreachable = "robots.unreachable",
        /// A `Crawl-delay` counted as a limit (`[robots] honor_crawl_delay`).
        CrawlDelay = "robots.crawl_delay",
    }
}

codes! {
    /// The codes of agents.txt reasons.
    AgentsTxtCode => AgentsTxt {
        /// A matched `ALLOW` rule.
        Allow = "agents_txt.allow",
        /// A matched `DISALLOW` rule (B12).
        Disallow = "agents_txt.disallow",
        /// The rate limit of an `ALLOW` rule's `limit=N` (B16).
        Limit = "agents_txt.limit",
        /// An `ALLOW` rule's `limit=0`: denied (B16).
        LimitZero = "agents_txt.limit_zero",
        /// The file is over the size cap, so its hash cannot be verified: the origin is
        /// restricted (B23). The restricted-file codes below restrict it likewise (B19).
        TooLarge = "agents_txt.too_large",
        /// The file is not UTF-8.
        InvalidUtf8 = "agents_txt.invalid_utf8",
        /// A directive comes before any hash line.
        HashMissing = "agents_txt.hash_missing",
        /// The hash line is not `*` and 64 hex digits.
        HashLineSyntax = "agents_txt.hash_line_syntax",
        /// The hash line does not match the directives (B3).
        HashMismatch = "agents_txt.hash_mismatch",
        /// A directive line does not parse.
        DirectiveSyntax = "agents_txt.directive_syntax",
    }
}

codes! {
    /// The codes of AGENTS.md reasons.
    AgentsMdCode => AgentsMd {
        /// The agent's trust level is below `minimum-trust-level` (C22).
        TrustLevel = "agents_md.trust_level",
        /// The path is on the disallowed list (C16).
        DisallowedPath = "agents_md.disallowed_path",
        /// A write to a `require-human-approval` path (C16).
        RequiresHumanApproval = "agents_md.requires_human_approval",
        /// A write to a read-only path (C16).
        ReadOnlyPath = "agents_md.read_only_path",
        /// An action the request maps to is not allowed (C17).
        ActionDenied = "agents_md.action_denied",
        /// The write's action is allowed by the line cited (C17).
        ActionAllowed = "agents_md.action_allowed",
        /// `authentication: required` and the request carries neither `Authorization` nor
        /// `Cookie` (C23).
        AuthenticationMissing = "agents_md.authentication_missing",
        /// `authentication: required` and the request carries credentials (C23).
        AuthenticationPresent = "agents_md.authentication_present",
        /// `requests-per-minute` or `requests-per-hour` (C21).
        RateLimit = "agents_md.rate_limit",
        /// `concurrent-sessions` (C21).
        ConcurrentSessions = "agents_md.concurrent_sessions",
    }
}

codes! {
    /// The codes of automation-preferences.txt reasons.
    AutoctlCode => Autoctl {
        /// The selected group allows the method (and the purposes, if restricted).
        Allowed = "autoctl.allowed",
        /// The selected group's `allowed-methods` does not list the method (D12).
        MethodNotAllowed = "autoctl.method_not_allowed",
        /// The selected group has no `allowed-methods` line, so every method is disallowed.
        NoAllowedMethods = "autoctl.no_allowed_methods",
        /// A declared purpose is not in the group's `allowed-purposes` (D13).
        PurposeNotAllowed = "autoctl.purpose_not_allowed",
        /// The group lists purposes and the agent declared none (D13).
        PurposeUndeclared = "autoctl.purpose_undeclared",
        /// The file is in force but no group applies to the request (D11).
        NoGroup = "autoctl.no_group",
        /// The file could not be used (5xx, timeout, network error, control bytes, oversize),
        /// so only safe methods are allowed (D15).
        Unavailable = "autoctl.unavailable",
        /// A passthrough tunnel: its methods cannot be seen, so `allowed-methods` is not
        /// enforced (D12).
        Unenforceable = "autoctl.unenforceable",
    }
}

codes! {
    /// The codes of the operator's reasons: its rules and lists in the config, and
    /// agentgate's own refusals (authentication, the network guard, an unreachable origin,
    /// its own caps).
    OperatorCode => Operator {
        /// A request for a policy file itself, always allowed (SEMANTICS X3).
        PolicyFile = "policy_file",
        /// A `[[rules]]` allow.
        Allow = "operator.allow",
        /// A `[[rules]]` deny.
        Deny = "operator.deny",
        /// A host on `bypass_hosts`: site policies skipped.
        Bypass = "operator.bypass",
        /// A host on the agent's `deny_hosts`.
        DeniedHost = "operator.denied_host",
        /// A host the agent's `allow_hosts` does not list.
        NotAllowlisted = "operator.not_allowlisted",
        /// A host outside the agent's `allow_hosts` that a human admitted (not blocking).
        HostApproved = "operator.host_approved",
        /// The agent's own `limits` in the config.
        RateLimit = "operator.rate_limit",
        /// The agent's own byte budgets in the config (`limits.*_bytes_per_hour`).
        ByteBudget = "operator.byte_budget",
        /// `agentgate.local`, answered by agentgate itself.
        ServedLocally = "operator.served_locally",
        /// `[auth] required` and the client proved no agent's identity.
        AuthRequired = "auth.required",
        /// Proxy credentials that name no agent, or a wrong token.
        AuthInvalid = "auth.invalid",
        /// The network guard: a private, loopback or otherwise internal address.
        PrivateAddress = "network.private_address",
        /// The network guard: an address in `[network] deny_cidrs`.
        DeniedCidr = "network.denied_cidr",
        /// The network guard: agentgate's own listen or admin address, or its shared policy
        /// store (`[cache] store = "redis"`).
        OwnAddress = "network.own_address",
        /// The network guard: a CONNECT to a port outside `[connect] allowed_ports`.
        PortNotAllowed = "network.port_not_allowed",
        /// A transparent connection naming another site than the address it was made to.
        HostMismatch = "transparent.host_mismatch",
        /// The origin could not be reached when its policies were fetched (502/504).
        OriginUnreachable = "origin.unreachable",
        /// agentgate had no connection to origins to spare for the policy fetch (503).
        UpstreamAtCapacity = "upstream.at_capacity",
        /// The parent proxy (`[upstream] parent`) refused the `CONNECT` (a `407` included):
        /// nothing reached the origin (502).
        ParentRefused = "upstream.parent_refused",
        /// The parent proxy (`[upstream] parent`) could not be reached (502).
        ParentUnreachable = "upstream.parent_unreachable",
        /// A git discovery refused because the POST it announces would be refused (C17).
        RefusedForPost = "git.refused_for_post",
        /// A secret's placeholder sent to a host the secret is not bound to.
        SecretNotBound = "secrets.not_bound",
        /// A secret's placeholder sent by an agent the secret is not for.
        SecretAgentNotAllowed = "secrets.agent_not_allowed",
        /// A secret's placeholder in a plain-HTTP request, where the secret is not allowed.
        SecretPlainHttp = "secrets.plain_http",
        /// A secret's real value in a request to a host it is not bound to.
        SecretValueLeak = "secrets.value_leak",
        /// The shared limits store did not answer and `on_failure = "deny"` (503).
        LimitsStoreUnavailable = "limits.store_unavailable",
        /// `[inspect]`: a detector found a credential in the request (403).
        SecretInRequest = "inspect.secret_in_request",
        /// `[inspect]`: the request could not be inspected (its body over `max_body` or not
        /// decodable, or a WebSocket upgrade); blocking unless `on_unreadable = "allow"`.
        Unreadable = "inspect.unreadable",
        /// `[[mcp]]`: a `tools/call` to a tool the agent's table refuses (answered with a
        /// JSON-RPC error, the session going on).
        McpToolRefused = "mcp.tool_refused",
        /// `[[mcp]]`: a body to an MCP server that cannot be read within `[inspect] max_body`,
        /// or is encoded, or JSON with a `method` but not JSON-RPC, so its tools cannot be ruled.
        McpUnreadable = "mcp.unreadable",
        /// `mode = "replay"`: the recording (`[record] dir`) holds no answer to the request
        /// (504, the nearest recorded URL named).
        ReplayMiss = "replay.miss",
    }
}

codes! {
    /// The codes of usage-preference reasons (SEMANTICS §6.6).
    UsageCode => Usage {
        /// A declared purpose the site refuses (U1, U6); the rule names the source, line,
        /// label and value.
        Refused = "usage.refused",
    }
}

/// A reason's stable code: one of its source's codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// A robots.txt reason.
    Robots(RobotsCode),
    /// An agents.txt reason.
    AgentsTxt(AgentsTxtCode),
    /// An AGENTS.md reason.
    AgentsMd(AgentsMdCode),
    /// An automation-preferences.txt reason.
    Autoctl(AutoctlCode),
    /// An operator reason.
    Operator(OperatorCode),
    /// A usage-preference reason.
    Usage(UsageCode),
}

impl Code {
    /// The source whose code this is.
    pub fn source(self) -> Source {
        match self {
            Code::Robots(_) => Source::Robots,
            Code::AgentsTxt(_) => Source::AgentsTxt,
            Code::AgentsMd(_) => Source::AgentsMd,
            Code::Autoctl(_) => Source::Autoctl,
            Code::Operator(_) => Source::Operator,
            Code::Usage(_) => Source::Usage,
        }
    }

    /// The code as the log, the `agentgate-decision` header, block answers and `/metrics`
    /// write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Robots(code) => code.as_str(),
            Code::AgentsTxt(code) => code.as_str(),
            Code::AgentsMd(code) => code.as_str(),
            Code::Autoctl(code) => code.as_str(),
            Code::Operator(code) => code.as_str(),
            Code::Usage(code) => code.as_str(),
        }
    }

    /// Every code, source by source.
    pub fn all() -> impl Iterator<Item = Code> {
        let robots = RobotsCode::ALL.iter().copied().map(Code::from);
        let agents_txt = AgentsTxtCode::ALL.iter().copied().map(Code::from);
        let agents_md = AgentsMdCode::ALL.iter().copied().map(Code::from);
        let autoctl = AutoctlCode::ALL.iter().copied().map(Code::from);
        let operator = OperatorCode::ALL.iter().copied().map(Code::from);
        let usage = UsageCode::ALL.iter().copied().map(Code::from);
        robots.chain(agents_txt).chain(agents_md).chain(autoctl).chain(operator).chain(usage)
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an agent blocked by a reason with this code may do instead, in plain words (DESIGN
/// §6): each source's codes implement it beside the code that gives them (each format's
/// module; the operator's in [`super::advice`]) as one match over every code, so a new code
/// does not compile without its advice.
pub trait Advice {
    /// The advice for this code.
    fn advice(self) -> &'static str;
}

impl Advice for Code {
    fn advice(self) -> &'static str {
        match self {
            Code::Robots(code) => code.advice(),
            Code::AgentsTxt(code) => code.advice(),
            Code::AgentsMd(code) => code.advice(),
            Code::Autoctl(code) => code.advice(),
            Code::Operator(code) => code.advice(),
            Code::Usage(code) => code.advice(),
        }
    }
}

/// A code equals the string the log writes for it.
impl PartialEq<&str> for Code {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The stable interface: every code, byte for byte, as logs and clients already read
    /// it. A change here is a change to every consumer of the decision log.
    const WRITTEN: &[&str] = &[
        "robots.allow",
        "robots.disallow",
        "robots.group",
        "robots.unavailable",
        "robots.unreachable",
        "robots.crawl_delay",
        "agents_txt.allow",
        "agents_txt.disallow",
        "agents_txt.limit",
        "agents_txt.limit_zero",
        "agents_txt.too_large",
        "agents_txt.invalid_utf8",
        "agents_txt.hash_missing",
        "agents_txt.hash_line_syntax",
        "agents_txt.hash_mismatch",
        "agents_txt.directive_syntax",
        "agents_md.trust_level",
        "agents_md.disallowed_path",
        "agents_md.requires_human_approval",
        "agents_md.read_only_path",
        "agents_md.action_denied",
        "agents_md.action_allowed",
        "agents_md.authentication_missing",
        "agents_md.authentication_present",
        "agents_md.rate_limit",
        "agents_md.concurrent_sessions",
        "autoctl.allowed",
        "autoctl.method_not_allowed",
        "autoctl.no_allowed_methods",
        "autoctl.purpose_not_allowed",
        "autoctl.purpose_undeclared",
        "autoctl.no_group",
        "autoctl.unavailable",
        "autoctl.unenforceable",
        "policy_file",
        "operator.allow",
        "operator.deny",
        "operator.bypass",
        "operator.denied_host",
        "operator.not_allowlisted",
        "operator.host_approved",
        "operator.rate_limit",
        "operator.byte_budget",
        "operator.served_locally",
        "auth.required",
        "auth.invalid",
        "network.private_address",
        "network.denied_cidr",
        "network.own_address",
        "network.port_not_allowed",
        "transparent.host_mismatch",
        "origin.unreachable",
        "upstream.at_capacity",
        "upstream.parent_refused",
        "upstream.parent_unreachable",
        "git.refused_for_post",
        "secrets.not_bound",
        "secrets.agent_not_allowed",
        "secrets.plain_http",
        "secrets.value_leak",
        "limits.store_unavailable",
        "inspect.secret_in_request",
        "inspect.unreadable",
        "mcp.tool_refused",
        "mcp.unreadable",
        "replay.miss",
        "usage.refused",
    ];

    #[test]
    fn every_code_is_written_as_before() {
        let written: Vec<&str> = Code::all().map(Code::as_str).collect();
        assert_eq!(written, WRITTEN);
    }

    #[test]
    fn a_format_code_names_its_file_and_carries_its_source() {
        for code in Code::all() {
            let prefix = match code.source() {
                Source::Robots => "robots.",
                Source::AgentsTxt => "agents_txt.",
                Source::AgentsMd => "agents_md.",
                Source::Autoctl => "autoctl.",
                Source::Usage => "usage.",
                Source::Operator | Source::Tdmrep => continue,
            };
            assert!(code.as_str().starts_with(prefix), "{code} of {}", code.source());
        }
        for code in Code::all() {
            assert_eq!(code.to_string(), code.as_str());
            assert!(code == code.as_str());
        }
    }

    #[test]
    fn every_code_is_documented_in_the_decision_log() {
        let doc = include_str!("../../docs/decision-log.md");
        for code in Code::all() {
            let row = format!("| `{code}` | {} |", code.source());
            assert!(doc.contains(&row), "docs/decision-log.md has no row starting {row:?}");
        }
    }
}
