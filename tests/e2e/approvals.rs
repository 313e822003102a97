//! Human approvals end to end (`docs/approvals.md`): an origin whose AGENTS.md
//! reserves `POST /checkout` for a human, the proxy in `[approvals] mode = "hold"`, a real
//! client whose request waits while the test finds it with `GET /approvals` and answers it
//! with `POST /approvals/{id}` on the admin API. Each way a held request ends — approved,
//! denied, timed out, its client hanging up, refused by a full queue, let through by a
//! remembered approval — is checked at the client, at the origin and in the decision log,
//! where it is recorded once. Holding needs an admin token: without one the
//! binary refuses to start, `config check` refuses the file, and a reload that would hold is
//! rejected while the running config stays.

use std::ffi::OsStr;
use std::time::Duration;

use agentgate::admin::AdminToken;
use agentgate::approvals::ApprovalMode;
use agentgate::config::Config;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::admin::{admin_client, admin_url, sample, scrape_as};
use crate::agents::{agent, client_as};
use crate::limits::{agents_md, markdown_site};
use crate::reload::{base_config, replace_file};
use crate::support::binary::{self, Agentgate};
use crate::support::log::for_request;
use crate::support::origin::Origin;
use crate::support::pki::TestCa;
use crate::support::raw::{connect_tunnel, tls_client};
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult, header};

/// Line 7 of the AGENTS.md: `- require-human-approval: /checkout`.
const RULE_LINE: u64 = 7;
/// How long a test waits for a held request to show up in (or leave) `GET /approvals`.
const WAIT_LIMIT: Duration = Duration::from_secs(5);

/// The admin token [`hold`] configures, named `admin`.
pub(crate) const ADMIN: &str = "admin-secret";

/// An origin whose AGENTS.md reserves `POST /checkout` for a human (line 7).
pub(crate) async fn shop(ca: &TestCa) -> TestResult<Origin> {
    Origin::https_site(ca, markdown_site(agents_md("## Restrictions\n- require-human-approval: /checkout\n"))).await
}

/// Config edit: hold requests for approval, with the admin token [`ADMIN`] that holding needs.
pub(crate) fn hold(config: &mut Config) {
    config.approvals.mode = ApprovalMode::Hold;
    config.admin.token_sha256 = Some(hex::encode(Sha256::digest(ADMIN.as_bytes())));
}

/// A named admin token `name` whose secret is `secret`.
fn token(name: &str, secret: &str) -> AdminToken {
    AdminToken { name: name.to_owned(), sha256: hex::encode(Sha256::digest(secret.as_bytes())) }
}

/// `GET /approvals` with `bearer` (if any): status and body.
async fn list(proxy: &TestProxy, bearer: Option<&str>) -> TestResult<(u16, Value)> {
    let mut request = admin_client()?.get(admin_url(proxy, "/approvals")?);
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    json_answer(request.send().await?).await
}

/// A response's status and JSON body.
async fn json_answer(response: reqwest::Response) -> TestResult<(u16, Value)> {
    let status = response.status().as_u16();
    let text = response.text().await?;
    Ok((status, serde_json::from_str(&text).map_err(|e| format!("not JSON ({e}): {text}"))?))
}

/// Polls `GET /approvals` (bounded) until it lists exactly `count` held requests.
pub(crate) async fn pending(proxy: &TestProxy, bearer: Option<&str>, count: usize) -> TestResult<Vec<Value>> {
    eventually(&format!("GET /approvals listing {count} held requests"), async || {
        let (status, body) = list(proxy, bearer).await?;
        assert_eq!(status, 200, "{body}");
        let listed = body["pending"].as_array().ok_or("`pending` is an array")?.clone();
        if listed.len() == count { Ok(listed) } else { Err(format!("{} listed: {body}", listed.len()).into()) }
    })
    .await
}

