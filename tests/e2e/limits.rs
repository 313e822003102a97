//! Limits end to end: AGENTS.md `requests-per-minute` per (agent, host) with each agent its
//! own budget, agents.txt `limit=N` per rule, `concurrent-sessions` refusing the excess at once
//! and giving slots back when requests finish or the client hangs up, and the response-time
//! download check (C17). Every over-limit request is a 429 with `Retry-After` that never
//! reaches the origin, names the limit in `agentgate-decision`, the body and the log, and is
//! counted per agent by `agentgate audit summary`.

use agentgate::policy::agents_txt::fix_hash;
use serde_json::Value;

use crate::agents::{agent, client_as};
use crate::support::log::for_request;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult, header};

pub(crate) fn agents_md(extra: &str) -> String {
    format!("# AGENTS.md\n\n## Identity\n- site: localhost\n\n{extra}")
}

pub(crate) fn markdown_site(body: String) -> Site {
    Site::new().serve("/AGENTS.md", 200, &[("content-type", "text/markdown")], body)
}

/// Checks a 429: `Retry-After` in whole seconds, the limit in `agentgate-decision`, the body
/// naming the rule. Returns the record id.
pub(crate) async fn over_limit(response: reqwest::Response, decision_prefix: &str, rule: &str) -> TestResult<String> {
    assert_eq!(response.status(), 429);
    let retry_after: u64 = header(&response, "retry-after").parse()?;
    assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
    let decision = header(&response, "agentgate-decision");
    assert!(decision.starts_with(decision_prefix), "{decision:?} should start with {decision_prefix:?}");
    let record = decision.rsplit("record=").next().unwrap_or_default().to_owned();
    let body = response.text().await?;
    assert!(body.contains(rule) && body.contains("Retry after"), "{body}");
    Ok(record)
}

#[tokio::test]
async fn agents_md_requests_per_minute_three_then_429_and_each_agent_has_its_own_budget() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    // Line 7: requests-per-minute.
    let origin =
        Origin::https_site(&ca, markdown_site(agents_md("## Rate Limits\n- requests-per-minute: 3\n"))).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        config.agents = vec![agent("alpha", "a-token"), agent("beta", "b-token")];
    })
    .await?;
    let alpha = client_as(&proxy, "alpha", "a-token")?;
    let beta = client_as(&proxy, "beta", "b-token")?;

    for _ in 0..3 {
        assert_eq!(alpha.get(origin.url("/page")).send().await?.status(), 200);
    }
    let prefix = "rate_limited; source=AGENTS.md; line=7; code=agents_md.rate_limit; window=60s; record=";
    let record = over_limit(alpha.get(origin.url("/page")).send().await?, prefix, "requests-per-minute: 3").await?;
    assert_eq!(origin.hits("/page"), 3, "the over-limit request never reached the origin");
    for _ in 0..3 {
        assert_eq!(beta.get(origin.url("/page")).send().await?.status(), 200, "beta has its own three");
    }
    assert_eq!(beta.get(origin.url("/page")).send().await?.status(), 429);
    assert_eq!(origin.hits("/page"), 6);

    let (records, text) = proxy.finish_with_text().await?;
    let line = crate::support::log::by_id(&records, &record)?;
    assert_eq!(line["event.action"], "rate_limited");
    assert_eq!(line["agentgate.agent"], "alpha");
    assert_eq!(line["http.response.status_code"], 429);
    assert_eq!(line["agentgate.reasons"][0]["code"], "agents_md.rate_limit");
    assert_eq!(line["agentgate.reasons"][0]["line"], 7);
    let summary = agentgate::audit::summarize(text.as_bytes())?;
    let counts = |id: &str| -> Option<(u64, u64)> {
        let agent = summary.groups.iter().find(|a| a.key == id)?;
        Some((agent.counts.allowed, agent.counts.rate_limited))
    };
    assert_eq!(counts("alpha"), Some((3, 1)), "{}", summary.render_table());
    assert_eq!(counts("beta"), Some((3, 1)), "{}", summary.render_table());
    Ok(())
}

