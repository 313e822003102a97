//! The gate end to end, one policy format at a time: each of the four files blocks what it
//! forbids and lets the rest through, over plain HTTP and over MITM'd HTTPS; every block is a
//! 403 naming the file, line and rule (plain text or JSON) whose record id is the `event.id`
//! of that request's log line. Then the fetch outcomes with a meaning of their own (robots.txt
//! 5xx and 4xx, an agents.txt hash mismatch, AGENTS.md over plain HTTP or as a coding-agent
//! file) and AGENTS.md's agent header and human approval.

use agentgate::policy::agents_txt::fix_hash;
use serde_json::Value;

use crate::support::block::{self, Expected};
use crate::support::log::for_request;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::{TestProxy, TestResult};

/// Plain HTTP or HTTPS through a MITM'd CONNECT tunnel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Over {
    Http,
    Https,
}

/// One format's check: the site, a request it blocks, one it allows, and the reason expected.
struct Case {
    site: Site,
    blocked: (&'static str, &'static str),
    allowed: (&'static str, &'static str),
    expected: Expected<'static>,
}

async fn origin_for(over: Over, ca: &TestCa, site: Site) -> TestResult<Origin> {
    match over {
        Over::Http => Origin::http_site(site).await,
        Over::Https => Origin::https_site(ca, site).await,
    }
}

fn request(client: &reqwest::Client, method: &str, url: String) -> TestResult<reqwest::RequestBuilder> {
    Ok(client.request(method.parse()?, url))
}

/// The blocked request twice (plain text, then JSON), the allowed one once; then the three
/// log lines: the blocks found by the ids the agent was given, the allowed one by its URL.
async fn blocks_and_allows(over: Over, case: Case) -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = origin_for(over, &ca, case.site).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;
    let (method, path) = case.blocked;
    let expected = &case.expected;

    let plain = request(&client, method, origin.url(path))?.send().await?;
    let plain_id = block::plain(plain, expected).await?;
    let json = request(&client, method, origin.url(path))?.header("accept", "application/json").send().await?;
    let json_id = block::json(json, expected).await?;
    assert_ne!(plain_id, json_id, "every request has its own record");
    assert_eq!(origin.hits(path), 0, "{method} {path} never reached the origin");

    let (allowed_method, allowed_path) = case.allowed;
    let allowed = request(&client, allowed_method, origin.url(allowed_path))?.send().await?;
    assert_eq!(allowed.status(), 200, "{allowed_method} {allowed_path} is allowed");
    let body = allowed.text().await?;
    assert!(body.starts_with(&format!("page {allowed_method} {allowed_path}\n")), "the origin answered: {body}");

    let records = proxy.finish().await?;
    assert_eq!(records.len(), 3, "one line per request, none for policy fetches: {records:#?}");
    block::logged(&records, &plain_id, method, expected)?;
    block::logged(&records, &json_id, method, expected)?;
    let allowed_lines = for_request(&records, allowed_method, allowed_path);
    assert_eq!(allowed_lines.len(), 1, "{records:#?}");
    assert_eq!(allowed_lines[0]["event.action"], "allow");
    assert_eq!(allowed_lines[0]["http.response.status_code"], 200);
    Ok(())
}

const ROBOTS: &str = "User-agent: *\nAllow: /public\nDisallow: /private\n";

fn robots_case() -> Case {
    Case {
        site: Site::new().file("/robots.txt", ROBOTS),
        blocked: ("GET", "/private/page"),
        allowed: ("GET", "/public/page"),
        expected: Expected {
            decision: "deny",
            source: "robots.txt",
            code: "robots.disallow",
            line: Some(3),
            rule: "Disallow: /private",
            advice: "robots.txt disallows this path",
        },
    }
}

/// An agents.txt with a valid hash line (inserted by `fix_hash` before the first directive).
fn agents_txt() -> (Vec<u8>, u64) {
    let body = fix_hash(b"# agents.txt of the test site\n/public ALLOW\n/private DISALLOW\n");
    let text = String::from_utf8_lossy(&body).into_owned();
    let line = text.lines().position(|l| l == "/private DISALLOW").expect("the directive is kept") + 1;
    (body, line as u64)
}

