//! `[inspect]` (docs/inspect.md): with inspection on for an HTTPS origin's host, requests
//! carrying a credential (JSON, gzip'd JSON, a form field, a header, the query, the path) are
//! refused `403` `inspect.secret_in_request` before the origin sees anything; a clean 200 KiB
//! JSON body passes byte for byte; an oversized body follows `on_unreadable`; a WebSocket
//! upgrade is refused; monitor mode forwards with `would_deny`; a host outside `[inspect]`
//! streams as before; and no secret value reaches the decision log, the block answer, the
//! admin API or the binary's stderr at debug.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::Value;

use crate::forward::{LARGE_BODY, large_body_both_directions};
use crate::support::binary::Agentgate;
use crate::support::origin::Origin;
use crate::support::pki::TestCa;
use crate::support::raw::exchange;
use crate::support::{TestProxy, TestResult, bypass_all, header, log};
use agentgate::config::Config;
use agentgate::inspect::OnUnreadable;
use agentgate::policy::operator::Mode;

/// An AWS-style access key id (AWS's documented example).
const AWS_KEY: &str = "AKIAIOSFODNN7EXAMPLE";
/// A GitHub classic personal access token, in shape.
const GITHUB_TOKEN: &str = "ghp_9f3Kq7Lm2Xw8Rt5Yu1Io4Pa6Sd0Fg7Hj9Kl2";
/// The first line of a PEM private key and some of its body.
const PRIVATE_KEY: &str = "-----BEGIN RSA PRIVATE KEY----- MIIEowIBAAKCAQEA7bq98zUniqInspect29";
/// Every value a test sends that must never come back out.
const SECRETS: [&str; 3] = [AWS_KEY, GITHUB_TOKEN, "MIIEowIBAAKCAQEA7bq98zUniqInspect29"];

/// Inspection on for `localhost` (the HTTPS origin's name), every other setting as given.
fn inspecting(edit: impl FnOnce(&mut Config)) -> impl FnOnce(&mut Config) {
    move |config: &mut Config| {
        bypass_all(config);
        config.inspect.hosts = vec!["localhost".to_owned()];
        edit(config);
    }
}

fn gzip(bytes: &[u8]) -> TestResult<Vec<u8>> {
    let mut encoder = GzEncoder::new(Vec::new(), Compression::default());
    encoder.write_all(bytes)?;
    Ok(encoder.finish()?)
}

/// Asserts `response` is the inspection block naming `detector`, and that it shows no secret.
async fn assert_refused(response: reqwest::Response, detector: &str, place: &str) -> TestResult<String> {
    assert_eq!(response.status(), 403);
    let decision = header(&response, "agentgate-decision");
    assert!(decision.starts_with("deny;") && decision.contains("code=inspect.secret_in_request"), "{decision}");
    let body = response.text().await?;
    assert!(body.contains(&format!("{detector} in {place}")), "{body}");
    for secret in SECRETS {
        assert!(!body.contains(secret) && !decision.contains(secret), "{secret} in the answer: {body}");
    }
    Ok(body)
}

#[tokio::test]
async fn credentials_in_json_gzip_form_header_query_and_path_are_refused_before_the_origin() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start_with(&ca, inspecting(|_| {})).await?;
    let client = proxy.client()?;
    let json = format!(r#"{{"credentials":{{"key":"{AWS_KEY}"}},"note":"hello"}}"#);

    let response =
        client.post(origin.url("/echo")).header("content-type", "application/json").body(json.clone()).send().await?;
    assert_refused(response, "aws_access_key_id", "body: JSON field \"credentials.key\"").await?;

    let response = client
        .post(origin.url("/echo"))
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(gzip(json.as_bytes())?)
        .send()
        .await?;
    assert_refused(response, "aws_access_key_id", "body: JSON field \"credentials.key\"").await?;

    let response = client
        .post(origin.url("/echo"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("user=agent&token={GITHUB_TOKEN}"))
        .send()
        .await?;
    assert_refused(response, "github_token", "body: form field \"token\"").await?;

    let response = client.get(origin.url("/echo")).header("x-deploy-key", PRIVATE_KEY).send().await?;
    assert_refused(response, "private_key", "header: x-deploy-key").await?;

    let response = client.get(origin.url(&format!("/echo?token={GITHUB_TOKEN}"))).send().await?;
    assert_refused(response, "github_token", "query: token").await?;

    let response = client.get(origin.url(&format!("/keys/{AWS_KEY}"))).send().await?;
    assert_refused(response, "aws_access_key_id", "path").await?;

    assert_eq!(origin.hits("/echo"), 0, "the origin saw none of them");
    assert_eq!(origin.hits(&format!("/keys/{AWS_KEY}")), 0);

    // The admin API's recent decisions name the detectors, never a value.
    let admin = proxy.admin_addr.ok_or("the admin API listens")?;
    let recent = reqwest::get(format!("http://{admin}/decisions/recent")).await?.text().await?;
    assert!(recent.contains("inspect.secret_in_request"), "{recent}");
    let (records, text) = proxy.finish_with_text().await?;
    assert_eq!(records.len(), 6, "one line per refused request: {records:#?}");
    for record in &records {
        assert_eq!(record["event.action"], "deny", "{record}");
        assert_eq!(record["agentgate.reasons"][0]["code"], "inspect.secret_in_request", "{record}");
        assert_eq!(record["http.response.status_code"], 403, "{record}");
    }
    assert!(records[4]["url.full"].as_str().is_some_and(|url| url.ends_with("/echo?REDACTED")), "{:#}", records[4]);
    assert!(records[5]["url.full"].as_str().is_some_and(|url| url.ends_with("/REDACTED")), "{:#}", records[5]);
    for secret in SECRETS {
        assert!(!text.contains(secret), "{secret} in the decision log:\n{text}");
        assert!(!recent.contains(secret), "{secret} in the admin API:\n{recent}");
    }
    Ok(())
}

#[tokio::test]
async fn a_clean_200_kib_json_body_passes_byte_for_byte() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start_with(&ca, inspecting(|_| {})).await?;
    let items: Vec<Value> =
        (0..4500).map(|i| serde_json::json!({"id": i, "text": "lorem ipsum dolor sit amet"})).collect();
    let body = serde_json::to_vec(&serde_json::json!({ "items": items }))?;
    assert!(body.len() > 200 * 1024, "{}", body.len());
    let response = proxy
        .client()?
        .post(origin.url("/echo"))
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await?.as_ref(), body.as_slice(), "the origin got (and echoed) the very bytes");
    // A chunked body (no Content-Length) is read and forwarded whole as well.
    let chunks = futures_util::stream::iter(
        body.chunks(16 * 1024).map(|c| Ok::<_, std::io::Error>(c.to_vec())).collect::<Vec<_>>(),
    );
    let response = proxy
        .client()?
        .post(origin.url("/echo"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await?.as_ref(), body.as_slice());
    let records = proxy.finish().await?;
    assert!(records.iter().all(|r| r["event.action"] == "allow"), "{records:#?}");
    Ok(())
}