#[tokio::test]
async fn agents_txt_limit_two_per_rule_and_other_paths_free() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let body = fix_hash(b"/api ALLOW limit=2\n/ ALLOW\n");
    let text = String::from_utf8_lossy(&body).into_owned();
    let line = text.lines().position(|l| l.starts_with("/api")).expect("the rule is kept") + 1;
    let origin = Origin::http_site(Site::new().file("/agents.txt", body)).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;

    assert_eq!(client.get(origin.url("/api/a")).send().await?.status(), 200);
    assert_eq!(client.get(origin.url("/api/b")).send().await?.status(), 200);
    let prefix = format!("rate_limited; source=agents.txt; line={line}; code=agents_txt.limit; window=60s;");
    let third = client.get(origin.url("/api/c")).header("accept", "application/json").send().await?;
    assert_eq!(third.status(), 429);
    assert!(header(&third, "agentgate-decision").starts_with(&prefix), "{}", header(&third, "agentgate-decision"));
    let json: Value = serde_json::from_str(&third.text().await?)?;
    assert_eq!(json["decision"], "rate_limited");
    assert_eq!(json["reasons"][0]["source"], "agents.txt");
    assert_eq!(json["reasons"][0]["line"], line as u64);
    assert!(json["reasons"][0]["advice"].as_str().is_some_and(|a| a.contains("Retry-After")), "{json:#}");
    assert_eq!(origin.hits("/api/c"), 0);
    for _ in 0..3 {
        assert_eq!(client.get(origin.url("/other")).send().await?.status(), 200, "/other is not limited");
    }

    let records = proxy.finish().await?;
    let limited = for_request(&records, "GET", "/api/c");
    assert_eq!(limited.len(), 1);
    assert_eq!(limited[0]["event.action"], "rate_limited");
    assert_eq!(limited[0]["agentgate.reasons"][0]["source"], "agents.txt");
    Ok(())
}

#[tokio::test]
async fn concurrent_sessions_refuse_the_excess_at_once_and_slots_come_back() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    // Line 7: concurrent-sessions.
    let origin =
        Origin::https_site(&ca, markdown_site(agents_md("## Rate Limits\n- concurrent-sessions: 2\n"))).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;

    let held: Vec<_> = (0..2)
        .map(|_| {
            let request = client.get(origin.url("/hold-all")).send();
            tokio::spawn(request)
        })
        .collect();
    origin.held(2).await;
    let third = client.get(origin.url("/page")).send().await?;
    assert_eq!(third.status(), 429, "the third is refused while two are in flight, not queued");
    assert!(
        header(&third, "agentgate-decision")
            .starts_with("rate_limited; source=AGENTS.md; line=7; code=agents_md.concurrent_sessions;")
    );
    assert_eq!(origin.hits("/page"), 0);
    origin.release_all();
    for request in held {
        assert_eq!(request.await??.status(), 200);
    }
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200, "finished requests gave their slots back");

    // One request stays in flight; another hangs up mid-response and must give its slot back.
    let mut holding = client.get(origin.url("/trickle")).send().await?;
    assert_eq!(holding.chunk().await?.as_deref(), Some(&b"first;"[..]));
    origin.arrived().await;
    let mut hung_up = client.get(origin.url("/trickle")).send().await?;
    assert_eq!(hung_up.chunk().await?.as_deref(), Some(&b"first;"[..]));
    origin.arrived().await;
    drop(hung_up);
    // A bounded wait for the hang-up to reach the proxy (a condition, not a sleep for timing):
    // until it does, two requests are in flight and the next one is refused.
    eventually("the slot of a hung-up request given back", async || {
        let status = client.get(origin.url("/after-hangup")).send().await?.status();
        assert!(status == 200 || status == 429, "{status}");
        if status == 200 { Ok(()) } else { Err(format!("GET /after-hangup answers {status}").into()) }
    })
    .await?;
    drop(holding);
    let records = proxy.finish().await?;
    assert_eq!(for_request(&records, "GET", "/page")[0]["event.action"], "rate_limited");
    Ok(())
}