fn agents_txt_case() -> Case {
    let (body, line) = agents_txt();
    Case {
        site: Site::new().file("/agents.txt", body),
        blocked: ("GET", "/private/page"),
        allowed: ("GET", "/public/page"),
        expected: Expected {
            decision: "deny",
            source: "agents.txt",
            code: "agents_txt.disallow",
            line: Some(line),
            rule: "/private DISALLOW",
            advice: "agents.txt disallows this path",
        },
    }
}

/// An AGENTS.md policy (it has `## Identity` with `site:`): `extra` is appended as its last
/// sections.
fn agents_md(extra: &str) -> String {
    format!("# AGENTS.md\n\n## Identity\n- site: localhost\n- contact: ops@localhost\n\n{extra}")
}

fn markdown(site: Site, path: &str, body: String) -> Site {
    site.serve(path, 200, &[("content-type", "text/markdown; charset=utf-8")], body)
}

fn agents_md_case() -> Case {
    // Line 8: the heading is line 7.
    let body = agents_md("## Restrictions\n- disallowed-paths: /private/*\n");
    Case {
        site: markdown(Site::new(), "/AGENTS.md", body),
        blocked: ("GET", "/private/page"),
        allowed: ("GET", "/public/page"),
        expected: Expected {
            decision: "deny",
            source: "AGENTS.md",
            code: "agents_md.disallowed_path",
            line: Some(8),
            rule: "/private/*",
            advice: "AGENTS.md disallows this path",
        },
    }
}

fn autoctl_case() -> Case {
    Case {
        site: Site::new().file("/automation-preferences.txt", "user-agent: *\nscope: /\nallowed-methods: GET, HEAD\n"),
        blocked: ("POST", "/form"),
        allowed: ("GET", "/form"),
        expected: Expected {
            decision: "deny",
            source: "automation-preferences.txt",
            code: "autoctl.method_not_allowed",
            line: Some(3),
            rule: "GET, HEAD",
            advice: "does not allow this HTTP method",
        },
    }
}

#[tokio::test]
async fn robots_txt_disallow_over_http() -> TestResult {
    blocks_and_allows(Over::Http, robots_case()).await
}

#[tokio::test]
async fn robots_txt_disallow_over_https() -> TestResult {
    blocks_and_allows(Over::Https, robots_case()).await
}

#[tokio::test]
async fn agents_txt_disallow_over_http() -> TestResult {
    blocks_and_allows(Over::Http, agents_txt_case()).await
}

#[tokio::test]
async fn agents_txt_disallow_over_https() -> TestResult {
    blocks_and_allows(Over::Https, agents_txt_case()).await
}

/// AGENTS.md is only ever fetched over HTTPS (SEMANTICS C2), so this format is checked on an
/// HTTPS origin; over plain HTTP see `agents_md_served_only_over_http_is_ignored`.
#[tokio::test]
async fn agents_md_disallowed_paths_over_https() -> TestResult {
    blocks_and_allows(Over::Https, agents_md_case()).await
}

#[tokio::test]
async fn automation_preferences_allowed_methods_over_http() -> TestResult {
    blocks_and_allows(Over::Http, autoctl_case()).await
}

#[tokio::test]
async fn automation_preferences_allowed_methods_over_https() -> TestResult {
    blocks_and_allows(Over::Https, autoctl_case()).await
}

/// Sends GET `paths` and returns the log once the proxy has shut down.
async fn get_all(over: Over, site: Site, paths: &[&str]) -> TestResult<(Vec<reqwest::Response>, Vec<Value>)> {
    let ca = TestCa::new("origin CA")?;
    let origin = origin_for(over, &ca, site).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;
    let mut responses = Vec::new();
    for path in paths {
        responses.push(client.get(origin.url(path)).send().await?);
    }
    let records = proxy.finish().await?;
    assert_eq!(records.len(), paths.len(), "one line per request: {records:#?}");
    Ok((responses, records))
}

