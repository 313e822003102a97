//! The network guard end to end (issues 8 and 25, `docs/security.md`): every spelling of
//! loopback, the internal and special-purpose ranges (Teredo by its client), names that
//! resolve inside, policy-file redirects, CONNECT ports and agentgate's own address (on every
//! interface address for a listener on `0.0.0.0`), operator rules on canonical hosts and
//! CIDRs, and `Upgrade: h2c`. In a network namespace of its own (root): an address in the
//! prefix of an address configured on `lo` is agentgate's own too.
//! Destinations outside loopback are only ever handed to a recording dialer that refuses to
//! leave loopback: "no connect attempted" is proven by what it was asked, never by traffic.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};

use agentgate::config::{Config, RuleConfig};
use agentgate::net::{ConnectConfig, NetworkConfig};
use agentgate::net::{Dial, NetFuture, Resolve, SystemResolver, TcpDialer};
use agentgate::policy::operator::RuleAction;
use tokio::net::TcpStream;

use crate::support::block::{self, Expected};
use crate::support::log::{by_id, for_request};
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::raw::{exchange, refused_tunnel};
use crate::support::{TestProxy, TestResult};

/// Every way an agent can write 127.0.0.1 in a URL (the system resolver maps `localhost`).
const LOOPBACK: [&str; 7] =
    ["127.0.0.1", "127.1", "0177.0.0.1", "0x7f.1", "2130706433", "[::ffff:127.0.0.1]", "localhost"];

/// A Teredo address (RFC 4380 §4) whose server is 65.54.227.120 and whose client, the last 32
/// bits inverted, is 127.0.0.1.
const TEREDO_LOOPBACK: &str = "2001:0:4136:e378:8000:63bf:80ff:fffe";

/// Names from a table, the rest from the system: a stand-in for `/etc/hosts` and for DNS
/// servers that answer what a test needs.
struct Names(HashMap<&'static str, Vec<IpAddr>>);

impl Names {
    fn new(table: &[(&'static str, &[&str])]) -> Arc<Names> {
        let parse = |a: &&str| a.parse::<IpAddr>().expect("test address");
        Arc::new(Names(table.iter().map(|(name, addrs)| (*name, addrs.iter().map(parse).collect())).collect()))
    }
}

impl Resolve for Names {
    fn resolve<'a>(&'a self, name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
        match self.0.get(name) {
            Some(addrs) => {
                let addrs = addrs.clone();
                Box::pin(async move { Ok(addrs) })
            }
            None => SystemResolver.resolve(name),
        }
    }
}

/// A rebinding DNS server: the first answer is the allowed origin, every later one is
/// another loopback address the allow list does not open.
#[derive(Default)]
struct Rebinding(Mutex<usize>);

impl Resolve for Rebinding {
    fn resolve<'a>(&'a self, _name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
        let mut lookups = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *lookups += 1;
        let answer = if *lookups == 1 { [127, 0, 0, 1] } else { [127, 0, 0, 2] };
        Box::pin(async move { Ok(vec![IpAddr::from(answer)]) })
    }
}

/// Records every address it is asked to dial; connects to loopback only.
#[derive(Default)]
struct Recorder(Mutex<Vec<SocketAddr>>);

impl Recorder {
    fn dialed(&self) -> Vec<SocketAddr> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }
}

impl Dial for Recorder {
    fn dial(&self, addr: SocketAddr) -> NetFuture<'_, TcpStream> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(addr);
        Box::pin(async move {
            if !addr.ip().is_loopback() {
                return Err(io::Error::other(format!("test dialer: {addr} is not loopback; not connecting")));
            }
            TcpStream::connect(addr).await
        })
    }
}

/// Config edit: the network settings as shipped (loopback denied, CONNECT to 443 and 80).
fn shipped_network(config: &mut Config) {
    config.network = NetworkConfig::default();
    config.connect = ConnectConfig::default();
}

