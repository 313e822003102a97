//! `audit summary` over a log the real writer wrote and then damaged: counts per group,
//! the deciding reasons, malformed lines with file and line, `--since`, one request per
//! `event.id` across files, and a read error naming the line.

use std::io::Write;

use super::*;
use crate::audit::record::sample;
use crate::audit::report::query::Since;
use crate::audit::{AuditConfig, AuditLog, Line, Outcome};
use crate::policy::{AgentsTxtCode, AutoctlCode, Reason, RobotsCode};

/// A log written by the real writer, then damaged by hand.
async fn write_log(path: &Path) {
    let (log, writer) = AuditLog::start(
        AuditConfig { path: path.to_path_buf(), ..AuditConfig::default() },
        crate::audit::chain::test_key(),
    )
    .expect("opens");
    let robots = Reason::new(RobotsCode::Disallow, "Disallow: /private").at_line(4);
    let hash = Reason::new(AgentsTxtCode::HashMismatch, "digest differs");
    let allowed = Reason::new(AutoctlCode::Allowed, "allowed-methods: GET").at_line(2);
    let records = [
        ("bot-a", Outcome::Allow, "https://ok.example/", vec![allowed.clone()], 0),
        ("bot-a", Outcome::Allow, "https://ok.example/x", vec![], 0),
        ("bot-a", Outcome::Deny, "https://shop.example/private?q=1", vec![robots.clone(), allowed.clone()], 1),
        ("bot-a", Outcome::Deny, "https://shop.example/private/2", vec![robots.clone()], 1),
        ("bot-a", Outcome::Deny, "https://news.example/", vec![hash.clone()], 1),
        ("bot-a", Outcome::RateLimited, "https://ok.example/y", vec![hash.clone(), allowed], 1),
        ("crawler-b", Outcome::WouldDeny, "https://news.example/a", vec![hash, robots], 2),
        ("crawler-b", Outcome::Error, "http://down.example/", vec![], 0),
    ];
    for (n, (agent, outcome, url, reasons, blocking)) in records.into_iter().enumerate() {
        let mut rec = sample(agent, outcome, url);
        rec.reasons = reasons;
        rec.blocking = blocking;
        if n == 0 {
            // A forwarded request: its decision line, then the completed line, one request.
            rec.line = Line::Start;
            log.record(&rec).await.expect("queued");
            rec.line = Line::End;
            rec.status = Some(200);
        }
        log.record(&rec).await.expect("queued");
    }
    assert_eq!(writer.shutdown().await.written, 9);
    let mut file = std::fs::OpenOptions::new().append(true).open(path).expect("reopens");
    let damage: &[&[u8]] = &[
        b"not json\n",
        b"\n",
        b"{\"event.outcome\":\"deny\"}\n",
        b"[1,2]\n",
        b"{\"agentgate.agent\":\"bot-a\",\"event.outcome\":\"defer\"}\n",
        b"\xff\xfe\n",
        b"{\"agentgate.agent\":\"bot-a\",\"event.out",
    ];
    for bytes in damage {
        file.write_all(bytes).expect("appends");
    }
}

fn counts(pairs: &[(&str, u64)]) -> Vec<Count> {
    pairs.iter().map(|(name, count)| Count { name: (*name).to_owned(), count: *count }).collect()
}

