//! The `[audit]` config table ([`AuditConfig`]) and its one enumerated value, what the gate
//! does with a request whose record cannot be written ([`OnFailure`]); each key is checked
//! here ([`AuditConfig::problems`]). Keys and defaults: `docs/config.md`, `docs/decision-log.md`.
//!
//! Never: opens the log or starts the writer (`writer.rs` does, from this table).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::setting::{byte_size, duration, nonzero_caps, nonzero_timeouts};

/// What the gate does with a request whose record cannot be written (DESIGN §7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OnFailure {
    /// Refuse the request (503 "decision log unavailable"): nothing passes unaudited. The
    /// default, because the log exists for the people who audit agents.
    #[default]
    Block,
    /// Handle the request anyway; the failure counter records the missing line.
    Continue,
}

impl OnFailure {
    /// The config value: `block` or `continue`.
    pub fn as_str(self) -> &'static str {
        match self {
            OnFailure::Block => "block",
            OnFailure::Continue => "continue",
        }
    }
}

/// The `[audit]` config table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// Where lines go, appended; parent directories are created. `-` means stdout.
    pub path: PathBuf,
    /// Records the queue holds before [`super::AuditLog::record`] waits for the writer.
    pub queue_capacity: usize,
    /// What the gate does when a record cannot be written.
    pub on_failure: OnFailure,
    /// Keep query values in `url.full` (they are `REDACTED` otherwise).
    pub log_query: bool,
    /// Rotate the file before a line would take it past this many bytes (default
    /// [`DEFAULT_MAX_FILE_SIZE`], so the default log cannot fill a disk); `0` never rotates
    /// (rotate with logrotate and SIGHUP instead). Written as bytes or with a unit
    /// (`"100MiB"`). Standard output (`path = "-"`) is never rotated.
    #[serde(deserialize_with = "byte_size")]
    pub max_file_size: u64,
    /// How many rotated files (`path.1` … `path.N`) are kept; the oldest is deleted (default
    /// [`DEFAULT_MAX_FILES`]).
    pub max_files: usize,
    /// Where every distinct policy-file body agentgate decides with is kept, under its
    /// SHA-256 (`crate::archive`): unset means `policy-archive` beside the log file (no
    /// archive when the log is standard output); `"off"` or `""` turns it off.
    pub archive_dir: Option<PathBuf>,
    /// The most bytes the archive takes (bodies and their sidecars); past it the oldest are
    /// removed first (default [`DEFAULT_ARCHIVE_MAX_BYTES`]). Bytes or with a unit.
    #[serde(deserialize_with = "byte_size")]
    pub archive_max_bytes: u64,
    /// The Ed25519 key (PKCS#8, DER or PEM) checkpoints are signed with, created (0600) when
    /// missing; unset: `<[ca] dir>/audit-key.pk8` ([`AuditConfig::signing_key_path`]).
    pub signing_key_file: Option<PathBuf>,
    /// How often the writer adds a signed checkpoint line when lines were written since the
    /// last one (also at rotation, reopen and shutdown); default 60 s.
    #[serde(deserialize_with = "duration")]
    pub checkpoint_interval: Duration,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            path: PathBuf::from("logs/decisions.jsonl"),
            queue_capacity: 8192,
            on_failure: OnFailure::Block,
            log_query: false,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            max_files: DEFAULT_MAX_FILES,
            archive_dir: None,
            archive_max_bytes: DEFAULT_ARCHIVE_MAX_BYTES,
            signing_key_file: None,
            checkpoint_interval: DEFAULT_CHECKPOINT_INTERVAL,
        }
    }
}

/// The default `[audit] archive_max_bytes`: 256 MiB, some tens of thousands of distinct
/// policy files.
pub const DEFAULT_ARCHIVE_MAX_BYTES: u64 = 256 * 1024 * 1024;

impl AuditConfig {
    /// The policy archive's directory: `archive_dir` as set, `policy-archive` beside the log
    /// when unset, `None` when it is `"off"` or `""`, or unset with the log on stdout.
    pub fn archive_dir(&self) -> Option<PathBuf> {
        match &self.archive_dir {
            Some(dir) if dir.as_os_str().is_empty() || dir == Path::new("off") => None,
            Some(dir) => Some(dir.clone()),
            None if self.path == Path::new("-") => None,
            None => Some(self.path.parent().unwrap_or(Path::new("")).join("policy-archive")),
        }
    }
}

