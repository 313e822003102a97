//! Per-agent egress lists end to end (`docs/operator-guide.md` "Locking an agent
//! down"): two or three agents told apart by proxy credentials, sites on loopback names that a
//! recording resolver answers (each on its own loopback address, so a dial says which site it
//! was for), real clients (reqwest, curl, raw sockets). An allowlisted agent reaches its host
//! under that site's robots.txt and nothing else, and an unlisted host is never looked up,
//! dialled or fetched for policies; a denylist entry wins; a port-qualified entry admits its
//! port only; a rule scoped to an agent; monitor mode; a new host held for a human, granted to
//! its agent for a while or denied with a reason; `audit suggest` learning a list from a
//! monitor run; `explain --config --agent` and the admin `/explain`; a reload that adds a host.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use agentgate::config::Config;
use agentgate::net::{Dial, NetFuture, Resolve};
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::admin::{admin_client, admin_url};
use crate::agents::client_as;
use crate::approvals::{answer, pending};
use crate::support::block::{self, Expected};
use crate::support::curl::curl;
use crate::support::log::{by_id, for_request};
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::raw::exchange;
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult, header};

const ROBOTS: &str = "User-agent: *\nDisallow: /private\n";

/// The file name the test configs are parsed as: reasons name it.
const CONFIG_FILE: &str = "egress.toml";

/// `printf %s alice-secret | sha256sum`: the admin token whose holder approves held hosts.
const ALICE_SHA256: &str = "0c848abb03307b06cf70cd4e29c157dc81af5e94ab3eb1d0c59a120269572376";

/// The test's names, each on its own loopback address, and every lookup and dial the proxy
/// made: "never looked up, never dialled" is what this records, not what traffic suggests.
struct Net {
    names: Vec<(String, IpAddr)>,
    lookups: Mutex<Vec<String>>,
    dials: Mutex<Vec<SocketAddr>>,
}

impl Net {
    fn new(names: &[(&str, &str)]) -> TestResult<Arc<Net>> {
        let names = names.iter().map(|(name, ip)| Ok(((*name).to_owned(), ip.parse()?))).collect::<TestResult<_>>()?;
        Ok(Arc::new(Net { names, lookups: Mutex::default(), dials: Mutex::default() }))
    }

    fn lookups(&self) -> Vec<String> {
        self.lookups.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn looked_up(&self, name: &str) -> bool {
        self.lookups().iter().any(|n| n == name)
    }

    fn dialled(&self, addr: SocketAddr) -> bool {
        self.dials.lock().unwrap_or_else(PoisonError::into_inner).contains(&addr)
    }
}

impl Resolve for Net {
    fn resolve<'a>(&'a self, name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
        self.lookups.lock().unwrap_or_else(PoisonError::into_inner).push(name.to_owned());
        let found = self.names.iter().find(|(known, _)| known == name).map(|(_, ip)| vec![*ip]);
        Box::pin(async move { found.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such test name")) })
    }
}

impl Dial for Net {
    fn dial(&self, addr: SocketAddr) -> NetFuture<'_, TcpStream> {
        self.dials.lock().unwrap_or_else(PoisonError::into_inner).push(addr);
        Box::pin(async move {
            if !addr.ip().is_loopback() {
                return Err(io::Error::other(format!("test dialer: {addr} is not loopback; not connecting")));
            }
            TcpStream::connect(addr).await
        })
    }
}

/// A plain-HTTP origin serving `site` on loopback address `ip`.
fn site_on(ip: &str, site: Site) -> TestResult<Origin> {
    Origin::on_listener(std::net::TcpListener::bind((ip, 0))?, None, site)
}

/// An `[[agents]]` table for `id` (token `<id>-secret`) with `extra` lines.
fn agent_toml(id: &str, extra: &str) -> String {
    format!("[[agents]]\nid = \"{id}\"\ntoken = \"{id}-secret\"\n{extra}")
}

/// The 1-based line of `text` that starts with `start` (the first such line after `after`).
fn line_of(text: &str, after: &str, start: &str) -> TestResult<u64> {
    let from = text.find(after).ok_or_else(|| format!("{after:?} is not in the config"))?;
    let offset = text[from..].find(start).ok_or_else(|| format!("{start:?} is not after {after:?}"))? + from;
    Ok(text[..offset].matches('\n').count() as u64 + 1)
}

/// The proxy with the agents, rules, mode, admin tokens and approvals of `toml` (parsed as
/// [`CONFIG_FILE`], so reasons name its lines), resolving and dialling through `net`.
async fn start(ca: &TestCa, net: &Arc<Net>, toml: &str) -> TestResult<TestProxy> {
    let parsed = Config::from_toml_str(toml, CONFIG_FILE)?;
    TestProxy::start_with_network(ca, Arc::clone(net) as Arc<dyn Resolve>, Arc::clone(net) as Arc<dyn Dial>, |c| {
        c.mode = parsed.mode;
        c.agent = parsed.agent;
        c.agents = parsed.agents;
        c.rules = parsed.rules;
        c.admin.token_sha256 = parsed.admin.token_sha256;
        c.admin.tokens = parsed.admin.tokens;
        c.approvals = parsed.approvals;
        c.secrets = parsed.secrets;
    })
    .await
}

/// What an `operator.not_allowlisted` refusal cites: the list's file, line and text.
fn unlisted<'a>(line: u64, rule: &'a str) -> Expected<'a> {
    Expected {
        decision: "deny",
        source: "operator",
        code: "operator.not_allowlisted",
        line: Some(line),
        rule,
        advice: "ask your operator to add this one",
    }
}

