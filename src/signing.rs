//! Web Bot Auth (draft-meunier-web-bot-auth-architecture, now the IETF webbotauth group's
//! HTTP message signatures for automated traffic; RFC 9421 HTTP Message Signatures): each
//! signing agent's Ed25519 key, and the three headers agentgate puts on its forwarded
//! requests so a site can verify which agent sent them (`docs/signing.md`).
//!
//! Owns: the `signing` table of `[agent]` / `[[agents]]` (`SigningConfig`) and its checks;
//! loading each key from its `key_file`, or creating it once, atomically and owner-only,
//! beside the CA (`key`); the RFC 9421 signature base and the structured-field values it
//! writes (`base`, by hand); the JWK set `agentgate keys` prints, with RFC 7638 thumbprints
//! as `keyid` (`jwk`); stripping the signature headers an agent sent itself.
//!
//! Never: decides whether a request is forwarded (the gate does), signs a passthrough
//! tunnel's requests (it cannot see them), verifies signatures, or logs a private key.

mod base;
mod jwk;
mod key;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use http::{HeaderMap, HeaderName, HeaderValue, Request};
use ring::rand::{SecureRandom, SystemRandom};
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde::Deserialize;

pub use base::{Component, signature_base};
pub use jwk::{jwk, jwk_set, thumbprint};
pub use key::{KeyError, generated_key_path, load_or_create};

/// `Signature-Agent`: where the site finds the agent's key directory.
pub const SIGNATURE_AGENT: HeaderName = HeaderName::from_static("signature-agent");
/// `Signature-Input`: what the signature covers, and its parameters.
pub const SIGNATURE_INPUT: HeaderName = HeaderName::from_static("signature-input");
/// `Signature`: the signature itself.
pub const SIGNATURE: HeaderName = HeaderName::from_static("signature");

/// The label of agentgate's signature in all three headers.
const LABEL: &str = "sig1";
/// The `tag` the draft asks a Web Bot Auth signature to carry.
const TAG: &str = "web-bot-auth";
/// How long a signature is valid after `created`: the draft wants `expires` close to it.
pub const VALIDITY: Duration = Duration::from_secs(300);

/// `signing` of `[agent]` or an `[[agents]]` entry: the agent's requests are signed with Web
/// Bot Auth.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigningConfig {
    /// The https URL of the agent's key directory, sent exactly as written as the
    /// `Signature-Agent` member (draft-ietf-webbotauth-httpsig-protocol-01: the member is the
    /// directory's URL). docs/signing.md recommends
    /// `https://<host>/.well-known/http-message-signatures-directory`, which verifiers of the
    /// earlier revisions (an origin, the well-known path appended) accept too; a bare origin
    /// is still accepted.
    pub signature_agent: String,
    /// The agent's Ed25519 private key (PKCS#8, DER or PEM), which must exist; unset: created on
    /// first start as `<[ca] dir>/agent-keys/<id>.pk8`.
    pub key_file: Option<PathBuf>,
    /// Keys the agent signed with before `key_file` and that `agentgate keys` still lists,
    /// so sites that cached the directory keep verifying during a rotation's overlap.
    #[serde(default)]
    pub previous_key_files: Vec<PathBuf>,
}

impl SigningConfig {
    /// Problems of the table `table` (`[[agents]] #2 signing`): `signature_agent` must be an
    /// https URL; a generated key needs a file-name-safe id, and a key per replica is refused
    /// when replicas share work through Redis (`shared`: `[limits] store` or `[cache] store`
    /// is `"redis"`).
    pub(crate) fn problems(&self, table: &str, id: Option<&str>, shared: bool, problems: &mut Vec<String>) {
        if let Err(why) = directory_url(&self.signature_agent) {
            problems.push(format!(
                "{table} signing.signature_agent = {:?}: {why}; write the https URL of your key directory, e.g. \"{EXAMPLE_DIRECTORY}\"",
                self.signature_agent
            ));
        }
        if self.key_file.is_some() {
            return;
        }
        if shared {
            problems.push(format!(
                "{table} signing: no key_file, so each replica would create its own key while a Redis store ([limits] or [cache] store = \"redis\") says replicas are one fleet; create one key (`openssl genpkey -algorithm ed25519 -outform DER -out agent.pk8`) and set signing.key_file on every replica"
            ));
        }
        if id.is_some_and(|id| !is_file_name(id)) {
            problems.push(format!(
                "{table} signing: no key_file, and the id {:?} cannot name the generated key file; set signing.key_file, or use an id of letters, digits, `-`, `_` and `.`",
                id.unwrap_or_default()
            ));
        }
    }
}

