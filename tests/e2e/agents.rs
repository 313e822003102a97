//! Who is asking, end to end: proxy authentication (a 407 challenge, then success with
//! credentials, over plain HTTP and CONNECT, with reqwest, curl and raw sockets; the
//! credential never reaches the origin or the log), agents told apart by client address,
//! trust levels (C22), purposes against automation-preferences (D13), per-agent monitor mode,
//! and block answers to HEAD without a body on HTTP/1.1 and h2.

use std::net::IpAddr;

use agentgate::agents::AgentConfig;
use agentgate::config::Config;
use agentgate::policy::operator::Mode;
use serde_json::{Value, json};

use crate::support::log::for_request;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::raw::exchange;
use crate::support::{TestProxy, TestResult, curl::curl, header};

/// An `[[agents]]` entry with a token.
pub fn agent(id: &str, token: &str) -> AgentConfig {
    AgentConfig { id: Some(id.to_owned()), token: Some(token.to_owned()), ..AgentConfig::default() }
}

/// A reqwest client through `proxy` with `id:token` as proxy credentials (Basic).
pub fn client_as(proxy: &TestProxy, id: &str, token: &str) -> TestResult<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .proxy(reqwest::Proxy::all(proxy.url())?.basic_auth(id, token))
        .tls_certs_only([reqwest::Certificate::from_pem(proxy.ca_pem.as_bytes())?])
        .build()?)
}

fn requires_alpha(config: &mut Config) {
    config.agents = vec![agent("alpha", "alpha-secret")];
    config.auth.required = true;
}

/// The records of one agent.
fn of_agent<'a>(records: &'a [Value], id: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["agentgate.agent"] == id).collect()
}

#[tokio::test]
async fn auth_required_challenges_then_accepts_credentials_over_http_and_connect() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let http = Origin::http_site(Site::new()).await?;
    let https = Origin::https_site(&ca, Site::new()).await?;
    let proxy = TestProxy::start_with(&ca, requires_alpha).await?;

    // No credentials: a real 407 challenge on plain HTTP...
    let anonymous = proxy.client()?.get(http.url("/page")).send().await?;
    assert_eq!(anonymous.status(), 407);
    assert_eq!(header(&anonymous, "proxy-authenticate"), "Basic realm=\"agentgate\"");
    let decision = header(&anonymous, "agentgate-decision");
    assert!(decision.starts_with("deny; source=operator; code=auth.required; record="), "{decision}");
    // ... and on CONNECT, before any 200.
    let connect = format!("CONNECT {0} HTTP/1.1\r\nHost: {0}\r\nConnection: close\r\n\r\n", https.authority());
    let answer = exchange(proxy.addr, connect.as_bytes()).await?;
    assert!(answer.starts_with("HTTP/1.1 407"), "{answer}");
    assert!(answer.to_ascii_lowercase().contains("proxy-authenticate: basic realm=\"agentgate\""), "{answer}");
    // Identity comes before the network guard: an unknown client learns nothing about a
    // denied destination, and nothing is looked up for it.
    let metadata = b"CONNECT 169.254.169.254:443 HTTP/1.1\r\nHost: 169.254.169.254:443\r\nConnection: close\r\n\r\n";
    let answer = exchange(proxy.addr, metadata).await?;
    assert!(answer.starts_with("HTTP/1.1 407"), "{answer}");

    // A wrong token is a 407 too, on both.
    let wrong = client_as(&proxy, "alpha", "guess")?.get(http.url("/page")).send().await?;
    assert_eq!(wrong.status(), 407);
    assert!(header(&wrong, "agentgate-decision").contains("code=auth.invalid"));
    assert!(client_as(&proxy, "alpha", "guess")?.get(https.url("/page")).send().await.is_err(), "CONNECT refused");

    // With credentials: through, and the origin never sees Proxy-Authorization.
    let alpha = client_as(&proxy, "alpha", "alpha-secret")?;
    for url in [http.url("/page"), https.url("/page")] {
        let response = alpha.get(&url).send().await?;
        assert_eq!(response.status(), 200, "{url}");
        let seen = response.text().await?;
        assert!(seen.starts_with("page GET /page\n"), "{seen}");
        assert!(!seen.contains("proxy-authorization"), "the origin saw no credential: {seen}");
    }

    // curl sends the credentials from the proxy URL, as HTTPS_PROXY=http://id:token@host does.
    let with_creds = format!("http://alpha:alpha-secret@{}", proxy.addr);
    let ca_path = proxy.ca_path.display().to_string();
    let curl_runs = [
        vec![proxy.url(), http.url("/curl-anon")],
        vec![with_creds.clone(), http.url("/curl-http")],
        vec![with_creds, "--cacert".to_owned(), ca_path, https.url("/curl-https")],
    ];
    for (args, expected) in curl_runs.iter().zip([407, 200, 200]) {
        let args: Vec<&str> = std::iter::once("-x").chain(args.iter().map(String::as_str)).collect();
        let out = curl(&args).await?;
        assert_eq!(out.status, expected, "curl {args:?}: {}", out.headers);
        if expected == 200 {
            let body = String::from_utf8_lossy(&out.body);
            assert!(!body.contains("proxy-authorization"), "{body}");
        }
    }

    let (records, text) = proxy.finish_with_text().await?;
    assert!(!text.contains("alpha-secret") && !text.contains("YWxwaGE6"), "no credential in the log: {text}");
    assert!(!text.contains("guess"), "no rejected credential in the log either");
    let refused: Vec<&Value> = records.iter().filter(|r| r["http.response.status_code"] == 407).collect();
    assert_eq!(refused.len(), 6, "five from reqwest, one from curl: {records:#?}");
    // No credentials is a challenge, not a refusal; a wrong token is refused.
    let action = |r: &&Value| (r["event.action"].clone(), r["agentgate.reasons"][0]["code"].clone());
    let challenges = refused.iter().filter(|r| action(r) == (json!("auth_challenge"), json!("auth.required"))).count();
    let wrong_token = refused.iter().filter(|r| action(r) == (json!("deny"), json!("auth.invalid"))).count();
    assert_eq!((challenges, wrong_token), (4, 2), "{refused:#?}");
    let passed = of_agent(&records, "alpha");
    assert_eq!(passed.len(), 4, "two from reqwest, two from curl: {records:#?}");
    assert!(passed.iter().all(|r| r["event.action"] == "allow" && r["http.response.status_code"] == 200));
    Ok(())
}

