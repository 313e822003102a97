//! Connections to origins are bounded (docs/upstream.md): one agent visiting
//! many distinct origins (distinct names that the test resolver sends to one loopback origin)
//! never has more than `[upstream] max_connections` sockets open at the origin, an origin keeps
//! at most `max_idle_per_host` idle connections, WebSocket and passthrough tunnels count too,
//! and with every connection busy a request is answered a recorded `503` after
//! `connect_queue_timeout` while agents are still accepted and served. The real binary with
//! 400 KiB robots.txt files keeps its open files and RSS bounded.
//!
//! Counts are read at the origin (connections open at once) and from `/metrics`; nothing here
//! measures time.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use agentgate::config::Config;
use agentgate::net::{NetFuture, Resolve, TcpDialer};
use futures_util::{SinkExt, StreamExt, stream};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::admin::{sample, scrape};
use crate::support::binary::Agentgate;
use crate::support::log::by_id;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::raw::{connect_tunnel, read_head};
use crate::support::wait::eventually_within;
use crate::support::{TestProxy, TestResult, header};

/// A bound on waits that end by an event, never a timing assertion.
const GUARD: Duration = Duration::from_secs(30);

/// Every name is 127.0.0.1: a wildcard DNS domain, as the attack used.
struct Wildcard;

impl Resolve for Wildcard {
    fn resolve<'a>(&'a self, _name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
        Box::pin(async { Ok(vec![IpAddr::from([127, 0, 0, 1])]) })
    }
}

/// A site with small policy files: robots.txt allows everything.
fn small_site() -> Site {
    Site::new().file("/robots.txt", "User-agent: *\nAllow: /\n")
}

async fn start(ca: &TestCa, edit: impl FnOnce(&mut Config)) -> TestResult<TestProxy> {
    TestProxy::start_with_network(ca, Arc::new(Wildcard), Arc::new(TcpDialer), edit).await
}

/// The value of an unlabelled metric.
pub(crate) async fn metric(proxy: &TestProxy, name: &str) -> TestResult<f64> {
    let scraped = scrape(proxy).await?;
    sample(&scraped, name, &[]).ok_or_else(|| format!("no sample {name}").into())
}

/// Waits (bounded by [`GUARD`]) until the metric `name` is `value`: a socket is counted
/// closed just after the origin sees it close.
async fn until_metric(proxy: &TestProxy, name: &str, value: f64) -> TestResult {
    eventually_within(GUARD, &format!("{name} to be {value}"), async || match metric(proxy, name).await? {
        now if now == value => Ok(()),
        now => Err(format!("{name} is {now}").into()),
    })
    .await
}

#[tokio::test]
async fn many_origins_stay_under_the_upstream_cap_and_a_new_agent_is_served() -> TestResult {
    const CAP: usize = 10;
    const ORIGINS: usize = 150;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(small_site()).await?;
    origin.watch_held();
    let proxy = start(&ca, |config| {
        config.upstream.max_connections = Some(CAP);
        config.upstream.max_idle_per_host = 2;
        // A bound for the waits under the cap, which end as soon as a fetch does.
        config.upstream.connect_queue_timeout = GUARD;
    })
    .await?;
    let port = origin.addr.port();
    let client = proxy.client()?;
    // Five requests in flight at a time, each to an origin never seen before: three policy
    // fetches and the page each (AGENTS.md is fetched on port 443, where nothing listens).
    let statuses: Vec<_> = stream::iter(0..ORIGINS)
        .map(|i| {
            let client = client.clone();
            async move {
                let response = client.get(format!("http://site-{i}.wild.test:{port}/page")).send().await?;
                TestResult::Ok(response.status().as_u16())
            }
        })
        .buffer_unordered(5)
        .collect()
        .await;
    for status in statuses {
        assert_eq!(status?, 200);
    }
    // Its policy fetches take turns on one connection, kept for the page (unless the cap
    // closed it meanwhile to make room for another origin's).
    assert!(origin.connections() >= ORIGINS, "every origin needed a connection of its own");
    let peak = origin.peak_held();
    assert!(peak <= CAP, "at most {CAP} connections open at the origin at once, saw {peak}");
    assert!(peak >= CAP / 2, "the check saw the connections: {peak}");
    assert!(origin.hits("/robots.txt") >= ORIGINS, "the policies were fetched, not skipped");
    assert!(metric(&proxy, "agentgate_upstream_connections").await? <= CAP as f64);
    assert!(metric(&proxy, "agentgate_upstream_connections_idle").await? <= CAP as f64);
    assert_eq!(metric(&proxy, "agentgate_upstream_connections_max").await?, CAP as f64);
    assert_eq!(metric(&proxy, "agentgate_upstream_at_capacity_total").await?, 0.0, "room was always made");
    assert!(
        metric(&proxy, "agentgate_upstream_idle_closed_total").await? > 0.0,
        "idle connections were closed, least recently used first, to make room"
    );

    // A new agent (a new client, a new connection to the proxy) is accepted and served.
    let response = proxy.client()?.get(format!("http://latecomer.wild.test:{port}/page")).send().await?;
    assert_eq!(response.status(), 200);
    assert!(origin.peak_held() <= CAP);
    Ok(())
}