/// The default `[audit] checkpoint_interval`.
pub const DEFAULT_CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

/// The default `[audit] max_file_size`: 100 MiB. With [`DEFAULT_MAX_FILES`] the default log
/// takes at most 1.1 GiB (the file and ten rotated ones): about a million forwarded
/// requests, a few minutes at full load, hours to days for most deployments.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 100 * 1024 * 1024;
/// The default `[audit] max_files`.
pub const DEFAULT_MAX_FILES: usize = 10;

impl AuditConfig {
    /// The checkpoint signing key: `[audit] signing_key_file`, else `audit-key.pk8` in the
    /// CA directory `ca_dir` (kept like the CA's own key, away from the log directory that
    /// log shippers read).
    pub fn signing_key_path(&self, ca_dir: &Path) -> PathBuf {
        self.signing_key_file.clone().unwrap_or_else(|| ca_dir.join("audit-key.pk8"))
    }

    /// The log's files that exist, oldest first, as `agentgate audit` reads them: the rotated
    /// ones (`path.max_files` … `path.1`), then `path`. Empty for standard output.
    pub fn files(&self) -> Vec<PathBuf> {
        if self.path == Path::new("-") {
            return Vec::new();
        }
        let rotated = (1..=self.max_files).rev().map(|n| super::writer::rotated_path(&self.path, n));
        rotated.chain([self.path.clone()]).filter(|file| file.exists()).collect()
    }

    /// The most disk the log takes, in bytes (the file and every rotated one), when it is
    /// rotated by size: `None` for standard output or `max_file_size = 0` (no bound).
    pub fn disk_bound(&self) -> Option<u64> {
        let rotated = self.max_file_size > 0 && self.path != Path::new("-");
        rotated.then(|| self.max_file_size.saturating_mul(self.max_files as u64 + 1))
    }
}

/// The smallest `[audit] max_file_size`: below it most files would hold a single record.
pub(super) const MIN_FILE_SIZE: u64 = 1024;

