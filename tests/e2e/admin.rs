//! The admin API end to end (`docs/admin.md`): every endpoint on its own loopback
//! port with answers as documented, the bearer token (401 without it, `/healthz` always
//! open), `/metrics` parsed with a Prometheus text parser and moving with traffic (an allow,
//! a robots.txt deny and a rate-limited request), a purge that makes the next request fetch
//! the policy files again, readiness (a failing decision log, the drain at shutdown), the
//! per-client connection cap (a client's newest connections push out its oldest, and the
//! operator's token is answered while one client holds 80 slow sockets) and start-up on a
//! taken address, and `http://agentgate.local/` answered by
//! agentgate itself with no lookup and no connection (proven by a recording resolver and
//! dialer). A DNS-rebinding page (a foreign `Host`, a foreign `Origin`) is refused,
//! and repeated wrong tokens are answered late while a right one is served. An AGENTS.md
//! that is not a policy is said once in the run log and shown in the origin's view.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use agentgate::audit::OnFailure;
use agentgate::net::{Dial, NetFuture, Resolve};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::approvals::{ADMIN, checkout, hold, pending, shop};
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::raw::{connect_tunnel, exchange};
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult, header};

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

/// `printf %s admin-secret | sha256sum`
const TOKEN_SHA256: &str = "16175223c8ddce5ace0493c948569c211b03c4c6bb3d3e484434999448cffe01";

/// A client for the admin API itself (never through a proxy).
pub(crate) fn admin_client() -> TestResult<reqwest::Client> {
    Ok(reqwest::Client::builder().no_proxy().build()?)
}

pub(crate) fn admin_url(proxy: &TestProxy, path_and_query: &str) -> TestResult<String> {
    let addr = proxy.admin_addr.ok_or("the test proxy has no admin address")?;
    Ok(format!("http://{addr}{path_and_query}"))
}

/// `GET` on the admin API: status and body.
async fn get(proxy: &TestProxy, path_and_query: &str) -> TestResult<(u16, String)> {
    let response = admin_client()?.get(admin_url(proxy, path_and_query)?).send().await?;
    Ok((response.status().as_u16(), response.text().await?))
}

/// The value of the sample `metric` with exactly `labels` (counter, gauge or untyped).
pub(crate) fn sample(scrape: &prometheus_parse::Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == metric
                && s.labels.len() == labels.len()
                && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v))
        })
        .and_then(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
}

/// `/metrics` in OpenMetrics, as Prometheus asks for it, parsed.
pub(crate) async fn scrape(proxy: &TestProxy) -> TestResult<prometheus_parse::Scrape> {
    scrape_as(proxy, None).await
}

