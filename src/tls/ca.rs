//! The proxy's own certificate authority: two PEM files in the `[ca] dir`, created on first use.
//!
//! Owns: generating the CA (ECDSA P-256, 10 years, `CN=agentgate CA`, path length 0), writing
//! `agentgate-ca.key` with mode 0600 from the moment it exists, loading both files back, and
//! handing the issuer to `leaf` for minting.
//!
//! Never does: mint leafs (that is `leaf`), talk to the network, or rotate a CA on its own
//! (`create` with `force` is the only way to replace one, and it is the operator's call).

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256, SerialNumber,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use super::{TlsError, crypto_provider, parse_certs, read_file};

/// How far back `not_before` is set on every certificate we issue, so clients whose clock runs
/// a little behind ours still accept it.
pub(super) const BACKDATE: Duration = Duration::from_secs(60 * 60);

/// How long a new CA is valid: ten years.
const CA_VALIDITY: Duration = Duration::from_secs(10 * 365 * 24 * 60 * 60);

/// The proxy's CA: its certificate (to export to clients) and the issuer that signs leafs.
pub struct CertificateAuthority {
    issuer: Issuer<'static, KeyPair>,
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    cert_path: PathBuf,
}

impl std::fmt::Debug for CertificateAuthority {
    // Hand-written so the private key can never end up in a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateAuthority").field("cert_path", &self.cert_path).finish_non_exhaustive()
    }
}

impl CertificateAuthority {
    /// File name of the CA certificate (PEM) inside the CA directory.
    pub const CERT_FILE: &'static str = "agentgate-ca.pem";
    /// File name of the CA private key (PKCS#8 PEM, mode 0600) inside the CA directory.
    pub const KEY_FILE: &'static str = "agentgate-ca.key";

    /// Loads the CA from `dir`, or creates the directory and a new CA there if neither file exists.
    ///
    /// This is what `agentgate run` uses, so the first start needs no setup step.
    ///
    /// # Errors
    /// Only one of the two files exists ([`TlsError::CaIncomplete`]), or loading or creating fails
    /// (see [`load`](Self::load) and [`create`](Self::create)).
    pub fn load_or_create(dir: &Path) -> Result<Self, TlsError> {
        let (cert, key) = Self::paths(dir);
        // A directory that cannot be read is not an absent CA: a new one there would break
        // every agent's trust in the old one (and could not be written anyway).
        if !present(dir, &cert)? && !present(dir, &key)? {
            match dir.exists() {
                true => tracing::info!(dir = %dir.display(), "no CA files in the CA directory, making a new CA there"),
                false => tracing::info!(dir = %dir.display(), "no CA directory, creating it with a new CA"),
            }
            return Self::create(dir, false);
        }
        Self::load(dir)
    }

    /// Creates a new CA in `dir` (creating the directory, mode 0700, if needed): `agentgate ca init`.
    ///
    /// The key file is created with mode 0600, so it is never readable by others, not even briefly.
    ///
    /// # Errors
    /// A CA file already exists and `force` is false ([`TlsError::CaExists`]); the directory or a
    /// file cannot be created or written.
    pub fn create(dir: &Path, force: bool) -> Result<Self, TlsError> {
        let (cert_path, key_path) = Self::paths(dir);
        if !force && (cert_path.exists() || key_path.exists()) {
            return Err(TlsError::CaExists { dir: dir.to_owned() });
        }
        // Generate before touching the disk, so a failure never costs the operator the old CA.
        let (cert_pem, key_pem) = generate().map_err(|source| TlsError::Generate { source })?;
        create_dir(dir)?;
        if force {
            remove_if_present(&key_path)?;
            remove_if_present(&cert_path)?;
        }
        write_new(&key_path, key_pem.as_bytes(), 0o600)?;
        write_new(&cert_path, cert_pem.as_bytes(), 0o644)?;
        Self::from_pem(cert_path, &key_path, cert_pem, key_pem.as_bytes())
    }

