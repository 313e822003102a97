//! `agentgate audit verify`: checks decision-log files, given in any order (plain, rotated,
//! gzip'd), against the hash chain and the checkpoint signatures ([`verify`]). The files are
//! put in the chain's order (a file follows the one whose last line its first line chains
//! to); every link and every checkpoint is checked, and each break is named with its file,
//! line and kind ([`BreakKind`]).
//!
//! What it proves and what it cannot is in `docs/decision-log.md` ("Tamper evidence"): lines
//! after the last checkpoint could have been cut off unseen, and the key a file names proves
//! nothing about who signed (only `--key` does).
//!
//! Never: changes a file, or stops at the first break.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use ring::signature::{ED25519, UnparsedPublicKey};
use serde_json::Value;

use super::{KEY, LINES, PREV, SIGNATURE, START, signed_text};
use crate::audit::{AuditError, field, for_each_line};

/// What kind of break a line shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakKind {
    /// The line's bytes changed since the next line chained to it (or it is no chained line).
    Edited,
    /// Lines are missing before this one: it chains to no line given, and the checkpoint
    /// after it counts more lines than the files hold.
    Deleted,
    /// The line chains to a line other than the one before it.
    Reordered,
    /// The line is in no chain: the next line chains to the line before it.
    Inserted,
    /// The file's first line chains to a line in none of the files given, and it is not the
    /// oldest file: a file between is missing.
    MissingFile,
    /// A checkpoint's signature does not verify (or the checkpoint is malformed).
    Signature,
    /// A checkpoint counts a different number of lines since the one before it than the
    /// files hold.
    Count,
}

impl BreakKind {
    /// The kind as `verify` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakKind::Edited => "edited",
            BreakKind::Deleted => "deleted",
            BreakKind::Reordered => "reordered",
            BreakKind::Inserted => "inserted",
            BreakKind::MissingFile => "missing file",
            BreakKind::Signature => "signature",
            BreakKind::Count => "count",
        }
    }
}

/// One break: where, what kind, and what was found.
#[derive(Debug, Clone)]
pub struct Break {
    /// The file as given.
    pub path: PathBuf,
    /// The line, from 1.
    pub line: u64,
    /// What kind of break.
    pub kind: BreakKind,
    /// What was found.
    pub detail: String,
}

/// What `verify` found.
#[derive(Debug, Default)]
pub struct Verified {
    /// The files in the chain's order.
    pub files: Vec<PathBuf>,
    /// Every line of every file.
    pub lines: u64,
    /// Checkpoints whose signature verified.
    pub checkpoints: u64,
    /// The SHA-256 (hex) of the chain's last line.
    pub head: Option<String>,
    /// Lines after the last checkpoint (all of them when there is none).
    pub after_last_checkpoint: u64,
    /// The file and line of the last checkpoint.
    pub last_checkpoint: Option<(PathBuf, u64)>,
    /// The keys the checkpoints name (base64), when no key was given.
    pub named_keys: Vec<String>,
    /// Every break, in the chain's order.
    pub breaks: Vec<Break>,
    /// What the reader should know and is no break: where a chain starts, what precedes the
    /// oldest file.
    pub notes: Vec<String>,
}

impl Verified {
    /// True when every link and every checkpoint holds.
    pub fn holds(&self) -> bool {
        self.breaks.is_empty()
    }

    /// Prints the breaks (`FILE:LINE: KIND: detail`), the notes and the totals.
    ///
    /// # Errors
    /// A failed write to `out`.
    pub fn report(&self, out: &mut impl Write) -> io::Result<()> {
        for b in &self.breaks {
            writeln!(out, "{}:{}: {}: {}", b.path.display(), b.line, b.kind.as_str(), b.detail)?;
        }
        for note in &self.notes {
            writeln!(out, "note: {note}")?;
        }
        writeln!(
            out,
            "verified: {} lines in {} files, {} checkpoints signed, chain head {}",
            self.lines,
            self.files.len(),
            self.checkpoints,
            self.head.as_deref().unwrap_or("none")
        )?;
        let last = match &self.last_checkpoint {
            Some((path, line)) => format!("{}:{line}", path.display()),
            None => "none".to_owned(),
        };
        writeln!(
            out,
            "after the last checkpoint ({last}): {} lines, which no signature covers (a cut there would not show)",
            self.after_last_checkpoint
        )?;
        writeln!(out, "breaks: {}", self.breaks.len())
    }
}

