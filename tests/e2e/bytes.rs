//! One event per request, and its bytes: a forwarded request's two lines told apart
//! by `event.type` (`["start"]`, then `["end"]` with both body byte counts, counted exactly as
//! they streamed through the MITM), a blocked request's one line (`["denied"]`), `audit grep`
//! printing one line per request unless `--raw`, and `audit summary` adding up the bytes.
//! Byte budgets: a declared upload that would cross the sending budget is refused `429`
//! before forwarding; a download that crosses the receiving budget is cut mid-stream.

use std::io;

use serde_json::Value;

use crate::agents::{agent, client_as};
use crate::support::log::for_request;
use crate::support::origin::{Origin, Site};
use crate::support::pattern::pattern_chunks;
use crate::support::pki::TestCa;
use crate::support::{TestProxy, TestResult, header};

const MIB: u64 = 1024 * 1024;

/// Runs `agentgate audit ARGS` and returns its stdout, failing on a failed run.
async fn audit(args: &[&str]) -> TestResult<String> {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentgate")).arg("audit").args(args).output().await?;
    assert!(output.status.success(), "audit {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    Ok(String::from_utf8(output.stdout)?)
}

fn types(line: &Value) -> &Value {
    &line["event.type"]
}

#[tokio::test]
async fn a_forwarded_request_has_a_start_and_an_end_line_with_exact_byte_counts() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin =
        Origin::https_site(&ca, Site::new().file("/robots.txt", "User-agent: *\nDisallow: /private\n")).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;

    // 1 MiB up, through the MITM (chunked: no Content-Length to copy the count from).
    let chunks = futures_util::stream::iter(pattern_chunks(MIB).map(Ok::<_, io::Error>));
    let upload = client.post(origin.url("/sink")).body(reqwest::Body::wrap_stream(chunks)).send().await?;
    assert_eq!(upload.status(), 200);
    let answer = upload.text().await?;
    assert_eq!(answer, format!("received {MIB} bytes, intact=true"));
    // 1 MiB down.
    let download = client.get(origin.url(&format!("/bytes/{MIB}"))).send().await?;
    assert_eq!(download.status(), 200);
    assert_eq!(download.bytes().await?.len() as u64, MIB);
    // Blocked by robots.txt: never forwarded.
    let blocked = client.get(origin.url("/private/x")).send().await?;
    assert_eq!(blocked.status(), 403);

    let dir = tempfile::tempdir()?;
    let log = dir.path().join("decisions.jsonl");
    let (_, text) = proxy.finish_with_text().await?;
    std::fs::write(&log, &text)?;
    let lines: Vec<Value> = text.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;

    let up = for_request(&lines, "POST", "/sink");
    assert_eq!(up.len(), 2, "{up:#?}");
    assert_eq!(up[0]["event.id"], up[1]["event.id"]);
    assert_eq!(types(up[0]), &serde_json::json!(["start"]), "{}", up[0]);
    assert_eq!(types(up[1]), &serde_json::json!(["end"]), "{}", up[1]);
    for line in &up {
        assert_eq!(line["event.category"], serde_json::json!(["network", "web"]), "{line}");
    }
    assert!(up[0]["http.request.body.bytes"].is_null(), "the start line knows no bytes yet: {}", up[0]);
    assert_eq!(up[1]["http.request.body.bytes"], MIB, "{}", up[1]);
    assert_eq!(up[1]["http.response.body.bytes"], answer.len(), "{}", up[1]);
    assert_eq!(up[1]["http.response.status_code"], 200, "{}", up[1]);
    assert!(up[1]["agentgate.body.cut"].is_null(), "{}", up[1]);

    let down = for_request(&lines, "GET", &format!("/bytes/{MIB}"));
    assert_eq!(down.len(), 2, "{down:#?}");
    assert_eq!(types(down[0]), &serde_json::json!(["start"]));
    assert_eq!(types(down[1]), &serde_json::json!(["end"]));
    assert_eq!(down[1]["http.request.body.bytes"], 0, "{}", down[1]);
    assert_eq!(down[1]["http.response.body.bytes"], MIB, "{}", down[1]);

    let denied = for_request(&lines, "GET", "/private/x");
    assert_eq!(denied.len(), 1, "a blocked request has one line: {denied:#?}");
    assert_eq!(types(denied[0]), &serde_json::json!(["denied"]), "{}", denied[0]);
    assert_eq!(denied[0]["event.action"], "deny");

    // `audit grep`: one line per request, the end line; `--raw`: both.
    let log = log.display().to_string();
    let merged = audit(&["grep", "--outcome", "allow", &log]).await?;
    let merged: Vec<Value> = merged.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    let sinks = for_request(&merged, "POST", "/sink");
    assert_eq!(sinks.len(), 1, "{merged:#?}");
    assert_eq!(types(sinks[0]), &serde_json::json!(["end"]));
    let raw = audit(&["grep", "--raw", "--outcome", "allow", &log]).await?;
    let raw: Vec<Value> = raw.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    assert_eq!(for_request(&raw, "POST", "/sink").len(), 2, "{raw:#?}");
    assert_eq!(raw.len(), merged.len() * 2, "every allowed request here was forwarded: {raw:#?}");

    // `audit summary`: the bytes, per agent and per origin.
    let by_agent: Value = serde_json::from_str(&audit(&["summary", "--format", "json", &log]).await?)?;
    assert_eq!(by_agent["total"]["sent_bytes"], MIB, "{by_agent:#}");
    assert_eq!(by_agent["total"]["received_bytes"].as_u64(), Some(MIB + answer.len() as u64), "{by_agent:#}");
    let by_origin: Value =
        serde_json::from_str(&audit(&["summary", "--by", "origin", "--format", "json", &log]).await?)?;
    let groups = by_origin["groups"].as_array().cloned().unwrap_or_default();
    let site = groups.iter().find(|g| g["key"] == origin.url("").trim_end_matches('/')).ok_or("the origin's row")?;
    assert_eq!(site["sent_bytes"], MIB, "{site:#}");
    assert_eq!(site["received_bytes"].as_u64(), Some(MIB + answer.len() as u64), "{site:#}");
    let table = audit(&["summary", &log]).await?;
    assert!(table.contains("| sent bytes | received bytes |"), "{table}");
    Ok(())
}

