//! A CONNECT refused before its `200`: a port not in `[connect]
//! allowed_ports`, an agent's `deny_hosts` or unlisted `allow_hosts` host, the network guard.
//! An HTTPS client shows nothing of a refused CONNECT but "403", so to an intercepted host the
//! refusal is answered to the first request inside the tunnel (TLS with the minted leaf, h2
//! or HTTP/1.1; plain HTTP alike) with the block answer and the CONNECT's one record, and
//! the origin is never contacted. A passthrough host's refusal and a `407` stay the
//! CONNECT's own answer. An operator `[[rules]]` deny of a whole intercepted host was never
//! decided at CONNECT (each request inside is): curl reads it the same way. The clients
//! read the refusal: curl, python3's urllib, reqwest over h2, raw sockets.

use std::time::Duration;

use agentgate::config::Config;
use agentgate::net::PortRange;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::curl::curl;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::raw::{connect_tunnel, read_head, tls_client};
use crate::support::wait::WAIT_LIMIT;
use crate::support::{TestProxy, TestResult, header};

/// The config file the refusals' rules are quoted from.
const CONFIG_FILE: &str = "refusals.toml";

/// The proxy with the `[agent]`, `[[rules]]` and `[network]` tables of `toml` (parsed as
/// [`CONFIG_FILE`]), then `edit`.
async fn start(ca: &TestCa, toml: &str, edit: impl FnOnce(&mut Config)) -> TestResult<TestProxy> {
    let parsed = Config::from_toml_str(toml, CONFIG_FILE)?;
    TestProxy::start_with(ca, |config| {
        config.agent = parsed.agent;
        config.rules = parsed.rules;
        edit(config);
    })
    .await
}

/// Only this port may be CONNECTed to: not the test origin's.
fn only_port_443(config: &mut Config) {
    config.connect.allowed_ports = vec![PortRange { first: 443, last: 443 }];
}

/// The record id at the end of an `agentgate-decision` value, after checking it names `code`.
fn record_of(decision: &str, code: &str) -> TestResult<String> {
    assert!(decision.starts_with("deny; source=operator;"), "{decision}");
    assert!(decision.contains(&format!("; code={code}; record=")), "{decision}");
    let id = decision.rsplit_once("record=").map(|(_, id)| id.trim().to_owned());
    id.ok_or_else(|| format!("no record= in {decision:?}").into())
}

/// The `agentgate-decision` value in a response head as text.
fn decision_in(head: &str) -> TestResult<String> {
    let value = head.lines().find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("agentgate-decision").then(|| value.trim().to_owned())
    });
    value.ok_or_else(|| format!("no agentgate-decision header in {head}").into())
}

/// curl (the real binary, trusting agentgate's CA) fetches `url` through the proxy: it exits
/// 0 with the 403, the header and a body naming `code` and `rule`. Returns the record id.
async fn curl_reads_the_refusal(
    proxy: &TestProxy,
    url: &str,
    extra: &[&str],
    code: &str,
    rule: &str,
) -> TestResult<String> {
    let (proxy_url, ca_path) = (proxy.url(), proxy.ca_path.to_string_lossy().into_owned());
    let mut args = vec!["--proxy", proxy_url.as_str(), "--cacert", ca_path.as_str()];
    args.extend_from_slice(extra);
    args.push(url);
    let out = curl(&args).await?;
    let body = String::from_utf8_lossy(&out.body);
    assert_eq!(out.status, 403, "curl reads the refusal's status: {}\n{body}", out.headers);
    the_refusal(&decision_in(&out.headers)?, &body, code, rule)
}

/// A refusal as a client read it: its `agentgate-decision` value names `code`, and its body
/// the code, `rule` and the record. Returns the record id.
fn the_refusal(decision: &str, body: &str, code: &str, rule: &str) -> TestResult<String> {
    let id = record_of(decision, code)?;
    assert!(body.contains(&format!("[{code}]")), "the body names the code: {body}");
    assert!(body.contains(rule), "the body quotes the rule {rule:?}: {body}");
    assert!(body.contains(&format!("(decision record {id})")), "{body}");
    Ok(id)
}

