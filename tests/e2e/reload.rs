//! Hot reload and the decision log's files (docs/reload.md, docs/decision-log.md#rotation):
//! the real `agentgate run` binary picks up a config edit without a restart, rejects a
//! broken one on stderr (file:line) and keeps the last good config, lets a request in flight
//! finish; SIGHUP reopens a log that was renamed, each record landing in exactly one of the
//! two files; size rotation under load keeps every record exactly once. In process, a reload
//! keeps fetched policies and spent rate limits, applies new network lists, and the reloader
//! counts what it applied and what it rejected.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use agentgate::app::Proxy;
use agentgate::reload::{ConfigSource, ReloadCounts};

use crate::support::binary::{Agentgate, WAIT_LIMIT};
use crate::support::block::{self, Expected};
use crate::support::log;
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::wait::eventually_within;
use crate::support::{TestProxy, TestResult, bypass_all, header};

/// The config every child starts from: loopback origins allowed, the log in `dir`.
pub(crate) fn base_config(dir: &Path, origin_ca: &TestCa) -> String {
    format!(
        "listen = \"127.0.0.1:0\"\n[ca]\ndir = {ca:?}\n[upstream]\nextra_ca_files = [{origin_ca:?}]\n\
         [network]\nallow_cidrs = [\"127.0.0.0/8\"]\n[connect]\nallowed_ports = [\"1-65535\"]\n\
         [audit]\npath = {log:?}\non_failure = \"continue\"\n[admin]\nlisten = \"off\"\n",
        ca = dir.join("ca"),
        origin_ca = origin_ca.pem_path,
        log = dir.join("decisions.jsonl"),
    )
}

/// Replaces the config file the way editors do: write a sibling, rename it over the file.
pub(crate) fn replace_file(path: &Path, text: &str) -> TestResult {
    let sibling = path.with_extension("toml.tmp");
    std::fs::write(&sibling, text)?;
    std::fs::rename(&sibling, path)?;
    Ok(())
}

/// Asks for `url` until the answer has `status` (bounded): the proxy acts on a file change a
/// moment after it is written.
pub(crate) async fn until_status(client: &reqwest::Client, url: &str, status: u16) -> TestResult<reqwest::Response> {
    eventually_within(WAIT_LIMIT, &format!("{url} answering {status}"), async || {
        let response = client.get(url).send().await?;
        match response.status() {
            answered if answered == status => Ok(response),
            answered => Err(format!("it answers {answered}").into()),
        }
    })
    .await
}

const DENY_PAGE: &str = "[[rules]]\nhost = \"*\"\npath = \"/page\"\naction = \"deny\"\nreason = \"reloaded rule\"\n";

