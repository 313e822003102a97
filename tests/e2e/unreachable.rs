//! Answers that tell the truth: an origin that cannot be reached while its policy
//! files are fetched (connection refused, connect timeout) is answered 502 or 504 with
//! `origin.unreachable` and the cause, recorded as an `error`, not as a robots.txt deny; an
//! origin that accepts the connection and then fails keeps RFC 9309's full disallow
//! (`robots.unreachable`). A host that does not resolve never gets this far: the network
//! guard answers it 502 before any fetch (`network::*`).

use std::future::pending;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use agentgate::net::{Dial, NetFuture, SystemResolver};
use tokio::net::{TcpListener, TcpStream};

use crate::support::log::by_id;
use crate::support::pki::TestCa;
use crate::support::{TestProxy, TestResult, header};

/// A loopback port with nothing listening: bound, then closed.
async fn closed_port() -> TestResult<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    Ok(listener.local_addr()?.port())
}

/// Checks an `origin.unreachable` answer, then its log line, the `nth` line of `proxy`'s log.
async fn unreachable_answer(
    proxy: &TestProxy,
    nth: usize,
    response: reqwest::Response,
    status: u16,
    cause: &str,
) -> TestResult {
    assert_eq!(response.status(), status);
    let decision = header(&response, "agentgate-decision");
    let prefix = "error; source=operator; code=origin.unreachable; record=";
    assert!(decision.starts_with(prefix), "{decision}");
    let record = decision.rsplit("record=").next().unwrap_or_default().to_owned();
    let body = response.text().await?;
    assert!(body.contains("could not reach the site"), "{body}");
    assert!(body.contains("No policy forbade it"), "{body}");
    assert!(body.contains(cause), "the body names the cause {cause:?}: {body}");
    assert!(body.contains("[origin.unreachable]") && !body.contains("[robots.unreachable]"), "{body}");
    let records = proxy.log_lines(nth).await?;
    let line = by_id(&records, &record)?;
    assert_eq!(line["event.action"], "error", "{line:#}");
    assert_eq!(line["http.response.status_code"], status, "{line:#}");
    assert_eq!(line["error.type"], "origin", "{line:#}");
    assert!(line["error.message"].as_str().is_some_and(|m| m.contains(cause)), "{line:#}");
    let reasons = &line["agentgate.reasons"];
    assert_eq!(
        (&reasons[0]["code"], &reasons[0]["blocking"]),
        (&"origin.unreachable".into(), &true.into()),
        "{line:#}"
    );
    // What robots.txt alone would have said stays in the record, not as a blocking reason.
    assert_eq!(reasons[1]["code"], "robots.unreachable", "{line:#}");
    assert_eq!(reasons[1].get("blocking"), None, "{line:#}");
    Ok(())
}

#[tokio::test]
async fn connection_refused_is_502_origin_unreachable_not_a_robots_deny() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let port = closed_port().await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;
    let url = format!("http://127.0.0.1:{port}/page");
    let cause = format!("cannot connect to 127.0.0.1:{port}");
    let response = client.get(&url).send().await?;
    unreachable_answer(&proxy, 1, response, 502, &cause).await?;

    // Through a MITM'd tunnel too.
    let response = client.get(format!("https://127.0.0.1:{port}/page")).send().await?;
    unreachable_answer(&proxy, 2, response, 502, &cause).await?;
    let records = proxy.finish().await?;
    assert_eq!(records.len(), 2, "one record per request: {records:#?}");

    // Monitor mode answers the same: there is nothing to forward to, and nothing "would" happen.
    let monitor = TestProxy::start_with(&ca, |config| config.mode = agentgate::policy::operator::Mode::Monitor).await?;
    let response = monitor.client()?.get(&url).send().await?;
    unreachable_answer(&monitor, 1, response, 502, &cause).await?;
    Ok(())
}

/// A dialer that never connects: every connection waits for `[upstream] connect_timeout`.
struct BlackHole;

impl Dial for BlackHole {
    fn dial(&self, _: SocketAddr) -> NetFuture<'_, TcpStream> {
        Box::pin(pending())
    }
}

#[tokio::test]
async fn connect_timeout_is_504_origin_unreachable() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start_with_network(&ca, Arc::new(SystemResolver), Arc::new(BlackHole), |config| {
        // Shorter than the policy fetch timeout (10 s), so the connection is what times out.
        config.upstream.connect_timeout = Duration::from_millis(300);
    })
    .await?;
    let response = proxy.client()?.get("http://127.0.0.1:9/page").send().await?;
    let cause = "timed out connecting to 127.0.0.1:9";
    unreachable_answer(&proxy, 1, response, 504, cause).await?;
    Ok(())
}

/// An origin that accepts the connection and hangs up before answering was reached: its
/// robots.txt failed, so RFC 9309 §2.3.1.4's full disallow applies.
#[tokio::test]
async fn an_origin_that_accepts_then_hangs_up_keeps_the_robots_full_disallow() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let hang_up = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            drop(stream);
        }
    });
    let proxy = TestProxy::start(&ca).await?;
    let response = proxy.client()?.get(format!("http://127.0.0.1:{port}/page")).send().await?;
    assert_eq!(response.status(), 403);
    let decision = header(&response, "agentgate-decision");
    assert!(decision.starts_with("deny; source=robots.txt; code=robots.unreachable; record="), "{decision}");
    let records = proxy.finish().await?;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["event.action"], "deny");
    assert_eq!(records[0]["agentgate.reasons"][0]["code"], "robots.unreachable");
    hang_up.abort();
    Ok(())
}
