//! Per-host leaf certificates for MITM, minted on first use and kept in a bounded cache.
//!
//! Owns: turning a host (SNI name, or the CONNECT host for clients that send no SNI) into a
//! rustls `ServerConfig` that presents `[leaf, ca]`, minting off the async workers
//! (`spawn_blocking`), and a `moka` cache so each host is minted once however many
//! connections ask for it at the same time.
//!
//! Never does: accept connections or pick the host itself (the proxy passes it in).
//!
//! Every leaf certifies one ECDSA P-256 key made when the cache is (so once per process, held
//! in memory only, never written, never the CA's), with a SAN for the host (an IP address SAN
//! for IP literals), EKU serverAuth, an AKI, KU digitalSignature, a random 16-byte serial, and
//! a validity of [`LEAF_VALIDITY`] from one hour in the past. Cache entries live at most
//! [`CACHE_TTL`], well inside that validity, so a long-running proxy never serves an expired
//! leaf.
//!
//! One key per process rather than per host (mitmproxy and hudsucker go further and give
//! every leaf the CA's own key): a fresh key per host cost two P-256 base-point
//! multiplications (making it, then loading it into rustls), 8 % of the instructions of a
//! first request to an unseen HTTPS origin (bench/RESULTS.md, "First requests"). It bought no
//! isolation: every host's key sat in this same process's memory beside the CA key that
//! signs them, so whoever could read one could read them all and mint their own.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use moka::future::Cache;
use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256, SanType,
};
use rustls::ServerConfig;
use rustls::pki_types::{DnsName, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::ResolvesServerCertUsingSni;
use rustls::sign::{CertifiedKey, SigningKey, SingleCertAndKey};

use super::ca::{BACKDATE, random_serial};
use super::{CertificateAuthority, TlsError, crypto_provider, interception_provider};

/// How long a minted leaf is valid: 30 days, far inside the 397-day cap browsers enforce
/// (and Apple's 825 days), so no client rejects it for its lifetime.
pub const LEAF_VALIDITY: Duration = Duration::from_secs(30 * 24 * 60 * 60);

/// How long a minted leaf stays in the cache before it is minted afresh.
pub const CACHE_TTL: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// Longest subject common name X.509 allows (RFC 5280 `ub-common-name`); longer DNS names go in the SAN only.
const MAX_COMMON_NAME: usize = 64;

/// Mints and caches one rustls `ServerConfig` per host. Cheap to clone: clones share the cache.
#[derive(Clone)]
pub struct LeafCertCache {
    ca: Arc<CertificateAuthority>,
    /// The key every leaf certifies.
    key: Arc<LeafKey>,
    cache: Cache<String, Arc<ServerConfig>>,
    /// Cloned per host with its own cert resolver, so the session cache and ticketer are shared.
    template: Arc<ServerConfig>,
    minted: Arc<AtomicU64>,
}

impl std::fmt::Debug for LeafCertCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeafCertCache")
            .field("ca", &self.ca)
            .field("entries", &self.cache.entry_count())
            .field("minted", &self.minted_count())
            .finish()
    }
}

/// The leafs' key: rcgen's copy (its public half goes in each certificate) and rustls's
/// (signs each handshake), loaded once.
struct LeafKey {
    pair: KeyPair,
    signer: Arc<dyn SigningKey>,
}

impl LeafKey {
    fn generate() -> Result<Self, TlsError> {
        let failed = |reason: String| TlsError::LeafKey { reason };
        let pair = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(|e| failed(e.to_string()))?;
        let der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pair.serialize_der()));
        let signer = crypto_provider().key_provider.load_private_key(der).map_err(|e| failed(e.to_string()))?;
        Ok(LeafKey { pair, signer })
    }
}