impl AuditConfig {
    /// Problems in `[audit]`, each naming the key, its value and the fix.
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        let default = Self::default();
        nonzero_caps(
            problems,
            &[
                ("[audit] queue_capacity", self.queue_capacity, default.queue_capacity),
                ("[audit] max_files", self.max_files, default.max_files),
            ],
        );
        nonzero_timeouts(problems, &[("[audit] checkpoint_interval", self.checkpoint_interval)]);
        if self.path.as_os_str().is_empty() {
            problems.push("[audit] path = \"\": must not be empty".to_owned());
        }
        let size = self.max_file_size;
        if size > 0 && size < MIN_FILE_SIZE {
            problems.push(format!(
                "[audit] max_file_size = {size}: must be 0 (no rotation) or at least {MIN_FILE_SIZE} bytes, e.g. \"100MiB\""
            ));
        }
        // The default size is not a choice: standard output just is not rotated.
        if size > 0 && size != default.max_file_size && self.path == Path::new("-") {
            problems.push(format!(
                "[audit] max_file_size = {size}: stdout (path = \"-\") is never rotated; set max_file_size = 0 or log to a file"
            ));
        }
        if self.archive_max_bytes == 0 && self.archive_dir().is_some() {
            problems.push(
                "[audit] archive_max_bytes = 0: the archive would keep nothing; set a size such as \"256MiB\", or archive_dir = \"off\""
                    .to_owned(),
            );
        }
        if size == 0 && self.max_files != default.max_files {
            problems.push(format!(
                "[audit] max_files = {}: only rotation by size keeps rotated files; set max_file_size too, e.g. \"100MiB\"",
                self.max_files
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_settings_are_checked() {
        let problems = |audit: AuditConfig| {
            let mut problems = Vec::new();
            audit.problems(&mut problems);
            problems.join("\n")
        };
        assert_eq!(problems(AuditConfig::default()), "");
        assert_eq!(
            problems(AuditConfig { path: "-".into(), ..AuditConfig::default() }),
            "",
            "stdout keeps the default"
        );
        let off = AuditConfig { max_file_size: 0, max_files: DEFAULT_MAX_FILES, ..AuditConfig::default() };
        assert_eq!(problems(off), "", "0 leaves rotation to logrotate");
        let small = problems(AuditConfig { max_file_size: 100, ..AuditConfig::default() });
        assert!(small.contains("[audit] max_file_size = 100") && small.contains("at least 1024"), "{small}");
        let stdout = problems(AuditConfig { path: "-".into(), max_file_size: 1 << 20, ..AuditConfig::default() });
        assert!(stdout.contains("stdout"), "{stdout}");
        let inert = problems(AuditConfig { max_file_size: 0, max_files: 3, ..AuditConfig::default() });
        assert!(inert.contains("[audit] max_files = 3") && inert.contains("max_file_size"), "{inert}");
        let zero = problems(AuditConfig { max_file_size: 1 << 20, max_files: 0, ..AuditConfig::default() });
        assert!(zero.contains("[audit] max_files = 0: must be at least 1"), "{zero}");
    }

    #[test]
    fn settings_read_the_audit_table() {
        let defaults: AuditConfig = toml::from_str("").expect("all keys are optional");
        assert_eq!(defaults, AuditConfig::default());
        assert_eq!(defaults.path, Path::new("logs/decisions.jsonl"));
        assert_eq!((defaults.queue_capacity, defaults.on_failure, defaults.log_query), (8192, OnFailure::Block, false));
        assert_eq!((defaults.max_file_size, defaults.max_files), (100 << 20, 10), "rotated by size by default");
        assert_eq!(defaults.checkpoint_interval, Duration::from_secs(60));
        assert_eq!(defaults.signing_key_path(Path::new("certs")), Path::new("certs/audit-key.pk8"));
        assert_eq!(defaults.disk_bound(), Some(1100 << 20));
        assert_eq!(AuditConfig { path: "-".into(), ..defaults.clone() }.disk_bound(), None);
        assert_eq!(AuditConfig { max_file_size: 0, ..defaults.clone() }.disk_bound(), None);

        let table = "path = \"-\"\nqueue_capacity = 64\non_failure = \"continue\"\nlog_query = true\n\
                     max_file_size = \"64KiB\"\nmax_files = 2\nsigning_key_file = \"/keys/audit.pk8\"\n\
                     checkpoint_interval = \"5s\"\n";
        let set: AuditConfig = toml::from_str(table).expect("a full table");
        assert_eq!(
            set,
            AuditConfig {
                path: "-".into(),
                queue_capacity: 64,
                on_failure: OnFailure::Continue,
                log_query: true,
                max_file_size: 65_536,
                max_files: 2,
                archive_dir: None,
                archive_max_bytes: DEFAULT_ARCHIVE_MAX_BYTES,
                signing_key_file: Some("/keys/audit.pk8".into()),
                checkpoint_interval: Duration::from_secs(5),
            }
        );
        assert_eq!(defaults.archive_dir(), Some(PathBuf::from("logs/policy-archive")), "beside the log");
        assert_eq!(AuditConfig { path: "-".into(), ..defaults.clone() }.archive_dir(), None);
        for off in ["off", ""] {
            let table: AuditConfig = toml::from_str(&format!("archive_dir = {off:?}")).expect("a table");
            assert_eq!(table.archive_dir(), None, "{off:?} turns the archive off");
        }
        let set: AuditConfig =
            toml::from_str("archive_dir = \"/a\"\narchive_max_bytes = \"1MiB\"").expect("archive keys");
        assert_eq!((set.archive_dir(), set.archive_max_bytes), (Some(PathBuf::from("/a")), 1 << 20));
        let size = toml::from_str::<AuditConfig>("max_file_size = \"10 parsecs\"").expect_err("not a size");
        assert!(size.to_string().contains("\"100MiB\""), "{size}");

        let unknown = toml::from_str::<AuditConfig>("pth = \"x\"").expect_err("unknown keys are rejected");
        assert!(unknown.to_string().contains("pth"), "{unknown}");
        assert!(toml::from_str::<AuditConfig>("on_failure = \"drop\"").is_err());
    }
}
