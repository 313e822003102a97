//! Limits shared through Redis (`[limits] store = "redis"`, docs/scale-out.md): two proxies
//! sharing one real `redis-server` spend one budget (rates and concurrency slots), over
//! `redis://` or `rediss://` (TLS), give the same answers as the in-process store, and keep
//! going as `on_failure` says when Redis stops, hangs or presents a certificate they do not
//! trust; a replica killed with SIGKILL frees its slots within the lease. Two
//! freshly started replicas on the default timeout let exactly one budget through a burst
//! (the connection is warmed at start, which says so when Redis is unreachable), and a
//! Redis frozen and resumed spends nothing for the checks it received while frozen.
//! Byte budgets are shared the same way (a declared upload refused, a download cut, by the
//! other replica) and fall back to each replica's own counters when Redis is killed.
//!
//! Each test starts its own `redis-server` on a free loopback port (no persistence) and
//! stops it at the end. The tests are ignored by a plain `cargo test` ("needs redis-server");
//! `scripts/test.sh` installs it and runs them (`support::tools`).

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use agentgate::config::Config;
use agentgate::limits::{OnFailure, Store};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_rustls::TlsConnector;

use crate::admin::{sample, scrape};
use crate::agents::{agent, client_as};
use crate::limits::{agents_md, markdown_site, over_limit};
use crate::reload::{base_config, until_status};
use crate::support::binary::Agentgate;
use crate::support::log::{by_id, for_request};
use crate::support::origin::Origin;
use crate::support::pattern::pattern_chunks;
use crate::support::pki::TestCa;
use crate::support::tools::{self, REDIS_SERVER};
use crate::support::wait::eventually_within;
use crate::support::{TestProxy, TestResult, bypass_all, header};

/// How long a test waits for redis-server to answer `PING`.
const READY_LIMIT: Duration = Duration::from_secs(10);

/// A `redis-server` of this test's own, on a free loopback port, killed on drop.
pub(crate) struct RedisServer {
    child: Child,
    pub(crate) port: u16,
    /// Set when it speaks TLS only: how `PING` reaches it.
    tls: Option<TlsConnector>,
}

/// A free port: bound by the system, then released for redis-server.
fn free_port() -> TestResult<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

impl RedisServer {
    /// Asserts that `client`'s proxy refuses this server as a destination, whether asked
    /// in plain HTTP or through a CONNECT tunnel (`https://`: the refusal is answered inside
    /// it): `403`, code `network.own_address` (a shared store is never an agent's destination).
    pub(crate) async fn is_refused_through(&self, client: &reqwest::Client) -> TestResult {
        for scheme in ["http", "https"] {
            let response = client.get(format!("{scheme}://127.0.0.1:{}/", self.port)).send().await?;
            let status = response.status().as_u16();
            let headers = format!("{:?}", response.headers());
            let text = format!("{headers} {}", response.text().await?);
            assert_eq!(status, 403, "{scheme}: {text}");
            assert!(text.contains("network.own_address"), "{scheme}: {text}");
        }
        Ok(())
    }

    pub(crate) async fn start() -> TestResult<RedisServer> {
        RedisServer::start_on(free_port()?).await
    }

    /// Starts (or starts again) on `port`, and waits (bounded) until `PING` answers.
    pub(crate) async fn start_on(port: u16) -> TestResult<RedisServer> {
        RedisServer::spawn(port, &["--port".to_owned(), port.to_string()], None).await
    }

    /// Starts with TLS only (`--port 0`) on a free port, its certificate (for `127.0.0.1`)
    /// signed by `ca` and written into `dir`; waits (bounded) until `PING` answers over TLS.
    async fn start_tls(ca: &TestCa, dir: &Path) -> TestResult<RedisServer> {
        let (cert, key) = ca.server_pem_files(dir)?;
        let port = free_port()?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(ca.pem.as_bytes())?)?;
        let client = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let path = |p: &Path| p.to_string_lossy().into_owned();
        let args = [
            "--port".to_owned(),
            "0".to_owned(),
            "--tls-port".to_owned(),
            port.to_string(),
            "--tls-cert-file".to_owned(),
            path(&cert),
            "--tls-key-file".to_owned(),
            path(&key),
            "--tls-ca-cert-file".to_owned(),
            path(&ca.pem_path),
            "--tls-auth-clients".to_owned(),
            "no".to_owned(),
        ];
        RedisServer::spawn(port, &args, Some(TlsConnector::from(Arc::new(client)))).await
    }

    /// Runs redis-server on loopback with `listen` (its port options), no persistence.
    async fn spawn(port: u16, listen: &[String], tls: Option<TlsConnector>) -> TestResult<RedisServer> {
        let mut child = Command::new(tools::need(REDIS_SERVER)?)
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(listen)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        eventually_within(READY_LIMIT, &format!("redis-server on port {port} answering PING"), async || {
            if let Some(status) = child.try_wait()? {
                panic!("redis-server on port {port} exited: {status}");
            }
            if ping(port, tls.as_ref()).await { Ok(()) } else { Err("no PONG".into()) }
        })
        .await?;
        Ok(RedisServer { child, port, tls })
    }

    pub(crate) fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    /// SIGKILL, and waits for the exit: every key is gone (no persistence).
    pub(crate) async fn stop(mut self) -> TestResult<u16> {
        self.child.kill().await?;
        Ok(self.port)
    }

    /// SIGSTOP (`true`) or SIGCONT: a Redis that accepts connections but never answers.
    pub(crate) async fn pause(&self, paused: bool) -> TestResult {
        let pid = self.child.id().ok_or("redis-server has exited")?;
        let signal = if paused { "-STOP" } else { "-CONT" };
        assert!(Command::new("kill").arg(signal).arg(pid.to_string()).status().await?.success());
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL ends a stopped (SIGSTOP) process too.
        let _ = self.child.start_kill();
    }
}