/// `POST /approvals/{id}` with a JSON `body` and `bearer` (if any): status and body.
pub(crate) async fn answer(proxy: &TestProxy, id: &str, bearer: Option<&str>, body: Value) -> TestResult<(u16, Value)> {
    let url = admin_url(proxy, &format!("/approvals/{id}"))?;
    let mut request = admin_client()?.post(url).header("content-type", "application/json").body(body.to_string());
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    json_answer(request.send().await?).await
}

/// A `POST /checkout` through the proxy, sent in its own task: it waits while held.
pub(crate) fn checkout(
    client: &reqwest::Client,
    origin: &Origin,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let request = client.post(origin.url("/checkout")).header("content-type", "text/plain").body("order=42");
    tokio::spawn(request.send())
}

/// The one record of `POST /checkout` in `records`.
fn the_checkout(records: &[Value]) -> TestResult<&Value> {
    match for_request(records, "POST", "/checkout").as_slice() {
        [one] => Ok(one),
        found => Err(format!("{} records of POST /checkout: {records:#?}", found.len()).into()),
    }
}

#[tokio::test]
async fn an_approved_request_reaches_the_origin_and_the_log_names_the_approver() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        hold(config);
        config.agent.id = Some("shopper".to_owned());
        config.admin.tokens = vec![token("alice", "alice-secret")];
    })
    .await?;
    let waiting = checkout(&proxy.client()?, &origin);

    let listed = pending(&proxy, Some("alice-secret"), 1).await?;
    let held = &listed[0];
    assert_eq!(held["method"], "POST");
    assert_eq!(held["url"], origin.url("/checkout"));
    assert_eq!(held["agent"], "shopper");
    assert_eq!(held["origin"], format!("https://localhost:{}", origin.addr.port()));
    assert_eq!(
        held["rule"],
        json!({"file": "AGENTS.md", "line": RULE_LINE, "text": "require-human-approval: /checkout"})
    );
    let expires_in = held["expires_in_s"].as_u64().ok_or("expires_in_s is a number")?;
    assert!((1..=60).contains(&expires_in), "{held}");
    humantime::parse_rfc3339(held["held_since"].as_str().ok_or("held_since is a string")?)?;
    assert_eq!(origin.hits("/checkout"), 0, "nothing reaches the origin while held");

    let id = held["id"].as_str().ok_or("an id")?;
    let body = json!({"decision": "approve", "reason": "expected order"});
    let (status, answered) = answer(&proxy, id, Some("alice-secret"), body).await?;
    assert_eq!((status, answered), (200, json!({"id": id, "decision": "approved", "by": "alice"})));
    let response = waiting.await??;
    assert_eq!(response.status(), 200);
    assert_eq!(origin.hits("/checkout"), 1, "the origin saw the approved request");
    assert!(pending(&proxy, Some("alice-secret"), 0).await?.is_empty());
    let again = answer(&proxy, id, Some("alice-secret"), json!({"decision": "deny"})).await?;
    assert_eq!(again.0, 404, "a settled approval cannot be answered twice: {}", again.1);

    let record_id = held["record_id"].as_str().ok_or("a record id")?.to_owned();
    let records = proxy.finish().await?;
    let line = the_checkout(&records)?;
    assert_eq!(line["event.id"], record_id.as_str(), "the approval settles the held request's own record");
    assert_eq!(line["event.action"], "allow");
    assert_eq!(line["http.response.status_code"], 200);
    assert_eq!(line["agentgate.approval.decision"], "approved");
    assert_eq!(line["agentgate.approval.by"], "alice");
    assert_eq!(line["agentgate.approval.reason"], "expected order");
    assert_eq!(line["agentgate.approval.remember"], "this-request");
    humantime::parse_rfc3339(line["agentgate.approval.at"].as_str().ok_or("approval.at is a string")?)?;
    let reason = &line["agentgate.reasons"][0];
    assert_eq!((&reason["code"], &reason["line"]), (&json!("agents_md.requires_human_approval"), &json!(RULE_LINE)));
    assert!(reason["blocking"].is_null(), "an approved request has no blocking reason: {line}");
    Ok(())
}