/// Whether `id` can be a file name as it is.
fn is_file_name(id: &str) -> bool {
    !id.is_empty()
        && !id.starts_with('.')
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// The directory URL docs and error messages suggest.
pub(crate) const EXAMPLE_DIRECTORY: &str = "https://agents.example.com/.well-known/http-message-signatures-directory";

/// Checks that `text` is an https URL a verifier can fetch a key directory from: a host, no
/// credentials, query or fragment; any path (none means the origin, as the earlier draft
/// revisions wrote it).
fn directory_url(text: &str) -> Result<(), &'static str> {
    let url = url::Url::parse(text).map_err(|_| "not a URL")?;
    if url.scheme() != "https" {
        return Err("must be an https URL");
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err("has no host");
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("a key directory URL has no query or fragment");
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("a key directory URL has no credentials");
    }
    if text.chars().any(|c| c == '"' || c == '\\' || !c.is_ascii_graphic()) {
        return Err("must be printable ASCII without quotes or backslashes (it is sent as a structured-field string)");
    }
    Ok(())
}

/// One agent's signing key, ready to sign its requests.
pub struct Signer {
    pair: Ed25519KeyPair,
    keyid: String,
    /// The `Signature-Agent` member value, an sf-string of the configured URL, exactly as
    /// written (`"https://agents.example.com/.well-known/http-message-signatures-directory"`).
    agent_member: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer").field("keyid", &self.keyid).field("signature_agent", &self.agent_member).finish()
    }
}

impl Signer {
    /// A signer with `pair`, naming `signature_agent` (checked by `SigningConfig::problems`;
    /// an invalid one is refused here too).
    ///
    /// # Errors
    /// [`KeyError::Origin`] when `signature_agent` is no https URL a verifier can fetch.
    pub fn new(pair: Ed25519KeyPair, signature_agent: &str) -> Result<Signer, KeyError> {
        directory_url(signature_agent).map_err(|why| KeyError::Origin { value: signature_agent.to_owned(), why })?;
        let keyid = thumbprint(pair.public_key().as_ref());
        Ok(Signer { pair, keyid, agent_member: base::sf_string(signature_agent), rng: SystemRandom::new() })
    }

    /// The base64url RFC 7638 JWK thumbprint of the public key: the signature's `keyid`.
    pub fn keyid(&self) -> &str {
        &self.keyid
    }

    /// The raw Ed25519 public key.
    pub fn public_key(&self) -> &[u8] {
        self.pair.public_key().as_ref()
    }

    /// Signs `request` (whose URI is absolute, as it goes to the origin) as of `now`: removes
    /// any `Signature`, `Signature-Input` and `Signature-Agent` it carries, then adds agentgate's
    /// three, covering `@authority`, `@method`, `@path` and `signature-agent`.
    pub fn sign<B>(&self, request: &mut Request<B>, now: SystemTime) {
        strip(request.headers_mut());
        let created = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let expires = created + VALIDITY.as_secs();
        let mut nonce = [0u8; 64];
        // SystemRandom fails only without an OS random source; the nonce is then all zeros,
        // which sites treat as a replayed nonce at worst: the signature still verifies.
        let _ = self.rng.fill(&mut nonce);
        let nonce = base64::engine::general_purpose::STANDARD.encode(nonce);
        let scheme = request.uri().scheme_str().unwrap_or("http");
        let authority = authority(scheme, request.uri().host().unwrap_or_default(), request.uri().port_u16());
        let path = match request.uri().path() {
            "" => "/",
            path => path,
        };
        let components = [
            Component::new("\"@authority\"", authority),
            Component::new("\"@method\"", request.method().as_str().to_owned()),
            Component::new("\"@path\"", path.to_owned()),
            Component::new(format!("\"signature-agent\";key={}", base::sf_string(LABEL)), self.agent_member.clone()),
        ];
        let params = format!(
            ";created={created};expires={expires};keyid={};alg=\"ed25519\";nonce={};tag={}",
            base::sf_string(&self.keyid),
            base::sf_string(&nonce),
            base::sf_string(TAG)
        );
        let (base, input) = signature_base(&components, &params);
        let signature = base64::engine::general_purpose::STANDARD.encode(self.pair.sign(base.as_bytes()));
        let headers = request.headers_mut();
        for (name, value) in [
            (SIGNATURE_AGENT, format!("{LABEL}={}", self.agent_member)),
            (SIGNATURE_INPUT, format!("{LABEL}={input}")),
            (SIGNATURE, format!("{LABEL}=:{signature}:")),
        ] {
            // Every part is visible ASCII: an sf-string checked at construction, numbers, base64.
            if let Ok(value) = HeaderValue::try_from(value) {
                headers.insert(name, value);
            }
        }
    }
}

