//! Transparent mode in real network namespaces made by the test: a `client`
//! namespace routed through a veth pair to a `gate` namespace, where the real `agentgate`
//! binary runs and an nftables `redirect` sends the client's tcp 80/443 to its transparent
//! listener. The origins (this process's hyper origin, HTTPS from a test CA, and plain HTTP)
//! listen in `gate` on private addresses (`10.200.2.0/24`, allowed in `[network]`); names
//! come from `/etc/netns/<ns>/hosts`. Clients ignore proxy variables: curl `--noproxy '*'`
//! and python3's urllib with an empty `ProxyHandler`. Nothing leaves the namespaces.
//!
//! Needs root, `ip` and `nft`: a plain `cargo test` lists these tests as ignored with that
//! reason; `scripts/test.sh` installs the tools and runs them as root, where anything
//! missing fails them (`support::tools`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;
use tokio::process::Command;

use crate::support::TestResult;
use crate::support::binary::Agentgate;
use crate::support::curl::{CurlOutput, curl_in_netns};
use crate::support::log::{self, wait_until};
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::tools::{self, IP, NFT};

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";
/// The intercepted site, its HTTP twin, and the passthrough site (`[mitm] passthrough_hosts`).
const ORIGIN_IP: &str = "10.200.2.2";
const PASS_IP: &str = "10.200.2.3";
/// The intercepted site over IPv6 (`ip6` nat, `IP6T_SO_ORIGINAL_DST`).
const ORIGIN6_IP: &str = "fd00:200:2::2";
/// Names in both namespaces' hosts files; `other.test` is a site nothing listens for.
const HOSTS: &str = "10.200.2.2 origin.test\n10.200.2.3 pass.test\n10.200.2.9 other.test\nfd00:200:2::2 origin6.test\n";

static SANDBOXES: AtomicUsize = AtomicUsize::new(0);

/// The two namespaces of one test, deleted (with their hosts files) when dropped, even when
/// the test fails half-way through setting them up.
struct Sandbox {
    client: String,
    gate: String,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for netns in [&self.client, &self.gate] {
            let _ = std::process::Command::new("ip").args(["netns", "delete", netns]).output();
            let _ = std::fs::remove_dir_all(Path::new("/etc/netns").join(netns));
        }
    }
}