#[tokio::test]
async fn a_denied_request_gets_a_403_naming_the_denier_and_the_reason() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let proxy = TestProxy::start_with(&ca, hold).await?;
    let waiting = checkout(&proxy.client()?, &origin);
    let listed = pending(&proxy, Some(ADMIN), 1).await?;
    let id = listed[0]["id"].as_str().ok_or("an id")?;
    assert_eq!(sample(&scrape_as(&proxy, Some(ADMIN)).await?, "agentgate_approvals_pending", &[]), Some(1.0));

    let body = json!({"decision": "deny", "reason": "budget frozen this week"});
    let (status, answered) = answer(&proxy, id, Some(ADMIN), body).await?;
    assert_eq!((status, answered), (200, json!({"id": id, "decision": "denied", "by": "admin"})));
    let response = waiting.await??;
    assert_eq!(response.status(), 403);
    let decision = header(&response, "agentgate-decision");
    let prefix = format!(
        "needs_approval; source=AGENTS.md; line={RULE_LINE}; code=agents_md.requires_human_approval; approval=denied; by=admin; record="
    );
    assert!(decision.starts_with(&prefix), "{decision}");
    let text = response.text().await?;
    assert!(text.contains("admin denied it"), "{text}");
    assert!(text.contains("Their reason: \"budget frozen this week\". Do not retry it;"), "{text}");
    assert_eq!(origin.hits("/checkout"), 0);
    let metrics = scrape_as(&proxy, Some(ADMIN)).await?;
    assert_eq!(sample(&metrics, "agentgate_approvals_pending", &[]), Some(0.0));
    assert_eq!(sample(&metrics, "agentgate_approvals_total", &[("decision", "denied")]), Some(1.0));

    let records = proxy.finish().await?;
    let line = the_checkout(&records)?;
    assert_eq!(line["event.id"], listed[0]["record_id"]);
    assert_eq!(line["event.action"], "needs_approval");
    assert_eq!(line["http.response.status_code"], 403);
    assert_eq!(line["agentgate.approval.decision"], "denied");
    assert_eq!(line["agentgate.approval.by"], "admin");
    assert_eq!(line["agentgate.approval.reason"], "budget frozen this week");
    assert_eq!(line["agentgate.reasons"][0]["code"], "agents_md.requires_human_approval");
    Ok(())
}

#[tokio::test]
async fn nobody_answering_in_time_is_a_403_saying_so() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        hold(config);
        config.approvals.timeout = Duration::from_secs(1);
    })
    .await?;
    let response = proxy
        .client()?
        .post(origin.url("/checkout"))
        .header("accept", "application/json")
        .body("order=42")
        .send()
        .await?;
    assert_eq!(response.status(), 403);
    assert!(header(&response, "agentgate-decision").contains("; approval=timeout; record="), "{response:?}");
    let (_, body) = json_answer(response).await?;
    assert!(body["message"].as_str().is_some_and(|m| m.contains("nobody approved or denied it")), "{body}");
    assert_eq!(body["approval"], json!({"decision": "timeout", "by": null, "reason": null}));
    assert_eq!(origin.hits("/checkout"), 0);
    assert!(pending(&proxy, Some(ADMIN), 0).await?.is_empty(), "a timed-out request leaves the queue");

    let records = proxy.finish().await?;
    let line = the_checkout(&records)?;
    assert_eq!(line["event.id"], body["record_id"]);
    assert_eq!(line["event.action"], "needs_approval");
    assert_eq!(line["agentgate.approval.decision"], "timeout");
    assert!(line["agentgate.approval.by"].is_null(), "{line}");
    Ok(())
}

