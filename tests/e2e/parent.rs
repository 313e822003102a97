//! A parent proxy (`[upstream] parent`, docs/operator-guide.md "Behind a parent proxy"): real
//! Squid from Debian's package, started by each test on a free loopback port with its own
//! config (no cache, an access log in a temporary directory, `CONNECT` allowed only to the
//! test origins' ports, everything else denied).
//!
//! How "direct connections are blocked" is proven: agentgate opens every TCP connection
//! through its `Dial` seam, and these tests give it a dialer that connects to Squid's
//! address only (and to a `parent_bypass` origin where a test says so), refusing and
//! recording any other address. So whatever reached an origin went through Squid, and the
//! dialer's record shows agentgate never even tried a direct connection. Squid's access log
//! shows what it was asked: one `CONNECT` per tunnel, naming the vetted address
//! (`127.0.0.1:<port>`, never the name `localhost`). Squid writes a tunnel's line when the
//! tunnel closes, so the log is read after the proxy has shut down, bounded by `eventually`.
//! Squid only ever sees `CONNECT host:port`: a request "never reaches Squid" when no tunnel
//! carried it, which the origin's own count of that path proves.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex, PoisonError};

use agentgate::config::Config;
use agentgate::net::{ConnectConfig, Dial, NetFuture, NetworkConfig, Resolve, SystemResolver};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_tungstenite::client_async;

use crate::support::binary::Agentgate;
use crate::support::log::{self, for_request};
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::raw::{connect_tunnel, exchange, refused_tunnel, tls_client};
use crate::support::tools::{SQUID, need};
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult, header};

/// The helper Squid's Debian package ships for `auth_param basic` with an htpasswd file.
const BASIC_NCSA_AUTH: &str = "/usr/lib/squid/basic_ncsa_auth";

/// A Squid started for one test; killed when dropped.
struct Squid {
    addr: SocketAddr,
    dir: tempfile::TempDir,
    _child: Child,
}

impl Squid {
    /// Squid on a free loopback port allowing `CONNECT` to `ports` only (for the user and
    /// password `auth` when given, checked by `basic_ncsa_auth`), every other request denied.
    async fn start(ports: &[u16], auth: Option<(&str, &str)>) -> TestResult<Squid> {
        let squid = need(SQUID)?;
        let dir = tempfile::tempdir()?;
        // Squid drops to its `proxy` user to write its log.
        set_mode(dir.path(), 0o777)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let path = |name: &str| dir.path().join(name).display().to_string();
        let ports: Vec<String> = ports.iter().map(u16::to_string).collect();
        let mut allow = "http_access allow CONNECT origin_ports".to_owned();
        let mut auth_lines = String::new();
        if let Some((user, password)) = auth {
            let hashed = std::process::Command::new("openssl").args(["passwd", "-apr1", password]).output()?;
            let hashed = String::from_utf8(hashed.stdout)?;
            std::fs::write(path("passwd"), format!("{user}:{}\n", hashed.trim()))?;
            set_mode(&dir.path().join("passwd"), 0o644)?;
            auth_lines = format!(
                "auth_param basic program {BASIC_NCSA_AUTH} {}\nacl authed proxy_auth REQUIRED\n",
                path("passwd")
            );
            allow.push_str(" authed");
        }
        let config = format!(
            "http_port 127.0.0.1:{port}\nvisible_hostname agentgate-test\npid_filename {}\n\
             access_log stdio:{}\ncache_log {}\ncache_store_log none\ncache deny all\ncoredump_dir {}\n\
             shutdown_lifetime 0 seconds\ncache_effective_user proxy\n{auth_lines}\
             acl CONNECT method CONNECT\nacl origin_ports port {}\n{allow}\nhttp_access deny all\n",
            path("squid.pid"),
            path("access.log"),
            path("cache.log"),
            dir.path().display(),
            ports.join(" "),
        );
        std::fs::write(path("squid.conf"), config)?;
        let child = Command::new(squid)
            .args(["-N", "-n", &format!("agparent{port}"), "-f", &path("squid.conf")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        // Ready when its cache log says so (a probe connection would be a line in its access log).
        let cache_log = dir.path().join("cache.log");
        eventually("squid to listen", async || {
            let text = std::fs::read_to_string(&cache_log).unwrap_or_default();
            if text.contains("Accepting HTTP Socket connections") { Ok(()) } else { Err(text.into()) }
        })
        .await?;
        Ok(Squid { addr, dir, _child: child })
    }

    /// `http://127.0.0.1:<port>`, or with `user@` before the address.
    fn url(&self, user: Option<&str>) -> String {
        match user {
            Some(user) => format!("http://{user}@{}", self.addr),
            None => format!("http://{}", self.addr),
        }
    }

    /// The access log so far.
    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }

    /// Waits (bounded) until the access log holds a line containing each of `needles`;
    /// returns the whole log.
    async fn logged(&self, needles: &[&str]) -> TestResult<String> {
        eventually("squid's access log", async || {
            let log = self.log();
            match needles.iter().find(|needle| !log.lines().any(|line| line.contains(*needle))) {
                Some(missing) => Err(format!("no line with {missing:?} in:\n{log}").into()),
                None => Ok(log),
            }
        })
        .await
    }
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
}

/// Connects only to `allowed` addresses; records every address it refused.
struct OnlyTo {
    allowed: Vec<SocketAddr>,
    refused: Mutex<Vec<SocketAddr>>,
}

impl OnlyTo {
    fn new(allowed: &[SocketAddr]) -> Arc<OnlyTo> {
        Arc::new(OnlyTo { allowed: allowed.to_vec(), refused: Mutex::default() })
    }