impl LeafCertCache {
    /// A cache minting leafs signed by `ca`, holding at most `capacity` hosts (`[mitm] cert_cache_size`).
    ///
    /// When full, the least recently useful hosts are evicted and minted again on their next use.
    ///
    /// # Errors
    /// [`TlsError::LeafKey`] when the leafs' key cannot be made (the system's random source failed).
    pub fn new(ca: Arc<CertificateAuthority>, capacity: u64) -> Result<Self, TlsError> {
        let mut template = ServerConfig::builder_with_provider(interception_provider())
            .with_safe_default_protocol_versions()
            .expect("the ring provider supports TLS 1.2 and 1.3, the safe default versions")
            .with_no_client_auth()
            // Placeholder: every per-host clone replaces it with that host's certificate.
            .with_cert_resolver(Arc::new(ResolvesServerCertUsingSni::new()));
        template.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // Ours, not the client's: AES-128-GCM first (see `interception_provider`).
        template.ignore_client_order = true;
        Ok(Self {
            ca,
            key: Arc::new(LeafKey::generate()?),
            cache: Cache::builder().max_capacity(capacity).time_to_live(CACHE_TTL).build(),
            template: Arc::new(template),
            minted: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A rustls server config presenting a leaf for `host` (DNS name or IP literal, IPv6 with or without brackets), ALPN ["h2","http/1.1"].
    ///
    /// DNS names are matched case-insensitively and a trailing dot is ignored, so `Example.COM.`
    /// and `example.com` share one leaf. The first request for a host mints (off the async
    /// workers); requests arriving while that runs wait for the same result.
    ///
    /// # Errors
    /// [`TlsError::InvalidHost`] when `host` is neither a DNS name nor an IP address;
    /// [`TlsError::Mint`] when minting itself fails.
    pub async fn server_config(&self, host: &str) -> Result<Arc<ServerConfig>, TlsError> {
        let (name, san) = subject(host)?;
        let (ca, key, template) = (Arc::clone(&self.ca), Arc::clone(&self.key), Arc::clone(&self.template));
        let minted = Arc::clone(&self.minted);
        let task_name = name.clone();
        let mint_job = async move {
            let certified = tokio::task::spawn_blocking(move || mint(&ca, &key, &task_name, san))
                .await
                .map_err(|e| format!("the minting task failed ({e}); the runtime may be shutting down"))??;
            minted.fetch_add(1, Ordering::Relaxed);
            let mut config = (*template).clone();
            config.cert_resolver = Arc::new(SingleCertAndKey::from(certified));
            Ok::<_, String>(Arc::new(config))
        };
        // Every waiter on one mint gets the same Arc'd reason; TlsError itself is not Clone.
        self.cache
            .try_get_with(name.clone(), mint_job)
            .await
            .map_err(|reason| TlsError::Mint { host: name, reason: (*reason).clone() })
    }

    /// The PEM of the CA that signs the leafs: what agents must trust (`/ca.pem` on the
    /// admin API and at `http://agentgate.local/ca.pem` through the proxy).
    pub fn ca_cert_pem(&self) -> &str {
        self.ca.cert_pem()
    }

    /// How many leafs this cache (and its clones) minted so far; for metrics.
    pub fn minted_count(&self) -> u64 {
        self.minted.load(Ordering::Relaxed)
    }
}

/// Normalises `host` into the cache key and the SAN to put in its leaf.
fn subject(host: &str) -> Result<(String, SanType), TlsError> {
    let invalid = || TlsError::InvalidHost { host: host.to_owned() };
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        // Brackets only ever wrap an IPv6 literal (a CONNECT authority without SNI).
        let ip: std::net::Ipv6Addr = inner.parse().map_err(|_| invalid())?;
        return Ok((ip.to_string(), SanType::IpAddress(IpAddr::V6(ip))));
    }
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok((ip.to_string(), SanType::IpAddress(ip)));
    }
    let name = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
    // DnsName applies the same syntax rules a rustls client will apply to the name it verifies.
    DnsName::try_from(name.as_str()).map_err(|_| invalid())?;
    let ia5 = name.as_str().try_into().map_err(|_| invalid())?;
    Ok((name, SanType::DnsName(ia5)))
}

/// Mints a leaf for `host` (already normalised, SAN `san`) certifying `key`; returns `[leaf, ca]` and the key.
///
/// The error is the reason only: the caller wraps it into [`TlsError::Mint`] with the host.
fn mint(ca: &CertificateAuthority, key: &LeafKey, host: &str, san: SanType) -> Result<CertifiedKey, String> {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    if host.len() <= MAX_COMMON_NAME {
        name.push(DnType::CommonName, host);
    }
    name.push(DnType::OrganizationName, "agentgate");
    params.distinguished_name = name;
    params.subject_alt_names = vec![san];
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let now = SystemTime::now();
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + LEAF_VALIDITY).into();
    params.serial_number = Some(random_serial());
    let leaf = params.signed_by(&key.pair, ca.issuer()).map_err(|e| format!("signing: {e}"))?;
    let chain = vec![leaf.der().clone(), ca.cert_der().clone()];
    Ok(CertifiedKey::new(chain, Arc::clone(&key.signer)))
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use rustls::client::WebPkiServerVerifier;
    use rustls::client::danger::ServerCertVerifier;
    use rustls::pki_types::{ServerName, UnixTime};
    use rustls::{ClientConfig, RootCertStore};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    fn test_ca() -> (tempfile::TempDir, Arc<CertificateAuthority>) {
        let dir = tempfile::tempdir().unwrap();
        let ca = CertificateAuthority::create(dir.path(), false).unwrap();
        (dir, Arc::new(ca))
    }