#[tokio::test]
async fn an_origin_keeps_at_most_max_idle_per_host_idle_connections() -> TestResult {
    const IN_FLIGHT: usize = 6;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let proxy = start(&ca, |config| {
        crate::support::bypass_all(config);
        config.upstream.max_idle_per_host = 2;
    })
    .await?;
    let url = format!("http://one.wild.test:{}/hold-all", origin.addr.port());
    let client = proxy.client()?;
    let requests: Vec<_> = (0..IN_FLIGHT).map(|_| tokio::spawn(client.get(&url).send())).collect();
    tokio::time::timeout(GUARD, origin.held(IN_FLIGHT)).await?;
    assert_eq!(origin.open(), IN_FLIGHT, "one connection per request in flight");
    origin.release_all();
    for request in requests {
        let response = request.await??;
        assert_eq!(response.status(), 200);
        assert_eq!(response.text().await?, "released");
    }
    // Each connection goes idle as its response ends; past two, the oldest is closed.
    tokio::time::timeout(GUARD, origin.closed(IN_FLIGHT - 2)).await?;
    assert_eq!(origin.open(), 2, "two idle connections are kept");
    assert_eq!(metric(&proxy, "agentgate_upstream_connections_idle").await?, 2.0);
    until_metric(&proxy, "agentgate_upstream_connections", 2.0).await?;
    // And they are reused.
    let response = client.get(format!("http://one.wild.test:{}/again", origin.addr.port())).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(origin.connections(), IN_FLIGHT, "no new connection");
    Ok(())
}

#[tokio::test]
async fn an_agent_hanging_up_gives_the_shared_h2_connection_back() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https_site(&ca, Site::new()).await?;
    let proxy = start(&ca, crate::support::bypass_all).await?;
    let client = proxy.client()?;
    let hold = tokio::spawn(client.get(origin.url("/hold-all")).send());
    tokio::time::timeout(GUARD, origin.held(1)).await?;
    assert_eq!(metric(&proxy, "agentgate_upstream_connections_idle").await?, 0.0, "busy");
    // The agent gives up while agentgate waits for the origin's answer.
    hold.abort();
    until_metric(&proxy, "agentgate_upstream_connections_idle", 1.0).await?;
    origin.release_all();
    let response = client.get(origin.url("/echo")).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-version"), "HTTP/2.0");
    assert_eq!(origin.connections(), 1, "the one h2 connection, given back and used again");
    Ok(())
}

