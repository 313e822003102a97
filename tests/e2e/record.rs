//! Recording a run and replaying it (`[record]`, `mode = "replay"`, `agentgate record har`,
//! docs/evaluation-guide.md): a scripted agent's run over two origins (an HTML page, JSON, an
//! image, a POST, a request robots.txt refuses, a secret's placeholder towards its bound host)
//! is recorded, then replayed with both origins stopped and a resolver and dialer that count
//! every use: the same answers byte for byte, the same decisions, nothing resolved or dialled,
//! a new URL answered `504 replay.miss`. The recording holds the placeholder, never the value;
//! `record har` passes an independent HAR reader (haralyzer, from PyPI); past `max_bytes`
//! nothing new is recorded, counted and logged once, and the proxy goes on serving.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use agentgate::config::Config;
use agentgate::net::{Dial, NetFuture, Resolve};
use agentgate::policy::operator::Mode;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;

use crate::admin::sample;
use crate::reload::base_config;
use crate::support::binary::Agentgate;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult, header};

const VALUE: &str = "ghp_recordRealValue8c1d2e3f4a5b6c7d";
const PLACEHOLDER: &str = "agp_github_record_0001";
const ROBOTS: &str = "User-agent: *\nDisallow: /private/\n";
const HTML: &str = "<!doctype html><title>Docs</title><p>agents welcome</p>\n";
const JSON: &str = "{\"items\":[1,2,3],\"next\":null}";
/// A PNG signature and header start: bytes that are not UTF-8.
const PNG: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 0x0d, b'I', b'H', b'D', b'R', 0xff, 0xfe];
const POSTED: &str = "{\"query\":\"agents\",\"page\":2}";

/// Counts every lookup and dial it is asked for, and does neither: in replay nothing may be.
#[derive(Default)]
struct Untouched {
    lookups: AtomicUsize,
    dials: AtomicUsize,
}

impl Resolve for Untouched {
    fn resolve<'a>(&'a self, name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
        self.lookups.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Err(io::Error::other(format!("test resolver: {name} looked up in replay"))) })
    }
}

impl Dial for Untouched {
    fn dial(&self, addr: SocketAddr) -> NetFuture<'_, TcpStream> {
        self.dials.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Err(io::Error::other(format!("test dialer: {addr} dialled in replay"))) })
    }
}

/// The two origins of the scripted run: `site` over TLS (its robots.txt refuses `/private/`,
/// and the secret is bound to its host, `localhost`), `api` over plain HTTP.
struct Origins {
    site: Origin,
    api: Origin,
}

impl Origins {
    async fn start(ca: &TestCa) -> TestResult<Origins> {
        let site = Site::new()
            .file("/robots.txt", ROBOTS)
            .serve("/page.html", 200, &[("content-type", "text/html; charset=utf-8")], HTML)
            .serve("/data.json", 200, &[("content-type", "application/json")], JSON)
            .serve("/logo.png", 200, &[("content-type", "image/png")], PNG);
        Ok(Origins { site: Origin::https_site(ca, site).await?, api: Origin::http_site(Site::new()).await? })
    }

    fn requests(&self) -> (usize, usize, usize) {
        (self.site.requests() + self.api.requests(), self.site.connections(), self.api.connections())
    }
}

/// What the agent got for one request of the script.
#[derive(Debug, PartialEq, Eq)]
struct Got {
    request: String,
    status: u16,
    version: String,
    content_type: String,
    decision: String,
    body: Vec<u8>,
}

/// The scripted agent: each request in order, with what it got.
async fn script(client: &reqwest::Client, origins: &Origins) -> TestResult<Vec<Got>> {
    let (site, api) = (&origins.site, &origins.api);
    let requests = [
        client.get(site.url("/page.html")),
        client.get(site.url("/data.json")),
        client.get(site.url("/logo.png")),
        client.get(site.url("/reflect")).header(AUTHORIZATION, format!("Bearer {PLACEHOLDER}")),
        client.get(site.url("/private/report.html")),
        client.post(api.url("/echo")).header(CONTENT_TYPE, "application/json").body(POSTED),
        client.get(api.url("/hello")),
        client.get(site.url("/page.html")),
    ];
    let mut got = Vec::new();
    for request in requests {
        let request = request.build()?;
        let name = format!("{} {}", request.method(), request.url());
        let response = client.execute(request).await?;
        let (status, content_type) = (response.status().as_u16(), header(&response, "content-type"));
        let version = format!("{:?}", response.version());
        let decision = header(&response, "agentgate-decision");
        got.push(Got {
            request: name,
            status,
            version,
            content_type,
            decision,
            body: response.bytes().await?.to_vec(),
        });
    }
    Ok(got)
}

