//! The decision log end to end: one line per request with the right outcome, reasons,
//! method, redacted URL and status, and no credential anywhere; monitor mode; operator rules
//! and bypass hosts; the CONNECT-time decision for passthrough hosts; and shutdown with a
//! hundred requests in flight still leaving one line per request.

use std::collections::HashSet;
use std::time::Duration;

use agentgate::config::RuleConfig;
use agentgate::policy::operator::{Mode, RuleAction};
use futures_util::future::join_all;

use crate::support::block::{self, Expected};
use crate::support::log::{by_id, for_request};
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::raw::connect_tunnel;
use crate::support::{TestProxy, TestResult, header};

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

fn robots_denial() -> Expected<'static> {
    Expected {
        decision: "deny",
        source: "robots.txt",
        code: "robots.disallow",
        line: Some(2),
        rule: "Disallow: /private",
        advice: "robots.txt disallows this path",
    }
}

#[tokio::test]
async fn every_request_has_one_redacted_line_without_credentials() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", ROBOTS)).await?;
    let tls_origin = Origin::https_site(&ca, Site::new().file("/robots.txt", ROBOTS)).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;
    let with_secrets = |builder: reqwest::RequestBuilder| {
        builder
            .header("authorization", "Bearer authz-value-4711")
            .header("cookie", "session=cookie-value-4711")
            .header("user-agent", "ExampleAgent/2.0")
    };

    let allowed = with_secrets(client.get(origin.url("/search?token=secret&page=2"))).send().await?;
    assert_eq!(allowed.status(), 200);
    // The writer flushes when idle: the line shows up while the proxy runs.
    let first = proxy.log_lines(1).await?;
    assert_eq!(first.len(), 1, "{first:#?}");
    assert_eq!(first[0]["http.request.method"], "GET");
    let denied = with_secrets(client.post(origin.url("/private/form?token=secret"))).body("x=1").send().await?;
    let denied_id = block::plain(denied, &robots_denial()).await?;
    let tls_allowed = with_secrets(client.get(tls_origin.url("/search?token=secret"))).send().await?;
    assert_eq!(tls_allowed.status(), 200);
    let tls_denied = with_secrets(client.get(tls_origin.url("/private?token=secret"))).send().await?;
    let tls_denied_id = block::plain(tls_denied, &robots_denial()).await?;

    let (records, raw) = proxy.finish_with_text().await?;
    assert_eq!(records.len(), 4, "one line per request, none for policy fetches: {records:#?}");

    let allowed = for_request(&records, "GET", "/search?token=REDACTED&page=REDACTED");
    assert_eq!(allowed.len(), 1, "{records:#?}");
    let allowed = allowed[0];
    assert_eq!(allowed["event.action"], "allow");
    assert_eq!(allowed["http.response.status_code"], 200);
    assert_eq!(allowed["url.full"], origin.url("/search?token=REDACTED&page=REDACTED"));
    assert_eq!(allowed["user_agent.original"], "ExampleAgent/2.0");
    assert_eq!(allowed["agentgate.mode"], "enforce");
    assert_eq!(allowed["client.address"], "127.0.0.1");
    assert!(allowed["event.id"].as_str().is_some_and(|id| id.len() == 32));

    block::logged(&records, &denied_id, "POST", &robots_denial())?;
    let denied = by_id(&records, &denied_id)?;
    assert_eq!(denied["url.full"], origin.url("/private/form?token=REDACTED"));
    let reason = &denied["agentgate.reasons"][0];
    assert_eq!(reason["rule"], "Disallow: /private");
    assert!(reason["digest"].as_str().is_some_and(|d| d.len() == 64), "the file's SHA-256: {reason}");

    let tls_allowed = for_request(&records, "GET", "/search?token=REDACTED");
    assert_eq!(tls_allowed.len(), 1);
    assert_eq!(tls_allowed[0]["url.full"], tls_origin.url("/search?token=REDACTED"));
    assert_eq!(tls_allowed[0]["event.action"], "allow");
    block::logged(&records, &tls_denied_id, "GET", &robots_denial())?;
    assert_eq!(by_id(&records, &tls_denied_id)?["url.full"], tls_origin.url("/private?token=REDACTED"));

    let ids: HashSet<&str> = records.iter().filter_map(|r| r["event.id"].as_str()).collect();
    assert_eq!(ids.len(), 4, "distinct event ids");
    for secret in ["secret", "authz-value-4711", "cookie-value-4711", "Bearer", "session="] {
        assert!(!raw.contains(secret), "{secret:?} must not reach the decision log: {raw}");
    }
    Ok(())
}