/// Runs `command` to completion; an error names it and its stderr.
fn run(command: &[&str]) -> TestResult {
    let output = std::process::Command::new(command[0]).args(&command[1..]).output()?;
    if !output.status.success() {
        return Err(format!("{command:?} failed: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    Ok(())
}

impl Sandbox {
    /// Both namespaces, the veth pair between them, the origin addresses on `gate`'s
    /// loopback, and the hosts files; an error naming what is missing where namespaces
    /// cannot be made (not Linux, not root, no `ip` or `nft`).
    fn create() -> TestResult<Sandbox> {
        tools::need_root()?;
        tools::need(IP)?;
        tools::need(NFT)?;
        let n = SANDBOXES.fetch_add(1, Ordering::SeqCst);
        let pid = std::process::id();
        let sandbox = Sandbox { client: format!("agt-c-{pid}-{n}"), gate: format!("agt-g-{pid}-{n}") };
        let (c, g) = (sandbox.client.as_str(), sandbox.gate.as_str());
        for netns in [c, g] {
            let dir = Path::new("/etc/netns").join(netns);
            std::fs::create_dir_all(&dir)?;
            std::fs::write(dir.join("hosts"), HOSTS)?;
            run(&["ip", "netns", "add", netns])?;
            run(&["ip", "-n", netns, "link", "set", "lo", "up"])?;
        }
        run(&["ip", "link", "add", "vc0", "netns", c, "type", "veth", "peer", "name", "vg0", "netns", g])?;
        run(&["ip", "-n", c, "addr", "add", "10.200.1.2/24", "dev", "vc0"])?;
        run(&["ip", "-n", c, "link", "set", "vc0", "up"])?;
        run(&["ip", "-n", c, "route", "add", "default", "via", "10.200.1.1"])?;
        run(&["ip", "-n", g, "addr", "add", "10.200.1.1/24", "dev", "vg0"])?;
        run(&["ip", "-n", g, "link", "set", "vg0", "up"])?;
        for ip in [ORIGIN_IP, PASS_IP] {
            run(&["ip", "-n", g, "addr", "add", &format!("{ip}/32"), "dev", "lo"])?;
        }
        // IPv6 beside it; `nodad`: usable at once, no duplicate address detection to wait for.
        run(&["ip", "-n", c, "addr", "add", "fd00:200:1::2/64", "dev", "vc0", "nodad"])?;
        run(&["ip", "-n", c, "-6", "route", "add", "default", "via", "fd00:200:1::1"])?;
        run(&["ip", "-n", g, "addr", "add", "fd00:200:1::1/64", "dev", "vg0", "nodad"])?;
        run(&["ip", "-n", g, "addr", "add", &format!("{ORIGIN6_IP}/128"), "dev", "lo", "nodad"])?;
        Ok(sandbox)
    }

    /// The nftables rules under test: tcp 80 and 443 arriving from the client's veth go to
    /// agentgate's transparent ports, `v4` and `v6` (agentgate's own connections, made in
    /// `gate`, never pass PREROUTING, so they need no exemption).
    fn redirect_to(&self, v4: u16, v6: u16) -> TestResult {
        let table = |family: &str, port: u16| {
            format!(
                "table {family} agentgate_test {{\n chain prerouting {{\n  type nat hook prerouting priority dstnat; policy accept;\n  iifname \"vg0\" tcp dport {{ 80, 443 }} redirect to :{port}\n }}\n}}\n"
            )
        };
        let rules = table("ip", v4) + &table("ip6", v6);
        let path = std::env::temp_dir().join(format!("{}.nft", self.gate));
        std::fs::write(&path, rules)?;
        let result = run(&["ip", "netns", "exec", &self.gate, "nft", "-f", &path.display().to_string()]);
        let _ = std::fs::remove_file(&path);
        result
    }

    /// A listener on `addr` inside `gate`: a socket stays in the namespace it was made in,
    /// so a thread enters `gate` just to make it, and the origin serves it from here.
    fn bind_in_gate(&self, addr: SocketAddr) -> TestResult<std::net::TcpListener> {
        let netns = format!("/var/run/netns/{}", self.gate);
        let bound = std::thread::spawn(move || -> Result<std::net::TcpListener, String> {
            let file = std::fs::File::open(&netns).map_err(|e| format!("{netns}: {e}"))?;
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| format!("setns: {e}"))?;
            std::net::TcpListener::bind(addr).map_err(|e| format!("bind {addr}: {e}"))
        })
        .join()
        .map_err(|_| "the namespace thread panicked")??;
        Ok(bound)
    }

    /// `program args` run in the client namespace.
    async fn in_client(&self, program: &str, args: &[&str]) -> TestResult<std::process::Output> {
        Ok(Command::new("ip").args(["netns", "exec", &self.client, program]).args(args).output().await?)
    }
}

/// A sandbox with the origins and agentgate running and the redirect in place.
struct Running {
    sandbox: Sandbox,
    gate: Agentgate,
    /// The intercepted HTTPS origin and its plain HTTP twin (robots.txt disallows `/private`).
    https: Origin,
    http: Origin,
    /// The passthrough origin.
    pass: Origin,
    /// The intercepted HTTPS origin on IPv6.
    https6: Origin,
    origin_ca: TestCa,
    /// agentgate's CA, as the client trusts it.
    ca_path: PathBuf,
    log_path: PathBuf,
    transparent_port: u16,
    _dir: tempfile::TempDir,
}

async fn start() -> TestResult<Running> {
    start_with("").await
}

/// [`start`], with `extra` TOML (tables) at the end of the config.
async fn start_with(extra: &str) -> TestResult<Running> {
    let sandbox = Sandbox::create()?;
    let origin_ca = TestCa::new("transparent origin CA")?;
    let site = || Site::new().file("/robots.txt", ROBOTS);
    let at = |ip: &str, port: u16| -> TestResult<SocketAddr> { Ok(format!("{ip}:{port}").parse()?) };
    let https_config = origin_ca.server_config_for(&["origin.test", "other.test"])?;
    let https = Origin::on_listener(sandbox.bind_in_gate(at(ORIGIN_IP, 443)?)?, Some(https_config), site())?;
    let http = Origin::on_listener(sandbox.bind_in_gate(at(ORIGIN_IP, 80)?)?, None, site())?;
    let pass_config = origin_ca.server_config_for(&["pass.test"])?;
    let pass = Origin::on_listener(sandbox.bind_in_gate(at(PASS_IP, 443)?)?, Some(pass_config), site())?;
    let https6_config = origin_ca.server_config_for(&["origin6.test"])?;
    let https6_addr = format!("[{ORIGIN6_IP}]:443").parse()?;
    let https6 = Origin::on_listener(sandbox.bind_in_gate(https6_addr)?, Some(https6_config), site())?;

    let dir = tempfile::tempdir()?;
    let log_path = dir.path().join("decisions.jsonl");
    let config = format!(
        r#"listen = "10.200.1.1:0"
[transparent]
listen = ["0.0.0.0:0", "[::]:0"]
[ca]
dir = "{ca}"
[upstream]
extra_ca_files = ["{origin_ca}"]
[network]
allow_cidrs = ["10.200.2.0/24", "fd00:200:2::/64"]
[mitm]
passthrough_hosts = ["pass.test"]
[audit]
path = "{log}"
[admin]
listen = "off"
{extra}"#,
        ca = dir.path().join("ca").display(),
        origin_ca = origin_ca.pem_path.display(),
        log = log_path.display(),
    );
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, config)?;
    let gate = Agentgate::start_in_netns(&sandbox.gate, dir.path(), &config_path, "agentgate=info").await?;
    let bound = gate.logged(&["transparent listener bound"], 2).await?;
    let listeners: Vec<SocketAddr> = bound
        .lines()
        .filter(|line| line.contains("transparent listener bound"))
        .filter_map(|line| line.split_whitespace().find_map(|field| field.strip_prefix("local_addr=")))
        .filter_map(|addr| addr.parse().ok())
        .collect();
    let port = |v4: bool| listeners.iter().find(|addr| addr.is_ipv4() == v4).map(SocketAddr::port);
    let (Some(transparent_port), Some(transparent_port6)) = (port(true), port(false)) else {
        return Err(format!("no IPv4 and IPv6 transparent listeners in:\n{bound}").into());
    };
    sandbox.redirect_to(transparent_port, transparent_port6)?;
    let ca_path = dir.path().join("ca/agentgate-ca.pem");
    Ok(Running { sandbox, gate, https, http, pass, https6, origin_ca, ca_path, log_path, transparent_port, _dir: dir })
}

/// python3's urllib with no proxy at all (an empty `ProxyHandler`), trusting `ca`: the
/// status and the `agentgate-decision` header.
const PYTHON_CLIENT: &str = r#"
import ssl, sys, urllib.error, urllib.request
context = ssl.create_default_context(cafile=sys.argv[2])
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context))
try:
    response = opener.open(sys.argv[1], timeout=10)