/// One raw request through the proxy: the status, the `agentgate-decision` header and the body.
struct Answer {
    status: u16,
    decision: String,
    text: String,
}

impl Answer {
    fn parse(text: String) -> Answer {
        let status = text.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let head = text.split("\r\n\r\n").next().unwrap_or_default();
        let decision = head.lines().find_map(|l| l.strip_prefix("agentgate-decision: ")).unwrap_or_default().to_owned();
        Answer { status, decision, text }
    }

    fn record(&self) -> &str {
        self.decision.rsplit("record=").next().unwrap_or_default()
    }
}

/// `GET <url>` in absolute form, written by hand: reqwest would normalize the host first.
async fn get(proxy: &TestProxy, url: &str) -> TestResult<Answer> {
    let host = url.split('/').nth(2).unwrap_or_default();
    let request = format!("GET {url} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    Ok(Answer::parse(exchange(proxy.addr, request.as_bytes()).await?))
}

fn network(code: &'static str) -> Expected<'static> {
    Expected { decision: "deny", source: "operator", code, line: None, rule: "", advice: "" }
}

/// Asserts a network refusal in the answer and its log line.
fn refused(answer: &Answer, code: &'static str, records: &[serde_json::Value], what: &str) -> TestResult {
    assert_eq!(answer.status, 403, "{what}: {}", answer.text);
    let prefix = format!("deny; source=operator; code={code}; record=");
    assert!(answer.decision.starts_with(&prefix), "{what}: {:?}", answer.decision);
    assert!(answer.text.contains(&format!("[{code}]")), "{what}: the body names the code: {}", answer.text);
    assert!(!answer.text.contains("refused") && !answer.text.contains("unreachable"), "{what}: {}", answer.text);
    block::logged(records, answer.record(), "GET", &network(code))
}

#[tokio::test]
async fn every_spelling_of_loopback_is_refused_by_default() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let names = Names::new(&[("intranet.test", &["127.0.0.1"])]);
    let proxy = TestProxy::start_with_network(&ca, names, Arc::new(TcpDialer), shipped_network).await?;
    let port = origin.addr.port();
    let mut answers = Vec::new();
    for host in LOOPBACK.iter().chain(&["127.0.0.2", "[::1]", "intranet.test", "LOCALHOST."]) {
        answers.push((host, get(&proxy, &format!("http://{host}:{port}/hello")).await?));
    }
    let records = proxy.log_lines(answers.len()).await?;
    for (host, answer) in &answers {
        refused(answer, "network.private_address", &records, host)?;
    }
    assert_eq!(origin.connections(), 0, "the origin saw no connection, not even a robots.txt fetch");
    Ok(())
}

#[tokio::test]
async fn loopback_spellings_pass_once_allowed() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let names = Names::new(&[("intranet.test", &["127.0.0.1"])]);
    let allow_v4 = |config: &mut Config| {
        shipped_network(config);
        config.network.allow_cidrs = vec!["127.0.0.0/8".parse().expect("CIDR")];
    };
    let proxy = TestProxy::start_with_network(&ca, names, Arc::new(TcpDialer), allow_v4).await?;
    let port = origin.addr.port();
    // `localhost` may also resolve to ::1, which this allow list does not open; it is left out.
    for host in LOOPBACK.iter().filter(|h| **h != "localhost").chain(&["intranet.test"]) {
        let answer = get(&proxy, &format!("http://{host}:{port}/hello")).await?;
        assert_eq!(answer.status, 200, "{host}: {}", answer.text);
        assert!(answer.text.ends_with("hello"), "{host}: {}", answer.text);
    }
    Ok(())
}