/// python3's urllib through the proxy (`ProxyHandler`: a CONNECT, then TLS trusting
/// agentgate's CA): the status, the `agentgate-decision` value and the body, one per line.
const PYTHON_CLIENT: &str = r#"
import ssl, sys, urllib.error, urllib.request
url, proxy, cafile = sys.argv[1:4]
context = ssl.create_default_context(cafile=cafile)
opener = urllib.request.build_opener(
    urllib.request.ProxyHandler({"http": proxy, "https": proxy}),
    urllib.request.HTTPSHandler(context=context),
)
try:
    response = opener.open(url, timeout=10)
except urllib.error.HTTPError as error:
    response = error
print(response.getcode())
print(response.headers.get("agentgate-decision") or "-")
sys.stdout.write(response.read().decode("utf-8", "replace"))
"#;

/// The log holds exactly one record, the refusal's: `event.id` `id`, `method`, 403, `code`.
fn one_record(records: &[Value], id: &str, method: &str, code: &str) {
    assert_eq!(records.len(), 1, "one record: {records:#?}");
    let record = &records[0];
    assert_eq!(record["event.id"], id, "the header's id is the log's: {record:#}");
    assert_eq!(record["http.request.method"], method, "{record:#}");
    assert_eq!(record["http.response.status_code"], 403, "{record:#}");
    assert_eq!(record["event.action"], "deny", "{record:#}");
    assert_eq!(record["agentgate.reasons"][0]["code"], code, "{record:#}");
}

#[tokio::test]
async fn curl_reads_a_port_refusal_inside_the_tunnel() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let proxy = start(&ca, "", only_port_443).await?;
    let port = origin.addr.port();
    let rule = format!("port {port}");
    let id =
        curl_reads_the_refusal(&proxy, &origin.url("/page"), &["--http1.1"], "network.port_not_allowed", &rule).await?;
    let records = proxy.finish().await?;
    one_record(&records, &id, "CONNECT", "network.port_not_allowed");
    assert_eq!(records[0]["agentgate.entry"], "connect", "{:#}", records[0]);
    assert_eq!(origin.connections(), 0, "the origin saw no connection");
    Ok(())
}

/// The issue's other client: python3's urllib reads a refused CONNECT's answer (from inside
/// the tunnel) as an `HTTPError` 403 with the header and the body.
#[tokio::test]
async fn python_reads_a_port_refusal_inside_the_tunnel() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let proxy = start(&ca, "", only_port_443).await?;
    let ca_path = proxy.ca_path.to_string_lossy().into_owned();
    let mut python = tokio::process::Command::new("python3");
    python.args(["-c", PYTHON_CLIENT, &origin.url("/page"), &proxy.url(), &ca_path]);
    // urllib would bypass the proxy for a name listed there.
    python.env_remove("no_proxy").env_remove("NO_PROXY").kill_on_drop(true);
    let output = tokio::time::timeout(WAIT_LIMIT, python.output()).await.map_err(|_| "python3 did not exit")??;
    let (text, stderr) = (String::from_utf8(output.stdout)?, String::from_utf8_lossy(&output.stderr));
    let mut lines = text.splitn(3, '\n');
    let (Some(status), Some(decision), Some(body)) = (lines.next(), lines.next(), lines.next()) else {
        return Err(format!("python3 printed {text:?}; stderr: {stderr}").into());
    };
    assert_eq!(status, "403", "python3 reads the refusal's status: {text}\n{stderr}");
    let rule = format!("port {}", origin.addr.port());
    let id = the_refusal(decision, body, "network.port_not_allowed", &rule)?;
    one_record(&proxy.finish().await?, &id, "CONNECT", "network.port_not_allowed");
    assert_eq!(origin.connections(), 0, "the origin saw no connection");
    Ok(())
}

