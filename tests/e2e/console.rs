//! The console end to end (`docs/console.md`): the page, its login and session
//! cookie, the live `/decisions/stream` (Server-Sent Events read with reqwest) and
//! `/agents/summary` against the real proxy and a loopback origin; then the page itself in a
//! real headless Chromium (`support::browser`): log in, watch a request arrive live, open its
//! reasons and the policy file line that decided it; approve and deny a held request with the
//! page's buttons while a real curl waits for the answer.

use std::time::Duration;

use fantoccini::Locator;
use serde_json::Value;

use crate::support::browser::{Browser, PAGE_DEADLINE};
use crate::support::curl::CurlOutput;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult, header};

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

/// `printf %s admin-secret | sha256sum`
const TOKEN_SHA256: &str = "16175223c8ddce5ace0493c948569c211b03c4c6bb3d3e484434999448cffe01";
const TOKEN: &str = "admin-secret";

/// How long a streamed line may take to arrive (the console shows it as it arrives).
const STREAM_DEADLINE: Duration = Duration::from_secs(5);

fn with_token(config: &mut agentgate::config::Config) {
    config.admin.token_sha256 = Some(TOKEN_SHA256.to_owned());
}

/// A client for the admin API itself: never through a proxy, never following redirects
/// (the test reads the `303` and its cookie).
fn admin_client() -> TestResult<reqwest::Client> {
    Ok(reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build()?)
}

fn admin_url(proxy: &TestProxy, path: &str) -> TestResult<String> {
    Ok(format!("http://{}{path}", proxy.admin_addr.ok_or("the test proxy has no admin address")?))
}

/// `POST /login` with `token`; the `303` answer.
async fn login(proxy: &TestProxy, token: &str) -> TestResult<reqwest::Response> {
    let body = format!("token={token}");
    let response = admin_client()?
        .post(admin_url(proxy, "/login")?)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await?;
    Ok(response)
}

/// The `name=value` part of a `Set-Cookie`.
fn cookie_of(response: &reqwest::Response) -> TestResult<String> {
    let set = header(response, "set-cookie");
    Ok(set.split(';').next().ok_or("no Set-Cookie")?.to_owned())
}

/// Reads `response` (an event stream) until an event whose data satisfies `wanted`, within
/// [`STREAM_DEADLINE`]; returns that event's data.
async fn next_event(
    response: &mut reqwest::Response,
    event: &str,
    wanted: impl Fn(&Value) -> bool,
) -> TestResult<Value> {
    tokio::time::timeout(STREAM_DEADLINE, read_until(response, event, wanted))
        .await
        .map_err(|_| format!("no matching {event:?} event within {STREAM_DEADLINE:?}"))?
}

/// [`next_event`] without its bound.
async fn read_until(
    response: &mut reqwest::Response,
    event: &str,
    wanted: impl Fn(&Value) -> bool,
) -> TestResult<Value> {
    let mut text = String::new();
    loop {
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let name = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or("message");
            if let Some(data) = block.lines().find_map(|l| l.strip_prefix("data: "))
                && name == event
            {
                let data: Value = serde_json::from_str(data)?;
                if wanted(&data) {
                    return Ok(data);
                }
            }
        }
        let chunk = response.chunk().await?.ok_or("the stream ended")?;
        text.push_str(std::str::from_utf8(&chunk)?);
    }
}

