//! Reading one decision-log line back for `agentgate audit`: whether it is a record, its
//! agent, origin, time and the reasons that decided it, the filters `summary` and `grep`
//! share (`--since`, `--agent`, `--origin`, `--outcome`), and one record per request
//! ([`OnePerRequest`]) for every report (`summary`, `suggest`, and `grep` unless `--raw`).
//!
//! Never: writes records, or fails on a line that is not one (that is a [`NotARecord`] the
//! caller counts).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use crate::audit::{AuditError, Outcome, field};

/// One line that is a decision record: a JSON object with string `agentgate.agent` and
/// `event.outcome`. Other fields are read when asked for, and may be missing.
#[derive(Debug, Clone, PartialEq)]
pub struct LoggedRecord {
    fields: Map<String, Value>,
}

/// Why a line is not a decision record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotARecord(pub String);

impl LoggedRecord {
    /// The record on `line`.
    ///
    /// # Errors
    /// [`NotARecord`] saying why: not JSON (or not UTF-8), not an object, no string
    /// `agentgate.agent`, or neither a string `event.action` nor (a log written before it)
    /// `event.outcome`.
    pub fn parse(line: &[u8]) -> Result<LoggedRecord, NotARecord> {
        let value: Value = serde_json::from_slice(line).map_err(|err| NotARecord(format!("not JSON: {err}")))?;
        let Value::Object(fields) = value else { return Err(NotARecord("not a JSON object".to_owned())) };
        if !fields.get(field::AGENT).is_some_and(Value::is_string) {
            return Err(NotARecord(format!("no string \"{}\"", field::AGENT)));
        }
        if ![field::EVENT_ACTION, field::EVENT_OUTCOME].iter().any(|key| fields.get(*key).is_some_and(Value::is_string))
        {
            return Err(NotARecord(format!("no string \"{}\"", field::EVENT_ACTION)));
        }
        Ok(LoggedRecord { fields })
    }

    fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }

    /// Any field by its name ([`field`]), as written.
    pub fn field(&self, key: &str) -> Option<&Value> {
        self.fields.get(key)
    }

    /// The record as one JSON line, fields in the schema's order (what `audit grep` prints).
    pub fn to_line(&self) -> String {
        String::from_utf8_lossy(&self.to_json_line()).into_owned()
    }

    /// `agentgate.agent`.
    pub fn agent(&self) -> &str {
        self.str(field::AGENT).unwrap_or_default()
    }

    /// The gate's decision as written (a later version may write one this one does not
    /// know): `event.action`, or on a line written before that field, `event.outcome`, which
    /// then held the decision (`docs/decision-log.md`, "ECS").
    pub fn outcome(&self) -> &str {
        self.str(field::EVENT_ACTION).or_else(|| self.str(field::EVENT_OUTCOME)).unwrap_or_default()
    }

    /// `agentgate.body.cut`, when the response body was cut short: `client`, `origin` or
    /// `budget`.
    pub fn body_cut(&self) -> Option<&str> {
        self.str(field::BODY_CUT)
    }

    /// `event.id`, when present.
    pub fn id(&self) -> Option<&str> {
        self.str(field::EVENT_ID)
    }

    /// True for a forwarded request's decision line, written before its completed line:
    /// `event.type` `["start"]` (`docs/decision-log.md`); on a line written before
    /// `event.type` was, one without `http.response.status_code`.
    pub fn is_decision_line(&self) -> bool {
        match self.fields.get(field::EVENT_TYPE).and_then(Value::as_array) {
            Some(types) => types.iter().any(|kind| kind == "start"),
            None => !self.fields.contains_key(field::HTTP_RESPONSE_STATUS_CODE),
        }
    }

    /// `http.request.body.bytes`: what the agent sent, when the line says.
    pub fn sent_bytes(&self) -> Option<u64> {
        self.fields.get(field::HTTP_REQUEST_BODY_BYTES).and_then(Value::as_u64)
    }

    /// `http.response.body.bytes`: what the agent received, when the line says.
    pub fn received_bytes(&self) -> Option<u64> {
        self.fields.get(field::HTTP_RESPONSE_BODY_BYTES).and_then(Value::as_u64)
    }

    /// `url.domain`, when present.
    pub fn domain(&self) -> Option<&str> {
        self.str(field::URL_DOMAIN)
    }

    /// The origin of `url.full`: `scheme://host[:port]` as logged (the log has no user info).
    pub fn origin(&self) -> Option<&str> {
        let url = self.str(field::URL_FULL)?;
        let after_scheme = url.find("://")? + 3;
        let end = url[after_scheme..].find(['/', '?', '#']).map_or(url.len(), |i| after_scheme + i);
        Some(&url[..end])
    }

    /// The MCP tools a `tools/call` record names (`agentgate.mcp.tool`, `,`-joined for a
    /// batch), none for any other record.
    pub fn mcp_tools(&self) -> impl Iterator<Item = &str> {
        self.mcp_tool().into_iter().flat_map(|tools| tools.split(',')).filter(|tool| !tool.is_empty())
    }

    /// `agentgate.mcp.tool` as written: the tool a `tools/call` names (`,`-joined for a batch).
    pub fn mcp_tool(&self) -> Option<&str> {
        self.str(field::MCP_TOOL)
    }

    /// The `code` of every reason the record carries, deciding or not, in order.
    pub fn reason_codes(&self) -> impl Iterator<Item = &str> {
        let reasons = self.fields.get(field::REASONS).and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        reasons.iter().filter_map(|reason| reason.get("code").and_then(Value::as_str))
    }

    /// The purposes a `usage.refused` block refused, each once, in the order the record's
    /// `agentgate.usage` names them: the `purpose` of each preference there with stance
    /// `refuse` that the agent declared (`agentgate.purposes`; every one when it declared
    /// none, as `[usage] undeclared = "deny"` reads it). Empty unless `usage.refused`
    /// decided the block.
    pub fn usage_refused(&self) -> Vec<&str> {
        if !self.deciding_reasons().iter().any(|reason| reason.ends_with(" usage.refused")) {
            return Vec::new();
        }
        let list = |key| self.fields.get(key).and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        let declared: Vec<&str> = list(field::PURPOSES).iter().filter_map(Value::as_str).collect();
        let mut refused = Vec::new();
        for pref in
            list(field::USAGE).iter().filter(|pref| pref.get("stance").and_then(Value::as_str) == Some("refuse"))
        {
            let Some(purpose) = pref.get("purpose").and_then(Value::as_str) else { continue };
            if (declared.is_empty() || declared.contains(&purpose)) && !refused.contains(&purpose) {
                refused.push(purpose);
            }
        }
        refused
    }

    /// `@timestamp`, when present and RFC 3339.
    pub fn timestamp(&self) -> Option<SystemTime> {
        humantime::parse_rfc3339(self.str(field::TIMESTAMP)?).ok()
    }

    /// The reason that decided a block, as `source code` (`robots.txt robots.disallow`): the
    /// first of [`LoggedRecord::deciding_reasons`], what `summary --by reason` groups by and its
    /// top reasons count, so each block counts once. `None` for a record that blocked nothing.
    pub fn deciding_reason(&self) -> Option<String> {
        self.deciding_reasons().into_iter().next()
    }

    /// Every reason marked as deciding a block, as `source code` (`robots.txt robots.disallow`):
    /// those marked `"blocking": true`, the deciding rule first, then the lines that support
    /// it (`robots.group`, the user-agent line that selected the rule's group) and any other
    /// file that blocked too. A line from a version that marked none counts its first
    /// reason, which was the blocking one (blocking reasons were always written first).
    /// Empty for `allow` and `error` records, whose reasons decided no block.
    pub fn deciding_reasons(&self) -> Vec<String> {
        let name = |reason: &Value| {
            let part = |key| reason.get(key).and_then(Value::as_str).unwrap_or("?");
            format!("{} {}", part("source"), part("code"))
        };
        self.deciding_reason_objects().into_iter().map(name).collect()
    }

    /// The reasons [`LoggedRecord::deciding_reasons`] names, as written
    /// (`{source, code, line?, rule, ...}`): for a report that shows the deciding rule's line
    /// and text.
    pub fn deciding_reason_objects(&self) -> Vec<&Value> {
        let blocked = Outcome::parse(self.outcome())
            .is_some_and(|outcome| outcome.is_denial() || outcome == Outcome::RateLimited);
        if !blocked {
            return Vec::new();
        }
        let reasons = self.fields.get(field::REASONS).and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        let marked = |reason: &&Value| reason.get("blocking").and_then(Value::as_bool) == Some(true);
        if reasons.iter().any(|r| r.get("blocking").is_some()) {
            reasons.iter().filter(marked).collect()
        } else {
            reasons.first().into_iter().collect()
        }
    }
}