#[tokio::test]
async fn a_client_that_hangs_up_leaves_the_queue_and_is_recorded_as_hung_up() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let proxy = TestProxy::start_with(&ca, hold).await?;
    // h2 through the MITM'd tunnel: dropping the request resets its stream.
    let waiting = checkout(&proxy.client()?, &origin);
    let listed = pending(&proxy, Some(ADMIN), 1).await?;
    waiting.abort();
    pending(&proxy, Some(ADMIN), 0).await?;
    // HTTP/1.1 in a MITM'd tunnel: the client closes its connection.
    let (tunnel, _) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    let mut tls = tls_client(tunnel, "localhost", &proxy.ca_pem, &[b"http/1.1"]).await?;
    let request =
        format!("POST /checkout HTTP/1.1\r\nHost: {}\r\nContent-Length: 8\r\n\r\norder=42", origin.authority());
    tls.write_all(request.as_bytes()).await?;
    let second = pending(&proxy, Some(ADMIN), 1).await?;
    drop(tls);
    pending(&proxy, Some(ADMIN), 0).await?;
    assert_eq!(origin.hits("/checkout"), 0, "neither reached the origin");
    let (status, _) =
        answer(&proxy, listed[0]["id"].as_str().ok_or("an id")?, Some(ADMIN), json!({"decision": "approve"})).await?;
    assert_eq!(status, 404, "a request whose client left cannot be approved");

    let records = proxy.finish().await?;
    let checkouts = for_request(&records, "POST", "/checkout");
    assert_eq!(checkouts.len(), 2, "{records:#?}");
    for (line, held) in checkouts.iter().zip([&listed[0], &second[0]]) {
        assert_eq!(line["event.id"], held["record_id"]);
        assert_eq!(line["event.action"], "needs_approval");
        assert_eq!(line["agentgate.approval.decision"], "hung_up");
        assert!(line["http.response.status_code"].is_null(), "nothing was answered: {line}");
    }
    Ok(())
}

#[tokio::test]
async fn past_max_pending_a_request_is_refused_at_once() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        hold(config);
        config.approvals.max_pending = 1;
    })
    .await?;
    let client = proxy.client()?;
    let first = checkout(&client, &origin);
    let listed = pending(&proxy, Some(ADMIN), 1).await?;

    let second = client.post(origin.url("/checkout")).body("order=43").send().await?;
    assert_eq!(second.status(), 403);
    assert!(header(&second, "agentgate-decision").contains("; approval=queue_full; record="));
    let text = second.text().await?;
    assert!(text.contains("too many requests are already waiting for approval"), "{text}");
    assert_eq!(pending(&proxy, Some(ADMIN), 1).await?[0]["id"], listed[0]["id"], "the first is still held");

    let id = listed[0]["id"].as_str().ok_or("an id")?;
    assert_eq!(answer(&proxy, id, Some(ADMIN), json!({"decision": "approve"})).await?.0, 200);
    assert_eq!(first.await??.status(), 200);
    let records = proxy.finish().await?;
    let decisions: Vec<&Value> =
        for_request(&records, "POST", "/checkout").iter().map(|r| &r["agentgate.approval.decision"]).collect();
    assert_eq!(decisions, [&json!("queue_full"), &json!("approved")], "{records:#?}");
    Ok(())
}

