//! Test certificate authorities made with rcgen at test time, and the TLS server config of a
//! local origin whose certificate one of them signed (SAN `localhost` and `127.0.0.1`), or
//! that certificate and its key as PEM files for a server configured by files.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::TestResult;

/// A CA for test origins, with its certificate written as PEM in a temporary directory (so
/// the proxy can load it through `[upstream] extra_ca_files`).
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    der: CertificateDer<'static>,
    /// The CA certificate, PEM.
    pub pem: String,
    /// Where `pem` is stored.
    pub pem_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestCa {
    /// A fresh CA named `name`.
    pub fn new(name: &str) -> TestResult<Self> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        let cert = params.self_signed(&key)?;
        let dir = tempfile::tempdir()?;
        let pem_path = dir.path().join("test-origin-ca.pem");
        std::fs::write(&pem_path, cert.pem())?;
        Ok(TestCa { pem: cert.pem(), der: cert.der().clone(), issuer: Issuer::new(params, key), pem_path, _dir: dir })
    }

    /// A fresh leaf naming `names` (host names or IPs) signed by this CA, and its key.
    fn leaf_for(&self, names: &[&str]) -> TestResult<(rcgen::Certificate, KeyPair)> {
        let key = KeyPair::generate()?;
        let params = CertificateParams::new(names.iter().map(|name| (*name).to_owned()).collect::<Vec<_>>())?;
        Ok((params.signed_by(&key, &self.issuer)?, key))
    }

    /// A leaf for `localhost` / `127.0.0.1` written into `dir` as `server.pem` (the leaf,
    /// then this CA) and `server.key`, for a server that reads files (`redis-server --tls-*`).
    pub fn server_pem_files(&self, dir: &Path) -> TestResult<(PathBuf, PathBuf)> {
        let (leaf, key) = self.leaf_for(&["localhost", "127.0.0.1"])?;
        let (cert_path, key_path) = (dir.join("server.pem"), dir.join("server.key"));
        std::fs::write(&cert_path, format!("{}{}", leaf.pem(), self.pem))?;
        std::fs::write(&key_path, key.serialize_pem())?;
        Ok((cert_path, key_path))
    }

    /// A server config for an origin at `localhost` / `127.0.0.1`, ALPN h2 and http/1.1.
    pub fn origin_server_config(&self) -> TestResult<Arc<ServerConfig>> {
        self.server_config_for(&["localhost", "127.0.0.1"])
    }

    /// A server config for an origin whose certificate names `names` (host names or IPs).
    pub fn server_config_for(&self, names: &[&str]) -> TestResult<Arc<ServerConfig>> {
        let (leaf, key) = self.leaf_for(names)?;
        let chain = vec![leaf.der().clone(), self.der.clone()];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        // ring, as agentgate's `tls::crypto_provider`; this module never names agentgate.
        let mut config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, key)?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}