impl LoggedRecord {
    /// True when this decision line holds a field its `end` line leaves out: the end line of
    /// a forwarded request carries only what the end adds (`docs/decision-log.md`).
    pub(super) fn adds_to(&self, end: &LoggedRecord) -> bool {
        self.fields.keys().any(|key| !end.fields.contains_key(key))
    }

    /// This decision line completed by its `end` line: every field of the end line, and the
    /// decision's fields the end line left to this one.
    pub(super) fn completed_by(mut self, end: LoggedRecord) -> LoggedRecord {
        self.fields.extend(end.fields);
        self
    }

    /// The record as one JSON line (no `\n`), fields in the schema's order
    /// ([`field::ORDER`]), then any this version does not know, by name.
    pub(super) fn to_json_line(&self) -> Vec<u8> {
        let known = field::ORDER.iter().filter_map(|key| self.fields.get_key_value(*key));
        let unknown = self.fields.iter().filter(|(key, _)| !field::ORDER.contains(&key.as_str()));
        let mut out = vec![b'{'];
        for (i, (key, value)) in known.chain(unknown).enumerate() {
            if i > 0 {
                out.push(b',');
            }
            // Writing JSON values into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut out, key);
            out.push(b':');
            let _ = serde_json::to_writer(&mut out, value);
        }
        out.push(b'}');
        out
    }
}

/// Every request's one record in `paths` (plain or gzip'd, oldest first): a forwarded
/// request's decision line completed by its end line (`OnePerRequest`), in the order they
/// complete; and how many lines were not records.
///
/// # Errors
/// As [`super::for_each_line`].
pub fn records(paths: &[impl AsRef<std::path::Path>]) -> Result<(Vec<LoggedRecord>, u64), AuditError> {
    let (mut requests, mut records, mut malformed) = (OnePerRequest::default(), Vec::new(), 0u64);
    super::for_each_line(paths, |_, _, bytes| {
        if bytes.trim_ascii().is_empty() {
            return;
        }
        match LoggedRecord::parse(bytes) {
            Ok(record) => records.extend(requests.next(record)),
            Err(_) => malformed += 1,
        }
    })?;
    records.extend(requests.unfinished());
    Ok((records, malformed))
}

/// What a report keeps of each line: a decision line and its end line become one
/// ([`OnePerRequest`]).
pub(super) trait Completed: Borrow<LoggedRecord> + Sized {
    /// The request's one record: this decision line completed by its `end` line.
    fn completed_by(self, end: Self) -> Self;
}

impl Completed for LoggedRecord {
    fn completed_by(self, end: Self) -> Self {
        LoggedRecord::completed_by(self, end)
    }
}

/// One record per request from lines read in order (a forwarded request's decision line may
/// sit in a rotated file and its completed line in the next): a decision line without
/// `http.response.status_code` (written before forwarding, `docs/decision-log.md`) waits for
/// the completed line with its `event.id`, which completes it (the end line carries what the
/// end adds, the decision line the decision) and counts in its place; one never completed
/// counts on its own at the end. `T` is what the caller keeps of each line: the record, or
/// the record with its bytes.
#[derive(Debug)]
pub(super) struct OnePerRequest<T = LoggedRecord> {
    /// Decision lines waiting for their completed line, by `event.id`: as many as requests
    /// were in flight together.
    awaiting: HashMap<String, T>,
}

impl<T> Default for OnePerRequest<T> {
    fn default() -> Self {
        OnePerRequest { awaiting: HashMap::new() }
    }
}

impl<T: Completed> OnePerRequest<T> {
    /// The record to count now for `line`, if any: `None` while it waits for its completed
    /// line; a completed line merged with its decision line.
    pub(super) fn next(&mut self, line: T) -> Option<T> {
        let record = line.borrow();
        match record.id().map(str::to_owned) {
            Some(id) if record.is_decision_line() => {
                self.awaiting.insert(id, line);
                None
            }
            Some(id) => match self.awaiting.remove(&id) {
                Some(start) => Some(start.completed_by(line)),
                None => Some(line),
            },
            None => Some(line),
        }
    }

    /// The decision lines never completed (the response was cut off), by `event.id` (ids
    /// sort by time).
    pub(super) fn unfinished(&mut self) -> Vec<T> {
        let mut unfinished: Vec<(String, T)> = std::mem::take(&mut self.awaiting).into_iter().collect();
        unfinished.sort_by(|a, b| a.0.cmp(&b.0));
        unfinished.into_iter().map(|(_, line)| line).collect()
    }
}

/// `--since`: records at or after this time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Since(pub SystemTime);