#[tokio::test]
async fn an_allowlisted_agent_reaches_its_host_under_the_sites_rules_and_no_other_host() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let site = site_on("127.0.0.1", Site::new().file("/robots.txt", ROBOTS))?;
    let other = site_on("127.0.0.2", Site::new())?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("other.test", "127.0.0.2")])?;
    let toml = format!("{}{}", agent_toml("sbx", "allow_hosts = [\"site.test\"]\n"), agent_toml("open", ""));
    let line = line_of(&toml, "id = \"sbx\"", "allow_hosts")?;
    let proxy = start(&ca, &net, &toml).await?;
    let sbx = client_as(&proxy, "sbx", "sbx-secret")?;
    let (site_port, other_port) = (site.addr.port(), other.addr.port());

    // The listed host: its pages, and its robots.txt still applies.
    let page = sbx.get(format!("http://site.test:{site_port}/page")).send().await?;
    assert_eq!(page.status(), 200);
    let private = sbx.get(format!("http://site.test:{site_port}/private")).send().await?;
    let robots = Expected {
        decision: "deny",
        source: "robots.txt",
        code: "robots.disallow",
        line: Some(2),
        rule: "Disallow: /private",
        advice: "robots.txt disallows this path",
    };
    block::plain(private, &robots).await?;

    // Any other host: 403 naming the agent, the list, its file and line; never looked up.
    let rule = format!(
        "{CONFIG_FILE}:{line}: [[agents]] #1 id = \"sbx\" allow_hosts = [\"site.test\"] does not list other.test:{other_port}"
    );
    let refused = sbx.get(format!("http://other.test:{other_port}/page")).send().await?;
    let record = block::plain(refused, &unlisted(line, &rule)).await?;
    let out = curl(&[
        "-x",
        &format!("http://sbx:sbx-secret@{}", proxy.addr),
        &format!("http://other.test:{other_port}/page"),
    ])
    .await?;
    assert_eq!(out.status, 403, "curl sees the refusal");
    assert!(out.headers.contains("code=operator.not_allowlisted"), "{}", out.headers);
    assert!(String::from_utf8_lossy(&out.body).contains(&rule), "curl reads the reason");
    // A CONNECT to it: refused before the 200, and answered to the request inside the tunnel.
    let basic = base64_credentials("sbx", "sbx-secret");
    let connect = format!(
        "CONNECT other.test:{other_port} HTTP/1.1\r\nHost: other.test:{other_port}\r\nProxy-Authorization: Basic {basic}\r\n\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n"
    );
    let answer = exchange(proxy.addr, connect.as_bytes()).await?;
    let (opened, answer) = answer.split_once("\r\n\r\n").ok_or_else(|| format!("two answers: {answer}"))?;
    assert!(opened.starts_with("HTTP/1.1 200"), "{opened}");
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        answer.contains(&format!(
            "agentgate-decision: deny; source=operator; line={line}; code=operator.not_allowlisted"
        )),
        "{answer}"
    );
    assert!(answer.contains(&rule), "{answer}");
    // reqwest's HTTPS through the refused CONNECT reads it inside the tunnel.
    block::plain(sbx.get(format!("https://other.test:{other_port}/")).send().await?, &unlisted(line, &rule)).await?;
    assert!(!net.looked_up("other.test"), "an unlisted host is never looked up: {:?}", net.lookups());
    assert!(!net.dialled(other.addr), "nor dialled");
    assert!(other.policy_fetches().iter().all(|(_, n)| *n == 0), "nor fetched for policies");
    assert_eq!(other.hits("/page"), 0);

    // An agent without a list reaches it.
    let open = client_as(&proxy, "open", "open-secret")?;
    assert_eq!(open.get(format!("http://other.test:{other_port}/page")).send().await?.status(), 200);
    assert!(net.looked_up("other.test") && net.dialled(other.addr));

    let records = proxy.finish().await?;
    block::logged(&records, &record, "GET", &unlisted(line, &rule))?;
    let connects = for_request(&records, "CONNECT", &format!("other.test:{other_port}/"));
    assert_eq!(connects.len(), 2, "the raw CONNECT and reqwest's: {records:#?}");
    for connect in connects {
        assert_eq!(connect["agentgate.reasons"][0]["code"], "operator.not_allowlisted");
        assert_eq!((&connect["agentgate.agent"], &connect["http.response.status_code"]), (&json!("sbx"), &json!(403)));
    }
    Ok(())
}

/// `id:token` as a Basic credential.
fn base64_credentials(id: &str, token: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(format!("{id}:{token}"))
}

#[tokio::test]
async fn a_denylist_entry_wins_over_a_wildcard_and_a_port_entry_admits_its_port_only() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let (first, second) = (Origin::http_site(Site::new()).await?, Origin::http_site(Site::new()).await?);
    let (port, other_port) = (first.addr.port(), second.addr.port());
    let loopback = "127.0.0.1";
    let net = Net::new(&[
        ("www.site.test", loopback),
        ("secret.site.test", loopback),
        ("site.test", loopback),
        ("api.test", loopback),
    ])?;
    let lists = format!("allow_hosts = [\"*.site.test\", \"api.test:{port}\"]\ndeny_hosts = [\"secret.site.test\"]\n");
    let toml = agent_toml("sbx", &lists);
    let deny_line = line_of(&toml, "id = \"sbx\"", "deny_hosts")?;
    let allow_line = line_of(&toml, "id = \"sbx\"", "allow_hosts")?;
    let proxy = start(&ca, &net, &toml).await?;
    let sbx = client_as(&proxy, "sbx", "sbx-secret")?;

    assert_eq!(sbx.get(format!("http://www.site.test:{port}/")).send().await?.status(), 200);
    let denied = sbx.get(format!("http://secret.site.test:{port}/")).send().await?;
    let rule = format!(
        "{CONFIG_FILE}:{deny_line}: [[agents]] #1 id = \"sbx\" deny_hosts entry \"secret.site.test\" matches secret.site.test:{port}"
    );
    let expected = Expected {
        decision: "deny",
        source: "operator",
        code: "operator.denied_host",
        line: Some(deny_line),
        rule: &rule,
        advice: "forbids this agent to reach this host",
    };
    block::plain(denied, &expected).await?;
    let apex = sbx.get(format!("http://site.test:{port}/")).send().await?;
    block::plain(apex, &unlisted(allow_line, "does not list site.test:")).await?;
    assert_eq!(sbx.get(format!("http://api.test:{port}/")).send().await?.status(), 200);
    let lookups = net.lookups().len();
    let wrong_port = sbx.get(format!("http://api.test:{other_port}/")).send().await?;
    block::plain(wrong_port, &unlisted(allow_line, &format!("does not list api.test:{other_port}"))).await?;
    assert_eq!(net.lookups().len(), lookups, "the refused port looked nothing up");
    assert!(!net.looked_up("secret.site.test") && !net.looked_up("site.test"), "{:?}", net.lookups());
    assert_eq!(second.connections(), 0, "the unlisted port was never dialled");
    Ok(())
}

#[tokio::test]
async fn a_rule_scoped_to_one_agent_denies_that_agent_and_not_another() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let net = Net::new(&[("site.test", "127.0.0.1")])?;
    let rule = "[[rules]]\nhost = \"site.test\"\npath = \"/admin\"\nagents = [\"a\"]\naction = \"deny\"\nreason = \"a stays out\"\n";
    let toml = format!("{}{}{rule}", agent_toml("a", ""), agent_toml("b", ""));
    let proxy = start(&ca, &net, &toml).await?;
    let url = format!("http://site.test:{}/admin", origin.addr.port());
    let expected = Expected {
        decision: "deny",
        source: "operator",
        code: "operator.deny",
        line: None,
        rule: "[[rules]] #1 agents=a host=site.test path=/admin deny: a stays out",
        advice: "operator",
    };
    block::plain(client_as(&proxy, "a", "a-secret")?.get(&url).send().await?, &expected).await?;
    assert_eq!(client_as(&proxy, "b", "b-secret")?.get(&url).send().await?.status(), 200);
    assert_eq!(origin.hits("/admin"), 1, "only b's request reached the origin");
    Ok(())
}

