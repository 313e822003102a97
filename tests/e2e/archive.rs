//! The policy archive (`[audit] archive_dir`) and what reads it, the real binary's
//! `agentgate audit show` and `agentgate audit shadow --config`, over decision logs real
//! proxy runs wrote: the robots.txt line that denied a request shown from the archive after
//! the cache was purged and the site changed its file; the oldest bodies removed past
//! `[audit] archive_max_bytes`, counted in `/metrics`, and `show` saying so; a candidate
//! config's changes to a monitor run's requests checked against a second live run under it,
//! an unrelated change reporting none, and records whose files are not archived reported as
//! not replayable; and a body a replica read from the fleet's shared store archived beside
//! its log by default, where `show` finds it.

use std::path::{Path, PathBuf};

use agentgate::config::Config;
use agentgate::policy::operator::Mode;
use serde_json::Value;

use crate::admin::{admin_client, admin_url, sample, scrape};
use crate::redis::RedisServer;
use crate::reload::base_config;
use crate::support::binary::Agentgate;
use crate::support::origin::{Origin, Served, Site};
use crate::support::pki::TestCa;
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult};

/// Runs `agentgate audit ARGS`: stdout, stderr and the exit code.
async fn audit(args: &[&str]) -> TestResult<(String, String, Option<i32>)> {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentgate")).arg("audit").args(args).output().await?;
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    Ok((text(&output.stdout), text(&output.stderr), output.status.code()))
}

/// The bodies in the archive: its sidecars.
fn archived(dir: &Path) -> Vec<String> {
    let names = std::fs::read_dir(dir).into_iter().flatten().flatten();
    let mut digests: Vec<String> = names
        .filter_map(|entry| entry.file_name().to_str().and_then(|n| n.strip_suffix(".json")).map(str::to_owned))
        .collect();
    digests.sort();
    digests
}

/// Waits until the archive holds exactly `count` bodies.
async fn archive_holds(dir: &Path, count: usize) -> TestResult<Vec<String>> {
    eventually(&format!("{count} bodies in {}", dir.display()), async || {
        let digests = archived(dir);
        if digests.len() == count { Ok(digests) } else { Err(format!("{digests:?}").into()) }
    })
    .await
}

/// Purges `origin` from the proxy's policy cache (`DELETE /policies`).
async fn purge(proxy: &TestProxy, origin: &Origin) -> TestResult {
    let url = admin_url(proxy, &format!("/policies?origin={}", origin.url("")))?;
    assert_eq!(admin_client()?.delete(url).send().await?.status(), 200);
    Ok(())
}

/// The proxy's log, written to `path` after it shut down; its records.
async fn finish_into(proxy: TestProxy, path: &Path) -> TestResult<Vec<Value>> {
    let (records, text) = proxy.finish_with_text().await?;
    std::fs::write(path, text)?;
    Ok(records)
}

/// The `event.id` of the (one-per-request) record for `path` whose `event.action` is `action`.
fn event_id(records: &[Value], path: &str, action: &str) -> TestResult<String> {
    let found = records.iter().find(|r| r["url.path"] == path && r["event.action"] == action);
    Ok(found
        .and_then(|r| r["event.id"].as_str())
        .ok_or(format!("no {action} record for {path}: {records:#?}"))?
        .to_owned())
}

/// A site serving `robots` and no other policy file (every other path of a test site is a
/// page, which some formats would keep too).
fn site(robots: &str) -> Site {
    let site = Site::new().serve("/robots.txt", 200, &[("content-type", "text/plain")], robots.to_owned());
    ["/agents.txt", "/AGENTS.md", "/.well-known/agents.md", "/automation-preferences.txt"]
        .iter()
        .fold(site, |site, path| site.serve(path, 404, &[], "not here"))
}

fn robots(body: &str) -> Served {
    Served::ok(body.to_owned()).with("content-type", "text/plain")
}