/// [`scrape`] with the admin token `bearer`, when the proxy has one.
pub(crate) async fn scrape_as(proxy: &TestProxy, bearer: Option<&str>) -> TestResult<prometheus_parse::Scrape> {
    let mut request = admin_client()?
        .get(admin_url(proxy, "/metrics")?)
        .header("accept", "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5");
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    let response = request.send().await?;
    assert_eq!(response.status(), 200);
    assert!(header(&response, "content-type").starts_with("application/openmetrics-text"), "{response:?}");
    let text = response.text().await?;
    assert!(text.ends_with("# EOF\n"), "{text}");
    Ok(prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_owned())))?)
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_and_move_with_traffic() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", ROBOTS)).await?;
    let proxy = TestProxy::start_with(&ca, |config| config.agent.limits.requests_per_minute = 2).await?;
    let before = scrape(&proxy).await?;
    assert_eq!(sample(&before, "agentgate_requests_total", &[("outcome", "allow"), ("source", "none")]), None);
    assert_eq!(sample(&before, "agentgate_rate_limited_total", &[]), Some(0.0));

    let client = proxy.client()?;
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);
    assert_eq!(client.get(origin.url("/private/x")).send().await?.status(), 403, "robots.txt denies");
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 429, "over 2 per minute");
    let records = proxy.log_lines(4).await?;
    let outcomes: Vec<&str> = records.iter().filter_map(|r| r["event.action"].as_str()).collect();
    assert_eq!(outcomes, ["allow", "deny", "allow", "rate_limited"]);

    let after = scrape(&proxy).await?;
    let requests =
        |outcome, source| sample(&after, "agentgate_requests_total", &[("outcome", outcome), ("source", source)]);
    let allowed_source = records[0]["agentgate.reasons"][0]["source"].as_str().unwrap_or("none");
    assert_eq!(requests("allow", allowed_source), Some(2.0), "{:?}", after.samples);
    assert_eq!(requests("deny", "robots.txt"), Some(1.0));
    assert_eq!(requests("rate_limited", "operator"), Some(1.0));
    assert_eq!(sample(&after, "agentgate_blocks_total", &[("reason", "robots.disallow")]), Some(1.0));
    let limit_code = records[3]["agentgate.reasons"][0]["code"].as_str().ok_or("a limit reason")?;
    assert_eq!(sample(&after, "agentgate_blocks_total", &[("reason", limit_code)]), Some(1.0));
    assert_eq!(sample(&after, "agentgate_rate_limited_total", &[]), Some(1.0));
    let fetched = |file| sample(&after, "agentgate_policy_fetches_total", &[("file", file), ("status", "200")]);
    assert_eq!(fetched("/robots.txt"), Some(1.0), "one fetch, cached since");
    assert_eq!(sample(&after, "agentgate_policy_cache_misses_total", &[]), Some(1.0));
    assert_eq!(sample(&after, "agentgate_policy_cache_hits_total", &[]), Some(3.0));
    assert_eq!(sample(&after, "agentgate_policy_cache_origins", &[]), Some(1.0));
    assert!(sample(&after, "agentgate_policy_cache_weight_bytes", &[]).is_some_and(|w| w > 0.0));
    // Under `on_failure = "block"` a forwarded request has two lines (docs/decision-log.md).
    let lines = crate::support::log::lines(&proxy.log_path)?.len() as f64;
    assert_eq!(sample(&after, "agentgate_audit_records_written_total", &[]), Some(lines));
    assert_eq!(sample(&after, "agentgate_audit_failures_total", &[]), Some(0.0));
    assert_eq!(sample(&after, "agentgate_audit_queue_depth", &[]), Some(0.0));
    assert_eq!(sample(&after, "agentgate_tunnels", &[]), Some(0.0));
    assert!(sample(&after, "agentgate_connections", &[]).is_some());
    assert_eq!(sample(&after, "agentgate_certs_minted_total", &[]), Some(0.0));
    let durations = after.samples.iter().find(|s| s.metric == "agentgate_request_duration_seconds_count");
    assert!(
        durations.is_some_and(|s| matches!(
            s.value,
            prometheus_parse::Value::Untyped(4.0) | prometheus_parse::Value::Counter(4.0)
        )),
        "{durations:?}"
    );
    proxy.finish().await?;
    Ok(())
}

/// `promtool check metrics` on `text`: its exit status and what it printed.
async fn promtool_check_metrics(text: &str) -> TestResult<(std::process::ExitStatus, String)> {
    use tokio::process::Command;
    let mut child = Command::new(crate::support::tools::need(crate::support::tools::PROMTOOL)?)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    stdin.write_all(text.as_bytes()).await?;
    drop(stdin);
    let output = child.wait_with_output().await?;
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    Ok((output.status, said))
}

#[tokio::test]
#[ignore = "needs promtool: run by scripts/test.sh"]
async fn metrics_pass_promtool_in_the_classic_format_and_parse_as_openmetrics() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", ROBOTS)).await?;
    let proxy = TestProxy::start_with(&ca, |config| config.agent.limits.requests_per_minute = 1).await?;
    // Every labelled family gets a sample: an allow, a deny, a rate-limited request, fetches.
    let client = proxy.client()?;
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);
    assert_eq!(client.get(origin.url("/private/x")).send().await?.status(), 403);
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 429);
    proxy.log_lines(3).await?;

    // No Accept (curl), and the classic format asked for by name: the classic format.
    for accept in [None, Some("text/plain; version=0.0.4"), Some("*/*")] {
        let mut request = admin_client()?.get(admin_url(&proxy, "/metrics")?);
        if let Some(accept) = accept {
            request = request.header("accept", accept);
        }
        let response = request.send().await?;
        assert_eq!(response.status(), 200);
        assert_eq!(header(&response, "content-type"), "text/plain; version=0.0.4; charset=utf-8", "{accept:?}");
        let text = response.text().await?;
        assert!(!text.contains("# EOF") && !text.contains("# UNIT"), "{text}");
        assert!(text.contains("# HELP agentgate_requests_total Requests decided"), "{text}");
        assert!(text.contains("# TYPE agentgate_requests_total counter"), "{text}");
        let (status, said) = promtool_check_metrics(&text).await?;
        assert!(status.success() && said.is_empty(), "promtool check metrics: {status}\n{said}\n{text}");
    }

    // Asked for OpenMetrics: OpenMetrics, with the same samples.
    let openmetrics = scrape(&proxy).await?;
    let classic_text = admin_client()?.get(admin_url(&proxy, "/metrics")?).send().await?.text().await?;
    let classic = prometheus_parse::Scrape::parse(classic_text.lines().map(|line| Ok(line.to_owned())))?;
    for (metric, labels) in [
        ("agentgate_requests_total", &[("outcome", "deny"), ("source", "robots.txt")][..]),
        ("agentgate_blocks_total", &[("reason", "robots.disallow")]),
        ("agentgate_rate_limited_total", &[]),
        ("agentgate_policy_cache_misses_total", &[]),
    ] {
        let (om, text) = (sample(&openmetrics, metric, labels), sample(&classic, metric, labels));
        assert!(om.is_some_and(|v| v >= 1.0), "{metric} {labels:?}: {om:?}");
        assert_eq!(om, text, "{metric} {labels:?}");
    }
    // The classic parse sees each counter's help under its sample name.
    assert!(classic.docs.get("agentgate_rate_limited_total").is_some_and(|help| help.starts_with("Requests refused")));
    proxy.finish().await?;
    Ok(())
}