#[tokio::test]
async fn summarizes_a_log_from_the_writer_and_reports_malformed_lines_with_file_and_line() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("decisions.jsonl");
    write_log(&path).await;
    let summary = summarize_files(&[&path], By::Agent, Filter::default()).expect("reading works");

    let bot_a = Counts {
        requests: 7,
        allowed: 2,
        denied: 3,
        rate_limited: 1,
        other: [("defer".to_owned(), 1)].into(),
        ..Counts::default()
    };
    let crawler_b = Counts { requests: 2, would_deny: 1, errors: 1, ..Counts::default() };
    let malformed = |line, error: &str| MalformedLine { file: path.clone(), line, error: error.to_owned() };
    let expected = Summary {
        by: By::Agent,
        requests: 9,
        groups: vec![
            GroupSummary {
                key: "bot-a".to_owned(),
                counts: bot_a,
                top_denied_hosts: counts(&[("shop.example", 2), ("news.example", 1)]),
                // autoctl.allowed rode along on a deny and a rate_limited record: not counted.
                top_reasons: counts(&[("agents.txt agents_txt.hash_mismatch", 2), ("robots.txt robots.disallow", 2)]),
                usage_refused: Vec::new(),
            },
            GroupSummary {
                key: "crawler-b".to_owned(),
                counts: crawler_b,
                top_denied_hosts: counts(&[("news.example", 1)]),
                // Two files blocked it; the first decided, as `--by reason` counts it.
                top_reasons: counts(&[("agents.txt agents_txt.hash_mismatch", 1)]),
                usage_refused: Vec::new(),
            },
        ],
        total: Counts {
            requests: 9,
            allowed: 2,
            denied: 3,
            would_deny: 1,
            rate_limited: 1,
            errors: 1,
            other: [("defer".to_owned(), 1)].into(),
            ..Counts::default()
        },
        malformed_lines: 5,
        // Line 10 is the writer's shutdown checkpoint, skipped as no record.
        malformed: vec![
            malformed(11, "not JSON: expected ident at line 1 column 2"),
            malformed(13, "no string \"agentgate.agent\""),
            malformed(14, "not a JSON object"),
            malformed(16, "not JSON: expected value at line 1 column 1"),
            malformed(17, "not JSON: EOF while parsing a string at line 1 column 37"),
        ],
    };
    assert_eq!(summary, expected);

    let table = summary.render_table();
    let file = path.display().to_string();
    let expected_table = "\
9 requests in 2 groups by agent, 5 malformed lines
| agent     | requests | allowed | denied | needs_approval | would_deny | rate_limited | auth_challenges | errors | defer | sent bytes | received bytes | budget cut |
|-----------|----------|---------|--------|----------------|------------|--------------|-----------------|--------|-------|------------|----------------|------------|
| bot-a     |        7 |       2 |      3 |              0 |          0 |            1 |               0 |      0 |     1 |          0 |              0 |          0 |
| crawler-b |        2 |       0 |      0 |              0 |          1 |            0 |               0 |      1 |     0 |          0 |              0 |          0 |
| total     |        9 |       2 |      3 |              0 |          1 |            1 |               0 |      1 |     1 |          0 |              0 |          0 |
";
    assert!(table.starts_with(expected_table), "{table}");
    assert!(table.contains("\ntop reasons for blocks\n| agent     | deciding reason "), "{table}");
    assert!(table.contains("| crawler-b | agents.txt agents_txt.hash_mismatch |        1 |"), "{table}");
    assert!(!table.contains("autoctl.allowed"), "{table}");
    assert!(table.contains("\ntop denied hosts\n"), "{table}");
    assert!(table.contains("\nmalformed lines (first 5 of 5)\n"), "{table}");
    assert!(table.contains(&format!("| {file} |   11 | not JSON: expected ident at line 1 column 2 ")), "{table}");

    let json = serde_json::to_value(&summary).expect("serializes");
    assert_eq!(json["by"], "agent");
    assert_eq!(json["groups"][0]["key"], "bot-a");
    assert_eq!(json["groups"][0]["denied"], 3);
    assert_eq!(json["groups"][0]["other"]["defer"], 1);
    assert_eq!(json["total"]["requests"], 9);
    assert_eq!(json["malformed"][0]["line"], 11);
}

#[tokio::test]
async fn groups_by_origin_reason_and_outcome() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("decisions.jsonl");
    write_log(&path).await;
    let keys = |by| -> Vec<(String, u64)> {
        let summary = summarize_files(&[&path], by, Filter::default()).expect("reads");
        summary.groups.into_iter().map(|g| (g.key, g.counts.requests)).collect()
    };
    let owned = |pairs: &[(&str, u64)]| pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect::<Vec<_>>();
    assert_eq!(
        keys(By::Origin),
        owned(&[
            ("-", 1),
            ("http://down.example", 1),
            ("https://news.example", 2),
            ("https://ok.example", 3),
            ("https://shop.example", 2)
        ])
    );
    assert_eq!(
        keys(By::Reason),
        owned(&[("-", 4), ("agents.txt agents_txt.hash_mismatch", 3), ("robots.txt robots.disallow", 2)])
    );
    assert_eq!(
        keys(By::Outcome),
        owned(&[("allow", 2), ("defer", 1), ("deny", 3), ("error", 1), ("rate_limited", 1), ("would_deny", 1)])
    );
    // Each block counts its deciding reason once: every agent's top reasons add up to the
    // rows by reason.
    let by_agent = summarize_files(&[&path], By::Agent, Filter::default()).expect("reads");
    let mut top_reasons = BTreeMap::<String, u64>::new();
    for count in by_agent.groups.iter().flat_map(|group| &group.top_reasons) {
        *top_reasons.entry(count.name.clone()).or_default() += count.count;
    }
    let blocked: Vec<(String, u64)> = keys(By::Reason).into_iter().filter(|(key, _)| key != "-").collect();
    assert_eq!(top_reasons.into_iter().collect::<Vec<_>>(), blocked);
    let by_reason = summarize_files(&[&path], By::Reason, Filter::default()).expect("reads").render_table();
    assert!(!by_reason.contains("top reasons for blocks"), "the rows are the reasons already: {by_reason}");
}