#[tokio::test]
async fn monitor_mode_records_would_deny_with_the_same_code_and_forwards() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let other = site_on("127.0.0.2", Site::new())?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("other.test", "127.0.0.2")])?;
    let toml = agent_toml("sbx", "mode = \"monitor\"\nallow_hosts = [\"site.test\"]\n");
    let line = line_of(&toml, "id = \"sbx\"", "allow_hosts")?;
    let proxy = start(&ca, &net, &toml).await?;
    let url = format!("http://other.test:{}/page", other.addr.port());
    let response = client_as(&proxy, "sbx", "sbx-secret")?.get(&url).send().await?;
    assert_eq!(response.status(), 200, "monitor mode forwards");
    assert_eq!(header(&response, "agentgate-decision"), "", "and answers as the origin did");
    assert_eq!(other.hits("/page"), 1);
    let records = proxy.finish().await?;
    let found = for_request(&records, "GET", "/page");
    let [record] = found.as_slice() else { return Err(format!("{records:#?}").into()) };
    assert_eq!(record["event.action"], "would_deny", "{record:#}");
    assert_eq!(record["agentgate.mode"], "monitor");
    let reason = &record["agentgate.reasons"][0];
    assert_eq!(reason["code"], "operator.not_allowlisted", "{record:#}");
    assert_eq!(reason["blocking"], true);
    assert_eq!(reason["line"], line);
    Ok(())
}

/// The admin token the egress tests list and answer held requests with (alice's).
const ADMIN: Option<&str> = Some("alice-secret");

/// The config of the hold tests: `sbx` holds unlisted hosts, `peer` has the same list and
/// refuses them; alice holds the admin token.
fn hold_toml() -> String {
    let list = "allow_hosts = [\"site.test\"]\n";
    format!(
        "[[admin.tokens]]\nname = \"alice\"\nsha256 = \"{ALICE_SHA256}\"\n{}{}",
        agent_toml("sbx", &format!("{list}unlisted = \"hold\"\n")),
        agent_toml("peer", list)
    )
}

/// `client`'s request for `url`, held for a human, approved with a grant of the host to its
/// agent for ten minutes; the request then goes through.
async fn grant_host(proxy: &TestProxy, client: &reqwest::Client, url: &str) -> TestResult {
    let waiting = tokio::spawn(client.get(url).send());
    let listed = pending(proxy, ADMIN, 1).await?;
    let id = listed[0]["id"].as_str().ok_or("an id")?;
    let grant = json!({"decision": "approve", "remember": "host-for-agent", "ttl": "10m"});
    assert_eq!(answer(proxy, id, ADMIN, grant).await?.0, 200);
    assert_eq!(waiting.await??.status(), 200);
    Ok(())
}

#[tokio::test]
async fn a_host_grant_admits_the_port_asked_for_and_another_port_is_held_again() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let granted = site_on("127.0.0.2", Site::new())?;
    let other_port = site_on("127.0.0.2", Site::new())?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("other.test", "127.0.0.2")])?;
    let proxy = start(&ca, &net, &hold_toml()).await?;
    let sbx = client_as(&proxy, "sbx", "sbx-secret")?;
    let url = format!("http://other.test:{}/page", granted.addr.port());
    grant_host(&proxy, &sbx, &url).await?;
    assert_eq!(sbx.get(&url).send().await?.status(), 200, "the granted port passes without a hold");

    // The same host on another port is held for a human again, not admitted by the grant.
    let elsewhere = format!("http://other.test:{}/page", other_port.addr.port());
    let waiting = tokio::spawn(sbx.get(&elsewhere).send());
    let listed = pending(&proxy, ADMIN, 1).await?;
    assert_eq!(listed[0]["new_host"], "other.test");
    let text = listed[0]["rule"]["text"].as_str().unwrap_or_default();
    assert!(text.contains(&format!("does not list other.test:{}", other_port.addr.port())), "{text}");
    let id = listed[0]["id"].as_str().ok_or("an id")?;
    assert_eq!(answer(&proxy, id, ADMIN, json!({"decision": "deny", "reason": "one port only"})).await?.0, 200);
    assert_eq!(waiting.await??.status(), 403);
    let agents = admin_client()?.get(admin_url(&proxy, "/agents")?).bearer_auth("alice-secret").send().await?;
    let agents: Value = serde_json::from_str(&agents.text().await?)?;
    let sbx_entry = agents["agents"].as_array().and_then(|a| a.iter().find(|a| a["id"] == "sbx")).ok_or("sbx")?;
    assert_eq!(sbx_entry["grants"][0]["port"], json!(granted.addr.port()), "{agents:#}");
    proxy.finish().await?;
    Ok(())
}

/// A grant admits a host the allowlist does not name, never a secret sent there: the real
/// value of a secret bound to another host is refused (`secrets.value_leak`) towards a granted
/// host too, and the origin never sees it.
#[tokio::test]
async fn a_host_grant_never_admits_a_secret_value_sent_to_that_host() -> TestResult {
    const VALUE: &str = "ghp_RealTokenValue0123456789";
    let ca = TestCa::new("origin CA")?;
    let granted = site_on("127.0.0.2", Site::new())?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("other.test", "127.0.0.2")])?;
    let dir = tempfile::tempdir()?;
    let value_file = dir.path().join("value");
    std::fs::write(&value_file, VALUE)?;
    let secret = format!(
        "[[secrets]]\nname = \"gh\"\nplaceholder = \"agp_gh_placeholder_1\"\nvalue_file = {:?}\nhosts = [\"site.test\"]\n",
        value_file.display().to_string()
    );
    let proxy = start(&ca, &net, &format!("{}{secret}", hold_toml())).await?;
    let sbx = client_as(&proxy, "sbx", "sbx-secret")?;
    let url = format!("http://other.test:{}/page", granted.addr.port());
    grant_host(&proxy, &sbx, &url).await?;

    let leak_url = format!("http://other.test:{}/leak", granted.addr.port());
    let leak = sbx.get(&leak_url).header("x-token", VALUE).send().await?;
    assert_eq!(leak.status(), 403, "a granted host is no place for another host's secret");
    assert_eq!(granted.hits("/leak"), 0, "the origin never saw it");
    let records = proxy.finish().await?;
    let found = for_request(&records, "GET", "/leak");
    let [record] = found.as_slice() else { return Err(format!("{records:#?}").into()) };
    assert_eq!(record["agentgate.reasons"][0]["code"], "secrets.value_leak", "{record:#}");
    assert!(!record.to_string().contains(VALUE), "the value is never logged: {record:#}");
    Ok(())
}