#[tokio::test]
async fn a_config_edit_changes_a_decision_without_a_restart_and_a_broken_edit_changes_nothing() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let dir = tempfile::tempdir()?;
    let config_path = dir.path().join("agentgate.toml");
    let base = base_config(dir.path(), &ca);
    std::fs::write(&config_path, &base)?;
    let agentgate = Agentgate::start(dir.path(), &config_path, "info").await?;
    let client = agentgate.client()?;
    assert_eq!(client.get(origin.url("/page")).send().await?.status(), 200);

    // An operator rule added to the file: the same request, on the same connection, is denied.
    replace_file(&config_path, &format!("{base}{DENY_PAGE}"))?;
    let denied = until_status(&client, &origin.url("/page"), 403).await?;
    let expected = Expected {
        decision: "deny",
        source: "operator",
        code: "operator.deny",
        line: None,
        rule: "[[rules]] #1 host=* path=/page deny: reloaded rule",
        advice: "operator",
    };
    let record = block::plain(denied, &expected).await?;
    let hits = origin.hits("/page");
    let stderr = agentgate.logged(&["config reloaded"], 1).await?;
    assert!(!stderr.contains("needs a restart"), "nothing that needs a restart changed:\n{stderr}");

    // A syntax error and an invalid value: rejected, each reported, the rule still applies.
    replace_file(&config_path, &format!("mode = \"block\"\n{base}{DENY_PAGE}"))?;
    let location = format!("{}:1:", config_path.display());
    agentgate.logged(&["config reload rejected", &location, "mode = \"block\""], 1).await?;
    let invalid = format!("{base}{DENY_PAGE}[[rules]]\nhost = \"a..b\"\naction = \"deny\"\n");
    replace_file(&config_path, &invalid)?;
    let stderr = agentgate.logged(&["config reload rejected", "[[rules]] #2 host = \"a..b\""], 1).await?;
    assert!(stderr.contains(&config_path.display().to_string()), "{stderr}");
    let still = client.get(origin.url("/page")).send().await?;
    block::plain(still, &expected).await?;
    assert_eq!(client.get(origin.url("/other")).send().await?.status(), 200);

    // A change that needs a restart is reported and otherwise ignored: the port stays.
    replace_file(&config_path, &format!("{}{DENY_PAGE}", base.replace("127.0.0.1:0", "127.0.0.1:1")))?;
    agentgate.logged(&["config change needs a restart: listen"], 1).await?;
    block::plain(client.get(origin.url("/page")).send().await?, &expected).await?;

    agentgate.stop().await?;
    let records = log::read(&dir.path().join("decisions.jsonl"))?;
    block::logged(&records, &record, "GET", &expected)?;
    assert_eq!(origin.hits("/page"), hits, "nothing denied reached the origin");
    Ok(())
}

#[tokio::test]
async fn a_request_in_flight_during_a_reload_completes() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let dir = tempfile::tempdir()?;
    let config_path = dir.path().join("agentgate.toml");
    let base = base_config(dir.path(), &ca);
    std::fs::write(&config_path, &base)?;
    let agentgate = Agentgate::start(dir.path(), &config_path, "info").await?;
    let client = agentgate.client()?;
    let in_flight = tokio::spawn(client.get(origin.url("/hold")).send());
    origin.arrived().await;

    // The new rule denies the very path in flight: new requests are refused (the probe is
    // a path the rule covers that the origin answers at once, 404, until then)...
    let rule = "[[rules]]\nhost = \"*\"\npath = \"/hold\"\naction = \"deny\"\n";
    replace_file(&config_path, &format!("{base}{rule}"))?;
    let refused = until_status(&client, &origin.url("/hold-probe"), 403).await?;
    assert!(header(&refused, "agentgate-decision").starts_with("deny; source=operator; code=operator.deny"));
    let refused = client.get(origin.url("/hold")).send().await?;
    assert_eq!(refused.status(), 403);
    assert_eq!(origin.hits("/hold"), 1, "only the request in flight reached the origin");

    // ...and the one that started before still gets its whole answer.
    origin.release();
    let response = in_flight.await??;
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await?, "released");
    agentgate.stop().await?;
    let records = log::read(&dir.path().join("decisions.jsonl"))?;
    let holds = log::for_request(&records, "GET", "/hold");
    assert!(holds.iter().any(|r| r["http.response.status_code"] == 200 && r["event.action"] == "allow"), "{holds:#?}");
    assert!(holds.iter().any(|r| r["http.response.status_code"] == 403), "{holds:#?}");
    Ok(())
}

/// Every `event.id` in `file`, each line checked to be a whole JSON object; the chain's
/// checkpoint lines are no records.
fn event_ids(file: &Path) -> TestResult<Vec<String>> {
    let text = std::fs::read_to_string(file)?;
    assert!(text.is_empty() || text.ends_with('\n'), "{} ends in a partial line", file.display());
    text.lines()
        .filter(|line| !agentgate::audit::is_checkpoint(line.as_bytes()))
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).map_err(|e| format!("{line:?}: {e}"))?;
            Ok(record["event.id"].as_str().ok_or("a record without event.id")?.to_owned())
        })
        .collect()
}

