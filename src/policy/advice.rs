//! What an agent may do instead, in plain words, for each reason code that can block a
//! request. The agent reading a block answer is often an LLM: it needs to know whether to
//! retry, what is still open to it, and who can lift the block (DESIGN §6).
//!
//! Never: decides anything; the text only explains a decision already made.

use super::{Format, Reason, Source, formats};

/// Advice for one blocking reason.
pub fn advice(reason: &Reason) -> &'static str {
    let code: &str = &reason.code;
    if matches!(code, "agents_md.rate_limit" | "agents_txt.limit" | "operator.rate_limit") {
        return "You are over a rate limit (the cited rule sets how many requests per window). Wait for the \
                Retry-After seconds before the next request to this site, and space out the ones after it.";
    }
    if code == "robots.crawl_delay" {
        return "The site's robots.txt asks for a pause between requests (the cited Crawl-delay). Wait for the \
                Retry-After seconds, then send one request per delay to this site.";
    }
    if code == "limits.store_unavailable" {
        return "agentgate cannot count this request against the site's limits right now: its shared limits \
                store does not answer. Retry in a few seconds; your operator has been told.";
    }
    if code == "agents_md.concurrent_sessions" {
        return "You already have as many requests in flight to this site as its AGENTS.md allows. Wait for one to \
                finish, then retry; send requests one after another instead of in parallel.";
    }
    if code == super::operator::NOT_ALLOWLISTED {
        return "Your operator lets this agent reach only the hosts on its allowlist (the cited allow_hosts), and \
                this host is not on it. Do not retry it; use a listed host, or ask your operator to add this one.";
    }
    if code == super::operator::DENIED_HOST {
        return "Your operator forbids this agent to reach this host (the cited deny_hosts). Do not retry it; ask \
                your operator if you need it.";
    }
    if code == "origin.unreachable" {
        return "The site did not accept a connection (refused or timed out); nothing forbids the request. Check \
                the host and port, then retry later.";
    }
    if code == "git.refused_for_post" {
        return "This is the first request of a git clone, fetch or push; the POST that follows it is refused for \
                the reasons above, so git cannot go on. Do not retry it; ask your operator if you need this repository.";
    }
    if code == "upstream.at_capacity" {
        return "agentgate has as many connections to sites open as it allows, all busy, so it could not ask this \
                site; nothing forbids the request. Wait for the Retry-After seconds, then retry.";
    }
    match reason.source {
        Source::Operator if code.starts_with("auth.") => {
            "agentgate needs to know which agent you are. Use the proxy credentials your operator gave you \
             (HTTPS_PROXY=http://id:token@proxy:port, or Proxy-Authorization: Bearer token); without them, ask your \
             operator."
        }
        // Every source but the operator is a format's.
        source => format_advice(source, code).unwrap_or(
            "Your operator's agentgate configuration forbids this request. Do not retry it; ask your operator if \
             you need it.",
        ),
    }
}

macro_rules! format_advice {
    ($($field:ident: $format:ty),* $(,)?) => {
        /// The advice of the format whose reasons carry `source` ([`Format::advice`]); `None`
        /// for the operator.
        fn format_advice(source: Source, code: &str) -> Option<&'static str> {
            $(if source == <$format>::SOURCE {
                return Some(<$format>::advice(code));
            })*
            None
        }
    };
}
formats!(format_advice);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_names_the_file_and_a_way_forward() {
        let cases = [
            (Source::Robots, "robots.disallow", "robots.txt disallows"),
            (Source::Robots, "robots.unreachable", "Try again later"),
            (Source::Operator, "origin.unreachable", "nothing forbids the request"),
            (Source::AgentsTxt, "agents_txt.hash_mismatch", "restricts the whole site"),
            (Source::AgentsMd, "agents_md.requires_human_approval", "human to approve"),
            (Source::Autoctl, "autoctl.method_not_allowed", "does not allow this HTTP method"),
            (Source::Operator, "operator.deny", "operator"),
            (Source::Operator, "operator.not_allowlisted", "ask your operator to add this one"),
            (Source::Operator, "operator.denied_host", "forbids this agent to reach this host"),
            (Source::AgentsMd, "agents_md.rate_limit", "Retry-After"),
            (Source::AgentsTxt, "agents_txt.limit", "Retry-After"),
            (Source::AgentsMd, "agents_md.concurrent_sessions", "in flight"),
            (Source::Operator, "auth.invalid", "proxy credentials"),
            (Source::Operator, "limits.store_unavailable", "Retry in a few seconds"),
            (Source::Operator, "upstream.at_capacity", "Retry-After"),
        ];
        for (source, code, expected) in cases {
            let text = advice(&Reason::new(source, code, "rule"));
            assert!(text.contains(expected), "{code}: {text}");
        }
    }
}