#[tokio::test]
async fn internal_ranges_and_names_are_never_dialled() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let names = Names::new(&[
        ("metadata.test", &["169.254.169.254"]),
        // Every address is vetted: a public answer first does not smuggle the second in.
        ("mixed.test", &["93.184.215.14", "127.0.0.2"]),
        ("empty.test", &[]),
    ]);
    let dialer = Arc::new(Recorder::default());
    let only_origin = |config: &mut Config| {
        shipped_network(config);
        config.network.allow_cidrs = vec!["127.0.0.1/32".parse().expect("CIDR")];
    };
    let proxy = TestProxy::start_with_network(&ca, names, dialer.clone(), only_origin).await?;
    let targets = [
        "169.254.169.254",
        "10.0.0.1",
        "192.168.1.1",
        "100.100.100.200",
        "[fd00::1]",
        "[fd00:ec2::254]",
        "[::ffff:10.0.0.1]",
        "[64:ff9b::a00:1]",
        "[2002:a9fe:a9fe::1]",
        "metadata.test",
        "mixed.test",
    ];
    let mut answers = Vec::new();
    for host in targets {
        answers.push((host, get(&proxy, &format!("http://{host}/latest/meta-data/")).await?));
    }
    for target in ["169.254.169.254:443", "10.0.0.1:443", "metadata.test:443"] {
        let head = refused_tunnel(proxy.addr, target).await?;
        assert!(head.starts_with("HTTP/1.1 403"), "CONNECT {target}: {head}");
        assert!(head.contains("code=network.private_address"), "CONNECT {target}: {head}");
    }
    let records = proxy.log_lines(answers.len() + 3).await?;
    for (host, answer) in &answers {
        refused(answer, "network.private_address", &records, host)?;
    }
    assert_eq!(dialer.dialed(), Vec::<SocketAddr>::new(), "no connect was attempted");

    // A name with no address is an unreachable origin, recorded, and nothing is fetched.
    let answer = get(&proxy, "http://empty.test/x").await?;
    assert_eq!(answer.status, 502, "{}", answer.text);
    assert!(answer.text.contains("cannot resolve empty.test:80"), "{}", answer.text);
    let records = proxy.log_lines(answers.len() + 4).await?;
    let line = for_request(&records, "GET", "empty.test/x");
    assert_eq!(line.len(), 1, "{records:#?}");
    assert_eq!((&line[0]["event.action"], &line[0]["http.response.status_code"]), (&"error".into(), &502.into()));
    assert_eq!(dialer.dialed(), Vec::<SocketAddr>::new());

    // After all that, a normal request works, and dials the origin's host only (its port,
    // and 443 for AGENTS.md, SEMANTICS C2).
    let answer = get(&proxy, &format!("http://127.0.0.1:{}/hello", origin.addr.port())).await?;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let dialed = dialer.dialed();
    assert!(dialed.contains(&origin.addr), "{dialed:?}");
    assert!(dialed.iter().all(|a| a.ip() == origin.addr.ip()), "{dialed:?}");
    Ok(())
}

#[tokio::test]
async fn robots_redirect_to_a_denied_address_is_not_followed() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let redirect = |to: &str| Site::new().serve("/robots.txt", 302, &[("location", to)], "");
    let metadata = Origin::http_site(redirect("http://169.254.169.254/latest/meta-data/")).await?;
    let other_loopback = Origin::http_site(redirect("http://127.0.0.2:9/internal?leak=1")).await?;
    // Teredo whose client is 127.0.0.1; allowing 127.0.0.1/32 does not open it.
    let teredo = Origin::http_site(redirect(&format!("http://[{TEREDO_LOOPBACK}]/robots.txt"))).await?;
    let normal = Origin::http_site(Site::new()).await?;
    let dialer = Arc::new(Recorder::default());
    let origins_only = |config: &mut Config| {
        shipped_network(config);
        config.network.allow_cidrs = vec!["127.0.0.1/32".parse().expect("CIDR")];
    };
    let proxy = TestProxy::start_with_network(&ca, Names::new(&[]), dialer.clone(), origins_only).await?;
    let client = proxy.client()?;
    let unreachable = Expected {
        decision: "deny",
        source: "robots.txt",
        code: "robots.unreachable",
        line: None,
        rule: "",
        advice: "could not be fetched",
    };
    let mut ids = Vec::new();
    for origin in [&metadata, &other_loopback, &teredo] {
        let response = client.get(format!("http://127.0.0.1:{}/page", origin.addr.port())).send().await?;
        ids.push(block::plain(response, &unreachable).await?);
        assert_eq!(origin.hits("/page"), 0);
    }
    let records = proxy.log_lines(ids.len()).await?;
    for id in &ids {
        block::logged(&records, id, "GET", &unreachable)?;
    }
    let response = client.get(format!("http://127.0.0.1:{}/hello", normal.addr.port())).send().await?;
    assert_eq!(response.status(), 200);
    let dialed = dialer.dialed();
    assert!(dialed.iter().all(|a| a.ip() == IpAddr::from([127, 0, 0, 1])), "only the origins were dialled: {dialed:?}");
    Ok(())
}

