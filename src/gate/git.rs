//! git's smart HTTP, as `git clone`, `fetch` and `push` speak it over HTTP(S): a discovery
//! `GET <repo>/info/refs?service=git-upload-pack` (or `git-receive-pack`), then `POST
//! <repo>/git-upload-pack` with `Content-Type: application/x-git-upload-pack-request`. git
//! prints the body of a refused discovery as `remote:` lines, but of a refused POST only
//! "RPC failed; HTTP 403". So a discovery the policies allow is decided a second time, by the
//! same evaluation, as the POST it announces, and when that POST would be denied the
//! discovery is refused with the POST's reasons and one more saying so
//! (`git.refused_for_post`): the agent reads the site's reason in git's own output.
//!
//! Owns: which POST a request announces, and the decision that refuses a discovery on its
//! behalf. Never: reads a body, counts a limit, or decides anything itself (the gate's
//! evaluation does, operator rules and site files alike). A POST that would need a human's
//! approval leaves its discovery alone: holding the discovery would need a second approval
//! for the POST.

use crate::policy::{Decision, HeaderLookup, OperatorCode, Outcome, Reason, RequestView};

use super::Gate;

/// The POST a git discovery announces: where it goes and its `Content-Type`.
#[derive(Debug, PartialEq, Eq)]
struct AnnouncedPost {
    /// `<repo>/git-upload-pack` or `<repo>/git-receive-pack`, as git requests it.
    path: String,
    /// `application/x-git-upload-pack-request` or `application/x-git-receive-pack-request`.
    content_type: &'static str,
}

/// The services of git's smart HTTP (`service=` of a discovery) and their POST bodies' types.
const SERVICES: [(&str, &str); 2] = [
    ("git-upload-pack", "application/x-git-upload-pack-request"),
    ("git-receive-pack", "application/x-git-receive-pack-request"),
];

/// The POST that follows `method path_and_query` when it is a smart-HTTP discovery (`GET
/// …/info/refs` with `service=git-upload-pack` or `service=git-receive-pack` in its query);
/// `None` for any other request, the dumb protocol's `info/refs` (no `service`) included.
fn announced_post(method: &str, path_and_query: &str) -> Option<AnnouncedPost> {
    if method != "GET" {
        return None;
    }
    let (path, query) = path_and_query.split_once('?')?;
    let repo = path.strip_suffix("/info/refs")?;
    let (service, content_type) = query
        .split('&')
        .filter_map(|pair| pair.strip_prefix("service="))
        .find_map(|named| SERVICES.into_iter().find(|(service, _)| *service == named))?;
    Some(AnnouncedPost { path: format!("{repo}/{service}"), content_type })
}

/// The discovery's headers as its POST carries them: the same, but for `Content-Type`.
#[derive(Debug)]
struct PostHeaders<'a> {
    discovery: &'a dyn HeaderLookup,
    content_type: &'static str,
}

impl HeaderLookup for PostHeaders<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        if name.eq_ignore_ascii_case("content-type") { Some(self.content_type) } else { self.discovery.get(name) }
    }
}

/// The discovery's decision when its POST is denied: the POST's blocking reasons first (so
/// `agentgate-decision` cites the site's line), then the one that says why a GET carries
/// them, then the discovery's own reasons. Its limits and headers stay the discovery's (a
/// monitor-mode discovery is still forwarded with them).
fn refused_for_post(post: &AnnouncedPost, post_decision: &Decision, discovery: Decision) -> Decision {
    let mut blocking = post_decision.blocking_reasons().to_vec();
    let rule = format!(
        "git sends POST {} (Content-Type: {}) after this discovery request, and that POST is refused for the reasons above; this request is refused with them, so that git shows them",
        post.path, post.content_type
    );
    blocking.push(Reason::new(OperatorCode::RefusedForPost, rule));
    let Decision { reasons, limits, inject_headers, .. } = discovery;
    let mut decision = Decision::deny_first(blocking, reasons, limits);
    decision.inject_headers = inject_headers;
    decision
}