#[tokio::test]
async fn an_oversized_body_follows_on_unreadable() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let body = vec![b'a'; 64 * 1024];

    // Refuse (the default): declared over max_body, not read at all; sent chunked, read to
    // the bound and refused.
    let proxy = TestProxy::start_with(&ca, inspecting(|config| config.inspect.max_body = 16 * 1024)).await?;
    let client = proxy.client()?;
    let response = client.post(origin.url("/sink")).body(body.clone()).send().await?;
    assert_eq!(response.status(), 403);
    assert!(header(&response, "agentgate-decision").contains("code=inspect.unreadable"));
    let chunks = futures_util::stream::iter(vec![Ok::<_, std::io::Error>(body.clone())]);
    let response = client.post(origin.url("/sink")).body(reqwest::Body::wrap_stream(chunks)).send().await?;
    assert_eq!(response.status(), 403);
    assert!(response.text().await?.contains("over [inspect] max_body (16384 bytes)"));
    assert_eq!(origin.hits("/sink"), 0);
    drop(proxy);

    // Allow: forwarded whole, declared or chunked, the record noting it was not inspected.
    let proxy = TestProxy::start_with(
        &ca,
        inspecting(|config| {
            config.inspect.max_body = 16 * 1024;
            config.inspect.on_unreadable = OnUnreadable::Allow;
        }),
    )
    .await?;
    let client = proxy.client()?;
    let response = client.post(origin.url("/echo")).body(body.clone()).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await?.len(), body.len());
    let chunks =
        futures_util::stream::iter(vec![Ok::<_, std::io::Error>(body[..20_000].to_vec()), Ok(body[20_000..].to_vec())]);
    let response = client.post(origin.url("/echo")).body(reqwest::Body::wrap_stream(chunks)).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.bytes().await?.as_ref(), body.as_slice(), "the bytes read first, then the rest");
    let records = proxy.finish().await?;
    let completed: Vec<&Value> = records.iter().filter(|r| r["http.response.status_code"] == 200).collect();
    assert_eq!(completed.len(), 2, "{records:#?}");
    for record in completed {
        assert_eq!(record["event.action"], "allow", "{record}");
        let noted = record["agentgate.reasons"]
            .as_array()
            .is_some_and(|reasons| reasons.iter().any(|r| r["code"] == "inspect.unreadable" && r["blocking"] != true));
        assert!(noted, "{record}");
    }
    Ok(())
}

#[tokio::test]
async fn monitor_mode_forwards_with_would_deny() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start_with(&ca, inspecting(|config| config.mode = Mode::Monitor)).await?;
    let json = format!(r#"{{"key":"{AWS_KEY}"}}"#);
    let response = proxy
        .client()?
        .post(origin.url("/echo"))
        .header("content-type", "application/json")
        .body(json.clone())
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await?, json, "forwarded unchanged");
    assert_eq!(origin.hits("/echo"), 1);
    let records = proxy.finish().await?;
    let completed = records.iter().find(|r| r["http.response.status_code"] == 200).ok_or("a completed record")?;
    assert_eq!(completed["event.action"], "would_deny", "{completed}");
    assert_eq!(completed["agentgate.reasons"][0]["code"], "inspect.secret_in_request", "{completed}");
    Ok(())
}