async fn ping(port: u16, tls: Option<&TlsConnector>) -> bool {
    let Ok(tcp) = TcpStream::connect(("127.0.0.1", port)).await else { return false };
    let Some(tls) = tls else { return pong(tcp).await };
    let name = ServerName::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST).into());
    match tls.connect(name, tcp).await {
        Ok(stream) => pong(stream).await,
        Err(_) => false,
    }
}

/// Whether `PING` on `stream` is answered `PONG`.
async fn pong(mut stream: impl AsyncRead + AsyncWrite + Unpin) -> bool {
    let mut answer = [0u8; 7];
    stream.write_all(b"PING\r\n").await.is_ok()
        && stream.read_exact(&mut answer).await.is_ok()
        && answer.as_slice() == b"+PONG\r\n"
}

/// Sends a `/hold-all` request through `client` until the origin holds it (its `held`-th):
/// a slot given back is removed from Redis by a task spawned when the request ends, so the
/// first try may still find it taken. Bounded.
async fn hold(
    client: &reqwest::Client,
    origin: &Origin,
    held: usize,
) -> TestResult<tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>> {
    eventually_within(READY_LIMIT, &format!("a slot for held request {held}"), async || {
        let mut request = tokio::spawn(client.get(origin.url("/hold-all")).send());
        tokio::select! {
            () = origin.held(held) => Ok(request),
            answer = &mut request => {
                let status = answer??.status();
                assert_eq!(status, 429, "only a slot not yet given back refuses it");
                Err("429: the slot is not given back yet".into())
            }
        }
    })
    .await
}

/// Config edit: the Redis store at `url`, falling back as `on_failure` says. The timeout is
/// 1 s, not the default 500 ms: these tests are about shared answers, not about how fast a
/// store must be (the default is proved by
/// `two_fresh_proxies_on_the_default_timeout_let_exactly_one_budget_through_a_burst`).
fn shared(url: &str, on_failure: OnFailure) -> impl FnOnce(&mut Config) {
    let url = url.to_owned();
    move |config| {
        config.limits.store = Store::Redis;
        config.limits.redis.url = url;
        config.limits.redis.on_failure = on_failure;
        config.limits.redis.timeout = Duration::from_secs(1);
    }
}