#[tokio::test]
async fn every_endpoint_answers_as_documented() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", ROBOTS)).await?;
    let proxy = TestProxy::start(&ca).await?;
    let origin_url = origin.url("");
    let client = proxy.client()?;
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);

    assert_eq!(get(&proxy, "/healthz").await?, (200, "ok\n".to_owned()));
    assert_eq!(get(&proxy, "/readyz").await?, (200, "ready\n".to_owned()));
    let ca_pem = admin_client()?.get(admin_url(&proxy, "/ca.pem")?).send().await?;
    assert_eq!(header(&ca_pem, "content-type"), "application/x-pem-file");
    assert_eq!(ca_pem.text().await?, proxy.ca_pem);

    // What is cached for the origin, file by file.
    let (status, body) = get(&proxy, &format!("/policies?origin={origin_url}")).await?;
    assert_eq!(status, 200, "{body}");
    let cached: Value = serde_json::from_str(&body)?;
    assert_eq!(cached["origin"], format!("http://127.0.0.1:{}", origin_url.rsplit(':').next().unwrap_or_default()));
    let robots = &cached["files"]["robots.txt"];
    assert_eq!(robots["status"], "valid", "{cached:#}");
    assert_eq!(robots["digest"].as_str().map(str::len), Some(64), "{cached:#}");
    assert!(robots["fetched_at"].as_str().is_some_and(|t| t.ends_with('Z')), "{cached:#}");
    assert!(robots["fresh_until"].as_str().is_some() && robots["diagnostics"].is_array(), "{cached:#}");
    for file in ["agents.txt", "AGENTS.md", "automation-preferences.txt"] {
        assert!(cached["files"][file]["status"].is_string(), "{file}: {cached:#}");
    }

    // A live explanation, the same JSON as `agentgate explain`.
    let (status, body) = get(&proxy, &format!("/explain?url={}&method=get", origin.url("/private/a"))).await?;
    assert_eq!(status, 200, "{body}");
    let explained: Value = serde_json::from_str(&body)?;
    assert_eq!(explained["decision"], "deny", "{explained:#}");
    assert_eq!(explained["reasons"][0]["code"], "robots.disallow", "{explained:#}");
    assert_eq!(explained["reasons"][0]["line"], 2, "{explained:#}");
    assert_eq!(explained["policies"]["robots.txt"]["status"], "valid", "{explained:#}");
    let (_, body) = get(&proxy, &format!("/explain?url={}", origin.url("/page"))).await?;
    assert_eq!(serde_json::from_str::<Value>(&body)?["decision"], "allow", "{body}");
    assert_eq!(origin.hits("/robots.txt"), 1, "explain used the cached copy");

    // Purge: forgotten, and the next request fetches every file again.
    let purged = admin_client()?.delete(admin_url(&proxy, &format!("/policies?origin={origin_url}"))?).send().await?;
    assert_eq!(purged.status(), 200);
    assert_eq!(serde_json::from_str::<Value>(&purged.text().await?)?["purged"], true);
    let (status, body) = get(&proxy, &format!("/policies?origin={origin_url}")).await?;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("not in the policy cache"), "{body}");
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);
    assert_eq!(origin.hits("/robots.txt"), 2, "the purge forced a refetch");

    // The latest decision-log lines, newest first, as the log holds them.
    proxy.log_lines(2).await?;
    let records = crate::support::log::lines(&proxy.log_path)?;
    let (status, body) = get(&proxy, "/decisions/recent?n=1").await?;
    assert_eq!(status, 200, "{body}");
    let recent: Vec<Value> = serde_json::from_str(&body)?;
    assert_eq!(recent.len(), 1);
    assert_eq!(recent[0], records[records.len() - 1], "the newest line, byte for byte the log's");
    let (_, body) = get(&proxy, "/decisions/recent").await?;
    let all: Vec<Value> = serde_json::from_str(&body)?;
    let mut logged = records.clone();
    logged.reverse();
    assert_eq!(all, logged, "every line, newest first");

    // Mistakes: unknown path, wrong method, bad or missing or unknown parameters.
    let (status, body) = get(&proxy, "/nope").await?;
    assert_eq!((status, body.contains("no admin endpoint at /nope")), (404, true), "{body}");
    let post = admin_client()?.post(admin_url(&proxy, "/metrics")?).send().await?;
    assert_eq!((post.status().as_u16(), header(&post, "allow")), (405, "GET".to_owned()));
    let put = admin_client()?.put(admin_url(&proxy, "/policies?origin=http://a.test")?).send().await?;
    assert_eq!((put.status().as_u16(), header(&put, "allow")), (405, "GET, DELETE".to_owned()));
    for (query, parameter) in [
        ("/decisions/recent?n=0", "n"),
        ("/decisions/recent?n=lots", "n"),
        ("/decisions/recent?n=1001", "n"),
        ("/policies", "origin"),
        ("/policies?origin=example.com", "origin"),
        ("/policies?origin=ftp://example.com/", "origin"),
        ("/explain?url=https://example.com/&agent=nobody", "agent"),
        ("/explain?url=https://example.com/&method=G%20T", "method"),
        ("/explain?url=https://example.com/&agnet=x", "agnet"),
        ("/explain", "url"),
        ("/metrics?x=1", "x"),
    ] {
        let (status, body) = get(&proxy, query).await?;
        let error: Value = serde_json::from_str(&body)?;
        assert_eq!((status, error["parameter"].as_str()), (400, Some(parameter)), "{query}: {body}");
        assert!(error["error"].as_str().is_some_and(|e| e.contains(parameter)), "{query}: {body}");
    }
    proxy.finish().await?;
    Ok(())
}

