//! One decision record per request, however the request ends: a client that hangs up at each
//! point where the request path waits (the policies loading, an approval hold, the origin's
//! answer, the response body) still leaves exactly one `event.id` in the log, with the lines
//! docs/decision-log.md promises (one for a request never forwarded, the decision and its
//! completion for a forwarded one, told apart by `event.type`, the completion with the bytes
//! and, for a body cut short, who cut it).

use serde_json::Value;

use crate::approvals::{ADMIN, checkout, hold, pending, shop};
use crate::support::log::for_request;
use crate::support::origin::{Origin, Served};
use crate::support::pki::TestCa;
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult};

/// Every line the proxy wrote, as written (not merged by `event.id`), once it has shut down.
async fn every_line(proxy: TestProxy) -> TestResult<Vec<Value>> {
    let (_, text) = proxy.finish_with_text().await?;
    Ok(text.lines().map(serde_json::from_str).collect::<Result<_, _>>()?)
}

/// The lines of `method` `path` in `records`, checked to be one request: one `event.id` over
/// `lines` lines.
fn one_request<'a>(records: &'a [Value], method: &str, path: &str, lines: usize) -> TestResult<Vec<&'a Value>> {
    let found = for_request(records, method, path);
    assert_eq!(found.len(), lines, "{method} {path}: {lines} lines expected in {records:#?}");
    let first = &found[0]["event.id"];
    assert!(first.is_string(), "{method} {path} has an event.id: {:?}", found[0]);
    for line in &found {
        assert_eq!(&line["event.id"], first, "{method} {path}: one event.id over its lines");
    }
    Ok(found)
}

/// The last line of a request its client abandoned before any answer: an error the client
/// caused, with no status.
fn hung_up(line: &Value) {
    assert_eq!(line["event.action"], "error", "{line}");
    assert_eq!(line["error.type"], "client", "{line}");
    assert_eq!(line["error.message"], "the client hung up before agentgate answered", "{line}");
    assert!(line["http.response.status_code"].is_null(), "nothing was answered: {line}");
}

#[tokio::test]
async fn a_client_that_hangs_up_at_any_point_leaves_exactly_one_record() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    // Its robots.txt is never answered: a request to it waits for its policies.
    let stuck = Origin::http().await?;
    stuck.serve("/robots.txt", Served::ok("").held());
    let origin = Origin::http().await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;

    // 1. While the policies load: no decision yet.
    let loading = tokio::spawn(client.get(stuck.url("/page")).send());
    eventually("robots.txt asked for", async || match stuck.hits("/robots.txt") {
        0 => Err("not yet".into()),
        _ => Ok(()),
    })
    .await?;
    loading.abort();

    // 2. Forwarded, before the origin's answer.
    let waiting = tokio::spawn(client.get(origin.url("/hold")).send());
    origin.arrived().await;
    waiting.abort();

    // 3. Answered, during the body.
    let mut reading = client.get(origin.url("/trickle")).send().await?;
    assert_eq!(reading.status(), 200);
    assert_eq!(reading.chunk().await?.as_deref(), Some(&b"first;"[..]));
    origin.arrived().await;
    drop(reading);
    origin.release();

    let records = every_line(proxy).await?;
    // Never decided: one line, the hang-up.
    let loading = one_request(&records, "GET", "/page", 1)?;
    hung_up(loading[0]);
    // Forwarded: the decision committed before forwarding, then its completion.
    let waiting = one_request(&records, "GET", "/hold", 2)?;
    assert_eq!(waiting[0]["event.action"], "allow", "{}", waiting[0]);
    hung_up(waiting[1]);
    // Its head was answered: the completion has the status, and the cut body is the client's.
    let reading = one_request(&records, "GET", "/trickle", 2)?;
    assert_eq!(reading[1]["event.action"], "allow", "{}", reading[1]);
    assert_eq!(reading[1]["http.response.status_code"], 200, "{}", reading[1]);
    // Its end line says the body was cut by the client, after at least the chunk it read.
    assert_eq!(reading[0]["event.type"], serde_json::json!(["start"]), "{}", reading[0]);
    assert_eq!(reading[1]["event.type"], serde_json::json!(["end"]), "{}", reading[1]);
    assert_eq!(reading[1]["agentgate.body.cut"], "client", "{}", reading[1]);
    assert!(reading[1]["http.response.body.bytes"].as_u64() >= Some(6), "{}", reading[1]);
    assert_eq!(reading[1]["http.request.body.bytes"], 0, "{}", reading[1]);
    Ok(())
}

#[tokio::test]
async fn a_client_that_hangs_up_while_held_for_approval_leaves_exactly_one_record() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let proxy = TestProxy::start_with(&ca, hold).await?;
    let held = checkout(&proxy.client()?, &origin);
    pending(&proxy, Some(ADMIN), 1).await?;
    held.abort();
    pending(&proxy, Some(ADMIN), 0).await?;

    let records = every_line(proxy).await?;
    let line = one_request(&records, "POST", "/checkout", 1)?[0];
    assert_eq!(line["event.action"], "needs_approval", "{line}");
    assert_eq!(line["agentgate.approval.decision"], "hung_up", "{line}");
    assert_eq!(origin.hits("/checkout"), 0);
    Ok(())
}

/// An agent probing forbidden paths cannot do it unseen: a request sent whole by a client that
/// closes its socket at once (before any answer can be read) still leaves its refusal in the
/// log, once per request, because the refusal is recorded before its answer is written.
#[tokio::test]
async fn refusals_whose_clients_close_at_once_are_all_recorded() -> TestResult {
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpStream;

    const PROBES: usize = 40;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    origin.serve("/robots.txt", Served::ok("User-agent: *\nDisallow: /private\n"));
    let proxy = TestProxy::start(&ca).await?;
    // The policies loaded once, so every probe is refused without waiting for a fetch.
    assert_eq!(proxy.client()?.get(origin.url("/private/warm")).send().await?.status(), 403);

    for probe in 0..PROBES {
        let mut socket = TcpStream::connect(proxy.addr).await?;
        let url = origin.url(&format!("/private/{probe}"));
        let host = url.trim_start_matches("http://").split('/').next().unwrap_or_default().to_owned();
        socket.write_all(format!("GET {url} HTTP/1.1\r\nHost: {host}\r\n\r\n").as_bytes()).await?;
        // Closed at once: nothing of the answer is ever read.
        drop(socket);
    }

    let log = proxy.log_path.clone();
    eventually("every probe recorded", async || {
        let text = std::fs::read_to_string(&log)?;
        let probes = text.lines().filter(|line| line.contains("/private/") && !line.contains("/private/warm")).count();
        match probes {
            PROBES => Ok(()),
            seen => Err(format!("{seen} of {PROBES} probes recorded").into()),
        }
    })
    .await?;
    let records = every_line(proxy).await?;
    for probe in 0..PROBES {
        let lines = one_request(&records, "GET", &format!("/private/{probe}"), 1)?;
        let reason = &lines[0]["agentgate.reasons"][0];
        assert_eq!(reason["code"], "robots.disallow", "{}", lines[0]);
    }
    assert_eq!(origin.hits("/private/0"), 0, "nothing refused reached the origin");
    Ok(())
}