#[tokio::test]
async fn connect_ports_and_agentgates_own_address() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let shipped_ports = |config: &mut Config| config.connect = ConnectConfig::default();
    let proxy = TestProxy::start_with(&ca, shipped_ports).await?;
    let own = proxy.addr.port();

    let head = refused_tunnel(proxy.addr, "127.0.0.1:22").await?;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    assert!(head.contains("code=network.port_not_allowed"), "loopback is allowed, port 22 is not: {head}");
    for target in [format!("127.0.0.1:{own}"), format!("localhost:{own}"), format!("0x7f.1:{own}")] {
        let head = refused_tunnel(proxy.addr, &target).await?;
        assert!(head.starts_with("HTTP/1.1 403"), "{target}: {head}");
        assert!(head.contains("code=network.own_address"), "{target}: {head}");
    }
    let answer = get(&proxy, &format!("http://127.0.0.1:{own}/")).await?;
    let records = proxy.log_lines(5).await?;
    refused(&answer, "network.own_address", &records, "GET to the proxy itself")?;
    let connects = records.iter().filter(|r| r["http.request.method"] == "CONNECT").count();
    assert_eq!(connects, 4, "every refused CONNECT is recorded");

    let answer = get(&proxy, &format!("http://127.0.0.1:{}/hello", origin.addr.port())).await?;
    assert_eq!(answer.status, 200, "{}", answer.text);
    Ok(())
}

#[tokio::test]
async fn operator_rules_match_every_spelling_and_cidrs() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let names = Names::new(&[("intranet.test", &["127.0.0.1"])]);
    let rules = |config: &mut Config| {
        let rule = |host: &str, path: &str| RuleConfig {
            host: host.to_owned(),
            path: path.to_owned(),
            methods: Vec::new(),
            agents: Vec::new(),
            action: RuleAction::Deny,
            reason: String::new(),
        };
        config.rules = vec![rule("127.0.0.1", "/private"), rule("127.0.0.0/8", "/secret")];
        config.bypass_hosts = vec!["2130706433".to_owned()];
    };
    let proxy = TestProxy::start_with_network(&ca, names, Arc::new(TcpDialer), rules).await?;
    let port = origin.addr.port();
    let mut answers = Vec::new();
    for host in ["127.1", "2130706433", "0x7f.1", "[::ffff:127.0.0.1]", "intranet.test"] {
        answers.push((host, get(&proxy, &format!("http://{host}:{port}/private/x")).await?));
    }
    for host in ["intranet.test", "0177.0.0.1"] {
        answers.push((host, get(&proxy, &format!("http://{host}:{port}/secret")).await?));
    }
    let records = proxy.log_lines(answers.len()).await?;
    for (host, answer) in &answers {
        assert_eq!(answer.status, 403, "{host}: {}", answer.text);
        assert!(
            answer.decision.starts_with("deny; source=operator; code=operator.deny"),
            "{host}: {}",
            answer.decision
        );
        block::logged(&records, answer.record(), "GET", &network("operator.deny"))?;
    }
    assert_eq!(origin.hits("/private/x") + origin.hits("/secret"), 0);
    // The log names the canonical host, whatever spelling the agent used.
    for (host, answer) in answers.iter().filter(|(host, _)| *host != "intranet.test") {
        let line = by_id(&records, answer.record())?;
        assert_eq!(line["url.domain"], "127.0.0.1", "{host}: {line:#}");
        assert!(line["url.full"].as_str().unwrap_or_default().starts_with("http://127.0.0.1:"), "{host}: {line:#}");
    }
    // `bypass_hosts = ["2130706433"]` is 127.0.0.1 too: no policy file is fetched.
    let answer = get(&proxy, &format!("http://127.1:{port}/hello")).await?;
    assert_eq!(answer.status, 200, "{}", answer.text);
    let records = proxy.log_lines(answers.len() + 1).await?;
    let hello = for_request(&records, "GET", "/hello");
    assert_eq!(hello.len(), 1, "{records:#?}");
    assert_eq!(hello[0]["agentgate.reasons"][0]["code"], "operator.bypass", "{:#}", hello[0]);
    assert!(origin.policy_fetches().iter().all(|(_, n)| *n == 0), "{:?}", origin.policy_fetches());
    Ok(())
}