/// The child's config: [`base_config`] with the Redis store at `url`.
fn child_config(dir: &Path, ca: &TestCa, url: &str, extra: &str) -> TestResult<std::path::PathBuf> {
    let path = dir.join("agentgate.toml");
    let text = format!("{}[limits]\nstore = \"redis\"\n[limits.redis]\nurl = {url:?}\n{extra}", base_config(dir, ca));
    std::fs::write(&path, text)?;
    Ok(path)
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn two_proxies_sharing_redis_let_exactly_six_through_for_requests_per_minute_six() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    // Line 7: requests-per-minute.
    let origin =
        Origin::https_site(&ca, markdown_site(agents_md("## Rate Limits\n- requests-per-minute: 6\n"))).await?;
    let replica = |name: &'static str| {
        let url = redis.url();
        move |config: &mut Config| {
            shared(&url, OnFailure::Deny)(config);
            config.instance = name.to_owned();
        }
    };
    let a = TestProxy::start_with(&ca, replica("replica-a")).await?;
    let b = TestProxy::start_with(&ca, replica("replica-b")).await?;
    let clients = [a.client()?, b.client()?];

    for i in 0..6 {
        let response = clients[i % 2].get(origin.url("/page")).send().await?;
        assert_eq!(response.status(), 200, "request {i} is within the shared six");
    }
    let prefix = "rate_limited; source=AGENTS.md; line=7; code=agents_md.rate_limit; window=60s; record=";
    let record =
        over_limit(clients[0].get(origin.url("/page")).send().await?, prefix, "requests-per-minute: 6").await?;
    let eighth = clients[1].get(origin.url("/page")).send().await?;
    assert_eq!(eighth.status(), 429, "the other proxy refuses too: one budget");
    let retry_after: u64 = header(&eighth, "retry-after").parse()?;
    assert!((1..=10).contains(&retry_after), "one request back every 10 s: {retry_after}");
    assert_eq!(origin.hits("/page"), 6, "exactly six reached the origin");

    let records = a.finish().await?;
    let line = by_id(&records, &record)?;
    assert_eq!(line["event.action"], "rate_limited");
    assert_eq!(line["http.response.status_code"], 429);
    assert_eq!(line["agentgate.reasons"][0]["code"], "agents_md.rate_limit");
    assert_eq!(line["agentgate.reasons"][0]["line"], 7);
    assert!(records.iter().all(|r| r["agentgate.instance"] == "replica-a"), "each replica names itself");
    let records = b.finish().await?;
    assert_eq!(records.len(), 4, "three allowed and one refused through b");
    assert!(records.iter().all(|r| r["agentgate.instance"] == "replica-b"), "each replica names itself");
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn memory_and_redis_stores_give_the_same_answers_to_the_same_sequence() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin =
        Origin::https_site(&ca, markdown_site(agents_md("## Rate Limits\n- requests-per-minute: 5\n"))).await?;
    // alpha: the operator's 3 a minute per origin on top of the site's 5; beta: the site's 5.
    let agents = |config: &mut Config| {
        let mut alpha = agent("alpha", "a-token");
        alpha.limits.per_origin_requests_per_minute = 3;
        config.agents = vec![alpha, agent("beta", "b-token")];
    };
    let memory = TestProxy::start_with(&ca, agents).await?;
    let url = redis.url();
    let shared_store = TestProxy::start_with(&ca, move |config| {
        agents(config);
        shared(&url, OnFailure::Deny)(config);
    })
    .await?;

    let sequence = ["alpha", "beta", "alpha", "alpha", "alpha", "beta", "beta", "beta", "beta", "beta", "alpha"];
    let mut answers = Vec::new();
    for proxy in [&memory, &shared_store] {
        let alpha = client_as(proxy, "alpha", "a-token")?;
        let beta = client_as(proxy, "beta", "b-token")?;
        let mut steps = Vec::new();
        for who in sequence {
            let client = if who == "alpha" { &alpha } else { &beta };
            let response = client.get(origin.url("/page")).send().await?;
            let decision = header(&response, "agentgate-decision");
            let decision = decision.split("; record=").next().unwrap_or_default().to_owned();
            steps.push((who, response.status().as_u16(), header(&response, "retry-after"), decision));
        }
        answers.push(steps);
    }
    assert_eq!(answers[0], answers[1], "memory (left) and redis (right) answer alike");
    let statuses: Vec<u16> = answers[0].iter().map(|step| step.1).collect();
    assert_eq!(statuses, [200, 200, 200, 200, 429, 200, 200, 200, 200, 429, 429], "{:#?}", answers[0]);
    assert!(answers[0][4].3.contains("code=operator.rate_limit"), "{:?}", answers[0][4]);
    assert!(answers[0][9].3.contains("code=agents_md.rate_limit"), "{:?}", answers[0][9]);
    assert_eq!(origin.hits("/page"), 16, "eight of eleven through each proxy");
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn redis_stopped_mid_run_falls_back_to_local_limits_then_the_shared_budget_applies_again() -> TestResult {
    agentgate::tls::install_default_provider();
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin =
        Origin::https_site(&ca, markdown_site(agents_md("## Rate Limits\n- requests-per-minute: 3\n"))).await?;
    let dir = tempfile::tempdir()?;
    let config = child_config(dir.path(), &ca, &redis.url(), "on_failure = \"local\"\ntimeout = \"1s\"\n")?;
    let child = Agentgate::start(dir.path(), &config, "info").await?;
    let a = child.client()?;
    let b_proxy = TestProxy::start_with(&ca, shared(&redis.url(), OnFailure::Local)).await?;
    let b = b_proxy.client()?;
    let page = origin.url("/page");

    assert_eq!(a.get(&page).send().await?.status(), 200, "counted in Redis");
    let port = redis.stop().await?;
    for i in 0..3 {
        assert_eq!(a.get(&page).send().await?.status(), 200, "request {i} passes under the local limit");
    }
    let local = a.get(&page).send().await?;
    assert_eq!(local.status(), 429, "the local budget of three is spent");
    assert!(header(&local, "agentgate-decision").contains("code=agents_md.rate_limit"));
    child.logged(&["limits store unavailable", "on_failure", "local"], 1).await?;

    let redis = RedisServer::start_on(port).await?;
    // The local budget is spent, so the first 200 is Redis answering again (empty: it restarted).
    until_status(&a, &page, 200).await?;
    assert_eq!(b.get(&page).send().await?.status(), 200);
    assert_eq!(a.get(&page).send().await?.status(), 200);
    let refused = b.get(&page).send().await?;
    assert_eq!(refused.status(), 429, "three in the restarted Redis, spent across both proxies");
    assert_eq!(origin.hits("/page"), 7);
    child.stop().await?;
    drop(redis);
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn a_hung_redis_gives_503_under_deny_and_no_limit_under_allow() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin =
        Origin::https_site(&ca, markdown_site(agents_md("## Rate Limits\n- requests-per-minute: 2\n"))).await?;
    let deny = TestProxy::start_with(&ca, shared(&redis.url(), OnFailure::Deny)).await?;
    let allow = TestProxy::start_with(&ca, shared(&redis.url(), OnFailure::Allow)).await?;
    let (deny_client, allow_client) = (deny.client()?, allow.client()?);
    let page = origin.url("/page");
    assert_eq!(deny_client.get(&page).send().await?.status(), 200);
    assert_eq!(allow_client.get(&page).send().await?.status(), 200);

    // Stopped, not dead: connections are accepted and never answered, so only the 1 s
    // timeout ends each check.
    redis.pause(true).await?;
    let refused = deny_client.get(&page).send().await?;
    assert_eq!(refused.status(), 503);
    let decision = header(&refused, "agentgate-decision");
    assert!(decision.starts_with("deny; source=operator; code=limits.store_unavailable; record="), "{decision}");
    let record = decision.rsplit("record=").next().unwrap_or_default().to_owned();
    let body = refused.text().await?;
    assert!(body.contains("on_failure = \"deny\"") && body.contains("Retry in a few seconds"), "{body}");
    for i in 0..3 {
        assert_eq!(allow_client.get(&page).send().await?.status(), 200, "request {i}: uncounted under allow");
    }
    assert_eq!(origin.hits("/page"), 5, "the 503 never reached the origin");
    redis.pause(false).await?;
    // Each unanswered check is counted where an operator looks: one on the deny replica,
    // three on the allow one.
    let failures = |scrape| sample(scrape, "agentgate_limits_store_failures_total", &[]);
    let (deny_scrape, allow_scrape) = (scrape(&deny).await?, scrape(&allow).await?);
    assert_eq!(failures(&deny_scrape), Some(1.0));
    assert_eq!(failures(&allow_scrape), Some(3.0));
    // Every check is timed, answered or not; neither replica counted one locally instead.
    let trips = |scrape| sample(scrape, "agentgate_limits_store_seconds_count", &[]);
    assert_eq!((trips(&deny_scrape), trips(&allow_scrape)), (Some(2.0), Some(4.0)));
    let fallbacks = |scrape| sample(scrape, "agentgate_limits_store_fallbacks_total", &[]);
    assert_eq!((fallbacks(&deny_scrape), fallbacks(&allow_scrape)), (Some(0.0), Some(0.0)));

    let records = deny.finish().await?;
    let line = by_id(&records, &record)?;
    assert_eq!(line["event.action"], "deny");
    assert_eq!(line["http.response.status_code"], 503);
    assert_eq!(line["agentgate.reasons"][0]["code"], "limits.store_unavailable");
    drop(allow);
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn concurrent_sessions_span_proxies_and_a_killed_replica_frees_its_slot_within_the_lease() -> TestResult {
    agentgate::tls::install_default_provider();
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    // Line 7: concurrent-sessions.
    let origin =
        Origin::https_site(&ca, markdown_site(agents_md("## Rate Limits\n- concurrent-sessions: 2\n"))).await?;
    let dir = tempfile::tempdir()?;
    // A 1 s timeout rather than 50 ms: a renewal that misses it is lost, and two lost in a
    // row on a busy machine let a live slot run out within the 1 s lease.
    let config = child_config(dir.path(), &ca, &redis.url(), "lease = \"1s\"\ntimeout = \"1s\"\n")?;
    let child = Agentgate::start(dir.path(), &config, "info").await?;
    let url = redis.url();
    let proxy = TestProxy::start_with(&ca, move |config| {
        shared(&url, OnFailure::Deny)(config);
        config.limits.redis.lease = Duration::from_secs(1);
        config.limits.redis.timeout = Duration::from_secs(1);
    })
    .await?;
    let (k, a) = (child.client()?, proxy.client()?);

    let held_by_child = tokio::spawn(k.get(origin.url("/hold-all")).send());
    origin.held(1).await;
    let held_here = tokio::spawn(a.get(origin.url("/hold-all")).send());
    origin.held(2).await;
    let third = a.get(origin.url("/page")).send().await?;
    assert_eq!(third.status(), 429, "two in flight across both proxies: the third is refused");
    assert!(
        header(&third, "agentgate-decision")
            .starts_with("rate_limited; source=AGENTS.md; line=7; code=agents_md.concurrent_sessions;")
    );
    assert_eq!(k.get(origin.url("/page")).send().await?.status(), 429, "from either proxy");

    // The child dies holding its slot; nothing removes it but the lease running out.
    child.signal("KILL").await?;
    assert!(held_by_child.await?.is_err(), "the killed proxy's client lost its request");
    until_status(&a, &origin.url("/page"), 200).await?;

    // This proxy's own slot outlived the lease: it was renewed while its request ran, so with
    // one more request held, both slots are taken again.
    let held_again = hold(&a, &origin, 3).await?;
    until_status(&a, &origin.url("/page"), 429).await?;
    origin.release_all();
    assert_eq!(held_here.await??.status(), 200);
    assert_eq!(held_again.await??.status(), 200);
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn two_proxies_share_a_tls_redis_and_one_that_does_not_trust_its_ca_falls_back() -> TestResult {
    agentgate::tls::install_default_provider();
    let redis_ca = TestCa::new("redis CA")?;
    let certs = tempfile::tempdir()?;
    let redis = RedisServer::start_tls(&redis_ca, certs.path()).await?;
    let ca = TestCa::new("origin CA")?;
    let origin =
        Origin::https_site(&ca, markdown_site(agents_md("## Rate Limits\n- requests-per-minute: 3\n"))).await?;
    // Trust for Redis comes from [upstream] extra_ca_files, next to the origins' CA. A
    // generous timeout: a TLS handshake on a busy machine can outlast the default 50 ms.
    let trusting = |config: &mut Config| {
        shared(&redis.url(), OnFailure::Deny)(config);
        config.upstream.extra_ca_files.push(redis_ca.pem_path.clone());
        config.limits.redis.timeout = Duration::from_secs(2);
    };
    let a = TestProxy::start_with(&ca, trusting).await?;
    let b = TestProxy::start_with(&ca, trusting).await?;
    let clients = [a.client()?, b.client()?];
    for i in 0..3 {
        assert_eq!(clients[i % 2].get(origin.url("/page")).send().await?.status(), 200, "request {i}");
    }
    let refused = clients[1].get(origin.url("/page")).send().await?;
    assert_eq!(refused.status(), 429, "the fourth is refused by the other proxy: one budget over TLS");
    assert!(header(&refused, "agentgate-decision").contains("code=agents_md.rate_limit"));
    assert_eq!(origin.hits("/page"), 3);
    // Every check is one timed round trip; none failed, none fell back.
    let scraped = scrape(&b).await?;
    assert_eq!(sample(&scraped, "agentgate_limits_store_seconds_count", &[]), Some(2.0));
    assert_eq!(sample(&scraped, "agentgate_limits_store_failures_total", &[]), Some(0.0));
    assert_eq!(sample(&scraped, "agentgate_limits_store_fallbacks_total", &[]), Some(0.0));

    // A replica that trusts only the origins' CA: the store is unavailable, the check falls
    // back to this replica's own counters, and the log line names the TLS failure.
    let dir = tempfile::tempdir()?;
    let config = child_config(dir.path(), &ca, &redis.url(), "on_failure = \"local\"\ntimeout = \"2s\"\n")?;
    let child = Agentgate::start(dir.path(), &config, "info").await?;
    assert_eq!(child.client()?.get(origin.url("/page")).send().await?.status(), 200, "counted locally");
    child.logged(&["limits store unavailable", "TLS verification failed", "extra_ca_files", "on_failure"], 1).await?;
    child.stop().await?;
    let untrusting = TestProxy::start_with(&ca, |config| {
        shared(&redis.url(), OnFailure::Local)(config);
        config.limits.redis.timeout = Duration::from_secs(2);
    })
    .await?;
    assert_eq!(untrusting.client()?.get(origin.url("/page")).send().await?.status(), 200, "counted locally");
    let scraped = scrape(&untrusting).await?;
    assert_eq!(sample(&scraped, "agentgate_limits_store_seconds_count", &[]), Some(1.0), "a failed trip is timed too");
    assert_eq!(sample(&scraped, "agentgate_limits_store_failures_total", &[]), Some(1.0));
    assert_eq!(sample(&scraped, "agentgate_limits_store_fallbacks_total", &[]), Some(1.0));
    assert_eq!(origin.hits("/page"), 5, "both fallbacks reached the origin");
    drop(a);
    Ok(())
}

/// Config edit for the issue-25 tests: the Redis store at `url` with its defaults (timeout,
/// `on_failure`), no site policies (`/hello` of a plain origin), and the operator's limit of
/// `limit` requests a minute per origin on the default agent, counted in Redis.
fn shared_operator_limit(url: &str, limit: u32) -> impl Fn(&mut Config) + use<> {
    let url = url.to_owned();
    move |config| {
        bypass_all(config);
        config.limits.store = Store::Redis;
        config.limits.redis.url = url.clone();
        config.agent.limits.per_origin_requests_per_minute = limit;
    }
}

/// On 50 ms, the first checks of fresh replicas timed out on cold connections and
/// fell back to local counting (31, 38 and 31 let through a limit of 30). Now each replica
/// connects and loads its scripts before it serves, and the default timeout holds on this
/// loaded machine: a concurrent burst of three budgets over two fresh replicas lets exactly
/// one budget through, and no check fell back.
#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn two_fresh_proxies_on_the_default_timeout_let_exactly_one_budget_through_a_burst() -> TestResult {
    const LIMIT: usize = 10;
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let replica = shared_operator_limit(&redis.url(), u32::try_from(LIMIT)?);
    let a = TestProxy::start_with(&ca, &replica).await?;
    let b = TestProxy::start_with(&ca, &replica).await?;
    assert_eq!(Config::embedded_default().limits.redis.timeout, Duration::from_millis(500), "the default is used");
    let clients = [a.client()?, b.client()?];
    let mut burst = tokio::task::JoinSet::new();
    for i in 0..3 * LIMIT {
        burst.spawn(clients[i % 2].get(origin.url("/hello")).send());
    }
    let mut statuses = Vec::new();
    while let Some(answer) = burst.join_next().await {
        statuses.push(answer??.status().as_u16());
    }
    statuses.sort_unstable();
    let expected: Vec<u16> = [200].repeat(LIMIT).into_iter().chain([429].repeat(2 * LIMIT)).collect();
    assert_eq!(statuses, expected, "exactly one budget through two replicas");
    assert_eq!(origin.hits("/hello"), LIMIT);
    for proxy in [&a, &b] {
        let scraped = scrape(proxy).await?;
        assert_eq!(sample(&scraped, "agentgate_limits_store_failures_total", &[]), Some(0.0), "none timed out");
        assert_eq!(sample(&scraped, "agentgate_limits_store_fallbacks_total", &[]), Some(0.0));
    }
    Ok(())
}

/// A Redis frozen (SIGSTOP) accepts the checks sent to it and runs them when it is
/// resumed (SIGCONT), long after the replica stopped waiting and refused their requests. Each
/// check carries its deadline on Redis's clock and the script spends nothing past it, so the
/// budget left after the resume is the budget left before the freeze.
#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn a_frozen_then_resumed_redis_spends_nothing_for_the_requests_refused_meanwhile() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let url = redis.url();
    let limited = shared_operator_limit(&url, 5);
    let proxy = TestProxy::start_with(&ca, |config| {
        limited(config);
        shared(&url, OnFailure::Deny)(config);
    })
    .await?;
    let client = proxy.client()?;
    let page = origin.url("/hello");
    for i in 0..2 {
        assert_eq!(client.get(&page).send().await?.status(), 200, "request {i}: two of five spent");
    }

    redis.pause(true).await?;
    for i in 0..4 {
        // Sent to Redis, which queues it unread; refused when the 1 s timeout ends.
        let refused = client.get(&page).send().await?;
        assert_eq!(refused.status(), 503, "request {i} while Redis is frozen");
    }
    redis.pause(false).await?;
    // A barrier: Redis runs every command it had queued in the first pass of its event loop
    // after the resume, so an answer on a new connection comes after them.
    assert!(ping(redis.port, None).await, "Redis answers again");

    // Exactly the three left before the freeze: the four queued checks spent none of them.
    // The replica's connection may still be coming back: a 503 spends nothing, and is asked
    // again until the first answer that is not one.
    let mut allowed = 0;
    loop {
        let status =
            eventually_within(READY_LIMIT, "an answer other than 503 after the resume", async || {
                match client.get(&page).send().await?.status().as_u16() {
                    503 => Err("503".into()),
                    other => Ok(other),
                }
            })
            .await?;
        match status {
            200 if allowed < 3 => allowed += 1,
            429 => break,
            other => return Err(format!("unexpected status {other} after {allowed} allowed since the resume").into()),
        }
    }
    assert_eq!(allowed, 3, "the budget after the resume is the budget before the freeze");
    assert_eq!(origin.hits("/hello"), 5);
    Ok(())
}

