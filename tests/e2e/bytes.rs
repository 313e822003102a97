//! One event per request, and its bytes: a forwarded request's two lines told apart
//! by `event.type` (`["start"]`, then `["end"]` with both body byte counts, counted exactly as
//! they streamed through the MITM), a blocked request's one line (`["denied"]`), `audit grep`
//! printing one line per request unless `--raw`, and `audit summary` adding up the bytes.
//! Byte budgets: a declared upload that would cross the sending budget is refused `429`
//! before forwarding, one larger than the whole budget `413`, a chunked one that crosses it
//! `429`; a spent receiving budget refuses before forwarding, a response longer than what is
//! left is refused whole (one longer than the whole budget `403`, never retried), and only a download of unknown length is cut mid-stream; the bytes
//! of a WebSocket relay and of a passthrough tunnel are counted, cut at the budget and refused
//! once it is spent.

use std::io;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::agents::{agent, client_as};
use crate::support::log::for_request;
use crate::support::origin::{Origin, Served, Site};
use crate::support::pattern::pattern_chunks;
use crate::support::pki::TestCa;
use crate::support::raw::{read_head, tls_client};
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
    // The bytes the client got before the cut, read frame by frame.
    let mut received = 0u64;
    let read = match client.get(origin.url(&format!("/bytes/{MIB}"))).send().await {
        Ok(mut download) => {
            assert_eq!(download.status(), 200, "the head went out before the budget was crossed");
            loop {
                match download.chunk().await {
                    Ok(Some(chunk)) => received += chunk.len() as u64,
                    Ok(None) => break Ok(received),
                    Err(error) => break Err(error),
                }
            }
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
    assert_eq!(passed, received, "the record counts what reached the client: {}", cut[0]);
    // A body of unknown length cut by a budget is a refusal, with the budget's code.
    assert_eq!(cut[0]["event.action"], "rate_limited", "{}", cut[0]);
    assert_eq!(cut[0]["agentgate.reasons"][0]["code"], "operator.byte_budget", "{}", cut[0]);
    Ok(())
}

/// Receiving budget 300,000 bytes and a 200,000-byte file served with its `Content-Length`
/// at `/file`, through `first` and `second`, two clients of one budget (of one proxy, or of
/// two replicas on Redis): the first download is whole; the second, longer than the 100,000
/// bytes left, is refused `429` whole (not a byte of it passes); a 98,000-byte download of
/// unknown length fits and leaves 2,000, less than the floor (the smaller of 64 KiB and 1 %
/// of the budget: 3,000), so the next request is refused `429` before it is forwarded (the
/// origin's counter does not move), told to retry once the floor has refilled (36 s), not
/// in an hour.
pub(crate) async fn a_receiving_budget_of_300000_refuses_rather_than_cuts(
    first: &reqwest::Client,
    second: &reqwest::Client,
    origin: &Origin,
) -> TestResult {
    const FILE: usize = 200_000;
    origin.serve("/file", Served::ok(vec![b'x'; FILE]));
    let whole = first.get(origin.url("/file")).send().await?;
    assert_eq!(whole.status(), 200);
    assert_eq!(whole.bytes().await?.len(), FILE, "the first download is whole");

    let longer = second.get(origin.url("/file")).send().await?;
    assert_eq!(longer.status(), 429, "200,000 declared, 100,000 left: refused whole, not cut");
    let retry_after: u64 = header(&longer, "retry-after").parse()?;
    assert!((1..=3600).contains(&retry_after), "{retry_after}");
    let text = longer.text().await?;
    assert!(text.contains("operator.byte_budget") && text.contains("received_bytes_per_hour = 300000"), "{text}");
    assert!(!text.contains("xxxx"), "not a byte of the file passed: {text}");
    assert_eq!(origin.hits("/file"), 2);

    let fits = first.get(origin.url("/bytes/98000")).send().await?;
    assert_eq!(fits.status(), 200);
    assert_eq!(fits.bytes().await?.len(), 98_000, "within what is left: whole");

    let spent = second.get(origin.url("/file")).send().await?;
    assert_eq!(spent.status(), 429, "less than the floor is left");
    let retry_after: u64 = header(&spent, "retry-after").parse()?;
    assert!((1..=60).contains(&retry_after), "the floor of 3,000 bytes refills in 36 s: {retry_after}");
    let text = spent.text().await?;
    assert!(text.contains("operator.byte_budget"), "{text}");
    assert_eq!(origin.hits("/file"), 2, "refused before forwarding: the origin's counter did not move");
    Ok(())
}

#[tokio::test]
async fn a_spent_receiving_budget_refuses_before_forwarding_and_a_longer_response_is_refused_whole() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let (proxy, client) = budgeted(&ca, |limits| limits.received_bytes_per_hour = 300_000).await?;
    a_receiving_budget_of_300000_refuses_rather_than_cuts(&client, &client, &origin).await?;

    let lines = proxy.finish().await?;
    let files = for_request(&lines, "GET", "/file");
    assert_eq!(files.len(), 3, "{files:#?}");
    assert_eq!(files[0]["http.response.body.bytes"], 200_000, "{}", files[0]);
    for refused in &files[1..] {
        assert_eq!(refused["event.action"], "rate_limited", "{refused}");
        assert_eq!(refused["http.response.status_code"], 429, "{refused}");
        assert_eq!(refused["agentgate.reasons"][0]["code"], "operator.byte_budget", "{refused}");
        assert!(refused["agentgate.body.cut"].is_null(), "refused whole, never cut: {refused}");
    }
    Ok(())
}

