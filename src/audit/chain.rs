//! The decision log's hash chain and signed checkpoints (`docs/decision-log.md`, "Tamper
//! evidence"): every line the writer appends carries `agentgate.chain.prev`, the SHA-256 (hex)
//! of the previous line's bytes without its newline; a checkpoint line
//! (`event.action = "checkpoint"`) signs, with the log's Ed25519 key, the chain head it
//! follows and the lines since the checkpoint before it ([`signed_text`]).
//!
//! Owns: the chain's state in the writer ([`Chain`]: link a line, write a checkpoint, undo a
//! failed append), picking the chain up from the last line of the file at start
//! ([`Chain::resume`]), the canonical text a checkpoint signs, and telling a checkpoint line
//! from a record ([`is_checkpoint`]). `verify` checks files against all of that.
//!
//! Never: decides when a checkpoint is due or writes to the file (the writer does, in write
//! order, in the one task that holds the writer role), or puts the private key anywhere but
//! the signature.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::time::SystemTime;

use base64::Engine as _;
use ring::signature::{Ed25519KeyPair, KeyPair};

use crate::audit::rfc3339_millis;

pub(crate) mod verify;

/// The field every line carries: the SHA-256 (hex) of the previous line without its `\n`.
pub(crate) const PREV: &str = "agentgate.chain.prev";
/// The field of the first line of a new chain: why it does not chain to an earlier line.
pub(crate) const START: &str = "agentgate.chain.start";
/// `event.action` of a checkpoint line.
pub(crate) const CHECKPOINT: &str = "checkpoint";
/// A checkpoint's count: the lines since the checkpoint before it (or since the chain's
/// start line, which it counts), this one not included.
pub(crate) const LINES: &str = "agentgate.checkpoint.lines";
/// A checkpoint's public key (standard base64 of the raw 32-byte Ed25519 key).
pub(crate) const KEY: &str = "agentgate.checkpoint.key";
/// A checkpoint's signature (standard base64) over [`signed_text`].
pub(crate) const SIGNATURE: &str = "agentgate.checkpoint.signature";
/// `agentgate.chain.prev` of a chain's first line: no line comes before it.
pub(crate) const NO_PREV: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// How a line starts once chained: the record's `{` becomes this, the hash and `",`.
const PREFIX: &str = "{\"agentgate.chain.prev\":\"";
/// How many bytes chaining adds to a record's line (the prefix, 64 hex digits and `",`,
/// less the `{` it replaces), so the writer can tell what fits before a rotation.
pub(crate) const GROWTH: usize = PREFIX.len() + 64 + 2 - 1;
/// Room a file keeps for the checkpoint that seals it at rotation (a checkpoint line is
/// about 420 bytes; the unit tests check it fits).
pub(crate) const CHECKPOINT_ROOM: usize = 512;

/// What a checkpoint line contains in its action field, found without parsing: JSON escapes
/// the quotes of any string value, so this text occurs only as a real key and value.
const CHECKPOINT_MARK: &[u8] = b"\"event.action\":\"checkpoint\"";

/// Whether `line` is a checkpoint, which readers of records skip.
pub fn is_checkpoint(line: &[u8]) -> bool {
    memchr::memmem::find(line, CHECKPOINT_MARK).is_some()
}

/// The text a checkpoint's signature covers: the chain head it follows (its
/// `agentgate.chain.prev`), its line count and its `@timestamp`, each on a line of its own.
pub(crate) fn signed_text(prev: &str, lines: u64, timestamp: &str) -> String {
    format!("agentgate decision-log checkpoint v1\nprev {prev}\nlines {lines}\ntime {timestamp}\n")
}

/// The public half of `key` as `agentgate audit key` prints it and checkpoints carry it:
/// standard base64 of the raw 32 bytes.
pub fn public_key_base64(key: &Ed25519KeyPair) -> String {
    base64::engine::general_purpose::STANDARD.encode(key.public_key().as_ref())
}

/// Where the chain stands, to undo an append that failed (its lines are not in the file).
#[derive(Clone, Copy)]
pub(crate) struct Mark {
    head: [u8; 32],
    since: u64,
    started: bool,
}

/// The chain in the writer: the hash of the last line written, the lines since the last
/// checkpoint, and the key checkpoints are signed with.
pub(crate) struct Chain {
    head: [u8; 32],
    since: u64,
    /// Why this chain starts anew (a JSON string), written on its first line; `None` when it
    /// continues an earlier line.
    start: Option<String>,
    /// Whether the first line (the one that carries `start`) is written.
    started: bool,
    key: Ed25519KeyPair,
    public: String,
    /// The writer's buffer for chained lines, kept so no batch allocates one.
    pub(crate) buffer: String,
}

impl Chain {
    /// A new chain whose first line says it starts because of `reason`.
    pub(crate) fn new(key: Ed25519KeyPair, reason: &str) -> Chain {
        let public = public_key_base64(&key);
        let start = serde_json::to_string(reason).unwrap_or_else(|_| "\"unknown\"".to_owned());
        Chain { head: [0; 32], since: 0, start: Some(start), started: false, key, public, buffer: String::new() }
    }