#[tokio::test]
async fn since_counts_only_later_records() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("decisions.jsonl");
    write_log(&path).await;
    // Every record was written just now: an hour ago takes them all but the hand-written
    // one without a @timestamp, the future none.
    let now = std::time::SystemTime::now();
    let since = |s: Since| Filter { since: Some(s), ..Filter::default() };
    let all = summarize_files(&[&path], By::Agent, since(Since::parse("1h", now).expect("a duration")));
    assert_eq!(all.expect("reads").requests, 8);
    let later = Since(now + std::time::Duration::from_secs(3600));
    let none = summarize_files(&[&path], By::Agent, since(later)).expect("reads");
    assert_eq!((none.requests, none.malformed_lines), (0, 5), "malformed lines are still reported");
}

#[test]
fn an_empty_log_summarizes_to_a_total_of_nothing() {
    let summary = summarize(&b""[..]).expect("reading works");
    assert_eq!(summary, Summary::default());
    assert_eq!(
        summary.render_table(),
        "\
0 requests in 0 groups by agent, 0 malformed lines
| agent | requests | allowed | denied | needs_approval | would_deny | rate_limited | auth_challenges | errors | sent bytes | received bytes | budget cut |
|-------|----------|---------|--------|----------------|------------|--------------|-----------------|--------|------------|----------------|------------|
| total |        0 |       0 |      0 |              0 |          0 |            0 |               0 |      0 |          0 |              0 |          0 |
"
    );
}

#[test]
fn a_completed_line_in_the_next_file_supersedes_its_decision_line() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let (older, newer) = (dir.path().join("decisions.jsonl.1"), dir.path().join("decisions.jsonl"));
    std::fs::write(&older, "{\"event.id\":\"7\",\"agentgate.agent\":\"a\",\"event.outcome\":\"allow\"}\n")
        .expect("writes");
    let completed = "{\"event.id\":\"7\",\"agentgate.agent\":\"a\",\"event.outcome\":\"allow\",\"http.response.status_code\":200}\n";
    std::fs::write(&newer, completed).expect("writes");
    let summary = summarize_files(&[&older, &newer], By::Agent, Filter::default()).expect("reads");
    assert_eq!(summary.requests, 1);
    let summary = summarize_files(&[&older], By::Agent, Filter::default()).expect("reads");
    assert_eq!(summary.requests, 1, "never completed: counts on its own");
}

#[test]
fn a_read_error_is_an_error_naming_the_line() {
    struct Failing(usize);
    impl std::io::Read for Failing {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let line = b"{\"agentgate.agent\":\"a\",\"event.outcome\":\"allow\"}\n";
            if self.0 == 0 {
                return Err(std::io::Error::other("disk went away"));
            }
            self.0 -= 1;
            buf[..line.len()].copy_from_slice(line);
            Ok(line.len())
        }
    }
    let err = summarize(std::io::BufReader::new(Failing(2))).expect_err("the read fails");
    assert!(matches!(err, AuditError::Read { line: 2, .. }), "{err:?}");
    assert!(err.to_string().contains("after line 2: disk went away"), "{err}");
}

#[test]
fn bytes_sent_and_received_are_summed_per_agent_and_per_origin_from_end_lines() {
    let lines = [
        r#"{"event.id":"1","event.type":["start"],"agentgate.agent":"a","event.outcome":"allow","url.full":"https://x.test/up"}"#,
        r#"{"event.id":"1","event.type":["end"],"agentgate.agent":"a","event.outcome":"allow","url.full":"https://x.test/up","http.request.body.bytes":1000,"http.response.status_code":200,"http.response.body.bytes":20}"#,
        r#"{"event.id":"2","event.type":["end"],"agentgate.agent":"a","event.outcome":"allow","url.full":"https://y.test/down","http.request.body.bytes":0,"http.response.status_code":200,"http.response.body.bytes":5000}"#,
        r#"{"event.id":"3","event.type":["end"],"agentgate.agent":"b","event.outcome":"allow","url.full":"https://x.test/down","http.request.body.bytes":7,"http.response.status_code":200,"http.response.body.bytes":300}"#,
        r#"{"event.id":"4","event.type":["denied"],"agentgate.agent":"b","event.outcome":"deny","url.full":"https://x.test/private","http.response.status_code":403}"#,
    ];
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("decisions.jsonl");
    std::fs::write(&path, lines.join("\n")).expect("writes");
    let bytes = |summary: &Summary, key: &str| {
        let group = summary.groups.iter().find(|g| g.key == key).expect(key);
        (group.counts.requests, group.counts.sent_bytes, group.counts.received_bytes)
    };
    let by_agent = summarize_files(&[&path], By::Agent, Filter::default()).expect("reads");
    assert_eq!(by_agent.requests, 4, "the start line is not a request of its own");
    assert_eq!(bytes(&by_agent, "a"), (2, 1000, 5020));
    assert_eq!(bytes(&by_agent, "b"), (2, 7, 300));
    assert_eq!((by_agent.total.sent_bytes, by_agent.total.received_bytes), (1007, 5320));
    let by_origin = summarize_files(&[&path], By::Origin, Filter::default()).expect("reads");
    assert_eq!(bytes(&by_origin, "https://x.test"), (3, 1007, 320));
    assert_eq!(bytes(&by_origin, "https://y.test"), (1, 0, 5000));
    let table = by_origin.render_table();
    assert!(table.contains("| sent bytes | received bytes |"), "{table}");
    assert!(table.contains("| total          |        4 |       3 |      1 |"), "{table}");
    assert!(table.contains("|       1007 |           5320 |"), "{table}");
}

