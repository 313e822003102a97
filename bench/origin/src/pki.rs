//! The bench's certificate authority, shared by the origin (`main.rs`) and the floor proxy
//! (`bin/floor.rs`): a CA made at start with rcgen and one key every leaf certificate uses,
//! so minting a leaf stays cheap. Never writes files; the binaries write the CA's PEM.

use std::net::IpAddr;
use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
use rustls::ServerConfig;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The CA and the one key every leaf certificate uses.
pub struct Pki {
    issuer: Issuer<'static, KeyPair>,
    leaf_key: KeyPair,
}

impl Pki {
    /// A fresh CA named `name`, and its certificate in PEM.
    pub fn new(name: &str) -> Result<(Self, String), BoxError> {
        let ca_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(rcgen::DnType::CommonName, name);
        let ca_pem = params.self_signed(&ca_key)?.pem();
        let issuer = Issuer::new(params, ca_key);
        Ok((Pki { issuer, leaf_key: KeyPair::generate()? }, ca_pem))
    }

    /// A TLS server configuration whose leaf certificate names `host` (an IP address or a
    /// DNS name), offering `alpn` (empty: none).
    pub fn server_config(&self, host: &str, alpn: &[&[u8]]) -> Result<Arc<ServerConfig>, BoxError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.subject_alt_names = vec![match host.parse::<IpAddr>() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(host.try_into()?),
        }];
        let cert = params.signed_by(&self.leaf_key, &self.issuer)?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.leaf_key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(vec![CertificateDer::from(cert.der().to_vec())], key)?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(Arc::new(config))
    }
}