#[tokio::test]
async fn a_new_host_held_for_a_human_is_granted_to_its_agent_for_a_while_or_denied_with_a_reason() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let other = site_on("127.0.0.2", Site::new())?;
    let third = site_on("127.0.0.3", Site::new())?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("other.test", "127.0.0.2"), ("third.test", "127.0.0.3")])?;
    let proxy = start(&ca, &net, &hold_toml()).await?;
    let sbx = client_as(&proxy, "sbx", "sbx-secret")?;
    let url = format!("http://other.test:{}/page", other.addr.port());

    // Held: listed for a human, nothing looked up while it waits.
    let waiting = tokio::spawn(sbx.get(&url).send());
    let listed = pending(&proxy, ADMIN, 1).await?;
    let held = &listed[0];
    assert_eq!(held["agent"], "sbx");
    assert_eq!(held["new_host"], "other.test");
    assert_eq!(held["rule"]["file"], "operator");
    assert!(held["rule"]["text"].as_str().is_some_and(|t| t.contains("does not list other.test:")), "{held}");
    // Vetted by the network guard before anyone is asked, never dialled before it is admitted.
    assert!(net.looked_up("other.test") && !net.dialled(other.addr), "{:?}", net.lookups());
    let id = held["id"].as_str().ok_or("an id")?;
    let held_record = held["record_id"].as_str().ok_or("a record id")?.to_owned();
    let (status, body) =
        answer(&proxy, id, ADMIN, json!({"decision": "approve", "remember": "path-for-agent-15m"})).await?;
    assert_eq!(status, 400, "a host is granted with host-for-agent: {body}");
    let grant = json!({"decision": "approve", "remember": "host-for-agent", "ttl": "10m", "reason": "docs mirror"});
    let (status, body) = answer(&proxy, id, ADMIN, grant).await?;
    assert_eq!((status, &body["by"]), (200, &json!("alice")), "{body}");
    assert_eq!(waiting.await??.status(), 200, "the held request goes on");

    // Granted: the same agent passes without a hold; another agent is still refused.
    let again = sbx.get(&url).send().await?;
    assert_eq!(again.status(), 200);
    assert!(pending(&proxy, ADMIN, 0).await?.is_empty());
    let peer = client_as(&proxy, "peer", "peer-secret")?.get(&url).send().await?;
    assert_eq!(peer.status(), 403);
    assert!(header(&peer, "agentgate-decision").contains("code=operator.not_allowlisted"));

    // The grant is in the admin API, with who granted it and until when.
    let agents = admin_client()?.get(admin_url(&proxy, "/agents")?).bearer_auth("alice-secret").send().await?;
    let agents: Value = serde_json::from_str(&agents.text().await?)?;
    let sbx_entry = agents["agents"].as_array().and_then(|a| a.iter().find(|a| a["id"] == "sbx")).ok_or("sbx")?;
    assert_eq!(sbx_entry["allow_hosts"], json!(["site.test"]));
    assert_eq!(sbx_entry["unlisted"], "hold");
    let grants = sbx_entry["grants"].as_array().ok_or("grants")?;
    assert_eq!(grants.len(), 1, "{agents:#}");
    assert_eq!(
        (&grants[0]["host"], &grants[0]["by"], &grants[0]["reason"]),
        (&json!("other.test"), &json!("alice"), &json!("docs mirror"))
    );
    let until = humantime::parse_rfc3339(grants[0]["until"].as_str().ok_or("until")?)?;
    let left = until.duration_since(std::time::SystemTime::now())?;
    assert!(left <= Duration::from_secs(600) && left > Duration::from_secs(500), "{left:?}");
    let peer_entry = agents["agents"].as_array().and_then(|a| a.iter().find(|a| a["id"] == "peer")).ok_or("peer")?;
    assert_eq!(peer_entry["grants"], json!([]));

    // Denied with a reason: the agent reads who and why.
    let denied = tokio::spawn(sbx.get(format!("http://third.test:{}/page", third.addr.port())).send());
    let listed = pending(&proxy, ADMIN, 1).await?;
    let id = listed[0]["id"].as_str().ok_or("an id")?;
    let (status, _) = answer(&proxy, id, ADMIN, json!({"decision": "deny", "reason": "not for this task"})).await?;
    assert_eq!(status, 200);
    let denied = denied.await??;
    assert_eq!(denied.status(), 403);
    let decision = header(&denied, "agentgate-decision");
    assert!(decision.starts_with("needs_approval; source=operator;"), "{decision}");
    assert!(decision.contains("code=operator.not_allowlisted; approval=denied; by=alice"), "{decision}");
    let text = denied.text().await?;
    assert!(
        text.contains("alice denied it") && text.contains("Their reason: \"not for this task\". Do not retry it"),
        "{text}"
    );
    assert!(!net.dialled(third.addr) && third.hits("/page") == 0, "a denied host is never reached");

    let records = proxy.finish().await?;
    // The held request: one record, under the id the queue listed, with the grant.
    let approved = by_id(&records, &held_record)?;
    assert_eq!(approved["event.action"], "allow", "{approved:#}");
    assert_eq!(approved["agentgate.approval.decision"], "approved");
    assert_eq!(approved["agentgate.approval.by"], "alice");
    assert_eq!(approved["agentgate.approval.remember"], "host-for-agent");
    assert!(approved["agentgate.approval.until"].is_string(), "{approved:#}");
    let to_other = for_request(&records, "GET", &format!("other.test:{}/page", other.addr.port()));
    assert_eq!(to_other.len(), 3, "held-and-approved, granted, and the peer's refusal: {records:#?}");
    let granted = to_other.iter().find(|r| r["agentgate.agent"] == "sbx" && r["event.id"] != held_record.as_str());
    let granted = granted.ok_or("the granted request's record")?;
    assert_eq!(granted["event.action"], "allow");
    let reasons = granted["agentgate.reasons"].as_array().ok_or("reasons")?;
    let reason = reasons.iter().find(|r| r["code"] == "operator.host_approved").ok_or("the grant is in the record")?;
    let rule = reason["rule"].as_str().unwrap_or_default();
    assert!(
        rule.contains("other.test is not on agent \"sbx\"'s allow_hosts; alice granted it to this agent until"),
        "{rule}"
    );
    Ok(())
}