/// Start-up waits (bounded) for Redis to be ready, and when it is unreachable says
/// so, naming what `on_failure` does meanwhile; the proxy serves anyway, and the shared
/// budget applies as soon as Redis answers.
#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn a_redis_unreachable_at_start_is_logged_and_on_failure_applies_until_it_answers() -> TestResult {
    agentgate::tls::install_default_provider();
    let port = free_port()?;
    let ca = TestCa::new("origin CA")?;
    let origin =
        Origin::https_site(&ca, markdown_site(agents_md("## Rate Limits\n- requests-per-minute: 3\n"))).await?;
    let dir = tempfile::tempdir()?;
    let url = format!("redis://127.0.0.1:{port}");
    let config = child_config(dir.path(), &ca, &url, "on_failure = \"deny\"\ntimeout = \"1s\"\n")?;
    let child = Agentgate::start(dir.path(), &config, "info").await?;
    child.logged(&["limits store unreachable at start", "refusing limited requests", "until it answers"], 1).await?;
    let client = child.client()?;
    let page = origin.url("/page");
    assert_eq!(client.get(&page).send().await?.status(), 503, "on_failure = \"deny\" while Redis is away");

    let redis = RedisServer::start_on(port).await?;
    until_status(&client, &page, 200).await?;
    assert_eq!(client.get(&page).send().await?.status(), 200);
    assert_eq!(client.get(&page).send().await?.status(), 200);
    assert_eq!(client.get(&page).send().await?.status(), 429, "three in Redis, then the limit");
    child.stop().await?;
    drop(redis);
    Ok(())
}

