//! `[admin]`: where the admin API listens and the bearer token that guards it. Owned here,
//! composed into the config by `crate::config` (docs/layering.md).
//!
//! Never: opens the listener (`super::server` does) or keeps the token in clear.

use std::net::SocketAddr;

use serde::Deserialize;

use crate::setting::optional_socket_addr;
use crate::token::{HOW_TO_HASH, TokenDigest, is_sha256_hex};

/// `[admin]`: the admin API (`docs/admin.md`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// Where the admin API listens; `None` (written `"off"`) disables it (default `127.0.0.1:9090`).
    #[serde(deserialize_with = "optional_socket_addr")]
    pub listen: Option<SocketAddr>,
    /// Hex SHA-256 of the bearer token every endpoint but `/healthz` requires; `None` (the
    /// default) requires none, which is allowed only on a loopback `listen`.
    pub token_sha256: Option<String>,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self { listen: Some(SocketAddr::from(([127, 0, 0, 1], 9090))), token_sha256: None }
    }
}

impl AdminConfig {
    /// The token's digest, when one is configured (validated by [`problems`](Self::problems)).
    pub fn token(&self) -> Option<TokenDigest> {
        self.token_sha256.as_deref().and_then(TokenDigest::from_hex)
    }

    /// Problems in `[admin]`, each naming the key, its value and the fix: a malformed
    /// token digest, and an API reachable beyond loopback with no token (the admin API can
    /// purge policies and read the decision log, so anyone who reaches it must prove who
    /// they are; test `admin::config::tests::a_non_loopback_listen_needs_a_token`).
    pub(crate) fn problems(&self, problems: &mut Vec<String>) {
        if let Some(hash) = &self.token_sha256
            && !is_sha256_hex(hash)
        {
            problems.push(format!("[admin] token_sha256 = {hash:?}: must be 64 hex digits, e.g. {HOW_TO_HASH}"));
        }
        if let Some(listen) = self.listen
            && !listen.ip().is_loopback()
            && self.token_sha256.is_none()
        {
            problems.push(format!(
                "[admin] listen = \"{listen}\" is reachable beyond loopback but [admin] token_sha256 is not set; \
                 set token_sha256 to {HOW_TO_HASH} and send `Authorization: Bearer TOKEN`, \
                 or listen on loopback, e.g. \"127.0.0.1:9090\""
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{Config, ConfigError};

    fn problems(text: &str) -> Vec<String> {
        match Config::from_toml_str(text, "agentgate.toml") {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid { problems, .. }) => problems,
            Err(other) => panic!("expected validation problems for {text:?}, got {other}"),
        }
    }

    /// `printf %s admin-secret | sha256sum`
    const TOKEN_SHA256: &str = "16175223c8ddce5ace0493c948569c211b03c4c6bb3d3e484434999448cffe01";

    #[test]
    fn a_non_loopback_listen_needs_a_token() {
        for listen in ["0.0.0.0:9090", "[::]:9090", "192.0.2.7:9090"] {
            let found = problems(&format!("[admin]\nlisten = \"{listen}\"\n"));
            assert_eq!(found.len(), 1, "{listen}: {found:?}");
            assert!(found[0].contains(&format!("[admin] listen = \"{listen}\"")), "{found:?}");
            assert!(found[0].contains("token_sha256") && found[0].contains("sha256sum"), "{found:?}");
            let with_token = format!("[admin]\nlisten = \"{listen}\"\ntoken_sha256 = \"{TOKEN_SHA256}\"\n");
            assert!(problems(&with_token).is_empty(), "{listen} with a token");
        }
        for listen in ["127.0.0.1:9090", "[::1]:9090", "127.0.0.2:0", "off"] {
            assert!(problems(&format!("[admin]\nlisten = \"{listen}\"\n")).is_empty(), "{listen}");
        }
    }

    #[test]
    fn a_token_digest_is_64_hex_digits() {
        let found = problems("[admin]\ntoken_sha256 = \"secret\"\n");
        assert_eq!(
            found,
            [
                "[admin] token_sha256 = \"secret\": must be 64 hex digits, e.g. the output of `printf %s TOKEN | sha256sum`"
            ]
        );
        let config = Config::from_toml_str(&format!("[admin]\ntoken_sha256 = \"{TOKEN_SHA256}\"\n"), "t.toml");
        assert!(config.expect("valid").admin.token().is_some());
    }
}