    /// The chain as the log at `path` left it: chained to its last line, counting the lines
    /// since its last checkpoint. A new chain, saying why, when the file is missing, empty,
    /// unreadable or ends in a partial line. Reads the file once, at start.
    pub(crate) fn resume(path: &Path, key: Ed25519KeyPair) -> Chain {
        if path == Path::new("-") {
            return Chain::new(key, "standard output: no earlier line to read");
        }
        match last_line(path) {
            Ok(Some((last, since))) => {
                let public = public_key_base64(&key);
                Chain { head: sha256(&last), since, start: None, started: true, key, public, buffer: String::new() }
            }
            Ok(None) => Chain::new(key, &format!("no earlier line in {}", path.display())),
            Err(why) => {
                // A device (`/dev/null`) never has a chain to continue: no warning for it.
                if why != NOT_REGULAR {
                    tracing::warn!(path = %path.display(), why = %why, "decision log: a new hash chain starts");
                }
                Chain::new(key, &format!("cannot chain to {}: {why}", path.display()))
            }
        }
    }

    /// Lines written since the last checkpoint.
    pub(crate) fn since(&self) -> u64 {
        self.since
    }

    pub(crate) fn mark(&self) -> Mark {
        Mark { head: self.head, since: self.since, started: self.started }
    }

    /// Back to `mark`: the lines linked since were not written.
    pub(crate) fn restore(&mut self, mark: Mark) {
        self.head = mark.head;
        self.since = mark.since;
        self.started = mark.started;
    }

    /// Appends `line` (a record: `{…}\n`) to `out` with `agentgate.chain.prev` as its first
    /// field, and makes it the head.
    pub(crate) fn link(&mut self, line: &str, out: &mut String) {
        let from = out.len();
        self.push_prefix(out);
        out.push_str(line.strip_prefix('{').unwrap_or(line));
        if !out.ends_with('\n') {
            out.push('\n');
        }
        self.advance(&out[from..]);
    }

    /// Appends a checkpoint line to `out`: the head it follows, the lines since the last
    /// checkpoint and the signature over [`signed_text`]; `reason` says what made it
    /// (`interval`, `rotation`, `reopen`, `shutdown`). Resets the count.
    pub(crate) fn checkpoint(&mut self, reason: &str, now: SystemTime, out: &mut String) {
        let from = out.len();
        let prev = hex::encode(self.head);
        let time = rfc3339_millis(now);
        let time = time.as_str();
        let signature = self.key.sign(signed_text(&prev, self.since, time).as_bytes());
        let signature = base64::engine::general_purpose::STANDARD.encode(signature.as_ref());
        self.push_prefix(out);
        out.push_str(&format!(
            "\"event.action\":\"{CHECKPOINT}\",\"@timestamp\":\"{time}\",\"event.kind\":\"event\",\"event.reason\":\"{reason}\",\"{LINES}\":{},\"{KEY}\":\"{}\",\"{SIGNATURE}\":\"{signature}\"}}\n",
            self.since, self.public
        ));
        self.advance(&out[from..]);
        self.since = 0;
    }

    fn push_prefix(&mut self, out: &mut String) {
        let mut hex = [0u8; 64];
        // 32 bytes always fit 64 hex digits.
        let _ = hex::encode_to_slice(self.head, &mut hex);
        out.push_str(PREFIX);
        out.push_str(std::str::from_utf8(&hex).unwrap_or(NO_PREV));
        out.push_str("\",");
        if !self.started {
            if let Some(start) = &self.start {
                out.push_str("\"agentgate.chain.start\":");
                out.push_str(start);
                out.push(',');
            }
            self.started = true;
        }
    }

    fn advance(&mut self, line: &str) {
        self.head = sha256(line.strip_suffix('\n').unwrap_or(line).as_bytes());
        self.since += 1;
    }
}

/// The SHA-256 of `bytes`, by ring's assembly (SHA extensions where the CPU has them, else
/// its vector code): every line the log writes is hashed, and the `sha2` crate's portable
/// code, which it runs where the CPU has no SHA extensions, cost ~35 instructions a byte,
/// about half of all a request cost with the chain on (bench/RESULTS.md, Round 14).
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    let mut hash = [0u8; 32];
    hash.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref());
    hash
}

/// Why a device or a pipe starts a new chain.
const NOT_REGULAR: &str = "not a regular file";

/// The last line of the log at `path` (without its `\n`) and the lines after its last
/// checkpoint; `None` when the file is missing or empty.
fn last_line(path: &Path) -> Result<Option<(Vec<u8>, u64)>, String> {
    let file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(err.to_string()),
    };
    // A device (`/dev/null`, `/dev/full`) or a pipe has no last line to read back.
    if !file.metadata().map_err(|err| err.to_string())?.is_file() {
        return Err(NOT_REGULAR.to_owned());
    }
    let mut reader = BufReader::new(file);
    let (mut line, mut last, mut since) = (Vec::new(), Vec::new(), 0);
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(err) => return Err(err.to_string()),
        }
        since = if is_checkpoint(&line) { 0 } else { since + 1 };
        std::mem::swap(&mut line, &mut last);
    }
    match last.strip_suffix(b"\n") {
        _ if last.is_empty() => Ok(None),
        Some(complete) => Ok(Some((complete.to_vec(), since))),
        None => Err("its last line is incomplete".to_owned()),
    }
}

/// A key generated for one test.
#[cfg(test)]
pub(crate) fn test_key() -> Ed25519KeyPair {
    let rng = ring::rand::SystemRandom::new();
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&rng).expect("a system random source");
    Ed25519KeyPair::from_pkcs8(pkcs8.as_ref()).expect("a key just generated")
}

#[cfg(test)]
mod tests;
