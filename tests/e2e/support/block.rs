//! What a block answer must say (DESIGN §6), checked the same way in every gate test: the
//! status, the `agentgate-decision` header, the body (plain text or JSON) naming the file, the
//! line, the rule and the advice, and the record id that ties the answer to its log line.

use serde_json::Value;

use super::log::by_id;
use super::{TestResult, header};

/// The blocking reason a test expects to be cited first.
#[derive(Clone, Copy, Debug)]
pub struct Expected<'a> {
    /// `deny` or `needs_approval`.
    pub decision: &'a str,
    /// `robots.txt`, `agents.txt`, `AGENTS.md`, `automation-preferences.txt`, `operator`.
    pub source: &'a str,
    /// The stable reason code, e.g. `robots.disallow`.
    pub code: &'a str,
    /// The 1-based line cited, when one line decided.
    pub line: Option<u64>,
    /// Text the cited rule contains (e.g. `/private`).
    pub rule: &'a str,
    /// Text the advice for this reason contains.
    pub advice: &'a str,
}

/// The record id at the end of an `agentgate-decision` header.
fn record_in_header(value: &str) -> TestResult<String> {
    let id = value
        .split(';')
        .map(str::trim)
        .find_map(|part| part.strip_prefix("record="))
        .ok_or_else(|| format!("no record= in agentgate-decision: {value:?}"))?;
    Ok(id.to_owned())
}

/// Checks the status and header of a block answer; returns the header's record id.
fn check_head(response: &reqwest::Response, expected: &Expected<'_>) -> TestResult<String> {
    assert_eq!(response.status(), 403, "a block is a 403");
    let value = header(response, "agentgate-decision");
    let mut prefix = format!("{}; source={}", expected.decision, expected.source);
    if let Some(line) = expected.line {
        prefix.push_str(&format!("; line={line}"));
    }
    prefix.push_str(&format!("; code={}; record=", expected.code));
    assert!(value.starts_with(&prefix), "agentgate-decision {value:?} should start with {prefix:?}");
    record_in_header(&value)
}

/// A plain-text block answer: 403, header, and a body naming the file, line, rule, code,
/// advice and record id. Returns the record id.
pub async fn plain(response: reqwest::Response, expected: &Expected<'_>) -> TestResult<String> {
    let record = check_head(&response, expected)?;
    assert!(header(&response, "content-type").starts_with("text/plain"), "plain text without Accept: json");
    let body = response.text().await?;
    let line = expected.line.map(|l| format!(" line {l}")).unwrap_or_default();
    let why = format!("- {}{line}: \"", expected.source);
    assert!(body.contains(&why), "the body names the file and line ({why:?}): {body}");
    assert!(body.contains(expected.rule), "the body quotes the rule {:?}: {body}", expected.rule);
    assert!(body.contains(&format!("[{}]", expected.code)), "the body names the code: {body}");
    assert!(body.contains("What you can do instead:"), "the body has advice: {body}");
    assert!(body.contains(expected.advice), "the advice says {:?}: {body}", expected.advice);
    assert!(body.contains(&format!("Decision: {} (decision record {record})", expected.decision)), "{body}");
    Ok(record)
}

/// A JSON block answer (the request said `Accept: application/json`): 403, header, and a
/// body with `decision`, `record_id` and the first reason's source, code, line, rule and
/// advice. Returns the record id.
pub async fn json(response: reqwest::Response, expected: &Expected<'_>) -> TestResult<String> {
    let record = check_head(&response, expected)?;
    assert_eq!(header(&response, "content-type"), "application/json");
    let body: Value = serde_json::from_str(&response.text().await?)?;
    assert_eq!(body["decision"], expected.decision, "{body:#}");
    assert_eq!(body["record_id"], record.as_str(), "the body and the header carry the same record id: {body:#}");
    let first = &body["reasons"][0];
    assert_eq!(first["source"], expected.source, "{body:#}");
    assert_eq!(first["code"], expected.code, "{body:#}");
    assert_eq!(first["line"].as_u64(), expected.line, "{body:#}");
    let rule = first["rule"].as_str().unwrap_or_default();
    assert!(rule.contains(expected.rule), "reasons[0].rule {rule:?} should contain {:?}", expected.rule);
    let advice = first["advice"].as_str().unwrap_or_default();
    assert!(advice.contains(expected.advice), "reasons[0].advice {advice:?} should contain {:?}", expected.advice);
    Ok(record)
}

/// The log line of a blocked request: found by the record id the agent was given, with the
/// outcome, method, status 403 and the first reason as expected.
pub fn logged(records: &[Value], record: &str, method: &str, expected: &Expected<'_>) -> TestResult {
    let line = by_id(records, record)?;
    assert_eq!(line["event.action"], expected.decision, "{line:#}");
    assert_eq!(line["event.outcome"], "success", "ECS: the gate did what it decided: {line:#}");
    assert_eq!(line["http.request.method"], method, "{line:#}");
    assert_eq!(line["http.response.status_code"], 403, "{line:#}");
    let first = &line["agentgate.reasons"][0];
    assert_eq!(first["source"], expected.source, "{line:#}");
    assert_eq!(first["code"], expected.code, "{line:#}");
    assert_eq!(first["line"].as_u64(), expected.line, "{line:#}");
    Ok(())
}
