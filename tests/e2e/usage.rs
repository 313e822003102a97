//! Usage preferences end to end (SEMANTICS §6.6, docs/usage.md): robots.txt `Content-Usage`
//! and `Content-Signal` lines refuse an agent declared for training before the origin sees
//! the request, never one declared for search, and only record them for an agent that
//! declares nothing (unless `[usage] undeclared = "deny"`); a `Content-Usage` or
//! `tdm-reservation` response header withholds the body from a training agent and passes
//! it unchanged to a search agent; `/.well-known/tdmrep.json` is fetched for a training agent
//! only, once (once for a fleet sharing Redis), and refuses its reserved locations (a missing
//! or unreachable file allows);
//! monitor mode records `would_deny` and forwards. Over plain HTTP and MITM'd HTTPS, with
//! reqwest, curl and python3's urllib.

use agentgate::agents::AgentConfig;
use agentgate::config::Config;
use agentgate::policy::operator::Mode;
use agentgate::policy::usage::Undeclared;
use serde_json::Value;
use tokio::process::Command;

use crate::agents::{agent, client_as};
use crate::redis::RedisServer;
use crate::reload::base_config;
use crate::support::binary::Agentgate;
use crate::support::block::{self, Expected};
use crate::support::curl::curl;
use crate::support::log::for_request;
use crate::support::origin::{Origin, Served, Site};
use crate::support::pki::TestCa;
use crate::support::{TestProxy, TestResult, header};

/// Plain HTTP or HTTPS through a MITM'd CONNECT tunnel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Over {
    Http,
    Https,
}

/// aipref's attach example: training refused everywhere (line 3) but under `/open/` (line 4).
const CONTENT_USAGE: &str = "User-agent: *\nAllow: /\nContent-Usage: train-ai=n\nContent-Usage: /open/ train-ai=y\n";
/// Cloudflare's managed robots.txt: search yes, training no (line 2), for the whole group.
const CONTENT_SIGNAL: &str = "User-agent: *\nContent-Signal: search=yes, ai-train=no\nAllow: /\n";

async fn origin_for(over: Over, ca: &TestCa, site: Site) -> TestResult<Origin> {
    match over {
        Over::Http => Origin::http_site(site).await,
        Over::Https => Origin::https_site(ca, site).await,
    }
}

/// The two robots.txt origins.
async fn usage_origins(over: Over, ca: &TestCa) -> TestResult<(Origin, Origin)> {
    let usage = origin_for(over, ca, Site::new().file("/robots.txt", CONTENT_USAGE)).await?;
    let signal = origin_for(over, ca, Site::new().file("/robots.txt", CONTENT_SIGNAL)).await?;
    Ok((usage, signal))
}

/// Agents `trainer` (`train-ai`), `searcher` (`search`) and `plain` (nothing), each with a token.
fn three_agents(config: &mut Config) {
    let declaring = |id: &str, purposes: &[&str]| AgentConfig {
        purposes: purposes.iter().map(|p| (*p).to_owned()).collect(),
        ..agent(id, &format!("{id}-token"))
    };
    config.agents =
        vec![declaring("trainer", &["train-ai"]), declaring("searcher", &["search"]), declaring("plain", &[])];
}