    fn refused(&self) -> Vec<SocketAddr> {
        self.refused.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Dial for OnlyTo {
    fn dial(&self, addr: SocketAddr) -> NetFuture<'_, TcpStream> {
        let allowed = self.allowed.contains(&addr);
        if !allowed {
            self.refused.lock().unwrap_or_else(PoisonError::into_inner).push(addr);
        }
        Box::pin(async move {
            if !allowed {
                return Err(io::Error::new(io::ErrorKind::ConnectionRefused, format!("test: {addr} is not reachable")));
            }
            TcpStream::connect(addr).await
        })
    }
}

/// `localhost` is 127.0.0.1 only (the system may add `::1`), so the vetted address asked of
/// Squid is known.
struct Localhost4;

impl Resolve for Localhost4 {
    fn resolve<'a>(&'a self, name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
        if name == "localhost" {
            return Box::pin(async { Ok(vec![IpAddr::from([127, 0, 0, 1])]) });
        }
        SystemResolver.resolve(name)
    }
}

/// A site whose robots.txt disallows `/private`, serving `/hello`.
fn site() -> Site {
    Site::new().file("/robots.txt", "User-agent: *\nDisallow: /private\n").file("/hello", "hello through squid")
}

#[tokio::test]
#[ignore = "needs squid: run by scripts/test.sh"]
async fn https_and_plain_http_go_through_squid_as_connects_to_the_vetted_address() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let https =
        Origin::https_site(&ca, site().file("/robots-for-http.txt", "User-agent: *\nDisallow: /private\n")).await?;
    // The plain-HTTP origin's robots.txt redirects to the HTTPS one: the hop, another
    // origin, is fetched through Squid too.
    let moved = format!("https://localhost:{}/robots-for-http.txt", https.addr.port());
    let http = Origin::http_site(
        Site::new().serve("/robots.txt", 302, &[("location", &moved)], "").file("/hello", "hello through squid"),
    )
    .await?;
    let pass = Origin::https_site(&ca, Site::new().file("/hello", "passthrough")).await?;
    let squid = Squid::start(&[https.addr.port(), http.addr.port(), pass.addr.port()], None).await?;
    let dialer = OnlyTo::new(&[squid.addr]);
    let parent = squid.url(None);
    let proxy = TestProxy::start_with_network(&ca, Arc::new(Localhost4), dialer.clone(), |config| {
        config.upstream.parent = Some(parent);
        config.mitm.set_passthrough_hosts(vec!["127.0.0.1".into()]);
    })
    .await?;
    let client = proxy.client()?;