#[tokio::test]
async fn monitor_mode_forwards_and_logs_would_deny() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    for https in [false, true] {
        let site = Site::new().file("/robots.txt", ROBOTS);
        let origin = if https { Origin::https_site(&ca, site).await? } else { Origin::http_site(site).await? };
        let proxy = TestProxy::start_with(&ca, |config| config.mode = Mode::Monitor).await?;
        let client = proxy.client()?;
        let response = client.get(origin.url("/private/page")).send().await?;
        assert_eq!(response.status(), 200, "monitor mode forwards");
        assert!(header(&response, "agentgate-decision").is_empty(), "nothing blocked, no decision header");
        assert!(response.text().await?.starts_with("page GET /private/page\n"));
        assert_eq!(origin.hits("/private/page"), 1);
        let open = client.get(origin.url("/public")).send().await?;
        assert_eq!(open.status(), 200);

        let records = proxy.finish().await?;
        assert_eq!(records.len(), 2, "{records:#?}");
        let would = for_request(&records, "GET", "/private/page");
        assert_eq!(would.len(), 1);
        let would = would[0];
        assert_eq!(would["event.action"], "would_deny", "{would:#}");
        assert_eq!(would["agentgate.mode"], "monitor");
        assert_eq!(would["http.response.status_code"], 200, "the origin's answer");
        let reason = &would["agentgate.reasons"][0];
        assert_eq!((reason["source"].as_str(), reason["code"].as_str()), (Some("robots.txt"), Some("robots.disallow")));
        assert_eq!(reason["line"], 2);
        assert_eq!(for_request(&records, "GET", "/public")[0]["event.action"], "allow");
    }
    Ok(())
}

#[tokio::test]
async fn operator_rules_deny_and_bypass_hosts_skip_site_policies() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    // The rule's origin (127.0.0.1) allows everything; the bypassed one (localhost) forbids
    // everything in every file it has.
    let ruled = Origin::http_site(Site::new()).await?;
    let forbidding = Site::new()
        .file("/robots.txt", "User-agent: *\nDisallow: /\n")
        .serve("/agents.txt", 503, &[], "")
        .file("/automation-preferences.txt", "user-agent: *\nscope: /\nallowed-methods: HEAD\n");
    let bypassed = Origin::https_site(&ca, forbidding).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        config.rules = vec![RuleConfig {
            host: "127.0.0.1".to_owned(),
            path: "/admin".to_owned(),
            methods: Vec::new(),
            agents: Vec::new(),
            action: RuleAction::Deny,
            reason: "agents stay out of the admin console".to_owned(),
        }];
        config.bypass_hosts = vec!["localhost".to_owned()];
    })
    .await?;
    let client = proxy.client()?;

    let expected = Expected {
        decision: "deny",
        source: "operator",
        code: "operator.deny",
        // Config rules are cited by number (`[[rules]] #1`), not by a file line.
        line: None,
        rule: "[[rules]] #1 host=127.0.0.1 path=/admin deny: agents stay out of the admin console",
        advice: "operator",
    };
    let denied = block::plain(client.get(ruled.url("/admin/users")).send().await?, &expected).await?;
    let denied_json =
        block::json(client.get(ruled.url("/admin")).header("accept", "application/json").send().await?, &expected)
            .await?;
    assert_eq!(client.get(ruled.url("/home")).send().await?.status(), 200, "the rule covers /admin only");

    let through = client.post(bypassed.url("/v1/chat")).body("{}").send().await?;
    assert_eq!(through.status(), 200, "a bypass host skips every site policy");
    for (path, fetches) in bypassed.policy_fetches() {
        assert_eq!(fetches, 0, "no policy fetch at a bypass host ({path})");
    }

    let records = proxy.finish().await?;
    assert_eq!(records.len(), 4, "bypassed requests are still logged: {records:#?}");
    block::logged(&records, &denied, "GET", &expected)?;
    block::logged(&records, &denied_json, "GET", &expected)?;
    let bypass = for_request(&records, "POST", "/v1/chat");
    assert_eq!(bypass.len(), 1);
    assert_eq!(bypass[0]["event.action"], "allow");
    assert_eq!(bypass[0]["http.response.status_code"], 200);
    assert_eq!(bypass[0]["agentgate.reasons"][0]["source"], "operator");
    assert_eq!(bypass[0]["agentgate.reasons"][0]["code"], "operator.bypass");
    Ok(())
}