#[tokio::test]
async fn a_remembered_approval_lets_the_same_agent_through_and_holds_another() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        hold(config);
        config.agents = vec![agent("alpha", "a-token"), agent("beta", "b-token")];
        config.admin.tokens = vec![token("alice", "alice-secret")];
    })
    .await?;
    let alpha = client_as(&proxy, "alpha", "a-token")?;
    let first = checkout(&alpha, &origin);
    let listed = pending(&proxy, Some("alice-secret"), 1).await?;
    let id = listed[0]["id"].as_str().ok_or("an id")?;
    let body = json!({"decision": "approve", "remember": "path-for-agent-15m"});
    assert_eq!(answer(&proxy, id, Some("alice-secret"), body).await?.0, 200);
    assert_eq!(first.await??.status(), 200);

    // The same agent, origin and path (another query): through without being held.
    let again = alpha.post(origin.url("/checkout?step=2")).body("order=42").send().await?;
    assert_eq!(again.status(), 200);
    assert_eq!(origin.hits("/checkout"), 2);

    let beta = client_as(&proxy, "beta", "b-token")?;
    let other = checkout(&beta, &origin);
    let held = pending(&proxy, Some("alice-secret"), 1).await?;
    assert_eq!(held[0]["agent"], "beta", "another agent is asked about");
    let id = held[0]["id"].as_str().ok_or("an id")?;
    assert_eq!(answer(&proxy, id, Some("alice-secret"), json!({"decision": "deny"})).await?.0, 200);
    assert_eq!(other.await??.status(), 403);

    let records = proxy.finish().await?;
    let checkouts = for_request(&records, "POST", "/checkout");
    let remembered = records
        .iter()
        .find(|r| r["url.full"].as_str().is_some_and(|u| u.contains("/checkout?step=")))
        .ok_or("the remembered request is logged")?;
    assert_eq!(remembered["event.action"], "allow");
    assert_eq!(remembered["agentgate.approval.decision"], "remembered");
    assert_eq!(remembered["agentgate.approval.by"], "alice", "the original approver");
    assert_eq!(remembered["agentgate.approval.remember"], "path-for-agent-15m");
    let decisions: Vec<(&Value, &Value)> =
        checkouts.iter().map(|r| (&r["agentgate.agent"], &r["agentgate.approval.decision"])).collect();
    assert_eq!(decisions, [(&json!("alpha"), &json!("approved")), (&json!("beta"), &json!("denied"))]);
    Ok(())
}

#[tokio::test]
async fn the_approval_api_needs_the_token_and_answers_as_documented() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let admin_hash = hex::encode(Sha256::digest(b"admin-secret"));
    let proxy = TestProxy::start_with(&ca, |config| {
        hold(config);
        config.admin.token_sha256 = Some(admin_hash);
        config.admin.tokens = vec![token("bob", "bob-secret")];
    })
    .await?;
    let waiting = checkout(&proxy.client()?, &origin);
    let listed = pending(&proxy, Some("admin-secret"), 1).await?;
    let id = listed[0]["id"].as_str().ok_or("an id")?;

    for bearer in [None, Some("wrong-secret")] {
        assert_eq!(list(&proxy, bearer).await?.0, 401, "GET /approvals with {bearer:?}");
        let (status, _) = answer(&proxy, id, bearer, json!({"decision": "approve"})).await?;
        assert_eq!(status, 401, "POST /approvals/{{id}} with {bearer:?}");
    }
    let client = admin_client()?;
    let url = admin_url(&proxy, &format!("/approvals/{id}"))?;
    let form = client
        .post(&url)
        .bearer_auth("bob-secret")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("decision=approve")
        .send()
        .await?;
    assert_eq!(form.status(), 415, "an HTML form cannot answer");
    let huge = client
        .post(&url)
        .bearer_auth("bob-secret")
        .header("content-type", "application/json")
        .body(vec![b' '; 17 * 1024])
        .send()
        .await?;
    assert_eq!(huge.status(), 413);
    for (body, field) in [
        (json!({"decision": "maybe"}), "decision"),
        (json!({"decision": "approve", "remember": "forever"}), "remember"),
        (json!({"decision": "approve", "reason": "x".repeat(501)}), "reason"),
        (json!({"decision": "approve", "by": "mallory"}), "body"),
    ] {
        let (status, answered) = answer(&proxy, id, Some("bob-secret"), body).await?;
        assert_eq!((status, &answered["parameter"]), (400, &json!(field)), "{answered}");
    }
    let bad_json = client
        .post(&url)
        .bearer_auth("bob-secret")
        .header("content-type", "application/json")
        .body("{\"decision\":")
        .send()
        .await?;
    assert_eq!(bad_json.status(), 400);
    let (status, _) = answer(&proxy, "0000000000000000", Some("bob-secret"), json!({"decision": "approve"})).await?;
    assert_eq!(status, 404, "an unknown id");
    let get_one = client.get(&url).bearer_auth("bob-secret").send().await?;
    assert_eq!((get_one.status().as_u16(), header(&get_one, "allow")), (405, "POST".to_owned()));
    let post_list = client.post(admin_url(&proxy, "/approvals")?).bearer_auth("bob-secret").send().await?;
    assert_eq!((post_list.status().as_u16(), header(&post_list, "allow")), (405, "GET".to_owned()));
    assert_eq!(pending(&proxy, Some("bob-secret"), 1).await?[0]["id"], id, "still held after every refusal");

    let (status, answered) = answer(&proxy, id, Some("bob-secret"), json!({"decision": "approve"})).await?;
    assert_eq!((status, &answered["by"]), (200, &json!("bob")));
    assert_eq!(waiting.await??.status(), 200);
    let records = proxy.finish().await?;
    assert_eq!(the_checkout(&records)?["agentgate.approval.by"], "bob");
    Ok(())
}

