//! `agentgate audit summary` and `agentgate audit grep`, run as the real binary over decision
//! logs that real proxy runs wrote: four agents (three by `Proxy-Authorization`, one by client
//! address) allowed, denied by robots.txt and rate-limited by AGENTS.md, one of them in
//! monitor mode (its refusals are `would_deny`, the limit's too); the log split into a
//! gzip'd rotated file, a plain rotated file and the current one, with a damaged line. And
//! the two reports agreeing: grep prints one line per request, the requests summary counts,
//! and summary counts one deciding reason per block, as `--by reason` does.

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use agentgate::agents::AgentConfig;
use agentgate::policy::operator::Mode;
use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::Value;

use crate::agents::{agent, client_as};
use crate::support::origin::{Origin, Site};
use crate::support::pki::TestCa;
use crate::support::{TestProxy, TestResult};

/// Runs `agentgate audit ARGS` and returns its stdout, stderr and whether it succeeded.
pub async fn audit(args: &[&str]) -> TestResult<(String, String, bool)> {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentgate")).arg("audit").args(args).output().await?;
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    Ok((text(&output.stdout), text(&output.stderr), output.status.success()))
}

/// `audit summary --format json FILES...`, parsed.
pub async fn summary_json(extra: &[&str], files: &[PathBuf]) -> TestResult<Value> {
    let mut args = vec!["summary", "--format", "json"];
    args.extend(extra);
    let files: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    args.extend(files.iter().map(String::as_str));
    let (stdout, stderr, ok) = audit(&args).await?;
    assert!(ok, "audit {args:?} failed: {stderr}");
    Ok(serde_json::from_str(&stdout)?)
}

/// The counts of the group `key`: requests, allowed, denied, would_deny, rate_limited, errors.
fn counts(summary: &Value, key: &str) -> Option<[u64; 6]> {
    let groups = summary["groups"].as_array()?;
    let group = groups.iter().find(|g| g["key"] == key)?;
    let n = |name: &str| group[name].as_u64();
    Some([n("requests")?, n("allowed")?, n("denied")?, n("would_deny")?, n("rate_limited")?, n("errors")?])
}

/// The top reasons of the group `key`, as `source code count`.
fn top_reasons(summary: &Value, key: &str) -> Vec<String> {
    let groups = summary["groups"].as_array().cloned().unwrap_or_default();
    let group = groups.into_iter().find(|g| g["key"] == key).unwrap_or_default();
    let reasons = group["top_reasons"].as_array().cloned().unwrap_or_default();
    reasons.iter().map(|r| format!("{} {}", r["name"].as_str().unwrap_or("?"), r["count"])).collect()
}

/// The log split as logrotate leaves it: `.2` compressed, `.1` plain, the current file; a
/// damaged line at the end of `.1`. Returns the paths oldest first.
fn rotate(dir: &Path, text: &str) -> TestResult<Vec<PathBuf>> {
    let lines: Vec<&str> = text.lines().collect();
    let (third, two_thirds) = (lines.len() / 3, 2 * lines.len() / 3);
    let join = |part: &[&str]| part.iter().map(|l| format!("{l}\n")).collect::<String>();
    let paths: Vec<PathBuf> =
        ["decisions.jsonl.2", "decisions.jsonl.1", "decisions.jsonl"].iter().map(|name| dir.join(name)).collect();
    let mut gzip = GzEncoder::new(Vec::new(), Compression::default());
    gzip.write_all(join(&lines[..third]).as_bytes())?;
    std::fs::write(&paths[0], gzip.finish()?)?;
    std::fs::write(&paths[1], join(&lines[third..two_thirds]) + "{\"agentgate.agent\": cut off\n")?;
    std::fs::write(&paths[2], join(&lines[two_thirds..]))?;
    Ok(paths)
}