#[tokio::test]
async fn curl_reads_an_agents_denied_and_unlisted_host_inside_the_tunnel() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let toml = "[agent]\ndeny_hosts = [\"localhost\"]\n";
    let proxy = start(&ca, toml, |_| {}).await?;
    let rule =
        format!("{CONFIG_FILE}:2: [agent] deny_hosts entry \"localhost\" matches localhost:{}", origin.addr.port());
    let id = curl_reads_the_refusal(&proxy, &origin.url("/page"), &[], "operator.denied_host", &rule).await?;
    one_record(&proxy.finish().await?, &id, "CONNECT", "operator.denied_host");

    let toml = "[agent]\nallow_hosts = [\"docs.example\"]\n";
    let proxy = start(&ca, toml, |_| {}).await?;
    let id = curl_reads_the_refusal(
        &proxy,
        &origin.url("/page"),
        &[],
        "operator.not_allowlisted",
        "does not list localhost",
    )
    .await?;
    one_record(&proxy.finish().await?, &id, "CONNECT", "operator.not_allowlisted");
    assert_eq!(origin.connections(), 0, "the origin saw no connection");
    Ok(())
}

#[tokio::test]
async fn curl_reads_a_network_guard_refusal_inside_the_tunnel() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    // The default guard: loopback is internal, and the tests' opening of it is taken back.
    let proxy = start(&ca, "", |config| config.network.allow_cidrs = Vec::new()).await?;
    let id = curl_reads_the_refusal(
        &proxy,
        &origin.url("/page"),
        &[],
        "network.private_address",
        "[network] allow_cidrs lists it",
    )
    .await?;
    one_record(&proxy.finish().await?, &id, "CONNECT", "network.private_address");
    assert_eq!(origin.connections(), 0, "the origin saw no connection");
    Ok(())
}

#[tokio::test]
async fn curl_reads_an_operator_deny_of_the_whole_host() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let toml = "[[rules]]\nhost = \"localhost\"\naction = \"deny\"\nreason = \"not for agents\"\n";
    let proxy = start(&ca, toml, |_| {}).await?;
    let id = curl_reads_the_refusal(&proxy, &origin.url("/page"), &[], "operator.deny", "not for agents").await?;
    // Decided on the request inside the intercepted tunnel, as every such host is: its record.
    one_record(&proxy.finish().await?, &id, "GET", "operator.deny");
    assert_eq!(origin.connections(), 0, "the origin saw no connection");
    Ok(())
}

/// reqwest negotiates h2 inside the refused tunnel and gets the same answer; its `Accept`
/// and method shape it as for any block (JSON; HEAD without a body).
#[tokio::test]
async fn reqwest_over_h2_gets_the_refusal_as_json_and_head() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let proxy = start(&ca, "", only_port_443).await?;
    let client = proxy.client()?;

    let response = client.get(origin.url("/page")).header("accept", "application/json").send().await?;
    assert_eq!(response.status(), 403);
    assert_eq!(response.version(), http::Version::HTTP_2, "h2 by ALPN inside the refused tunnel");
    let id = record_of(&header(&response, "agentgate-decision"), "network.port_not_allowed")?;
    assert_eq!(header(&response, "content-type"), "application/json");
    let body: Value = serde_json::from_str(&response.text().await?)?;
    assert_eq!(body["record_id"], id.as_str(), "{body:#}");
    assert_eq!(body["method"], "CONNECT", "{body:#}");
    assert_eq!(body["reasons"][0]["code"], "network.port_not_allowed", "{body:#}");

    let head = client.head(origin.url("/page")).send().await?;
    assert_eq!(head.status(), 403);
    let head_id = record_of(&header(&head, "agentgate-decision"), "network.port_not_allowed")?;
    assert!(head.bytes().await?.is_empty(), "a HEAD answer has no body");

    let records = proxy.finish().await?;
    assert_eq!(records.len(), 2, "one record per CONNECT: {records:#?}");
    for (record, id) in records.iter().zip([&id, &head_id]) {
        assert_eq!(&record["event.id"], id.as_str(), "{record:#}");
        assert_eq!(record["http.request.method"], "CONNECT", "{record:#}");
        assert_eq!(record["http.response.status_code"], 403, "{record:#}");
    }
    assert_eq!(origin.connections(), 0, "the origin saw no connection");
    Ok(())
}