    // MITM'd HTTPS: agentgate's TLS to the origin inside Squid's tunnel.
    let response = client.get(https.url("/hello")).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await?, "hello through squid");
    // Plain HTTP, named by its name.
    let response = client.get(format!("http://localhost:{}/hello", http.addr.port())).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await?, "hello through squid");
    // A passthrough tunnel: the origin's own certificate, through Squid.
    let response = proxy.passthrough_client(&ca)?.get(pass.ip_url("/hello")).send().await?;
    assert_eq!(response.text().await?, "passthrough");
    // robots.txt, fetched through Squid, refuses /private: it never leaves agentgate.
    for url in [https.url("/private"), format!("http://localhost:{}/private", http.addr.port())] {
        let response = client.get(&url).send().await?;
        assert_eq!(response.status(), 403, "{url}");
        assert!(header(&response, "agentgate-decision").contains("code=robots.disallow"), "{url}");
    }
    assert_eq!(https.hits("/robots-for-http.txt"), 1, "the redirect hop was fetched (through Squid)");
    for origin in [&https, &http] {
        assert_eq!(
            origin.hits("/robots.txt"),
            1,
            "policy files were fetched (through Squid: nothing else is reachable)"
        );
        assert_eq!(origin.hits("/hello"), 1);
        assert_eq!(origin.hits("/private"), 0, "no tunnel carried the refused request");
    }
    assert_eq!(dialer.refused(), Vec::<SocketAddr>::new(), "agentgate never tried to reach an origin directly");
    // Pooled: one tunnel carried the HTTPS origin's policy fetches, the redirect hop and
    // the agent's request. Counted: each tunnel kept open is one of agentgate's sockets to
    // origins, as a direct connection is.
    assert_eq!(https.connections(), 1, "one pooled tunnel to the HTTPS origin");
    eventually("tunnels counted as connections to origins", async || {
        let counted = crate::upstream::metric(&proxy, "agentgate_upstream_connections").await?;
        let open = https.open() + http.open() + pass.open();
        if counted as usize == open && open > 0 {
            Ok(())
        } else {
            Err(format!("{counted} counted, {open} open").into())
        }
    })
    .await?;
    let records = proxy.finish().await?;
    assert_eq!(for_request(&records, "GET", "/private").len(), 2);

    let tunnels =
        [https.addr.port(), http.addr.port(), pass.addr.port()].map(|port| format!("CONNECT 127.0.0.1:{port} "));
    let log = squid.logged(&tunnels.each_ref().map(String::as_str)).await?;
    // Besides the tunnels, Squid refused the `CONNECT 127.0.0.1:443` of the plain-HTTP
    // origin's AGENTS.md, which is asked over HTTPS on port 443 (SEMANTICS C2).
    for line in log.lines() {
        let tunnel = line.contains("TCP_TUNNEL/200");
        let https_agents_md = line.contains("TCP_DENIED/403") && line.contains(" CONNECT 127.0.0.1:443 ");
        assert!(tunnel || https_agents_md, "only CONNECTs to the vetted address: {line}");
        assert!(line.contains(" CONNECT 127.0.0.1:"), "only CONNECTs to the vetted address: {line}");
    }
    assert!(!log.contains("localhost"), "the name is never asked of Squid by default:\n{log}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs squid: run by scripts/test.sh"]
async fn parent_connect_name_asks_squid_for_the_name_after_the_guard_vetted_it() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let http = Origin::http_site(site()).await?;
    let squid = Squid::start(&[http.addr.port()], None).await?;
    let dialer = OnlyTo::new(&[squid.addr]);
    let parent = squid.url(None);
    let proxy = TestProxy::start_with_network(&ca, Arc::new(Localhost4), dialer.clone(), |config| {
        config.upstream.parent = Some(parent);
        config.upstream.parent_connect = agentgate::proxy::ParentConnect::Name;
    })
    .await?;
    let response = proxy.client()?.get(format!("http://localhost:{}/hello", http.addr.port())).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(dialer.refused(), Vec::<SocketAddr>::new());
    proxy.finish().await?;
    squid.logged(&[&format!("CONNECT localhost:{} ", http.addr.port())]).await?;
    Ok(())
}

#[tokio::test]
#[ignore = "needs squid: run by scripts/test.sh"]
async fn a_host_in_parent_bypass_is_reached_directly_and_never_asked_of_squid() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let routed = Origin::http_site(site()).await?;
    let direct = Origin::http_site(site()).await?;
    let squid = Squid::start(&[routed.addr.port(), direct.addr.port()], None).await?;
    // The bypassed origin is reachable directly; the other only through Squid.
    let dialer = OnlyTo::new(&[squid.addr, direct.addr]);
    let parent = squid.url(None);
    let proxy = TestProxy::start_with_network(&ca, Arc::new(Localhost4), dialer.clone(), |config| {
        config.upstream.parent = Some(parent);
        config.upstream.parent_bypass = vec!["127.0.0.1".into()];
    })
    .await?;
    let client = proxy.client()?;
    let response = client.get(direct.url("/hello")).send().await?;
    assert_eq!(response.status(), 200, "127.0.0.1 is in parent_bypass");
    let response = client.get(format!("http://localhost:{}/hello", routed.addr.port())).send().await?;
    assert_eq!(response.status(), 200);
    // The bypassed host's AGENTS.md is asked over HTTPS on port 443 (SEMANTICS C2), where
    // nothing listens: dialled directly, which the test's dialer refuses. Nothing else was.
    let direct_443 = SocketAddr::from(([127, 0, 0, 1], 443));
    assert!(dialer.refused().iter().all(|addr| *addr == direct_443), "{:?}", dialer.refused());
    assert_eq!((direct.hits("/robots.txt"), routed.hits("/robots.txt")), (1, 1));
    proxy.finish().await?;
    let log = squid.logged(&[&format!("CONNECT 127.0.0.1:{} ", routed.addr.port())]).await?;
    assert!(!log.contains(&format!(":{} ", direct.addr.port())), "the bypassed host never reached Squid:\n{log}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs squid: run by scripts/test.sh"]