#[tokio::test]
async fn audit_show_prints_the_denying_robots_line_from_the_archive_after_a_purge_and_a_change() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let first = "User-agent: *\nAllow: /public\n# the reports stay private\nDisallow: /private\n";
    let origin = Origin::http_site(site(first)).await?;
    let dir = tempfile::tempdir()?;
    let archive = dir.path().join("archive");
    let arch = archive.clone();
    let proxy = TestProxy::start_with(&ca, move |config| config.audit.archive_dir = Some(arch)).await?;
    let client = proxy.client()?;
    assert_eq!(client.get(origin.url("/private/report")).send().await?.status(), 403);
    archive_holds(&archive, 1).await?;

    // The site changes its file and the cache forgets the old one: the same URL is allowed now.
    origin.serve("/robots.txt", robots("User-agent: *\nDisallow:\n"));
    purge(&proxy, &origin).await?;
    assert_eq!(client.get(origin.url("/private/report")).send().await?.status(), 200);
    assert_eq!(origin.hits("/robots.txt"), 2, "the purge made the proxy fetch the new file");
    let log = dir.path().join("decisions.jsonl");
    let records = finish_into(proxy, &log).await?;
    let denied = event_id(&records, "/private/report", "deny")?;

    let (out, err, code) =
        audit(&["show", &denied, "--archive", &archive.display().to_string(), &log.display().to_string()]).await?;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.lines().next().is_some_and(|record| record.contains(&denied)), "the record first: {out}");
    assert!(out.contains("reason robots.txt:4 robots.disallow: Disallow: /private (blocking)"), "{out}");
    assert!(out.contains(&format!("{} 200", origin.url("/robots.txt"))), "where it was served: {out}");
    assert!(out.contains("matches the archived body"), "checked against the digest: {out}");
    // The file as it was that day, the deciding line marked, its neighbours around it.
    assert!(out.contains("       2 | Allow: /public\n"), "{out}");
    assert!(out.contains("  >    4 | Disallow: /private\n"), "{out}");
    assert!(!out.contains("Disallow:\n"), "not today's file: {out}");
    // An id no record has: exit 1.
    let (_, err, code) =
        audit(&["show", "nope", "--archive", &archive.display().to_string(), &log.display().to_string()]).await?;
    assert_eq!(code, Some(1), "{err}");
    Ok(())
}

/// A robots.txt of some 2.7 KB that gzip cannot shrink much (hex comments), different for
/// each `seed`; line 2 denies /private.
fn incompressible_robots(seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut body = String::from("User-agent: *\nDisallow: /private\n");
    for _ in 0..40 {
        let mut line = String::from("#");
        for _ in 0..4 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            line.push_str(&format!(" {x:016x}"));
        }
        body.push_str(&line);
        body.push('\n');
    }
    body
}

#[tokio::test]
async fn past_archive_max_bytes_the_oldest_body_goes_counted_and_show_says_so() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(site(&incompressible_robots(1))).await?;
    let dir = tempfile::tempdir()?;
    let archive = dir.path().join("archive");
    let arch = archive.clone();
    // Room for one body and its sidecar (some 2 KB), not two.
    let proxy = TestProxy::start_with(&ca, move |config| {
        config.audit.archive_dir = Some(arch);
        config.audit.archive_max_bytes = 3000;
    })
    .await?;
    let client = proxy.client()?;
    assert_eq!(client.get(origin.url("/private/old")).send().await?.status(), 403);
    let old = archive_holds(&archive, 1).await?;
    let evicted = async |proxy: &TestProxy| -> TestResult<f64> {
        let metrics = scrape(proxy).await?;
        Ok(sample(&metrics, "agentgate_policy_archive_total", &[("result", "evicted")]).unwrap_or(0.0))
    };
    assert_eq!(evicted(&proxy).await?, 0.0);

    origin.serve("/robots.txt", robots(&incompressible_robots(2)));
    purge(&proxy, &origin).await?;
    assert_eq!(client.get(origin.url("/private/new")).send().await?.status(), 403);
    eventually("the oldest body evicted and counted", async || {
        let (now, count) = (archived(&archive), evicted(&proxy).await?);
        if count == 1.0 && now.len() == 1 && now != old {
            Ok(())
        } else {
            Err(format!("{now:?}, evicted {count}").into())
        }
    })
    .await?;
    let stored = sample(&scrape(&proxy).await?, "agentgate_policy_archive_total", &[("result", "stored")]);
    assert_eq!(stored, Some(2.0));
    let log = dir.path().join("decisions.jsonl");
    let records = finish_into(proxy, &log).await?;

    let show = async |id: String| {
        audit(&["show", &id, "--archive", &archive.display().to_string(), &log.display().to_string()]).await
    };
    let (out, err, code) = show(event_id(&records, "/private/old", "deny")?).await?;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&format!("{} is no longer archived", old[0])), "{out}");
    let (out, _, _) = show(event_id(&records, "/private/new", "deny")?).await?;
    assert!(out.contains("  >    2 | Disallow: /private\n") && out.contains("matches the archived body"), "{out}");
    Ok(())
}