#[tokio::test]
async fn an_attachment_from_a_host_whose_agents_md_forbids_downloads_is_withheld() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let site = markdown_site(agents_md("## Allowed Actions\n- read-content: true\n")).serve(
        "/report.pdf",
        200,
        &[("content-type", "application/pdf"), ("content-disposition", "attachment; filename=report.pdf")],
        "SECRET-REPORT-BYTES",
    );
    let origin = Origin::https_site(&ca, site).await?;
    let proxy = TestProxy::start(&ca).await?;
    for client in [proxy.client_builder()?.http1_only().build()?, proxy.client()?] {
        let response = client.get(origin.url("/report.pdf")).send().await?;
        assert_eq!(response.status(), 403);
        let decision = header(&response, "agentgate-decision");
        assert!(decision.starts_with("deny; source=AGENTS.md; code=agents_md.action_denied;"), "{decision}");
        let body = response.text().await?;
        assert!(!body.contains("SECRET-REPORT-BYTES"), "the download never reaches the client: {body}");
        assert!(body.contains("download-files"), "{body}");
    }
    let records = proxy.finish().await?;
    let lines = for_request(&records, "GET", "/report.pdf");
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l["event.action"] == "deny" && l["http.response.status_code"] == 403));
    Ok(())
}

/// The robots.txt of the crawl-delay tests: line 2 asks for two seconds between requests.
const CRAWL_DELAY_ROBOTS: &str = "User-agent: *\nCrawl-delay: 2\nAllow: /\n";

#[tokio::test]
async fn robots_crawl_delay_honored_allows_one_request_per_delay() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", CRAWL_DELAY_ROBOTS)).await?;
    let proxy = TestProxy::start_with(&ca, |config| config.robots.honor_crawl_delay = true).await?;
    let client = proxy.client()?;

    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);
    let second = client.get(origin.url("/page")).send().await?;
    assert!(header(&second, "retry-after").parse::<u64>().is_ok_and(|s| (1..=2).contains(&s)), "{second:?}");
    let prefix = "rate_limited; source=robots.txt; line=2; code=robots.crawl_delay; window=2s; record=";
    let record = over_limit(second, prefix, "Crawl-delay: 2").await?;
    assert_eq!(origin.hits("/page"), 1, "the second request never reached the origin");

    let records = proxy.finish().await?;
    let line = crate::support::log::by_id(&records, &record)?;
    assert_eq!(line["event.action"], "rate_limited");
    assert_eq!(line["http.response.status_code"], 429);
    assert_eq!(line["agentgate.reasons"][0]["source"], "robots.txt");
    assert_eq!(line["agentgate.reasons"][0]["code"], "robots.crawl_delay");
    assert_eq!(line["agentgate.reasons"][0]["line"], 2);
    assert_eq!(line["agentgate.reasons"][0]["rule"], "Crawl-delay: 2");
    let first = for_request(&records, "GET", "/page");
    assert_eq!(first.len(), 2);
    assert_eq!(first[0]["event.action"], "allow");
    assert!(
        first[0]["agentgate.limits"]
            .as_array()
            .is_some_and(|l| l.iter().any(|l| l["kind"] == "delay" && l["delay_ms"] == 2000 && l["line"] == 2)),
        "{}",
        first[0]
    );
    Ok(())
}

#[tokio::test]
async fn robots_crawl_delay_is_not_enforced_by_default() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", CRAWL_DELAY_ROBOTS)).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;

    for _ in 0..2 {
        assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);
    }
    assert_eq!(origin.hits("/page"), 2);

    let records = proxy.finish().await?;
    let both = for_request(&records, "GET", "/page");
    assert_eq!(both.len(), 2);
    for record in both {
        assert_eq!(record["event.action"], "allow");
        assert!(record["agentgate.limits"].as_array().is_none_or(|l| l.iter().all(|l| l["kind"] != "delay")));
    }
    Ok(())
}
