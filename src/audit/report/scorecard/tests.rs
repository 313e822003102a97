use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;

use super::*;
use crate::audit::summarize_files;

/// A log of two agents: `alpha` allowed twice (one of them a start line and its end line),
/// refused by robots.txt line 2 and rate-limited by AGENTS.md; `beta` (monitor mode) a
/// would_deny by the same robots.txt rule, a minute later.
const LOG: &str = r#"{"@timestamp":"2026-11-23T10:00:00.000Z","event.id":"01","event.type":["start"],"event.action":"allow","agentgate.agent":"alpha","url.full":"https://shop.test/a","url.domain":"shop.test","agentgate.reasons":[]}
{"@timestamp":"2026-11-23T10:00:01.000Z","event.id":"01","event.type":["end"],"event.action":"allow","agentgate.agent":"alpha","http.request.body.bytes":3,"http.response.body.bytes":2048,"http.response.status_code":200}
{"@timestamp":"2026-11-23T10:00:02.000Z","event.id":"02","event.type":["end"],"event.action":"allow","agentgate.agent":"alpha","url.full":"https://docs.test/b","url.domain":"docs.test","http.response.body.bytes":10,"http.response.status_code":200}
{"@timestamp":"2026-11-23T10:00:03.000Z","event.id":"03","event.type":["denied"],"event.action":"deny","agentgate.agent":"alpha","url.full":"https://shop.test/private","url.domain":"shop.test","agentgate.reasons":[{"source":"robots.txt","code":"robots.disallow","line":2,"rule":"Disallow: /private","blocking":true},{"source":"robots.txt","code":"robots.group","line":1,"rule":"User-agent: *","blocking":true}]}
{"@timestamp":"2026-11-23T10:00:04.000Z","event.id":"04","event.type":["denied"],"event.action":"rate_limited","agentgate.agent":"alpha","url.full":"https://shop.test/a","url.domain":"shop.test","agentgate.reasons":[{"source":"AGENTS.md","code":"agents_md.rate_limit","line":7,"rule":"- requests-per-minute: 2","blocking":true}]}
{"@timestamp":"2026-11-23T10:01:00.000Z","event.id":"05","event.type":["end"],"event.action":"would_deny","agentgate.agent":"beta","url.full":"https://shop.test/private/x","url.domain":"shop.test","http.response.status_code":200,"agentgate.reasons":[{"source":"robots.txt","code":"robots.disallow","line":2,"rule":"Disallow: /private","blocking":true}]}
"#;

fn log_file(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("writes");
    path
}

#[test]
fn each_agents_figures_are_the_summarys_and_its_card_says_what_decided_where() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = log_file(&dir, "decisions.jsonl", LOG);
    let card = scorecard(&[&path], Filter::default()).expect("reads");
    assert_eq!(card.summary, summarize_files(&[&path], By::Agent, Filter::default()).expect("reads"));
    let keys: Vec<&str> = card.cards.iter().map(|c| c.agent.as_str()).collect();
    assert_eq!(keys, ["alpha", "beta"]);

    let alpha = &card.cards[0];
    let blocks = |refused, would_deny| Blocks { refused, would_deny };
    assert_eq!(alpha.by_source, [("AGENTS.md".to_owned(), blocks(1, 0)), ("robots.txt".to_owned(), blocks(1, 0))]);
    assert_eq!(
        alpha.by_code,
        [
            ("AGENTS.md agents_md.rate_limit".to_owned(), blocks(1, 0)),
            ("robots.txt robots.disallow".to_owned(), blocks(1, 0))
        ]
    );
    let hosts: Vec<(&str, u64, u64)> =
        alpha.top_origins.iter().map(|o| (o.origin.as_str(), o.requests, o.blocks.refused)).collect();
    assert_eq!(
        hosts,
        [("https://shop.test", 3, 2), ("https://docs.test", 1, 0)],
        "the start and end line are one request"
    );
    // The rule itself, not the user-agent line that selected its group.
    let robots = Rule {
        origin: "https://shop.test".to_owned(),
        source: "robots.txt".to_owned(),
        line: Some(2),
        code: "robots.disallow".to_owned(),
        rule: "Disallow: /private".to_owned(),
    };
    assert!(alpha.top_rules.contains(&(robots.clone(), blocks(1, 0))), "{:?}", alpha.top_rules);
    assert_eq!(card.cards[1].top_rules, [(robots, blocks(0, 1))]);

    // One shared axis: a request is at its completed line's time, 10:00:01 to 10:01:00, in
    // 1 s bars (59 s fit in 60 of them, not in 60 of 500 ms).
    let (a, b) = (&alpha.timeline, &card.cards[1].timeline);
    assert_eq!((a.bucket, a.bars.len(), a.start), (Duration::from_secs(1), 60, b.start));
    assert_eq!(a.bars[..4], [[1, 0, 0, 0], [1, 0, 0, 0], [0, 0, 1, 0], [0, 0, 1, 0]]);
    assert_eq!((a.bars[59], b.bars[59]), ([0; 4], [0, 1, 0, 0]));
    assert_eq!(card.span.map(|(f, l)| l.duration_since(f).ok()), Some(Some(Duration::from_secs(59))));
}