#[tokio::test]
async fn sighup_after_a_rename_reopens_the_log_and_every_record_lands_in_one_file() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let dir = tempfile::tempdir()?;
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, format!("bypass_hosts = [\"*\"]\n{}", base_config(dir.path(), &ca)))?;
    let agentgate = Agentgate::start(dir.path(), &config_path, "info").await?;
    let client = agentgate.client()?;
    let log_path = dir.path().join("decisions.jsonl");
    let rotated = dir.path().join("decisions.jsonl.1");
    let mut sent = 0;
    for _ in 0..20 {
        assert_eq!(client.get(origin.url(&format!("/before/{sent}"))).send().await?.status(), 200);
        sent += 1;
    }
    log::wait_for(&log_path, 20).await?;

    // logrotate: rename, then `postrotate kill -HUP`.
    std::fs::rename(&log_path, &rotated)?;
    agentgate.signal("HUP").await?;
    agentgate.logged(&["decision log reopened"], 1).await?;
    // Requests keep being answered (SIGHUP does not stop agentgate) and land in the new file.
    eventually_within(WAIT_LIMIT, "a request in the reopened log", async || {
        if !log::lines(&log_path)?.is_empty() {
            return Ok(());
        }
        assert_eq!(client.get(origin.url(&format!("/after/{sent}"))).send().await?.status(), 200);
        sent += 1;
        Err("the reopened log is empty".into())
    })
    .await?;
    for _ in 0..10 {
        assert_eq!(client.get(origin.url(&format!("/after/{sent}"))).send().await?.status(), 200);
        sent += 1;
    }
    let stderr = agentgate.stderr();
    agentgate.stop().await?;

    let (before, after) = (event_ids(&rotated)?, event_ids(&log_path)?);
    let all: HashSet<&String> = before.iter().chain(&after).collect();
    assert_eq!(before.len() + after.len(), sent, "one record per request");
    assert_eq!(all.len(), sent, "no record in both files");
    assert!(before.len() >= 20 && after.len() >= 10, "{} before, {} after", before.len(), after.len());
    assert!(stderr.contains("config reloaded"), "SIGHUP reloads the config too:\n{stderr}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_rotation_under_load_keeps_every_record_exactly_once() -> TestResult {
    const MAX_FILE_SIZE: u64 = 4096;
    const REQUESTS: usize = 200;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new()).await?;
    let mut proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.audit.max_file_size = MAX_FILE_SIZE;
        // Enough that none is deleted: every record can be counted.
        config.audit.max_files = 1000;
    })
    .await?;
    let client = proxy.client()?;
    let tasks: Vec<_> = (0..10)
        .map(|task| {
            let client = client.clone();
            let origin_url = origin.url("/");
            tokio::spawn(async move {
                for n in 0..REQUESTS / 10 {
                    let response = client.get(format!("{origin_url}load/{task}/{n}")).send().await?;
                    assert_eq!(response.status(), 200);
                }
                TestResult::Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    let log_path = proxy.log_path.clone();
    proxy.shut_down().ok_or("the proxy was already shut down")?.await?;

    let rotated = |n: usize| PathBuf::from(format!("{}.{n}", log_path.display()));
    let files: Vec<PathBuf> =
        std::iter::once(log_path.clone()).chain((1..=1000).map(rotated)).filter(|f| f.exists()).collect();
    assert!(files.len() > 2, "the log rotated: {files:?}");
    // Under `on_failure = "block"` a forwarded request has a decision line and a completed
    // line; each line is written once.
    let mut lines = 0;
    let mut completed = HashSet::new();
    for file in &files {
        let size = std::fs::metadata(file)?.len();
        assert!(size <= MAX_FILE_SIZE, "{} holds {size} bytes, more than {MAX_FILE_SIZE}", file.display());
        let ids = event_ids(file)?;
        lines += ids.len();
        for record in log::lines(file)? {
            if !record["http.response.status_code"].is_null() {
                let id = record["event.id"].as_str().ok_or("no event.id")?.to_owned();
                assert!(completed.insert(id.clone()), "{id} completed twice");
            }
        }
    }
    assert_eq!(completed.len(), REQUESTS, "every request's record, exactly once");
    assert_eq!(lines, 2 * REQUESTS, "a decision line and a completed line per request, no more");
    Ok(())
}

#[tokio::test]
async fn the_reloader_counts_what_it_applied_and_what_it_rejected() -> TestResult {
    agentgate::tls::install_default_provider();
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("agentgate.toml");
    let text = format!(
        "listen = \"127.0.0.1:0\"\n[ca]\ndir = {:?}\n[audit]\npath = {:?}\n[admin]\nlisten = \"off\"\n",
        dir.path().join("ca"),
        dir.path().join("decisions.jsonl")
    );
    std::fs::write(&path, &text)?;
    let source = ConfigSource { path: Some(path.clone()), ..ConfigSource::default() };
    let running = Proxy::new(Arc::new(source.load()?))?.bind().await?;
    let reloader = running.reloader(source);
    assert_eq!(reloader.counts(), ReloadCounts::default());

    std::fs::write(&path, format!("mode = \"monitor\"\n{text}"))?;
    assert!(reloader.reload()?.needs_restart.is_empty());
    std::fs::write(&path, format!("{text}[upstream]\nconnect_timeout = \"0s\"\n"))?;
    let err = reloader.reload().expect_err("a zero timeout is invalid").to_string();
    assert!(err.contains("[upstream] connect_timeout") && err.contains(&path.display().to_string()), "{err}");
    std::fs::write(&path, text.replace("decisions.jsonl", "other.jsonl"))?;
    assert_eq!(reloader.reload()?.needs_restart, ["[audit]"]);
    assert_eq!(reloader.counts(), ReloadCounts { ok: 2, failed: 1 });
    Ok(())
}

#[tokio::test]
async fn a_reload_keeps_fetched_policies_and_spent_limits_and_changes_the_network_lists() -> TestResult {
    agentgate::tls::install_default_provider();
    let origin = Origin::http_site(Site::new().file("/robots.txt", "User-agent: *\nAllow: /\n")).await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("agentgate.toml");
    let text = format!(
        "listen = \"127.0.0.1:0\"\n[ca]\ndir = {:?}\n[audit]\npath = {:?}\n[admin]\nlisten = \"off\"\n\
         [agent]\nlimits = {{ requests_per_minute = 3 }}\n[network]\nallow_cidrs = [\"127.0.0.0/8\"]\n",
        dir.path().join("ca"),
        dir.path().join("decisions.jsonl")
    );
    std::fs::write(&path, &text)?;
    let source = ConfigSource { path: Some(path.clone()), ..ConfigSource::default() };
    let running = Proxy::new(Arc::new(source.load()?))?.bind().await?;
    let addr = running.local_addr();
    let reloader = running.reloader(source);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(running.run_until(async move {
        let _ = stopped.await;
    }));
    let client = reqwest::Client::builder().proxy(reqwest::Proxy::all(format!("http://{addr}"))?).build()?;
    for n in 0..3 {
        assert_eq!(client.get(origin.url(&format!("/page/{n}"))).send().await?.status(), 200);
    }

    // A reload that leaves the limits as they were: the budget spent before stays spent, and
    // the robots.txt fetched before is not fetched again.
    std::fs::write(&path, format!("{text}[[rules]]\nhost = \"elsewhere.example\"\naction = \"deny\"\n"))?;
    reloader.reload()?;
    let limited = client.get(origin.url("/page/3")).send().await?;
    assert_eq!(limited.status(), 429, "the rate limit's count survived the reload");
    assert_eq!(origin.hits("/robots.txt"), 1, "the fetched policy survived the reload");

    // `[network] deny_cidrs` applies to the next request, before any limit.
    std::fs::write(&path, format!("{text}deny_cidrs = [\"127.0.0.1/32\"]\n"))?;
    reloader.reload()?;
    let refused = client.get(origin.url("/page/4")).send().await?;
    assert_eq!(refused.status(), 403);
    assert!(header(&refused, "agentgate-decision").starts_with("deny; source=operator; code=network.denied_cidr"));
    assert_eq!(reloader.counts(), ReloadCounts { ok: 2, failed: 0 });
    let _ = stop.send(());
    served.await?;
    Ok(())
}