#[tokio::test]
async fn an_unlisted_host_the_network_guard_refuses_is_refused_at_once_and_never_held() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("intranet.test", "10.0.0.5")])?;
    let proxy = start(&ca, &net, &hold_toml()).await?;
    let sbx = client_as(&proxy, "sbx", "sbx-secret")?;
    let admin = proxy.admin_addr.ok_or("the hold tests turn the admin API on")?;
    let targets = [
        (format!("http://{admin}/approvals"), "network.own_address"),
        ("http://intranet.test/metadata".to_owned(), "network.private_address"),
        ("http://10.0.0.6/".to_owned(), "network.private_address"),
    ];
    for (url, code) in &targets {
        // Held, this would wait for `[approvals] timeout`: refused at once, it answers now.
        let answer = tokio::time::timeout(Duration::from_secs(10), sbx.get(url).send())
            .await
            .map_err(|_| format!("{url} was held instead of refused at once"))??;
        assert_eq!(answer.status(), 403, "{url}");
        let decision = header(&answer, "agentgate-decision");
        assert!(decision.starts_with(&format!("deny; source=operator; code={code};")), "{url}: {decision}");
        assert!(pending(&proxy, ADMIN, 0).await?.is_empty(), "{url}: nothing is listed for a human");
    }
    assert_eq!(net.dials.lock().unwrap_or_else(PoisonError::into_inner).len(), 0, "nothing was dialled");
    let records = proxy.finish().await?;
    for (url, code) in &targets {
        let target = url.trim_start_matches("http://");
        let found = for_request(&records, "GET", target);
        let [record] = found.as_slice() else { return Err(format!("one record for {url}: {records:#?}").into()) };
        assert_eq!(record["agentgate.reasons"][0]["code"], *code, "{record:#}");
        assert!(record.get("agentgate.approval.decision").is_none(), "never held: {record:#}");
    }
    Ok(())
}

/// Runs the real `agentgate` with `args`: exit code, stdout, stderr.
pub(crate) async fn agentgate(args: &[&str]) -> TestResult<(i32, String, String)> {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentgate")).args(args).output().await?;
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    Ok((output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr)))
}

#[tokio::test]
async fn explain_and_the_admin_explain_take_the_agents_lists_and_scoped_rules_into_account() -> TestResult {
    let dir = tempfile::tempdir()?;
    let policies = dir.path().join("site");
    std::fs::create_dir(&policies)?;
    std::fs::write(policies.join("robots.txt"), ROBOTS)?;
    let rule = "[[rules]]\nhost = \"site.test\"\npath = \"/admin\"\nagents = [\"sbx\"]\naction = \"deny\"\n";
    let toml = format!("{}{}{rule}", agent_toml("sbx", "allow_hosts = [\"site.test\"]\n"), agent_toml("open", ""));
    let config = dir.path().join("agentgate.toml");
    std::fs::write(&config, &toml)?;
    let line = line_of(&toml, "id = \"sbx\"", "allow_hosts")?;
    let (config_arg, dir_arg) = (config.display().to_string(), policies.display().to_string());
    let explain = |agent: &'static str, url: &'static str| {
        let (config_arg, dir_arg) = (config_arg.clone(), dir_arg.clone());
        async move {
            let args = ["explain", "--config", &config_arg, "--agent", agent, "--policy-dir", &dir_arg, url];
            let (code, stdout, stderr) = agentgate(&args).await?;
            let json: Value = if code == 2 { Value::Null } else { serde_json::from_str(&stdout)? };
            TestResult::Ok((code, json, stderr))
        }
    };
    let (code, json, _) = explain("sbx", "http://other.test/page").await?;
    assert_eq!((code, &json["decision"]), (1, &json!("deny")), "{json:#}");
    assert_eq!(json["reasons"][0]["code"], "operator.not_allowlisted");
    assert_eq!(json["reasons"][0]["line"], line);
    let rule_text = json["reasons"][0]["rule"].as_str().unwrap_or_default();
    assert!(
        rule_text.starts_with(&format!("{config_arg}:{line}: [[agents]] #1 id = \"sbx\" allow_hosts")),
        "{rule_text}"
    );
    assert_eq!(json["policies"], json!({}), "the site's files are not read for a refused host");
    let (code, json, _) = explain("sbx", "http://site.test/private").await?;
    assert_eq!((code, &json["reasons"][0]["code"]), (1, &json!("robots.disallow")), "a listed host: the site decides");
    let (code, json, _) = explain("sbx", "http://SITE.test./admin").await?;
    assert_eq!((code, &json["reasons"][0]["code"]), (1, &json!("operator.deny")), "the rule scoped to sbx: {json:#}");
    let (code, json, _) = explain("open", "http://site.test/admin").await?;
    assert_eq!((code, &json["decision"]), (0, &json!("allow")), "not scoped to open: {json:#}");
    let (code, _, stderr) = explain("nobody", "http://site.test/").await?;
    assert_eq!(code, 2);
    assert!(stderr.contains("agent \"nobody\"") && stderr.contains("sbx, open"), "{stderr}");

    // The admin API's /explain: the same decision, and nothing looked up or fetched for it.
    let ca = TestCa::new("origin CA")?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("other.test", "127.0.0.2")])?;
    let proxy = start(&ca, &net, &toml).await?;
    let url = admin_url(&proxy, "/explain?agent=sbx&url=http://other.test:8080/page")?;
    let explained: Value = serde_json::from_str(&admin_client()?.get(url).send().await?.text().await?)?;
    assert_eq!(explained["decision"], "deny", "{explained:#}");
    assert_eq!(explained["reasons"][0]["code"], "operator.not_allowlisted");
    assert!(!net.looked_up("other.test"), "{:?}", net.lookups());
    Ok(())
}

#[tokio::test]
async fn explain_gives_needs_approval_for_a_host_the_agent_holds_naming_the_line_once() -> TestResult {
    let dir = tempfile::tempdir()?;
    let policies = dir.path().join("site");
    std::fs::create_dir(&policies)?;
    let toml = hold_toml();
    let config = dir.path().join("agentgate.toml");
    std::fs::write(&config, &toml)?;
    let line = line_of(&toml, "id = \"sbx\"", "allow_hosts")?;
    let (config_arg, dir_arg) = (config.display().to_string(), policies.display().to_string());
    let base = ["explain", "--config", &config_arg, "--policy-dir", &dir_arg];
    let json_args = [&base[..], &["--agent", "sbx", "http://other.test/page"]].concat();
    let (code, stdout, stderr) = agentgate(&json_args).await?;
    let json: Value = serde_json::from_str(&stdout).map_err(|e| format!("{e}: {stdout} {stderr}"))?;
    assert_eq!((code, &json["decision"]), (1, &json!("needs_approval")), "as the proxy decides it: {json:#}");
    assert_eq!(json["reasons"][0]["code"], "operator.not_allowlisted");
    let peer_args = [&base[..], &["--agent", "peer", "http://other.test/page"]].concat();
    let (_, stdout, _) = agentgate(&peer_args).await?;
    let json: Value = serde_json::from_str(&stdout)?;
    assert_eq!(json["decision"], "deny", "an agent that does not hold refuses: {json:#}");

    let text_args = [&base[..], &["--agent", "sbx", "--format", "text", "http://other.test/page"]].concat();
    let (_, text, _) = agentgate(&text_args).await?;
    let located = format!("{config_arg}:{line}:");
    assert_eq!(text.matches(&located).count(), 1, "file and line once: {text}");
    assert!(text.contains(&format!("  operator: {located} [[agents]] #1 id = \"sbx\"")), "{text}");
    assert!(!text.contains(&format!("operator:{line}:")), "{text}");
    Ok(())
}