#[tokio::test]
async fn an_approved_request_still_passes_the_limits() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let policy =
        agents_md("## Rate Limits\n- requests-per-minute: 1\n\n## Restrictions\n- require-human-approval: /checkout\n");
    let origin = Origin::https_site(&ca, markdown_site(policy)).await?;
    let proxy = TestProxy::start_with(&ca, hold).await?;
    let client = proxy.client()?;
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200, "spends the one request a minute");
    let waiting = checkout(&client, &origin);
    let listed = pending(&proxy, Some(ADMIN), 1).await?;
    let id = listed[0]["id"].as_str().ok_or("an id")?;
    assert_eq!(answer(&proxy, id, Some(ADMIN), json!({"decision": "approve"})).await?.0, 200);
    let response = waiting.await??;
    assert_eq!(response.status(), 429, "a human's approval is not a budget");
    assert!(header(&response, "agentgate-decision").starts_with("rate_limited; source=AGENTS.md"), "{response:?}");
    assert_eq!(origin.hits("/checkout"), 0);

    let records = proxy.finish().await?;
    let line = the_checkout(&records)?;
    assert_eq!(line["event.action"], "rate_limited");
    assert_eq!(line["agentgate.approval.decision"], "approved", "the approval is still on record");
    Ok(())
}

#[tokio::test]
async fn deny_mode_and_monitor_mode_never_hold() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let proxy = TestProxy::start(&ca).await?;
    let refused = proxy.client()?.post(origin.url("/checkout")).body("order=42").send().await?;
    assert_eq!(refused.status(), 403, "deny is the default mode");
    assert!(!header(&refused, "agentgate-decision").contains("approval="), "{refused:?}");
    let text = refused.text().await?;
    assert!(text.contains("does not hold requests for approval"), "{text}");
    assert!(pending(&proxy, None, 0).await?.is_empty());
    // Without an admin token nobody may answer a held request, not even one held by a
    // config built in code: the caller could be the agent itself.
    let (status, body) = answer(&proxy, "0000000000000000", None, json!({"decision": "approve"})).await?;
    assert_eq!(status, 403, "{body}");
    assert!(body["error"].as_str().is_some_and(|e| e.contains("needs an admin token")), "{body}");
    let records = proxy.finish().await?;
    let line = the_checkout(&records)?;
    assert_eq!(line["event.action"], "needs_approval");
    assert!(
        line.as_object().is_some_and(|fields| !fields.keys().any(|k| k.starts_with("agentgate.approval."))),
        "{line}"
    );

    let monitored = TestProxy::start_with(&ca, |config| {
        hold(config);
        config.mode = agentgate::policy::operator::Mode::Monitor;
    })
    .await?;
    let forwarded = monitored.client()?.post(origin.url("/checkout")).body("order=42").send().await?;
    assert_eq!(forwarded.status(), 200, "monitor mode forwards without holding");
    assert_eq!(origin.hits("/checkout"), 1);
    let records = monitored.finish().await?;
    assert_eq!(the_checkout(&records)?["event.action"], "would_deny");
    Ok(())
}

