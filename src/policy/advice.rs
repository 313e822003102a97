//! What an agent may do instead, in plain words, for each reason code that can block a
//! request. The agent reading a block answer is often an LLM: it needs to know whether to
//! retry, what is still open to it, and who can lift the block (DESIGN §6).
//!
//! Owns: the one lookup block answers make ([`advice`]), the advice for the operator's
//! codes, and the rate-limit advice the formats that set limits share. Each format's codes'
//! advice is in that format's module ([`Advice`]).
//!
//! Never: decides anything; the text only explains a decision already made.

use super::{Advice, OperatorCode, Reason};

/// Advice for one blocking reason: its code's ([`Advice`]; each format's module holds its
/// codes' advice, this one the operator's).
pub fn advice(reason: &Reason) -> &'static str {
    reason.code.advice()
}

/// The advice for a request over a rate limit, whichever file or setting set the limit.
pub const RATE_LIMIT_ADVICE: &str = "You are over a rate limit (the cited rule sets how many requests per window). \
                                     Wait for the Retry-After seconds before the next request to this site, and \
                                     space out the ones after it.";

/// The advice for a request the operator's configuration refuses.
const FORBIDDEN: &str =
    "Your operator's agentgate configuration forbids this request. Do not retry it; ask your operator if you need it.";