/// A response declared longer than the whole receiving budget can never pass, however long
/// the agent waits: withheld whole with `403` and no `Retry-After` (not `429`, whose retry
/// would fail again), the budget's code and plain words in the answer, and the budget left
/// unspent for the next download.
#[tokio::test]
async fn a_response_longer_than_the_whole_receiving_budget_is_withheld_with_403_and_no_retry() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let (proxy, client) = budgeted(&ca, |limits| limits.received_bytes_per_hour = 300_000).await?;
    origin.serve("/huge", Served::ok(vec![b'x'; 400_000]));
    let huge = client.get(origin.url("/huge")).send().await?;
    assert_eq!(huge.status(), 403, "400,000 declared, 300,000 per hour at most: never fits");
    assert!(huge.headers().get("retry-after").is_none(), "no wait makes it pass");
    let text = huge.text().await?;
    assert!(text.contains("can never pass under this budget") && text.contains("operator.byte_budget"), "{text}");
    assert!(!text.contains("xxxx"), "not a byte of the answer passed: {text}");
    let after = client.get(origin.url("/bytes/250000")).send().await?;
    assert_eq!(after.bytes().await?.len(), 250_000, "the withheld answer spent nothing");

    let lines = proxy.finish().await?;
    let refused = for_request(&lines, "GET", "/huge");
    assert_eq!(refused.len(), 1, "{refused:#?}");
    assert_eq!(refused[0]["event.action"], "deny", "{}", refused[0]);
    assert_eq!(refused[0]["http.response.status_code"], 403, "{}", refused[0]);
    assert_eq!(refused[0]["agentgate.reasons"][0]["code"], "operator.byte_budget", "{}", refused[0]);
    Ok(())
}