#[tokio::test]
async fn with_a_token_the_console_needs_a_login_and_the_session_cookie_works_until_logout() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start_with(&ca, with_token).await?;
    let client = admin_client()?;

    let page = client.get(admin_url(&proxy, "/")?).send().await?;
    assert_eq!(page.status(), 401);
    assert!(header(&page, "content-type").starts_with("text/html"));
    assert!(header(&page, "content-security-policy").contains("frame-ancestors 'none'"));
    let form = page.text().await?;
    assert!(form.contains(r#"<form id="login" method="post" action="/login">"#), "{form}");
    assert!(!form.contains("decision-log"), "no console before the login");
    for path in ["/decisions/stream", "/agents/summary", "/decisions/recent"] {
        let bare = client.get(admin_url(&proxy, path)?).send().await?;
        assert_eq!(bare.status(), 401, "{path}");
        let forged =
            client.get(admin_url(&proxy, path)?).header("cookie", format!("agentgate_session={}", "a".repeat(64)));
        assert_eq!(forged.send().await?.status(), 401, "{path}: an unknown session id");
    }
    // The static assets hold no data and style the login form.
    for path in ["/console.js", "/console.css"] {
        assert_eq!(client.get(admin_url(&proxy, path)?).send().await?.status(), 200, "{path}");
    }
    // Values from the log (URLs, agent names, rule text) come from clients: the script only
    // ever writes them as text.
    let script = client.get(admin_url(&proxy, "/console.js")?).send().await?.text().await?;
    for markup in ["innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("] {
        assert!(!script.contains(markup), "console.js uses {markup}");
    }

    let wrong = login(&proxy, "admin-secreT").await?;
    assert_eq!(wrong.status(), 401);
    assert_eq!(header(&wrong, "set-cookie"), "");
    assert!(wrong.text().await?.contains("That token is not one of those configured."));
    let not_a_form = client.post(admin_url(&proxy, "/login")?).body(format!("token={TOKEN}")).send().await?;
    assert_eq!(not_a_form.status(), 415);

    let right = login(&proxy, TOKEN).await?;
    assert_eq!(right.status(), 303);
    assert_eq!(header(&right, "location"), "/");
    let set_cookie = header(&right, "set-cookie");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"] {
        assert!(set_cookie.contains(attribute), "{set_cookie}");
    }
    let cookie = cookie_of(&right)?;
    let console = client.get(admin_url(&proxy, "/")?).header("cookie", &cookie).send().await?;
    assert_eq!(console.status(), 200);
    assert_eq!(header(&console, "x-frame-options"), "DENY");
    let html = console.text().await?;
    assert!(html.contains(r#"<table id="decision-log">"#) && html.contains(r#"id="logout""#), "{html}");
    let stream = client.get(admin_url(&proxy, "/decisions/stream")?).header("cookie", &cookie).send().await?;
    assert_eq!(stream.status(), 200);
    assert_eq!(header(&stream, "content-type"), "text/event-stream");
    drop(stream);
    let summary = client.get(admin_url(&proxy, "/agents/summary")?).header("cookie", &cookie).send().await?;
    assert_eq!(summary.status(), 200);
    // The bearer token still works beside the cookie.
    let bearer = client.get(admin_url(&proxy, "/agents/summary")?).bearer_auth(TOKEN).send().await?;
    assert_eq!(bearer.status(), 200);

    let logout = client.post(admin_url(&proxy, "/logout")?).header("cookie", &cookie).send().await?;
    assert_eq!(logout.status(), 303);
    assert!(header(&logout, "set-cookie").contains("Max-Age=0"));
    let after = client.get(admin_url(&proxy, "/")?).header("cookie", &cookie).send().await?;
    assert_eq!(after.status(), 401, "the session is gone after logout");
    proxy.finish().await?;
    Ok(())
}

#[tokio::test]
async fn without_a_token_the_console_opens_directly() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start(&ca).await?;
    let client = admin_client()?;
    let page = client.get(admin_url(&proxy, "/")?).send().await?;
    assert_eq!(page.status(), 200);
    let html = page.text().await?;
    assert!(html.contains(r#"<table id="decision-log">"#), "{html}");
    assert!(!html.contains(r#"id="logout""#), "no session, no logout button");
    let stream = client.get(admin_url(&proxy, "/decisions/stream")?).send().await?;
    assert_eq!((stream.status().as_u16(), header(&stream, "content-type")), (200, "text/event-stream".to_owned()));
    drop(stream);
    let login = login(&proxy, "anything").await?;
    assert_eq!((login.status().as_u16(), header(&login, "set-cookie")), (303, String::new()), "nothing to log in to");
    let wrong_method = client.post(admin_url(&proxy, "/")?).send().await?;
    assert_eq!((wrong_method.status().as_u16(), header(&wrong_method, "allow")), (405, "GET".to_owned()));
    proxy.finish().await?;
    Ok(())
}

#[tokio::test]
async fn the_stream_delivers_the_log_line_of_a_request_through_the_proxy_and_the_summary_counts_it() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", ROBOTS)).await?;
    let proxy = TestProxy::start(&ca).await?;
    let mut stream = admin_client()?.get(admin_url(&proxy, "/decisions/stream")?).send().await?;
    assert_eq!(stream.status(), 200);
    assert_eq!(header(&stream, "cache-control"), "no-store");

    let client = proxy.client()?;
    let denied = client.get(origin.url("/private/report?key=secret")).send().await?;
    assert_eq!(denied.status(), 403);
    let streamed = next_event(&mut stream, "decision", |line| line["event.action"] == "deny").await?;
    let logged = proxy.log_lines(1).await?;
    assert_eq!(streamed, logged[0], "the streamed line is the logged line, redaction included");
    assert_eq!(streamed["url.full"], origin.url("/private/report?key=REDACTED"));
    assert_eq!(streamed["agentgate.reasons"][0]["code"], "robots.disallow");
    assert_eq!(streamed["agentgate.reasons"][0]["line"], 2);

    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);
    let completed = next_event(&mut stream, "decision", |line| {
        line["event.action"] == "allow" && line["http.response.status_code"] == 200
    })
    .await?;
    assert_eq!(completed["url.full"], origin.url("/page"));

    // The policy view carries each file's text, for the console to number and highlight.
    let policies =
        admin_client()?.get(admin_url(&proxy, &format!("/policies?origin={}", origin.url("")))?).send().await?;
    let policies: Value = serde_json::from_str(&policies.text().await?)?;
    assert_eq!(policies["files"]["robots.txt"]["text"], ROBOTS, "{policies}");
    assert_eq!(policies["files"]["AGENTS.md"]["text"], Value::Null, "not served: no text");

    let summary = admin_client()?.get(admin_url(&proxy, "/agents/summary")?).send().await?.text().await?;
    let summary: Value = serde_json::from_str(&summary)?;
    let agent = streamed["agentgate.agent"].as_str().ok_or("an agent")?;
    let row = summary["agents"].as_array().and_then(|agents| agents.iter().find(|a| a["agent"] == agent));
    let row = row.ok_or_else(|| format!("{agent} in {summary}"))?;
    assert_eq!(
        (&row["requests"], &row["allowed"], &row["denied"], &row["would_deny"], &row["rate_limited"]),
        (&Value::from(2), &Value::from(1), &Value::from(1), &Value::from(0), &Value::from(0)),
        "a forwarded request's two lines count once: {summary}"
    );
    drop(stream);
    proxy.finish().await?;
    Ok(())
}

#[tokio::test]
async fn the_page_as_served_already_shows_the_latest_decisions_before_any_script_runs() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", ROBOTS)).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;
    assert_eq!(client.get(origin.url("/private/x")).send().await?.status(), 403);
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);
    proxy.log_lines(2).await?;

    // No script runs here: the rows are in the HTML itself, newest first, one per request.
    let html = admin_client()?.get(admin_url(&proxy, "/")?).send().await?.text().await?;
    let rows: Vec<&str> = html.split("<tr class=\"decision first-paint\">").skip(1).collect();
    assert_eq!(rows.len(), 2, "{html}");
    assert!(rows[0].contains(&origin.url("/page")) && rows[0].contains(">allow<") && rows[0].contains(">200<"));
    assert!(rows[1].contains(">deny<") && rows[1].contains("robots.txt:2 robots.disallow"), "{}", rows[1]);
    proxy.finish().await?;
    Ok(())
}

#[tokio::test]
async fn streams_over_the_cap_are_refused_and_shutdown_ends_the_open_ones() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", ROBOTS)).await?;
    let mut proxy = TestProxy::start(&ca).await?;
    let client = admin_client()?;
    let mut open = Vec::new();
    for _ in 0..16 {
        let stream = client.get(admin_url(&proxy, "/decisions/stream")?).send().await?;
        assert_eq!(stream.status(), 200);
        open.push(stream);
    }
    let refused = client.get(admin_url(&proxy, "/decisions/stream")?).send().await?;
    assert_eq!(refused.status(), 503);
    assert!(refused.text().await?.contains("16 decision streams are open already"));
    // A client that left is noticed at its stream's next write (a decision, or the
    // keep-alive comment): traffic through the proxy frees the slot.
    drop(open.pop());
    let agent = proxy.client()?;
    let again = eventually("the slot of a closed stream freed", async || {
        assert_eq!(agent.get(origin.url("/private/x")).send().await?.status(), 403);
        let again = client.get(admin_url(&proxy, "/decisions/stream")?).send().await?;
        match again.status().as_u16() {
            200 => Ok(again),
            status => Err(format!("GET /decisions/stream answers {status}").into()),
        }
    })
    .await?;
    open.push(again);

    // Shutdown ends every stream (each body reaches its end) instead of waiting for them.
    let task = proxy.shut_down().ok_or("the proxy was running")?;
    for mut stream in open {
        let ended = tokio::time::timeout(STREAM_DEADLINE, async { while let Ok(Some(_)) = stream.chunk().await {} });
        ended.await.map_err(|_| "a stream outlived the shutdown")?;
    }
    tokio::time::timeout(STREAM_DEADLINE, task).await.map_err(|_| "shutdown waited for the streams")??;
    Ok(())
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver: run by scripts/test.sh"]
async fn browser_logs_in_and_sees_a_request_live_with_its_reasons_and_deciding_line() -> TestResult {
    let browser = Browser::start().await?;
    let ca = TestCa::new("origin CA")?;
    let site = Site::new().file("/robots.txt", ROBOTS).serve("/agents.txt", 404, &[], "").serve(
        "/automation-preferences.txt",
        404,
        &[],
        "",
    );
    let origin = Origin::http_site(site).await?;
    let proxy = TestProxy::start_with(&ca, with_token).await?;
    let page = &browser.client;

    // A request before the page opens: it comes from /decisions/recent, not the stream.
    let client = proxy.client()?;
    assert_eq!(client.get(origin.url("/before")).send().await?.status(), 200);
    let earlier = proxy.log_lines(1).await?;
    let earlier = earlier.iter().rev().find_map(|line| line["event.id"].as_str()).ok_or("an event id")?.to_owned();

    page.goto(&admin_url(&proxy, "/")?).await?;
    page.find(Locator::Id("token")).await?.send_keys(TOKEN).await?;
    page.find(Locator::Id("login-submit")).await?.click().await?;
    browser.wait_until("document.getElementById('decision-log')", "the console after the login", PAGE_DEADLINE).await?;
    browser
        .wait_until(
            "document.getElementById('stream-state').textContent === 'live'",
            "the live stream open",
            PAGE_DEADLINE,
        )
        .await?;

    let before = format!("document.querySelectorAll('tr.decision[data-id=\"{earlier}\"]').length === 1");
    browser.wait_until(&before, "the earlier request, once, from /decisions/recent", PAGE_DEADLINE).await?;

    // Within a second in practice; bounded at PAGE_DEADLINE for noisy CI.
    assert_eq!(client.get(origin.url("/private/report")).send().await?.status(), 403);
    let logged = proxy.log_lines(2).await?;
    let denied: Vec<&Value> = logged.iter().filter(|line| line["event.action"] == "deny").collect();
    let logged = denied.as_slice();
    let id = logged[0]["event.id"].as_str().ok_or("an event id")?;
    let row = format!("document.querySelector('tr.decision[data-id=\"{id}\"]')");
    browser.wait_until(&row, "the denied request in the live stream", PAGE_DEADLINE).await?;
    let text = browser.eval(&format!("{row}.innerText")).await?;
    let text = text.as_str().unwrap_or_default();
    assert!(text.contains("deny") && text.contains("/private/report") && text.contains("robots.disallow"), "{text}");

    page.find(Locator::Css(&format!("tr.decision[data-id=\"{id}\"]"))).await?.click().await?;
    let details = format!("{row}.nextElementSibling");
    browser.wait_until(&format!("!{details}.hidden"), "the row's reasons open", PAGE_DEADLINE).await?;
    let reasons = browser.eval(&format!("{details}.innerText")).await?;
    let reasons = reasons.as_str().unwrap_or_default();
    assert!(
        reasons.contains("robots.txt") && reasons.contains("line 2") && reasons.contains("robots.disallow"),
        "{reasons}"
    );

    // The file is shown whole, numbered, with the lines of the blocking reasons (the group
    // and the rule) highlighted.
    let file = "document.querySelector('article.policy-file[data-file=\"robots.txt\"] ol.policy-text')";
    browser.wait_until(file, "robots.txt's text", PAGE_DEADLINE).await?;
    let lines =
        browser.eval(&format!("[...{file}.children].map(li => [li.value, li.textContent, li.className])")).await?;
    assert_eq!(lines, serde_json::json!([[1, "User-agent: *", "deciding"], [2, "Disallow: /private", "deciding"]]));

    // The per-agent figures count the request.
    let agent = logged[0]["agentgate.agent"].as_str().ok_or("an agent")?;
    let denied = format!("document.querySelector('#agent-summary tr[data-agent=\"{agent}\"] td.denied')");
    browser
        .wait_until(&format!("{denied} && {denied}.textContent === '1'"), "the agent's denied count", PAGE_DEADLINE)
        .await?;

    // Filters hide what does not match.
    page.find(Locator::Id("filter-outcome")).await?.select_by_value("allow").await?;
    browser.wait_until(&format!("{row}.hidden"), "the deny row hidden by the outcome filter", PAGE_DEADLINE).await?;
    page.find(Locator::Id("filter-outcome")).await?.select_by_value("").await?;
    browser.wait_until(&format!("!{row}.hidden"), "the deny row shown again", PAGE_DEADLINE).await?;

    assert_eq!(client.get(origin.url("/docs/intro")).send().await?.status(), 200);
    browser
        .wait_until("document.querySelectorAll('tr.decision').length >= 3", "the allowed request", PAGE_DEADLINE)
        .await?;
    let allowed =
        format!("document.querySelector('#agent-summary tr[data-agent=\"{agent}\"] td.allowed')?.textContent === '2'");
    browser.wait_until(&allowed, "the agent's allowed count", PAGE_DEADLINE).await?;
    browser.screenshot_for_docs("console.png").await?;
    browser.close().await?;
    proxy.finish().await?;
    Ok(())
}

/// An origin whose AGENTS.md reserves `POST /checkout` for a human (line 7).
async fn shop(ca: &TestCa) -> TestResult<Origin> {
    let agents_md = crate::limits::agents_md("## Restrictions\n- require-human-approval: /checkout\n");
    Origin::https_site(ca, crate::limits::markdown_site(agents_md)).await
}

/// The proxy in `[approvals] mode = "hold"`, with the admin token `alice`.
fn holding_for_alice(config: &mut agentgate::config::Config) {
    config.approvals.mode = agentgate::approvals::ApprovalMode::Hold;
    config.agent.id = Some("shopper".to_owned());
    // `printf %s alice-secret | sha256sum`
    let sha256 = "0c848abb03307b06cf70cd4e29c157dc81af5e94ab3eb1d0c59a120269572376".to_owned();
    config.admin.tokens = vec![agentgate::admin::AdminToken { name: "alice".to_owned(), sha256 }];
}

/// A browser logged in to `proxy`'s console as `secret`, showing a held `POST /checkout`
/// sent with the system curl (running in its own task, waiting while held).
async fn held_checkout(
    proxy: &TestProxy,
    origin: &Origin,
    secret: &str,
) -> TestResult<(Browser, tokio::task::JoinHandle<TestResult<CurlOutput>>)> {
    let browser = Browser::start().await?;
    browser.client.goto(&admin_url(proxy, "/")?).await?;
    browser.client.find(Locator::Id("token")).await?.send_keys(secret).await?;
    browser.client.find(Locator::Id("login-submit")).await?.click().await?;
    browser.wait_until("document.getElementById('pending')", "the console after the login", PAGE_DEADLINE).await?;
    // Some traffic first, so the page (and its screenshot) shows an agent at work.
    let agent = proxy.client()?;
    assert_eq!(agent.get(origin.url("/products")).send().await?.status(), 200);
    assert_eq!(agent.get(origin.url("/cart")).send().await?.status(), 200);

    let (proxy_url, ca_path, url) = (proxy.url(), proxy.ca_path.display().to_string(), origin.url("/checkout"));
    let waiting = tokio::spawn(async move {
        let args = ["-x", &proxy_url, "--cacert", &ca_path, "-X", "POST", "--data", "order=42", &url];
        crate::support::curl::curl(&args).await
    });
    let row = "document.querySelector('#pending tr.pending')";
    browser.wait_until(row, "the held request in the pending list", PAGE_DEADLINE).await?;
    let waits = "document.getElementById('approvals-state').textContent === '1 request waits for a human.'";
    browser.wait_until(waits, "the count of held requests", PAGE_DEADLINE).await?;
    browser
        .wait_until("document.querySelectorAll('tr.decision').length >= 2", "the earlier traffic", PAGE_DEADLINE)
        .await?;
    let text = browser.eval(&format!("{row}.innerText")).await?;
    let text = text.as_str().unwrap_or_default();
    for expected in ["POST", "shopper", &origin.url("/checkout"), "AGENTS.md:7 require-human-approval: /checkout"] {
        assert!(text.contains(expected), "{expected:?} in {text:?}");
    }
    assert_eq!(origin.hits("/checkout"), 0, "nothing reaches the origin while held");
    Ok((browser, waiting))
}

/// The curl's answer, bounded.
async fn finished(waiting: tokio::task::JoinHandle<TestResult<CurlOutput>>) -> TestResult<CurlOutput> {
    tokio::time::timeout(PAGE_DEADLINE, waiting).await.map_err(|_| "curl still waits")??
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver: run by scripts/test.sh"]
async fn browser_approve_lets_the_waiting_curl_through_and_the_log_names_the_approver() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let proxy = TestProxy::start_with(&ca, holding_for_alice).await?;
    let (browser, waiting) = held_checkout(&proxy, &origin, "alice-secret").await?;
    browser.screenshot_for_docs("console-approvals.png").await?;

    let remember = browser.client.find(Locator::Css("#pending tr.pending select.remember")).await?;
    remember.select_by_value("path-for-agent-15m").await?;
    browser.client.find(Locator::Css("#pending tr.pending button.approve")).await?.click().await?;
    let curl = finished(waiting).await?;
    assert_eq!(curl.status, 200, "{}", String::from_utf8_lossy(&curl.body));
    assert_eq!(origin.hits("/checkout"), 1, "the origin saw the approved request");
    let state = "document.getElementById('approvals-answer').textContent";
    browser.wait_until(&format!("{state} === 'approved by alice'"), "the answer shown", PAGE_DEADLINE).await?;
    browser
        .wait_until("!document.querySelector('#pending tr.pending')", "the pending list emptied", PAGE_DEADLINE)
        .await?;
    // The settled request's row says who approved it.
    let settled = "[...document.querySelectorAll('tr.decision')].find(r => r.innerText.includes('POST'))";
    browser.wait_until(settled, "the approved request in the live stream", PAGE_DEADLINE).await?;
    let details = browser.eval(&format!("{settled}.nextElementSibling.textContent")).await?;
    assert!(details.as_str().unwrap_or_default().contains("approval approved by alice"), "{details}");
    browser.close().await?;

    let records = proxy.finish().await?;
    let checkout: Vec<&Value> = records.iter().filter(|r| r["http.request.method"] == "POST").collect();
    let [line] = checkout.as_slice() else { return Err(format!("one POST record: {records:#?}").into()) };
    assert_eq!((&line["event.action"], &line["http.response.status_code"]), (&Value::from("allow"), &Value::from(200)));
    assert_eq!(
        (&line["agentgate.approval.decision"], &line["agentgate.approval.by"]),
        (&Value::from("approved"), &Value::from("alice"))
    );
    assert_eq!(line["agentgate.approval.remember"], "path-for-agent-15m", "the page's remember choice");
    Ok(())
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver: run by scripts/test.sh"]
async fn browser_deny_answers_the_waiting_curl_with_a_403_naming_the_denial() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let proxy = TestProxy::start_with(&ca, holding_for_alice).await?;
    let (browser, waiting) = held_checkout(&proxy, &origin, "alice-secret").await?;

    browser.client.find(Locator::Css("#pending tr.pending input.reason")).await?.send_keys("budget frozen").await?;
    browser.client.find(Locator::Css("#pending tr.pending button.deny")).await?.click().await?;
    let curl = finished(waiting).await?;
    assert_eq!(curl.status, 403);
    assert!(curl.headers.contains("approval=denied; by=alice"), "{}", curl.headers);
    let body = String::from_utf8_lossy(&curl.body);
    assert!(body.contains("alice denied it") && body.contains("budget frozen"), "{body}");
    assert_eq!(origin.hits("/checkout"), 0);
    let state = "document.getElementById('approvals-answer').textContent";
    browser.wait_until(&format!("{state} === 'denied by alice'"), "the answer shown", PAGE_DEADLINE).await?;
    browser.close().await?;

    let records = proxy.finish().await?;
    let checkout: Vec<&Value> = records.iter().filter(|r| r["http.request.method"] == "POST").collect();
    let [line] = checkout.as_slice() else { return Err(format!("one POST record: {records:#?}").into()) };
    assert_eq!(line["event.action"], "needs_approval");
    assert_eq!(
        (&line["agentgate.approval.decision"], &line["agentgate.approval.by"]),
        (&Value::from("denied"), &Value::from("alice"))
    );
    assert_eq!(line["agentgate.approval.reason"], "budget frozen");
    Ok(())
}

/// Bidi controls in what the console shows could disguise it (a right-to-left
/// override makes `/evil` U+202E `gpj.exe` read `/evilexe.jpg`). The URL reaches the page
/// percent-encoded from the log (`url.full`); a rule and a policy file from the site still
/// carry the raw character, and the page shows it escaped, as `\u202E`, in the row, the
/// reasons and the file's text.
#[tokio::test]
#[ignore = "needs chromium and chromium-driver: run by scripts/test.sh"]
async fn browser_shows_bidi_controls_escaped_in_urls_rules_and_policy_files() -> TestResult {
    let browser = Browser::start().await?;
    let ca = TestCa::new("origin CA")?;
    let robots = "User-agent: *\nDisallow: /evil\u{202e}gpj.exe\n";
    let site = Site::new().file("/robots.txt", robots).serve("/agents.txt", 404, &[], "").serve(
        "/automation-preferences.txt",
        404,
        &[],
        "",
    );
    let origin = Origin::http_site(site).await?;
    let proxy = TestProxy::start(&ca).await?;
    let denied = proxy.client()?.get(origin.url("/evil%E2%80%AEgpj.exe")).send().await?;
    assert_eq!(denied.status(), 403, "the rule matches its percent-encoded spelling");
    let logged = proxy.log_lines(1).await?;
    let line = logged.iter().find(|line| line["event.action"] == "deny").ok_or("the deny line")?;
    assert_eq!(line["url.full"], origin.url("/evil%E2%80%AEgpj.exe"));
    assert_eq!(line["agentgate.reasons"][0]["rule"], "Disallow: /evil\u{202e}gpj.exe", "the log keeps the file's text");
    let id = line["event.id"].as_str().ok_or("an event id")?;

    let page = &browser.client;
    page.goto(&admin_url(&proxy, "/")?).await?;
    let row = format!("document.querySelector('tr.decision[data-id=\"{id}\"]')");
    browser.wait_until(&row, "the denied request, from /decisions/recent", PAGE_DEADLINE).await?;
    page.find(Locator::Css(&format!("tr.decision[data-id=\"{id}\"]"))).await?.click().await?;
    let file = "document.querySelector('article.policy-file[data-file=\"robots.txt\"] ol.policy-text')";
    browser.wait_until(file, "robots.txt's text", PAGE_DEADLINE).await?;
    let shown = browser
        .eval(&format!(
            "[{row}.innerText, {row}.nextElementSibling.innerText, {file}.children[1].textContent, \
             document.body.innerText.includes('\\u202e')]"
        ))
        .await?;
    let [row_text, reasons, file_line, raw_anywhere] = shown.as_array().map(Vec::as_slice).unwrap_or_default() else {
        return Err(format!("four values: {shown}").into());
    };
    let row_text = row_text.as_str().unwrap_or_default();
    assert!(row_text.contains("/evil%E2%80%AEgpj.exe"), "the URL as logged: {row_text:?}");
    assert!(row_text.contains("Disallow: /evil\\u202Egpj.exe"), "the rule escaped in the row: {row_text:?}");
    assert!(reasons.as_str().unwrap_or_default().contains("Disallow: /evil\\u202Egpj.exe"), "{reasons}");
    assert_eq!(file_line, "Disallow: /evil\\u202Egpj.exe", "the file's line escaped");
    assert_eq!(raw_anywhere, false, "no raw U+202E anywhere on the page");
    browser.close().await?;
    proxy.finish().await?;
    Ok(())
}