/// RFC 9309 §2.3.1.4: a robots.txt answered with a 5xx means the whole site is disallowed.
#[tokio::test]
async fn robots_txt_server_error_denies_every_path() -> TestResult {
    let expected = Expected {
        decision: "deny",
        source: "robots.txt",
        code: "robots.unreachable",
        line: None,
        rule: "unreachable",
        advice: "could not be fetched",
    };
    for over in [Over::Http, Over::Https] {
        let site = Site::new().serve("/robots.txt", 503, &[], "down for maintenance");
        let paths = ["/", "/public/page", "/robots-free/anything?x=1"];
        let (responses, records) = get_all(over, site, &paths).await?;
        for response in responses {
            let id = block::plain(response, &expected).await?;
            block::logged(&records, &id, "GET", &expected)?;
        }
    }
    Ok(())
}

/// RFC 9309 §2.3.1.3: a 4xx robots.txt (here 404 and 403) means no restrictions.
#[tokio::test]
async fn robots_txt_client_error_allows_everything() -> TestResult {
    for (over, status) in [(Over::Http, 404), (Over::Http, 403), (Over::Https, 404)] {
        let site = Site::new().serve("/robots.txt", status, &[], "User-agent: *\nDisallow: /\n");
        let (responses, records) = get_all(over, site, &["/", "/private/page"]).await?;
        for response in responses {
            assert_eq!(response.status(), 200, "robots.txt {status} over {over:?} restricts nothing");
        }
        for record in &records {
            assert_eq!(record["event.action"], "allow", "{record:#}");
        }
    }
    Ok(())
}

/// SEMANTICS B19: an agents.txt whose hash line does not match its content restricts the
/// whole origin, including the paths it would allow.
#[tokio::test]
async fn agents_txt_hash_mismatch_denies_the_whole_site() -> TestResult {
    let (body, _) = agents_txt();
    let text = String::from_utf8(body)?;
    // Tamper with the content after the hash was computed.
    let tampered = text.replace("/private DISALLOW", "/private ALLOW");
    for over in [Over::Http, Over::Https] {
        let site = Site::new().file("/agents.txt", tampered.clone());
        let (responses, records) = get_all(over, site, &["/", "/public/page", "/private/page"]).await?;
        for response in responses {
            assert_eq!(response.status(), 403);
            let decision = crate::support::header(&response, "agentgate-decision");
            assert!(decision.starts_with("deny; source=agents.txt;"), "{decision}");
            let body = response.text().await?;
            assert!(body.contains("restricts the whole site"), "{body}");
        }
        for record in &records {
            assert_eq!(record["event.action"], "deny", "{record:#}");
            assert_eq!(record["agentgate.reasons"][0]["source"], "agents.txt", "{record:#}");
            let code = record["agentgate.reasons"][0]["code"].as_str().unwrap_or_default();
            assert!(code.contains("hash"), "a hash code, got {code:?}");
        }
    }
    Ok(())
}

/// SEMANTICS C2: AGENTS.md is fetched over HTTPS only (port 443 for an http origin); a copy
/// the origin serves on its plain-HTTP port is never fetched, so it restricts nothing.
#[tokio::test]
async fn agents_md_served_only_over_http_is_ignored() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let policy = agents_md("## Restrictions\n- disallowed-paths: /private/*\n");
    let site = markdown(markdown(Site::new(), "/AGENTS.md", policy.clone()), "/.well-known/agents.md", policy);
    let origin = Origin::http_site(site).await?;
    let proxy = TestProxy::start(&ca).await?;
    let response = proxy.client()?.get(origin.url("/private/page")).send().await?;
    assert_eq!(response.status(), 200, "an AGENTS.md over plain HTTP does not apply");
    assert_eq!(origin.hits("/AGENTS.md"), 0, "never fetched over plain HTTP");
    assert_eq!(origin.hits("/.well-known/agents.md"), 0, "never fetched over plain HTTP");
    let records = proxy.finish().await?;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["event.action"], "allow");
    Ok(())
}

