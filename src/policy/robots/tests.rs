//! robots.txt tests: the conformance corpora in process (with the known differences), RFC
//! 9309 and SEMANTICS tables asserting opinion and reason, fetch outcomes, lint, hostile
//! input and a no-panic property.

use proptest::prelude::*;

use super::*;
use crate::policy::{FetchError, Headers, Severity};

const KNOWN_DIFFERENCES: &str =
    include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/conformance/robots-known-differences.txt"));

/// A GET for `path_and_query` by an agent with a configured product token.
fn view<'a>(headers: &'a Headers, token: Option<&'a str>, path_and_query: &'a str) -> RequestView<'a> {
    RequestView {
        method: "GET",
        scheme: "https",
        host: "example.com",
        port: 443,
        path_and_query,
        product_token: token,
        user_agent: None,
        agent_id: "test",
        trust_level: 0,
        purposes: &[],
        headers,
    }
}

fn verdict(body: &str, token: &str, path: &str) -> SourceVerdict {
    let headers = Headers::default();
    RobotsState::parse(body.as_bytes()).evaluate(&view(&headers, Some(token), path))
}

/// Opinion, then (code, line, rule) of each reason.
fn summary(v: &SourceVerdict) -> (Opinion, Vec<(String, Option<u32>, String)>) {
    assert!(v.reasons.iter().all(|r| r.source == Source::Robots), "{v:?}");
    (v.opinion, v.reasons.iter().map(|r| (r.code.clone(), r.line, r.rule.clone())).collect())
}

fn reasons(list: &[(&str, u32, &str)]) -> Vec<(String, Option<u32>, String)> {
    list.iter().map(|(code, line, rule)| (code.to_string(), Some(*line), rule.to_string())).collect()
}

// ---------------------------------------------------------------------------------------
// Conformance corpora, run in process the way `agentgate explain` runs them.

/// `path_and_query` as explain derives it: everything after the authority up to the
/// fragment, `/` when empty, a leading `/` added before a bare query.
fn explain_path(url: &str) -> String {
    let rest = match url.split_once("://") {
        Some((_, after)) => after.find(['/', '?', '#']).map_or("", |i| &after[i..]),
        None => url,
    };
    let rest = rest.split('#').next().unwrap_or("");
    if rest.starts_with('/') { rest.to_string() } else { format!("/{rest}") }
}

fn known_differences() -> Vec<(&'static str, &'static str)> {
    KNOWN_DIFFERENCES
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_once('\t').unwrap_or_else(|| panic!("known-differences line without a TAB: {l:?}")))
        .collect()
}

#[test]
fn conformance_google_and_rfc9309_corpora() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/conformance/robots");
    let known = known_differences();
    let mut seen_known = Vec::new();
    let mut failures = Vec::new();
    let mut passed = 0;
    for file in ["google.jsonl", "rfc9309.jsonl"] {
        let path = format!("{dir}/{file}");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("corpus {path} missing: {e}"));
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let case: serde_json::Value = serde_json::from_str(line).expect("corpus lines are JSON");
            let id = case["id"].as_str().expect("every case has an id");
            let body = case["robots"].as_str().expect("google.jsonl and rfc9309.jsonl bodies are text");
            let token = case["user_agent"].as_str().expect("every case has a user agent");
            let url = case["url"].as_str().expect("every case has a url");
            let expected = case["allowed"].as_bool().expect("every case has an expectation");
            let headers = Headers::default();
            let path = explain_path(url);
            let got = RobotsState::parse(body.as_bytes()).evaluate(&view(&headers, Some(token), &path));
            let allowed = got.opinion != Opinion::Deny;
            match known.iter().find(|(k, _)| *k == id) {
                Some(_) => {
                    seen_known.push(id.to_string());
                    if allowed == expected {
                        failures.push(format!("{id}: listed as a known difference but passes; remove it"));
                    }
                }
                None if allowed == expected => passed += 1,
                None => failures.push(format!(
                    "{file} {id}: expected allowed={expected}, got {:?} {:?}\n  ua={token:?} url={url:?} note={}",
                    got.opinion, got.reasons, case["note"]
                )),
            }
        }
    }
    for (id, _) in &known {
        if !seen_known.iter().any(|s| s == id) {
            failures.push(format!("{id}: listed as a known difference but no such case"));
        }
    }
    assert!(failures.is_empty(), "{} passed, {} failed:\n{}", passed, failures.len(), failures.join("\n"));
    assert_eq!(passed + known.len(), 145 + 49, "every corpus case ran");
}

#[test]
fn explain_path_matches_the_integrators_rule() {
    assert_eq!(explain_path(""), "/");
    assert_eq!(explain_path("http://foo.bar"), "/");
    assert_eq!(explain_path("http://foo.bar/x/y?a=b#frag"), "/x/y?a=b");
    assert_eq!(explain_path("http://foo.bar?q"), "/?q");
}