#[tokio::test]
async fn a_configured_token_is_required_except_for_the_liveness_and_readiness_probes() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start_with(&ca, |config| config.admin.token_sha256 = Some(TOKEN_SHA256.to_owned())).await?;
    let client = admin_client()?;
    for path in ["/metrics", "/ca.pem", "/policies?origin=http://a.test", "/decisions/recent", "/nope"] {
        let url = admin_url(&proxy, path)?;
        let bare = client.get(&url).send().await?;
        assert_eq!(bare.status(), 401, "{path}");
        assert_eq!(header(&bare, "www-authenticate"), "Bearer realm=\"agentgate admin\"", "{path}");
        let wrong = client.get(&url).bearer_auth("admin-secreT").send().await?;
        assert_eq!(wrong.status(), 401, "{path}");
        let right = client.get(&url).bearer_auth("admin-secret").send().await?;
        assert_ne!(right.status(), 401, "{path}");
    }
    assert_eq!(client.get(admin_url(&proxy, "/metrics")?).bearer_auth("admin-secret").send().await?.status(), 200);
    assert_eq!(get(&proxy, "/healthz").await?, (200, "ok\n".to_owned()), "liveness needs no token");
    assert_eq!(get(&proxy, "/readyz").await?, (200, "ready\n".to_owned()), "readiness neither: probes send none");
    proxy.finish().await?;
    Ok(())
}

#[tokio::test]
async fn a_clients_connections_past_its_share_push_out_its_oldest_one() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start(&ca).await?;
    let addr = proxy.admin_addr.ok_or("no admin address")?;
    // 16 connections without a token, from 127.0.0.1 to 127.0.0.16: one client.
    let mut held = Vec::new();
    for n in 1..=16 {
        held.push(connect_from(IpAddr::from([127, 0, 0, n]), addr).await?);
    }
    let last = held.last_mut().ok_or("no connection")?;
    last.write_all(b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n").await?;
    let head = crate::support::raw::read_head(last).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // The 17th is served, and the client's oldest connection is closed to make room.
    let mut newest = connect_from(IpAddr::from([127, 0, 0, 17]), addr).await?;
    newest.write_all(b"GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n").await?;
    let head = crate::support::raw::read_head(&mut newest).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(5), held[0].read(&mut byte)).await?;
    assert!(matches!(read, Ok(0) | Err(_)), "the oldest connection is closed unanswered: {read:?}");
    drop(held);
    assert_eq!(get(&proxy, "/healthz").await?.0, 200, "places are given back");
    proxy.finish().await?;
    Ok(())
}

/// A connection to `to` from the local address `from` (any of 127.0.0.0/8 is this host's).
async fn connect_from(from: IpAddr, to: SocketAddr) -> TestResult<TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    Ok(socket.connect(to).await?)
}