except urllib.error.HTTPError as error:
    response = error
print(response.getcode(), response.headers.get("agentgate-decision") or "-")
"#;

async fn python(running: &Running, url: &str) -> TestResult<(u16, String)> {
    let ca = running.ca_path.display().to_string();
    let output = running.sandbox.in_client("python3", &["-c", PYTHON_CLIENT, url, &ca]).await?;
    let text = String::from_utf8(output.stdout)?;
    let (status, decision) = text
        .trim()
        .split_once(' ')
        .ok_or_else(|| format!("python3 {url}: {text:?} {}", String::from_utf8_lossy(&output.stderr)))?;
    Ok((status.parse()?, decision.to_owned()))
}

/// `curl --noproxy '*'` in the client namespace, trusting `ca`.
async fn fetch(client: &str, ca: &str, url: &str) -> TestResult<CurlOutput> {
    curl_in_netns(client, &["--noproxy", "*", "--cacert", ca, url]).await
}

/// The reasons of a record as `(code, line, rule)`, blocking ones first.
fn reasons(record: &Value) -> Vec<(String, Value, String)> {
    let reasons = record["agentgate.reasons"].as_array().cloned().unwrap_or_default();
    reasons
        .iter()
        .map(|r| {
            (
                r["code"].as_str().unwrap_or("").to_owned(),
                r["line"].clone(),
                r["rule"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect()
}

fn only<'a>(records: &'a [Value], method: &str, url: &str) -> TestResult<&'a Value> {
    match log::for_request(records, method, url).as_slice() {
        [one] => Ok(one),
        found => Err(format!("{} records for {method} {url}: {records:#?}", found.len()).into()),
    }
}

#[tokio::test]
#[ignore = "needs root, ip and nft: run by scripts/test.sh"]
async fn clients_that_ignore_proxy_variables_are_gated_over_https_and_http() -> TestResult {
    let running = start().await?;
    let (c, ca) = (running.sandbox.client.as_str(), running.ca_path.display().to_string());
    let curl = |url: &'static str| fetch(c, &ca, url);
    let allowed = curl("https://origin.test/page").await?;
    assert_eq!(allowed.status, 200, "{}", allowed.headers);
    assert!(String::from_utf8_lossy(&allowed.body).starts_with("page GET /page"));
    let blocked = curl("https://origin.test/private/a").await?;
    assert_eq!(blocked.status, 403);
    assert!(blocked.headers.contains("agentgate-decision: deny; source=robots.txt; line=2"), "{}", blocked.headers);
    assert!(String::from_utf8_lossy(&blocked.body).contains("Disallow: /private"));
    assert_eq!(curl("http://origin.test/page").await?.status, 200);
    let blocked_http = curl("http://origin.test/private/b").await?;
    assert_eq!(blocked_http.status, 403);
    assert!(blocked_http.headers.contains("source=robots.txt; line=2"), "{}", blocked_http.headers);

    assert_eq!(python(&running, "https://origin.test/page").await?.0, 200);
    let (status, decision) = python(&running, "https://origin.test/private/c").await?;
    assert_eq!((status, decision.starts_with("deny; source=robots.txt; line=2")), (403, true), "{decision}");
    assert_eq!(python(&running, "http://origin.test/page").await?.0, 200);
    assert_eq!(python(&running, "http://origin.test/private/d").await?.0, 403);
    assert_eq!(running.https.hits("/private/a") + running.http.hits("/private/b"), 0, "nothing blocked arrived");
    assert_eq!(running.https.hits("/page"), 2);
    assert_eq!(running.http.hits("/page"), 2);

    // The same request through the proxy port, for the comparison.
    let proxy = format!("http://{}", running.gate.addr());
    let proxied = curl_in_netns(c, &["-x", &proxy, "--cacert", &ca, "https://origin.test/private/e"]).await?;
    assert_eq!(proxied.status, 403);

    let records = log::wait_for(&running.log_path, 9).await?;
    let through_proxy = only(&records, "GET", "https://origin.test:443/private/e")?;
    assert_eq!(through_proxy["agentgate.entry"], "mitm");
    for url in
        ["https://origin.test:443/private/a", "http://origin.test:80/private/b", "https://origin.test:443/private/c"]
    {
        let record = only(&records, "GET", url)?;
        assert_eq!(record["agentgate.entry"], "transparent", "{record}");
        assert_eq!(record["event.action"], "deny");
        assert_eq!(record["http.response.status_code"], 403);
        assert_eq!(record["client.address"], "10.200.1.2", "the agent is the client address");
        assert_eq!(reasons(record), reasons(through_proxy), "the same reasons as the proxied path: {record}");
    }
    for url in ["https://origin.test:443/page", "http://origin.test:80/page"] {
        let allowed = log::for_request(&records, "GET", url);
        assert_eq!(allowed.len(), 2, "curl and python3: {records:#?}");
        assert!(allowed.iter().all(|r| r["agentgate.entry"] == "transparent" && r["event.action"] == "allow"));
    }
    running.gate.stop().await
}

#[tokio::test]
#[ignore = "needs root, ip and nft: run by scripts/test.sh"]
async fn a_passthrough_host_is_spliced_to_the_original_destination_with_the_origins_certificate() -> TestResult {
    let running = start().await?;
    let c = running.sandbox.client.as_str();
    let origin_ca = running.origin_ca.pem_path.display().to_string();
    // Verified against the origin's own CA only: agentgate did not terminate TLS.
    let spliced = curl_in_netns(c, &["--noproxy", "*", "--cacert", &origin_ca, "https://pass.test/page"]).await?;
    assert_eq!(spliced.status, 200);
    assert!(String::from_utf8_lossy(&spliced.body).starts_with("page GET /page"));
    assert_eq!(running.pass.hits("/page"), 1);
    // agentgate's CA does not vouch for it: the certificate is the origin's.
    let ca = running.ca_path.display().to_string();
    let output = running
        .sandbox
        .in_client("curl", &["-sS", "--noproxy", "*", "--cacert", &ca, "https://pass.test/page"])
        .await?;
    assert!(!output.status.success(), "the origin's certificate is not agentgate's");

    let records = wait_until(&running.log_path, "passthrough records", |records| {
        log::for_request(records, "CONNECT", "https://pass.test:443/").len() >= 2
    })
    .await?;
    for record in log::for_request(&records, "CONNECT", "https://pass.test:443/") {
        assert_eq!(record["agentgate.entry"], "transparent", "{record}");
        assert_eq!(record["event.action"], "allow");
    }
    running.gate.stop().await
}

#[tokio::test]
#[ignore = "needs root, ip and nft: run by scripts/test.sh"]
async fn a_host_or_sni_naming_another_site_than_the_original_destination_is_refused() -> TestResult {
    let running = start().await?;
    let (c, ca) = (running.sandbox.client.as_str(), running.ca_path.display().to_string());
    // Plain HTTP to origin.test's address, asking for other.test: no fronting.
    let fronted = curl_in_netns(c, &["--noproxy", "*", "-H", "Host: other.test", "http://origin.test/page"]).await?;
    assert_eq!(fronted.status, 403);
    assert!(
        fronted.headers.contains("code=transparent.host_mismatch")
            || fronted.headers.contains("transparent.host_mismatch"),
        "{}",
        fronted.headers
    );
    // TLS to origin.test's address with the SNI other.test: closed before any handshake.
    let resolve = format!("other.test:443:{ORIGIN_IP}");
    let output = running
        .sandbox
        .in_client(
            "curl",
            &["-sS", "--noproxy", "*", "--cacert", &ca, "--resolve", &resolve, "https://other.test/page"],
        )
        .await?;
    assert!(!output.status.success(), "a fronted TLS connection is refused");
    assert_eq!(running.http.hits("/page") + running.https.hits("/page"), 0, "nothing reached an origin");

    let records = wait_until(&running.log_path, "two host_mismatch records", |records| {
        records.iter().filter(|r| r["agentgate.reasons"][0]["code"] == "transparent.host_mismatch").count() >= 2
    })
    .await?;
    let http = only(&records, "GET", "http://other.test:80/page")?;
    assert_eq!(
        (http["agentgate.entry"].as_str(), http["http.response.status_code"].as_u64()),
        (Some("transparent"), Some(403))
    );
    let tls = only(&records, "CONNECT", "https://other.test:443/")?;
    assert_eq!(tls["agentgate.entry"], "transparent");
    assert!(tls["agentgate.reasons"][0]["rule"].as_str().is_some_and(|r| r.contains(ORIGIN_IP)), "{tls}");
    running.gate.logged(&["transparent TLS connection refused", "other.test"], 1).await?;
    running.gate.stop().await
}

#[tokio::test]
#[ignore = "needs root, ip and nft: run by scripts/test.sh"]
async fn a_connection_straight_to_the_transparent_port_is_refused_and_nothing_loops() -> TestResult {
    let running = start().await?;
    let url = format!("http://10.200.1.1:{}/page", running.transparent_port);
    let output = running.sandbox.in_client("curl", &["-sS", "--noproxy", "*", &url]).await?;
    assert!(!output.status.success(), "closed without an answer: {output:?}");
    let stderr = running.gate.logged(&["transparent connection refused", "agentgate itself"], 1).await?;
    let refusals = stderr.lines().filter(|line| line.contains("transparent connection refused")).count();
    assert_eq!(refusals, 1, "one refusal, no loop:\n{stderr}");
    let records = wait_until(&running.log_path, "an own_address record", |records| !records.is_empty()).await?;
    assert_eq!(records.len(), 1, "{records:#?}");
    assert_eq!(records[0]["agentgate.reasons"][0]["code"], "network.own_address");
    assert_eq!(records[0]["agentgate.entry"], "transparent");
    let origins = [&running.http, &running.https, &running.pass, &running.https6];
    assert_eq!(origins.iter().map(|origin| origin.connections()).sum::<usize>(), 0);
    running.gate.stop().await
}

#[tokio::test]
#[ignore = "needs root, ip and nft: run by scripts/test.sh"]
async fn ipv6_connections_are_redirected_and_gated_too() -> TestResult {
    let running = start().await?;
    let (c, ca) = (running.sandbox.client.as_str(), running.ca_path.display().to_string());
    let allowed = fetch(c, &ca, "https://origin6.test/page").await?;
    assert_eq!(allowed.status, 200, "{}", allowed.headers);
    let blocked = fetch(c, &ca, "https://origin6.test/private/a").await?;
    assert_eq!(blocked.status, 403);
    assert!(blocked.headers.contains("agentgate-decision: deny; source=robots.txt; line=2"), "{}", blocked.headers);
    assert_eq!((running.https6.hits("/page"), running.https6.hits("/private/a")), (1, 0));
    let records = log::wait_for(&running.log_path, 2).await?;
    let record = only(&records, "GET", "https://origin6.test:443/private/a")?;
    assert_eq!(record["agentgate.entry"], "transparent");
    assert_eq!(record["client.address"], "fd00:200:1::2");
    assert_eq!(record["agentgate.reasons"][0]["code"], "robots.disallow");
    running.gate.stop().await
}

#[tokio::test]
#[ignore = "needs root, ip and nft: run by scripts/test.sh"]
async fn a_transparent_agent_is_held_to_its_egress_list_on_the_name_it_connected_with() -> TestResult {
    let agent = "[[agents]]\nid = \"boxed\"\nclients = [\"10.200.1.2\"]\nallow_hosts = [\"origin.test\"]\n";
    let running = start_with(agent).await?;
    let (c, ca) = (running.sandbox.client.as_str(), running.ca_path.display().to_string());
    assert_eq!(fetch(c, &ca, "https://origin.test/page").await?.status, 200, "the listed host");
    // Plain HTTP to an unlisted name: 403 with the reason, the name never looked up.
    let refused = fetch(c, &ca, "http://other.test/page").await?;
    assert_eq!(refused.status, 403);
    assert!(refused.headers.contains("code=operator.not_allowlisted"), "{}", refused.headers);
    assert!(
        String::from_utf8_lossy(&refused.body).contains("allow_hosts = [\"origin.test\"] does not list other.test:80")
    );
    // TLS to it: decided on the SNI before the handshake, so the connection is closed.
    assert!(fetch(c, &ca, "https://other.test/page").await.is_err(), "no TLS session to an unlisted host");

    // A refused TLS connection's record has no status: nothing was answered on it.
    let records = wait_until(&running.log_path, "three records", |records| records.len() >= 3).await?;
    for (method, url) in [("GET", "http://other.test:80/page"), ("CONNECT", "https://other.test:443/")] {
        let record = only(&records, method, url)?;
        assert_eq!(
            (&record["agentgate.agent"], &record["agentgate.entry"]),
            (&Value::from("boxed"), &Value::from("transparent"))
        );
        assert_eq!(record["agentgate.reasons"][0]["code"], "operator.not_allowlisted", "{record}");
    }
    running.gate.stop().await
}