fn refused(line: u64, rule: &'static str) -> Expected<'static> {
    Expected {
        decision: "deny",
        source: "usage",
        code: "usage.refused",
        line: Some(line),
        rule,
        advice: "Other purposes may be fine",
    }
}

/// The `agentgate.usage` entries of a record as `(source, line, label, value, stance)`.
fn usage_of(record: &Value) -> Vec<(String, Value, String, String, String)> {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    record["agentgate.usage"]
        .as_array()
        .map(|prefs| {
            prefs
                .iter()
                .map(|p| {
                    (text(&p["source"]), p["line"].clone(), text(&p["label"]), text(&p["value"]), text(&p["stance"]))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn pref(
    source: &str,
    line: Option<u64>,
    label: &str,
    value: &str,
    stance: &str,
) -> (String, Value, String, String, String) {
    let line = line.map_or(Value::Null, Value::from);
    (source.to_owned(), line, label.to_owned(), value.to_owned(), stance.to_owned())
}

async fn robots_lines_decide_by_declared_purpose(over: Over) -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let (usage, signal) = usage_origins(over, &ca).await?;
    let proxy = TestProxy::start_with(&ca, three_agents).await?;
    let trainer = client_as(&proxy, "trainer", "trainer-token")?;
    let searcher = client_as(&proxy, "searcher", "searcher-token")?;
    let plain = client_as(&proxy, "plain", "plain-token")?;

    // The training agent: refused where the site refuses training, with the line...
    let docs = block::plain(trainer.get(usage.url("/docs/x")).send().await?, &refused(3, "train-ai=n")).await?;
    let json = trainer.get(signal.url("/page")).header("accept", "application/json").send().await?;
    let page = block::json(json, &refused(2, "ai-train=no")).await?;
    // ... and allowed where a longer rule says yes.
    let open = trainer.get(usage.url("/open/x")).send().await?;
    assert_eq!(open.status(), 200, "line 4 allows training under /open/");
    // A training refusal refuses neither search nor an agent that declared nothing.
    for (client, who) in [(&searcher, "searcher"), (&plain, "plain")] {
        for url in [usage.url("/docs/x"), usage.url("/open/x"), signal.url("/page")] {
            let response = client.get(&url).send().await?;
            assert_eq!(response.status(), 200, "{who} {url}");
            assert!(response.text().await?.starts_with("page GET /"), "{who} {url}: the origin answered");
        }
    }
    assert_eq!(usage.hits("/docs/x"), 2, "the origin never saw the refused request");
    assert_eq!(signal.hits("/page"), 2, "the origin never saw the refused request");

    let records = proxy.finish().await?;
    block::logged(&records, &docs, "GET", &refused(3, "train-ai=n"))?;
    block::logged(&records, &page, "GET", &refused(2, "ai-train=no"))?;
    let by = |id: &str, origin: &Origin, path: &str| {
        for_request(&records, "GET", &origin.url(path)).into_iter().find(|r| r["agentgate.agent"] == id).cloned()
    };
    let plain_docs = by("plain", &usage, "/docs/x").ok_or("no record of plain's /docs/x")?;
    assert_eq!(plain_docs["event.action"], "allow");
    assert_eq!(
        usage_of(&plain_docs),
        vec![pref("robots.txt Content-Usage", Some(3), "train-ai", "n", "refuse")],
        "the record shows what the site said: {plain_docs:#}"
    );
    let trainer_open = by("trainer", &usage, "/open/x").ok_or("no record of trainer's /open/x")?;
    assert_eq!(usage_of(&trainer_open), vec![pref("robots.txt Content-Usage", Some(4), "train-ai", "y", "allow")]);
    let searcher_page = by("searcher", &signal, "/page").ok_or("no record of searcher's /page")?;
    assert_eq!(
        usage_of(&searcher_page),
        vec![
            pref("robots.txt Content-Signal", Some(2), "search", "yes", "allow"),
            pref("robots.txt Content-Signal", Some(2), "ai-train", "no", "refuse"),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn robots_txt_usage_lines_refuse_a_training_agent_only_over_plain_http() -> TestResult {
    robots_lines_decide_by_declared_purpose(Over::Http).await
}

#[tokio::test]
async fn robots_txt_usage_lines_refuse_a_training_agent_only_over_mitm_https() -> TestResult {
    robots_lines_decide_by_declared_purpose(Over::Https).await
}

/// python3's urllib through the proxy `argv[1]`, trusting `argv[2]`, asking for `argv[3]` with
/// `agentgate-purpose: argv[4]`: the status on the first line, then the body.
const PYTHON_CLIENT: &str = r#"
import ssl, sys, urllib.error, urllib.request
context = ssl.create_default_context(cafile=sys.argv[2])
proxies = urllib.request.ProxyHandler({"http": sys.argv[1], "https": sys.argv[1]})
opener = urllib.request.build_opener(proxies, urllib.request.HTTPSHandler(context=context))
request = urllib.request.Request(sys.argv[3], headers={"agentgate-purpose": sys.argv[4]})
try:
    response = opener.open(request, timeout=10)
except urllib.error.HTTPError as error:
    response = error
print(response.getcode())
print(response.read().decode("utf-8", "replace"))
"#;

/// What python3's urllib got for `url` declaring `purpose`: the status and the body.
async fn python(proxy: &TestProxy, url: &str, purpose: &str) -> TestResult<(u16, String)> {
    let ca = proxy.ca_path.display().to_string();
    let output = Command::new("python3").args(["-c", PYTHON_CLIENT, &proxy.url(), &ca, url, purpose]).output().await?;
    let text = String::from_utf8(output.stdout)?;
    let (status, body) = text
        .split_once('\n')
        .ok_or_else(|| format!("python3 {url}: {text:?} {}", String::from_utf8_lossy(&output.stderr)))?;
    Ok((status.trim().parse()?, body.to_owned()))
}

/// curl through `proxy` (trusting its CA) declaring `purpose` by header.
async fn curl_as(proxy: &TestProxy, url: &str, purpose: &str) -> TestResult<(u16, String)> {
    let ca = proxy.ca_path.display().to_string();
    let declared = format!("agentgate-purpose: {purpose}");
    let out = curl(&["-x", &proxy.url(), "--cacert", &ca, "-H", &declared, url]).await?;
    Ok((out.status, String::from_utf8(out.body)?))
}

#[tokio::test]
async fn curl_and_python_declaring_training_by_header_are_refused_by_robots_txt_lines() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start(&ca).await?;
    for over in [Over::Http, Over::Https] {
        let (usage, signal) = usage_origins(over, &ca).await?;
        for (client, (status, body)) in [
            ("curl", curl_as(&proxy, &usage.url("/docs/x"), "train-ai").await?),
            ("python", python(&proxy, &usage.url("/docs/x"), "train-ai").await?),
        ] {
            assert_eq!(status, 403, "{client} {over:?}: {body}");
            assert!(body.contains("[usage.refused]"), "{client} {over:?}: the body names the code: {body}");
            assert!(body.contains("- usage line 3: \""), "{client} {over:?}: the body names the line: {body}");
            assert!(body.contains("train-ai=n"), "{client} {over:?}: the body quotes the preference: {body}");
        }
        let (status, body) = python(&proxy, &signal.url("/page"), "train-ai").await?;
        assert_eq!(status, 403, "python {over:?}: {body}");
        assert!(body.contains("- usage line 2: \"") && body.contains("ai-train=no"), "{body}");
        for (client, (status, body)) in [
            ("curl", curl_as(&proxy, &usage.url("/docs/x"), "search").await?),
            ("python", python(&proxy, &signal.url("/page"), "search").await?),
            ("curl", curl_as(&proxy, &usage.url("/open/x"), "train-ai").await?),
        ] {
            assert_eq!(status, 200, "{client} {over:?}: {body}");
            assert!(body.starts_with("page GET /"), "{client} {over:?}: the origin answered: {body}");
        }
        assert_eq!(usage.hits("/docs/x"), 1, "{over:?}: only the search request reached the origin");
        assert_eq!(signal.hits("/page"), 1, "{over:?}: only the search request reached the origin");
    }
    Ok(())
}

#[tokio::test]
async fn undeclared_deny_refuses_an_agent_that_declares_nothing() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start_with(&ca, |config| config.usage.undeclared = Undeclared::Deny).await?;
    let client = proxy.client()?;
    for over in [Over::Http, Over::Https] {
        let (usage, signal) = usage_origins(over, &ca).await?;
        block::plain(client.get(usage.url("/docs/x")).send().await?, &refused(3, "train-ai=n")).await?;
        block::plain(client.get(signal.url("/page")).send().await?, &refused(2, "ai-train=no")).await?;
        let (status, body) = python(&proxy, &usage.url("/docs/x"), "").await?;
        assert_eq!(status, 403, "python {over:?}, no purpose declared: {body}");
        let open = client.get(usage.url("/open/x")).send().await?;
        assert_eq!(open.status(), 200, "{over:?}: nothing refuses /open/");
        assert_eq!((usage.hits("/docs/x"), signal.hits("/page")), (0, 0), "{over:?}: never reached the origin");
    }
    Ok(())
}

/// An origin whose pages state their preferences in response headers.
fn header_site() -> Site {
    Site::new()
        .serve("/usage-header", 200, &[("content-usage", "train-ai=n, search=y")], "ORIGIN-BYTES content-usage")
        .serve(
            "/tdm-header",
            200,
            &[("tdm-reservation", "1"), ("tdm-policy", "https://example.com/tdm-policy.json")],
            "ORIGIN-BYTES tdm-reservation",
        )
}

async fn response_headers_withhold_the_body_from_a_training_agent(over: Over) -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = origin_for(over, &ca, header_site()).await?;
    let proxy = TestProxy::start_with(&ca, three_agents).await?;
    let trainer = client_as(&proxy, "trainer", "trainer-token")?;
    let searcher = client_as(&proxy, "searcher", "searcher-token")?;

    for (path, header_name, rule) in [
        ("/usage-header", "header Content-Usage", "train-ai=n"),
        ("/tdm-header", "header tdm-reservation", "tdm-reservation=1"),
    ] {
        let response = trainer.get(origin.url(path)).send().await?;
        assert_eq!(response.status(), 403, "{over:?} {path}");
        let decision = header(&response, "agentgate-decision");
        assert!(decision.starts_with("deny; source=usage; code=usage.refused; record="), "{decision}");
        assert!(response.headers().get("content-usage").is_none(), "the origin's head is withheld too");
        let body = response.text().await?;
        assert!(!body.contains("ORIGIN-BYTES"), "{over:?} {path}: the origin's body never reaches the client: {body}");
        assert!(
            body.contains(header_name) && body.contains(rule),
            "{over:?} {path}: the body names the header: {body}"
        );
        let (status, body) = curl_as(&proxy, &origin.url(path), "train-ai").await?;
        assert_eq!(status, 403, "curl {over:?} {path}");
        assert!(!body.contains("ORIGIN-BYTES") && body.contains("[usage.refused]"), "curl {over:?} {path}: {body}");

        let passed = searcher.get(origin.url(path)).send().await?;
        assert_eq!(passed.status(), 200, "{over:?} {path}: a search agent is not refused");
        assert!(
            passed.headers().get(if path == "/usage-header" { "content-usage" } else { "tdm-reservation" }).is_some()
        );
        let expected =
            if path == "/usage-header" { "ORIGIN-BYTES content-usage" } else { "ORIGIN-BYTES tdm-reservation" };
        assert_eq!(passed.text().await?, expected, "{over:?} {path}: passed unchanged");
    }

    let records = proxy.finish().await?;
    let of = |id: &str, path: &str| {
        for_request(&records, "GET", &origin.url(path)).into_iter().find(|r| r["agentgate.agent"] == id).cloned()
    };
    let refused_tdm = of("trainer", "/tdm-header").ok_or("no record of the trainer's /tdm-header")?;
    assert_eq!(refused_tdm["event.action"], "deny");
    assert_eq!(refused_tdm["http.response.status_code"], 403);
    assert_eq!(refused_tdm["agentgate.reasons"][0]["code"], "usage.refused");
    assert_eq!(
        usage_of(&refused_tdm),
        vec![
            pref("header tdm-reservation", None, "tdm-reservation", "1", "refuse"),
            pref("header tdm-reservation", None, "tdm-policy", "https://example.com/tdm-policy.json", "none"),
        ]
    );
    let passed = of("searcher", "/usage-header").ok_or("no record of the searcher's /usage-header")?;
    assert_eq!(passed["event.action"], "allow");
    assert_eq!(
        usage_of(&passed),
        vec![
            pref("header Content-Usage", None, "train-ai", "n", "refuse"),
            pref("header Content-Usage", None, "search", "y", "allow"),
        ],
        "what the site said is recorded when it allows too"
    );
    Ok(())
}

#[tokio::test]
async fn usage_response_headers_withhold_the_body_from_a_training_agent_over_plain_http() -> TestResult {
    response_headers_withhold_the_body_from_a_training_agent(Over::Http).await
}

#[tokio::test]
async fn usage_response_headers_withhold_the_body_from_a_training_agent_over_mitm_https() -> TestResult {
    response_headers_withhold_the_body_from_a_training_agent(Over::Https).await
}

#[tokio::test]
async fn monitor_mode_records_would_deny_for_each_usage_refusal_and_forwards() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start_with(&ca, |config| {
        config.mode = Mode::Monitor;
        config.agent.purposes = vec!["train-ai".to_owned()];
    })
    .await?;
    let client = proxy.client()?;
    let mut seen = Vec::new();
    for over in [Over::Http, Over::Https] {
        let (usage, signal) = usage_origins(over, &ca).await?;
        let headers = origin_for(over, &ca, header_site()).await?;
        for (origin, path, body) in [
            (&usage, "/docs/x", "page GET /docs/x"),
            (&signal, "/page", "page GET /page"),
            (&headers, "/usage-header", "ORIGIN-BYTES content-usage"),
            (&headers, "/tdm-header", "ORIGIN-BYTES tdm-reservation"),
        ] {
            let response = client.get(origin.url(path)).send().await?;
            assert_eq!(response.status(), 200, "{over:?} {path}: monitor mode forwards");
            assert!(response.text().await?.starts_with(body), "{over:?} {path}");
            assert_eq!(origin.hits(path), 1, "{over:?} {path}");
            seen.push(origin.url(path));
        }
    }
    let records = proxy.finish().await?;
    for url in &seen {
        let record = match for_request(&records, "GET", url)[..] {
            [record] => record.clone(),
            _ => return Err(format!("expected one record of {url}: {records:#?}").into()),
        };
        assert_eq!(record["event.action"], "would_deny", "{record:#}");
        assert_eq!(record["http.response.status_code"], 200, "{record:#}");
        assert_eq!(record["agentgate.reasons"][0]["code"], "usage.refused", "{record:#}");
        assert!(!usage_of(&record).is_empty(), "{record:#}");
    }
    Ok(())
}

const TDMREP: &str = r#"[
  {"location": "/", "tdm-reservation": 0},
  {"location": "/books/*", "tdm-reservation": 1, "tdm-policy": "https://example.com/tdm-policy.json"}
]"#;
const TDMREP_PATH: &str = "/.well-known/tdmrep.json";

/// The three agents, and `watcher`, declaring `train-ai` in monitor mode.
fn agents_and_a_watcher(config: &mut Config) {
    three_agents(config);
    let watcher = AgentConfig {
        purposes: vec!["train-ai".to_owned()],
        mode: Some(Mode::Monitor),
        ..agent("watcher", "watcher-token")
    };
    config.agents.push(watcher);
}

async fn tdmrep_json_is_fetched_for_training_agents_only(over: Over) -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let site = Site::new().serve(TDMREP_PATH, 200, &[("content-type", "application/json")], TDMREP);
    let origin = origin_for(over, &ca, site).await?;
    let proxy = TestProxy::start_with(&ca, agents_and_a_watcher).await?;
    let trainer = client_as(&proxy, "trainer", "trainer-token")?;
    let searcher = client_as(&proxy, "searcher", "searcher-token")?;

    for path in ["/books/a", "/free"] {
        assert_eq!(searcher.get(origin.url(path)).send().await?.status(), 200, "{over:?} {path}");
    }
    assert_eq!(origin.hits(TDMREP_PATH), 0, "{over:?}: never fetched for a search agent");

    let expected = refused_by_tdmrep();
    let id = block::plain(trainer.get(origin.url("/books/a")).send().await?, &expected).await?;
    let free = trainer.get(origin.url("/free")).send().await?;
    assert_eq!(free.status(), 200, "{over:?}: an unreserved location allows");
    let (status, body) = curl_as(&proxy, &origin.url("/books/b"), "train-ai").await?;
    assert_eq!(status, 403, "curl {over:?}: {body}");
    assert!(body.contains("[usage.refused]") && body.contains("tdm-reservation=1"), "curl {over:?}: {body}");
    let watched = client_as(&proxy, "watcher", "watcher-token")?.get(origin.url("/books/c")).send().await?;
    assert_eq!(watched.status(), 200, "{over:?}: monitor mode forwards");
    assert_eq!(searcher.get(origin.url("/books/a")).send().await?.status(), 200, "a reservation is about training");
    assert_eq!(origin.hits(TDMREP_PATH), 1, "{over:?}: fetched once, then cached");
    assert_eq!((origin.hits("/books/b"), origin.hits("/books/c")), (0, 1), "{over:?}: a refused request never left");
    let admin = proxy.admin_addr.ok_or("the test proxy has an admin API")?;
    let listed = format!("http://{admin}/policies?origin={}", origin.url(""));
    let cached: Value =
        serde_json::from_str(&reqwest::Client::builder().no_proxy().build()?.get(&listed).send().await?.text().await?)?;
    assert_eq!(cached["files"]["tdmrep.json"]["status"], "valid", "{over:?}: listed in /policies: {cached:#}");

    let records = proxy.finish().await?;
    block::logged(&records, &id, "GET", &expected)?;
    let of = |id: &str, path: &str| {
        for_request(&records, "GET", &origin.url(path)).into_iter().find(|r| r["agentgate.agent"] == id).cloned()
    };
    let free = of("trainer", "/free").ok_or("no record of the trainer's /free")?;
    assert_eq!(usage_of(&free), vec![pref("tdmrep.json", Some(1), "tdm-reservation", "0", "allow")]);
    let watched = of("watcher", "/books/c").ok_or("no record of the watcher's /books/c")?;
    assert_eq!(watched["event.action"], "would_deny", "{watched:#}");
    assert_eq!(watched["agentgate.reasons"][0]["code"], "usage.refused", "{watched:#}");
    Ok(())
}

fn refused_by_tdmrep() -> Expected<'static> {
    Expected { line: None, rule: "tdmrep.json for /books/* says tdm-reservation=1", ..refused(0, "") }
}

#[tokio::test]
async fn tdmrep_json_is_fetched_for_training_agents_only_and_refuses_reserved_paths_over_plain_http() -> TestResult {
    tdmrep_json_is_fetched_for_training_agents_only(Over::Http).await
}

#[tokio::test]
async fn tdmrep_json_is_fetched_for_training_agents_only_and_refuses_reserved_paths_over_mitm_https() -> TestResult {
    tdmrep_json_is_fetched_for_training_agents_only(Over::Https).await
}

#[tokio::test]
async fn a_missing_or_unreachable_tdmrep_json_allows_a_training_agent() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let missing = Origin::https_site(&ca, Site::new()).await?;
    // The file redirects to a port nothing listens on: the fetch fails.
    let unreachable = Origin::http_site(Site::new()).await?;
    unreachable.serve(TDMREP_PATH, Served::redirect(302, "http://127.0.0.1:1/tdmrep.json"));
    let proxy = TestProxy::start_with(&ca, three_agents).await?;
    let trainer = client_as(&proxy, "trainer", "trainer-token")?;
    for origin in [&missing, &unreachable] {
        let response = trainer.get(origin.url("/books/a")).send().await?;
        assert_eq!(response.status(), 200, "{}: no preference, so allowed", origin.url(""));
        assert!(response.text().await?.starts_with("page GET /books/a"));
        assert_eq!(origin.hits(TDMREP_PATH), 1, "{}: asked for once", origin.url(""));
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn two_replicas_share_one_fetch_of_tdmrep_json_through_redis() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let site = Site::new().serve(TDMREP_PATH, 200, &[("cache-control", "max-age=3600")], TDMREP);
    let origin = Origin::http_site(site).await?;
    agentgate::tls::install_default_provider();
    let mut replicas = Vec::new();
    for _ in 0..2 {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("agentgate.toml");
        let shared = format!("[cache]\nstore = \"redis\"\n[cache.redis]\nurl = {:?}\n", redis.url());
        let config = format!("{}[agent]\npurposes = [\"train-ai\"]\n{shared}", base_config(dir.path(), &ca));
        std::fs::write(&path, config)?;
        replicas.push((Agentgate::start(dir.path(), &path, "agentgate=info").await?, dir));
    }
    let (first, second) = (replicas[0].0.client()?, replicas[1].0.client()?);
    assert_eq!(first.get(origin.url("/books/a")).send().await?.status(), 403, "the first replica fetched it");
    assert_eq!(second.get(origin.url("/books/b")).send().await?.status(), 403, "the second read the shared copy");
    assert_eq!(second.get(origin.url("/free")).send().await?.status(), 200);
    assert_eq!(origin.hits(TDMREP_PATH), 1, "one fetch of tdmrep.json for the fleet");
    assert_eq!((origin.hits("/books/a"), origin.hits("/books/b")), (0, 0), "refused before the origin");
    Ok(())
}