/// Byte budgets through Redis: config edit for a replica on the Redis store at
/// `url` (`on_failure` as given, timeout 1 s) whose one agent, `bot`, has `limits` edited
/// by `edit`.
fn budgeted_replica<E: Fn(&mut agentgate::agents::AgentLimits)>(
    url: &str,
    on_failure: OnFailure,
    edit: E,
) -> impl Fn(&mut Config) + use<E> {
    let url = url.to_owned();
    move |config| {
        shared(&url, on_failure)(config);
        let mut bot = agent("bot", "b-token");
        edit(&mut bot.limits);
        config.agents = vec![bot];
    }
}

/// A 60 KiB upload (with its `Content-Length`) to the origin's `/sink` through `client`.
async fn upload_60_kib(client: &reqwest::Client, origin: &Origin) -> reqwest::Result<reqwest::Response> {
    let body: Vec<u8> = pattern_chunks(60 * 1024).flat_map(|chunk| chunk.to_vec()).collect();
    client.post(origin.url("/sink")).body(body).send().await
}

/// Reads `url` to its end through `client`: the length read, or the error that ended it
/// (before the head or after it).
async fn download(client: &reqwest::Client, url: &str) -> Result<usize, reqwest::Error> {
    let response = client.get(url).send().await?;
    assert_eq!(response.status(), 200, "{url}: the head goes out before a budget is crossed");
    Ok(response.bytes().await?.len())
}

