//! One event per request, and its bytes (issue 29): a forwarded request's two lines told apart
//! by `event.type` (`["start"]`, then `["end"]` with both body byte counts, counted exactly as
//! they streamed through the MITM), a blocked request's one line (`["denied"]`), `audit grep`
//! printing one line per request unless `--raw`, and `audit summary` adding up the bytes.

use std::io;

use serde_json::Value;

use crate::support::log::for_request;
use crate::support::origin::{Origin, Site};
use crate::support::pattern::pattern_chunks;
use crate::support::pki::TestCa;
use crate::support::{TestProxy, TestResult};

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
    let origin = Origin::https_site(&ca, Site::new().file("/robots.txt", "User-agent: *\nDisallow: /private\n")).await?;
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
    assert_eq!(denied[0]["event.outcome"], "deny");

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
    let by_origin: Value = serde_json::from_str(&audit(&["summary", "--by", "origin", "--format", "json", &log]).await?)?;
    let groups = by_origin["groups"].as_array().cloned().unwrap_or_default();
    let site = groups.iter().find(|g| g["key"] == origin.url("").trim_end_matches('/')).ok_or("the origin's row")?;
    assert_eq!(site["sent_bytes"], MIB, "{site:#}");
    assert_eq!(site["received_bytes"].as_u64(), Some(MIB + answer.len() as u64), "{site:#}");
    let table = audit(&["summary", &log]).await?;
    assert!(table.contains("| sent bytes | received bytes |"), "{table}");
    Ok(())
}
