//! TLS: the proxy's certificate authority, the per-host leaf certificates it mints for MITM,
//! and the trust store for connections to origins.
//!
//! Owns: loading or creating the CA (`ca`), minting and caching one leaf per host (`leaf`),
//! and the upstream client config (`upstream`). Every rustls config built here uses ring
//! through [`crypto_provider`], never the process default (CRATES.md pitfall 10).
//!
//! Never does: accept connections, look at requests, or decide anything about policy.

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};

use rustls::CipherSuite;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

pub mod ca;
pub mod leaf;
pub mod upstream;

pub use ca::CertificateAuthority;
pub use leaf::LeafCertCache;

static PROVIDER: LazyLock<Arc<CryptoProvider>> = LazyLock::new(|| Arc::new(rustls::crypto::ring::default_provider()));

/// The ring crypto provider that every rustls config in agentgate is built with.
///
/// Pass it to `builder_with_provider` instead of relying on the process default, so a second
/// provider compiled in by some dependency can never make config building panic.
pub fn crypto_provider() -> Arc<CryptoProvider> {
    Arc::clone(&PROVIDER)
}

static INTERCEPTION_PROVIDER: LazyLock<Arc<CryptoProvider>> = LazyLock::new(|| {
    let mut provider = rustls::crypto::ring::default_provider();
    // Stable: the AES-128-GCM suites move ahead, every other suite keeps ring's order.
    provider.cipher_suites.sort_by_key(|suite| !AES_128_GCM.contains(&suite.suite()));
    Arc::new(provider)
});

/// The suites [`interception_provider`] puts first, for TLS 1.3 and TLS 1.2.
const AES_128_GCM: [CipherSuite; 3] = [
    CipherSuite::TLS13_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    CipherSuite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
];

/// ring with AES-128-GCM first: the provider of the leafs agentgate presents to agents, whose
/// config chooses in this order rather than the client's (`ignore_client_order`). Most agents'
/// TLS stacks (OpenSSL, rustls) list AES-256-GCM-SHA384 first, whose SHA-384 key schedule
/// has no CPU extension on x86 (SHA-256 has one) and whose cipher runs 14 AES rounds instead
/// of 10: about 7 % of a new intercepted connection's CPU went to SHA-384 alone
/// (bench/RESULTS.md, Round 5). AES-128-GCM is TLS 1.3's mandatory suite (RFC 8446 §9.1).
pub fn interception_provider() -> Arc<CryptoProvider> {
    Arc::clone(&INTERCEPTION_PROVIDER)
}

