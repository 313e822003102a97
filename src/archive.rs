//! The policy archive (`[audit] archive_dir`): every distinct policy-file body agentgate
//! decides with, kept once under the digest its reasons carry (`agentgate.reasons[].digest`),
//! so the text behind a decision can be shown long after the cache moved on
//! (`agentgate audit show`) and logged traffic replayed against it (`agentgate audit shadow`).
//!
//! Owns: the layout on disk (`<digest>.gz`, the body gzip'd, and `<digest>.json`, its
//! [`Sidecar`]: origin, URL, status, when it was first archived, where the copy came from,
//! validators and headers), writing a new body off the request path (a blocking task; the
//! sidecar is renamed into place last, so a body is archived once its sidecar exists), the
//! bound (`[audit] archive_max_bytes`: oldest removed first, each removal counted in
//! `agentgate_policy_archive_total{result="evicted"}`), and reading a body back
//! ([`open`]), refusing any name that is not a SHA-256 hex digest.
//!
//! Never: decides, parses policy text, or blocks a request on the disk; a body the disk
//! refuses is counted (`failed`) and logged, and the request it came with is decided as
//! always.

use std::collections::{BTreeMap, HashSet};
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::metrics::Metrics;
use crate::policy::{FetchOutcome, Headers};

/// The most bytes a body read back may have once decompressed: above every format's size
/// cap, so an archive edited into a gzip bomb cannot exhaust memory.
const MAX_BODY: u64 = 16 * 1024 * 1024;

/// What the archive keeps beside a body (`<digest>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sidecar {
    /// The digest the body is kept under (the one decisions' reasons carry).
    pub digest: String,
    /// The format: `robots.txt`, `agents.txt`, `AGENTS.md`, `automation-preferences.txt`.
    pub source: String,
    /// The origin the file was fetched from, `scheme://host:port`.
    pub origin: String,
    /// The location fetched: the origin and the file's path (redirects are not recorded).
    pub url: String,
    /// The file's path on the origin (`/robots.txt`, `/.well-known/agents.md`, ...).
    pub path: String,
    /// The HTTP status the origin answered.
    pub status: u16,
    /// When this replica first decided with the body (RFC 3339): right after its fetch
    /// for a copy from the origin, when it read it for a copy from the fleet's store.
    pub fetched_at: String,
    /// Where the copy came from: `origin` or `shared_store`.
    pub from: String,
    /// `ETag` and `Last-Modified`, when the response had them.
    pub validators: BTreeMap<String, String>,
    /// Every response header, as served (some formats read them).
    pub headers: Vec<(String, String)>,
    /// The body's length in bytes.
    pub bytes: u64,
}

/// One body to archive, as the policy cache hands it over.
#[derive(Debug, Clone, Copy)]
pub struct Served<'a> {
    /// The format's name ([`crate::policy::Source::as_str`]).
    pub source: &'static str,
    /// The origin, `scheme://host:port`.
    pub origin: &'a str,
    /// The path fetched.
    pub path: &'a str,
    /// The status answered.
    pub status: u16,
    /// The response headers.
    pub headers: &'a Headers,
    /// `origin` or `shared_store`.
    pub from: &'static str,
}

/// The archive agentgate writes to. Cheap to clone: clones share one archive.
#[derive(Clone)]
pub struct PolicyArchive {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    max_bytes: u64,
    metrics: Arc<Metrics>,
    /// Digests archived (or being archived) by this process: a body already kept costs a
    /// set lookup per policy load, never a disk access.
    known: Mutex<HashSet<String>>,
    /// Held while writing and enforcing the bound, so two writers never remove one file.
    disk: Mutex<()>,
    /// Numbers temporary files.
    next_tmp: AtomicU64,
}

impl std::fmt::Debug for PolicyArchive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PolicyArchive").field("dir", &self.inner.dir).field("max_bytes", &self.inner.max_bytes).finish()
    }
}

impl PolicyArchive {
    /// The archive in `dir` (created at the first body), bounded by `max_bytes`.
    pub fn new(dir: PathBuf, max_bytes: u64, metrics: Arc<Metrics>) -> Self {
        let inner = Inner {
            dir,
            max_bytes,
            metrics,
            known: Mutex::new(HashSet::new()),
            disk: Mutex::new(()),
            next_tmp: AtomicU64::new(0),
        };
        PolicyArchive { inner: Arc::new(inner) }
    }