impl Since {
    /// An RFC 3339 time (`2026-11-23T10:00:00Z`) or a duration before `now` (`1h`, `30m`,
    /// `2days`, as humantime reads them).
    ///
    /// # Errors
    /// [`AuditError::Since`] quoting `value` and both accepted forms.
    pub fn parse(value: &str, now: SystemTime) -> Result<Since, AuditError> {
        let value = value.trim();
        if let Ok(at) = humantime::parse_rfc3339_weak(value) {
            return Ok(Since(at));
        }
        let ago: Duration =
            humantime::parse_duration(value).map_err(|_| AuditError::Since { value: value.to_owned() })?;
        Ok(Since(now.checked_sub(ago).unwrap_or(SystemTime::UNIX_EPOCH)))
    }
}

/// Which records a report reads; every set criterion must match, and a repeated one
/// (`--outcome deny --outcome would_deny`) matches any of its values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only records at or after this time; a record without a readable `@timestamp` does not match.
    pub since: Option<Since>,
    /// `agentgate.agent` equal to one of these.
    pub agents: Vec<String>,
    /// The origin (`https://host:port` as logged) or `url.domain` equal to one of these
    /// (case-insensitive).
    pub origins: Vec<String>,
    /// `event.outcome` equal to one of these.
    pub outcomes: Vec<String>,
}

