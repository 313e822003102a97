//! Ed25519 public keys as JWKs (RFC 8037 `OKP`) and their RFC 7638 thumbprints: the `keyid`
//! of a Web Bot Auth signature and the `kid` of the key directory's entries. Pure.

use base64::Engine as _;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The base64url (no padding) SHA-256 JWK thumbprint of an Ed25519 public key: the hash of
/// the required members in lexicographic order, no whitespace (RFC 7638 §3.2, RFC 8037 §2).
pub fn thumbprint(public_key: &[u8]) -> String {
    let canonical = format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{}"}}"#, b64url(public_key));
    b64url(&Sha256::digest(canonical.as_bytes()))
}

/// The JWK of an Ed25519 public key, with its thumbprint as `kid`.
pub fn jwk(public_key: &[u8]) -> Value {
    json!({"kty": "OKP", "crv": "Ed25519", "x": b64url(public_key), "kid": thumbprint(public_key)})
}

/// A JWK set (`{"keys": [...]}`) of `keys`: the body of an
/// `application/http-message-signatures-directory+json` directory.
pub fn jwk_set<'a>(keys: impl Iterator<Item = &'a [u8]>) -> Value {
    json!({"keys": keys.map(jwk).collect::<Vec<_>>()})
}

fn b64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}