#[tokio::test]
async fn h2c_upgrade_never_reaches_the_origin() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", "User-agent: *\nDisallow: /private\n")).await?;
    let proxy = TestProxy::start(&ca).await?;
    let base = format!("http://127.0.0.1:{}", origin.addr.port());
    let host = format!("127.0.0.1:{}", origin.addr.port());
    let pipelined = format!(
        "GET {base}/h2c HTTP/1.1\r\nHost: {host}\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
         HTTP2-Settings: AAMAAABkAAQCAAAAAAIAAAAA\r\n\r\n\
         GET {base}/private/secret HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    );
    let text = exchange(proxy.addr, pipelined.as_bytes()).await?;
    let (first, second) =
        text.split_once("page GET /h2c\n").ok_or_else(|| format!("no page from the origin: {text}"))?;
    assert!(first.starts_with("HTTP/1.1 200"), "the origin answered without switching: {text}");
    let seen = second.split("HTTP/1.1 ").next().unwrap_or_default().to_ascii_lowercase();
    assert!(!seen.contains("upgrade") && !seen.contains("http2-settings"), "the origin saw: {seen}");
    let blocked =
        Answer::parse(format!("HTTP/1.1 {}", second.split_once("HTTP/1.1 ").map(|(_, b)| b).unwrap_or_default()));
    assert_eq!(blocked.status, 403, "{text}");
    assert!(blocked.decision.contains("code=robots.disallow"), "{}", blocked.decision);
    assert_eq!(origin.hits("/private/secret"), 0);
    let records = proxy.log_lines(2).await?;
    let denial = Expected {
        decision: "deny",
        source: "robots.txt",
        code: "robots.disallow",
        line: Some(2),
        rule: "",
        advice: "",
    };
    block::logged(&records, blocked.record(), "GET", &denial)?;

    let response = proxy.client()?.get(format!("{base}/hello")).send().await?;
    assert_eq!(response.status(), 200);
    Ok(())
}

#[tokio::test]
async fn monitor_mode_does_not_open_the_network() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let monitor = |config: &mut Config| {
        shipped_network(config);
        config.mode = agentgate::policy::operator::Mode::Monitor;
    };
    let proxy = TestProxy::start_with(&ca, monitor).await?;
    let answer = get(&proxy, &format!("http://127.1:{}/hello", origin.addr.port())).await?;
    let records = proxy.log_lines(1).await?;
    refused(&answer, "network.private_address", &records, "monitor mode")?;
    assert_eq!(records[0]["agentgate.mode"], "monitor", "{records:#?}");
    assert_eq!(origin.connections(), 0);
    Ok(())
}