/// A client bound to one loopback address (Linux routes all of 127.0.0.0/8 to lo).
fn client_from(proxy: &TestProxy, address: &str) -> TestResult<reqwest::Client> {
    Ok(proxy.client_builder()?.local_address(address.parse::<IpAddr>()?).build()?)
}

fn agents_md(extra: &str) -> String {
    format!("# AGENTS.md\n\n## Identity\n- site: localhost\n\n{extra}")
}

fn markdown(site: Site, path: &str, body: String) -> Site {
    site.serve(path, 200, &[("content-type", "text/markdown")], body)
}

#[tokio::test]
async fn agents_matched_by_client_address_get_their_trust_level() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    // Line 7: minimum-trust-level.
    let site = markdown(Site::new(), "/AGENTS.md", agents_md("## Trust Requirements\n- minimum-trust-level: 2\n"));
    let origin = Origin::https_site(&ca, site).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        let trusted = AgentConfig { trust_level: 3, ..network_agent("trusted", "127.0.0.2/32") };
        config.agents = vec![trusted, network_agent("untrusted", "127.0.0.3")];
        config.auth.required = true;
    })
    .await?;

    let trusted = client_from(&proxy, "127.0.0.2")?.get(origin.url("/page")).send().await?;
    assert_eq!(trusted.status(), 200);
    let untrusted = client_from(&proxy, "127.0.0.3")?.get(origin.url("/page")).send().await?;
    assert_eq!(untrusted.status(), 403);
    let decision = header(&untrusted, "agentgate-decision");
    assert!(decision.starts_with("deny; source=AGENTS.md; line=7; code=agents_md.trust_level;"), "{decision}");
    assert_eq!(origin.hits("/page"), 1, "only the trusted agent reached the origin");

    let records = proxy.finish().await?;
    let trusted = of_agent(&records, "trusted");
    let untrusted = of_agent(&records, "untrusted");
    assert_eq!((trusted.len(), untrusted.len()), (1, 1), "{records:#?}");
    assert_eq!(trusted[0]["event.action"], "allow");
    assert_eq!(trusted[0]["client.address"], "127.0.0.2");
    assert_eq!(untrusted[0]["event.action"], "deny");
    assert_eq!(untrusted[0]["client.address"], "127.0.0.3");
    assert_eq!(untrusted[0]["agentgate.reasons"][0]["code"], "agents_md.trust_level");
    Ok(())
}

fn network_agent(id: &str, network: &str) -> AgentConfig {
    AgentConfig {
        id: Some(id.to_owned()),
        clients: vec![
            network.parse().unwrap_or_else(|_| network.parse::<IpAddr>().map(Into::into).expect("a test address")),
        ],
        ..AgentConfig::default()
    }
}