/// A proxy started from the config file `dir/agentgate.toml` (written as `base` + `agents`), with
/// its reloader, resolving and dialling through `net`: the proxy address, the admin address
/// (when `base` turns it on), the reloader, the file and the running task.
struct Reloadable {
    addr: std::net::SocketAddr,
    admin: Option<std::net::SocketAddr>,
    reloader: Arc<agentgate::reload::Reloader>,
    path: std::path::PathBuf,
    task: tokio::task::JoinHandle<()>,
}

impl Reloadable {
    async fn start(dir: &std::path::Path, net: &Arc<Net>, base: &str, agents: &str) -> TestResult<Reloadable> {
        agentgate::tls::install_default_provider();
        let path = dir.join("agentgate.toml");
        std::fs::write(&path, format!("{base}{agents}"))?;
        let source = agentgate::reload::ConfigSource { path: Some(path.clone()), ..Default::default() };
        let proxy = agentgate::app::Proxy::with_network(
            Arc::new(source.load()?),
            Arc::clone(net) as Arc<dyn Resolve>,
            Arc::clone(net) as Arc<dyn Dial>,
        )?;
        let running = proxy.bind().await?;
        let (addr, admin, reloader) = (running.local_addr(), running.admin_addr(), running.reloader(source));
        let task = tokio::spawn(running.run_until(std::future::pending()));
        Ok(Reloadable { addr, admin, reloader, path, task })
    }

    /// Rewrites the file with `agents` after `base` and reloads it.
    fn reload(&self, base: &str, agents: &str) -> TestResult {
        std::fs::write(&self.path, format!("{base}{agents}"))?;
        assert!(self.reloader.reload()?.needs_restart.is_empty());
        Ok(())
    }

    /// A client through the proxy as agent `id` (its token `<id>-secret`).
    fn client_as(&self, id: &str) -> TestResult<reqwest::Client> {
        let proxy = reqwest::Proxy::all(format!("http://{}", self.addr))?.basic_auth(id, &format!("{id}-secret"));
        Ok(reqwest::Client::builder().proxy(proxy).build()?)
    }
}

#[tokio::test]
async fn a_reload_that_adds_a_host_to_a_running_agents_list_admits_it() -> TestResult {
    let other = site_on("127.0.0.2", Site::new())?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("other.test", "127.0.0.2")])?;
    let dir = tempfile::tempdir()?;
    let base = format!(
        "listen = \"127.0.0.1:0\"\n[ca]\ndir = {:?}\n[audit]\npath = {:?}\n[admin]\nlisten = \"off\"\n\
         [network]\nallow_cidrs = [\"127.0.0.0/8\"]\n",
        dir.path().join("ca"),
        dir.path().join("decisions.jsonl"),
    );
    let proxy =
        Reloadable::start(dir.path(), &net, &base, &agent_toml("sbx", "allow_hosts = [\"site.test\"]\n")).await?;
    let sbx = proxy.client_as("sbx")?;
    let url = format!("http://other.test:{}/page", other.addr.port());
    let refused = sbx.get(&url).send().await?;
    assert_eq!(refused.status(), 403);
    assert!(header(&refused, "agentgate-decision").contains("code=operator.not_allowlisted"));

    proxy.reload(&base, &agent_toml("sbx", "allow_hosts = [\"site.test\", \"other.test\"]\n"))?;
    assert_eq!(sbx.get(&url).send().await?.status(), 200, "admitted without a restart, on the same client");
    assert_eq!(other.hits("/page"), 1);
    proxy.task.abort();
    Ok(())
}

/// What the scripted agent of the `audit suggest` test does: three hosts, two over plain
/// HTTP and one over HTTPS through a CONNECT.
async fn scripted_run(client: &reqwest::Client, ports: [u16; 3]) -> TestResult<Vec<u16>> {
    let [a, b, c] = ports;
    let mut statuses = Vec::new();
    for url in [
        format!("http://a.test:{a}/one"),
        format!("http://a.test:{a}/two"),
        format!("http://a.test:{a}/three"),
        format!("http://b.test:{b}/one"),
        format!("http://b.test:{b}/two"),
        format!("https://c.test:{c}/one"),
    ] {
        statuses.push(client.get(url).send().await?.status().as_u16());
    }
    Ok(statuses)
}