    fn roots(ca: &CertificateAuthority) -> Arc<RootCertStore> {
        let mut roots = RootCertStore::empty();
        roots.add(ca.cert_der().clone()).unwrap();
        Arc::new(roots)
    }

    fn mint_for(ca: &CertificateAuthority, host: &str) -> CertifiedKey {
        let (name, san) = subject(host).unwrap();
        mint(ca, &LeafKey::generate().unwrap(), &name, san).unwrap()
    }

    /// Verifies `leaf` for `server_name` at `now + offset` (offset may be negative, in seconds).
    fn verify_at(
        ca: &CertificateAuthority,
        leaf: &CertifiedKey,
        server_name: &str,
        offset: i64,
    ) -> Result<(), rustls::Error> {
        let verifier = WebPkiServerVerifier::builder_with_provider(roots(ca), crypto_provider()).build().unwrap();
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs().checked_add_signed(offset).unwrap();
        let name = ServerName::try_from(server_name).unwrap();
        verifier
            .verify_server_cert(
                &leaf.cert[0],
                &leaf.cert[1..],
                &name,
                &[],
                UnixTime::since_unix_epoch(Duration::from_secs(now)),
            )
            .map(|_| ())
    }

    #[test]
    fn leafs_verify_for_dns_ipv4_and_ipv6() {
        let (_dir, ca) = test_ca();
        for (host, server_name) in [
            ("example.test", "example.test"),
            ("Sub.Example.TEST.", "sub.example.test"),
            ("127.0.0.9", "127.0.0.9"),
            ("[::1]", "::1"),
            ("2001:db8::7", "2001:db8::7"),
        ] {
            let leaf = mint_for(&ca, host);
            assert_eq!(leaf.cert.len(), 2, "{host}: chain is [leaf, ca]");
            assert_eq!(&leaf.cert[1], ca.cert_der(), "{host}");
            verify_at(&ca, &leaf, server_name, 0).unwrap_or_else(|e| panic!("{host}: {e}"));
        }
    }

    #[test]
    fn leaf_does_not_verify_for_another_name() {
        let (_dir, ca) = test_ca();
        let leaf = mint_for(&ca, "example.test");
        assert!(verify_at(&ca, &leaf, "other.test", 0).is_err());
        let leaf = mint_for(&ca, "127.0.0.9");
        assert!(verify_at(&ca, &leaf, "127.0.0.1", 0).is_err());
    }

    #[test]
    fn leaf_validity_is_backdated_an_hour_and_lasts_thirty_days() {
        let (_dir, ca) = test_ca();
        let leaf = mint_for(&ca, "example.test");
        let day = 24 * 60 * 60;
        verify_at(&ca, &leaf, "example.test", -30 * 60).unwrap();
        assert!(verify_at(&ca, &leaf, "example.test", -2 * 60 * 60).is_err(), "not valid before now - 1 h");
        verify_at(&ca, &leaf, "example.test", 29 * day).unwrap();
        assert!(verify_at(&ca, &leaf, "example.test", 31 * day).is_err(), "expired after 30 days");
    }