#[tokio::test]
async fn with_every_connection_busy_a_request_gets_a_recorded_503_and_agents_are_still_served() -> TestResult {
    const CAP: usize = 3;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(small_site()).await?;
    let proxy = start(&ca, |config| {
        config.upstream.max_connections = Some(CAP);
        config.upstream.connect_queue_timeout = Duration::from_millis(300);
        // The origins that hold their answers need no policy fetch; `fresh` does.
        config.bypass_hosts = vec!["*.busy.test".to_owned()];
    })
    .await?;
    let port = origin.addr.port();
    let client = proxy.client()?;
    let held: Vec<_> =
        (0..CAP).map(|i| tokio::spawn(client.get(format!("http://h{i}.busy.test:{port}/hold-all")).send())).collect();
    tokio::time::timeout(GUARD, origin.held(CAP)).await?;
    assert_eq!(metric(&proxy, "agentgate_upstream_connections").await?, CAP as f64);

    // A new origin: its policy fetches find no connection to spare.
    let response = proxy.client()?.get(format!("http://fresh.wild.test:{port}/page")).send().await?;
    assert_eq!(response.status(), 503);
    assert_eq!(header(&response, "retry-after"), "2");
    let decision = header(&response, "agentgate-decision");
    assert!(decision.starts_with("error; source=operator; code=upstream.at_capacity; record="), "{decision}");
    let fresh_id = decision.rsplit("record=").next().unwrap_or_default().to_owned();
    let body = response.text().await?;
    assert!(body.contains("cap on connections to origins"), "{body}");
    // A known origin whose one connection is busy: the forward itself finds none to spare.
    let response = proxy.client()?.get(format!("http://h0.busy.test:{port}/page")).send().await?;
    assert_eq!(response.status(), 503);
    assert_eq!(header(&response, "retry-after"), "2");
    let body = response.text().await?;
    assert!(body.starts_with("agentgate: cannot open a connection to h0.busy.test:"), "{body}");
    assert!(body.contains("[upstream] max_connections") && body.contains("retry"), "{body}");
    assert_eq!(origin.hits("/page"), 0, "nothing reached the origin");
    // At least the policy load and the forward; each policy file counts on its own.
    assert!(metric(&proxy, "agentgate_upstream_at_capacity_total").await? >= 2.0);
    assert!(metric(&proxy, "agentgate_upstream_connection_waits_total").await? >= 2.0);

    let records = proxy.log_lines(2).await?;
    let fresh = by_id(&records, &fresh_id)?;
    assert_eq!(fresh["event.action"], "error", "{fresh:#}");
    assert_eq!(fresh["http.response.status_code"], 503);
    assert_eq!(fresh["error.type"], "proxy");
    assert_eq!(fresh["agentgate.reasons"][0]["code"], "upstream.at_capacity");
    let refused_url = format!("http://h0.busy.test:{port}/page");
    let forwarded =
        records.iter().find(|r| r["url.full"] == refused_url.as_str()).ok_or("no record of the refused forward")?;
    assert_eq!(forwarded["event.action"], "error", "{forwarded:#}");
    assert_eq!(forwarded["http.response.status_code"], 503);
    assert_eq!(forwarded["error.type"], "proxy");

    origin.release_all();
    for request in held {
        assert_eq!(request.await??.status(), 200);
    }
    // Agents were accepted all along; with the held answers done, a new one is served.
    let response = proxy.client()?.get(format!("http://after.busy.test:{port}/page")).send().await?;
    assert_eq!(response.status(), 200);
    Ok(())
}

#[tokio::test]
async fn websockets_and_passthrough_tunnels_count_against_the_cap() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let proxy = start(&ca, |config| {
        crate::support::bypass_all(config);
        config.mitm.set_passthrough_hosts(vec!["tunnel.wild.test".to_owned()]);
        config.upstream.max_connections = Some(2);
        config.upstream.connect_queue_timeout = Duration::from_millis(300);
    })
    .await?;
    let port = origin.addr.port();
    let (mut tunnel, head) = connect_tunnel(proxy.addr, &format!("tunnel.wild.test:{port}")).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut stream = TcpStream::connect(proxy.addr).await?;
    let handshake = format!(
        "GET http://ws.wild.test:{port}/ws HTTP/1.1\r\nHost: ws.wild.test:{port}\r\nConnection: Upgrade\r\n\
         Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
    );
    stream.write_all(handshake.as_bytes()).await?;
    let head = read_head(&mut stream).await?;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    let mut ws = WebSocketStream::from_raw_socket(stream, Role::Client, None).await;
    ws.send(Message::text("ping")).await?;
    assert_eq!(ws.next().await.ok_or("closed")??, Message::text("ping"));
    assert_eq!(metric(&proxy, "agentgate_upstream_connections").await?, 2.0, "the tunnel and the websocket");

    let response = proxy.client()?.get(format!("http://third.wild.test:{port}/hello")).send().await?;
    assert_eq!(response.status(), 503, "{:?}", response.text().await);

    // The websocket ends: its socket is given back, and the next request gets it.
    ws.close(None).await?;
    drop(ws);
    until_metric(&proxy, "agentgate_upstream_connections", 1.0).await?;
    let response = proxy.client()?.get(format!("http://third.wild.test:{port}/hello")).send().await?;
    assert_eq!(response.status(), 200);
    tunnel.shutdown().await?;
    Ok(())
}