/// `@authority` as RFC 9421 §2.2.3 wants it: the host lowercased, the port only when it is not
/// the scheme's default.
fn authority(scheme: &str, host: &str, port: Option<u16>) -> String {
    let host = host.to_ascii_lowercase();
    match (scheme, port) {
        (_, None) | ("https", Some(443)) | ("http", Some(80)) => host,
        (_, Some(port)) => format!("{host}:{port}"),
    }
}

/// Removes `Signature`, `Signature-Input` and `Signature-Agent`: what an agent may not send
/// past agentgate in its own name.
pub fn strip(headers: &mut HeaderMap) {
    for name in [SIGNATURE, SIGNATURE_INPUT, SIGNATURE_AGENT] {
        headers.remove(name);
    }
}

/// Every signing agent's key, by agent id (`None`: the `[agent]` table without an id).
#[derive(Debug, Default, Clone)]
pub struct Keys {
    signers: Vec<(Option<String>, Arc<Signer>)>,
}

impl Keys {
    /// Loads (or creates, beside the CA in `ca_dir`) the key of every agent with a `signing`
    /// table, each given as its id and table.
    ///
    /// # Errors
    /// The [`KeyError`] of the first key that cannot be read, parsed or created.
    pub fn load<'a>(
        ca_dir: &Path,
        agents: impl IntoIterator<Item = (Option<&'a str>, &'a SigningConfig)>,
    ) -> Result<Keys, KeyError> {
        let mut signers = Vec::new();
        for (id, signing) in agents {
            let pair = agent_key(ca_dir, id, signing)?;
            signers.push((id.map(str::to_owned), Arc::new(Signer::new(pair, &signing.signature_agent)?)));
        }
        Ok(Keys { signers })
    }

    /// The signer of the agent `id` (`None`: `[agent]` without an id).
    pub fn of(&self, id: Option<&str>) -> Option<Arc<Signer>> {
        self.signers.iter().find(|(owner, _)| owner.as_deref() == id).map(|(_, signer)| Arc::clone(signer))
    }

    /// The key ids in force, agent by agent: what a reload compares to see a replaced key file.
    pub fn keyids(&self) -> Vec<&str> {
        self.signers.iter().map(|(_, signer)| signer.keyid()).collect()
    }
}

/// An agent's key: its `key_file`, which must exist (replicas share it), else the one
/// generated beside the CA, created on first use.
fn agent_key(ca_dir: &Path, id: Option<&str>, signing: &SigningConfig) -> Result<Ed25519KeyPair, KeyError> {
    match &signing.key_file {
        Some(path) => key::load(path),
        None => load_or_create(&generated_key_path(ca_dir, id)),
    }
}

/// The JWK set of the signing agents, each given as its id and table (only `only` when
/// given: an `[[agents]]` id, or the `[agent]` table's), current and previous keys: the body
/// of each agent's `/.well-known/http-message-signatures-directory`.
///
/// # Errors
/// A key that cannot be loaded or created; an `only` that names no signing agent.
pub fn directory<'a>(
    ca_dir: &Path,
    agents: impl IntoIterator<Item = (Option<&'a str>, &'a SigningConfig)>,
    only: Option<&str>,
) -> Result<serde_json::Value, KeyError> {
    let mut keys = Vec::new();
    let mut found = false;
    for (id, signing) in agents {
        if only.is_some() && only != id {
            continue;
        }
        found = true;
        let current = agent_key(ca_dir, id, signing)?;
        keys.push(current.public_key().as_ref().to_vec());
        for previous in &signing.previous_key_files {
            keys.push(key::load(previous)?.public_key().as_ref().to_vec());
        }
    }
    if !found {
        return Err(KeyError::NoAgent { id: only.map(str::to_owned) });
    }
    keys.dedup();
    Ok(jwk_set(keys.iter().map(Vec::as_slice)))
}

/// The generated key's directory, for messages.
pub fn keys_dir(ca_dir: &Path) -> PathBuf {
    ca_dir.join("agent-keys")
}

#[cfg(test)]
mod tests;