#[tokio::test]
async fn the_operators_token_is_answered_while_one_client_holds_eighty_slow_sockets() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start_with(&ca, |config| config.admin.token_sha256 = Some(TOKEN_SHA256.to_owned())).await?;
    let addr = proxy.admin_addr.ok_or("no admin address")?;
    // 80 slow sockets from 127.0.0.1 to 127.0.0.8, each sending half a request head and
    // waiting; closed, each comes back at once (at most ROUNDS times).
    const ROUNDS: usize = 100_000;
    let opened = Arc::new(AtomicUsize::new(0));
    let mut slow = tokio::task::JoinSet::new();
    for n in 0..80u8 {
        let opened = Arc::clone(&opened);
        slow.spawn(async move {
            for _ in 0..ROUNDS {
                let Ok(mut socket) = connect_from(IpAddr::from([127, 0, 0, 1 + n % 8]), addr).await else { continue };
                opened.fetch_add(1, Ordering::Relaxed);
                if socket.write_all(b"GET /approvals HTTP/1.1\r\nHost: 127.0.0.1\r\n").await.is_ok() {
                    let mut byte = [0u8; 1];
                    let _closed = socket.read(&mut byte).await;
                }
            }
        });
    }
    eventually("80 slow sockets opened", async || {
        let count = opened.load(Ordering::Relaxed);
        if count >= 80 { Ok(()) } else { Err(format!("{count} opened").into()) }
    })
    .await?;
    // The operator, from the same host: each request on a connection of its own.
    let operator =
        reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).timeout(Duration::from_secs(5)).build()?;
    let url = admin_url(&proxy, "/approvals")?;
    let mut answered = Vec::new();
    for _ in 0..10 {
        answered.push(match operator.get(&url).bearer_auth("admin-secret").send().await {
            Ok(response) => response.status().as_u16().to_string(),
            Err(error) => format!("{error:?}"),
        });
    }
    let still_open = opened.load(Ordering::Relaxed);
    slow.shutdown().await;
    assert!(answered.iter().all(|status| status == "200"), "{answered:?}");
    assert!(still_open >= 80, "the slow sockets were held throughout: {still_open} opened");
    proxy.finish().await?;
    Ok(())
}

#[tokio::test]
async fn readyz_turns_503_while_the_proxy_drains_and_the_admin_api_stops_with_it() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let mut proxy = TestProxy::start_with(&ca, |config| {
        crate::support::bypass_all(config);
        config.shutdown_grace = std::time::Duration::from_secs(60);
    })
    .await?;
    let admin = proxy.admin_addr.ok_or("no admin address")?;
    let request = tokio::spawn(proxy.client()?.get(origin.url("/hold")).send());
    origin.arrived().await;

    let stopped = proxy.shut_down().ok_or("the proxy was already shut down")?;
    // Draining has begun once the proxy port is closed.
    eventually("the proxy port closed", async || match TcpStream::connect(proxy.addr).await {
        Ok(_) => Err("it still accepts".into()),
        Err(_) => Ok(()),
    })
    .await?;
    assert_eq!(get(&proxy, "/readyz").await?, (503, "shutting down\n".to_owned()));
    let (status, metrics) = get(&proxy, "/metrics").await?;
    assert_eq!(status, 200, "metrics stay readable during the drain");
    assert!(metrics.contains("agentgate_connections 1"), "{metrics}");

    origin.release();
    assert_eq!(request.await??.status(), 200);
    stopped.await?;
    assert!(TcpStream::connect(admin).await.is_err(), "the admin API stopped with the proxy");
    Ok(())
}

#[tokio::test]
async fn a_taken_admin_address_stops_start_up_naming_the_key() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = taken.local_addr()?;
    let error = match TestProxy::start_with(&ca, |config| config.admin.listen = Some(addr)).await {
        Ok(_) => return Err("the proxy started on a taken admin address".into()),
        Err(error) => error.to_string(),
    };
    assert!(error.contains(&format!("cannot listen on {addr} for the admin API")), "{error}");
    assert!(error.contains("[admin] listen"), "{error}");
    Ok(())
}

#[tokio::test]
async fn readyz_says_why_when_the_decision_log_cannot_be_written() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    // A device that is always full: every write fails with ENOSPC; `continue` still forwards.
    let proxy = TestProxy::start_with(&ca, |config| {
        crate::support::bypass_all(config);
        config.audit.path = "/dev/full".into();
        config.audit.on_failure = OnFailure::Continue;
    })
    .await?;
    assert_eq!(get(&proxy, "/readyz").await?, (200, "ready\n".to_owned()), "nothing written yet");
    assert_eq!(proxy.client()?.get(origin.url("/hello")).send().await?.status(), 200);
    // The writer fails the line shortly after the response: wait (bounded) until it has.
    let (status, body) = eventually("/readyz to notice the failed write", async || {
        let (status, body) = get(&proxy, "/readyz").await?;
        if status != 200 { Ok((status, body)) } else { Err(format!("it answers {status}: {body}").into()) }
    })
    .await?;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("cannot write the decision log /dev/full"), "{body}");
    let scraped = scrape(&proxy).await?;
    assert_eq!(sample(&scraped, "agentgate_audit_failures_total", &[]), Some(1.0));
    assert_eq!(get(&proxy, "/healthz").await?.0, 200, "alive, though not ready");
    Ok(())
}