impl Filter {
    /// True when `record` passes every criterion set.
    pub fn matches(&self, record: &LoggedRecord) -> bool {
        let any = |wanted: &[String], test: &dyn Fn(&str) -> bool| wanted.is_empty() || wanted.iter().any(|w| test(w));
        let since = self.since.is_none_or(|Since(at)| record.timestamp().is_some_and(|t| t >= at));
        let origin = |wanted: &str| {
            [record.origin(), record.domain()].into_iter().flatten().any(|have| have.eq_ignore_ascii_case(wanted))
        };
        since
            && any(&self.agents, &|a| a == record.agent())
            && any(&self.outcomes, &|o| o == record.outcome())
            && any(&self.origins, &origin)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(line: &str) -> LoggedRecord {
        LoggedRecord::parse(line.as_bytes()).expect("a record")
    }

    const DENIED: &str = r#"{"@timestamp":"2026-11-23T10:00:00.000Z","event.id":"01","event.outcome":"deny","agentgate.agent":"bot","url.full":"https://shop.example:8443/private?q=<redacted>","url.domain":"shop.example","agentgate.reasons":[{"source":"robots.txt","code":"robots.disallow","line":4,"rule":"Disallow: /private","blocking":true},{"source":"automation-preferences.txt","code":"autoctl.allowed","line":2,"rule":"allowed-methods: GET"}]}"#;

    #[test]
    fn fields_of_a_record() {
        let denied = record(DENIED);
        assert_eq!(denied.agent(), "bot");
        assert_eq!(denied.outcome(), "deny");
        assert_eq!(denied.id(), Some("01"));
        assert!(denied.is_decision_line(), "written before event.type, and without a status");
        let start = r#"{"event.type":["start"],"agentgate.agent":"a","event.outcome":"allow"}"#;
        let end = r#"{"event.type":["end"],"agentgate.agent":"a","event.outcome":"allow","http.request.body.bytes":3,"http.response.body.bytes":5}"#;
        assert!(record(start).is_decision_line());
        assert!(!record(end).is_decision_line(), "an end line is complete even without a status");
        assert_eq!((record(end).sent_bytes(), record(end).received_bytes()), (Some(3), Some(5)));
        assert_eq!(denied.sent_bytes(), None);
        assert_eq!(denied.origin(), Some("https://shop.example:8443"));
        assert_eq!(denied.domain(), Some("shop.example"));
        assert_eq!(denied.timestamp(), humantime::parse_rfc3339("2026-11-23T10:00:00Z").ok());
        let bare = record(r#"{"agentgate.agent":"a","event.outcome":"x","url.full":"http://h","@timestamp":"no"}"#);
        assert_eq!(bare.origin(), Some("http://h"));
        assert_eq!(bare.timestamp(), None);
    }

    /// `autoctl.allowed` rode along on a deny and was once listed among the reasons for blocks.
    #[test]
    fn only_reasons_that_decided_a_block_count() {
        assert_eq!(record(DENIED).deciding_reasons(), ["robots.txt robots.disallow"]);
        let allowed = DENIED.replace(r#""event.outcome":"deny""#, r#""event.outcome":"allow""#);
        assert!(record(&allowed).deciding_reasons().is_empty());
        let limited = DENIED.replace(r#""event.outcome":"deny""#, r#""event.outcome":"rate_limited""#);
        assert_eq!(record(&limited).deciding_reasons(), ["robots.txt robots.disallow"]);
        let error = DENIED.replace(r#""event.outcome":"deny""#, r#""event.outcome":"error""#);
        assert!(record(&error).deciding_reasons().is_empty());
        // Written before reasons were marked: the first one decided.
        let unmarked = DENIED.replace(r#","blocking":true"#, "");
        assert_eq!(record(&unmarked).deciding_reasons(), ["robots.txt robots.disallow"]);
    }

    #[test]
    fn the_deciding_reason_is_the_rule_not_the_line_that_selected_its_group() {
        let allowed_by_autoctl = r#"{"source":"automation-preferences.txt","code":"autoctl.allowed","line":2,"rule":"allowed-methods: GET"}"#;
        let group = r#"{"source":"robots.txt","code":"robots.group","line":1,"rule":"User-agent: *","blocking":true}"#;
        let grouped = record(&DENIED.replace(allowed_by_autoctl, group));
        assert_eq!(grouped.deciding_reasons(), ["robots.txt robots.disallow", "robots.txt robots.group"]);
        assert_eq!(grouped.deciding_reason().as_deref(), Some("robots.txt robots.disallow"));
        let allowed = DENIED.replace(r#""event.outcome":"deny""#, r#""event.outcome":"allow""#);
        assert_eq!(record(&allowed).deciding_reason(), None);
    }

    #[test]
    fn lines_that_are_not_records_say_why() {
        let why = |line: &[u8]| LoggedRecord::parse(line).expect_err("not a record").0;
        assert!(why(b"not json").starts_with("not JSON: "));
        assert!(why(b"\xff\xfe").starts_with("not JSON: "));
        assert_eq!(why(b"[1]"), "not a JSON object");
        assert_eq!(why(br#"{"event.outcome":"deny"}"#), "no string \"agentgate.agent\"");
        assert_eq!(why(br#"{"agentgate.agent":"a","event.outcome":3}"#), "no string \"event.action\"");
        assert_eq!(why(br#"{"agentgate.agent":"a","event.action":3}"#), "no string \"event.action\"");
    }

    #[test]
    fn since_takes_rfc3339_or_a_duration_ago() {
        let now = humantime::parse_rfc3339("2026-11-23T12:00:00Z").expect("a time");
        let at = |text| humantime::parse_rfc3339(text).expect("a time");
        assert_eq!(Since::parse("2026-11-23T10:00:00Z", now).ok(), Some(Since(at("2026-11-23T10:00:00Z"))));
        assert_eq!(Since::parse("2026-11-23T10:00:00.5Z", now).ok(), Some(Since(at("2026-11-23T10:00:00.5Z"))));
        assert_eq!(Since::parse("1h", now).ok(), Some(Since(at("2026-11-23T11:00:00Z"))));
        assert_eq!(Since::parse(" 30m ", now).ok(), Some(Since(at("2026-11-23T11:30:00Z"))));
        let err = Since::parse("yesterday", now).expect_err("neither form");
        assert!(err.to_string().contains("--since \"yesterday\""), "{err}");
        assert!(err.to_string().contains("1h"), "{err}");
    }

    #[test]
    fn filters_combine_and_repeat() {
        let denied = record(DENIED);
        let now = humantime::parse_rfc3339("2026-11-23T12:00:00Z").expect("a time");
        assert!(Filter::default().matches(&denied));
        let agent = |a: &str| Filter { agents: vec![a.to_owned()], ..Filter::default() };
        assert!(agent("bot").matches(&denied) && !agent("other").matches(&denied));
        let origin = |o: &str| Filter { origins: vec![o.to_owned()], ..Filter::default() };
        assert!(origin("https://shop.example:8443").matches(&denied));
        assert!(origin("SHOP.example").matches(&denied));
        assert!(!origin("https://shop.example").matches(&denied));
        let outcomes = Filter { outcomes: vec!["allow".to_owned(), "deny".to_owned()], ..Filter::default() };
        assert!(outcomes.matches(&denied));
        let since = |s| Filter { since: Since::parse(s, now).ok(), ..agent("bot") };
        assert!(since("2h").matches(&denied) && !since("1h").matches(&denied));
        let untimed = record(r#"{"agentgate.agent":"bot","event.outcome":"deny"}"#);
        assert!(!since("2h").matches(&untimed), "no @timestamp: not known to be recent");
    }
}