#[tokio::test]
async fn one_lookup_per_request_no_rebinding_and_none_on_a_pooled_connection() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let resolver = Arc::new(Rebinding::default());
    let dialer = Arc::new(Recorder::default());
    let only_origin = |config: &mut Config| {
        shipped_network(config);
        config.network.allow_cidrs = vec!["127.0.0.1/32".parse().expect("CIDR")];
    };
    let proxy = TestProxy::start_with_network(&ca, resolver.clone(), dialer.clone(), only_origin).await?;
    // The guard, the four policy fetches and the forward all use the first answer.
    let answer = get(&proxy, &format!("http://rebind.test:{}/hello", origin.addr.port())).await?;
    assert_eq!(answer.status, 200, "{}", answer.text);
    assert_eq!(*resolver.0.lock().unwrap_or_else(PoisonError::into_inner), 1, "one lookup");
    let dialed = dialer.dialed();
    assert!(dialed.contains(&origin.addr), "{dialed:?}");
    assert!(dialed.iter().all(|a| a.ip() == origin.addr.ip()), "only the vetted address: {dialed:?}");
    assert!(origin.policy_fetches().iter().any(|(_, n)| *n > 0), "the policy files came from the vetted address");
    // The next request uses the pinned answer (and the pooled connection when it is back in
    // the pool): no second lookup.
    let again = get(&proxy, &format!("http://rebind.test:{}/hello", origin.addr.port())).await?;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(*resolver.0.lock().unwrap_or_else(PoisonError::into_inner), 1, "no second lookup");
    Ok(())
}

/// One address in each special-purpose block the IANA registries mark not globally
/// reachable (and Teredo carrying 127.0.0.1), with the `allow_cidrs` entry that opens it.
const SPECIAL_PURPOSE: [(&str, &str); 16] = [
    ("192.0.0.192", "192.0.0.0/24"),
    ("192.0.0.8", "192.0.0.0/24"),
    ("198.18.0.1", "198.18.0.0/15"),
    ("192.0.2.1", "192.0.2.0/24"),
    ("198.51.100.7", "198.51.100.0/24"),
    ("203.0.113.7", "203.0.113.0/24"),
    ("fec0::1", "fec0::/10"),
    ("100::1", "100::/64"),
    ("2001:db8::1", "2001:db8::/32"),
    ("2001:10::1", "2001:10::/28"),
    ("2001:2::1", "2001:2::/48"),
    ("3fff::1", "3fff::/20"),
    ("5f00::1", "5f00::/16"),
    ("64:ff9b:1::5db8:d70e", "64:ff9b:1::/48"),
    ("64:ff9b::c000:201", "64:ff9b::/96"),
    (TEREDO_LOOPBACK, "2001::/32"),
];

/// `ip` and `port` as a URL authority (IPv6 in brackets).
fn authority(ip: IpAddr, port: u16) -> String {
    SocketAddr::new(ip, port).to_string()
}