    /// Loads an existing CA from `dir`.
    ///
    /// The key must be PKCS#8 (`BEGIN PRIVATE KEY`): ring cannot load SEC1 (`BEGIN EC PRIVATE KEY`)
    /// or PKCS#1 keys, and the error says how to convert one. If the certificate file holds a
    /// chain, the first certificate is the CA.
    ///
    /// # Errors
    /// A file is missing, unreadable or malformed; the key is not PKCS#8 or is rejected; the key
    /// does not belong to the certificate.
    pub fn load(dir: &Path) -> Result<Self, TlsError> {
        let (cert_path, key_path) = Self::paths(dir);
        match (present(dir, &cert_path)?, present(dir, &key_path)?) {
            (false, false) => return Err(TlsError::NoCa { dir: dir.to_owned() }),
            (true, false) => return Err(TlsError::CaIncomplete { present: cert_path, missing: key_path }),
            (false, true) => return Err(TlsError::CaIncomplete { present: key_path, missing: cert_path }),
            (true, true) => {}
        }
        let cert_pem = read_file(&cert_path)?;
        let cert_pem = String::from_utf8(cert_pem).map_err(|_| TlsError::NoCertificate { path: cert_path.clone() })?;
        let key_pem = read_file(&key_path)?;
        warn_if_shared(&key_path);
        Self::from_pem(cert_path, &key_path, cert_pem, &key_pem)
    }

    /// The CA certificate as PEM, exactly as stored in the certificate file: what `agentgate ca export` prints.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate as DER: the second entry of every leaf chain.
    pub fn cert_der(&self) -> &CertificateDer<'static> {
        &self.cert_der
    }

    /// Where the CA certificate lives, for messages telling the operator what to trust.
    pub fn cert_path(&self) -> &Path {
        &self.cert_path
    }

    /// The issuer that signs leaf certificates.
    pub(super) fn issuer(&self) -> &Issuer<'static, KeyPair> {
        &self.issuer
    }

    fn paths(dir: &Path) -> (PathBuf, PathBuf) {
        (dir.join(Self::CERT_FILE), dir.join(Self::KEY_FILE))
    }

    /// Builds the CA from the two files' contents, checking that the key belongs to the certificate.
    fn from_pem(cert_path: PathBuf, key_path: &Path, cert_pem: String, key_pem: &[u8]) -> Result<Self, TlsError> {
        let certs = parse_certs(&cert_path, cert_pem.as_bytes())?;
        let cert_der = certs.into_iter().next().ok_or_else(|| TlsError::NoCertificate { path: cert_path.clone() })?;
        let key_der = read_pkcs8_key(key_path, key_pem)?;
        let key_pair = KeyPair::try_from(&key_der)
            .map_err(|source| TlsError::KeyRejected { path: key_path.to_owned(), source })?;
        let unusable =
            |reason: String| TlsError::CaUnusable { cert: cert_path.clone(), key: key_path.to_owned(), reason };
        // rustls compares the key's public half with the certificate's: a mismatched pair would
        // otherwise mint leafs that no client can verify, with a confusing error on their side.
        CertifiedKey::from_der(vec![cert_der.clone()], key_der, &crypto_provider())
            .map_err(|e| unusable(format!("the key does not match the certificate ({e})")))?;
        let issuer = Issuer::from_ca_cert_der(&cert_der, key_pair)
            .map_err(|e| unusable(format!("the certificate cannot be used as an issuer ({e})")))?;
        Ok(Self { issuer, cert_pem, cert_der, cert_path })
    }
}

/// Whether `file`, a CA file in `dir`, exists; "cannot tell" (the directory cannot be entered
/// by the running user) is an error, never "absent".
fn present(dir: &Path, file: &Path) -> Result<bool, TlsError> {
    file.try_exists().map_err(|source| TlsError::CaUnreadable { dir: dir.to_owned(), user: running_user(), source })
}

/// Warns when the CA key can be read by its group or others: whoever can read it can mint a
/// certificate every agent trusts.
fn warn_if_shared(key: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    let Ok(meta) = fs::metadata(key) else { return };
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        tracing::warn!(
            key = %key.display(),
            mode = format_args!("{mode:04o}"),
            "the CA key is readable by its group or others, who could mint certificates every agent trusts; run `chmod 600 {}`",
            key.display()
        );
    }
}

/// The name of the user agentgate runs as (its uid when it has none), for errors about access.
#[cfg(target_os = "linux")]
fn running_user() -> String {
    let uid = nix::unistd::getuid();
    match nix::unistd::User::from_uid(uid) {
        Ok(Some(user)) => user.name,
        Ok(None) | Err(_) => format!("uid {uid}"),
    }
}

#[cfg(not(target_os = "linux"))]
fn running_user() -> String {
    "agentgate's user".to_owned()
}