/// The in-process proxy's config: agent `bot` by address, the secret `github` for `bot` on
/// `localhost` (its value in `value_file`), `[record] dir`, recording `bot` or replaying.
fn configure(config: &mut Config, dir: &Path, recording: &Path, mode: Mode) {
    let record = if mode == Mode::Replay { "false" } else { "true" };
    let text = format!(
        "mode = \"{mode}\"\n[[agents]]\nid = \"bot\"\nclients = [\"127.0.0.1/32\"]\nrecord = {record}\n\n\
         [[secrets]]\nname = \"github\"\nplaceholder = \"{PLACEHOLDER}\"\nvalue_file = {value_file:?}\n\
         hosts = [\"localhost\"]\nagents = [\"bot\"]\n\n[record]\ndir = {recording:?}\n",
        mode = mode.as_str(),
        value_file = dir.join("github-token"),
    );
    let parsed = match Config::from_toml_str(&text, "record test") {
        Ok(parsed) => parsed,
        Err(error) => panic!("the test's config is refused: {error}"),
    };
    config.mode = parsed.mode;
    config.agents = parsed.agents;
    config.secrets = parsed.secrets;
    config.record = parsed.record;
}

/// A recorded run: the origins, what the agent got, the decisions, and the recording's
/// directory (in `dir`).
struct Recorded {
    origins: Origins,
    got: Vec<Got>,
    decisions: Vec<Value>,
    recording: PathBuf,
}

/// Records the scripted run under `dir` and waits until every forwarded exchange is on disk.
async fn record_run(ca: &TestCa, dir: &Path) -> TestResult<Recorded> {
    std::fs::write(dir.join("github-token"), format!("{VALUE}\n"))?;
    let recording = dir.join("recording");
    let origins = Origins::start(ca).await?;
    let proxy = TestProxy::start_with(ca, |config| configure(config, dir, &recording, Mode::Enforce)).await?;
    let got = script(&proxy.client()?, &origins).await?;
    let decisions = proxy.finish().await?;
    let forwarded = got.iter().filter(|got| got.status != 403).count();
    eventually("every forwarded exchange in the recording", async || {
        let exchanges = exchanges(&recording)?;
        if exchanges.len() == forwarded { Ok(()) } else { Err(format!("{} of {forwarded}", exchanges.len()).into()) }
    })
    .await?;
    Ok(Recorded { origins, got, decisions, recording })
}

/// The recording's lines of `kind`.
fn lines_of(recording: &Path, kind: &str) -> TestResult<Vec<Value>> {
    let text = match std::fs::read_to_string(recording.join("recording.jsonl")) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(error.into()),
    };
    let mut found = Vec::new();
    for line in text.lines() {
        let line: Value = serde_json::from_str(line)?;
        if line["kind"] == kind {
            found.push(line);
        }
    }
    Ok(found)
}

fn exchanges(recording: &Path) -> TestResult<Vec<Value>> {
    lines_of(recording, "exchange")
}

/// What a decision record says of a request: its action, outcome, status and every reason.
fn decided(record: &Value) -> Value {
    serde_json::json!([
        record["http.request.method"],
        record["url.full"],
        record["event.action"],
        record["event.outcome"],
        record["http.response.status_code"],
        record["agentgate.reasons"],
    ])
}