/// SEMANTICS C1: a `/AGENTS.md` without `## Identity` is a coding-agent file, not a policy;
/// the policy at `/.well-known/agents.md` applies instead.
#[tokio::test]
async fn agents_md_coding_file_at_root_falls_through_to_well_known() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let coding = "# AGENTS.md\n\n## Build\nRun `cargo test` before every commit.\n".to_owned();
    // `- disallowed-paths` on line 8.
    let policy = agents_md("## Restrictions\n- disallowed-paths: /secret/*\n");
    let site = markdown(markdown(Site::new(), "/AGENTS.md", coding), "/.well-known/agents.md", policy);
    let origin = Origin::https_site(&ca, site).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;
    let expected = Expected {
        decision: "deny",
        source: "AGENTS.md",
        code: "agents_md.disallowed_path",
        line: Some(8),
        rule: "/secret/*",
        advice: "AGENTS.md disallows this path",
    };
    let denied = block::plain(client.get(origin.url("/secret/plans")).send().await?, &expected).await?;
    let open = client.get(origin.url("/public/page")).send().await?;
    assert_eq!(open.status(), 200);
    assert_eq!(origin.hits("/AGENTS.md"), 1);
    assert_eq!(origin.hits("/.well-known/agents.md"), 1);
    let records = proxy.finish().await?;
    assert_eq!(records.len(), 2, "{records:#?}");
    block::logged(&records, &denied, "GET", &expected)?;
    Ok(())
}

/// SEMANTICS C24 and C16: `require-agent-header: true` makes the proxy add the agent id in
/// `X-Agent-Identity` (or the file's `agent-header-name`); a write to a
/// `require-human-approval` path is held: 403 with decision `needs_approval`.
#[tokio::test]
async fn agents_md_agent_header_and_human_approval() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    for (header_lines, seen_as) in [
        ("- require-agent-header: true\n", "x-agent-identity"),
        ("- require-agent-header: true\n- agent-header-name: X-Bot-Id\n", "x-bot-id"),
    ] {
        let policy = agents_md(&format!(
            "## Allowed Actions\n- read-content: true\n- access-api: true\n\n\
             ## Restrictions\n- require-human-approval: /orders/*\n\n## Agent Identification\n{header_lines}"
        ));
        let approval_line = policy.lines().position(|l| l.contains("require-human-approval")).unwrap_or(0) as u64 + 1;
        let origin = Origin::https_site(&ca, markdown(Site::new(), "/AGENTS.md", policy)).await?;
        let proxy = TestProxy::start_with(&ca, |config| config.agent.id = Some("research-agent-7".to_owned())).await?;
        let client = proxy.client()?;

        let page = client.get(origin.url("/catalog")).send().await?;
        assert_eq!(page.status(), 200);
        let seen = page.text().await?;
        assert!(seen.contains(&format!("\n{seen_as}: research-agent-7\n")), "the origin saw the agent id: {seen}");

        let expected = Expected {
            decision: "needs_approval",
            source: "AGENTS.md",
            code: "agents_md.requires_human_approval",
            line: Some(approval_line),
            rule: "/orders/*",
            advice: "requires a human to approve",
        };
        let order = client.post(origin.url("/orders/new")).header("accept", "application/json").body("{}");
        let held = block::json(order.send().await?, &expected).await?;
        assert_eq!(origin.hits("/orders/new"), 0, "the held request never reached the origin");
        let read = client.get(origin.url("/orders/new")).send().await?;
        assert_eq!(read.status(), 200, "approval applies to writes only");

        let records = proxy.finish().await?;
        assert_eq!(records.len(), 3, "{records:#?}");
        block::logged(&records, &held, "POST", &expected)?;
    }
    Ok(())
}