/// One line as the verifier needs it.
struct Line {
    hash: [u8; 32],
    prev: Option<[u8; 32]>,
    start: Option<String>,
    checkpoint: Option<Checkpoint>,
    timestamp: Option<String>,
}

struct Checkpoint {
    prev: String,
    lines: Option<u64>,
    key: Option<String>,
    signature: Option<String>,
    timestamp: String,
}

struct File {
    path: PathBuf,
    lines: Vec<Line>,
}

fn parse_line(bytes: &[u8]) -> Line {
    let hash = super::sha256(bytes);
    let value: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_owned);
    let prev = text(PREV).and_then(|hex| {
        let mut out = [0u8; 32];
        hex::decode_to_slice(hex, &mut out).ok().map(|()| out)
    });
    let checkpoint =
        (value.get(field::EVENT_ACTION).and_then(Value::as_str) == Some(super::CHECKPOINT)).then(|| Checkpoint {
            prev: text(PREV).unwrap_or_default(),
            lines: value.get(LINES).and_then(Value::as_u64),
            key: text(KEY),
            signature: text(SIGNATURE),
            timestamp: text(field::TIMESTAMP).unwrap_or_default(),
        });
    Line { hash, prev, start: text(START), checkpoint, timestamp: text(field::TIMESTAMP) }
}

/// Checks `paths` (in any order) against the chain and the checkpoint signatures; with
/// `key` (the raw Ed25519 public key), every checkpoint must be signed with it, else each
/// with the key it names.
///
/// # Errors
/// A file that cannot be opened or read ([`AuditError::ReadOpen`], [`AuditError::Read`]).
pub fn verify(paths: &[PathBuf], key: Option<&[u8]>) -> Result<Verified, AuditError> {
    let mut files = Vec::new();
    for path in paths {
        let mut lines = Vec::new();
        for_each_line(std::slice::from_ref(path), |_, _, bytes| lines.push(parse_line(bytes)))?;
        files.push(File { path: path.clone(), lines });
    }
    let mut verified = Verified::default();
    let order = chain_order(&files, &mut verified);
    let mut walk = Walk::new(key);
    // Everything a line can chain to, and every line that some line chains to.
    for file in &files {
        for (n, line) in file.lines.iter().enumerate() {
            walk.referenced.extend(line.prev);
            walk.by_hash.entry(line.hash).or_insert((file.path.clone(), n as u64 + 1));
        }
    }
    for (n, &index) in order.iter().enumerate() {
        let file = &files[index];
        verified.files.push(file.path.clone());
        walk.file(file, n == 0, &mut verified);
    }
    walk.finish(&mut verified);
    Ok(verified)
}

/// The files in the chain's order: each after the file whose last line its first line
/// chains to; the files that follow none (the oldest, a file after a missing one, a new
/// chain) by their first timestamp.
fn chain_order(files: &[File], verified: &mut Verified) -> Vec<usize> {
    let by_last: HashMap<[u8; 32], usize> =
        files.iter().enumerate().filter_map(|(i, f)| f.lines.last().map(|l| (l.hash, i))).collect();
    let after = |i: usize| files[i].lines.first().and_then(|l| l.prev).and_then(|p| by_last.get(&p).copied());
    let mut next: HashMap<usize, usize> = HashMap::new();
    for i in 0..files.len() {
        if let Some(before) = after(i).filter(|&b| b != i) {
            next.entry(before).or_insert(i);
        }
    }
    let followers: HashSet<usize> = next.values().copied().collect();
    let mut heads: Vec<usize> = (0..files.len()).filter(|i| !followers.contains(i)).collect();
    let first_time = |i: usize| files[i].lines.iter().find_map(|l| l.timestamp.clone()).unwrap_or_default();
    heads.sort_by_key(|&i| first_time(i));
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    for head in heads {
        let mut at = Some(head);
        while let Some(i) = at.filter(|i| seen.insert(*i)) {
            order.push(i);
            at = next.get(&i).copied();
        }
    }
    for (i, file) in files.iter().enumerate() {
        if seen.insert(i) {
            verified.notes.push(format!("{} is given twice or in no chain; checked last", file.path.display()));
            order.push(i);
        }
    }
    order
}

