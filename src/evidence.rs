//! Evidence from the decision log and the policy archive, for `agentgate audit show` and
//! `agentgate audit shadow`: the policy text behind a logged decision, read from the archive
//! ([`crate::archive`]) and checked against the digest the record names ([`show()`]), and
//! logged requests decided again against the files as they were served under a candidate
//! config, to see what a config change would have done to real traffic ([`shadow()`]).
//!
//! Owns: reading an archived body back as the response the fetcher produced, checking it
//! parses to the digest it is kept under ([`verified`]), and the two reports.
//!
//! Never: writes the log or the archive, fetches anything, or decides differently from
//! `agentgate explain --config` (the same [`crate::explain`] functions decide a replay).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use crate::archive::{self, ArchiveError, Archived};
use crate::audit::{LoggedRecord, field};
use crate::policy::{FetchOutcome, Format, Policies, formats};

mod shadow;
mod show;

pub use shadow::{Change, NotReplayed, ShadowReport, shadow};
pub use show::show;

/// Why `audit show` or `audit shadow` could not run (exit status 2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvidenceError {
    /// A decision log could not be read.
    #[error(transparent)]
    Log(#[from] crate::audit::AuditError),
    /// The output refused a write.
    #[error("cannot write the report: {0}")]
    Output(#[from] std::io::Error),
    /// The candidate config could not be loaded.
    #[error("--config: {0}")]
    Config(String),
}

/// The archive directory to read: `--archive` when given, else `policy-archive` beside the
/// first log named (where `[audit] archive_dir` puts it by default).
pub fn archive_dir(given: Option<&Path>, files: &[PathBuf]) -> PathBuf {
    match given {
        Some(dir) => dir.to_owned(),
        None => {
            let first = files.first().map(PathBuf::as_path).unwrap_or(Path::new(""));
            first.parent().unwrap_or(Path::new("")).join("policy-archive")
        }
    }
}

/// [`shadow()`] under the config file at `path`, the archive read from `archive` or beside
/// the first log ([`archive_dir`]).
///
/// # Errors
/// [`EvidenceError::Config`] when the config cannot be loaded, else as [`shadow()`].
pub fn shadow_config(path: &Path, archive: Option<&Path>, files: &[PathBuf]) -> Result<ShadowReport, EvidenceError> {
    let config =
        crate::config::Config::load(path).map_err(|e| EvidenceError::Config(format!("{}: {e}", path.display())))?;
    shadow(files, &config, &archive_dir(archive, files))
}

/// The body kept under `digest` in `dir`, checked: its sidecar's response parsed as the
/// proxy parses it gives a state whose digest is `digest`.
///
/// # Errors
/// [`ArchiveError`] when it is not archived or cannot be read; [`ArchiveError::Damaged`]
/// when the body does not parse to its digest (the archive was altered).
pub fn verified(dir: &Path, digest: &str) -> Result<Archived, ArchiveError> {
    let archived = archive::open(dir, digest)?;
    let host = host_of(&archived.sidecar.origin);
    let outcome = archived.outcome();
    let read = |path: &'static str, _cap: usize| -> Result<FetchOutcome, std::convert::Infallible> {
        Ok(if path == archived.sidecar.path { outcome.clone() } else { FetchOutcome::not_found() })
    };
    let Ok(policies) = Policies::read(host, read);
    if digests(&policies).iter().any(|d| d.as_deref() == Some(digest)) {
        Ok(archived)
    } else {
        Err(ArchiveError::Damaged {
            path: dir.join(format!("{digest}.gz")),
            cause: format!("the body does not parse to the digest {digest} it is kept under"),
        })
    }
}

/// The digest of every format's state.
fn digests(policies: &Policies) -> Vec<Option<Arc<str>>> {
    macro_rules! digests {
        ($($field:ident: $format:ty),* $(,)?) => {
            vec![$(<$format>::report(&policies.$field).digest,)*]
        };
    }
    formats!(digests)
}

/// The host of `scheme://host:port` (brackets kept off an IPv6 literal).
fn host_of(origin: &str) -> &str {
    let authority = origin.split_once("://").map_or(origin, |(_, rest)| rest);
    match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
    }
}

/// The reasons of a record as logged (`agentgate.reasons`).
fn reasons(record: &LoggedRecord) -> &[Value] {
    record.field(field::REASONS).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

/// The distinct digests a record's reasons name, in order.
fn record_digests(record: &LoggedRecord) -> Vec<&str> {
    let mut seen = BTreeSet::new();
    reasons(record)
        .iter()
        .filter_map(|reason| reason.get("digest").and_then(Value::as_str))
        .filter(|digest| seen.insert(*digest))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archived_body_is_used_only_while_it_parses_to_its_digest() {
        use sha2::Digest as _;
        let dir = tempfile::tempdir().expect("a temp dir");
        let body = b"User-agent: *\nDisallow: /private\n";
        let digest = hex::encode(sha2::Sha256::digest(body));
        let archive = archive::PolicyArchive::new(dir.path().to_owned(), 1 << 20, Arc::default());
        let headers = crate::policy::Headers::default();
        let served = archive::Served {
            source: "robots.txt",
            origin: "https://example.com:443",
            path: "/robots.txt",
            status: 200,
            headers: &headers,
            from: "origin",
        };
        archive.keep(&digest, served, body);
        assert_eq!(verified(dir.path(), &digest).expect("archived and intact").body, body);
        // Someone edits the archived body: it no longer matches the digest it is kept under.
        let mut gzip = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut gzip, b"User-agent: *\nAllow: /\n").expect("to memory");
        std::fs::write(dir.path().join(format!("{digest}.gz")), gzip.finish().expect("to memory")).expect("written");
        let error = verified(dir.path(), &digest).expect_err("altered");
        assert!(error.to_string().contains("does not parse to the digest"), "{error}");
    }

    #[test]
    fn the_host_of_an_origin() {
        assert_eq!(host_of("https://example.com:443"), "example.com");
        assert_eq!(host_of("http://[::1]:8080"), "::1");
        assert_eq!(host_of("https://example.com"), "example.com");
    }
}