#[tokio::test]
async fn purposes_declared_per_request_are_checked_and_stripped() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let autoctl = "user-agent: *\nscope: /\nallowed-methods: GET\nallowed-purposes: search\n";
    let origin = Origin::http_site(Site::new().file("/automation-preferences.txt", autoctl)).await?;
    let proxy = TestProxy::start_with(&ca, |config| config.agent.purposes = vec!["search".to_owned()]).await?;
    let client = proxy.client()?;

    let configured = client.get(origin.url("/configured")).send().await?;
    assert_eq!(configured.status(), 200, "the configured purpose is listed");
    let declared = client.get(origin.url("/declared")).header("agentgate-purpose", "search").send().await?;
    assert_eq!(declared.status(), 200);
    let seen = declared.text().await?;
    assert!(!seen.contains("agentgate-purpose"), "stripped before forwarding: {seen}");
    let outside = client.get(origin.url("/training")).header("agentgate-purpose", "search, train-ai").send().await?;
    assert_eq!(outside.status(), 403);
    let decision = header(&outside, "agentgate-decision");
    assert!(
        decision.starts_with("deny; source=automation-preferences.txt; line=4; code=autoctl.purpose"),
        "{decision}"
    );
    assert_eq!(origin.hits("/training"), 0);

    let records = proxy.finish().await?;
    let denied = for_request(&records, "GET", "/training");
    assert_eq!(denied.len(), 1);
    assert_eq!(denied[0]["agentgate.reasons"][0]["line"], 4);
    assert_eq!(denied[0]["agentgate.purposes"], serde_json::json!(["search", "train-ai"]), "the declared purposes");
    Ok(())
}

#[tokio::test]
async fn a_monitor_mode_agent_passes_where_an_enforce_mode_agent_is_blocked() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", "User-agent: *\nDisallow: /private\n")).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        config.agents = vec![
            agent("enforcer", "e-token"),
            AgentConfig { mode: Some(Mode::Monitor), ..agent("sandbox", "s-token") },
        ];
    })
    .await?;

    let enforced = client_as(&proxy, "enforcer", "e-token")?.get(origin.url("/private/x")).send().await?;
    assert_eq!(enforced.status(), 403);
    let monitored = client_as(&proxy, "sandbox", "s-token")?.get(origin.url("/private/x")).send().await?;
    assert_eq!(monitored.status(), 200);
    assert_eq!(origin.hits("/private/x"), 1);

    let records = proxy.finish().await?;
    let enforcer = of_agent(&records, "enforcer");
    let sandbox = of_agent(&records, "sandbox");
    assert_eq!((enforcer.len(), sandbox.len()), (1, 1), "{records:#?}");
    assert_eq!(enforcer[0]["event.action"], "deny");
    assert_eq!(enforcer[0]["agentgate.mode"], "enforce");
    assert_eq!(sandbox[0]["event.action"], "would_deny");
    assert_eq!(sandbox[0]["agentgate.mode"], "monitor");
    assert_eq!(sandbox[0]["agentgate.reasons"][0], enforcer[0]["agentgate.reasons"][0], "the same reasons");
    Ok(())
}

#[tokio::test]
async fn head_of_a_blocked_path_has_no_body_over_http1_and_h2() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin =
        Origin::https_site(&ca, Site::new().file("/robots.txt", "User-agent: *\nDisallow: /private\n")).await?;
    let proxy = TestProxy::start(&ca).await?;
    let h1 = proxy.client_builder()?.http1_only().build()?;
    let h2 = proxy.client()?;
    for (client, version) in [(h1, reqwest::Version::HTTP_11), (h2, reqwest::Version::HTTP_2)] {
        let response = client.head(origin.url("/private/x")).send().await?;
        assert_eq!(response.version(), version);
        assert_eq!(response.status(), 403);
        assert!(header(&response, "agentgate-decision").starts_with("deny; source=robots.txt; line=2;"));
        let body = response.bytes().await?;
        assert!(body.is_empty(), "{version:?}: a HEAD answer has no body, got {} bytes", body.len());
    }
    let out = curl(&[
        "-x",
        &proxy.url(),
        "--cacert",
        &proxy.ca_path.display().to_string(),
        "--http2",
        "-I",
        &origin.url("/private/x"),
    ])
    .await?;
    assert_eq!((out.status, out.version.as_str()), (403, "2"), "curl reads the h2 HEAD answer cleanly");
    let records = proxy.finish().await?;
    assert!(for_request(&records, "HEAD", "/private/x").iter().all(|r| r["http.response.status_code"] == 403));
    Ok(())
}