#[tokio::test]
async fn audit_suggest_learns_an_allowlist_from_a_monitor_run_that_config_check_and_enforce_mode_accept() -> TestResult
{
    use std::io::Write as _;

    let ca = TestCa::new("origin CA")?;
    let a = site_on("127.0.0.1", Site::new())?;
    let b = site_on("127.0.0.2", Site::new())?;
    let c_listener = std::net::TcpListener::bind(("127.0.0.3", 0))?;
    let c = Origin::on_listener(c_listener, Some(ca.server_config_for(&["c.test"])?), Site::new())?;
    let d = site_on("127.0.0.4", Site::new())?;
    let names = [
        ("a.test", "127.0.0.1"),
        ("b.test", "127.0.0.2"),
        ("c.test", "127.0.0.3"),
        ("d.test", "127.0.0.4"),
        ("meta.test", "169.254.169.254"),
    ];
    let ports = [a.addr.port(), b.addr.port(), c.addr.port()];
    let meta = "http://meta.test/latest/meta-data";

    // The monitor run: sbx may reach nothing yet, and is only watched.
    let net = Net::new(&names)?;
    let monitor =
        format!("{}{}", agent_toml("sbx", "mode = \"monitor\"\nallow_hosts = []\n"), agent_toml("helper", ""));
    let proxy = start(&ca, &net, &monitor).await?;
    let sbx = client_as(&proxy, "sbx", "sbx-secret")?;
    assert_eq!(scripted_run(&sbx, ports).await?, [200; 6], "monitor mode forwards");
    assert_eq!(sbx.get(meta).send().await?.status(), 403, "the network guard refuses in monitor mode too");
    let helper = client_as(&proxy, "helper", "helper-secret")?;
    assert_eq!(helper.get(format!("http://d.test:{}/", d.addr.port())).send().await?.status(), 200);
    let (records, text) = proxy.finish_with_text().await?;
    let would_deny = records.iter().filter(|r| r["event.action"] == "would_deny").count();
    assert_eq!(would_deny, 6, "what the empty list would have stopped");

    // The log as logrotate leaves it: the older half gzip'd.
    let dir = tempfile::tempdir()?;
    let lines: Vec<&str> = text.lines().collect();
    let (old, new) = lines.split_at(lines.len() / 2);
    let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gzip.write_all(format!("{}\n", old.join("\n")).as_bytes())?;
    let (rotated, current) = (dir.path().join("decisions.jsonl.1"), dir.path().join("decisions.jsonl"));
    std::fs::write(&rotated, gzip.finish()?)?;
    std::fs::write(&current, format!("{}\n", new.join("\n")))?;
    let logs = [rotated.display().to_string(), current.display().to_string()];

    let (code, suggested, stderr) = agentgate(&["audit", "suggest", "--agent", "sbx", &logs[0], &logs[1]]).await?;
    assert_eq!(code, 0, "{stderr}");
    let [pa, pb, pc] = ports;
    for expected in [
        format!("\"a.test:{pa}\",  # 3 requests"),
        format!("\"b.test:{pb}\",  # 2 requests"),
        format!("\"c.test:{pc}\",  # 1 request"),
        "#   meta.test:80: network.private_address, 1 request".to_owned(),
    ] {
        assert!(suggested.contains(&expected), "{expected:?} in:\n{suggested}");
    }
    assert!(suggested.starts_with("allow_hosts = [\n"), "with --agent, its line alone:\n{suggested}");
    assert!(!suggested.contains("d.test"), "another agent's host:\n{suggested}");
    let (code, every, _) = agentgate(&["audit", "suggest", &logs[0], &logs[1]]).await?;
    assert_eq!(code, 0);
    assert!(every.contains("# agent \"helper\": 1 request to 1 host;"), "{every}");
    assert!(every.contains("# agent \"sbx\": 7 requests to 3 hosts;"), "{every}");

    // Pasted into sbx's table in place of its lists: config check accepts it.
    let enforce = format!("{}{}", agent_toml("sbx", &suggested), agent_toml("helper", ""));
    let config = dir.path().join("agentgate.toml");
    std::fs::write(&config, &enforce)?;
    let (code, stdout, stderr) = agentgate(&["config", "check", &config.display().to_string()]).await?;
    assert_eq!(code, 0, "config check accepts the suggestion:\n{enforce}\n{stderr}");
    assert!(stdout.contains(": ok"), "{stdout}");

    // The same traffic in enforce mode: nothing the list refuses; a fourth host is refused.
    let net = Net::new(&names)?;
    let proxy = start(&ca, &net, &enforce).await?;
    let sbx = client_as(&proxy, "sbx", "sbx-secret")?;
    assert_eq!(scripted_run(&sbx, ports).await?, [200; 6]);
    let records = proxy.log_lines(6).await?;
    assert!(
        records
            .iter()
            .all(|r| r["event.action"] == "allow" && r["agentgate.reasons"][0]["code"] != "operator.not_allowlisted"),
        "{records:#?}"
    );
    let fourth = sbx.get(format!("http://d.test:{}/", d.addr.port())).send().await?;
    assert_eq!(fourth.status(), 403);
    assert!(header(&fourth, "agentgate-decision").contains("code=operator.not_allowlisted"));
    // The host the guard refused was left out, so it is refused before it is even looked up.
    assert_eq!(sbx.get(meta).send().await?.status(), 403);
    assert!(!net.looked_up("meta.test") && !net.looked_up("d.test"), "{:?}", net.lookups());
    Ok(())
}

#[tokio::test]
async fn a_held_connect_approved_for_this_request_opens_its_tunnel_and_each_request_inside_is_recorded() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let listener = std::net::TcpListener::bind(("127.0.0.2", 0))?;
    let site = Site::new().file("/robots.txt", ROBOTS);
    let secure = Origin::on_listener(listener, Some(ca.server_config_for(&["secure.test"])?), site)?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("secure.test", "127.0.0.2")])?;
    let proxy = start(&ca, &net, &hold_toml()).await?;
    let sbx = client_as(&proxy, "sbx", "sbx-secret")?;
    let port = secure.addr.port();

    let waiting = tokio::spawn(sbx.get(format!("https://secure.test:{port}/page")).send());
    let listed = pending(&proxy, ADMIN, 1).await?;
    assert_eq!((&listed[0]["method"], &listed[0]["new_host"]), (&json!("CONNECT"), &json!("secure.test")));
    assert!(!net.dialled(secure.addr), "held before it is dialled");
    let held_record = listed[0]["record_id"].as_str().ok_or("a record id")?.to_owned();
    let (status, _) =
        answer(&proxy, listed[0]["id"].as_str().ok_or("an id")?, ADMIN, json!({"decision": "approve"})).await?;
    assert_eq!(status, 200);
    assert_eq!(waiting.await??.status(), 200, "the tunnel opened and its request went on");
    // Inside the approved tunnel the site's files still decide; nothing more is held.
    let private = sbx.get(format!("https://secure.test:{port}/private")).send().await?;
    assert_eq!(private.status(), 403);
    assert!(header(&private, "agentgate-decision").contains("code=robots.disallow"));
    assert!(pending(&proxy, ADMIN, 0).await?.is_empty());

    let records = proxy.finish().await?;
    let connect = by_id(&records, &held_record)?;
    assert_eq!((&connect["http.request.method"], &connect["event.action"]), (&json!("CONNECT"), &json!("allow")));
    assert_eq!(
        (&connect["agentgate.approval.decision"], &connect["agentgate.approval.by"]),
        (&json!("approved"), &json!("alice"))
    );
    let page = for_request(&records, "GET", "/page");
    let [page] = page.as_slice() else { return Err(format!("one GET /page: {records:#?}").into()) };
    assert_ne!(page["event.id"], held_record.as_str(), "each request inside has its own record");
    let reasons = page["agentgate.reasons"].as_array().ok_or("reasons")?;
    let approved = reasons.iter().find(|r| r["code"] == "operator.host_approved").ok_or("the approval is cited")?;
    assert!(approved["rule"].as_str().is_some_and(|r| r.ends_with("alice approved this request")), "{approved}");
    Ok(())
}