#[tokio::test]
async fn audit_summary_over_a_real_run_counts_per_agent_across_rotated_and_gzip_files() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    // AGENTS.md line 7: two requests a minute per agent; robots.txt line 2: /private.
    let agents_md = "# AGENTS.md\n\n## Identity\n- site: localhost\n\n## Rate Limits\n- requests-per-minute: 2\n";
    let site = Site::new().serve("/AGENTS.md", 200, &[("content-type", "text/markdown")], agents_md).serve(
        "/robots.txt",
        200,
        &[("content-type", "text/plain")],
        "User-agent: *\nDisallow: /private\n",
    );
    let origin = Origin::https_site(&ca, site).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        let gamma = AgentConfig {
            id: Some("gamma".to_owned()),
            clients: vec![IpAddr::from([127, 0, 0, 4]).into()],
            ..AgentConfig::default()
        };
        // delta is being evaluated: monitor mode, so nothing it does is refused.
        let delta = AgentConfig { mode: Some(Mode::Monitor), ..agent("delta", "d-token") };
        config.agents = vec![agent("alpha", "a-token"), agent("beta", "b-token"), gamma, delta];
    })
    .await?;
    let alpha = client_as(&proxy, "alpha", "a-token")?;
    let beta = client_as(&proxy, "beta", "b-token")?;
    let gamma = proxy.client_builder()?.local_address("127.0.0.4".parse::<IpAddr>()?).build()?;

    // alpha: two allowed, the third over the limit, one denied (a deny spends no budget).
    for expected in [200, 200, 429] {
        assert_eq!(alpha.get(origin.url("/page")).send().await?.status(), expected);
    }
    assert_eq!(alpha.get(origin.url("/private/a")).send().await?.status(), 403);
    // beta: one allowed, two denied.
    assert_eq!(beta.get(origin.url("/page")).send().await?.status(), 200);
    for path in ["/private/b", "/private/c"] {
        assert_eq!(beta.get(origin.url(path)).send().await?.status(), 403);
    }
    // gamma, known by its address: one denied.
    assert_eq!(gamma.get(origin.url("/private/d")).send().await?.status(), 403);
    // delta, in monitor mode: everything forwarded; over the limit and /private are would_deny.
    let delta = client_as(&proxy, "delta", "d-token")?;
    for path in ["/page", "/page", "/page", "/private/e"] {
        assert_eq!(delta.get(origin.url(path)).send().await?.status(), 200, "monitor mode forwards {path}");
    }

    let (records, text) = proxy.finish_with_text().await?;
    let dir = tempfile::tempdir()?;
    let files = rotate(dir.path(), &text)?;

    let summary = summary_json(&[], &files).await?;
    // requests, allowed, denied, would_deny, rate_limited, errors
    assert_eq!(counts(&summary, "alpha"), Some([4, 2, 1, 0, 1, 0]), "{summary:#}\n{records:#?}");
    assert_eq!(counts(&summary, "beta"), Some([3, 1, 2, 0, 0, 0]), "{summary:#}");
    assert_eq!(counts(&summary, "gamma"), Some([1, 0, 1, 0, 0, 0]), "{summary:#}");
    assert_eq!(counts(&summary, "delta"), Some([4, 2, 0, 2, 0, 0]), "{summary:#}");
    assert_eq!(summary["total"]["requests"], 12);
    // The reasons that decided: AGENTS.md for the limit, robots.txt's rule for the deny (not
    // the user-agent line that chose its group); nothing that only allowed.
    let expected = ["AGENTS.md agents_md.rate_limit 1", "robots.txt robots.disallow 1"];
    assert_eq!(top_reasons(&summary, "alpha"), expected, "{summary:#}");
    assert_eq!(top_reasons(&summary, "beta"), ["robots.txt robots.disallow 2"], "{summary:#}");
    // The damaged line is reported with its file and line, and counted.
    assert_eq!(summary["malformed_lines"], 1);
    assert_eq!(summary["malformed"][0]["file"], files[1].display().to_string());
    let rotated_lines = std::fs::read_to_string(&files[1])?.lines().count();
    assert_eq!(summary["malformed"][0]["line"], rotated_lines);

    // The same log unrotated gives the same counts.
    let whole = dir.path().join("whole.jsonl");
    std::fs::write(&whole, &text)?;
    let unrotated = summary_json(&[], std::slice::from_ref(&whole)).await?;
    assert_eq!(unrotated["groups"], summary["groups"]);

    // --since: an hour ago takes everything, a time to come nothing.
    let recent = summary_json(&["--since", "1h"], &files).await?;
    assert_eq!(recent["groups"], summary["groups"]);
    let future = summary_json(&["--since", "2999-01-01T00:00:00Z"], &files).await?;
    assert_eq!(future["requests"], 0);
    let (_, stderr, ok) = audit(&["summary", "--since", "last tuesday", &whole.display().to_string()]).await?;
    assert!(!ok && stderr.contains("--since \"last tuesday\""), "{stderr}");

    // By origin and by outcome.
    let by_outcome = summary_json(&["--by", "outcome"], &files).await?;
    assert_eq!(counts(&by_outcome, "deny").map(|c| c[0]), Some(4), "{by_outcome:#}");
    assert_eq!(counts(&by_outcome, "would_deny").map(|c| c[0]), Some(2), "{by_outcome:#}");
    let by_origin = summary_json(&["--by", "origin"], &files).await?;
    let origin_key = origin.url("/").trim_end_matches('/').to_owned();
    assert_eq!(counts(&by_origin, &origin_key).map(|c| c[0]), Some(12), "{by_origin:#}");

    // The table: aligned columns, a total row; `--format text` is the same.
    let paths: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let mut args = vec!["summary"];
    args.extend(paths.iter().map(String::as_str));
    let (table, stderr, ok) = audit(&args).await?;
    assert!(ok, "{stderr}");
    assert!(table.contains("| agent | requests | allowed | denied |"), "{table}");
    assert!(table.contains("| alpha |        4 |       2 |      1 |"), "{table}");
    assert!(table.contains("| total |       12 |       5 |      4 |"), "{table}");
    let (text_format, _, _) = audit(&["summary", "--format", "text", &whole.display().to_string()]).await?;
    assert!(text_format.contains("| total |       12 |"), "{text_format}");

    // grep: the records that match, as written.
    let mut args = vec!["grep", "--agent", "beta", "--outcome", "deny"];
    args.extend(paths.iter().map(String::as_str));
    let (out, stderr, ok) = audit(&args).await?;
    assert!(ok, "{stderr}");
    let found: Vec<Value> = out.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    assert_eq!(found.len(), 2, "{out}");
    assert!(found.iter().all(|r| r["agentgate.agent"] == "beta" && r["event.action"] == "deny"));
    assert!(out.lines().all(|line| text.lines().any(|l| l == line)), "lines are printed unchanged");
    assert!(stderr.contains("1 lines are not records"), "{stderr}");
    let mut args = vec!["grep", "--origin", &origin_key, "--outcome", "rate_limited", "--since", "1h"];
    args.extend(paths.iter().map(String::as_str));
    let (out, _, _) = audit(&args).await?;
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("\"agentgate.agent\":\"alpha\""), "{out}");
    Ok(())
}