/// Records every name it is asked to resolve and every address it is asked to dial.
#[derive(Default)]
struct Watch {
    lookups: Mutex<Vec<String>>,
    dials: Mutex<Vec<SocketAddr>>,
}

impl Resolve for Watch {
    fn resolve<'a>(&'a self, name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
        self.lookups.lock().unwrap_or_else(PoisonError::into_inner).push(name.to_owned());
        Box::pin(async move { Err(std::io::Error::other(format!("test resolver: {name} is not looked up"))) })
    }
}

impl Dial for Watch {
    fn dial(&self, addr: SocketAddr) -> NetFuture<'_, TcpStream> {
        self.dials.lock().unwrap_or_else(PoisonError::into_inner).push(addr);
        Box::pin(async move { Err(std::io::Error::other(format!("test dialer: not connecting to {addr}"))) })
    }
}

#[tokio::test]
async fn agentgate_local_serves_the_ca_without_any_lookup_or_dial() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let watch = Arc::new(Watch::default());
    let proxy = TestProxy::start_with_network(&ca, watch.clone(), watch.clone(), |_| {}).await?;
    let client = proxy.client()?;

    let pem = client.get("http://agentgate.local/ca.pem").send().await?;
    assert_eq!(pem.status(), 200);
    assert_eq!(header(&pem, "content-type"), "application/x-pem-file");
    assert_eq!(pem.text().await?, proxy.ca_pem);
    let page = client.get("http://AgentGate.local/").send().await?;
    assert_eq!(page.status(), 200);
    let page = page.text().await?;
    for client_hint in
        ["curl", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "update-ca-certificates", "apk"]
    {
        assert!(page.contains(client_hint), "{client_hint} missing from:\n{page}");
    }
    // The CA file is named as docker/trust-ca.sh names it, every time the page names it.
    let script = include_str!("../../docker/trust-ca.sh");
    let name = script
        .lines()
        .find_map(|line| line.strip_prefix("TARGET=\"$LOCAL_DIR/")?.strip_suffix('"'))
        .ok_or("docker/trust-ca.sh sets TARGET")?;
    let named: Vec<&str> = page.split("/usr/local/share/ca-certificates/").skip(1).collect();
    assert!(!named.is_empty(), "the page names the CA file to fetch:\n{page}");
    assert!(named.iter().all(|rest| rest.starts_with(name)), "the CA file is {name}:\n{page}");
    let head = client.head("http://agentgate.local/ca.pem").send().await?;
    assert_eq!(head.status(), 200);
    assert_eq!(header(&head, "content-length"), proxy.ca_pem.len().to_string());
    let missing = client.get("http://agentgate.local/other").send().await?;
    assert_eq!(missing.status(), 404);
    let post = client.post("http://agentgate.local/ca.pem").send().await?;
    assert_eq!((post.status().as_u16(), header(&post, "allow")), (405, "GET, HEAD".to_owned()));

    // The same from the command line, as a container bootstraps its trust.
    let curl = crate::support::curl::curl(&["-x", &proxy.url(), "http://agentgate.local/ca.pem"]).await?;
    assert_eq!((curl.status, curl.body), (200, proxy.ca_pem.clone().into_bytes()));

    // Inside a plain CONNECT tunnel to agentgate.local:80, as some clients send plain HTTP.
    let (mut tunnel, head) = connect_tunnel(proxy.addr, "agentgate.local:80").await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tunnel.write_all(b"GET /ca.pem HTTP/1.1\r\nHost: agentgate.local\r\nConnection: close\r\n\r\n").await?;
    let mut answer = String::new();
    tunnel.read_to_string(&mut answer).await?;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(&format!("content-length: {}\r\n", proxy.ca_pem.len())), "{answer}");
    assert!(answer.ends_with(&proxy.ca_pem), "{answer}");

    let lookups = watch.lookups.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let dials = watch.dials.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert!(lookups.is_empty() && dials.is_empty(), "looked up {lookups:?}, dialled {dials:?}");

    let records = proxy.finish().await?;
    let served = records.iter().filter(|r| r["agentgate.reasons"][0]["code"] == "operator.served_locally").count();
    assert_eq!(served, 7, "each local answer is recorded: {records:#?}");
    let pem_record =
        records.iter().find(|r| r["url.full"] == "http://agentgate.local/ca.pem" && r["http.request.method"] == "GET");
    let pem_record = pem_record.ok_or("a record for GET http://agentgate.local/ca.pem")?;
    assert_eq!(pem_record["event.action"], "allow", "{pem_record}");
    assert_eq!(pem_record["http.response.status_code"], 200, "{pem_record}");
    assert_eq!(pem_record["agentgate.reasons"][0]["code"], "operator.served_locally", "{pem_record}");
    assert_eq!(pem_record["agentgate.reasons"][0]["source"], "operator", "{pem_record}");
    Ok(())
}