/// A sending budget is counted in Redis, so two replicas spend one budget: a
/// declared 60 KiB upload through one, then another through the other, is refused `429`
/// with `Retry-After` before the origin sees it, as one proxy would; a chunked upload
/// through the other is cut once it crosses what is left.
#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn a_sending_budget_shared_through_redis_refuses_the_second_60_kib_upload_on_the_other_replica() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let replica = budgeted_replica(&redis.url(), OnFailure::Deny, |limits| limits.sent_bytes_per_hour = 100 * 1024);
    let a = TestProxy::start_with(&ca, &replica).await?;
    let b = TestProxy::start_with(&ca, &replica).await?;
    let (through_a, through_b) = (client_as(&a, "bot", "b-token")?, client_as(&b, "bot", "b-token")?);

    let first = upload_60_kib(&through_a, &origin).await?;
    assert_eq!(first.status(), 200);
    assert_eq!(first.text().await?, "received 61440 bytes, intact=true");
    let second = upload_60_kib(&through_b, &origin).await?;
    assert_eq!(second.status(), 429, "60 KiB through a + 60 KiB through b would cross 100 KiB per hour");
    let retry_after: u64 = header(&second, "retry-after").parse()?;
    assert!((1..=3600).contains(&retry_after), "{retry_after}");
    let text = second.text().await?;
    assert!(text.contains("operator.byte_budget") && text.contains("limits.sent_bytes_per_hour = 102400"), "{text}");
    assert_eq!(origin.hits("/sink"), 1, "refused before forwarding: the origin saw only the first");
    let scraped = scrape(&b).await?;
    assert_eq!(sample(&scraped, "agentgate_limits_store_failures_total", &[]), Some(0.0), "Redis answered b");
    // The budget is a key in Redis (docs/scale-out.md), 60 KiB of 100 KiB spent: it expires
    // when the budget is whole again, 0.6 of the hour from the first upload.
    let mut redis_connection = redis::Client::open(redis.url())?.get_multiplexed_async_connection().await?;
    let ttl_ms: i64 = redis::cmd("PTTL")
        .arg("agentgate:bytes:sent:102400/3600:operator|bot")
        .query_async(&mut redis_connection)
        .await?;
    assert!((2_000_000..=2_160_000).contains(&ttl_ms), "{ttl_ms} ms");

    // The refused upload spent nothing (all or none): 40 KiB are left, and a chunked upload
    // through b (no length to refuse it by) is cut, streaming, once it crosses them.
    let chunks = futures_util::stream::iter(pattern_chunks(1024 * 1024).map(Ok::<_, std::io::Error>));
    let sent = through_b.post(origin.url("/sink")).body(reqwest::Body::wrap_stream(chunks)).send().await;
    if let Ok(answer) = sent {
        let status = answer.status();
        let text = answer.text().await.unwrap_or_default();
        assert!(status == 429 && !text.contains("intact=true"), "the budget's answer: {status}: {text}");
    }

    let lines = b.finish().await?;
    let sinks = for_request(&lines, "POST", "/sink");
    assert_eq!(sinks[0]["event.action"], "rate_limited", "{}", sinks[0]);
    assert_eq!(sinks[0]["agentgate.reasons"][0]["code"], "operator.byte_budget", "{}", sinks[0]);
    let cut = sinks.last().ok_or("the chunked upload's record")?;
    assert_eq!(cut["agentgate.body.cut"], "budget", "{cut}");
    let sent = cut["http.request.body.bytes"].as_u64().ok_or("bytes counted")?;
    assert!(sent <= 40 * 1024, "no more than the 40 KiB left of the shared budget: {cut}");
    drop(a);
    Ok(())
}