#[tokio::test]
async fn grep_prints_one_line_per_request_and_summary_counts_one_deciding_reason_per_block() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let robots = "User-agent: *\nDisallow: /private\n";
    let site = Site::new().serve("/robots.txt", 200, &[("content-type", "text/plain")], robots);
    let origin = Origin::https_site(&ca, site).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        config.agents = vec![agent("alpha", "a-token"), agent("beta", "b-token")];
    })
    .await?;
    let alpha = client_as(&proxy, "alpha", "a-token")?;
    let beta = client_as(&proxy, "beta", "b-token")?;
    // Forwarded: alpha 3, beta 2. Blocked by robots.txt: alpha 2, beta 2.
    for (client, path, status) in [
        (&alpha, "/page/1", 200),
        (&alpha, "/private/1", 403),
        (&alpha, "/page/2", 200),
        (&beta, "/page/3", 200),
        (&beta, "/private/2", 403),
        (&alpha, "/private/3", 403),
        (&beta, "/private/4", 403),
        (&alpha, "/page/4", 200),
        (&beta, "/page/5", 200),
    ] {
        assert_eq!(client.get(origin.url(path)).send().await?.status(), status, "{path}");
    }
    let (records, text) = proxy.finish_with_text().await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("decisions.jsonl");
    std::fs::write(&log, &text)?;
    let log = log.display().to_string();

    // As written: a forwarded request has its decision line and its completed line, and a
    // block's reasons mark the rule and the user-agent line that chose its group as blocking.
    let ids = |lines: &[Value]| -> std::collections::BTreeSet<String> {
        lines.iter().filter_map(|r| r["event.id"].as_str().map(str::to_owned)).collect()
    };
    // Checkpoint lines (the chain's signatures) are no records.
    let records_text = text.lines().filter(|l| !agentgate::audit::is_checkpoint(l.as_bytes()));
    let written: Vec<Value> = records_text.map(serde_json::from_str).collect::<Result<_, _>>()?;
    assert_eq!((written.len(), ids(&written).len(), records.len()), (14, 9, 9), "{text}");
    let denied = records.iter().find(|r| r["event.action"] == "deny").ok_or("a deny")?;
    let blocking: Vec<&str> = denied["agentgate.reasons"]
        .as_array()
        .ok_or("reasons")?
        .iter()
        .filter(|r| r["blocking"] == true)
        .filter_map(|r| r["code"].as_str())
        .collect();
    assert_eq!(blocking, ["robots.disallow", "robots.group"], "{denied:#}");

    // grep: one line per request, a block's line unchanged, a forwarded request's end line
    // (with its status) completed by its start line's decision (the reasons the end line
    // leaves out): the records the requests ended as.
    let (out, stderr, ok) = audit(&["grep", &log]).await?;
    assert!(ok, "{stderr}");
    let mut found: Vec<Value> = out.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    assert_eq!((found.len(), ids(&found)), (9, ids(&records)), "{out}");
    let ends_without_reasons =
        written.iter().filter(|r| r["event.type"][0] == "end" && r["agentgate.reasons"].is_null());
    assert_eq!(ends_without_reasons.count(), 5, "forwarded requests' end lines leave the reasons out: {text}");
    assert!(found.iter().all(|r| r["agentgate.reasons"].is_array()), "merged: {out}");
    assert!(found.iter().all(|r| r["http.response.status_code"].is_u64()), "completed lines: {out}");
    let by_id = |a: &Value, b: &Value| a["event.id"].as_str().cmp(&b["event.id"].as_str());
    let mut ended_as = records.clone();
    found.sort_by(by_id);
    ended_as.sort_by(by_id);
    assert_eq!(found, ended_as);
    let (alpha_out, _, _) = audit(&["grep", "--agent", "alpha", &log]).await?;
    assert_eq!(alpha_out.lines().count(), 5, "{alpha_out}");
    let (allowed, _, _) = audit(&["grep", "--outcome", "allow", &log]).await?;
    assert_eq!(allowed.lines().count(), 5, "{allowed}");
    // --raw: every line as written, both lines of each forwarded request.
    let (raw, stderr, ok) = audit(&["grep", "--raw", &log]).await?;
    assert!(ok, "{stderr}");
    let as_written: String =
        text.split_inclusive('\n').filter(|l| !agentgate::audit::is_checkpoint(l.as_bytes())).collect();
    assert_eq!(raw, as_written, "every record line, no checkpoint");
    let (raw_allowed, _, _) = audit(&["grep", "--raw", "--outcome", "allow", &log]).await?;
    assert_eq!(raw_allowed.lines().count(), 10, "{raw_allowed}");

    // summary: the same 9 requests; one deciding reason per block, robots.txt's rule, never
    // the group line; the counts are those of --by reason.
    let files = [PathBuf::from(&log)];
    let summary = summary_json(&[], &files).await?;
    assert_eq!(summary["requests"], 9, "{summary:#}");
    assert_eq!(counts(&summary, "alpha"), Some([5, 3, 2, 0, 0, 0]), "{summary:#}");
    assert_eq!(counts(&summary, "beta"), Some([4, 2, 2, 0, 0, 0]), "{summary:#}");
    assert_eq!(top_reasons(&summary, "alpha"), ["robots.txt robots.disallow 2"], "{summary:#}");
    assert_eq!(top_reasons(&summary, "beta"), ["robots.txt robots.disallow 2"], "{summary:#}");
    let by_reason = summary_json(&["--by", "reason"], &files).await?;
    let rows: Vec<(String, u64)> = by_reason["groups"]
        .as_array()
        .ok_or("groups")?
        .iter()
        .filter(|g| g["key"] != "-")
        .map(|g| (g["key"].as_str().unwrap_or("?").to_owned(), g["requests"].as_u64().unwrap_or(0)))
        .collect();
    assert_eq!(rows, [("robots.txt robots.disallow".to_owned(), 4)], "{by_reason:#}");
    let blocks = summary["total"]["denied"].as_u64().ok_or("denied")?;
    let mut per_reason = std::collections::BTreeMap::<String, u64>::new();
    for group in summary["groups"].as_array().ok_or("groups")? {
        for reason in group["top_reasons"].as_array().ok_or("top_reasons")? {
            let name = reason["name"].as_str().ok_or("name")?.to_owned();
            *per_reason.entry(name).or_default() += reason["count"].as_u64().ok_or("count")?;
        }
    }
    assert_eq!(per_reason.into_iter().collect::<Vec<_>>(), rows, "{summary:#}");
    assert_eq!(blocks, 4);
    let (table, _, _) = audit(&["summary", &log]).await?;
    assert!(table.contains("top reasons for blocks") && !table.contains("robots.group"), "{table}");
    Ok(())
}