#[tokio::test]
async fn shutting_down_refuses_a_held_request_at_once_and_records_it() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let mut proxy = TestProxy::start_with(&ca, |config| {
        hold(config);
        config.shutdown_grace = Duration::from_secs(60);
    })
    .await?;
    let waiting = checkout(&proxy.client()?, &origin);
    let listed = pending(&proxy, Some(ADMIN), 1).await?;
    let stopped = proxy.shut_down().ok_or("the proxy was running")?;
    // Answered at once, not at the end of the 60 s grace period nor the 60 s approval timeout.
    let response = tokio::time::timeout(WAIT_LIMIT, waiting).await???;
    assert_eq!(response.status(), 403);
    assert!(header(&response, "agentgate-decision").contains("; approval=shutdown; record="), "{response:?}");
    assert!(response.text().await?.contains("is shutting down, so nobody can approve it now"));
    stopped.await?;

    let records = crate::support::log::read(&proxy.log_path)?;
    let line = the_checkout(&records)?;
    assert_eq!(line["event.id"], listed[0]["record_id"]);
    assert_eq!(line["agentgate.approval.decision"], "shutdown");
    assert_eq!(line["http.response.status_code"], 403);
    Ok(())
}

/// `[admin]` with the token [`ADMIN`] (`printf %s admin-secret | sha256sum`).
const ADMIN_TABLE: &str = "[admin]\nlisten = \"127.0.0.1:0\"\ntoken_sha256 = \"16175223c8ddce5ace0493c948569c211b03c4c6bb3d3e484434999448cffe01\"\n";

/// Runs the real binary with `args` to its end (bounded); its exit status and stderr.
async fn run_to_end(args: &[&OsStr]) -> TestResult<(std::process::ExitStatus, String)> {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentgate"));
    command.args(args).kill_on_drop(true);
    let output =
        tokio::time::timeout(binary::WAIT_LIMIT, command.output()).await.map_err(|_| "agentgate did not exit")??;
    Ok((output.status, String::from_utf8_lossy(&output.stderr).into_owned()))
}

#[tokio::test]
async fn hold_without_an_admin_token_is_refused_at_start_and_by_config_check_and_starts_with_one() -> TestResult {
    refused_without_a_token_and_started_with_one("[approvals]\nmode = \"hold\"\n", "[approvals] mode = \"hold\"").await
}

/// The same for an agent's `unlisted = "hold"`: without a token the agent itself could
/// approve the hosts it was not given.
#[tokio::test]
async fn an_unlisted_hold_without_an_admin_token_is_refused_at_start_and_by_config_check_and_starts_with_one()
-> TestResult {
    let hold = "[agent]\nallow_hosts = [\"docs.example\"]\nunlisted = \"hold\"\n";
    refused_without_a_token_and_started_with_one(hold, "[agent] unlisted = \"hold\"").await
}