/// A fresh random serial number: 16 bytes, positive, never starting with a zero byte.
///
/// Random rather than rcgen's key-derived default, so two certificates never share issuer and
/// serial (Firefox rejects that, CRATES.md pitfall 11).
pub(super) fn random_serial() -> SerialNumber {
    let mut bytes: [u8; 16] = rand::random();
    // Top bit clear keeps the DER INTEGER positive without a padding byte; the next bit set
    // keeps it exactly 16 bytes long.
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    SerialNumber::from_slice(&bytes)
}

/// Generates a new CA key and self-signed certificate, both as PEM.
fn generate() -> Result<(String, String), rcgen::Error> {
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256)?;
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, "agentgate CA");
    name.push(DnType::OrganizationName, "agentgate");
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let now = SystemTime::now();
    params.not_before = (now - BACKDATE).into();
    params.not_after = (now + CA_VALIDITY).into();
    params.serial_number = Some(random_serial());
    let cert = params.self_signed(&key)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// The first private key in `pem`, which must be PKCS#8.
fn read_pkcs8_key(path: &Path, pem: &[u8]) -> Result<PrivateKeyDer<'static>, TlsError> {
    let key = PrivateKeyDer::from_pem_slice(pem).map_err(|source| match source {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::NoKey { path: path.to_owned() },
        source => TlsError::Pem { path: path.to_owned(), source },
    })?;
    let format = match key {
        PrivateKeyDer::Pkcs8(_) => return Ok(key),
        PrivateKeyDer::Sec1(_) => "SEC1 (`BEGIN EC PRIVATE KEY`)",
        PrivateKeyDer::Pkcs1(_) => "PKCS#1 (`BEGIN RSA PRIVATE KEY`)",
        _ => "in an unknown format",
    };
    Err(TlsError::KeyNotPkcs8 { path: path.to_owned(), format })
}

/// Creates `dir` and its parents; on Unix a directory we create gets mode 0700.
fn create_dir(dir: &Path) -> Result<(), TlsError> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir).map_err(|source| TlsError::CreateDir { path: dir.to_owned(), source })
}

/// Removes `path`; a file that is already gone is fine.
fn remove_if_present(path: &Path) -> Result<(), TlsError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(TlsError::Write { path: path.to_owned(), source: e }),
        _ => Ok(()),
    }
}

