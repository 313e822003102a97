//! An agent's Ed25519 key on disk: read from a PKCS#8 file (DER, or PEM `PRIVATE KEY`), or
//! created once. Creating is atomic and never overwrites: the key is written owner-only
//! (0600) to a temporary file of its own (create-new), then linked to its name, which fails
//! when another process (`agentgate keys` beside `run`, a second start) made it first; that
//! process's key is then loaded, so every process signs with the one key on disk.

use std::fs::{self, OpenOptions};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};

use base64::Engine as _;
use ring::rand::SystemRandom;
use ring::signature::Ed25519KeyPair;

use super::keys_dir;

/// Why a key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// The key file exists but cannot be read.
    #[error("cannot read the signing key {}: {source}; check signing.key_file and its permissions", path.display())]
    Read {
        /// The key file.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// The file holds no Ed25519 PKCS#8 key.
    #[error(
        "{} is not an Ed25519 PKCS#8 private key; create one with `openssl genpkey -algorithm ed25519 -outform DER -out {}`",
        path.display(), path.display()
    )]
    Parse {
        /// The key file.
        path: PathBuf,
    },
    /// The key could not be created.
    #[error("cannot create the signing key {}: {source}; make [ca] dir writable or set signing.key_file", path.display())]
    Create {
        /// Where it was to be created.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// `signature_agent` is no https URL a verifier can fetch a key directory from.
    #[error(
        "signing.signature_agent = {value:?}: {why}; write the https URL of the key directory, e.g. \"{}\"",
        super::EXAMPLE_DIRECTORY
    )]
    Origin {
        /// The value as written.
        value: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// `agentgate keys` found no signing agent (or none with the id asked for).
    #[error("{}", no_agent(id.as_deref()))]
    NoAgent {
        /// The id asked for, if one was.
        id: Option<String>,
    },
}

fn no_agent(id: Option<&str>) -> String {
    match id {
        Some(id) => format!("no agent {id:?} with a signing table; name an [[agents]] id whose entry has signing = {{ signature_agent = \"https://…\" }}"),
        None => "no agent has a signing table; add signing = { signature_agent = \"https://…\" } to [agent] or an [[agents]] entry".to_owned(),
    }
}

/// Where the key of agent `id` is created when it has no `key_file`:
/// `<ca dir>/agent-keys/<id>.pk8` (`default.pk8` for `[agent]` without an id).
pub fn generated_key_path(ca_dir: &Path, id: Option<&str>) -> PathBuf {
    keys_dir(ca_dir).join(format!("{}.pk8", id.unwrap_or("default")))
}

/// The key in `path`, created there first when there is none.
///
/// # Errors
/// [`KeyError`] naming the file: unreadable, not an Ed25519 PKCS#8 key, or not creatable.
pub fn load_or_create(path: &Path) -> Result<Ed25519KeyPair, KeyError> {
    match fs::read(path) {
        Ok(bytes) => parse(path, &bytes),
        Err(err) if err.kind() == io::ErrorKind::NotFound => create(path),
        Err(source) => Err(KeyError::Read { path: path.to_owned(), source }),
    }
}

/// The key in `path`, which must exist.
///
/// # Errors
/// As [`load_or_create`], without creating.
pub(super) fn load(path: &Path) -> Result<Ed25519KeyPair, KeyError> {
    let bytes = fs::read(path).map_err(|source| KeyError::Read { path: path.to_owned(), source })?;
    parse(path, &bytes)
}

fn parse(path: &Path, bytes: &[u8]) -> Result<Ed25519KeyPair, KeyError> {
    let der = match std::str::from_utf8(bytes) {
        Ok(text) if text.contains("-----BEGIN PRIVATE KEY-----") => {
            let body: String = text
                .lines()
                .skip_while(|line| !line.starts_with("-----BEGIN PRIVATE KEY-----"))
                .skip(1)
                .take_while(|line| !line.starts_with("-----END"))
                .collect();
            base64::engine::general_purpose::STANDARD
                .decode(body.trim())
                .map_err(|_| KeyError::Parse { path: path.to_owned() })?
        }
        _ => bytes.to_vec(),
    };
    // PKCS#8 v1 too (what openssl writes): the public key is derived from the private one.
    Ed25519KeyPair::from_pkcs8_maybe_unchecked(&der).map_err(|_| KeyError::Parse { path: path.to_owned() })
}

fn create(path: &Path) -> Result<Ed25519KeyPair, KeyError> {
    let failed = |source| KeyError::Create { path: path.to_owned(), source };
    let pkcs8 = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new())
        .map_err(|_| failed(io::Error::other("no system random source")))?;
    if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        create_private_dir(dir).map_err(failed)?;
    }
    let temporary = path.with_extension(format!("pk8.{}.tmp", std::process::id()));
    let written = write_private(&temporary, pkcs8.as_ref()).and_then(|()| fs::hard_link(&temporary, path));
    let _ = fs::remove_file(&temporary);
    match written {
        Ok(()) => parse(path, pkcs8.as_ref()),
        // Another process created it first: its key is the one.
        Err(err) if err.kind() == io::ErrorKind::AlreadyExists => load(path),
        Err(source) => Err(failed(source)),
    }
}

fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}