/// One request written by hand to the admin API, as a browser on another name would send it
/// (`Host` and `Origin` exactly as given): the status and the body.
async fn by_hand(proxy: &TestProxy, head: &str, body: &str) -> TestResult<(u16, String)> {
    let addr = proxy.admin_addr.ok_or("no admin address")?;
    let request = format!("{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    let answer = exchange(addr, request.as_bytes()).await?;
    let status = answer.get(9..12).and_then(|code| code.parse().ok()).ok_or_else(|| format!("no status: {answer}"))?;
    let body = answer.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    Ok((status, body))
}

#[tokio::test]
async fn a_dns_rebinding_page_can_neither_read_nor_approve() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = shop(&ca).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        hold(config);
        config.admin.hosts = vec!["admin.internal".to_owned()];
    })
    .await?;
    let port = proxy.admin_addr.ok_or("no admin address")?.port();
    let waiting = checkout(&proxy.client()?, &origin);
    let id = pending(&proxy, Some(ADMIN), 1).await?[0]["id"].as_str().ok_or("an id")?.to_owned();

    // The page at rebind.attacker.example:PORT, its name now resolving to 127.0.0.1: the
    // browser sends the page's own name as Host, and its origin on a write. Even with the
    // token (which such a page should not have) nothing is answered.
    let rebound = format!("rebind.attacker.example:{port}");
    let auth = format!("Authorization: Bearer {ADMIN}");
    for path in ["/approvals", "/decisions/recent", "/", "/metrics"] {
        let (status, body) = by_hand(&proxy, &format!("GET {path} HTTP/1.1\r\nHost: {rebound}\r\n{auth}"), "").await?;
        assert_eq!(status, 421, "GET {path}: {body}");
        assert!(body.contains(&format!("localhost:{port}")) && body.contains("[admin] hosts"), "{body}");
    }
    let approve = r#"{"decision": "approve", "remember": "path-for-agent-15m"}"#;
    let post = |host: &str, origin: Option<&str>| {
        let origin = origin.map(|o| format!("\r\nOrigin: {o}")).unwrap_or_default();
        format!("POST /approvals/{id} HTTP/1.1\r\nHost: {host}\r\n{auth}\r\nContent-Type: application/json{origin}")
    };
    let from_page = format!("http://{rebound}");
    let (status, body) = by_hand(&proxy, &post(&rebound, Some(&from_page)), approve).await?;
    assert_eq!(status, 421, "{body}");
    // The right Host, a foreign Origin (a page that got the Host right some other way).
    let own = format!("127.0.0.1:{port}");
    for origin in [from_page.as_str(), "null"] {
        let (status, body) = by_hand(&proxy, &post(&own, Some(origin)), approve).await?;
        assert_eq!(status, 403, "Origin {origin}: {body}");
    }
    assert_eq!(pending(&proxy, Some(ADMIN), 1).await?[0]["id"], id.as_str(), "still held: nothing approved it");
    let (status, body) = by_hand(&proxy, &format!("GET /approvals HTTP/1.1\r\n{auth}"), "").await?;
    assert_eq!(status, 400, "HTTP/1.1 without a Host: {body}");

    // What the API is reached by: a configured name, loopback names, and liveness from anywhere.
    for host in [format!("admin.internal:{port}"), "admin.internal".to_owned(), format!("localhost:{port}")] {
        let (status, body) = by_hand(&proxy, &format!("GET /approvals HTTP/1.1\r\nHost: {host}\r\n{auth}"), "").await?;
        assert_eq!(status, 200, "Host {host}: {body}");
    }
    let (status, _) = by_hand(&proxy, &format!("GET /healthz HTTP/1.1\r\nHost: {rebound}"), "").await?;
    assert_eq!(status, 200, "liveness is exempt: a health checker may name the service its own way");
    // The console's own origin, and no Origin at all (curl, scripts): the write goes through.
    let (status, body) =
        by_hand(&proxy, &post(&own, Some(&format!("http://{own}"))), r#"{"decision": "bogus"}"#).await?;
    assert_eq!(status, 400, "past the Origin check to the body's own check: {body}");
    let (status, body) = by_hand(&proxy, &post(&own, None), approve).await?;
    assert_eq!(status, 200, "{body}");
    assert_eq!(waiting.await??.status(), 200);
    proxy.finish().await?;
    Ok(())
}