#[tokio::test]
async fn a_recorded_run_replays_byte_for_byte_with_the_same_decisions_and_nothing_dialled() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let dir = tempfile::tempdir()?;
    let Recorded { origins, got, decisions, recording } = record_run(&ca, dir.path()).await?;
    assert_eq!(got.len(), 8);
    assert_eq!((got[0].status, got[0].body.as_slice()), (200, HTML.as_bytes()));
    assert_eq!((got[2].status, got[2].body.as_slice()), (200, PNG));
    assert_eq!(got[4].status, 403, "robots.txt refuses /private/: {:?}", got[4]);
    assert!(got[4].decision.contains("robots.txt"), "{}", got[4].decision);
    assert!(String::from_utf8_lossy(&got[3].body).contains(&format!("authorization: Bearer {PLACEHOLDER}")));
    assert_eq!(got[5].body, POSTED.as_bytes(), "the echo of the POST");
    // Every exchange carries its decision's event.id.
    for exchange in exchanges(&recording)? {
        let id = exchange["event_id"].as_str().ok_or("no event_id")?;
        assert!(decisions.iter().any(|record| record["event.id"] == id), "{id} in the decision log");
    }

    // The origins stop: nothing answers on their ports any more.
    origins.site.stop();
    origins.api.stop();
    let before = origins.requests();
    let untouched = Arc::new(Untouched::default());
    let (resolver, dialer): (Arc<dyn Resolve>, Arc<dyn Dial>) = (untouched.clone(), untouched.clone());
    let replay_dir = tempfile::tempdir()?;
    let proxy = TestProxy::start_with_network(&ca, resolver, dialer, |config| {
        configure(config, dir.path(), &recording, Mode::Replay);
        config.audit.path = replay_dir.path().join("decisions.jsonl");
    })
    .await?;
    let client = proxy.client()?;
    let replayed = script(&client, &origins).await?;
    for (recorded, replayed) in got.iter().zip(&replayed) {
        let (recorded_body, replayed_body) = (&recorded.body, &replayed.body);
        assert_eq!(
            (recorded.request.as_str(), recorded.status, recorded.content_type.as_str()),
            (replayed.request.as_str(), replayed.status, replayed.content_type.as_str())
        );
        if recorded.status != 403 {
            // A block's body names its own decision record, so only answers are compared whole.
            assert_eq!(recorded_body, replayed_body, "{}", recorded.request);
        }
    }
    assert_eq!(replayed.len(), got.len());
    assert!(replayed[4].decision.contains("robots.txt"), "refused again: {}", replayed[4].decision);

    // A URL the run never asked for: 504 replay.miss, naming the nearest recorded URL.
    let miss = client.get(origins.site.url("/page2.html")).send().await?;
    assert_eq!(miss.status(), 504);
    assert!(
        header(&miss, "agentgate-decision").contains("code=replay.miss"),
        "{}",
        header(&miss, "agentgate-decision")
    );
    let text = miss.text().await?;
    assert!(text.contains(&format!("the nearest recorded URL is {}", origins.site.url("/page.html"))), "{text}");

    let replay_decisions = proxy.finish().await?;
    assert_eq!(replay_decisions.len(), decisions.len() + 1, "one record per request, the miss included");
    for (recorded, replayed) in decisions.iter().zip(&replay_decisions) {
        assert_eq!(decided(recorded), decided(replayed));
        assert_eq!(replayed["agentgate.mode"], "replay");
    }
    let last = replay_decisions.last().ok_or("no record of the miss")?;
    assert_eq!(last["agentgate.reasons"][0]["code"], "replay.miss");
    assert_eq!(last["event.action"], "error");
    // Nothing was resolved or dialled, and the origins saw nothing more.
    assert_eq!((untouched.lookups.load(Ordering::SeqCst), untouched.dials.load(Ordering::SeqCst)), (0, 0));
    assert_eq!(origins.requests(), before);
    Ok(())
}

#[tokio::test]
async fn the_recording_holds_the_secrets_placeholder_never_its_value() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let dir = tempfile::tempdir()?;
    let Recorded { origins, recording, .. } = record_run(&ca, dir.path()).await?;
    // The origin got the real value (the reflection's digest of what arrived).
    assert_eq!(origins.site.hits("/reflect"), 1);
    let mut placeholders = 0;
    for entry in std::fs::read_dir(&recording)? {
        let text = std::fs::read(entry?.path())?;
        let text = String::from_utf8_lossy(&text);
        assert!(!text.contains(VALUE), "the secret's value is recorded:\n{text}");
        placeholders += text.matches(PLACEHOLDER).count();
    }
    let exchange = exchanges(&recording)?
        .into_iter()
        .find(|exchange| exchange["url"].as_str().is_some_and(|url| url.ends_with("/reflect")))
        .ok_or("no /reflect exchange")?;
    let sent = &exchange["request"]["headers"];
    let authorization = sent.as_array().into_iter().flatten().find(|pair| pair[0] == "authorization");
    assert_eq!(authorization.map(|pair| &pair[1]), Some(&Value::from(format!("Bearer {PLACEHOLDER}"))));
    assert!(placeholders >= 1);
    Ok(())
}

/// Runs `python3 -c "import haralyzer"`, installing haralyzer from PyPI when it is missing.
fn need_haralyzer() -> TestResult {
    let imports = || std::process::Command::new("python3").args(["-c", "import haralyzer"]).status();
    if imports()?.success() {
        return Ok(());
    }
    let installed =
        std::process::Command::new("python3").args(["-m", "pip", "install", "--quiet", "haralyzer"]).status()?;
    if !installed.success() || !imports()?.success() {
        return Err("haralyzer (PyPI) cannot be installed: pip install haralyzer".into());
    }
    Ok(())
}