/// Open file descriptors of process `pid`.
fn open_files(pid: u32) -> TestResult<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// The IPv4 TCP sockets process `pid` holds, as (local port, remote port): its descriptors'
/// socket inodes looked up in `/proc/net/tcp`.
fn tcp_sockets(pid: u32) -> TestResult<Vec<(u16, u16)>> {
    let mut inodes = std::collections::HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))? {
        // A descriptor closed between the listing and this read is no longer held.
        let target = match std::fs::read_link(entry?.path()) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
            target => target?,
        };
        let target = target.to_string_lossy();
        if let Some(inode) = target.strip_prefix("socket:[").and_then(|rest| rest.strip_suffix(']')) {
            inodes.insert(inode.to_owned());
        }
    }
    let port = |address: &str| u16::from_str_radix(address.rsplit(':').next().unwrap_or_default(), 16);
    let mut sockets = Vec::new();
    for line in std::fs::read_to_string("/proc/net/tcp")?.lines().skip(1) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() > 9 && inodes.contains(fields[9]) && fields[3] != "0A" {
            sockets.push((port(fields[1])?, port(fields[2])?));
        }
    }
    Ok(sockets)
}

#[tokio::test]
async fn the_binary_keeps_open_files_and_rss_bounded_across_origins_with_large_robots_files() -> TestResult {
    const CAP: usize = 16;
    const PER_ROUND: usize = 60;
    agentgate::tls::install_default_provider();
    // 400 KiB of comments: cheap to parse, as large to transfer as the files.
    let line = format!("# {}\n", "x".repeat(98));
    let robots = format!("User-agent: *\nAllow: /\n{}", line.repeat(4 * 1024));
    let mut origins = Vec::new();
    for _ in 0..2 * PER_ROUND {
        origins.push(Origin::http_site(Site::new().file("/robots.txt", robots.as_str())).await?);
    }
    let dir = tempfile::tempdir()?;
    let config = format!(
        "listen = \"127.0.0.1:0\"\n[ca]\ndir = {ca_dir:?}\n[network]\nallow_cidrs = [\"127.0.0.0/8\"]\n\
         [connect]\nallowed_ports = [\"1-65535\"]\n[audit]\npath = {log:?}\n[admin]\nlisten = \"off\"\n\
         [cache]\nmax_bytes = 4194304\n[upstream]\nmax_connections = {CAP}\nconnect_queue_timeout = \"30s\"\n",
        ca_dir = dir.path().join("ca"),
        log = dir.path().join("decisions.jsonl"),
    );
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, config)?;
    let agentgate = Agentgate::start(dir.path(), &config_path, "warn").await?;
    let pid = agentgate.pid().ok_or("agentgate exited")?;
    let client = agentgate.client()?;
    let round = |origins: &[Origin]| {
        let urls: Vec<String> =
            origins.iter().map(|origin| format!("http://127.0.0.1:{}/page", origin.addr.port())).collect();
        let client = client.clone();
        async move {
            let statuses: Vec<_> = stream::iter(urls)
                .map(|url| {
                    let client = client.clone();
                    async move { TestResult::Ok(client.get(url).send().await?.status().as_u16()) }
                })
                .buffer_unordered(4)
                .collect()
                .await;
            statuses.into_iter().try_for_each(|status| {
                assert_eq!(status?, 200);
                TestResult::Ok(())
            })
        }
    };
    round(&origins[..PER_ROUND]).await?;
    let (rss_warm, files_warm) = (agentgate.memory_kib("VmRSS")?, open_files(pid)?);
    round(&origins[PER_ROUND..]).await?;
    let (rss, files) = (agentgate.memory_kib("VmRSS")?, open_files(pid)?);
    assert!(origins.iter().all(|origin| origin.hits("/robots.txt") == 1), "each robots.txt fetched once");
    // Every socket but the agents' (whose local port is the proxy's) goes to an origin.
    let proxy_port: u16 = agentgate.addr().rsplit(':').next().unwrap_or_default().parse()?;
    let sockets = tcp_sockets(pid)?;
    let agents = sockets.iter().filter(|(local, _)| *local == proxy_port).count();
    let to_origins = sockets.len() - agents;
    assert!(to_origins <= CAP, "{to_origins} sockets to origins with a cap of {CAP}");
    // The rest of the open files: listeners, the log, the runtime's, a few dozen at most.
    let others = files - agents - to_origins;
    assert!(others < 32, "{others} other open files ({files} in all, {files_warm} after the first round)");
    // Kept idle, each 400 KiB fetch would hold its buffers: 60 more origins, three fetches
    // each, about 70 MiB. Closed after each fetch, the second round costs next to nothing.
    let grown = rss.saturating_sub(rss_warm);
    assert!(grown < 32 * 1024, "RSS grew by {grown} KiB across {PER_ROUND} more origins ({rss_warm} KiB to {rss} KiB)");
    let response = agentgate.client()?.get(format!("http://127.0.0.1:{}/page", origins[0].addr.port())).send().await?;
    assert_eq!(response.status(), 200, "a new agent is accepted and served");
    agentgate.stop().await
}

