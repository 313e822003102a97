//! A recording as HAR 1.2 (`agentgate record har DIR [--agent ID]`): one entry per recorded
//! exchange, in the order recorded, for browsers' devtools and HAR tools. A body is given as
//! text when it is UTF-8 and as base64 (`encoding`) otherwise; a body kept cut at
//! `[record] max_body` says so in the entry's `comment`, its `size` being the whole's.
//! agentgate's own fields are `_agent` and `_eventId` (HAR's custom-field prefix).
//!
//! Never: reads policy files or lookups (not exchanges an agent made), or invents timings:
//! the whole time is `wait`, the parts HAR does not require are `-1`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::format::{Body, Exchange, Line};

/// The HAR 1.2 document of the exchanges in `lines`, those of `agent` only when given.
pub fn har(lines: &[Line], agent: Option<&str>) -> Value {
    let entries: Vec<Value> = lines
        .iter()
        .filter_map(|line| match line {
            Line::Exchange(exchange) if agent.is_none_or(|agent| agent == exchange.agent) => Some(entry(exchange)),
            _ => None,
        })
        .collect();
    json!({
        "log": {
            "version": "1.2",
            "creator": { "name": "agentgate", "version": env!("CARGO_PKG_VERSION") },
            "pages": [],
            "entries": entries,
        }
    })
}

fn entry(exchange: &Exchange) -> Value {
    let request = &exchange.request;
    let response = &exchange.response;
    let mut request_json = json!({
        "method": exchange.method,
        "url": exchange.url,
        "httpVersion": exchange.http_version,
        "cookies": cookies(&request.headers, "cookie"),
        "headers": headers(&request.headers),
        "queryString": query(&exchange.url),
        "headersSize": -1,
        "bodySize": request.body.bytes,
    });
    if request.body.bytes > 0 {
        let (text, encoding) = text(&request.body);
        let mut post = json!({ "mimeType": header(&request.headers, "content-type").unwrap_or(""), "text": text });
        if let Some(encoding) = encoding {
            post["_encoding"] = json!(encoding);
        }
        request_json["postData"] = post;
    }
    let (body_text, encoding) = text(&response.body);
    let mut content = json!({
        "size": response.body.bytes,
        "mimeType": header(&response.headers, "content-type").unwrap_or("x-unknown"),
        "text": body_text,
    });
    if let Some(encoding) = encoding {
        content["encoding"] = json!(encoding);
    }
    let status_text = http::StatusCode::from_u16(response.status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
    let mut entry = json!({
        "startedDateTime": exchange.started,
        "time": exchange.time_ms,
        "request": request_json,
        "response": {
            "status": response.status,
            "statusText": status_text,
            "httpVersion": exchange.http_version,
            "cookies": cookies(&response.headers, "set-cookie"),
            "headers": headers(&response.headers),
            "content": content,
            "redirectURL": header(&response.headers, "location").unwrap_or(""),
            "headersSize": -1,
            "bodySize": response.body.bytes,
        },
        "cache": {},
        "timings": { "blocked": -1, "dns": -1, "connect": -1, "ssl": -1, "send": 0, "wait": exchange.time_ms, "receive": 0 },
        "_agent": exchange.agent,
        "_eventId": exchange.event_id,
    });
    let cut: Vec<&str> = [(request.body.cut, "request"), (response.body.cut, "response")]
        .into_iter()
        .filter_map(|(cut, which)| cut.then_some(which))
        .collect();
    if !cut.is_empty() {
        entry["comment"] = json!(format!("{} body cut at [record] max_body", cut.join(" and ")));
    }
    entry
}

fn headers(lines: &[(String, String)]) -> Vec<Value> {
    lines.iter().map(|(name, value)| json!({ "name": name, "value": value })).collect()
}

fn header<'a>(lines: &'a [(String, String)], name: &str) -> Option<&'a str> {
    lines.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str())
}

/// `Cookie` pairs (`a=1; b=2`) or each `Set-Cookie`'s first pair.
fn cookies(lines: &[(String, String)], name: &str) -> Vec<Value> {
    let values = lines.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, value)| value.as_str());
    let pairs: Vec<&str> = match name {
        "cookie" => values.flat_map(|value| value.split(';')).collect(),
        _ => values.filter_map(|value| value.split(';').next()).collect(),
    };
    pairs
        .into_iter()
        .filter_map(|pair| pair.trim().split_once('='))
        .map(|(name, value)| json!({ "name": name.trim(), "value": value.trim() }))
        .collect()
}

fn query(url: &str) -> Vec<Value> {
    let Ok(url) = url::Url::parse(url) else { return Vec::new() };
    url.query_pairs().map(|(name, value)| json!({ "name": name, "value": value })).collect()
}

/// The kept bytes as text, or base64 with its encoding's name.
fn text(body: &Body) -> (String, Option<&'static str>) {
    match std::str::from_utf8(&body.kept) {
        Ok(text) => (text.to_owned(), None),
        Err(_) => (STANDARD.encode(&body.kept), Some("base64")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::format::{Answer, Capture, Message};

    fn body(bytes: &[u8], max: u64) -> Body {
        let mut capture = Capture::new(max);
        capture.push(bytes);
        capture.finish(true)
    }

    #[test]
    fn an_exchange_is_one_har_entry_with_its_parts() {
        let exchange = Exchange {
            event_id: "ab".repeat(16),
            started: "2026-01-01T00:00:00.000Z".to_owned(),
            time_ms: 12,
            agent: "bot".to_owned(),
            method: "POST".to_owned(),
            url: "http://h.test/api?x=1&y=two".to_owned(),
            http_version: "HTTP/2.0".to_owned(),
            request: Message {
                headers: vec![("cookie".into(), "a=1; b=2".into()), ("content-type".into(), "application/json".into())],
                body: body(b"{}", 10),
            },
            response: Answer {
                status: 200,
                headers: vec![("content-type".into(), "image/png".into())],
                body: body(&[0x89, b'P', b'N', b'G', 0xff], 3),
            },
        };
        let other = Exchange { agent: "other".to_owned(), ..exchange.clone() };
        let document = har(&[Line::Exchange(Box::new(exchange)), Line::Exchange(Box::new(other))], Some("bot"));
        let entries = document["log"]["entries"].as_array().unwrap();
        assert_eq!(entries.len(), 1);
        let entry = &entries[0];
        assert_eq!(entry["request"]["queryString"][1], json!({ "name": "y", "value": "two" }));
        assert_eq!(entry["request"]["cookies"][1], json!({ "name": "b", "value": "2" }));
        assert_eq!(entry["request"]["postData"]["text"], "{}");
        assert_eq!(entry["response"]["content"]["encoding"], "base64");
        assert_eq!(entry["response"]["content"]["text"], STANDARD.encode([0x89, b'P', b'N']));
        assert_eq!(entry["response"]["content"]["size"], 5);
        assert_eq!(entry["comment"], "response body cut at [record] max_body");
        assert_eq!(document["log"]["version"], "1.2");
        assert_eq!(
            (&entry["request"]["httpVersion"], &entry["response"]["httpVersion"]),
            (&json!("HTTP/2.0"), &json!("HTTP/2.0"))
        );
    }
}