async fn a_destination_the_guard_refuses_is_never_asked_of_the_parent() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(site()).await?;
    let squid = Squid::start(&[origin.addr.port(), 443], None).await?;
    let dialer = OnlyTo::new(&[squid.addr]);
    let parent = squid.url(None);
    let proxy = TestProxy::start_with_network(&ca, Arc::new(Localhost4), dialer.clone(), |config: &mut Config| {
        // As shipped: loopback and private ranges refused.
        config.network = NetworkConfig::default();
        config.connect = ConnectConfig::default();
        config.upstream.parent = Some(parent);
    })
    .await?;
    let port = origin.addr.port();
    // An address, and a name resolving to loopback, in absolute form; a private address
    // as a CONNECT.
    for url in [format!("http://127.0.0.1:{port}/hello"), format!("http://localhost:{port}/hello")] {
        let request = format!("GET {url} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        let answer = exchange(proxy.addr, request.as_bytes()).await?;
        assert!(answer.starts_with("HTTP/1.1 403"), "{url}: {answer}");
        assert!(answer.contains("code=network.private_address"), "{url}: {answer}");
    }
    let answer = refused_tunnel(proxy.addr, "10.1.2.3:443").await?;
    assert!(answer.contains("code=network.private_address"), "{answer}");
    assert_eq!(dialer.refused(), Vec::<SocketAddr>::new());
    assert_eq!(origin.connections(), 0);
    drop(proxy);
    // Squid's log is live: the test's own CONNECT to a port it refuses is its only line.
    let probe =
        exchange(squid.addr, b"CONNECT 127.0.0.1:9 HTTP/1.1\r\nHost: 127.0.0.1:9\r\nConnection: close\r\n\r\n").await?;
    assert!(probe.starts_with("HTTP/1.1 403"), "{probe}");
    let log = squid.logged(&["CONNECT 127.0.0.1:9 "]).await?;
    assert_eq!(log.lines().count(), 1, "agentgate asked Squid for nothing:\n{log}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs squid: run by scripts/test.sh"]
async fn a_websocket_through_mitm_goes_through_squid() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let squid = Squid::start(&[origin.addr.port()], None).await?;
    let dialer = OnlyTo::new(&[squid.addr]);
    let parent = squid.url(None);
    let proxy = TestProxy::start_with_network(&ca, Arc::new(Localhost4), dialer.clone(), |config| {
        config.upstream.parent = Some(parent);
    })
    .await?;
    let (tunnel, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let tls = tls_client(tunnel, "localhost", &proxy.ca_pem, &[b"http/1.1"]).await?;
    let (mut ws, response) = client_async(format!("wss://{}/ws", origin.authority()), tls).await?;
    assert_eq!(response.status(), 101);
    crate::websocket::assert_echo(&mut ws).await?;
    assert_eq!(dialer.refused(), Vec::<SocketAddr>::new(), "the upgrade's connection went through Squid");
    drop(proxy);
    let tunnel = format!(" CONNECT 127.0.0.1:{} ", origin.addr.port());
    squid.logged(&["TCP_TUNNEL/200", tunnel.as_str()]).await?;
    Ok(())
}

/// A config file for the real binary: loopback origins allowed, `origin_ca` trusted, the
/// parent `parent` (password in `$AGENTGATE_TEST_PARENT_PASSWORD`).
fn binary_config(dir: &Path, origin_ca: &TestCa, parent: &str) -> TestResult<PathBuf> {
    let path = dir.join("agentgate.toml");
    std::fs::write(
        &path,
        format!(
            "listen = \"127.0.0.1:0\"\n[ca]\ndir = {:?}\n[audit]\npath = {:?}\n[admin]\nlisten = \"off\"\n\
             [network]\nallow_cidrs = [\"127.0.0.0/8\"]\n[connect]\nallowed_ports = [\"1-65535\"]\n\
             [upstream]\nextra_ca_files = [{:?}]\nparent = {parent:?}\nparent_password_env = \"AGENTGATE_TEST_PARENT_PASSWORD\"\n",
            dir.join("ca"),
            dir.join("decisions.jsonl"),
            origin_ca.pem_path,
        ),
    )?;
    Ok(path)
}

#[tokio::test]
#[ignore = "needs squid: run by scripts/test.sh"]
async fn a_parent_answering_407_is_a_recorded_502_naming_it_and_the_password_is_never_shown() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(site()).await?;
    let squid = Squid::start(&[origin.addr.port()], Some(("agent", "right-Pa55"))).await?;
    for (password, expected) in [("right-Pa55", 200), ("wrong-Pa55-x7", 502)] {
        let dir = tempfile::tempdir()?;
        let config = binary_config(dir.path(), &ca, &squid.url(Some("agent")))?;
        let env = [("AGENTGATE_TEST_PARENT_PASSWORD", password)];
        let agentgate = Agentgate::start_with_env(dir.path(), &config, "agentgate=debug", &env).await?;
        let response = agentgate.client()?.get(origin.url("/hello")).send().await?;
        assert_eq!(response.status(), expected, "password {password}");
        let decision = header(&response, "agentgate-decision");
        let body = response.text().await?;
        if expected == 200 {
            assert_eq!(body, "hello through squid");
        } else {
            assert!(decision.starts_with("error; source=operator; code=upstream.parent_refused;"), "{decision}");
            let parent = format!("the parent proxy {}", squid.addr);
            for part in [parent.as_str(), "407", "parent_password_env"] {
                assert!(body.contains(part), "{part:?} missing from: {body}");
            }
        }
        let stderr = agentgate.stderr();
        agentgate.stop().await?;
        let records = log::read(&dir.path().join("decisions.jsonl"))?;
        let text = std::fs::read_to_string(dir.path().join("decisions.jsonl"))?;
        if expected == 502 {
            let record = for_request(&records, "GET", "/hello");
            let reasons = record.first().map(|r| r["agentgate.reasons"].to_string()).unwrap_or_default();
            assert!(reasons.contains("upstream.parent_refused"), "{records:?}");
        }
        let token = base64_of(&format!("agent:{password}"));
        for shown in [&body, &stderr, &text] {
            assert!(!shown.contains(password) && !shown.contains(&token), "the password leaked: {shown}");
        }
    }
    let tunnel = format!(" CONNECT 127.0.0.1:{} ", origin.addr.port());
    let log = squid.logged(&["TCP_DENIED/407", "TCP_TUNNEL/200"]).await?;
    for line in log.lines().filter(|line| line.contains("TCP_DENIED/407") || line.contains("TCP_TUNNEL/200")) {
        assert!(line.contains(&tunnel), "{line}");
    }
    Ok(())
}

