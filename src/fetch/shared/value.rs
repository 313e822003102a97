//! What the shared store keeps for one origin, as bytes: each format's responses (status,
//! headers, body up to the format's cap, or the failure) with its freshness in wall-clock
//! milliseconds, as JSON with the bodies in base64. Every replica parses the same bytes, so
//! every replica decides alike.
//!
//! Reading is hostile-input parsing: a value that is too large, not this version, for
//! another origin, missing a format, naming a path the format does not have, or carrying a
//! body over the format's cap is refused whole (the caller treats it as a miss). Never:
//! talks to Redis or parses policy text.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

use crate::policy::{FetchError, FetchOutcome, Format, Headers};

/// The value layout; a value of another version is a miss (and is overwritten).
const VERSION: u32 = 1;
/// Headers kept per response, and bytes per header, at most.
const MAX_HEADERS: usize = 100;
const MAX_HEADER_BYTES: usize = 8 * 1024;

/// One origin's value.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Value {
    version: u32,
    /// The origin, as `crate::fetch::Origin` displays it.
    origin: String,
    /// One entry per format, in the order of `formats!`.
    pub(crate) files: Vec<StoredFile>,
}

/// One format's file.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct StoredFile {
    /// [`Format::NAME`].
    format: String,
    /// When it goes stale, ms since the Unix epoch.
    pub(crate) fresh_until_ms: u64,
    /// When the copy in force first went stale (later than `fresh_until_ms` never).
    pub(crate) stale_since_ms: u64,
    /// The lifetime it was fetched with, ms.
    pub(crate) lifetime_ms: u64,
    responses: Vec<StoredResponse>,
}

/// One location's response, or why there was none.
#[derive(Debug, Serialize, Deserialize)]
struct StoredResponse {
    path: String,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    headers: Vec<(String, String)>,
    /// The body, base64.
    #[serde(default)]
    body: String,
    #[serde(default)]
    over_cap: bool,
    /// The failure, when there was no response: its kind and text.
    #[serde(default)]
    error: Option<(String, String)>,
}

impl Value {
    /// A value for `origin` with `files`.
    pub(crate) fn new(origin: String, files: Vec<StoredFile>) -> Self {
        Value { version: VERSION, origin, files }
    }

    /// The JSON bytes.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// The value in `bytes` when it is this version, for `origin`, at most `max_bytes` long
    /// and has one file per format in `formats`; else `None`.
    pub(crate) fn read(bytes: &[u8], origin: &str, formats: &[&str], max_bytes: usize) -> Option<Value> {
        if bytes.len() > max_bytes {
            return None;
        }
        let value: Value = serde_json::from_slice(bytes).ok()?;
        let names = value.files.iter().map(|file| file.format.as_str());
        (value.version == VERSION && value.origin == origin && names.eq(formats.iter().copied())).then_some(value)
    }
}