#[test]
fn usage_refusals_are_counted_per_agent_and_purpose_refused() {
    let refused = r#""agentgate.reasons":[{"source":"usage","code":"usage.refused","blocking":true}]"#;
    let pref = |label: &str, purpose: &str, value: &str, stance: &str| {
        format!(
            r#"{{"source":"robots.txt Content-Signal","line":2,"label":"{label}","purpose":"{purpose}","value":"{value}","stance":"{stance}"}}"#
        )
    };
    let (train_no, input_no, search_yes) = (
        pref("ai-train", "train-ai", "no", "refuse"),
        pref("ai-input", "ai-input", "no", "refuse"),
        pref("search", "search", "yes", "allow"),
    );
    let lines = [
        // Declared train-ai: refused for it, not for ai-input, which it did not declare.
        format!(
            r#"{{"event.id":"1","agentgate.agent":"a","event.action":"deny",{refused},"agentgate.purposes":["train-ai"],"agentgate.usage":[{search_yes},{train_no},{input_no}]}}"#
        ),
        format!(
            r#"{{"event.id":"2","agentgate.agent":"a","event.action":"would_deny",{refused},"agentgate.purposes":["train-ai"],"agentgate.usage":[{train_no}]}}"#
        ),
        // Declared nothing under undeclared = "deny": every purpose the site refuses.
        format!(
            r#"{{"event.id":"3","agentgate.agent":"b","event.action":"deny",{refused},"agentgate.usage":[{train_no},{input_no}]}}"#
        ),
        // Allowed with a refusal of a purpose not declared: not a usage refusal.
        format!(
            r#"{{"event.id":"4","agentgate.agent":"b","event.action":"allow","agentgate.purposes":["search"],"agentgate.usage":[{train_no}]}}"#
        ),
    ];
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("decisions.jsonl");
    std::fs::write(&path, lines.join("\n")).expect("writes");
    let summary = summarize_files(&[&path], By::Agent, Filter::default()).expect("reads");
    let refused_of = |key: &str| summary.groups.iter().find(|g| g.key == key).map(|g| &g.usage_refused).expect(key);
    assert_eq!(refused_of("a"), &counts(&[("train-ai", 2)]));
    assert_eq!(refused_of("b"), &counts(&[("ai-input", 1), ("train-ai", 1)]));
    let table = summary.render_table();
    assert!(table.contains("usage refusals (usage.refused)"), "{table}");
    assert!(table.contains("| a     | train-ai        |        2 |"), "{table}");
}

#[test]
fn tool_calls_are_counted_per_agent_server_and_tool() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("decisions.jsonl");
    let line = |n: u32, agent: &str, action: &str, tool: Option<&str>| {
        let tool = tool.map_or_else(String::new, |t| {
            format!(r#","agentgate.mcp.method":"tools/call","agentgate.mcp.tool":"{t}""#)
        });
        format!(
            r#"{{"event.id":"{n:032x}","agentgate.agent":"{agent}","event.action":"{action}","url.full":"https://mcp.test/mcp","url.domain":"mcp.test"{tool}}}"#
        )
    };
    let lines = [
        line(1, "sbx", "allow", Some("search")),
        line(2, "sbx", "allow", Some("search")),
        line(3, "sbx", "deny", Some("delete_repo")),
        line(4, "ci", "allow", Some("search")),
        line(5, "sbx", "allow", None),
    ];
    std::fs::write(&path, lines.join("\n")).expect("writes");
    let summary = summarize_files(&[&path], By::Tool, Filter::default()).expect("reads");
    let rows: Vec<(&str, u64, u64)> =
        summary.groups.iter().map(|g| (g.key.as_str(), g.counts.allowed, g.counts.denied)).collect();
    assert_eq!(
        rows,
        [("-", 1, 0), ("ci mcp.test search", 1, 0), ("sbx mcp.test delete_repo", 0, 1), ("sbx mcp.test search", 2, 0)]
    );
    assert!(summary.render_table().contains("| agent server tool "), "{}", summary.render_table());
}
