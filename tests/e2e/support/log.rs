//! Reading the proxy's decision log: one JSON object per line. The writer flushes when its
//! queue is momentarily empty, so a line may land shortly after the response; [`wait_for`]
//! reads the file until it holds the lines (`support::wait`, a bounded wait for a condition).

use std::path::Path;

use serde_json::Value;

use super::TestResult;
use super::wait::eventually;

/// Every request in the log at `path`, one record per `event.id`: under
/// `[audit] on_failure = "block"` a forwarded request has a decision line written before
/// forwarding and a completed line (with the status) after it; the two merge, the later
/// line's fields over the first's, in the place of the first. A missing file is an empty log; a line that is not a JSON object is an
/// error naming it.
pub fn read(path: &Path) -> TestResult<Vec<Value>> {
    let mut records: Vec<Value> = Vec::new();
    for record in lines(path)? {
        match records.iter_mut().find(|seen| record["event.id"].is_string() && seen["event.id"] == record["event.id"]) {
            // A later line of the same request completes it: the end line carries what the
            // end adds, the start line the decision (docs/decision-log.md).
            Some(seen) => match (seen.as_object_mut(), record) {
                (Some(fields), Value::Object(later)) => fields.extend(later),
                (_, record) => *seen = record,
            },
            None => records.push(record),
        }
    }
    Ok(records)
}

/// Every complete record line of the log at `path`, parsed, as written; the writer's
/// checkpoint lines (`event.action = "checkpoint"`, docs/decision-log.md) are no records and
/// are left out.
pub fn lines(path: &Path) -> TestResult<Vec<Value>> {
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(error.into()),
    };
    let mut records = Vec::new();
    // Only complete lines: the writer may be half-way through the last one.
    for line in text.split_inclusive('\n').filter(|line| line.ends_with('\n')) {
        let record: Value = serde_json::from_str(line).map_err(|e| format!("log line {line:?}: {e}"))?;
        if !record.is_object() {
            return Err(format!("log line {line:?} is not a JSON object").into());
        }
        if record["event.action"] != "checkpoint" {
            records.push(record);
        }
    }
    Ok(records)
}

/// Waits (bounded) until the log holds at least `count` completed requests (records with a
/// status), then returns every record.
pub async fn wait_for(path: &Path, count: usize) -> TestResult<Vec<Value>> {
    let what = format!("{count} completed requests in the decision log");
    wait_until(path, &what, |records| {
        records.iter().filter(|r| !r["http.response.status_code"].is_null()).count() >= count
    })
    .await
}

/// Waits (bounded) until the records satisfy `ready` (for records with no status: a
/// connection refused before any HTTP exchange), then returns them; `what` names the wait.
pub async fn wait_until(path: &Path, what: &str, ready: impl Fn(&[Value]) -> bool) -> TestResult<Vec<Value>> {
    eventually(what, async || {
        let records = read(path)?;
        if ready(&records) { Ok(records) } else { Err(format!("{} records: {records:#?}", records.len()).into()) }
    })
    .await
}

/// The record whose `event.id` is `id`; an error when there is not exactly one.
pub fn by_id<'a>(records: &'a [Value], id: &str) -> TestResult<&'a Value> {
    let found: Vec<&Value> = records.iter().filter(|r| r["event.id"] == id).collect();
    match found.as_slice() {
        [one] => Ok(one),
        _ => Err(format!("{} records with event.id {id} in {records:#?}", found.len()).into()),
    }
}

/// The records for `method` on a URL ending in `url_suffix` (after redaction).
pub fn for_request<'a>(records: &'a [Value], method: &str, url_suffix: &str) -> Vec<&'a Value> {
    records
        .iter()
        .filter(|r| {
            r["http.request.method"] == method && r["url.full"].as_str().is_some_and(|u| u.ends_with(url_suffix))
        })
        .collect()
}