/// The requests of a shadow run: five paths on the origin, two of them under /docs.
const PATHS: [&str; 6] = ["/page", "/docs/a", "/docs/b", "/private/x", "/private/docs", "/other"];

/// One monitor-mode run of [`PATHS`] with `rules` (the proxy's archive in `archive`); its
/// log written to `log`, and each path's `event.action`.
async fn monitor_run(
    ca: &TestCa,
    origin: &Origin,
    archive: &Path,
    rules: Vec<agentgate::config::RuleConfig>,
    log: &Path,
) -> TestResult<Vec<(String, String)>> {
    let arch = archive.to_owned();
    let proxy = TestProxy::start_with(ca, move |config| {
        config.mode = Mode::Monitor;
        config.rules = rules;
        config.audit.archive_dir = Some(arch);
    })
    .await?;
    let client = proxy.client()?;
    for path in PATHS {
        assert_eq!(client.get(origin.url(path)).send().await?.status(), 200, "monitor mode forwards {path}");
    }
    let records = finish_into(proxy, log).await?;
    let actions = PATHS.iter().map(|path| {
        let record = records.iter().find(|r| r["url.path"] == *path && r["event.action"].is_string());
        (path.to_string(), record.and_then(|r| r["event.action"].as_str()).unwrap_or("?").to_owned())
    });
    Ok(actions.collect())
}

/// The URLs of the change lines of a shadow report (`  before -> after  METHOD URL  [id]`).
fn changed_urls(report: &str) -> Vec<String> {
    let changes = report.lines().filter(|l| l.starts_with("  ") && l.contains(" -> ") && !l.contains("count "));
    let mut urls: Vec<String> = changes.filter_map(|l| l.split_whitespace().nth(4).map(str::to_owned)).collect();
    urls.sort();
    urls
}