/// A log written before `event.action` existed: its decisions are in `event.outcome` (two
/// allowed, one with a start line, one robots.txt deny, one unreachable origin).
const OLD_FORMAT_LOG: &str = "tests/e2e/fixtures/decisions-before-event-action.jsonl";

#[tokio::test]
async fn every_record_says_its_decision_in_event_action_and_ecs_outcome_and_old_logs_summarize_the_same() -> TestResult
{
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http_site(Site::new().file("/robots.txt", "User-agent: *\nDisallow: /private\n")).await?;
    let gone = tokio::net::TcpListener::bind("127.0.0.1:0").await?.local_addr()?.port();
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;
    for (url, status) in [
        (origin.url("/page"), 200),
        (origin.url("/other"), 200),
        (origin.url("/private/x"), 403),
        (format!("http://127.0.0.1:{gone}/gone"), 502),
    ] {
        assert_eq!(client.get(&url).send().await?.status(), status, "{url}");
    }
    let (finished, text) = proxy.finish_with_text().await?;
    // The log as written: every line, a forwarded request's start line too.
    let dir = tempfile::tempdir()?;
    let new_log = dir.path().join("decisions.jsonl");
    std::fs::write(&new_log, &text)?;
    // Checkpoint lines (the chain's signatures) are no records.
    let records_text = text.lines().filter(|l| !agentgate::audit::is_checkpoint(l.as_bytes()));
    let lines: Vec<Value> = records_text.map(serde_json::from_str).collect::<Result<_, _>>()?;
    assert!(lines.len() >= 4, "{text}");
    let ecs = ["success", "failure", "unknown"];
    let actions = ["allow", "deny", "needs_approval", "rate_limited", "would_deny", "auth_challenge", "error"];
    for line in &lines {
        let outcome = line["event.outcome"].as_str().unwrap_or_default();
        assert!(ecs.contains(&outcome), "event.outcome is ECS's: {line:#}");
        let action = line["event.action"].as_str().unwrap_or_default();
        assert!(actions.contains(&action), "the decision is in event.action: {line:#}");
        let expected = match (line["event.type"][0].as_str(), action) {
            (Some("start"), _) => "unknown",
            (_, "error") => "failure",
            _ => "success",
        };
        assert_eq!(outcome, expected, "{line:#}");
    }
    let page = finished.iter().find(|r| r["url.full"] == origin.url("/page")).ok_or("the /page record")?;
    assert_eq!((&page["url.path"], &page["url.port"]), (&Value::from("/page"), &Value::from(origin.addr.port())));
    assert_eq!(
        (&page["destination.ip"], &page["destination.port"]),
        (&Value::from("127.0.0.1"), &Value::from(origin.addr.port())),
        "the vetted address dialled: {page:#}"
    );
    let denied = finished.iter().find(|r| r["url.path"] == "/private/x").ok_or("the deny")?;
    assert!(denied.get("destination.ip").is_none(), "a refused request was dialled nowhere: {denied:#}");

    let old = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(OLD_FORMAT_LOG);
    let before = summary_json(&["--by", "outcome"], std::slice::from_ref(&old)).await?;
    let after = summary_json(&["--by", "outcome"], std::slice::from_ref(&new_log)).await?;
    assert_eq!(before["requests"], 4, "{before:#}");
    for key in ["allow", "deny", "error"] {
        assert_eq!(counts(&before, key), counts(&after, key), "{key}: {before:#} {after:#}");
        assert!(counts(&before, key).is_some(), "{key}: {before:#}");
    }
    assert_eq!(before["requests"], after["requests"]);
    let (old_grep, _, ok) = audit(&["grep", "--outcome", "deny", &old.display().to_string()]).await?;
    assert!(ok && old_grep.contains("/private/x"), "grep reads the old log: {old_grep}");
    let (new_grep, _, ok) = audit(&["grep", "--outcome", "deny", &new_log.display().to_string()]).await?;
    assert!(ok && new_grep.contains("/private/x"), "and the new one: {new_grep}");
    Ok(())
}