#[tokio::test]
async fn a_chunked_upload_crossing_the_sending_budget_gets_429_and_a_body_larger_than_the_budget_413() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let (proxy, client) = budgeted(&ca, |limits| limits.sent_bytes_per_hour = 100 * 1024).await?;
    let chunks = futures_util::stream::iter(pattern_chunks(MIB).map(Ok::<_, io::Error>));
    let crossing = client.post(origin.url("/sink")).body(reqwest::Body::wrap_stream(chunks)).send().await?;
    assert_eq!(crossing.status(), 429, "the budget's status, not a framing error");
    let retry_after: u64 = header(&crossing, "retry-after").parse()?;
    assert!((1..=3600).contains(&retry_after), "{retry_after}");
    let text = crossing.text().await?;
    assert!(text.contains("operator.byte_budget") && text.contains("limits.sent_bytes_per_hour = 102400"), "{text}");
    assert!(!text.contains("chunked framing"), "{text}");

    let larger = client.post(origin.url("/sink")).body(vec![0u8; 200 * 1024]).send().await?;
    assert_eq!(larger.status(), 413, "200 KiB can never pass under 100 KiB per hour");
    assert!(larger.headers().get("retry-after").is_none(), "no wait makes it pass");
    let text = larger.text().await?;
    assert!(text.contains("operator.byte_budget") && text.contains("never pass"), "{text}");
    assert_eq!(origin.hits("/sink"), 1, "only the chunked upload reached the origin");

    let lines = proxy.finish().await?;
    let sinks = for_request(&lines, "POST", "/sink");
    assert_eq!(sinks.len(), 2, "{sinks:#?}");
    assert_eq!(sinks[0]["event.action"], "rate_limited", "a refusal: {}", sinks[0]);
    assert_eq!(sinks[0]["http.response.status_code"], 429, "{}", sinks[0]);
    assert_eq!(sinks[0]["agentgate.reasons"][0]["code"], "operator.byte_budget", "{}", sinks[0]);
    assert_eq!(sinks[0]["agentgate.body.cut"], "budget", "{}", sinks[0]);
    assert!(sinks[0]["http.request.body.bytes"].as_u64().is_some_and(|n| n <= 100 * 1024), "{}", sinks[0]);
    assert_eq!(sinks[1]["event.action"], "deny", "{}", sinks[1]);
    assert_eq!(sinks[1]["http.response.status_code"], 413, "{}", sinks[1]);
    assert_eq!(sinks[1]["agentgate.reasons"][0]["code"], "operator.byte_budget", "{}", sinks[1]);
    Ok(())
}

/// `Proxy-Authorization` for `id:token`.
fn proxy_authorization(id: &str, token: &str) -> String {
    use base64::Engine as _;
    format!(
        "Proxy-Authorization: Basic {}\r\n",
        base64::engine::general_purpose::STANDARD.encode(format!("{id}:{token}"))
    )
}

/// Sends a WebSocket upgrade for `origin`'s `/ws` to the proxy as `credentials`
/// ([`proxy_authorization`]): the connection and the answer's head.
async fn upgrade(proxy: &TestProxy, origin: &Origin, credentials: &str) -> TestResult<(TcpStream, String)> {
    let mut stream = TcpStream::connect(proxy.addr).await?;
    let handshake = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\n{credentials}Connection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        origin.url("/ws"),
        origin.authority()
    );
    stream.write_all(handshake.as_bytes()).await?;
    let head = read_head(&mut stream).await?;
    Ok((stream, head))
}

/// Sends a CONNECT for `authority` as `credentials`: the connection and the answer's head.
async fn connect_as(proxy: &TestProxy, authority: &str, credentials: &str) -> TestResult<(TcpStream, String)> {
    let mut stream = TcpStream::connect(proxy.addr).await?;
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n{credentials}\r\n");
    stream.write_all(request.as_bytes()).await?;
    let head = read_head(&mut stream).await?;
    Ok((stream, head))
}