/// How many times Redis ran `EVALSHA` since it started (`INFO commandstats`): each is one
/// round trip of a limits check.
async fn evalsha_calls(redis: &RedisServer) -> TestResult<u64> {
    let mut connection = redis::Client::open(redis.url())?.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO").arg("commandstats").query_async(&mut connection).await?;
    let Some(line) = info.lines().find(|line| line.starts_with("cmdstat_evalsha:")) else { return Ok(0) };
    let calls = line.split(['=', ',']).nth(1).ok_or_else(|| format!("no calls= in {line:?}"))?;
    Ok(calls.parse()?)
}

/// A request counted by a rate limit and a byte budget asks Redis once: its rates and its
/// declared body's bytes are spent in one run of the check script, all or none, so four
/// uploads through the proxy are four `EVALSHA` in Redis's own count (not eight, one for
/// the rates and one for the bytes). Both are spent, under the keys they always had.
#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn a_request_with_a_rate_limit_and_a_byte_budget_is_one_round_trip_to_redis() -> TestResult {
    const UPLOADS: u64 = 4;
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let replica = budgeted_replica(&redis.url(), OnFailure::Deny, |limits| {
        limits.requests_per_minute = 100;
        limits.sent_bytes_per_hour = 1024 * 1024;
    });
    let proxy = TestProxy::start_with(&ca, &replica).await?;
    let client = client_as(&proxy, "bot", "b-token")?;

    let before = evalsha_calls(&redis).await?;
    for i in 0..UPLOADS {
        assert_eq!(upload_60_kib(&client, &origin).await?.status(), 200, "upload {i} is within both");
    }
    assert_eq!(evalsha_calls(&redis).await? - before, UPLOADS, "one round trip per request");
    assert_eq!(origin.hits("/sink"), 4);

    let mut connection = redis::Client::open(redis.url())?.get_multiplexed_async_connection().await?;
    for key in ["agentgate:rate:100/60000:operator|bot", "agentgate:bytes:sent:1048576/3600:operator|bot"] {
        let ttl_ms: i64 = redis::cmd("PTTL").arg(key).query_async(&mut connection).await?;
        assert!(ttl_ms > 0, "{key} is spent in Redis: PTTL {ttl_ms}");
    }
    let scraped = scrape(&proxy).await?;
    assert_eq!(sample(&scraped, "agentgate_limits_store_failures_total", &[]), Some(0.0), "Redis answered");
    Ok(())
}

/// All or none across a request's rate and its byte budget, through the proxy, with the
/// memory store and with Redis alike: an upload the sending budget refuses spends none of
/// the agent's two requests an hour (a page then passes), and an upload the rate then
/// refuses charges none of the budget.
#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn a_budget_that_refuses_spends_no_rate_and_a_rate_that_refuses_charges_no_budget_in_both_stores() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let limits = |limits: &mut agentgate::agents::AgentLimits| {
        limits.requests_per_hour = 2;
        limits.sent_bytes_per_hour = 100 * 1024;
    };
    let memory = TestProxy::start_with(&ca, |config: &mut Config| {
        let mut bot = agent("bot", "b-token");
        limits(&mut bot.limits);
        config.agents = vec![bot];
    })
    .await?;
    let shared_store = TestProxy::start_with(&ca, budgeted_replica(&redis.url(), OnFailure::Deny, limits)).await?;

    for proxy in [&memory, &shared_store] {
        let client = client_as(proxy, "bot", "b-token")?;
        assert_eq!(upload_60_kib(&client, &origin).await?.status(), 200, "request 1 of 2, 60 of 100 KiB");
        let refused = upload_60_kib(&client, &origin).await?;
        assert_eq!(refused.status(), 429, "60 more KiB would cross the budget");
        assert!(header(&refused, "agentgate-decision").contains("code=operator.byte_budget"));
        let page = client.get(origin.url("/hello")).send().await?;
        assert_eq!(page.status(), 200, "the refused upload spent none of the two requests");
        let body: Vec<u8> = pattern_chunks(30 * 1024).flat_map(|chunk| chunk.to_vec()).collect();
        let over = client.post(origin.url("/sink")).body(body).send().await?;
        assert_eq!(over.status(), 429, "30 KiB fit the budget, but the rate's two requests are spent");
        assert!(header(&over, "agentgate-decision").contains("code=operator.rate_limit"));
    }
    assert_eq!(origin.hits("/sink"), 2, "one upload through each proxy");
    // The upload the rate refused charged no budget: 60 KiB are spent in Redis, not 90.
    let mut connection = redis::Client::open(redis.url())?.get_multiplexed_async_connection().await?;
    let ttl_ms: i64 =
        redis::cmd("PTTL").arg("agentgate:bytes:sent:102400/3600:operator|bot").query_async(&mut connection).await?;
    assert!((2_000_000..=2_160_000).contains(&ttl_ms), "60 KiB of 100 KiB spent: {ttl_ms} ms");
    Ok(())
}