#[tokio::test]
async fn a_parent_that_is_down_is_a_recorded_502_naming_it() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(site()).await?;
    // A port nothing listens on.
    let down = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let dialer = OnlyTo::new(&[down]);
    let proxy = TestProxy::start_with_network(&ca, Arc::new(Localhost4), dialer.clone(), |config| {
        config.upstream.parent = Some(format!("http://{down}"));
        config.bypass_hosts = vec!["127.0.0.1".into()];
    })
    .await?;
    let client = proxy.client()?;
    // Its policy fetch fails (a name), and its forward (a host whose policies are skipped).
    for url in [format!("http://localhost:{}/hello", origin.addr.port()), origin.url("/hello")] {
        let response = client.get(&url).send().await?;
        assert_eq!(response.status(), 502, "{url}");
        let body = response.text().await?;
        assert!(
            body.contains(&format!("the parent proxy {down} ([upstream] parent) cannot be reached")),
            "{url}: {body}"
        );
    }
    assert_eq!(dialer.refused(), Vec::<SocketAddr>::new());
    assert_eq!(origin.connections(), 0);
    let records = proxy.finish().await?;
    let hello = for_request(&records, "GET", "/hello");
    assert_eq!(hello.len(), 2, "{records:?}");
    for record in hello {
        assert_eq!(
            (&record["event.action"], &record["http.response.status_code"]),
            (&"error".into(), &502.into()),
            "{record}"
        );
        assert!(record["agentgate.reasons"].to_string().contains("upstream.parent_unreachable"), "{record}");
        assert_eq!(record["error.type"], "proxy", "{record}");
        assert!(record["error.message"].to_string().contains(&down.to_string()), "{record}");
    }
    Ok(())
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}