/// A held CONNECT a human denies is answered inside its tunnel, where reqwest's HTTPS reads
/// who denied it and why, under the held request's record; the host is never dialled.
#[tokio::test]
async fn a_held_connect_denied_by_a_human_is_read_inside_its_tunnel() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let listener = std::net::TcpListener::bind(("127.0.0.2", 0))?;
    let secure = Origin::on_listener(listener, Some(ca.server_config_for(&["secure.test"])?), Site::new())?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("secure.test", "127.0.0.2")])?;
    let proxy = start(&ca, &net, &hold_toml()).await?;
    let sbx = client_as(&proxy, "sbx", "sbx-secret")?;

    let waiting = tokio::spawn(sbx.get(format!("https://secure.test:{}/page", secure.addr.port())).send());
    let listed = pending(&proxy, ADMIN, 1).await?;
    let held_record = listed[0]["record_id"].as_str().ok_or("a record id")?.to_owned();
    let deny = json!({"decision": "deny", "reason": "not this week"});
    assert_eq!(answer(&proxy, listed[0]["id"].as_str().ok_or("an id")?, ADMIN, deny).await?.0, 200);
    let denied = waiting.await??;
    assert_eq!(denied.status(), 403);
    let decision = header(&denied, "agentgate-decision");
    assert!(decision.contains("approval=denied; by=alice"), "{decision}");
    assert!(decision.ends_with(&format!("record={held_record}")), "{decision}");
    assert!(denied.text().await?.contains("not this week"), "the approver's reason reaches the agent");
    assert!(!net.dialled(secure.addr), "a denied host is never dialled: {:?}", net.lookups());

    let records = proxy.finish().await?;
    assert_eq!(records.len(), 1, "{records:#?}");
    let connect = by_id(&records, &held_record)?;
    assert_eq!(
        (&connect["http.request.method"], &connect["http.response.status_code"]),
        (&json!("CONNECT"), &json!(403))
    );
    assert_eq!(connect["agentgate.approval.decision"], "denied", "{connect:#}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs chromium and chromium-driver: run by scripts/test.sh"]
async fn the_console_shows_a_new_host_and_grants_it_to_the_agent() -> TestResult {
    use fantoccini::Locator;

    use crate::support::browser::{Browser, PAGE_DEADLINE};

    let ca = TestCa::new("origin CA")?;
    let other = site_on("127.0.0.2", Site::new())?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("other.test", "127.0.0.2")])?;
    let proxy = start(&ca, &net, &hold_toml()).await?;
    let browser = Browser::start().await?;
    browser.client.goto(&admin_url(&proxy, "/")?).await?;
    browser.client.find(Locator::Id("token")).await?.send_keys("alice-secret").await?;
    browser.client.find(Locator::Id("login-submit")).await?.click().await?;
    browser.wait_until("document.getElementById('pending')", "the console after the login", PAGE_DEADLINE).await?;

    let url = format!("http://other.test:{}/page", other.addr.port());
    let waiting = tokio::spawn(client_as(&proxy, "sbx", "sbx-secret")?.get(&url).send());
    let row = "document.querySelector('#pending tr.pending')";
    browser.wait_until(row, "the held request in the pending list", PAGE_DEADLINE).await?;
    let text = browser.eval(&format!("{row}.innerText")).await?;
    assert!(text.as_str().unwrap_or_default().contains("agent sbx wants to reach other.test"), "{text}");
    let remember = browser.client.find(Locator::Css("#pending tr.pending select.remember")).await?;
    remember.select_by_value("host-for-agent").await?;
    browser.client.find(Locator::Css("#pending tr.pending button.approve")).await?.click().await?;
    let response = tokio::time::timeout(PAGE_DEADLINE, waiting).await.map_err(|_| "still held")???;
    assert_eq!(response.status(), 200);
    let grant = "[...document.querySelectorAll('#grants tr.grant')].find(r => r.innerText.includes('other.test'))";
    browser.wait_until(grant, "the grant in the host grants table", PAGE_DEADLINE).await?;
    let text = browser.eval(&format!("{grant}.innerText")).await?;
    let text = text.as_str().unwrap_or_default();
    assert!(text.contains("sbx") && text.contains("alice"), "{text}");
    browser.close().await?;
    let again = client_as(&proxy, "sbx", "sbx-secret")?.get(&url).send().await?;
    assert_eq!(again.status(), 200, "granted for a while: no hold");
    Ok(())
}

/// A host granted to an agent (`host-for-agent`) is still refused once a reload puts it on
/// the agent's `deny_hosts`: a grant admits an unlisted host, never a denied one.
#[tokio::test]
async fn a_grant_does_not_admit_a_host_a_reload_then_denies() -> TestResult {
    let other = site_on("127.0.0.2", Site::new())?;
    let net = Net::new(&[("site.test", "127.0.0.1"), ("other.test", "127.0.0.2")])?;
    let dir = tempfile::tempdir()?;
    let base = format!(
        "listen = \"127.0.0.1:0\"\n[ca]\ndir = {:?}\n[audit]\npath = {:?}\n[network]\nallow_cidrs = [\"127.0.0.0/8\"]\n\
         [approvals]\nmode = \"hold\"\n[admin]\nlisten = \"127.0.0.1:0\"\n[[admin.tokens]]\nname = \"alice\"\nsha256 = \"{ALICE_SHA256}\"\n",
        dir.path().join("ca"),
        dir.path().join("decisions.jsonl"),
    );
    let hold = "allow_hosts = [\"site.test\"]\nunlisted = \"hold\"\n";
    let proxy = Reloadable::start(dir.path(), &net, &base, &agent_toml("sbx", hold)).await?;
    let admin = proxy.admin.ok_or("an admin address")?;
    let sbx = proxy.client_as("sbx")?;
    let url = format!("http://other.test:{}/page", other.addr.port());

    // Held, then granted to the agent by alice.
    let waiting = tokio::spawn(sbx.get(&url).send());
    let listed = eventually("the held request listed", async || {
        let listing = admin_client()?.get(format!("http://{admin}/approvals")).bearer_auth("alice-secret").send();
        let body: Value = serde_json::from_str(&listing.await?.text().await?)?;
        match body["pending"].as_array() {
            Some(pending) if pending.len() == 1 => Ok(pending[0].clone()),
            _ => Err(format!("not yet: {body}").into()),
        }
    })
    .await?;
    let id = listed["id"].as_str().ok_or("an id")?;
    let grant = json!({"decision": "approve", "remember": "host-for-agent", "ttl": "10m"});
    let granted = admin_client()?
        .post(format!("http://{admin}/approvals/{id}"))
        .bearer_auth("alice-secret")
        .header("content-type", "application/json")
        .body(grant.to_string())
        .send()
        .await?;
    assert_eq!(granted.status(), 200);
    assert_eq!(waiting.await??.status(), 200);
    assert_eq!(sbx.get(&url).send().await?.status(), 200, "granted");

    // The operator denies the host: the grant no longer admits it.
    proxy.reload(&base, &agent_toml("sbx", &format!("{hold}deny_hosts = [\"other.test\"]\n")))?;
    let refused = sbx.get(&url).send().await?;
    assert_eq!(refused.status(), 403);
    assert!(header(&refused, "agentgate-decision").contains("code=operator.denied_host"), "{refused:?}");
    assert_eq!(other.hits("/page"), 2, "the two requests before the reload only");
    proxy.task.abort();
    Ok(())
}