#[tokio::test]
async fn record_har_passes_an_independent_har_reader_with_one_entry_per_exchange() -> TestResult {
    need_haralyzer()?;
    let ca = TestCa::new("origin CA")?;
    let dir = tempfile::tempdir()?;
    let Recorded { got, recording, .. } = record_run(&ca, dir.path()).await?;
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["record", "har"])
        .arg(&recording)
        .args(["--agent", "bot"])
        .output()
        .await?;
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let har = dir.path().join("run.har");
    std::fs::write(&har, &output.stdout)?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/e2e/har_check.py");
    let checked = tokio::process::Command::new("python3").arg(script).arg(&har).output().await?;
    assert!(checked.status.success(), "{}", String::from_utf8_lossy(&checked.stderr));
    let checked: Value = serde_json::from_slice(&checked.stdout)?;
    assert_eq!(checked["problems"], serde_json::json!([]), "{checked}");
    let entries = checked["entries"].as_array().ok_or("no entries")?;
    let forwarded: Vec<&Got> = got.iter().filter(|got| got.status != 403).collect();
    assert_eq!(entries.len(), forwarded.len(), "one entry per forwarded exchange: {checked}");
    for (entry, got) in entries.iter().zip(forwarded) {
        assert_eq!(
            format!("{} {}", entry["method"].as_str().unwrap_or(""), entry["url"].as_str().unwrap_or("")),
            got.request
        );
        assert_eq!(entry["status"], got.status);
        assert_eq!(entry["httpVersion"], got.version, "{}", got.request);
        assert_eq!(entry["sha256"], hex::encode(Sha256::digest(&got.body)), "{}", got.request);
    }
    let post = entries.iter().find(|entry| entry["method"] == "POST").ok_or("no POST entry")?;
    assert_eq!(post["postData"], POSTED);
    let image = entries.iter().find(|entry| entry["mimeType"] == "image/png").ok_or("no image entry")?;
    assert_eq!(image["sha256"], hex::encode(Sha256::digest(PNG)));
    // A different agent's view is empty.
    let other = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentgate"))
        .args(["record", "har"])
        .arg(&recording)
        .args(["--agent", "other"])
        .output()
        .await?;
    let other: Value = serde_json::from_slice(&other.stdout)?;
    assert_eq!(other["log"]["entries"], serde_json::json!([]));
    Ok(())
}

#[tokio::test]
async fn past_max_bytes_nothing_new_is_recorded_counted_and_logged_once_and_the_proxy_serves_on() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let dir = tempfile::tempdir()?;
    let admin_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let recording = dir.path().join("recording");
    let max_bytes = 6000;
    let config = format!(
        "{base}\n[[agents]]\nid = \"bot\"\nclients = [\"127.0.0.1/32\"]\nrecord = true\n\n\
         [record]\ndir = {recording:?}\nmax_body = 512\nmax_bytes = {max_bytes}\n",
        base =
            base_config(dir.path(), &ca).replace("listen = \"off\"", &format!("listen = \"127.0.0.1:{admin_port}\"")),
    );
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, config)?;
    let agentgate = Agentgate::start(dir.path(), &config_path, "agentgate=info").await?;
    let client = agentgate.client()?;
    // Each answer is 2000 bytes, kept cut at 512 (about 700 base64 bytes a line and more).
    for n in 0..20 {
        let response = client.get(origin.url(&format!("/bytes/2000?n={n}"))).send().await?;
        assert_eq!(response.status(), 200, "request {n} served");
        assert_eq!(response.bytes().await?.len(), 2000, "request {n} answered whole");
    }
    let metrics = format!("http://127.0.0.1:{admin_port}/metrics");
    let admin = reqwest::Client::builder().no_proxy().build()?;
    let dropped = eventually("recording drops counted", async || {
        let text = admin.get(&metrics).send().await?.text().await?;
        let scraped = prometheus_parse::Scrape::parse(text.lines().map(|line| Ok(line.to_owned())))?;
        match sample(&scraped, "agentgate_record_dropped_total", &[("reason", "max_bytes")]) {
            Some(count) if count >= 1.0 => Ok(count),
            other => Err(format!("agentgate_record_dropped_total{{reason=\"max_bytes\"}} is {other:?}").into()),
        }
    })
    .await?;
    let recorded = exchanges(&recording)?;
    assert!(!recorded.is_empty() && recorded.len() < 20, "{} of 20 exchanges recorded", recorded.len());
    assert!(recorded.len() as f64 + dropped >= 20.0, "{} recorded, {dropped} dropped", recorded.len());
    let first = &recorded[0]["response"]["body"];
    assert_eq!((first["bytes"].as_u64(), first["cut"].as_bool()), (Some(2000), Some(true)));
    assert!(std::fs::metadata(recording.join("recording.jsonl"))?.len() <= max_bytes);
    // Still serving, and the bound logged once however many were dropped.
    let response = client.get(origin.url("/hello")).send().await?;
    assert_eq!(response.status(), 200);
    let stderr = agentgate.logged(&["reached [record] max_bytes"], 1).await?;
    assert_eq!(stderr.matches("reached [record] max_bytes").count(), 1, "{stderr}");
    agentgate.stop().await
}