/// Writes `contents` to a file that must not exist yet, created with `mode` on Unix (so the
/// permissions hold from the first byte on, rather than being tightened after the write).
fn write_new(path: &Path, contents: &[u8], mode: u32) -> Result<(), TlsError> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, mode);
    #[cfg(not(unix))]
    let _ = mode;
    let write = || -> io::Result<()> {
        let mut file = options.open(path)?;
        file.write_all(contents)?;
        file.sync_all()
    };
    write().map_err(|source| TlsError::Write { path: path.to_owned(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A P-256 key in SEC1 form, as `openssl ecparam -genkey` writes it (throwaway, test only).
    const SEC1_KEY: &str = "-----BEGIN EC PRIVATE KEY-----
MHcCAQEEIODm4CWu3pES1AYDlBhGjcWtrGWHgh+yTjSygpq9d6LroAoGCCqGSM49
AwEHoUQDQgAEXfXhbCtAw5QV7eb4Z3lqBt8+L2fBhn8vlRYxX23RflYJII4Ld/WB
GuTXqod1vhkslsnvfcxKpnHPXuNmGRn/Qg==
-----END EC PRIVATE KEY-----
";

    #[test]
    fn create_then_load_gives_the_same_cert() {
        let dir = tempfile::tempdir().unwrap();
        let created = CertificateAuthority::create(dir.path(), false).unwrap();
        let loaded = CertificateAuthority::load(dir.path()).unwrap();
        assert_eq!(created.cert_der(), loaded.cert_der());
        assert_eq!(created.cert_pem(), loaded.cert_pem());
        assert!(loaded.cert_pem().starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(loaded.cert_path(), dir.path().join(CertificateAuthority::CERT_FILE));
        let stored = fs::read_to_string(dir.path().join(CertificateAuthority::CERT_FILE)).unwrap();
        assert_eq!(stored, loaded.cert_pem());
    }

    #[cfg(unix)]
    #[test]
    fn key_file_is_private_and_dir_is_created() {
        use std::os::unix::fs::PermissionsExt;
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("nested").join("certs");
        CertificateAuthority::load_or_create(&dir).unwrap();
        let key_mode = fs::metadata(dir.join(CertificateAuthority::KEY_FILE)).unwrap().permissions().mode();
        assert_eq!(key_mode & 0o777, 0o600);
        let dir_mode = fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(dir_mode & 0o077, 0, "the CA directory must not be readable by others");
    }

    #[test]
    fn load_or_create_reuses_an_existing_ca() {
        let dir = tempfile::tempdir().unwrap();
        let first = CertificateAuthority::load_or_create(dir.path()).unwrap();
        let second = CertificateAuthority::load_or_create(dir.path()).unwrap();
        assert_eq!(first.cert_der(), second.cert_der());
    }

    #[test]
    fn create_refuses_an_existing_ca_unless_forced() {
        let dir = tempfile::tempdir().unwrap();
        let original = CertificateAuthority::create(dir.path(), false).unwrap();
        let refused = CertificateAuthority::create(dir.path(), false).unwrap_err();
        assert!(matches!(refused, TlsError::CaExists { .. }), "{refused:?}");
        assert!(refused.to_string().contains("--force"), "{refused}");
        assert_eq!(CertificateAuthority::load(dir.path()).unwrap().cert_der(), original.cert_der());

        let replaced = CertificateAuthority::create(dir.path(), true).unwrap();
        assert_ne!(replaced.cert_der(), original.cert_der());
        assert_eq!(CertificateAuthority::load(dir.path()).unwrap().cert_der(), replaced.cert_der());
    }

    #[test]
    fn load_names_what_is_missing() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(CertificateAuthority::load(dir.path()), Err(TlsError::NoCa { .. })));

        CertificateAuthority::create(dir.path(), false).unwrap();
        fs::remove_file(dir.path().join(CertificateAuthority::KEY_FILE)).unwrap();
        let err = CertificateAuthority::load_or_create(dir.path()).unwrap_err();
        assert!(matches!(err, TlsError::CaIncomplete { .. }), "{err:?}");
        assert!(err.to_string().contains(CertificateAuthority::KEY_FILE), "{err}");
        // A half-present CA is never silently replaced.
        assert!(!dir.path().join(CertificateAuthority::KEY_FILE).exists());
    }

    #[test]
    fn sec1_key_is_refused_with_the_conversion_command() {
        let dir = tempfile::tempdir().unwrap();
        CertificateAuthority::create(dir.path(), false).unwrap();
        let key_path = dir.path().join(CertificateAuthority::KEY_FILE);
        fs::write(&key_path, SEC1_KEY).unwrap();
        let err = CertificateAuthority::load(dir.path()).unwrap_err();
        assert!(matches!(err, TlsError::KeyNotPkcs8 { .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.contains("convert with `openssl pkcs8 -topk8 -nocrypt"), "{message}");
        assert!(message.contains(&key_path.display().to_string()), "{message}");
    }

    #[test]
    fn a_key_from_another_ca_is_refused() {
        let (one, other) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        CertificateAuthority::create(one.path(), false).unwrap();
        CertificateAuthority::create(other.path(), false).unwrap();
        let other_key = other.path().join(CertificateAuthority::KEY_FILE);
        fs::copy(other_key, one.path().join(CertificateAuthority::KEY_FILE)).unwrap();
        let err = CertificateAuthority::load(one.path()).unwrap_err();
        assert!(matches!(err, TlsError::CaUnusable { .. }), "{err:?}");
        assert!(err.to_string().contains("does not match"), "{err}");
    }

    #[test]
    fn garbage_files_are_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        CertificateAuthority::create(dir.path(), false).unwrap();
        let cert_path = dir.path().join(CertificateAuthority::CERT_FILE);
        fs::write(&cert_path, "not a certificate\n").unwrap();
        let err = CertificateAuthority::load(dir.path()).unwrap_err();
        assert!(matches!(err, TlsError::NoCertificate { .. }), "{err:?}");
        assert!(err.to_string().contains(&cert_path.display().to_string()), "{err}");

        CertificateAuthority::create(dir.path(), true).unwrap();
        fs::write(dir.path().join(CertificateAuthority::KEY_FILE), "").unwrap();
        assert!(matches!(CertificateAuthority::load(dir.path()), Err(TlsError::NoKey { .. })));
    }

    #[test]
    fn serials_are_sixteen_positive_bytes() {
        for _ in 0..64 {
            let serial = random_serial().to_bytes();
            assert_eq!(serial.len(), 16);
            assert_eq!(serial[0] & 0xc0, 0x40);
        }
    }
}