/// The tunnel answers its first request and closes: a second request on the same HTTP/1.1
/// connection is never read, and nothing reaches the origin.
#[tokio::test]
async fn a_refused_tunnel_answers_once_and_closes() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let proxy = start(&ca, "", only_port_443).await?;
    let (stream, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut tls = tls_client(stream, "localhost", &proxy.ca_pem, &[b"http/1.1"]).await?;
    let two = "GET /page HTTP/1.1\r\nHost: localhost\r\n\r\nGET /again HTTP/1.1\r\nHost: localhost\r\n\r\n";
    tls.write_all(two.as_bytes()).await?;
    let mut answer = Vec::new();
    // A TLS close without close_notify is an error to rustls; the bytes before it count.
    let _ = tokio::time::timeout(Duration::from_secs(10), tls.read_to_end(&mut answer)).await?;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert_eq!(answer.matches("HTTP/1.1 ").count(), 1, "one answer, then the tunnel closed: {answer}");
    let id = record_of(&decision_in(&answer)?, "network.port_not_allowed")?;
    one_record(&proxy.finish().await?, &id, "CONNECT", "network.port_not_allowed");
    assert_eq!(origin.connections(), 0);
    Ok(())
}

/// Plain HTTP inside the refused tunnel (the `200` is sent before the first bytes can be
/// seen) gets the same answer; a tunnel whose client sends nothing closes after the
/// first-byte timeout, its record written once.
#[tokio::test]
async fn plain_http_in_a_refused_tunnel_and_silence() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let proxy = start(&ca, "", |config| {
        only_port_443(config);
        config.connections.first_byte_timeout = Duration::from_millis(300);
    })
    .await?;
    let (mut stream, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    stream.write_all(b"GET /page HTTP/1.1\r\nHost: localhost\r\n\r\n").await?;
    let inner = read_head(&mut stream).await?;
    assert!(inner.starts_with("HTTP/1.1 403"), "{inner}");
    let plain = record_of(&decision_in(&inner)?, "network.port_not_allowed")?;

    let (mut silent, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), silent.read_to_end(&mut rest)).await??;
    assert!(rest.is_empty(), "closed without a word: {:?}", String::from_utf8_lossy(&rest));

    let records = proxy.finish().await?;
    assert_eq!(records.len(), 2, "one record per CONNECT: {records:#?}");
    assert_eq!(records[0]["event.id"], plain.as_str(), "{records:#?}");
    assert!(records.iter().all(|r| r["http.response.status_code"] == 403), "{records:#?}");
    assert_eq!(origin.connections(), 0);
    Ok(())
}

/// A passthrough host's tunnel cannot be intercepted: its refusal stays the CONNECT's 403;
/// and an unknown agent's CONNECT is still a 407 before any `200`.
#[tokio::test]
async fn passthrough_refusals_and_407_stay_at_connect() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let proxy = start(&ca, "", |config| {
        only_port_443(config);
        config.mitm.set_passthrough_hosts(vec!["localhost".to_owned()]);
    })
    .await?;
    let (_stream, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let id = record_of(&decision_in(&head)?, "network.port_not_allowed")?;
    one_record(&proxy.finish().await?, &id, "CONNECT", "network.port_not_allowed");

    let proxy = start(&ca, "", |config| {
        only_port_443(config);
        config.auth.required = true;
    })
    .await?;
    let (_stream, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 407"), "{head}");
    assert!(head.to_ascii_lowercase().contains("proxy-authenticate: basic"), "{head}");
    assert_eq!(origin.connections(), 0);
    Ok(())
}

/// A CONNECT to an IP literal is refused inside a tunnel whose leaf is minted for that IP, as
/// an intercepted IP target's is: a client verifying the address reads the refusal.
#[tokio::test]
async fn an_ip_target_is_answered_with_a_leaf_for_the_ip() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let proxy = start(&ca, "", only_port_443).await?;
    let url = format!("https://127.0.0.1:{}/page", origin.addr.port());
    let response = proxy.client()?.get(&url).send().await?;
    assert_eq!(response.status(), 403, "the leaf names 127.0.0.1");
    let id = record_of(&header(&response, "agentgate-decision"), "network.port_not_allowed")?;
    let body = response.text().await?;
    assert!(body.contains(&format!("CONNECT https://127.0.0.1:{}/", origin.addr.port())), "{body}");
    one_record(&proxy.finish().await?, &id, "CONNECT", "network.port_not_allowed");
    assert_eq!(origin.connections(), 0);
    Ok(())
}