    /// Keeps `body`, served as `served`, under `digest`, unless this process already did:
    /// written by a blocking task, so the caller never waits for the disk.
    pub fn keep(&self, digest: &str, served: Served<'_>, body: &[u8]) {
        if !is_digest(digest) {
            return;
        }
        {
            let Ok(mut known) = self.inner.known.lock() else { return };
            if !known.insert(digest.to_owned()) {
                return;
            }
        }
        let header = |name: &str| served.headers.get(name).map(|value| (name.to_owned(), value.to_owned()));
        let sidecar = Sidecar {
            digest: digest.to_owned(),
            source: served.source.to_owned(),
            origin: served.origin.to_owned(),
            url: format!("{}{}", served.origin, served.path),
            path: served.path.to_owned(),
            status: served.status,
            fetched_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            from: served.from.to_owned(),
            validators: ["etag", "last-modified"].into_iter().filter_map(header).collect(),
            headers: served.headers.iter().map(|(n, v)| (n.to_owned(), v.to_owned())).collect(),
            bytes: body.len() as u64,
        };
        let (inner, body) = (Arc::clone(&self.inner), body.to_vec());
        let write = move || inner.store(&sidecar, &body);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(write)),
            Err(_) => write(),
        }
    }
}

impl Inner {
    /// Writes one body and its sidecar, then enforces the bound.
    fn store(&self, sidecar: &Sidecar, body: &[u8]) {
        let Ok(_disk) = self.disk.lock() else { return };
        match self.write(sidecar, body) {
            Ok(true) => self.metrics.policy_archive("stored"),
            Ok(false) => {}
            Err(error) => {
                self.metrics.policy_archive("failed");
                if let Ok(mut known) = self.known.lock() {
                    known.remove(&sidecar.digest);
                }
                tracing::warn!(dir = %self.dir.display(), digest = %sidecar.digest, %error,
                    "cannot archive a policy file; decisions go on, but `agentgate audit show` will not find it: fix [audit] archive_dir");
                return;
            }
        }
        if let Err(error) = self.bound() {
            tracing::warn!(dir = %self.dir.display(), %error, "cannot enforce [audit] archive_max_bytes");
        }
    }

    /// `Ok(false)` when the body was already on disk (archived before a restart).
    fn write(&self, sidecar: &Sidecar, body: &[u8]) -> io::Result<bool> {
        let (gz, json) = paths(&self.dir, &sidecar.digest);
        if json.exists() {
            return Ok(false);
        }
        fs::create_dir_all(&self.dir)?;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        encoder.write_all(body)?;
        self.put(&gz, &encoder.finish()?)?;
        let text = serde_json::to_vec_pretty(sidecar).map_err(io::Error::other)?;
        self.put(&json, &text)?;
        Ok(true)
    }

    /// Writes `bytes` to `path` through a temporary file renamed into place.
    fn put(&self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        let n = self.next_tmp.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{n}"));
        fs::write(&tmp, bytes)?;
        fs::rename(&tmp, path)
    }

    /// Removes the oldest bodies (by their sidecar's modification time) until the archive
    /// takes at most `max_bytes`.
    fn bound(&self) -> io::Result<()> {
        let mut entries = Vec::new();
        let mut total = 0u64;
        for entry in fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(digest) = name.to_str().and_then(|n| n.strip_suffix(".json")).filter(|d| is_digest(d)) else {
                continue;
            };
            let (gz, json) = paths(&self.dir, digest);
            let meta = fs::metadata(&json)?;
            let bytes = meta.len() + fs::metadata(&gz).map(|m| m.len()).unwrap_or(0);
            total += bytes;
            entries.push((meta.modified()?, digest.to_owned(), bytes));
        }
        entries.sort();
        for (_, digest, bytes) in entries {
            if total <= self.max_bytes {
                break;
            }
            let (gz, json) = paths(&self.dir, &digest);
            // The sidecar first: without it the body counts as not archived.
            remove(&json)?;
            remove(&gz)?;
            total -= bytes;
            self.metrics.policy_archive("evicted");
            if let Ok(mut known) = self.known.lock() {
                known.remove(&digest);
            }
        }
        Ok(())
    }
}

fn remove(path: &Path) -> io::Result<()> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// The body and sidecar paths of `digest` under `dir`.
fn paths(dir: &Path, digest: &str) -> (PathBuf, PathBuf) {
    (dir.join(format!("{digest}.gz")), dir.join(format!("{digest}.json")))
}

/// True for 64 lower-case hex digits: the only names the archive reads or writes.
pub fn is_digest(text: &str) -> bool {
    text.len() == 64 && text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Why a body cannot be read back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    /// The digest is not 64 lower-case hex digits (a log line edited by hand?).
    #[error("{digest:?} is not a SHA-256 hex digest; the archive keeps bodies only under those")]
    NotADigest {
        /// The text given.
        digest: String,
    },
    /// No body under this digest.
    #[error(
        "{digest} is no longer archived in {}: removed past [audit] archive_max_bytes, or never archived (archive off, or a write failed)",
        dir.display()
    )]
    NotArchived {
        /// The digest asked for.
        digest: String,
        /// The archive directory.
        dir: PathBuf,
    },
    /// A file of the archive exists but cannot be read or is damaged.
    #[error("cannot read {}: {cause}; the archive entry is damaged", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What failed.
        cause: String,
    },
}