/// Installs ring as the process-wide default rustls provider.
///
/// Call it once at startup (and in tests that use reqwest with `rustls-no-provider`, which
/// panics without a default). Idempotent: a provider that is already installed is kept.
pub fn install_default_provider() {
    // Err only means a default is already installed, which is exactly what we want.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Everything that can go wrong loading the CA, minting leafs or building TLS configs.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Creating the CA directory failed.
    #[error("cannot create the CA directory {path}: {source}; create it yourself or set [ca] dir to a writable place")]
    CreateDir {
        /// The directory that could not be created.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// Reading a certificate or key file failed.
    #[error("cannot read {path}: {source}; check that the file exists and is readable by the agentgate user")]
    Read {
        /// The file that could not be read.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// Writing a new CA certificate or key failed.
    #[error("cannot write {path}: {source}; check that [ca] dir is writable by the agentgate user")]
    Write {
        /// The file that could not be written.
        path: PathBuf,
        /// The underlying I/O error.
        source: std::io::Error,
    },
    /// `ca init` without `--force` found an existing CA.
    #[error(
        "a CA already exists in {dir}; keep it, or pass --force to replace it (every client must then trust the new certificate)"
    )]
    CaExists {
        /// The CA directory.
        dir: PathBuf,
    },
    /// `load` found neither CA file.
    #[error("no CA in {dir}; run `agentgate ca init` (or start the proxy once) to create one")]
    NoCa {
        /// The CA directory.
        dir: PathBuf,
    },
    /// The CA directory exists but the running user cannot look inside it, so whether a CA is
    /// there cannot be told: nothing is created.
    #[error(
        "cannot read the CA directory {dir} as user {user} ({source}); it is not absent, so no new CA is made there: give {user} read access to it (e.g. `chown -R {user} {dir}`, or `chmod 0750` with {user} in its group), run agentgate as its owner, or point [ca] dir at a directory {user} can read"
    )]
    CaUnreadable {
        /// The CA directory.
        dir: PathBuf,
        /// The user agentgate runs as.
        user: String,
        /// The error looking inside it.
        source: std::io::Error,
    },
    /// Exactly one of the two CA files exists, so the CA can neither be loaded nor safely recreated.
    #[error(
        "{present} exists but {missing} does not; restore the missing file, or remove {present} and run `agentgate ca init` to make a new CA"
    )]
    CaIncomplete {
        /// The CA file that is there.
        present: PathBuf,
        /// The CA file that is missing.
        missing: PathBuf,
    },
    /// A PEM file could not be parsed.
    #[error("{path}: not valid PEM ({source}); the file must hold `-----BEGIN ...-----` blocks")]
    Pem {
        /// The file with the bad PEM.
        path: PathBuf,
        /// The PEM parser's error.
        source: rustls::pki_types::pem::Error,
    },
    /// A PEM file holds no certificate (a CA file, or an `[upstream] extra_ca_files` entry).
    #[error("{path}: no `BEGIN CERTIFICATE` block found; the file must hold at least one PEM certificate")]
    NoCertificate {
        /// The file without a certificate.
        path: PathBuf,
    },
    /// The CA key file holds no private key.
    #[error("{path}: no `BEGIN PRIVATE KEY` block found; the file must hold the CA's PKCS#8 private key")]
    NoKey {
        /// The key file.
        path: PathBuf,
    },
    /// The CA key is SEC1 or PKCS#1, which ring cannot load.
    #[error(
        "{path}: the CA key is {format}, but only PKCS#8 (`BEGIN PRIVATE KEY`) is supported; convert with `openssl pkcs8 -topk8 -nocrypt -in {path} -out {path}.pkcs8` and replace the file with the result"
    )]
    KeyNotPkcs8 {
        /// The key file.
        path: PathBuf,
        /// What the file holds, e.g. "SEC1 (`EC PRIVATE KEY`)".
        format: &'static str,
    },
    /// The CA key parsed as PEM but the crypto library rejected it.
    #[error("{path}: the CA key cannot be used ({source}); use an ECDSA P-256, P-384, Ed25519 or RSA key in PKCS#8")]
    KeyRejected {
        /// The key file.
        path: PathBuf,
        /// rcgen's error.
        source: rcgen::Error,
    },
    /// The CA certificate cannot be used as an issuer, or its key does not belong to it.
    #[error(
        "{cert} with {key}: {reason}; make sure both files come from the same CA, or run `agentgate ca init --force` to make a new one"
    )]
    CaUnusable {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// Why the pair was rejected.
        reason: String,
    },
    /// Generating the CA key or self-signing its certificate failed.
    #[error("cannot generate the CA: {source}; this is a bug in agentgate or its crypto library, please report it")]
    Generate {
        /// rcgen's error.
        source: rcgen::Error,
    },
    /// The key the leaf certificates certify could not be made.
    #[error(
        "cannot make the key for intercepted hosts' certificates: {reason}; this is a bug in agentgate or its crypto library, please report it"
    )]
    LeafKey {
        /// What failed (key generation, or loading the key into rustls).
        reason: String,
    },
    /// The host to mint a leaf for is neither a DNS name nor an IP address.
    #[error("cannot mint a certificate for {host:?}: not a valid DNS name or IP address")]
    InvalidHost {
        /// The host as given.
        host: String,
    },
    /// Minting a leaf for a valid host failed.
    #[error("cannot mint a certificate for {host}: {reason}; if it persists, report it as a bug in agentgate")]
    Mint {
        /// The host.
        host: String,
        /// What failed.
        reason: String,
    },
    /// A certificate in an `[upstream] extra_ca_files` entry was rejected as a trust anchor.
    #[error(
        "{path}: certificate #{index} cannot be used as a trusted CA ({source}); remove it or replace it with a valid CA certificate"
    )]
    BadTrustAnchor {
        /// The file.
        path: PathBuf,
        /// 1-based position of the certificate in the file.
        index: usize,
        /// rustls' error.
        source: rustls::Error,
    },
    /// rustls refused to build a config with the ring provider.
    #[error("cannot build a TLS config: {source}; this is a bug in agentgate, please report it")]
    Config {
        /// rustls' error.
        source: rustls::Error,
    },
}

/// Reads a whole file, naming it in the error.
fn read_file(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read { path: path.to_owned(), source })
}

/// Every `CERTIFICATE` block in the PEM file at `path`, in order; other blocks are skipped.
///
/// # Errors
/// The file cannot be read, is not valid PEM, or holds no certificate.
fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    parse_certs(path, &read_file(path)?)
}

/// Every `CERTIFICATE` block in `pem`, which was read from `path` (named in errors).
fn parse_certs(path: &Path, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| TlsError::Pem { path: path.to_owned(), source })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { path: path.to_owned() });
    }
    Ok(certs)
}