/// A passthrough host's tunnel is opaque, so the gate decides at CONNECT on `/`: a
/// robots.txt that disallows `/` refuses the CONNECT itself, logged with method CONNECT.
#[tokio::test]
async fn passthrough_connect_is_refused_when_robots_disallows_root() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let closed = Origin::https_site(&ca, Site::new().file("/robots.txt", "User-agent: *\nDisallow: /\n")).await?;
    let proxy =
        TestProxy::start_with(&ca, |config| config.mitm.set_passthrough_hosts(vec!["localhost".to_owned()])).await?;

    let (_stream, head) = connect_tunnel(proxy.addr, &closed.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 403"), "the CONNECT is refused: {head}");
    let decision = head
        .lines()
        .find_map(|l| l.strip_prefix("agentgate-decision: "))
        .ok_or_else(|| format!("no agentgate-decision header: {head}"))?;
    assert!(decision.starts_with("deny; source=robots.txt; line=2; code=robots.disallow; record="), "{decision}");
    let record = decision.rsplit("record=").next().unwrap_or_default().to_owned();
    assert_eq!(closed.hits("/"), 0, "nothing was tunnelled");

    // Through curl too, as an agent would see it.
    let curl = crate::support::curl::curl(&[
        "--proxy",
        &proxy.url(),
        "--cacert",
        &ca.pem_path.to_string_lossy(),
        &closed.url("/"),
    ])
    .await;
    let curl_refused = match curl {
        // curl reports a refused CONNECT as a failure naming the status.
        Err(error) => error.to_string().contains("403"),
        Ok(output) => output.status == 403,
    };
    assert!(curl_refused, "curl sees the CONNECT refused");

    let records = proxy.finish().await?;
    let line = by_id(&records, &record)?;
    assert_eq!(line["http.request.method"], "CONNECT", "{line:#}");
    assert_eq!(line["event.action"], "deny");
    assert_eq!(line["http.response.status_code"], 403);
    assert_eq!(line["agentgate.reasons"][0]["source"], "robots.txt");
    assert!(records.iter().all(|r| r["http.request.method"] == "CONNECT"), "{records:#?}");
    Ok(())
}

/// A passthrough host whose policies allow `/` gets its tunnel, logged once as CONNECT.
#[tokio::test]
async fn passthrough_connect_is_allowed_and_logged() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let open = Origin::https_site(&ca, Site::new().file("/robots.txt", "User-agent: *\nDisallow: /private\n")).await?;
    let proxy =
        TestProxy::start_with(&ca, |config| config.mitm.set_passthrough_hosts(vec!["localhost".to_owned()])).await?;
    // The tunnel is not intercepted: the client must trust the origin's own CA.
    let client = proxy.passthrough_client(&ca)?;
    let response = client.get(open.url("/private/inside")).send().await?;
    assert_eq!(response.status(), 200, "inside a passthrough tunnel nothing is decided per path");
    // An opaque tunnel holds shutdown open until its grace runs out; closing the client's
    // connection ends it.
    drop(response);
    drop(client);
    let records = proxy.finish().await?;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["http.request.method"], "CONNECT");
    assert_eq!(records[0]["event.action"], "allow");
    assert_eq!(records[0]["http.response.status_code"], 200);
    Ok(())
}

/// Shutdown (what SIGTERM triggers) with 100 requests held at the origin: the proxy drains
/// them, then flushes the log, which holds exactly one line per request.
#[tokio::test]
async fn shutdown_with_a_hundred_requests_in_flight_logs_each_once() -> TestResult {
    const IN_FLIGHT: usize = 100;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", ROBOTS)).await?;
    let mut proxy = TestProxy::start_with(&ca, |config| config.shutdown_grace = Duration::from_secs(60)).await?;
    let mut requests = Vec::new();
    for i in 0..IN_FLIGHT {
        let client = proxy.client()?;
        let url = origin.url(&format!("/hold-all?n={i}"));
        requests.push(tokio::spawn(async move { client.get(url).send().await?.text().await }));
    }
    origin.held(IN_FLIGHT).await;
    let log_path = proxy.log_path.clone();
    let stopped = proxy.shut_down().ok_or("the proxy was already shut down")?;
    origin.release_all();
    for body in join_all(requests).await {
        assert_eq!(body??, "released", "every in-flight request completes");
    }
    stopped.await?;

    let records = crate::support::log::read(&log_path)?;
    assert_eq!(records.len(), IN_FLIGHT, "one line per request");
    let ids: HashSet<&str> = records.iter().filter_map(|r| r["event.id"].as_str()).collect();
    assert_eq!(ids.len(), IN_FLIGHT, "distinct event ids");
    for record in &records {
        assert_eq!(record["event.action"], "allow", "{record:#}");
        assert_eq!(record["http.response.status_code"], 200, "{record:#}");
        assert_eq!(record["url.full"].as_str().map(|u| u.ends_with("/hold-all?n=REDACTED")), Some(true));
    }
    Ok(())
}