#[tokio::test]
async fn summary_filters_by_agent_and_origin_reads_standard_input_and_counts_budget_cuts() -> TestResult {
    let old = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(OLD_FORMAT_LOG);
    let mut text = std::fs::read_to_string(&old)?;
    // Another agent's request, and a download a byte budget cut, in the new format.
    text.push_str(concat!(
        r#"{"@timestamp":"2026-11-20T10:00:04.000Z","event.id":"0192a1b2c3d4e5f60718293a4b5c6d74","event.type":["end"],"#,
        r#""event.action":"allow","event.outcome":"success","agentgate.agent":"beta","http.request.method":"GET","#,
        r#""url.full":"https://files.test/big","url.domain":"files.test","http.response.status_code":200,"#,
        r#""http.response.body.bytes":8025,"agentgate.body.cut":"budget"}"#,
        "\n"
    ));
    let run = |args: &'static [&'static str]| {
        let text = text.clone();
        async move {
            let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agentgate"))
                .args(["audit", "summary", "--format", "json"])
                .args(args)
                .arg("-")
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .spawn()?;
            let mut stdin = child.stdin.take().ok_or("stdin")?;
            tokio::io::AsyncWriteExt::write_all(&mut stdin, text.as_bytes()).await?;
            drop(stdin);
            let output = child.wait_with_output().await?;
            assert!(output.status.success());
            TestResult::Ok(serde_json::from_slice::<Value>(&output.stdout)?)
        }
    };
    let all = run(&[]).await?;
    assert_eq!((&all["requests"], &all["total"]["budget_cut"]), (&Value::from(5), &Value::from(1)), "{all:#}");
    let beta = run(&["--agent", "beta"]).await?;
    assert_eq!(beta["requests"], 1, "{beta:#}");
    assert_eq!(beta["groups"][0]["budget_cut"], 1, "{beta:#}");
    let origin = run(&["--origin", "http://127.0.0.1:8081"]).await?;
    assert_eq!(origin["requests"], 3, "two allowed and one denied there: {origin:#}");
    let (table, _, ok) = audit(&["summary", &old.display().to_string()]).await?;
    assert!(ok && table.contains("budget cut") && table.contains("auth_challenges"), "{table}");
    Ok(())
}