#[tokio::test]
async fn audit_shadow_reports_exactly_what_a_new_deny_rule_changes_and_nothing_for_an_unrelated_edit() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(site("User-agent: *\nDisallow: /private\n")).await?;
    let dir = tempfile::tempdir()?;
    let archive = dir.path().join("archive");
    let before_log = dir.path().join("before.jsonl");
    let before = monitor_run(&ca, &origin, &archive, Vec::new(), &before_log).await?;
    archive_holds(&archive, 1).await?;

    // The candidate: a deny rule for /docs. Checked against a second live run under it.
    let candidate = dir.path().join("candidate.toml");
    std::fs::write(
        &candidate,
        "mode = \"monitor\"\n\n[[rules]]\nhost = \"*\"\npath = \"/docs\"\naction = \"deny\"\nreason = \"no docs for agents\"\n",
    )?;
    let rules = Config::load(&candidate)?.rules;
    let after = monitor_run(&ca, &origin, &archive, rules, &dir.path().join("after.jsonl")).await?;
    let mut expected: Vec<String> =
        before.iter().zip(&after).filter(|(b, a)| b.1 != a.1).map(|(b, _)| origin.url(&b.0)).collect();
    expected.sort();
    assert_eq!(expected, [origin.url("/docs/a"), origin.url("/docs/b")], "the live runs: {before:?} {after:?}");

    let (archive_arg, log_arg) = (archive.display().to_string(), before_log.display().to_string());
    let shadow = async |config: &PathBuf, archive: &str| {
        audit(&["shadow", "--config", &config.display().to_string(), "--archive", archive, &log_arg]).await
    };
    let (out, err, code) = shadow(&candidate, &archive_arg).await?;
    assert_eq!(code, Some(1), "a change exits 1: {out}{err}");
    assert_eq!(changed_urls(&out), expected, "{out}");
    assert!(out.contains("  count allow -> deny: 2"), "{out}");
    assert!(out.contains("operator:") && out.contains("no docs for agents"), "the new reason: {out}");
    assert!(out.contains("6 requests replayed, 2 change, 0 not replayable"), "{out}");

    // An unrelated edit: no change, exit 0.
    let unrelated = dir.path().join("unrelated.toml");
    std::fs::write(&unrelated, "mode = \"monitor\"\n\n[cache]\nmax_origins = 5000\n")?;
    let (out, err, code) = shadow(&unrelated, &archive_arg).await?;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(changed_urls(&out).is_empty() && out.contains("6 requests replayed, 0 change, 0 not replayable"), "{out}");

    // Without the archive, the records whose files gave reasons cannot be replayed, and say why.
    let empty = dir.path().join("empty");
    let (out, _, code) = shadow(&unrelated, &empty.display().to_string()).await?;
    assert_eq!(code, Some(0), "{out}");
    let not_replayable: Vec<&str> = out.lines().filter(|l| l.starts_with("not replayable:")).collect();
    assert_eq!(not_replayable.len(), 2, "/private/x and /private/docs: {out}");
    for (line, path) in not_replayable.iter().zip(["/private/x", "/private/docs"]) {
        assert!(line.contains(&origin.url(path)) && line.contains("is no longer archived"), "{line}");
    }
    assert!(out.contains("4 requests replayed, 0 change, 2 not replayable"), "{out}");
    Ok(())
}

#[tokio::test]
#[ignore = "needs redis-server: run by scripts/test.sh"]
async fn a_body_read_from_the_fleets_shared_store_is_archived_beside_the_log_and_shown() -> TestResult {
    let redis = RedisServer::start().await?;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(site("User-agent: *\nDisallow: /private\n")).await?;
    let mut replicas = Vec::new();
    for _ in 0..2 {
        // No archive_dir: the default, policy-archive beside the log.
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("agentgate.toml");
        let store = format!("[cache]\nstore = \"redis\"\n[cache.redis]\nurl = {:?}\n", redis.url());
        std::fs::write(&path, base_config(dir.path(), &ca) + &store)?;
        let proxy = Agentgate::start(dir.path(), &path, "agentgate=info").await?;
        replicas.push((proxy, dir));
    }
    assert_eq!(replicas[0].0.client()?.get(origin.url("/private/a")).send().await?.status(), 403);
    assert_eq!(replicas[1].0.client()?.get(origin.url("/private/b")).send().await?.status(), 403);
    assert_eq!(origin.hits("/robots.txt"), 1, "the second replica read the fleet's copy");
    let (reader, dir) = replicas.pop().ok_or("two replicas")?;
    let archive = dir.path().join("policy-archive");
    let digest = archive_holds(&archive, 1).await?.remove(0);
    let sidecar: Value = serde_json::from_slice(&std::fs::read(archive.join(format!("{digest}.json")))?)?;
    assert_eq!(sidecar["from"], "shared_store", "{sidecar:#}");
    reader.stop().await?;

    let log = dir.path().join("decisions.jsonl");
    let records: Vec<Value> =
        std::fs::read_to_string(&log)?.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    let id = event_id(&records, "/private/b", "deny")?;
    let (out, err, code) = audit(&["show", &id, &log.display().to_string()]).await?;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("(from shared_store)") && out.contains("  >    2 | Disallow: /private\n"), "{out}");
    Ok(())
}