/// A path that names a forbidden resource in another spelling (`%70` for `p`, `..` and `.`
/// segments, RFC 3986 §6.2.2; repeated slashes, which nginx merges, SEMANTICS R7; once
/// `//private/x` passed `Disallow: /private`) is decided like the resource it names, for site files and
/// operator rules alike; the log keeps the URL as sent. Raw requests, since clients remove
/// dot segments themselves.
#[tokio::test]
async fn equivalent_spellings_of_a_forbidden_path_are_blocked() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let site = Site::new().file("/robots.txt", ROBOTS).file("/agents.txt", fix_hash(b"/secret DISALLOW\n"));
    let origin = Origin::http_site(site).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        config.rules = vec![agentgate::config::RuleConfig {
            host: "127.0.0.1".to_owned(),
            path: "/admin".to_owned(),
            methods: Vec::new(),
            agents: Vec::new(),
            action: agentgate::policy::operator::RuleAction::Deny,
            reason: String::new(),
        }];
    })
    .await?;
    let cases = [
        ("/%70rivate/page", "source=robots.txt"),
        ("/public/../private/page", "source=robots.txt"),
        ("/public/%2e%2E/private/page", "source=robots.txt"),
        ("/./private/page", "source=robots.txt"),
        ("//private/page", "source=robots.txt"),
        ("/public//../private/page", "source=robots.txt"),
        ("/%73ecret/plans", "source=agents.txt"),
        ("/public/../secret/plans", "source=agents.txt"),
        ("/%61dmin/users", "source=operator"),
        ("/public/page", ""),
    ];
    for (path, source) in cases {
        let request =
            format!("GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", origin.url(path), origin.authority());
        let answer = crate::support::raw::exchange(proxy.addr, request.as_bytes()).await?;
        if source.is_empty() {
            assert!(answer.starts_with("HTTP/1.1 200"), "{path}: {answer}");
        } else {
            assert!(answer.starts_with("HTTP/1.1 403"), "{path} is blocked: {answer}");
            assert!(answer.contains(&format!("agentgate-decision: deny; {source};")), "{path}: {answer}");
        }
    }
    let records = proxy.finish().await?;
    assert_eq!(records.len(), cases.len());
    for (path, source) in cases {
        let logged = for_request(&records, "GET", path);
        assert_eq!(logged.len(), 1, "{path} logged as sent: {records:#?}");
        let outcome = if source.is_empty() { "allow" } else { "deny" };
        assert_eq!(logged[0]["event.action"], outcome, "{path}");
    }
    Ok(())
}

/// SEMANTICS C24: an identification header the agent sent itself is kept, not doubled.
#[tokio::test]
async fn agents_md_agent_header_sent_by_the_agent_is_kept() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let policy = agents_md("## Agent Identification\n- require-agent-header: true\n");
    let origin = Origin::https_site(&ca, markdown(Site::new(), "/AGENTS.md", policy)).await?;
    let proxy = TestProxy::start_with(&ca, |config| config.agent.id = Some("research-agent-7".to_owned())).await?;
    let page = proxy.client()?.get(origin.url("/catalog")).header("X-Agent-Identity", "self-named").send().await?;
    assert_eq!(page.status(), 200);
    let seen = page.text().await?;
    assert_eq!(seen.matches("x-agent-identity:").count(), 1, "{seen}");
    assert!(seen.contains("\nx-agent-identity: self-named\n"), "{seen}");
    assert_eq!(proxy.finish().await?.len(), 1);
    Ok(())
}

/// SEMANTICS C3 and RFC 9309 §2.3.1.2: robots.txt follows a redirect on its origin;
/// AGENTS.md never follows one from HTTPS to plain HTTP (the copy behind it is ignored).
#[tokio::test]
async fn redirects_robots_followed_agents_md_never_downgraded() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let policy = agents_md("## Restrictions\n- disallowed-paths: /private/*\n");
    let plain = Origin::http_site(markdown(
        markdown(Site::new(), "/AGENTS.md", policy.clone()),
        "/.well-known/agents.md",
        policy,
    ))
    .await?;
    let to_plain = |path: &str| plain.url(path);
    let site = Site::new()
        .serve("/robots.txt", 301, &[("location", "/moved/robots.txt")], "")
        .file("/moved/robots.txt", "User-agent: *\nDisallow: /robots-private\n")
        .serve("/AGENTS.md", 302, &[("location", &to_plain("/AGENTS.md"))], "")
        .serve("/.well-known/agents.md", 301, &[("location", &to_plain("/.well-known/agents.md"))], "");
    let origin = Origin::https_site(&ca, site).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;
    let robots = client.get(origin.url("/robots-private/x")).send().await?;
    assert_eq!(robots.status(), 403, "the redirected robots.txt applies");
    let agents_md = client.get(origin.url("/private/x")).send().await?;
    assert_eq!(agents_md.status(), 200, "an AGENTS.md behind an https-to-http redirect does not apply");
    assert_eq!(plain.hits("/AGENTS.md") + plain.hits("/.well-known/agents.md"), 0, "never fetched over http");
    assert_eq!(origin.hits("/moved/robots.txt"), 1);
    assert_eq!(proxy.finish().await?.len(), 2);
    Ok(())
}