impl StoredFile {
    /// Format `F`'s file from its `responses` and freshness.
    pub(crate) fn of<F: Format>(
        responses: &[(&'static str, FetchOutcome)],
        fresh_until_ms: u64,
        stale_since_ms: u64,
        lifetime_ms: u64,
    ) -> Self {
        let responses = responses.iter().map(|(path, outcome)| StoredResponse::of(path, outcome)).collect();
        StoredFile { format: F::NAME.to_owned(), fresh_until_ms, stale_since_ms, lifetime_ms, responses }
    }

    /// The responses of format `F`: one or two, each at a path of `F`, each body within its
    /// cap plus one byte; `None` when any is not.
    pub(crate) fn responses<F: Format>(&self) -> Option<Vec<(&'static str, FetchOutcome)>> {
        // No response: a file fetched only on demand that was not (`Format::unfetched`).
        if (self.responses.is_empty() && F::unfetched().is_none()) || self.responses.len() > 2 {
            return None;
        }
        self.responses.iter().map(StoredResponse::read::<F>).collect()
    }
}

impl StoredResponse {
    fn of(path: &str, outcome: &FetchOutcome) -> Self {
        match outcome {
            FetchOutcome::Response { status, headers, body, over_cap } => StoredResponse {
                path: path.to_owned(),
                status: Some(*status),
                headers: headers.iter().map(|(n, v)| (n.to_owned(), v.to_owned())).collect(),
                body: BASE64.encode(body),
                over_cap: *over_cap,
                error: None,
            },
            FetchOutcome::Failed(error) => StoredResponse {
                path: path.to_owned(),
                status: None,
                headers: Vec::new(),
                body: String::new(),
                over_cap: false,
                error: Some(error_parts(error)),
            },
        }
    }

    fn read<F: Format>(&self) -> Option<(&'static str, FetchOutcome)> {
        let path = [Some(F::PATH), F::FALLBACK_PATH].into_iter().flatten().find(|p| *p == self.path)?;
        if let Some((kind, text)) = &self.error {
            return Some((path, FetchOutcome::Failed(error_from(kind, text)?)));
        }
        // Base64 is 4/3 of the bytes: refuse an oversized body before decoding it.
        if self.body.len() > (F::MAX_BYTES + 1).div_ceil(3) * 4
            || self.headers.len() > MAX_HEADERS
            || self.headers.iter().any(|(n, v)| n.len() + v.len() > MAX_HEADER_BYTES)
        {
            return None;
        }
        let body = BASE64.decode(&self.body).ok()?;
        if body.len() > F::MAX_BYTES + 1 {
            return None;
        }
        let status = self.status.filter(|s| (100..=999).contains(s))?;
        let headers = Headers::new(self.headers.clone());
        Some((path, FetchOutcome::Response { status, headers, body, over_cap: self.over_cap }))
    }
}

/// A failure as stored: its kind and its text.
fn error_parts(error: &FetchError) -> (String, String) {
    let (kind, text) = match error {
        FetchError::Timeout => ("timeout", String::new()),
        FetchError::Network(text) => ("network", text.clone()),
        FetchError::Unreachable { timed_out: true, cause } => ("unreachable_timeout", cause.clone()),
        FetchError::Unreachable { timed_out: false, cause } => ("unreachable", cause.clone()),
        FetchError::TooManyRedirects => ("too_many_redirects", String::new()),
        FetchError::InsecureRedirect => ("insecure_redirect", String::new()),
        FetchError::AtCapacity { cause } => ("at_capacity", cause.clone()),
        FetchError::Parent { refused: true, cause } => ("parent_refused", cause.clone()),
        FetchError::Parent { refused: false, cause } => ("parent_unreachable", cause.clone()),
    };
    (kind.to_owned(), text)
}

/// The failure stored as `kind` and `text`; `None` for an unknown kind.
fn error_from(kind: &str, text: &str) -> Option<FetchError> {
    let text = text.chars().take(1024).collect::<String>();
    Some(match kind {
        "timeout" => FetchError::Timeout,
        "network" => FetchError::Network(text),
        "unreachable_timeout" => FetchError::Unreachable { timed_out: true, cause: text },
        "unreachable" => FetchError::Unreachable { timed_out: false, cause: text },
        "too_many_redirects" => FetchError::TooManyRedirects,
        "insecure_redirect" => FetchError::InsecureRedirect,
        "at_capacity" => FetchError::AtCapacity { cause: text },
        "parent_refused" => FetchError::Parent { refused: true, cause: text },
        "parent_unreachable" => FetchError::Parent { refused: false, cause: text },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::robots::Robots;

    fn value(body: &[u8]) -> Vec<u8> {
        let responses = [(
            Robots::PATH,
            FetchOutcome::Response {
                status: 200,
                headers: Headers::new(vec![("etag".into(), "\"x\"".into())]),
                body: body.to_vec(),
                over_cap: false,
            },
        )];
        Value::new("https://a.example:443".into(), vec![StoredFile::of::<Robots>(&responses, 2, 2, 1)]).to_bytes()
    }

    #[test]
    fn a_value_reads_back_and_hostile_ones_are_refused() {
        let bytes = value(b"User-agent: *\nDisallow: /\n");
        let read = Value::read(&bytes, "https://a.example:443", &[Robots::NAME], 1 << 20).unwrap();
        let responses = read.files[0].responses::<Robots>().unwrap();
        assert!(
            matches!(&responses[0].1, FetchOutcome::Response { status: 200, body, .. } if body.starts_with(b"User"))
        );
        assert!(Value::read(&bytes, "https://b.example:443", &[Robots::NAME], 1 << 20).is_none(), "another origin");
        assert!(Value::read(&bytes, "https://a.example:443", &[Robots::NAME], 10).is_none(), "over the cap");
        assert!(Value::read(b"\x00garbage", "https://a.example:443", &[Robots::NAME], 1 << 20).is_none());
        let big = value(&vec![b'a'; Robots::MAX_BYTES + 2]);
        let read = Value::read(&big, "https://a.example:443", &[Robots::NAME], 1 << 30).unwrap();
        assert!(read.files[0].responses::<Robots>().is_none(), "a body over the format's cap");
        let other_path = String::from_utf8(bytes).unwrap().replace("/robots.txt", "/etc/passwd");
        let read = Value::read(other_path.as_bytes(), "https://a.example:443", &[Robots::NAME], 1 << 20).unwrap();
        assert!(read.files[0].responses::<Robots>().is_none(), "a path the format does not have");
    }
}