    #[test]
    fn leafs_certify_the_process_key_which_is_never_the_cas_and_new_each_process() {
        let (_dir, ca) = test_ca();
        let key = LeafKey::generate().unwrap();
        let mint_with = |key: &LeafKey, host: &str| {
            let (name, san) = subject(host).unwrap();
            mint(&ca, key, &name, san).unwrap()
        };
        let (first, second) = (mint_with(&key, "example.test"), mint_with(&key, "other.test"));
        let ca_key = rcgen::PublicKeyData::subject_public_key_info(ca.issuer().key());
        let first_key = first.key.public_key().unwrap();
        assert_ne!(first_key.as_ref(), ca_key.as_slice(), "never the CA's key");
        assert_eq!(first_key, second.key.public_key().unwrap(), "one key for every host of a process");
        assert_ne!(first.cert[0], second.cert[0]);
        // Another process (another cache) makes its own.
        let other = mint_with(&LeafKey::generate().unwrap(), "example.test");
        assert_ne!(first_key, other.key.public_key().unwrap());
        verify_at(&ca, &second, "other.test", 0).unwrap();
    }

    #[test]
    fn invalid_hosts_are_refused() {
        for host in ["", "exa mple.test", "[example.test]", "[::1", "bad_host_\u{e9}.test", "a..b"] {
            let err = subject(host).unwrap_err();
            assert!(matches!(err, TlsError::InvalidHost { .. }), "{host:?}: {err:?}");
        }
    }

    #[tokio::test]
    async fn handshake_over_duplex_negotiates_h2_and_our_aes_128_gcm() {
        let (_dir, ca) = test_ca();
        let cache = LeafCertCache::new(Arc::clone(&ca), 16).unwrap();
        let server_config = cache.server_config("[::1]").await.unwrap();

        let mut client_config = ClientConfig::builder_with_provider(crypto_provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots(&ca))
            .with_no_client_auth();
        client_config.alpn_protocols = vec![b"h2".to_vec()];
        let (client_io, server_io) = tokio::io::duplex(64 * 1024);
        let server = tokio::spawn(async move {
            let mut tls = tokio_rustls::TlsAcceptor::from(server_config).accept(server_io).await.unwrap();
            let mut buf = [0u8; 4];
            tls.read_exact(&mut buf).await.unwrap();
            tls.write_all(&buf).await.unwrap();
            tls.shutdown().await.unwrap();
        });
        let name = ServerName::try_from("::1").unwrap();
        let mut tls = tokio_rustls::TlsConnector::from(Arc::new(client_config)).connect(name, client_io).await.unwrap();
        let (_, session) = tls.get_ref();
        assert_eq!(session.alpn_protocol(), Some(&b"h2"[..]));
        // The client lists AES-256-GCM first (ring's order, as OpenSSL's); the leaf chooses.
        assert_eq!(crypto_provider().cipher_suites[0].suite(), rustls::CipherSuite::TLS13_AES_256_GCM_SHA384);
        assert_eq!(
            session.negotiated_cipher_suite().map(|suite| suite.suite()),
            Some(rustls::CipherSuite::TLS13_AES_128_GCM_SHA256)
        );
        let chain = session.peer_certificates().unwrap();
        assert_eq!(chain.len(), 2);
        assert_eq!(&chain[1], ca.cert_der());
        tls.write_all(b"ping").await.unwrap();
        let mut echo = [0u8; 4];
        tls.read_exact(&mut echo).await.unwrap();
        assert_eq!(&echo, b"ping");
        server.await.unwrap();
    }

    #[tokio::test]
    async fn cache_returns_the_same_config_for_the_same_host() {
        let (_dir, ca) = test_ca();
        let cache = LeafCertCache::new(ca, 16).unwrap();
        let first = cache.server_config("example.test").await.unwrap();
        let again = cache.server_config("EXAMPLE.test.").await.unwrap();
        assert!(Arc::ptr_eq(&first, &again));
        let other = cache.server_config("other.test").await.unwrap();
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(first.alpn_protocols, vec![b"h2".to_vec(), b"http/1.1".to_vec()]);
        assert_eq!(cache.minted_count(), 2);
        let err = cache.server_config("not a host").await.unwrap_err();
        assert!(err.to_string().contains("not a host"), "{err}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_first_requests_mint_once() {
        let (_dir, ca) = test_ca();
        let cache = LeafCertCache::new(ca, 16).unwrap();
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move { cache.server_config("example.test").await.unwrap() })
            })
            .collect();
        let mut configs = Vec::new();
        for task in tasks {
            configs.push(task.await.unwrap());
        }
        assert!(configs.iter().all(|c| Arc::ptr_eq(c, &configs[0])));
        assert_eq!(cache.minted_count(), 1);
    }
}
