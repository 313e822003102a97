//! Trust for connections from the proxy to origins.
//!
//! Owns: the root store (webpki roots, the system's roots, and the operator's
//! `[upstream] extra_ca_files`) and the rustls client config built from it; the same roots
//! as PEM for the Redis client (`rediss://`), which takes trust only that way.
//!
//! Never does: connect, set ALPN (the upstream pool does, for the protocols it speaks), or relax
//! verification: a certificate the store cannot verify is a failed connection, never a downgrade
//! (DESIGN.md §9).

use std::path::{Path, PathBuf};

use base64::Engine as _;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};

use super::{TlsError, crypto_provider, read_certs};

/// Client TLS config for connections to origins: webpki roots + system roots (rustls-native-certs; failures to load system roots are logged, not fatal) + every PEM in `extra_ca_files` (an unreadable or empty file is an error naming it). No ALPN set here (the upstream pool sets it).
///
/// System roots matter for corporate networks whose TLS inspection CA is installed in the OS;
/// `extra_ca_files` is for private CAs that are not (e.g. an internal origin's).
///
/// # Errors
/// An extra CA file cannot be read, is not PEM, holds no certificate, or holds a certificate
/// rustls cannot use as a trust anchor.
pub fn client_config(extra_ca_files: &[PathBuf]) -> Result<ClientConfig, TlsError> {
    let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    let (added, ignored) = roots.add_parsable_certificates(system_roots());
    if ignored > 0 {
        tracing::warn!(added, ignored, "ignored system root certificates that rustls cannot parse");
    }
    tracing::debug!(added, "loaded system root certificates");
    for path in extra_ca_files {
        add_extra_ca_file(&mut roots, path)?;
    }
    let config = ClientConfig::builder_with_provider(crypto_provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Config { source })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// The system's roots and every certificate in `extra_ca_files`, as one PEM bundle: the
/// trust of [`client_config`] for a client that takes PEM only (the Redis client, for
/// `rediss://`). webpki's built-in roots are left out: they are trust anchors, not
/// certificates, so they cannot be written as PEM (a distribution's CA bundle holds the same
/// Mozilla list). System roots rustls cannot use are left out too, as [`client_config`] does.
///
/// # Errors
/// As [`client_config`]: an extra CA file is unreadable, not PEM, empty, or not a trust anchor.
pub fn trusted_roots_pem(extra_ca_files: &[PathBuf]) -> Result<String, TlsError> {
    let mut roots = RootCertStore::empty();
    let mut pem = String::new();
    for cert in system_roots() {
        if roots.add(cert.clone()).is_ok() {
            push_pem(&mut pem, &cert);
        }
    }
    for path in extra_ca_files {
        for cert in add_extra_ca_file(&mut roots, path)? {
            push_pem(&mut pem, &cert);
        }
    }
    Ok(pem)
}

/// The operating system's trusted roots; problems are logged, since webpki roots still work.
fn system_roots() -> Vec<CertificateDer<'static>> {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "could not load some system root certificates; continuing with the rest and the built-in roots");
    }
    found.certs
}

/// Whether the `extra_ca_files` entry `path` can be trusted as [`client_config`] would
/// (`agentgate config check` asks for each entry, to name its line).
///
/// # Errors
/// As [`client_config`], for this file.
pub fn check_extra_ca_file(path: &Path) -> Result<(), TlsError> {
    add_extra_ca_file(&mut RootCertStore::empty(), path).map(drop)
}

/// Adds every certificate in the PEM file at `path` as a trust anchor, and returns them.
fn add_extra_ca_file(roots: &mut RootCertStore, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = read_certs(path)?;
    for (position, cert) in certs.iter().enumerate() {
        roots.add(cert.clone()).map_err(|source| TlsError::BadTrustAnchor {
            path: path.to_owned(),
            index: position + 1,
            source,
        })?;
    }
    Ok(certs)
}

/// Appends `cert` as a PEM `CERTIFICATE` block (base64 in lines of 64, RFC 7468).
fn push_pem(pem: &mut String, cert: &CertificateDer<'_>) {
    let encoded = base64::engine::general_purpose::STANDARD.encode(cert.as_ref());
    pem.push_str("-----BEGIN CERTIFICATE-----\n");
    for line in encoded.as_bytes().chunks(64) {
        // base64's alphabet is ASCII, so every chunk is UTF-8.
        pem.push_str(std::str::from_utf8(line).unwrap_or_default());
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rustls::pki_types::ServerName;
    use tokio::io::AsyncWriteExt;

    use super::*;
    use crate::tls::{CertificateAuthority, LeafCertCache};

    #[test]
    fn missing_extra_ca_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("corporate-root.pem");
        let err = client_config(std::slice::from_ref(&missing)).unwrap_err();
        assert!(matches!(err, TlsError::Read { .. }), "{err:?}");
        assert!(err.to_string().contains(&missing.display().to_string()), "{err}");
    }

    #[test]
    fn extra_ca_file_without_certificates_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let err = client_config(&[empty]).unwrap_err();
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err:?}");
    }

    #[test]
    fn default_config_sets_no_alpn() {
        assert!(client_config(&[]).unwrap().alpn_protocols.is_empty());
    }

    /// The PEM bundle for the Redis client reads back as the system's roots plus the extra CA.
    #[test]
    fn trusted_roots_pem_ends_with_the_extra_ca_and_reads_back() {
        use rustls::pki_types::pem::PemObject;
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::create(dir.path(), false).unwrap();
        let pem = trusted_roots_pem(&[ca.cert_path().to_owned()]).unwrap();
        let certs: Vec<_> = CertificateDer::pem_slice_iter(pem.as_bytes()).collect::<Result<_, _>>().unwrap();
        let extra = read_certs(ca.cert_path()).unwrap();
        assert_eq!(certs.last(), extra.last(), "the extra CA comes last, byte for byte");
        assert_eq!(certs.len(), trusted_roots_pem(&[]).unwrap().matches("BEGIN CERTIFICATE").count() + 1);
        assert!(pem.lines().all(|line| line.len() <= 64), "RFC 7468 lines");
    }

    /// An origin whose certificate comes from a private CA is trusted once that CA is an extra CA file.
    #[tokio::test]
    async fn extra_ca_file_is_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let ca = Arc::new(CertificateAuthority::create(dir.path(), false).unwrap());
        let origin = LeafCertCache::new(Arc::clone(&ca), 4).unwrap().server_config("origin.test").await.unwrap();
        let handshake = |client: ClientConfig| {
            let origin = Arc::clone(&origin);
            async move {
                let (client_io, server_io) = tokio::io::duplex(64 * 1024);
                let server = tokio::spawn(tokio_rustls::TlsAcceptor::from(origin).accept(server_io));
                let name = ServerName::try_from("origin.test").unwrap();
                let result = tokio_rustls::TlsConnector::from(Arc::new(client)).connect(name, client_io).await;
                if let Ok(mut tls) = result {
                    tls.shutdown().await.unwrap();
                    return server.await.unwrap().map(|_| ());
                }
                result.map(|_| ())
            }
        };
        assert!(handshake(client_config(&[]).unwrap()).await.is_err(), "a private CA is not trusted by default");
        handshake(client_config(&[ca.cert_path().to_owned()]).unwrap()).await.unwrap();
    }
}