/// Budgets count the bytes of upgraded connections and passthrough tunnels both ways, each
/// agent with a 100 KiB `sent_bytes_per_hour`: once `bot` has spent its budget on an upload,
/// a WebSocket upgrade (to a host that is not inspected) and a passthrough CONNECT are
/// refused `429` before their `101` / `200`; a WebSocket of `ws` that sends 400 KiB and a
/// passthrough tunnel of `tunnel` that uploads 400 KiB are each cut at the budget. Each cut
/// and refusal is recorded with `operator.byte_budget`.
#[tokio::test]
async fn a_sending_budget_cuts_websockets_and_passthrough_tunnels_at_the_budget_and_refuses_them_once_spent()
-> TestResult {
    const KIB: usize = 1024;
    let ca = TestCa::new("origin CA")?;
    let plain = Origin::http().await?;
    let tls = Origin::https(&ca).await?;
    let agents = ["bot", "ws", "tunnel"].map(|id| {
        let mut budgeted = agent(id, &format!("{id}-token"));
        budgeted.limits.sent_bytes_per_hour = 100 * 1024;
        budgeted
    });
    let proxy = TestProxy::start_with(&ca, |config| {
        config.agents = agents.to_vec();
        config.mitm.set_passthrough_hosts(vec!["localhost".to_owned()]);
    })
    .await?;
    let [as_bot, as_ws, as_tunnel] = ["bot", "ws", "tunnel"].map(|id| proxy_authorization(id, &format!("{id}-token")));

    let spend = vec![7u8; 100 * KIB];
    let spent = client_as(&proxy, "bot", "bot-token")?.post(plain.url("/sink")).body(spend).send().await?;
    assert_eq!(spent.status(), 200, "the whole budget, declared");
    let (_, head) = upgrade(&proxy, &plain, &as_bot).await?;
    assert!(head.starts_with("HTTP/1.1 429"), "spent: refused before the 101: {head}");
    assert!(head.to_ascii_lowercase().contains("retry-after: "), "{head}");
    let (_, head) = connect_as(&proxy, &tls.authority(), &as_bot).await?;
    assert!(head.starts_with("HTTP/1.1 429"), "spent: refused before the 200: {head}");
    assert_eq!(plain.hits("/ws"), 0, "the origin never saw the refused upgrade");

    let (stream, head) = upgrade(&proxy, &plain, &as_ws).await?;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut ws = WebSocketStream::from_raw_socket(stream, Role::Client, None).await;
    let message = Message::binary(vec![7u8; 16 * KIB]);
    let mut echoed = 0;
    let relayed = tokio::time::timeout(Duration::from_secs(20), async {
        for _ in 0..25 {
            if ws.send(message.clone()).await.is_err() {
                break;
            }
            match ws.next().await {
                Some(Ok(answer)) => echoed += answer.len(),
                _ => break,
            }
        }
    })
    .await;
    assert!(relayed.is_ok(), "the relay ended or was cut, it did not hang");
    assert!(echoed <= 100 * KIB, "no more than the budget was sent through the WebSocket: {echoed}");

    let (stream, head) = connect_as(&proxy, &tls.authority(), &as_tunnel).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut tunnel = tls_client(stream, "localhost", &ca.pem, &[b"http/1.1"]).await?;
    let body = vec![7u8; 400 * KIB];
    let upload = format!("POST /sink HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n", tls.authority(), body.len());
    let sent = tokio::time::timeout(Duration::from_secs(20), async {
        tunnel.write_all(upload.as_bytes()).await?;
        tunnel.write_all(&body).await?;
        let mut answer = Vec::new();
        tunnel.read_to_end(&mut answer).await?;
        Ok::<_, io::Error>(answer)
    })
    .await?;
    if let Ok(answer) = sent {
        let answer = String::from_utf8_lossy(&answer);
        assert!(!answer.contains("received 409600"), "the origin never got the whole upload: {answer}");
    }

    let lines = proxy.finish().await?;
    let upgrades = for_request(&lines, "GET", "/ws");
    let connects = for_request(&lines, "CONNECT", "");
    fn of<'a>(records: &[&'a Value], id: &str) -> Option<&'a Value> {
        records.iter().find(|r| r["agentgate.agent"] == id).copied()
    }
    assert_eq!((upgrades.len(), connects.len()), (2, 2), "{upgrades:#?} {connects:#?}");
    for refused in [of(&upgrades, "bot"), of(&connects, "bot")] {
        let refused = refused.ok_or("bot's upgrade and CONNECT")?;
        assert_eq!(refused["event.action"], "rate_limited", "{refused}");
        assert_eq!(refused["http.response.status_code"], 429, "{refused}");
    }
    let cut = of(&upgrades, "ws").ok_or("ws's upgrade")?;
    assert_eq!((&cut["agentgate.body.cut"], &cut["event.action"]), (&"budget".into(), &"rate_limited".into()), "{cut}");
    assert!(cut["http.request.body.bytes"].as_u64().is_some_and(|n| n <= 100 * 1024), "{cut}");
    let cut = of(&connects, "tunnel").ok_or("tunnel's CONNECT")?;
    assert_eq!(cut["agentgate.body.cut"], "budget", "{cut}");
    assert!(cut["http.request.body.bytes"].as_u64().is_some_and(|n| n <= 100 * 1024), "{cut}");
    for record in upgrades.iter().chain(&connects) {
        assert_eq!(record["agentgate.reasons"][0]["code"], "operator.byte_budget", "{record}");
    }
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
    assert_eq!(last["event.action"], "rate_limited", "the budget's refusal: {last}");
    Ok(())
}