/// SEMANTICS R9: an escape never unlocks what robots.txt disallows, through the
/// real proxy over plain HTTP (raw request line) and MITM'd HTTPS (curl `--path-as-is`). A real
/// rule of a large site, `Disallow: /*/all_posts$`, must stop `//all%5Fposts` (decided decoded
/// with its slashes kept); `Disallow: /%7Ejoe/` must stop `/~joe/x` (the pattern decoded); and
/// `Disallow: /private` must stop `/%2fprivate`, which nginx serves as `//private`. Each is a
/// 403 citing the rule as written, and none reaches the origin.
#[tokio::test]
async fn escapes_never_unlock_a_robots_disallow() -> TestResult {
    const ROBOTS_25: &str = "User-agent: *\nDisallow: /*/all_posts$\nDisallow: /%7Ejoe/\nDisallow: /private\n";
    let cases: [(&str, Option<(u32, &str)>); 7] = [
        ("//all%5Fposts", Some((2, "Disallow: /*/all_posts$"))),
        ("/~joe/x", Some((3, "Disallow: /%7Ejoe/"))),
        ("/%7ejoe/x", Some((3, "Disallow: /%7Ejoe/"))),
        ("/%2fprivate", Some((4, "Disallow: /private"))),
        ("/%2Fprivate", Some((4, "Disallow: /private"))),
        ("/search?q=%2Fprivate", None),
        ("/~jane/x", None),
    ];
    let ca = TestCa::new("origin CA")?;
    for over in [Over::Http, Over::Https] {
        let origin = origin_for(over, &ca, Site::new().file("/robots.txt", ROBOTS_25)).await?;
        let proxy = TestProxy::start(&ca).await?;
        let mut sent = Vec::new();
        for (path, blocked) in cases {
            let (status, head, body) = match over {
                Over::Http => {
                    let request = format!(
                        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                        origin.url(path),
                        origin.authority()
                    );
                    let answer = crate::support::raw::exchange(proxy.addr, request.as_bytes()).await?;
                    let (head, body) = answer.split_once("\r\n\r\n").unwrap_or((answer.as_str(), ""));
                    let status = head.get(9..12).unwrap_or_default().parse::<u16>()?;
                    (status, head.to_ascii_lowercase(), body.to_owned())
                }
                Over::Https => {
                    let ca_path = proxy.ca_path.display().to_string();
                    let args = ["-x", &proxy.url(), "--cacert", &ca_path, "--path-as-is"];
                    let url = origin.url(path);
                    let out = crate::support::curl::curl(&[&args[..], &[url.as_str()]].concat()).await?;
                    (out.status, out.headers.to_ascii_lowercase(), String::from_utf8_lossy(&out.body).into_owned())
                }
            };
            sent.push((path, blocked.is_some()));
            match blocked {
                Some((line, rule)) => {
                    assert_eq!(status, 403, "{over:?} {path} is blocked: {head}\n{body}");
                    let decision =
                        format!("agentgate-decision: deny; source=robots.txt; line={line}; code=robots.disallow;");
                    assert!(head.contains(&decision), "{over:?} {path}: {head}");
                    assert!(body.contains(rule), "{over:?} {path}: the answer quotes {rule:?} as written: {body}");
                    let origin_path = path.split('?').next().unwrap_or(path);
                    assert_eq!(origin.hits(origin_path), 0, "{over:?} {path} never reached the origin");
                }
                None => {
                    assert_eq!(status, 200, "{over:?} {path} is allowed: {head}\n{body}");
                    assert!(body.starts_with("page GET "), "{over:?} {path}: the origin answered: {body}");
                }
            }
        }
        let records = proxy.finish().await?;
        assert_eq!(records.len(), sent.len(), "{over:?}: one record per request: {records:#?}");
        for (path, blocked) in sent {
            // The log keeps the path as sent and redacts the query.
            let sent_path = path.split('?').next().unwrap_or(path);
            let logged: Vec<&Value> = records
                .iter()
                .filter(|r| {
                    r["url.full"].as_str().and_then(|u| u.split('?').next()).is_some_and(|u| u.ends_with(sent_path))
                })
                .collect();
            assert_eq!(logged.len(), 1, "{over:?} {path} logged as sent: {records:#?}");
            assert_eq!(logged[0]["event.action"], if blocked { "deny" } else { "allow" }, "{over:?} {path}");
        }
    }
    Ok(())
}
