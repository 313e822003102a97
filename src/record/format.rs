//! The recording on disk: one file, `recording.jsonl` in `[record] dir`, one JSON object a
//! line, each with its `kind`: an `exchange` (a request agentgate forwarded and the answer it
//! got, with the decision log's `event.id`), a `policy` file as fetched (status, headers,
//! body), or a name's `resolved` addresses. Bodies are base64 (`docs/evaluation-guide.md`).
//!
//! Owns: the line types, their file name, and reading a recording back ([`read`]), naming
//! the file and line of anything it cannot read. Never: writes (`super::writer`), matches
//! requests (`super::replay`).

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The recording's one file inside `[record] dir`.
pub const FILE_NAME: &str = "recording.jsonl";

/// One line of the recording.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    /// A forwarded request and its answer (boxed: it is most of a line's size).
    Exchange(Box<Exchange>),
    /// A policy file as the fetcher got it.
    Policy(PolicyFile),
    /// The addresses a name resolved to, as the network guard got them.
    Resolved(Resolved),
}

/// A request agentgate forwarded, as the agent sent it (secrets as placeholders), and the
/// answer as the agent got it (scrubbed).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exchange {
    /// The decision log's `event.id` of the request.
    pub event_id: String,
    /// When the request was forwarded (RFC 3339, milliseconds).
    pub started: String,
    /// Milliseconds from forwarding to the end of the answer's body.
    pub time_ms: u64,
    /// The agent id, as the decision log names it.
    pub agent: String,
    /// The request method.
    pub method: String,
    /// `scheme://host[:port]/path?query`, as the decision log names it.
    pub url: String,
    /// The HTTP version the agent spoke to agentgate: `HTTP/1.1`, `HTTP/2.0`.
    pub http_version: String,
    /// The request's headers and body.
    pub request: Message,
    /// The answer's status, headers and body.
    pub response: Answer,
}

/// A request's headers and body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Every header line, in order (values that are not UTF-8 kept lossily).
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Body,
}

/// An answer's status, headers and body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// Every header line, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Body,
}

/// A policy file as fetched: the URL asked for, the answer's status, headers and body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyFile {
    /// The absolute URL the fetcher asked for.
    pub url: String,
    /// The HTTP status.
    pub status: u16,
    /// Every header line, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: Body,
}

/// A name and the addresses it resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolved {
    /// The name asked for.
    pub host: String,
    /// Its addresses, in the resolver's order.
    pub addresses: Vec<IpAddr>,
}

/// A body: the bytes kept (base64 on disk), how long the whole was, whether it was cut at
/// `[record] max_body` or ended early, and the whole's SHA-256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Body {
    /// The bytes kept; written as base64 (standard alphabet, padded) under `base64`, encoded
    /// by the writer's thread, off the request path.
    #[serde(rename = "base64", with = "as_base64")]
    pub kept: Vec<u8>,
    /// The length of the whole body as it passed.
    pub bytes: u64,
    /// True when only the first `max_body` bytes are kept.
    pub cut: bool,
    /// True when the body did not reach its end (the reader hung up, a budget cut it).
    pub incomplete: bool,
    /// Hex SHA-256 of the whole body as it passed.
    pub sha256: String,
}

/// Bytes as a base64 string, and back (a line with broken base64 is not a recording line).
mod as_base64 {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&STANDARD.encode(bytes))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(deserializer)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// A body as it passes: the first `max` bytes kept, the whole counted and hashed.
pub struct Capture {
    kept: Vec<u8>,
    max: u64,
    bytes: u64,
    hasher: Sha256,
}

impl Capture {
    /// A capture keeping at most `max` bytes.
    pub fn new(max: u64) -> Self {
        Capture { kept: Vec::new(), max, bytes: 0, hasher: Sha256::new() }
    }

    /// `data` passed.
    pub fn push(&mut self, data: &[u8]) {
        self.bytes += data.len() as u64;
        self.hasher.update(data);
        let room = self.max.saturating_sub(self.kept.len() as u64);
        let take = data.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        self.kept.extend_from_slice(&data[..take]);
    }

    /// True while no byte passed.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// The body, `complete` when its end was seen.
    pub fn finish(self, complete: bool) -> Body {
        Body {
            cut: (self.kept.len() as u64) < self.bytes,
            kept: self.kept,
            bytes: self.bytes,
            incomplete: !complete,
            sha256: hex::encode(self.hasher.finalize()),
        }
    }
}

/// Hex SHA-256 of `data`: the digest a replayed request body is matched by.
pub fn sha256(data: &[u8]) -> String {
    hex::encode(Sha256::digest(data))
}

/// Why a recording could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file is missing or unreadable.
    #[error("cannot read the recording {}: {source}; record a run first ([record] dir with mode = \"enforce\")", path.display())]
    Io {
        /// The recording's file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// A line is not a recording line.
    #[error("{}:{line}: not a recording line ({cause}); remove the line or record the run again", path.display())]
    Line {
        /// The recording's file.
        path: PathBuf,
        /// The line number, from 1.
        line: usize,
        /// What the JSON reader said.
        cause: String,
    },
}

/// Every line of the recording in `dir`, in the order written.
///
/// # Errors
/// [`ReadError`] naming the file, and the line of one that is not a recording line.
pub fn read(dir: &Path) -> Result<Vec<Line>, ReadError> {
    let path = dir.join(FILE_NAME);
    let io_error = |source| ReadError::Io { path: path.clone(), source };
    let file = File::open(&path).map_err(io_error)?;
    let mut lines = Vec::new();
    for (index, text) in BufReader::new(file).lines().enumerate() {
        let text = text.map_err(io_error)?;
        if text.trim().is_empty() {
            continue;
        }
        let line = serde_json::from_str(&text).map_err(|error| ReadError::Line {
            path: path.clone(),
            line: index + 1,
            cause: error.to_string(),
        })?;
        lines.push(line);
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_keeps_max_bytes_and_hashes_the_whole() {
        let mut capture = Capture::new(4);
        capture.push(b"abc");
        capture.push(b"defg");
        let body = capture.finish(true);
        assert_eq!(body.kept, b"abcd");
        assert_eq!((body.bytes, body.cut, body.incomplete), (7, true, false));
        assert_eq!(body.sha256, sha256(b"abcdefg"));
        let whole = Capture::new(10).finish(false);
        assert_eq!((whole.cut, whole.incomplete, whole.sha256), (false, true, sha256(b"")));
    }

    #[test]
    fn a_broken_line_is_named_with_its_number() {
        let dir = tempfile::tempdir().unwrap();
        let resolved = Line::Resolved(Resolved { host: "a.test".into(), addresses: vec![[192, 0, 2, 1].into()] });
        let text = format!("{}\n\nnot json\n", serde_json::to_string(&resolved).unwrap());
        std::fs::write(dir.path().join(FILE_NAME), text).unwrap();
        let error = read(dir.path()).unwrap_err().to_string();
        assert!(error.contains("recording.jsonl:3: not a recording line"), "{error}");
    }
}
