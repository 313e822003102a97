//! Bearer tokens held as their SHA-256 digest: how `[[agents]]` credentials and the admin
//! API's `[admin] token_sha256` are stored, checked in config validation, and compared.
//!
//! Owns: parsing the hex digest a config names, hashing a presented token, and comparing the
//! two digests in constant time, so neither the token nor how much of it matched shows in
//! the timing. Never: reads headers or config tables itself, or keeps a token in clear.

use sha2::{Digest, Sha256};

/// How an operator makes the hex digest a `token_sha256` key wants (the fix in messages).
pub const HOW_TO_HASH: &str = "the output of `printf %s TOKEN | sha256sum`";

/// The SHA-256 digest of a secret token.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TokenDigest([u8; 32]);

impl TokenDigest {
    /// The digest written as 64 hex digits (a `token_sha256` value); `None` when it is not.
    pub fn from_hex(hex_digest: &str) -> Option<TokenDigest> {
        if !is_sha256_hex(hex_digest) {
            return None;
        }
        hex::decode(hex_digest).ok().and_then(|bytes| bytes.try_into().ok()).map(TokenDigest)
    }

    /// The digest of `token` as written in clear (a `token` value).
    pub fn of(token: &str) -> TokenDigest {
        TokenDigest(Sha256::digest(token.as_bytes()).into())
    }

    /// Whether `token` hashes to this digest, compared in constant time.
    pub fn matches(&self, token: &str) -> bool {
        let given = TokenDigest::of(token);
        given.0.iter().zip(&self.0).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
    }
}

impl std::fmt::Debug for TokenDigest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // A digest is not the secret, but there is no reason to print it either.
        f.write_str("TokenDigest(..)")
    }
}

/// Whether `value` is 64 hex digits: what every `token_sha256` key must hold.
pub fn is_sha256_hex(value: &str) -> bool {
    value.len() == 64 && value.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `printf %s beta-secret | sha256sum`
    const BETA: &str = "d40ab4efae8afe82f0fda0f0fc785ff61bec7b5f329c6070c453594397e03568";

    #[test]
    fn a_digest_matches_its_token_only() {
        let digest = TokenDigest::from_hex(BETA).expect("64 hex digits");
        assert!(digest.matches("beta-secret"));
        assert!(!digest.matches("beta-secreT") && !digest.matches("") && !digest.matches(BETA));
        assert_eq!(TokenDigest::from_hex(&BETA.to_uppercase()), Some(digest), "hex is case-insensitive");
        assert_eq!(TokenDigest::of("beta-secret"), digest);
    }

    #[test]
    fn only_64_hex_digits_are_a_digest() {
        for bad in ["", "abc", &BETA[1..], &format!("{BETA}0"), &BETA.replace('d', "g")] {
            assert!(TokenDigest::from_hex(bad).is_none(), "{bad}");
            assert!(!is_sha256_hex(bad), "{bad}");
        }
    }
}
