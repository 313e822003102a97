//! `[admin]`: where the admin API listens and the bearer tokens that guard it (`token_sha256`,
//! named "admin", and any named `[[admin.tokens]]`). Owned here, composed into the config by
//! `crate::config` (docs/layering.md).
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
    /// default) requires none, which is allowed only on a loopback `listen`. Its holder is
    /// named [`ADMIN_TOKEN_NAME`].
    pub token_sha256: Option<String>,
    /// Named tokens (`[[admin.tokens]]`), each as good as `token_sha256`; an approval records
    /// the name of the token that gave it.
    pub tokens: Vec<AdminToken>,
}

/// The name of the holder of `[admin] token_sha256`.
pub const ADMIN_TOKEN_NAME: &str = "admin";

/// `[[admin.tokens]]`: one named bearer token of the admin API.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdminToken {
    /// Who holds it, as approvals record it (`alice`).
    pub name: String,
    /// Hex SHA-256 of the token.
    pub sha256: String,
}

impl Default for AdminConfig {
    fn default() -> Self {
        Self { listen: Some(SocketAddr::from(([127, 0, 0, 1], 9090))), token_sha256: None, tokens: Vec::new() }
    }
}

impl AdminConfig {
    /// Every configured token's holder and digest, `token_sha256` first as
    /// [`ADMIN_TOKEN_NAME`] (validated by [`problems`](Self::problems)). Empty: the API is open.
    pub fn tokens(&self) -> Vec<(String, TokenDigest)> {
        let unnamed = self.token_sha256.as_deref().map(|hash| (ADMIN_TOKEN_NAME, hash));
        let named = self.tokens.iter().map(|t| (t.name.as_str(), t.sha256.as_str()));
        unnamed
            .into_iter()
            .chain(named)
            .filter_map(|(name, hash)| TokenDigest::from_hex(hash).map(|digest| (name.to_owned(), digest)))
            .collect()
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
        for (i, token) in self.tokens.iter().enumerate() {
            let n = i + 1;
            if !is_sha256_hex(&token.sha256) {
                let hash = &token.sha256;
                problems.push(format!(
                    "[[admin.tokens]] #{n} sha256 = {hash:?}: must be 64 hex digits, e.g. {HOW_TO_HASH}"
                ));
            }
            let name = &token.name;
            if name.is_empty()
                || name.len() > 64
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.@".contains(&b))
            {
                problems.push(format!(
                    "[[admin.tokens]] #{n} name = {name:?}: 1 to 64 letters, digits or `-_.@`; write e.g. \"alice\""
                ));
            }
            let taken = name == ADMIN_TOKEN_NAME && self.token_sha256.is_some();
            if taken || self.tokens[..i].iter().any(|t| t.name == *name) {
                problems.push(format!(
                    "[[admin.tokens]] #{n} name = {name:?}: used by another token (token_sha256 is named \"{ADMIN_TOKEN_NAME}\"); give each token its own name"
                ));
            }
        }
        if let Some(listen) = self.listen
            && !listen.ip().is_loopback()
            && self.token_sha256.is_none()
            && self.tokens.is_empty()
        {
            problems.push(format!(
                "[admin] listen = \"{listen}\" is reachable beyond loopback but [admin] token_sha256 is not set; \
                 set token_sha256 (or add [[admin.tokens]]) to {HOW_TO_HASH} and send `Authorization: Bearer TOKEN`, \
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
    fn named_tokens_count_as_a_token_and_name_their_holder() {
        let named = format!("[[admin.tokens]]\nname = \"alice\"\nsha256 = \"{TOKEN_SHA256}\"\n");
        assert!(problems(&format!("[admin]\nlisten = \"0.0.0.0:9090\"\n{named}")).is_empty());
        let both = format!("[admin]\ntoken_sha256 = \"{TOKEN_SHA256}\"\n{named}");
        let config = Config::from_toml_str(&both, "t.toml").expect("valid");
        let names: Vec<String> = config.admin.tokens().into_iter().map(|(name, _)| name).collect();
        assert_eq!(names, ["admin", "alice"]);
        let bad = format!(
            "[admin]\ntoken_sha256 = \"{TOKEN_SHA256}\"\n[[admin.tokens]]\nname = \"admin\"\nsha256 = \"abc\"\n\
             [[admin.tokens]]\nname = \"two words\"\nsha256 = \"{TOKEN_SHA256}\"\n"
        );
        let found = problems(&bad);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].starts_with("[[admin.tokens]] #1 sha256 = \"abc\": must be 64 hex digits"), "{found:?}");
        assert!(found[1].starts_with("[[admin.tokens]] #1 name = \"admin\": used by another token"), "{found:?}");
        assert!(found[2].starts_with("[[admin.tokens]] #2 name = \"two words\""), "{found:?}");
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
        assert_eq!(config.expect("valid").admin.tokens().len(), 1);
    }
}