/// What an agent blocked by an operator reason may do instead.
impl Advice for OperatorCode {
    fn advice(self) -> &'static str {
        match self {
            OperatorCode::RateLimit => RATE_LIMIT_ADVICE,
            OperatorCode::ByteBudget => {
                "You are over a byte budget your operator set (the cited limit caps the body bytes this agent sends \
                 or receives per hour). Wait for the Retry-After seconds, and send or fetch less."
            }
            OperatorCode::LimitsStoreUnavailable => {
                "agentgate cannot count this request against the site's limits right now: its shared limits store does \
                 not answer. Retry in a few seconds; your operator has been told."
            }
            OperatorCode::NotAllowlisted => {
                "Your operator lets this agent reach only the hosts on its allowlist (the cited allow_hosts), and this \
                 host is not on it. Do not retry it; use a listed host, or ask your operator to add this one."
            }
            OperatorCode::DeniedHost => {
                "Your operator forbids this agent to reach this host (the cited deny_hosts). Do not retry it; ask your \
                 operator if you need it."
            }
            OperatorCode::OriginUnreachable => {
                "The site did not accept a connection (refused or timed out); nothing forbids the request. Check the \
                 host and port, then retry later."
            }
            OperatorCode::UpstreamAtCapacity => {
                "agentgate has as many connections to sites open as it allows, all busy, so it could not ask this site; \
                 nothing forbids the request. Wait for the Retry-After seconds, then retry."
            }
            OperatorCode::ParentRefused | OperatorCode::ParentUnreachable => {
                "agentgate reaches sites through a parent proxy, which refused or could not be reached, so this site was \
                 not asked; nothing forbids the request. Tell your operator (the reason names the parent), then retry later."
            }
            OperatorCode::RefusedForPost => {
                "This is the first request of a git clone, fetch or push; the POST that follows it is refused for the \
                 reasons above, so git cannot go on. Do not retry it; ask your operator if you need this repository."
            }
            OperatorCode::SecretNotBound | OperatorCode::SecretAgentNotAllowed | OperatorCode::SecretPlainHttp => {
                "The request carries a credential placeholder your operator gave you, but not for this host, this agent \
                 or plain HTTP (the cited rule says which). Do not retry it; send the placeholder only to the hosts it is \
                 for, over https://."
            }
            OperatorCode::SecretValueLeak => {
                "The request carries a credential that may only go to the hosts it belongs to. Do not retry it, and do \
                 not send that value anywhere else; use the placeholder your operator gave you towards its own hosts."
            }
            OperatorCode::SecretInRequest => {
                "Your operator's agentgate found a credential (the cited detector, at the cited place) in what this \
                 request sends, and does not let credentials leave to this site. Do not retry it as it is: remove the \
                 credential from the request, or ask your operator if this site must receive it."
            }
            OperatorCode::Unreadable => {
                "Your operator's agentgate inspects what is sent to this site and could not read this request (the \
                 cited reason: a body over its size bound, an encoding it cannot undo, or a WebSocket). Send a smaller \
                 or uncompressed body, or ask your operator."
            }
            OperatorCode::McpToolRefused => {
                "Your operator's agentgate does not let this agent call this tool on this MCP server (the cited \
                 rule). Do not retry it; use another tool, or ask your operator."
            }
            OperatorCode::McpUnreadable => {
                "Your operator's agentgate rules the tools called on this MCP server and could not read this request \
                 (the cited reason: a body over its size bound, or not JSON-RPC). Send a smaller, uncompressed \
                 JSON-RPC body, or ask your operator."
            }
            OperatorCode::ReplayMiss => {
                "agentgate is replaying a recorded run, and the recording holds no answer to this request (the cited \
                 rule names the nearest URL it does hold). Nothing was sent to the site. Request a recorded URL, or \
                 record the run again with this request in it."
            }
            OperatorCode::AuthRequired | OperatorCode::AuthInvalid => {
                "agentgate needs to know which agent you are. Use the proxy credentials your operator gave you \
                 (HTTPS_PROXY=http://id:token@proxy:port, or Proxy-Authorization: Bearer token); without them, ask your \
                 operator."
            }
            OperatorCode::Deny
            | OperatorCode::PrivateAddress
            | OperatorCode::DeniedCidr
            | OperatorCode::OwnAddress
            | OperatorCode::PortNotAllowed
            | OperatorCode::HostMismatch => FORBIDDEN,
            // These never block: the operator's general advice.
            OperatorCode::PolicyFile
            | OperatorCode::Allow
            | OperatorCode::Bypass
            | OperatorCode::HostApproved
            | OperatorCode::ServedLocally => FORBIDDEN,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{AgentsMdCode, AgentsTxtCode, AutoctlCode, Code, RobotsCode};

    #[test]
    fn advice_names_the_file_and_a_way_forward() {
        let cases: &[(Code, &str)] = &[
            (OperatorCode::ByteBudget.into(), "byte budget"),
            (RobotsCode::Disallow.into(), "robots.txt disallows"),
            (RobotsCode::Unreachable.into(), "Try again later"),
            (OperatorCode::OriginUnreachable.into(), "nothing forbids the request"),
            (AgentsTxtCode::HashMismatch.into(), "restricts the whole site"),
            (AgentsMdCode::RequiresHumanApproval.into(), "human to approve"),
            (AutoctlCode::MethodNotAllowed.into(), "does not allow this HTTP method"),
            (OperatorCode::Deny.into(), "operator"),
            (OperatorCode::NotAllowlisted.into(), "ask your operator to add this one"),
            (OperatorCode::DeniedHost.into(), "forbids this agent to reach this host"),
            (AgentsMdCode::RateLimit.into(), "Retry-After"),
            (AgentsTxtCode::Limit.into(), "Retry-After"),
            (AgentsMdCode::ConcurrentSessions.into(), "in flight"),
            (OperatorCode::AuthInvalid.into(), "proxy credentials"),
            (OperatorCode::LimitsStoreUnavailable.into(), "Retry in a few seconds"),
            (OperatorCode::UpstreamAtCapacity.into(), "Retry-After"),
            (OperatorCode::ParentRefused.into(), "parent proxy"),
            (OperatorCode::SecretInRequest.into(), "remove the credential"),
            (OperatorCode::Unreadable.into(), "could not read this request"),
            (OperatorCode::McpToolRefused.into(), "call this tool"),
            (OperatorCode::McpUnreadable.into(), "not JSON-RPC"),
            (OperatorCode::ReplayMiss.into(), "nearest URL"),
        ];
        for &(code, expected) in cases {
            let text = advice(&Reason::new(code, "rule"));
            assert!(text.contains(expected), "{code}: {text}");
        }
    }
}