#[tokio::test]
async fn special_purpose_ranges_and_teredo_loopback_are_refused_unless_allowed() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let names = Names::new(&[("docs.test", &["192.0.2.10"]), ("teredo.test", &[TEREDO_LOOPBACK])]);
    let dialer = Arc::new(Recorder::default());
    let proxy = TestProxy::start_with_network(&ca, names.clone(), dialer.clone(), shipped_network).await?;
    let mut answers = Vec::new();
    let ips: Vec<IpAddr> = SPECIAL_PURPOSE.iter().map(|(ip, _)| ip.parse()).collect::<Result<_, _>>()?;
    for ip in &ips {
        answers.push((authority(*ip, 80), get(&proxy, &format!("http://{}/x", authority(*ip, 80))).await?));
    }
    for host in ["docs.test", "teredo.test"] {
        answers.push((host.to_owned(), get(&proxy, &format!("http://{host}/x")).await?));
    }
    for target in ["192.0.0.192:443".to_owned(), format!("[{TEREDO_LOOPBACK}]:443"), "teredo.test:443".to_owned()] {
        let head = refused_tunnel(proxy.addr, &target).await?;
        assert!(head.starts_with("HTTP/1.1 403"), "CONNECT {target}: {head}");
        assert!(head.contains("code=network.private_address"), "CONNECT {target}: {head}");
    }
    let records = proxy.log_lines(answers.len() + 3).await?;
    for (host, answer) in &answers {
        refused(answer, "network.private_address", &records, host)?;
    }
    assert_eq!(dialer.dialed(), Vec::<SocketAddr>::new(), "no connect was attempted");

    // Each block's allow_cidrs entry opens it: the guard lets the request through to the
    // dialer (which connects to loopback only, so the robots.txt fetch fails there).
    let dialer = Arc::new(Recorder::default());
    let allow_all_of_them = |config: &mut Config| {
        shipped_network(config);
        config.network.allow_cidrs = SPECIAL_PURPOSE.iter().map(|(_, cidr)| cidr.parse().expect("test CIDR")).collect();
    };
    let proxy = TestProxy::start_with_network(&ca, names, dialer.clone(), allow_all_of_them).await?;
    for ip in &ips {
        let answer = get(&proxy, &format!("http://{}/x", authority(*ip, 80))).await?;
        assert!(!answer.decision.contains("code=network."), "{ip} is allowed: {}", answer.decision);
        assert!(dialer.dialed().contains(&SocketAddr::new(*ip, 80)), "{ip}: {:?}", dialer.dialed());
    }
    Ok(())
}

/// The host's interface addresses other than loopback, as agentgate enumerates them; when the
/// machine has none, its loopback interface addresses, said loudly.
fn interface_addresses() -> TestResult<Vec<IpAddr>> {
    let all: Vec<IpAddr> = agentgate::net::interfaces::addresses()?.iter().map(ipnet::IpNet::addr).collect();
    let lan: Vec<IpAddr> = all.iter().copied().filter(|ip| !ip.is_loopback()).collect();
    if lan.is_empty() {
        eprintln!(
            "NOTE: this machine has no interface address but loopback ({all:?}); the LAN case of issue 25 item 7 is checked on loopback only"
        );
        assert!(!all.is_empty(), "getifaddrs listed no address at all, not even loopback");
        return Ok(all);
    }
    Ok(lan)
}

#[tokio::test]
async fn an_unspecified_admin_listen_refuses_the_hosts_interface_addresses() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let lan = interface_addresses()?;
    let first = lan[0].to_string();
    let names = Names::new(&[("lan.test", &[first.as_str()])]);
    let dialer = Arc::new(Recorder::default());
    let everything_allowed = |config: &mut Config| {
        shipped_network(config);
        config.network.allow_cidrs = vec!["0.0.0.0/0".parse().expect("CIDR"), "::/0".parse().expect("CIDR")];
        config.admin.listen = Some(SocketAddr::from(([0, 0, 0, 0], 0)));
        // Listening beyond loopback: a token nobody holds keeps the API closed meanwhile.
        config.admin.token_sha256 = Some("ab".repeat(32));
    };
    let proxy = TestProxy::start_with_network(&ca, names, dialer.clone(), everything_allowed).await?;
    let admin = proxy.admin_addr.ok_or("the admin API listens")?;
    assert!(admin.ip().is_unspecified(), "{admin}");
    let mut answers = Vec::new();
    for ip in &lan {
        let url = format!("http://{}/approvals", authority(*ip, admin.port()));
        answers.push((url.clone(), get(&proxy, &url).await?));
    }
    let by_name = format!("http://lan.test:{}/", admin.port());
    answers.push((by_name.clone(), get(&proxy, &by_name).await?));
    for ip in &lan {
        let target = authority(*ip, admin.port());
        let head = refused_tunnel(proxy.addr, &target).await?;
        assert!(head.starts_with("HTTP/1.1 403"), "CONNECT {target}: {head}");
        assert!(head.contains("code=network.own_address"), "CONNECT {target}: {head}");
    }
    let records = proxy.log_lines(answers.len() + lan.len()).await?;
    for (url, answer) in &answers {
        refused(answer, "network.own_address", &records, url)?;
    }
    assert_eq!(dialer.dialed(), Vec::<SocketAddr>::new(), "nothing was dialled: the admin API saw nothing");

    // Another port of the same address is not agentgate's: the guard hands it to the dialer
    // (which connects to loopback only; a loopback fallback address is not tried).
    if !lan[0].is_loopback() {
        let other = SocketAddr::new(lan[0], admin.port().wrapping_add(1).max(1));
        let answer = get(&proxy, &format!("http://{other}/x")).await?;
        assert!(!answer.decision.contains("code=network."), "{other}: {}", answer.decision);
        assert!(dialer.dialed().contains(&other), "{:?}", dialer.dialed());
    }
    Ok(())
}

