//! What an agent may do instead, in plain words, for each reason code that can block a
//! request. The agent reading a block answer is often an LLM: it needs to know whether to
//! retry, what is still open to it, and who can lift the block (DESIGN §6).
//!
//! Never: decides anything; the text only explains a decision already made.

use super::{Reason, Source};

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
    if code == "agents_md.concurrent_sessions" {
        return "You already have as many requests in flight to this site as its AGENTS.md allows. Wait for one to \
                finish, then retry; send requests one after another instead of in parallel.";
    }
    match reason.source {
        Source::Robots if code == "robots.unreachable" => {
            "The site's robots.txt could not be fetched (server error or network failure); under RFC 9309 the whole \
             site is off limits until it can be fetched. Try again later; do not work around the block."
        }
        Source::Robots => {
            "The site's robots.txt disallows this path for your user agent. Do not retry it. Paths the file does not \
             disallow remain available; read /robots.txt on this site to see which."
        }
        Source::AgentsTxt if code == "agents_txt.disallow" => {
            "The site's agents.txt disallows this path for automated agents. Do not retry it; other paths may be \
             allowed (read /agents.txt)."
        }
        Source::AgentsTxt if code == "agents_txt.limit_zero" => {
            "The site's agents.txt allows zero automated requests to this path. Do not retry it."
        }
        Source::AgentsTxt => {
            "The site's agents.txt is malformed or unverifiable, and the agents.txt rules say that restricts the \
             whole site to agents. Nothing on this site can be fetched until the site publishes a valid file; tell \
             your user, do not retry."
        }
        Source::AgentsMd if code == "agents_md.requires_human_approval" => {
            "The site's AGENTS.md requires a human to approve this action. Stop and ask your user or operator to \
             approve or perform it; do not retry automatically."
        }
        Source::AgentsMd if code == "agents_md.trust_level" => {
            "The site's AGENTS.md requires a higher trust level than this agent has. Only your operator can change \
             the agent's trust level; do not retry."
        }
        Source::AgentsMd if code == "agents_md.action_denied" => {
            "The site's AGENTS.md does not allow this kind of action (for example form submission, uploads, API \
             writes or deletion) for agents. Reading pages may still be allowed; do not retry this request."
        }
        Source::AgentsMd if code == "agents_md.authentication_missing" => {
            "The site's AGENTS.md requires authentication, and this write carries no Authorization or Cookie. Log in \
             to the site (or use the credentials your user gave you) and send them with the request; reading pages \
             may still work without them."
        }
        Source::AgentsMd if code == "agents_md.read_only_path" => {
            "The site's AGENTS.md makes this path read-only for agents: GET and HEAD may work, changes will not."
        }
        Source::AgentsMd => {
            "The site's AGENTS.md disallows this path for agents. Do not retry it; read /AGENTS.md on this site to \
             see what is allowed."
        }
        Source::Autoctl if code == "autoctl.unavailable" => {
            "The site's automation-preferences.txt could not be used, so only safe methods (GET, HEAD, OPTIONS) are \
             allowed for now. Read-only requests remain possible."
        }
        Source::Autoctl if code.starts_with("autoctl.purpose") => {
            "The site's automation-preferences.txt only allows certain purposes here, and this agent's declared \
             purposes are not among them. Only your operator can change the declared purposes; do not retry."
        }
        Source::Autoctl => {
            "The site's automation-preferences.txt does not allow this HTTP method here. Use one of the methods the \
             cited rule lists (often GET and HEAD), or do not retry."
        }
        Source::Operator if code.starts_with("auth.") => {
            "agentgate needs to know which agent you are. Use the proxy credentials your operator gave you \
             (HTTPS_PROXY=http://id:token@proxy:port, or Proxy-Authorization: Bearer token); without them, ask your \
             operator."
        }
        Source::Operator => {
            "Your operator's agentgate configuration forbids this request. Do not retry it; ask your operator if \
             you need it."
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_names_the_file_and_a_way_forward() {
        let cases = [
            (Source::Robots, "robots.disallow", "robots.txt disallows"),
            (Source::Robots, "robots.unreachable", "Try again later"),
            (Source::AgentsTxt, "agents_txt.hash_mismatch", "restricts the whole site"),
            (Source::AgentsMd, "agents_md.requires_human_approval", "human to approve"),
            (Source::Autoctl, "autoctl.method_not_allowed", "does not allow this HTTP method"),
            (Source::Operator, "operator.deny", "operator"),
            (Source::AgentsMd, "agents_md.rate_limit", "Retry-After"),
            (Source::AgentsTxt, "agents_txt.limit", "Retry-After"),
            (Source::AgentsMd, "agents_md.concurrent_sessions", "in flight"),
            (Source::Operator, "auth.invalid", "proxy credentials"),
        ];
        for (source, code, expected) in cases {
            let text = advice(&Reason::new(source, code, "rule"));
            assert!(text.contains(expected), "{code}: {text}");
        }
    }
}