/// An HTTPS origin on `127.0.0.1:0` that speaks HTTP/1.1 only (no h2 in its ALPN).
fn https_h1_only(ca: &TestCa, site: Site) -> TestResult<Origin> {
    let mut config = (*ca.origin_server_config()?).clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Origin::on_listener(std::net::TcpListener::bind("127.0.0.1:0")?, Some(Arc::new(config)), site)
}

#[tokio::test]
async fn the_policy_fetches_of_an_unseen_origin_share_one_connection_kept_for_the_agents_request() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = start(&ca, |_| {}).await?;
    let client = proxy.client()?;
    // Every file but AGENTS.md's fallback location is there, so each load fetches five.
    let site = || {
        small_site()
            .file("/agents.txt", "")
            .file("/AGENTS.md", "# AGENTS.md\n\n## Allowed actions\n- read\n")
            .file("/automation-preferences.txt", "")
    };
    for (name, origin) in [
        ("https, h2", Origin::https_site(&ca, site()).await?),
        ("https, HTTP/1.1 only", https_h1_only(&ca, site())?),
        ("plain http", Origin::http_site(site()).await?),
    ] {
        let response = client.get(origin.url("/page")).send().await?;
        assert_eq!(response.status(), 200, "{name}");
        response.text().await?;
        let fetched: usize =
            ["/robots.txt", "/agents.txt", "/automation-preferences.txt"].iter().map(|path| origin.hits(path)).sum();
        assert_eq!(fetched, 3, "{name}: the origin's policy files were fetched from it");
        assert_eq!(origin.hits("/page"), 1, "{name}");
        // The fetches took turns on one connection (h2: multiplexed on it), and the agent's
        // own request went out on it too.
        assert_eq!(origin.connections(), 1, "{name}: one connection for the policies and the request");
        if name.starts_with("https") {
            assert_eq!(origin.hits("/AGENTS.md"), 1, "{name}");
            assert_eq!(origin.handshakes(), [rustls::HandshakeKind::Full], "{name}: one TLS handshake");
        }
    }
    Ok(())
}

#[tokio::test]
async fn a_policy_fetch_connection_that_carried_a_large_body_is_not_kept() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = start(&ca, |_| {}).await?;
    let client = proxy.client()?;
    // 64 KiB of comments: over the 16 KiB a kept fetch connection may have read.
    let robots = format!("User-agent: *\nAllow: /\n{}", format!("# {}\n", "x".repeat(62)).repeat(1024));
    let origin = https_h1_only(&ca, Site::new().file("/robots.txt", robots))?;
    let response = client.get(origin.url("/page")).send().await?;
    assert_eq!(response.status(), 200);
    response.text().await?;
    assert_eq!(origin.hits("/robots.txt"), 1);
    // The connection that read robots.txt was closed after it; the other fetches and the
    // agent's request took turns on a second one.
    tokio::time::timeout(GUARD, origin.closed(1)).await?;
    assert_eq!(origin.connections(), 2, "the large body's connection closed, one other for the rest");
    assert_eq!(origin.open(), 1, "only the small fetches' connection is kept");
    Ok(())
}