/// A proxy whose one agent, `bot`, has `limits` edited by `edit`, and a client as `bot`.
async fn budgeted(
    ca: &TestCa,
    edit: impl FnOnce(&mut agentgate::agents::AgentLimits),
) -> TestResult<(TestProxy, reqwest::Client)> {
    let mut bot = agent("bot", "b-token");
    edit(&mut bot.limits);
    let proxy = TestProxy::start_with(ca, |config| config.agents = vec![bot]).await?;
    let client = client_as(&proxy, "bot", "b-token")?;
    Ok((proxy, client))
}

#[tokio::test]
async fn a_sending_budget_refuses_the_upload_that_would_cross_it_before_the_origin_sees_it() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let (proxy, client) = budgeted(&ca, |limits| limits.sent_bytes_per_hour = 100 * 1024).await?;
    let upload = || {
        let body: Vec<u8> = pattern_chunks(60 * 1024).flat_map(|chunk| chunk.to_vec()).collect();
        client.post(origin.url("/sink")).body(body).send()
    };
    let first = upload().await?;
    assert_eq!(first.status(), 200);
    assert_eq!(first.text().await?, "received 61440 bytes, intact=true");
    let second = upload().await?;
    assert_eq!(second.status(), 429, "60 + 60 KiB would cross 100 KiB per hour");
    let retry_after: u64 = header(&second, "retry-after").parse()?;
    assert!(retry_after > 0 && retry_after <= 3600, "{retry_after}");
    let text = second.text().await?;
    assert!(text.contains("operator.byte_budget") && text.contains("limits.sent_bytes_per_hour = 102400"), "{text}");
    assert_eq!(origin.hits("/sink"), 1, "refused before forwarding: the origin never saw it");

    let lines = proxy.finish().await?;
    let sinks = for_request(&lines, "POST", "/sink");
    assert_eq!(sinks.len(), 2, "{sinks:#?}");
    assert_eq!(sinks[0]["http.request.body.bytes"], 60 * 1024, "{}", sinks[0]);
    assert_eq!(sinks[1]["event.action"], "rate_limited", "{}", sinks[1]);
    assert_eq!(sinks[1]["event.type"], serde_json::json!(["denied"]), "{}", sinks[1]);
    assert_eq!(sinks[1]["agentgate.reasons"][0]["code"], "operator.byte_budget", "{}", sinks[1]);
    Ok(())
}