/// A body read back from the archive.
#[derive(Debug, Clone)]
pub struct Archived {
    /// What was kept beside it.
    pub sidecar: Sidecar,
    /// The body as served.
    pub body: Vec<u8>,
}

impl Archived {
    /// The response as the fetcher produced it: what the policy core parses.
    pub fn outcome(&self) -> FetchOutcome {
        FetchOutcome::Response {
            status: self.sidecar.status,
            headers: Headers::new(self.sidecar.headers.clone()),
            body: self.body.clone(),
            over_cap: false,
        }
    }
}

/// The body kept under `digest` in the archive `dir`.
///
/// # Errors
/// [`ArchiveError::NotADigest`], [`ArchiveError::NotArchived`] (no sidecar), or
/// [`ArchiveError::Damaged`] (a sidecar or body that cannot be read).
pub fn open(dir: &Path, digest: &str) -> Result<Archived, ArchiveError> {
    if !is_digest(digest) {
        return Err(ArchiveError::NotADigest { digest: digest.to_owned() });
    }
    let (gz, json) = paths(dir, digest);
    let damaged = |path: &Path, cause: String| ArchiveError::Damaged { path: path.to_owned(), cause };
    let text = match fs::read(&json) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(ArchiveError::NotArchived { digest: digest.to_owned(), dir: dir.to_owned() });
        }
        Err(e) => return Err(damaged(&json, e.to_string())),
    };
    let sidecar: Sidecar = serde_json::from_slice(&text).map_err(|e| damaged(&json, e.to_string()))?;
    let file = fs::File::open(&gz).map_err(|e| damaged(&gz, e.to_string()))?;
    let mut body = Vec::new();
    flate2::read::GzDecoder::new(file)
        .take(MAX_BODY)
        .read_to_end(&mut body)
        .map_err(|e| damaged(&gz, e.to_string()))?;
    Ok(Archived { sidecar, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(headers: &Headers) -> Served<'_> {
        Served {
            source: "robots.txt",
            origin: "https://example.com:443",
            path: "/robots.txt",
            status: 200,
            headers,
            from: "origin",
        }
    }

    #[test]
    fn a_body_is_kept_once_and_read_back_under_its_digest() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let archive = PolicyArchive::new(dir.path().to_owned(), 1 << 20, Arc::default());
        let headers = Headers::new(vec![("ETag".to_owned(), "\"v1\"".to_owned())]);
        let digest = "a".repeat(64);
        archive.keep(&digest, served(&headers), b"User-agent: *\nDisallow: /private\n");
        archive.keep(&digest, served(&headers), b"ignored: already archived");
        let read = open(dir.path(), &digest).expect("archived");
        assert_eq!(read.body, b"User-agent: *\nDisallow: /private\n");
        assert_eq!(read.sidecar.url, "https://example.com:443/robots.txt");
        assert_eq!(read.sidecar.validators.get("etag").map(String::as_str), Some("\"v1\""));
        assert!(matches!(open(dir.path(), &"b".repeat(64)), Err(ArchiveError::NotArchived { .. })));
        assert!(matches!(open(dir.path(), "../../etc/passwd"), Err(ArchiveError::NotADigest { .. })));
    }

    #[test]
    fn past_the_bound_the_oldest_bodies_go() {
        let headers = Headers::default();
        // One entry's size (sidecar and gzip'd body), measured: the bound holds two and a half.
        let probe = tempfile::tempdir().expect("a temp dir");
        PolicyArchive::new(probe.path().to_owned(), u64::MAX, Arc::default()).keep(
            &"0".repeat(64),
            served(&headers),
            &[b'w'; 100],
        );
        let files = fs::read_dir(probe.path()).expect("the probe archive").flatten();
        let entry: u64 = files.map(|f| f.metadata().map(|m| m.len()).unwrap_or(0)).sum();
        let dir = tempfile::tempdir().expect("a temp dir");
        let archive = PolicyArchive::new(dir.path().to_owned(), entry * 5 / 2, Arc::default());
        let (first, second) = ("1".repeat(64), "2".repeat(64));
        archive.keep(&first, served(&headers), &[b'x'; 100]);
        archive.keep(&second, served(&headers), &[b'y'; 100]);
        // The third pushes the first out.
        archive.keep(&"3".repeat(64), served(&headers), &[b'z'; 100]);
        assert!(matches!(open(dir.path(), &first), Err(ArchiveError::NotArchived { .. })), "the oldest went");
        assert!(open(dir.path(), &"3".repeat(64)).is_ok(), "the newest stays");
        archive.keep(&first, served(&headers), &[b'x'; 100]);
        assert!(open(dir.path(), &first).is_ok(), "an evicted body is archived again when seen again");
    }
}