/// SEMANTICS D12: inside a passthrough tunnel the methods cannot be seen, so a host's
/// automation-preferences `allowed-methods` cannot be enforced; the CONNECT's record says so.
#[tokio::test]
async fn passthrough_tunnel_to_a_host_with_automation_preferences_logs_unenforceable() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let autoctl = "user-agent: *\nscope: /\nallowed-methods: GET\n";
    let origin = Origin::https_site(&ca, Site::new().file("/automation-preferences.txt", autoctl)).await?;
    let proxy =
        TestProxy::start_with(&ca, |config| config.mitm.set_passthrough_hosts(vec!["localhost".to_owned()])).await?;
    // Not intercepted: the client trusts the origin's own CA.
    let client = proxy.passthrough_client(&ca)?;
    let response = client.post(origin.url("/form")).send().await?;
    assert_eq!(response.status(), 200, "a POST inside the tunnel is not seen");
    // An opaque tunnel holds shutdown open; closing the client's connection ends it.
    drop(response);
    drop(client);
    let records = proxy.finish().await?;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["http.request.method"], "CONNECT");
    assert_eq!(records[0]["event.action"], "allow");
    let reasons = records[0]["agentgate.reasons"].as_array().cloned().unwrap_or_default();
    assert!(reasons.iter().any(|r| r["code"] == "autoctl.unenforceable"), "{reasons:#?}");
    Ok(())
}

/// SEMANTICS C23: `authentication: required` (line 7) is a reason on every decision for the
/// host, saying whether the request carried `Authorization` or `Cookie`; with
/// `[agents_md] strict_authentication` a write without either is denied before the origin.
#[tokio::test]
async fn c23_authentication_required_is_logged_and_strict_mode_denies_an_unauthenticated_write() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let body = "# AGENTS.md\n\n## Identity\n- site: localhost\n\n## Trust Requirements\n- authentication: required\n\n\
                ## Allowed Actions\n- access-api: true\n";
    let site = Site::new().serve("/AGENTS.md", 200, &[("content-type", "text/markdown")], body);
    let origin = Origin::https_site(&ca, site).await?;
    let expected = crate::support::block::Expected {
        decision: "deny",
        source: "AGENTS.md",
        code: "agents_md.authentication_missing",
        line: Some(7),
        rule: "authentication: required",
        advice: "requires authentication",
    };

    let strict = TestProxy::start_with(&ca, |config| config.agents_md.strict_authentication = true).await?;
    let client = strict.client()?;
    let json = ("content-type", "application/json");
    let denied = client.post(origin.url("/api/items")).header(json.0, json.1).body("{}").send().await?;
    let record = crate::support::block::plain(denied, &expected).await?;
    assert_eq!(origin.hits("/api/items"), 0, "the unauthenticated write never reached the origin");
    let authorized = client.post(origin.url("/api/items")).header(json.0, json.1).header("authorization", "Bearer t");
    assert_eq!(authorized.body("{}").send().await?.status(), 200);
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200, "reads pass in strict mode");
    assert_eq!(origin.hits("/api/items"), 1);
    let records = strict.finish().await?;
    crate::support::block::logged(&records, &record, "POST", &expected)?;
    let codes = |record: &Value| -> Vec<String> {
        record["agentgate.reasons"].as_array().into_iter().flatten().map(|r| r["code"].to_string()).collect()
    };
    let posts = for_request(&records, "POST", "/api/items");
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[1]["event.action"], "allow");
    assert!(codes(posts[1]).contains(&"\"agents_md.authentication_present\"".to_owned()), "{}", posts[1]);
    let read = for_request(&records, "GET", "/page");
    assert!(codes(read[0]).contains(&"\"agents_md.authentication_missing\"".to_owned()), "{}", read[0]);

    // Without strict mode the same write passes, and the log still says it was unauthenticated.
    let advisory = TestProxy::start(&ca).await?;
    let client = advisory.client()?;
    let write = client.post(origin.url("/api/items")).header(json.0, json.1).body("{}").send().await?;
    assert_eq!(write.status(), 200);
    assert_eq!(origin.hits("/api/items"), 2);
    let records = advisory.finish().await?;
    let posts = for_request(&records, "POST", "/api/items");
    assert_eq!(posts[0]["event.action"], "allow");
    assert!(codes(posts[0]).contains(&"\"agents_md.authentication_missing\"".to_owned()), "{}", posts[0]);
    Ok(())
}
