//! The console's first paint: the latest decisions rendered into the page as it is served,
//! so an operator sees rows before the script has loaded (or with scripts off); the script
//! removes them and shows the same lines again from `/decisions/recent` and the live stream.
//!
//! Never: writes a value from the log as markup: every value is HTML-escaped, and each
//! display-unsafe character (`crate::audit::is_display_unsafe`) shown as its escape
//! (`\u202E`), as the script's `visible` does.

use std::fmt::Write as _;
use std::sync::Arc;

use serde_json::Value;

use crate::audit::html_text as escape;

/// How many of the latest decisions the page carries.
pub(super) const ROWS: usize = 50;

/// The table rows of `lines` (decision-log lines, newest first); a line that is not a JSON
/// object is left out. A request's end line and its decision line share an `event.id`: they
/// make one row, the newer line's fields over the older's (as the script merges them).
pub(super) fn rows(lines: &[Arc<str>]) -> String {
    let mut merged: Vec<serde_json::Map<String, Value>> = Vec::new();
    for line in lines {
        let Ok(Value::Object(record)) = serde_json::from_str::<Value>(line) else { continue };
        let id = record.get("event.id").filter(|id| !id.is_null());
        match merged.iter_mut().find(|seen| id.is_some() && seen.get("event.id") == id) {
            Some(newer) => {
                for (name, value) in record {
                    newer.entry(name).or_insert(value);
                }
            }
            None => merged.push(record),
        }
    }
    let mut html = String::new();
    for record in merged {
        let record = Value::Object(record);
        let reasons = record["agentgate.reasons"].as_array().map_or_else(String::new, |reasons| deciding(reasons));
        row(&mut html, &record, &reasons);
    }
    html
}

/// One `<tr>`: time, agent, decision, status, method, URL, deciding reasons.
fn row(html: &mut String, record: &Value, reasons: &str) {
    let field = |name: &str| match &record[name] {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    };
    let time = field("@timestamp").chars().skip(11).take(12).collect::<String>();
    // The decision: `event.action`; a line written before that field held it in
    // `event.outcome` (docs/decision-log.md, "ECS").
    let action = match field("event.action") {
        action if action.is_empty() => field("event.outcome"),
        action => action,
    };
    let status = match field("http.response.status_code") {
        status if status.is_empty() => "…".to_owned(),
        status => status,
    };
    let _ = write!(
        html,
        "<tr class=\"decision first-paint\"><td>{}</td><td>{}</td><td><span class=\"outcome {}\">{}</span></td>\
         <td>{}</td><td>{}</td><td><span class=\"url\">{}</span></td><td>{}</td></tr>",
        escape(&time),
        escape(&field("agentgate.agent")),
        escape(&action),
        escape(&action),
        escape(&status),
        escape(&field("http.request.method")),
        escape(&field("url.full")),
        escape(reasons),
    );
}

/// The deciding reasons as the script's `reasonText` writes them: the blocking ones, or the
/// first; `source:line code rule`, joined by `; `.
fn deciding(reasons: &[Value]) -> String {
    let blocking: Vec<&Value> = reasons.iter().filter(|r| r["blocking"] == true).collect();
    let chosen = if blocking.is_empty() { reasons.iter().take(1).collect() } else { blocking };
    chosen
        .iter()
        .map(|reason| {
            let source = reason["source"].as_str().unwrap_or_default();
            let at = match reason["line"].as_u64() {
                Some(line) => format!("{source}:{line}"),
                None => source.to_owned(),
            };
            match reason["rule"].as_str().filter(|rule| !rule.is_empty()) {
                Some(rule) => format!("{at} {} {rule}", reason["code"].as_str().unwrap_or_default()),
                None => format!("{at} {}", reason["code"].as_str().unwrap_or_default()),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_escaped_and_each_request_shown_once_with_its_deciding_reason() {
        let decision = r#"{"event.id":"a1","@timestamp":"2026-11-29T03:04:05.678Z","agentgate.agent":"<b>bot</b>","event.action":"deny","http.request.method":"GET","url.full":"https://x.test/\u202Eexe.pdf?q=\"'&","http.response.status_code":403,"agentgate.reasons":[{"source":"robots.txt","line":2,"code":"robots.disallow","rule":"Disallow: /","blocking":true}]}"#;
        let end = r#"{"event.id":"a1","event.type":"end","http.response.status_code":403}"#;
        let lines: Vec<Arc<str>> = vec![Arc::from(end), Arc::from(decision), Arc::from("not json")];
        let html = rows(&lines);
        assert_eq!(html.matches("<tr").count(), 1, "{html}");
        assert!(html.contains("&lt;b&gt;bot&lt;/b&gt;"), "{html}");
        assert!(html.contains(r"https://x.test/\u202Eexe.pdf?q=&quot;&#39;&amp;"), "{html}");
        assert!(html.contains("robots.txt:2 robots.disallow Disallow: /"), "{html}");
        assert!(!html.contains('\u{202e}') && !html.contains("<b>"), "{html}");
    }
}