#[tokio::test]
async fn a_websocket_upgrade_to_an_inspected_host_is_refused_and_other_hosts_stream_as_before() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.inspect.hosts = vec!["127.0.0.1".to_owned()];
        config.inspect.agents = Vec::new();
    })
    .await?;
    let upgrade = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        origin.url("/ws"),
        origin.authority()
    );
    let answer = exchange(proxy.addr, upgrade.as_bytes()).await?;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("code=inspect.unreadable") && answer.contains("WebSocket"), "{answer}");
    assert_eq!(origin.hits("/ws"), 0);
    drop(proxy);

    // Inspection for another host only: this one's secret-looking upload streams through.
    let https = Origin::https(&ca).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.inspect.hosts = vec!["elsewhere.example".to_owned()];
    })
    .await?;
    let response = proxy.client()?.post(https.url("/echo")).body(format!("key={AWS_KEY}")).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await?, format!("key={AWS_KEY}"));
    // And a body far over any `max_body` (16 MiB at most) streams both ways, as it does with
    // no `[inspect]` (`forward::large_body_streams_both_directions`): read for inspection, it
    // would have been refused as unreadable.
    let url = https.url(&format!("/bytes/{LARGE_BODY}"));
    large_body_both_directions(&proxy.client()?, &url, &https.url("/sink"), LARGE_BODY).await
}

/// The real binary at debug: a refused credential and a monitored one leave no value on
/// stderr or in the decision log.
#[tokio::test]
async fn no_found_value_reaches_stderr_or_the_decision_log() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let dir = tempfile::tempdir()?;
    let log_path = dir.path().join("decisions.jsonl");
    let config = format!(
        "listen = \"127.0.0.1:0\"\nbypass_hosts = [\"*\"]\n[ca]\ndir = {ca_dir:?}\n[upstream]\nextra_ca_files = [{origin_ca:?}]\n\
         [network]\nallow_cidrs = [\"127.0.0.0/8\"]\n[connect]\nallowed_ports = [\"1-65535\"]\n[audit]\npath = {log:?}\n\
         [admin]\nlisten = \"off\"\n[inspect]\nhosts = [\"localhost\"]\n",
        ca_dir = dir.path().join("ca"),
        origin_ca = ca.pem_path,
        log = log_path,
    );
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, config)?;
    let agentgate = Agentgate::start(dir.path(), &config_path, "debug").await?;
    let client = agentgate.client()?;
    let json = format!(r#"{{"aws":"{AWS_KEY}","gh":"{GITHUB_TOKEN}"}}"#);
    let response = client
        .post(origin.url(&format!("/echo?t={GITHUB_TOKEN}")))
        .header("content-type", "application/json")
        .header("x-key", PRIVATE_KEY)
        .body(json)
        .send()
        .await?;
    assert_refused(response, "aws_access_key_id", "body: JSON field \"aws\"").await?;
    let records = log::wait_for(&log_path, 1).await?;
    assert_eq!(records[0]["agentgate.reasons"][0]["code"], "inspect.secret_in_request");
    agentgate.logged(&["inspection", "aws_access_key_id"], 1).await?;
    let stderr = agentgate.kill().await?;
    let decisions = std::fs::read_to_string(&log_path)?;
    for secret in SECRETS {
        assert!(!stderr.contains(secret), "{secret} on stderr:\n{stderr}");
        assert!(!decisions.contains(secret), "{secret} in the decision log:\n{decisions}");
    }
    assert_eq!(origin.hits("/echo"), 0);
    Ok(())
}

/// Origins read a body as JSON whatever it is labelled: a key spelled with `\u` escapes is
/// found under `text/json`, `text/plain`, no `Content-Type` and two `Content-Type` lines,
/// as under `application/json`. And an AWS key id sent as a header *name* (which arrives
/// lower-cased) is found too.
#[tokio::test]
async fn an_escaped_key_in_json_under_any_label_and_a_key_as_a_header_name_are_refused() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start_with(&ca, inspecting(|_| {})).await?;
    let client = proxy.client()?;
    let escaped = format!(r#"{{"key":"\u0041{}"}}"#, &AWS_KEY[1..]);
    let labels: [&[&str]; 4] = [&["text/json"], &["text/plain"], &[], &["text/plain", "application/json"]];
    for label in labels {
        let mut headers = reqwest::header::HeaderMap::new();
        for value in label {
            headers.append(reqwest::header::CONTENT_TYPE, reqwest::header::HeaderValue::from_str(value)?);
        }
        let response = client.post(origin.url("/echo")).headers(headers).body(escaped.clone()).send().await?;
        assert_refused(response, "aws_access_key_id", "body").await?;
    }
    let response = client.get(origin.url("/echo")).header(format!("X-{AWS_KEY}"), "1").send().await?;
    assert_refused(response, "aws_access_key_id", "header").await?;
    assert_eq!(origin.hits("/echo"), 0, "the origin saw none of them");
    Ok(())
}
