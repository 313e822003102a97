//! The audit promise (`docs/decision-log.md`): under `[audit] on_failure = "block"` a request
//! reaches the origin only once its decision line is on disk, so forwarded requests never
//! outnumber complete records; a log that cannot be written forwards nothing.

use std::path::PathBuf;

use serde_json::Value;

use crate::support::log;
use crate::support::origin::Origin;
use crate::support::pki::TestCa;
use crate::support::{TestProxy, TestResult, bypass_all};

/// The lines of the log `text` for `event.id` `id`, in file order.
fn decision_lines(text: &str, id: &str) -> TestResult<Vec<Value>> {
    let mut lines = Vec::new();
    for line in text.lines() {
        let value: Value = serde_json::from_str(line)?;
        if value["event.id"] == id {
            lines.push(value);
        }
    }
    Ok(lines)
}

#[tokio::test]
async fn the_decision_is_on_disk_before_the_origin_sees_the_request() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start_edge(&ca).await?;
    let client = proxy.client()?;
    let url = origin.url("/hold");
    let request = tokio::spawn(async move { client.get(url).send().await });
    origin.arrived().await;
    // The origin holds the request: its decision line is already in the file, without a status.
    let written = log::lines(&proxy.log_path)?;
    assert_eq!(written.len(), 1, "{written:#?}");
    assert_eq!(written[0]["event.action"], "allow");
    assert!(written[0]["http.response.status_code"].is_null(), "{written:#?}");
    let id = written[0]["event.id"].as_str().ok_or("an event.id")?.to_owned();
    origin.release();
    assert_eq!(request.await??.status(), 200);

    let (records, text) = proxy.finish_with_text().await?;
    let lines = decision_lines(&text, &id)?;
    assert_eq!(lines.len(), 2, "a decision line, then the completed one: {lines:#?}");
    assert_eq!(lines[1]["http.response.status_code"], 200);
    assert_eq!(records.len(), 1, "readers count one request per event.id: {records:#?}");
    assert_eq!(log::by_id(&records, &id)?["http.response.status_code"], 200);
    Ok(())
}

/// `/dev/full` opens, and fails every write with ENOSPC: a disk that is full from the start.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn with_the_log_on_a_full_disk_block_forwards_nothing_and_continue_forwards() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let full = |config: &mut agentgate::config::Config| {
        bypass_all(config);
        config.audit.path = PathBuf::from("/dev/full");
    };
    let proxy = TestProxy::start_with(&ca, full).await?;
    let client = proxy.client()?;
    for _ in 0..5 {
        let response = client.get(origin.url("/echo")).send().await?;
        assert_eq!(response.status(), 503);
        assert!(response.text().await?.contains("decision log cannot be written"));
    }
    assert_eq!(origin.hits("/echo"), 0, "nothing was forwarded unrecorded");
    drop(proxy);

    let proxy = TestProxy::start_with(&ca, |config| {
        full(config);
        config.audit.on_failure = agentgate::audit::OnFailure::Continue;
    })
    .await?;
    let response = proxy.client()?.get(origin.url("/echo")).send().await?;
    assert_eq!(response.status(), 200, "continue keeps forwarding; the loss is counted");
    assert_eq!(origin.hits("/echo"), 1);
    Ok(())
}

/// `[audit] path = "-"`: stdout, a pipe here that a reader may stop reading, is written by
/// the log's flusher thread, never by a runtime worker (`docs/decision-log.md`, "Who
/// writes"). Each forwarded request's committed decision line and its completed line arrive
/// whole, the decision first.
#[tokio::test]
async fn a_decision_log_on_stdout_holds_both_lines_of_every_request() -> TestResult {
    use crate::support::binary::{WAIT_LIMIT, run_reading_stdout};
    use crate::support::origin::Site;

    agentgate::tls::install_default_provider();
    let origin = Origin::http_site(Site::new()).await?;
    let dir = tempfile::tempdir()?;
    let config_path = dir.path().join("agentgate.toml");
    let config = format!(
        "listen = \"127.0.0.1:0\"\nbypass_hosts = [\"*\"]\n[ca]\ndir = {ca:?}\n[network]\n\
         allow_cidrs = [\"127.0.0.0/8\"]\n[audit]\npath = \"-\"\n[admin]\nlisten = \"off\"\n",
        ca = dir.path().join("ca"),
    );
    std::fs::write(&config_path, config)?;
    let (mut child, mut stdout) = run_reading_stdout(&config_path)?;
    let next_line = async |stdout: &mut tokio::io::Lines<_>| -> TestResult<String> {
        let line = tokio::time::timeout(WAIT_LIMIT, stdout.next_line()).await??;
        Ok(line.ok_or("agentgate closed stdout")?)
    };
    let banner = next_line(&mut stdout).await?;
    let addr = banner
        .strip_prefix("agentgate listening on http://")
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| format!("unexpected banner: {banner}"))?
        .to_owned();
    let client = reqwest::Client::builder().proxy(reqwest::Proxy::http(format!("http://{addr}"))?).build()?;
    const REQUESTS: usize = 5;
    for n in 0..REQUESTS {
        assert_eq!(client.get(origin.url(&format!("/stdout/{n}"))).send().await?.status(), 200);
    }
    let mut text = String::new();
    while text.lines().count() < 2 * REQUESTS {
        let line = next_line(&mut stdout).await?;
        if line.starts_with('{') {
            text.push_str(&line);
            text.push('\n');
        }
    }
    child.kill().await?;
    for n in 0..REQUESTS {
        let decision = text
            .lines()
            .find(|line| line.contains(&format!("/stdout/{n}\"")))
            .ok_or_else(|| format!("no line for request {n}:\n{text}"))?;
        let id = serde_json::from_str::<Value>(decision)?["event.id"].as_str().ok_or("an event.id")?.to_owned();
        let lines = decision_lines(&text, &id)?;
        assert_eq!(lines.len(), 2, "a decision line and a completed line: {lines:#?}");
        assert!(lines[0]["http.response.status_code"].is_null(), "the decision first: {lines:#?}");
        assert_eq!(lines[1]["http.response.status_code"], 200, "{lines:#?}");
        assert_eq!(lines[1]["event.action"], "allow");
    }
    Ok(())
}