/// A break at the line before the current one whose kind the next checkpoint's count
/// decides: edited (the count holds) or lines deleted (it counts more).
struct Undecided {
    path: PathBuf,
    /// The line that chains to nothing given.
    line: u64,
    detail: String,
}

/// The walk over every line in the chain's order.
struct Walk<'k> {
    key: Option<&'k [u8]>,
    /// Every line's hash, in order, and where each one is.
    hashes: Vec<[u8; 32]>,
    /// The hashes some line chains to.
    referenced: HashSet<[u8; 32]>,
    by_hash: HashMap<[u8; 32], (PathBuf, u64)>,
    /// Lines since the last checkpoint or chain start; `None` when that is not in the files.
    since: Option<u64>,
    undecided: Vec<Undecided>,
    named: Vec<String>,
}

impl<'k> Walk<'k> {
    fn new(key: Option<&'k [u8]>) -> Walk<'k> {
        Walk {
            key,
            hashes: Vec::new(),
            referenced: HashSet::new(),
            by_hash: HashMap::new(),
            since: None,
            undecided: Vec::new(),
            named: Vec::new(),
        }
    }

    fn file(&mut self, file: &File, oldest: bool, verified: &mut Verified) {
        let path = &file.path;
        for (n, line) in file.lines.iter().enumerate() {
            let number = n as u64 + 1;
            let at = |kind, detail: String| Break { path: path.clone(), line: number, kind, detail };
            verified.lines += 1;
            if let Some(reason) = &line.start {
                verified.notes.push(format!("{}:{number}: a new chain starts: {reason}", path.display()));
                self.settle(verified);
                self.since = Some(0);
            } else if line.prev.is_none() {
                verified.breaks.push(at(BreakKind::Edited, format!("not a chained JSON line (no valid \"{PREV}\")")));
            } else if n == 0 && !self.chains_on(line) {
                if oldest {
                    verified.notes.push(format!(
                        "{}:1: chains to a line not given (older files rotated away?); checked from here",
                        path.display()
                    ));
                } else {
                    verified.breaks.push(at(
                        BreakKind::MissingFile,
                        "chains to a line in none of the files given: the file before it is missing".to_owned(),
                    ));
                }
                self.settle(verified);
                self.since = None;
            } else if !self.chains_on(line) {
                self.classify(file, n, verified);
            }
            self.hashes.push(line.hash);
            if let Some(checkpoint) = &line.checkpoint {
                self.checkpoint(checkpoint, path, number, verified);
            } else if let Some(since) = &mut self.since {
                *since += 1;
            }
            verified.after_last_checkpoint += 1;
            if line.checkpoint.is_some() {
                verified.after_last_checkpoint = 0;
                verified.last_checkpoint = Some((path.clone(), number));
            }
        }
    }

    fn chains_on(&self, line: &Line) -> bool {
        self.hashes.last().is_some() && line.prev == self.hashes.last().copied()
    }

    /// Names the break at line `n` of `file`, which does not chain to the line before.
    fn classify(&mut self, file: &File, n: usize, verified: &mut Verified) {
        let line = &file.lines[n];
        let number = n as u64 + 1;
        let path = &file.path;
        let count = self.hashes.len();
        let before = self.hashes[count - 1];
        // The line before is in no chain, and this one chains to the one before that.
        if count >= 2 && line.prev == Some(self.hashes[count - 2]) && !self.referenced.contains(&before) {
            verified.breaks.push(Break {
                path: path.clone(),
                line: number - 1,
                kind: BreakKind::Inserted,
                detail: "no line chains to it; the next line chains to the line before it".to_owned(),
            });
            // The inserted line itself was no line of the chain.
            if let Some(since) = &mut self.since {
                *since = since.saturating_sub(1);
            }
            verified.breaks.retain(|b| !(b.path == *path && b.line == number - 1 && b.kind != BreakKind::Inserted));
            return;
        }
        // This line is in no chain and the next one chains to the line before: the next
        // link reports it as inserted.
        let next = file.lines.get(n + 1);
        if !self.referenced.contains(&line.hash) && next.is_some_and(|next| next.prev == Some(before)) {
            return;
        }
        if let Some(prev) = line.prev
            && let Some((other, other_line)) = self.by_hash.get(&prev)
        {
            verified.breaks.push(Break {
                path: path.clone(),
                line: number,
                kind: BreakKind::Reordered,
                detail: format!("chains to {}:{other_line}, not to the line before it", other.display()),
            });
            return;
        }
        self.undecided.push(Undecided {
            path: path.clone(),
            line: number,
            detail: "chains to a line in none of the files given".to_owned(),
        });
    }

    /// Checks a checkpoint's signature and count; decides the undecided breaks before it.
    fn checkpoint(&mut self, checkpoint: &Checkpoint, path: &Path, number: u64, verified: &mut Verified) {
        let at = |kind, detail: String| Break { path: path.to_owned(), line: number, kind, detail };
        let lines = checkpoint.lines.unwrap_or(u64::MAX);
        let decoded = |text: &Option<String>| {
            text.as_deref().and_then(|t| base64::engine::general_purpose::STANDARD.decode(t).ok())
        };
        let named = decoded(&checkpoint.key);
        if let Some(name) = &checkpoint.key
            && self.key.is_none()
            && !self.named.contains(name)
        {
            self.named.push(name.clone());
        }
        let key = self.key.map(<[u8]>::to_vec).or(named);
        let signature = decoded(&checkpoint.signature);
        let signed = signed_text(&checkpoint.prev, lines, &checkpoint.timestamp);
        let valid = match (key, signature, checkpoint.lines) {
            (Some(key), Some(signature), Some(_)) => {
                UnparsedPublicKey::new(&ED25519, key).verify(signed.as_bytes(), &signature).is_ok()
            }
            _ => false,
        };
        if valid {
            verified.checkpoints += 1;
        } else {
            let whose = if self.key.is_some() { "the key given" } else { "the key it names" };
            verified
                .breaks
                .push(at(BreakKind::Signature, format!("the checkpoint's signature does not verify with {whose}")));
        }
        let since = self.since.take();
        let deleted = since.is_some_and(|since| since < lines);
        for undecided in self.undecided.drain(..) {
            let (kind, line, detail) = if deleted {
                (BreakKind::Deleted, undecided.line, format!("{}: lines before it are missing", undecided.detail))
            } else {
                (BreakKind::Edited, undecided.line - 1, "the next line chains to other bytes".to_owned())
            };
            verified.breaks.push(Break { path: undecided.path, line, kind, detail });
        }
        if let Some(since) = since
            && since != lines
            && !deleted
        {
            verified.breaks.push(at(
                BreakKind::Count,
                format!("counts {lines} lines since the checkpoint before it; the files hold {since}"),
            ));
        }
        self.since = Some(0);
    }

    /// Names the undecided breaks no checkpoint follows: edited, or lines deleted.
    fn settle(&mut self, verified: &mut Verified) {
        for undecided in self.undecided.drain(..) {
            verified.breaks.push(Break {
                path: undecided.path,
                line: undecided.line - 1,
                kind: BreakKind::Edited,
                detail: format!(
                    "the next line chains to other bytes (or lines before line {} were deleted: no checkpoint after it tells)",
                    undecided.line
                ),
            });
        }
    }

    fn finish(mut self, verified: &mut Verified) {
        self.settle(verified);
        verified.head = self.hashes.last().map(hex::encode);
        verified.named_keys = std::mem::take(&mut self.named);
    }
}