#[test]
fn gzip_and_plain_files_read_as_one_log_and_filters_apply() {
    // Past a minute the bars widen: 10:00:01 to 10:09:00 takes 55 bars of 10 s.
    let late = LOG.replace("2026-11-23T10:01:00.000Z", "2026-11-23T10:09:00.000Z");
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = log_file(&dir, "late.jsonl", &late);
    let card = scorecard(&[&path], Filter::default()).expect("reads");
    assert_eq!((card.cards[0].timeline.bucket, card.cards[0].timeline.bars.len()), (Duration::from_secs(10), 55));

    let dir = tempfile::tempdir().expect("a temp dir");
    let lines: Vec<&str> = LOG.lines().collect();
    let mut gzip = GzEncoder::new(Vec::new(), Compression::default());
    gzip.write_all(format!("{}\n", lines[..1].join("\n")).as_bytes()).expect("compresses");
    let rotated = dir.path().join("decisions.jsonl.1");
    std::fs::write(&rotated, gzip.finish().expect("compresses")).expect("writes");
    let current = log_file(&dir, "decisions.jsonl", &format!("{}\n", lines[1..].join("\n")));
    let whole = scorecard(&[&rotated, &current], Filter::default()).expect("reads");
    assert_eq!(whole.summary.total.requests, 5);
    assert_eq!(whole.summary.groups[0].counts.received_bytes, 2058, "the end line in the next file completes it");
    let beta = Filter { agents: vec!["beta".to_owned()], ..Filter::default() };
    let only = scorecard(&[&rotated, &current], beta).expect("reads");
    assert_eq!(only.cards.len(), 1);
    assert_eq!(only.cards[0].agent, "beta");
}

#[test]
fn an_empty_log_renders_a_page_that_says_so() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = log_file(&dir, "empty.jsonl", "");
    let card = scorecard(&[&path], Filter::default()).expect("reads");
    assert!(card.cards.is_empty() && card.span.is_none());
    let html = card.to_html(&[]);
    assert!(html.starts_with("<!doctype html>") && html.ends_with("</html>\n"), "{html}");
    assert!(html.contains("<p id=\"report-scope\">0 requests by 0 agents</p>"), "{html}");
    assert!(html.contains("id=\"no-records\""), "{html}");
    assert!(!html.contains("<section class=\"agent\""), "{html}");
}

/// A site's rule text, a URL and a host are the site's and the agent's to choose: the page
/// shows them as text.
#[test]
fn markup_in_log_values_is_shown_as_text() {
    let hostile = r#"{"@timestamp":"2026-11-23T10:00:00.000Z","event.id":"09","event.type":["denied"],"event.action":"deny","agentgate.agent":"a\"><script>alert(1)</script>","url.full":"https://x<script>alert(2)</script>/<img src=x onerror=alert(3)>?q=\"'&","url.domain":"x.test","agentgate.reasons":[{"source":"robots.txt<b>","code":"robots.disallow","line":2,"rule":"Disallow: /</td><script>alert(4)</script>\u202e","blocking":true}]}"#;
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = log_file(&dir, "hostile.jsonl", hostile);
    let card = scorecard(&[&path], Filter::default()).expect("reads");
    let html = card.to_html(&["/logs/<x>.jsonl".to_owned()]);
    for markup in ["<script", "<img", "<b>", "\u{202e}"] {
        assert!(!html.contains(markup), "{markup:?} in the page:\n{html}");
    }
    for shown in [
        "a&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;",
        "https://x&lt;script&gt;alert(2)&lt;",
        "Disallow: /&lt;/td&gt;&lt;script&gt;alert(4)&lt;/script&gt;\\u202E",
        "robots.txt&lt;b&gt;:2",
        "/logs/&lt;x&gt;.jsonl",
    ] {
        assert!(html.contains(shown), "{shown:?} not in the page:\n{html}");
    }
    // Nothing on the page runs or loads: no script, and a policy allowing only its style.
    let policy = content_security_policy();
    assert!(html.contains(&format!("content=\"{policy}\"")), "{html}");
    assert!(policy.starts_with("default-src 'none'; style-src 'sha256-"), "{policy}");
    for fetching in ["src=\"", "href=\"http", "url(", "@import", "<link"] {
        assert!(!html.contains(fetching), "{fetching:?} in the page");
    }
}

#[test]
fn figures_on_the_page_are_the_summarys_exact_numbers() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = log_file(&dir, "decisions.jsonl", LOG);
    let card = scorecard(&[&path], Filter::default()).expect("reads");
    let html = card.to_html(&[]);
    let section =
        html.split("<section class=\"agent\" id=\"agent-0\" data-agent=\"alpha\">").nth(1).expect("alpha's section");
    for (name, value) in [
        ("requests", 4),
        ("allowed", 2),
        ("denied", 1),
        ("rate_limited", 1),
        ("would_deny", 0),
        ("received_bytes", 2058),
    ] {
        let cell = format!("data-figure=\"{name}\" data-value=\"{value}\"");
        assert!(section.contains(&cell), "{cell} in {section}");
    }
    assert!(section.contains(">2.0 KiB</td>"), "bytes shown in units: {section}");
    assert!(html.contains("<tr id=\"total\">"), "{html}");
}