/// A network namespace of one test, deleted when dropped.
struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip").args(["netns", "delete", &self.0]).output();
    }
}

/// Runs `ip ARGS`; an error names it and its stderr.
fn ip(args: &[&str]) -> TestResult {
    let output = std::process::Command::new("ip").args(args).output()?;
    if !output.status.success() {
        return Err(format!("ip {args:?} failed: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    Ok(())
}

/// Linux delivers every address of a prefix configured on `lo` locally: with `10.231.0.1/24`
/// there, `10.231.0.2` reaches a listener on `0.0.0.0` as well. The real binary runs in a
/// namespace of its own with the admin API on `0.0.0.0` and the /24 allowed in `[network]`.
#[tokio::test]
#[ignore = "needs root and ip: run by scripts/test.sh"]
async fn an_address_in_the_prefix_of_an_address_on_lo_is_agentgates_own() -> TestResult {
    crate::support::tools::need_root()?;
    crate::support::tools::need(crate::support::tools::IP)?;
    let netns = Netns(format!("agt-own-{}", std::process::id()));
    ip(&["netns", "add", &netns.0])?;
    ip(&["-n", &netns.0, "link", "set", "lo", "up"])?;
    ip(&["-n", &netns.0, "addr", "add", "10.231.0.1/24", "dev", "lo"])?;
    let dir = tempfile::tempdir()?;
    let config = format!(
        "listen = \"127.0.0.1:0\"\n[ca]\ndir = {ca:?}\n[audit]\npath = {log:?}\n[network]\nallow_cidrs = [\"10.231.0.0/24\"]\n\
         [admin]\nlisten = \"0.0.0.0:9090\"\ntoken_sha256 = \"{token}\"\n",
        ca = dir.path().join("ca"),
        log = dir.path().join("decisions.jsonl"),
        token = "ab".repeat(32),
    );
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, config)?;
    let gate =
        crate::support::binary::Agentgate::start_in_netns(&netns.0, dir.path(), &config_path, "agentgate=info").await?;
    let proxy = format!("http://{}", gate.addr());
    for target in ["10.231.0.1", "10.231.0.2", "10.231.0.200"] {
        let url = format!("http://{target}:9090/healthz");
        let answer = crate::support::curl::curl_in_netns(&netns.0, &["-x", &proxy, &url]).await?;
        let body = String::from_utf8_lossy(&answer.body);
        assert_eq!(answer.status, 403, "{url}: {} {body}", answer.headers);
        assert!(answer.headers.contains("code=network.own_address"), "{url}: {}", answer.headers);
    }
    // Another port of the prefix is not agentgate's: the guard lets it be dialled.
    let other = crate::support::curl::curl_in_netns(&netns.0, &["-x", &proxy, "http://10.231.0.2:9091/"]).await?;
    assert!(!other.headers.contains("code=network."), "{}", other.headers);
    gate.stop().await?;
    Ok(())
}