#[tokio::test]
async fn a_receiving_budget_cuts_the_download_mid_stream_the_client_sees_an_error_and_the_record_says_cut() -> TestResult
{
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let (proxy, client) = budgeted(&ca, |limits| limits.received_bytes_per_hour = 64 * 1024).await?;
    // Over h2 the reset may reach the client with the head: an error either way, never a
    // short body that looks complete.
    let read = match client.get(origin.url(&format!("/bytes/{MIB}"))).send().await {
        Ok(download) => {
            assert_eq!(download.status(), 200, "the head went out before the budget was crossed");
            download.bytes().await.map(|body| body.len())
        }
        Err(error) => Err(error),
    };
    assert!(read.is_err(), "the cut body is an error: {read:?}");

    // Spent: the next download is refused before forwarding, as a spent rate is.
    let refused = client.get(origin.url("/bytes/10")).send().await?;
    assert_eq!(refused.status(), 429);
    assert!(header(&refused, "retry-after").parse::<u64>()? > 0);
    assert_eq!(origin.hits("/bytes/10"), 0, "the origin never saw it");

    let lines = proxy.finish().await?;
    let cut = for_request(&lines, "GET", &format!("/bytes/{MIB}"));
    assert_eq!(cut.len(), 1, "{cut:#?}");
    assert_eq!(cut[0]["agentgate.body.cut"], "budget", "{}", cut[0]);
    assert_eq!(cut[0]["http.response.status_code"], 200, "{}", cut[0]);
    let passed = cut[0]["http.response.body.bytes"].as_u64().ok_or("bytes counted")?;
    assert!(passed <= 64 * 1024, "no more than the budget passed: {}", cut[0]);
    Ok(())
}

#[tokio::test]
async fn a_streamed_upload_that_crosses_the_sending_budget_is_cut_and_recorded_as_cut() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let (proxy, client) = budgeted(&ca, |limits| limits.per_origin_sent_bytes_per_hour = 100 * 1024).await?;
    // Chunked: no declared length to refuse it by, so it is cut as it crosses the budget.
    let chunks = futures_util::stream::iter(pattern_chunks(MIB).map(Ok::<_, io::Error>));
    let sent = client.post(origin.url("/sink")).body(reqwest::Body::wrap_stream(chunks)).send().await;
    match sent {
        Ok(answer) => {
            let status = answer.status();
            let text = answer.text().await.unwrap_or_default();
            assert!(status.is_server_error() || status.is_client_error(), "{status}: {text}");
            assert!(!text.contains("intact=true"), "the origin never got the whole body: {text}");
        }
        Err(error) => assert!(!error.is_status(), "{error}"),
    }

    let lines = proxy.finish().await?;
    let cut = for_request(&lines, "POST", "/sink");
    let last = cut.last().ok_or("a record")?;
    assert_eq!(last["agentgate.body.cut"], "budget", "{last}");
    let sent = last["http.request.body.bytes"].as_u64().ok_or("bytes counted")?;
    assert!(sent <= 100 * 1024, "no more than the budget left: {last}");
    assert_eq!(last["error.type"], "proxy", "agentgate's own bound cut it: {last}");
    Ok(())
}