/// A receiving budget is counted in Redis as bodies stream (reserved from Redis a
/// chunk at a time): a download through one replica spends half of it, and a download
/// through the other that crosses what is left is cut mid-stream; the client sees an
/// error, never a short body that looks complete, and the other replica's record says so.
#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn a_receiving_budget_shared_through_redis_cuts_the_download_that_crosses_it_on_the_other_replica() -> TestResult
{
    const KIB: u64 = 1024;
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let replica = budgeted_replica(&redis.url(), OnFailure::Deny, |limits| limits.received_bytes_per_hour = 256 * KIB);
    let a = TestProxy::start_with(&ca, &replica).await?;
    let b = TestProxy::start_with(&ca, &replica).await?;
    let (through_a, through_b) = (client_as(&a, "bot", "b-token")?, client_as(&b, "bot", "b-token")?);

    let half = origin.url(&format!("/bytes/{}", 128 * KIB));
    assert_eq!(download(&through_a, &half).await?, usize::try_from(128 * KIB)?, "within the budget: whole");
    // Alone, b would let 256 KiB through; with a's 128 KiB (and at most one reservation
    // of 64 KiB that a's body left unused) spent in Redis, less than 128 KiB is left.
    let read = download(&through_b, &origin.url(&format!("/bytes/{}", 1024 * KIB))).await;
    assert!(read.is_err(), "the cut body is an error: {read:?}");

    let lines = a.finish().await?;
    let whole = for_request(&lines, "GET", &format!("/bytes/{}", 128 * KIB));
    assert_eq!(whole.last().ok_or("a's record")?["http.response.body.bytes"], 128 * KIB);
    let lines = b.finish().await?;
    let cut = for_request(&lines, "GET", &format!("/bytes/{}", 1024 * KIB));
    let last = cut.last().ok_or("b's record")?;
    assert_eq!(last["agentgate.body.cut"], "budget", "{last}");
    assert_eq!(last["http.response.status_code"], 200, "{last}");
    let passed = last["http.response.body.bytes"].as_u64().ok_or("bytes counted")?;
    assert!(passed > 0, "cut mid-stream, not refused before: {last}");
    assert!(passed <= 128 * KIB, "no more than a left of the shared budget passed through b: {last}");
    Ok(())
}

/// A spent receiving budget refuses through two replicas on Redis as through one proxy
/// (`bytes::a_receiving_budget_of_300000_refuses_rather_than_cuts`, through a and b in
/// turn): the longer response is refused whole and, once less than the floor is left, the
/// next request is refused before it is forwarded, on the other replica.
#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn a_spent_receiving_budget_shared_through_redis_refuses_before_forwarding_on_the_other_replica() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let replica = budgeted_replica(&redis.url(), OnFailure::Deny, |limits| limits.received_bytes_per_hour = 300_000);
    let a = TestProxy::start_with(&ca, &replica).await?;
    let b = TestProxy::start_with(&ca, &replica).await?;
    let (through_a, through_b) = (client_as(&a, "bot", "b-token")?, client_as(&b, "bot", "b-token")?);
    crate::bytes::a_receiving_budget_of_300000_refuses_rather_than_cuts(&through_a, &through_b, &origin).await?;
    let scraped = scrape(&b).await?;
    assert_eq!(sample(&scraped, "agentgate_limits_store_failures_total", &[]), Some(0.0), "Redis answered b");
    drop(a);
    Ok(())
}

/// With Redis killed, byte budgets fall back to each replica's own counters under
/// `on_failure = "local"` (each replica then allows its own budget), and every call Redis
/// did not answer is counted: a declared upload is refused by the replica's own sending
/// budget, the other replica has its own, and a download crossing the receiving budget is
/// still cut mid-stream, spent in process for the rest of the request.
#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn redis_killed_byte_budgets_fall_back_to_each_replicas_own_counters_and_are_counted() -> TestResult {
    const KIB: u64 = 1024;
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let replica = budgeted_replica(&redis.url(), OnFailure::Local, |limits| {
        limits.sent_bytes_per_hour = 100 * KIB;
        limits.received_bytes_per_hour = 64 * KIB;
    });
    let a = TestProxy::start_with(&ca, &replica).await?;
    let b = TestProxy::start_with(&ca, &replica).await?;
    let (through_a, through_b) = (client_as(&a, "bot", "b-token")?, client_as(&b, "bot", "b-token")?);
    assert_eq!(upload_60_kib(&through_a, &origin).await?.status(), 200, "counted in Redis");

    redis.stop().await?;
    assert_eq!(upload_60_kib(&through_a, &origin).await?.status(), 200, "a's own budget is whole");
    let refused = upload_60_kib(&through_a, &origin).await?;
    assert_eq!(refused.status(), 429, "a's own budget of 100 KiB is enforced");
    assert!(header(&refused, "retry-after").parse::<u64>()? > 0);
    assert_eq!(upload_60_kib(&through_b, &origin).await?.status(), 200, "b counts its own budget");
    let read = download(&through_b, &origin.url(&format!("/bytes/{}", 1024 * KIB))).await;
    assert!(read.is_err(), "b's own receiving budget cuts the download: {read:?}");
    assert_eq!(origin.hits("/sink"), 3);

    // Each request's first call to Redis failed and was counted in process; the rest of its
    // bytes were spent there without asking Redis again.
    let counted = |scraped: &prometheus_parse::Scrape| {
        let failures = sample(scraped, "agentgate_limits_store_failures_total", &[]);
        (failures, sample(scraped, "agentgate_limits_store_fallbacks_total", &[]))
    };
    assert_eq!(counted(&scrape(&a).await?), (Some(2.0), Some(2.0)), "a's two uploads after the kill");
    assert_eq!(counted(&scrape(&b).await?), (Some(2.0), Some(2.0)), "b's upload and download");
    let lines = b.finish().await?;
    let cut = for_request(&lines, "GET", &format!("/bytes/{}", 1024 * KIB));
    let last = cut.last().ok_or("b's record")?;
    assert_eq!(last["agentgate.body.cut"], "budget", "{last}");
    let passed = last["http.response.body.bytes"].as_u64().ok_or("bytes counted")?;
    assert!(passed <= 64 * KIB, "no more than b's own budget passed: {last}");
    drop(a);
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn an_agent_cannot_reach_the_limits_store_through_the_proxy() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    // Loopback is allowed for the test's origins; the store's address is refused all the same:
    // an agent that could talk to it could reset its own budgets.
    let proxy = TestProxy::start_with(&ca, shared(&redis.url(), OnFailure::Deny)).await?;
    redis.is_refused_through(&proxy.client()?).await
}