#[tokio::test]
async fn without_a_token_a_rebinding_page_still_cannot_read_the_log() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start(&ca).await?;
    let port = proxy.admin_addr.ok_or("no admin address")?.port();
    for path in ["/decisions/recent", "/approvals", "/policies?origin=http://a.test", "/decisions/stream"] {
        let head = format!("GET {path} HTTP/1.1\r\nHost: rebind.attacker.example:{port}");
        assert_eq!(by_hand(&proxy, &head, "").await?.0, 421, "{path}");
    }
    let head = format!(
        "DELETE /policies?origin=http://a.test HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://rebind.attacker.example:{port}"
    );
    assert_eq!(by_hand(&proxy, &head, "").await?.0, 403, "a purge from another origin");
    assert_eq!(get(&proxy, "/decisions/recent").await?.0, 200, "the API's own address works");
    proxy.finish().await?;
    Ok(())
}

#[tokio::test]
async fn repeated_wrong_tokens_are_answered_late_and_a_right_token_is_served() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start_with(&ca, |config| config.admin.token_sha256 = Some(TOKEN_SHA256.to_owned())).await?;
    // The login's `303` is read, not followed.
    let client = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build()?;
    let url = admin_url(&proxy, "/decisions/recent")?;
    // Five failures from one address are free.
    for _ in 0..5 {
        assert_eq!(client.get(&url).bearer_auth("guess").send().await?.status(), 401);
    }
    // The sixth waits at least 250 ms, the seventh (a console login: the same count) 500 ms.
    let started = Instant::now();
    assert_eq!(client.get(&url).bearer_auth("guess").send().await?.status(), 401);
    assert!(started.elapsed() >= Duration::from_millis(250), "the sixth failure was answered at once");
    let started = Instant::now();
    let login = client
        .post(admin_url(&proxy, "/login")?)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=guess")
        .send()
        .await?;
    assert_eq!(login.status(), 401);
    assert!(started.elapsed() >= Duration::from_millis(500), "the seventh failure was answered too soon");
    // The right token from the same address right after: served, never refused. (That it does
    // not wait is proved in paused time: `admin::access::tests::wrong_tokens_wait_and_a_right_one_right_after_never_does`.)
    let right = client.get(&url).bearer_auth("admin-secret").send().await?;
    assert_eq!(right.status(), 200);
    let session = client
        .post(admin_url(&proxy, "/login")?)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("token=admin-secret")
        .send()
        .await?;
    assert_eq!(session.status(), 303, "a console session opened");
    proxy.finish().await?;
    Ok(())
}

#[tokio::test]
async fn an_agents_md_that_is_not_a_policy_is_said_once_in_the_run_log_and_shown_in_the_origins_view() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    // An AGENTS.md written for coding agents: no `## Identity`, so not a policy (C1).
    let body = "# AGENTS.md\n\n## Build\n- run `cargo test` before a commit\n";
    let site = Site::new().serve("/AGENTS.md", 200, &[("content-type", "text/markdown")], body);
    let origin = Origin::https_site(&ca, site).await?;

    // The run log says it once, at info, however many requests the origin gets.
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("agentgate.toml");
    std::fs::write(&config, crate::reload::base_config(dir.path(), &ca))?;
    let agentgate = crate::support::binary::Agentgate::start(dir.path(), &config, "agentgate=info").await?;
    let client = agentgate.client()?;
    for _ in 0..3 {
        assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);
    }
    let text = agentgate.logged(&["not a policy", "why=/AGENTS.md has no"], 1).await?;
    let said: Vec<&str> = text.lines().filter(|line| line.contains("why=/AGENTS.md has no")).collect();
    assert_eq!(said.len(), 1, "once per origin: {text}");
    assert!(said[0].contains("INFO") && said[0].contains("## Identity"), "{}", said[0]);
    agentgate.stop().await?;

    // The origin's view (`/policies`, which the console shows) lists the same finding.
    let proxy = TestProxy::start(&ca).await?;
    assert_eq!(proxy.client()?.get(origin.url("/page")).send().await?.status(), 200);
    let (status, body) = get(&proxy, &format!("/policies?origin={}", origin.url(""))).await?;
    assert_eq!(status, 200, "{body}");
    let cached: Value = serde_json::from_str(&body)?;
    let codes: Vec<&str> = cached["files"]["AGENTS.md"]["diagnostics"]
        .as_array()
        .map(|all| all.iter().filter_map(|d| d["code"].as_str()).collect())
        .unwrap_or_default();
    assert!(codes.contains(&"not-a-policy:no-identity-section"), "{cached:#}");
    Ok(())
}