/// A config holding requests through `hold` (its tables; `setting` as problems name it):
/// `run` and `config check` refuse it without an admin token, naming the setting, the token
/// settings and the fix, and nothing is served; with a token the same file starts.
async fn refused_without_a_token_and_started_with_one(hold: &str, setting: &str) -> TestResult {
    agentgate::tls::install_default_provider();
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("agentgate.toml");
    let common = format!(
        "listen = \"127.0.0.1:0\"\n[ca]\ndir = {:?}\n[audit]\npath = {:?}\n{hold}",
        dir.path().join("ca"),
        dir.path().join("decisions.jsonl")
    );
    std::fs::write(&path, format!("{common}[admin]\nlisten = \"127.0.0.1:0\"\n"))?;
    for command in ["run --config", "config check"] {
        let mut args: Vec<&OsStr> = command.split(' ').map(OsStr::new).collect();
        args.push(path.as_os_str());
        let (status, stderr) = run_to_end(&args).await?;
        assert!(!status.success(), "agentgate {command} accepted {setting} without a token:\n{stderr}");
        for part in [
            &format!("{setting} holds requests for a human's approval, but no admin token is configured"),
            "[admin] token_sha256",
            "[[admin.tokens]]",
            "printf %s TOKEN | sha256sum",
            "or set it to \"deny\"",
        ] {
            assert!(stderr.contains(part), "agentgate {command}: {part:?} missing from:\n{stderr}");
        }
    }
    assert!(!dir.path().join("decisions.jsonl").exists(), "nothing was served");

    // With a token the same file starts, and holds.
    std::fs::write(&path, format!("{common}{ADMIN_TABLE}"))?;
    let (status, stderr) = run_to_end(&[OsStr::new("config"), OsStr::new("check"), path.as_os_str()]).await?;
    assert!(status.success(), "{stderr}");
    let agentgate = Agentgate::start(dir.path(), &path, "info").await?;
    // Served (agentgate answers this itself), so its SIGTERM handler is in place for stop.
    let served = agentgate.client()?.get("http://agentgate.local/ca.pem").send().await?;
    assert_eq!(served.status(), 200);
    agentgate.stop().await?;
    Ok(())
}

#[tokio::test]
async fn a_reload_that_would_hold_without_a_running_admin_token_is_rejected_and_nothing_is_held() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("agentgate.toml");
    // `[admin]` is the file's last table: a line appended lands in it. The admin API is on
    // (holding with it off is refused for another reason: nobody could answer).
    let base = base_config(dir.path(), &ca).replace("[admin]\nlisten = \"off\"", "[admin]\nlisten = \"127.0.0.1:0\"");
    std::fs::write(&path, &base)?;
    let agentgate = Agentgate::start(dir.path(), &path, "info").await?;
    let client = agentgate.client()?;
    let refused_at_once = |response: reqwest::Response| async move {
        assert_eq!(response.status(), 403);
        let text = response.text().await?;
        assert!(text.contains("does not hold requests for approval"), "{text}");
        TestResult::Ok(())
    };
    refused_at_once(client.post(origin.url("/checkout")).body("order=42").send().await?).await?;

    // Hold without a token: the file is invalid, rejected, and the running config stays.
    let hold = "[approvals]\nmode = \"hold\"\n";
    replace_file(&path, &format!("{base}{hold}"))?;
    let rejected = ["config reload rejected", "[approvals] mode = \"hold\" holds requests", "no admin token"];
    agentgate.logged(&rejected, 1).await?;
    refused_at_once(client.post(origin.url("/checkout")).body("order=42").send().await?).await?;

    // Hold with a token in the same edit: the file is valid alone, but `[admin]` needs a
    // restart, so the running (token-less) `[admin]` would stay beside `hold`: rejected too.
    let token = "token_sha256 = \"16175223c8ddce5ace0493c948569c211b03c4c6bb3d3e484434999448cffe01\"\n";
    replace_file(&path, &format!("{base}{token}{hold}"))?;
    let stderr = agentgate
        .logged(
            &["config reload rejected", "no admin token", "checked with the running [admin]", "restart agentgate"],
            1,
        )
        .await?;
    assert!(!stderr.contains("config reloaded"), "no reload was put in force:\n{stderr}");
    refused_at_once(client.post(origin.url("/checkout")).body("order=42").send().await?).await?;
    assert_eq!(origin.hits("/checkout"), 0);
    agentgate.stop().await?;
    Ok(())
}