impl Gate {
    /// A request the policies allowed (`decision`), decided again as the POST it announces
    /// when it is a git discovery: refused on that POST's behalf when the POST would be
    /// denied, else `decision` unchanged.
    pub(super) async fn git_discovery(
        &self,
        view: &RequestView<'_>,
        req: &super::GateRequest<'_>,
        decision: Decision,
    ) -> Decision {
        let Some(post) = announced_post(view.method, view.path_and_query) else { return decision };
        let headers = PostHeaders { discovery: view.headers, content_type: post.content_type };
        let post_view = RequestView { method: "POST", path_and_query: &post.path, headers: &headers, ..*view };
        let (post_decision, _) = self.evaluate(&post_view, &req.agent.id, req.origin, req.addresses).await;
        if post_decision.outcome == Outcome::Deny {
            refused_for_post(&post, &post_decision, decision)
        } else {
            decision
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{AgentsMdCode, Code, Headers, RobotsCode};

    #[test]
    fn a_smart_http_discovery_announces_its_post_and_nothing_else_does() {
        let upload = announced_post("GET", "/org/repo.git/info/refs?service=git-upload-pack");
        assert_eq!(
            upload,
            Some(AnnouncedPost {
                path: "/org/repo.git/git-upload-pack".to_owned(),
                content_type: "application/x-git-upload-pack-request"
            })
        );
        let push = announced_post("GET", "/r/info/refs?x=1&service=git-receive-pack").expect("a push discovery");
        assert_eq!(
            (push.path.as_str(), push.content_type),
            ("/r/git-receive-pack", "application/x-git-receive-pack-request")
        );
        for (method, target) in [
            ("GET", "/repo.git/info/refs"),                           // the dumb protocol
            ("GET", "/repo.git/info/refs?service=git-archive"),       // no such service
            ("GET", "/repo.git/info/refs?service=git-upload-pack-x"), // not the whole value
            ("GET", "/repo.git/info/refs/x?service=git-upload-pack"), // not info/refs
            ("HEAD", "/repo.git/info/refs?service=git-upload-pack"),  // git sends GET
            ("POST", "/repo.git/git-upload-pack"),                    // the POST itself
        ] {
            assert_eq!(announced_post(method, target), None, "{method} {target}");
        }
    }

    #[test]
    fn the_post_carries_its_content_type_and_the_discoverys_other_headers() {
        let discovery = Headers::new(vec![
            ("User-Agent".to_owned(), "git/2.47".to_owned()),
            ("Content-Type".to_owned(), "text/plain".to_owned()),
        ]);
        let post = PostHeaders { discovery: &discovery, content_type: "application/x-git-upload-pack-request" };
        assert_eq!(post.get("Content-Type"), Some("application/x-git-upload-pack-request"));
        assert_eq!(post.media_type().as_deref(), Some("application/x-git-upload-pack-request"));
        assert_eq!(post.get("user-agent"), Some("git/2.47"));
    }

    #[test]
    fn the_refusal_cites_the_posts_reasons_first_then_why_a_get_carries_them() {
        let post = AnnouncedPost {
            path: "/repo.git/git-upload-pack".to_owned(),
            content_type: "application/x-git-upload-pack-request",
        };
        let site = Reason::new(AgentsMdCode::ActionDenied, "submit-forms: false").at_line(7);
        let post_decision = Decision::single(Outcome::Deny, site.clone());
        let allowed = Reason::new(RobotsCode::Allow, "Allow: /");
        let mut discovery = Decision::single(Outcome::Allow, allowed.clone());
        discovery.inject_headers = vec![("X-Agent-Identity".to_owned(), "git-agent".to_owned())];
        let refused = refused_for_post(&post, &post_decision, discovery);
        assert_eq!(refused.outcome, Outcome::Deny);
        let blocking = refused.blocking_reasons();
        assert_eq!(blocking.len(), 2);
        assert_eq!(blocking[0], site, "the site's reason first: agentgate-decision cites it");
        assert_eq!(blocking[1].code, Code::from(OperatorCode::RefusedForPost));
        assert!(blocking[1].rule.contains("POST /repo.git/git-upload-pack"), "{}", blocking[1].rule);
        assert_eq!(refused.reasons[2], allowed, "the discovery's own reasons follow");
        assert_eq!(refused.inject_headers.len(), 1, "a monitor-mode discovery keeps its injected header");
        let advice = crate::policy::advice::advice(&blocking[1]);
        assert!(advice.contains("git"), "{advice}");
    }
}
