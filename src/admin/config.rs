//! `[admin]`: where the admin API listens, the bearer tokens that guard it (`token_sha256`,
//! named "admin", and any named `[[admin.tokens]]`), and the extra names it answers to
//! (`hosts`). Owned here, composed into the config by `crate::config` (docs/layering.md).
//! Also the rule every setting that holds a request for a human shares: holding needs an
//! admin token ([`AdminConfig::holding_problems`]).
//!
//! Never: opens the listener (`super::server` does), checks a request's `Host`
//! (`super::hosts` does), or keeps the token in clear.

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
    /// Names (or addresses) the admin API is reached by beside its listen address and
    /// loopback, `host` (any port) or `host:port`: a request whose `Host` is none of them is
    /// answered `421` (DNS rebinding, `docs/admin.md`). Empty by default.
    pub hosts: Vec<String>,
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
        Self {
            listen: Some(SocketAddr::from(([127, 0, 0, 1], 9090))),
            token_sha256: None,
            tokens: Vec::new(),
            hosts: Vec::new(),
        }
    }
}

impl AdminConfig {
    /// Every configured token's holder and digest, `token_sha256` first as
    /// [`ADMIN_TOKEN_NAME`] (validated by `problems`). Empty: the API is open.
    pub fn tokens(&self) -> Vec<(String, TokenDigest)> {
        let unnamed = self.token_sha256.as_deref().map(|hash| (ADMIN_TOKEN_NAME, hash));
        let named = self.tokens.iter().map(|t| (t.name.as_str(), t.sha256.as_str()));
        unnamed
            .into_iter()
            .chain(named)
            .filter_map(|(name, hash)| TokenDigest::from_hex(hash).map(|digest| (name.to_owned(), digest)))
            .collect()
    }

    /// Whether any admin token is configured (`token_sha256` or `[[admin.tokens]]`): then
    /// every endpoint but `/healthz` needs one, and a caller has a name.
    pub fn has_token(&self) -> bool {
        self.token_sha256.is_some() || !self.tokens.is_empty()
    }

    /// The problem with `setting` (written as the file says it, e.g. `[approvals] mode =
    /// "hold"`), which holds requests for a human's answer, when no admin token is configured:
    /// without one anybody who reaches the admin API, the agent whose request is held
    /// included, could answer it. Every setting that holds for a human calls this,
    /// so the rule and its message are one (test
    /// `approvals::config::tests::hold_needs_an_admin_token`).
    pub fn holding_problems(&self, setting: &str, problems: &mut Vec<String>) {
        if self.listen.is_none() {
            problems.push(format!(
                "{setting} holds requests for a human's approval, but [admin] listen = \"off\": nobody \
                 could answer them and every held request would wait out [approvals] timeout; give \
                 [admin] listen an address (with a token) or set it to \"deny\""
            ));
        } else if !self.has_token() {
            problems.push(format!(
                "{setting} holds requests for a human's approval, but no admin token is configured \
                 ([admin] token_sha256 or [[admin.tokens]]), so any process that reaches the admin API, \
                 the agent itself included, could approve its own request; set [admin] token_sha256 \
                 (or add [[admin.tokens]]) to {HOW_TO_HASH} and approve with `Authorization: Bearer TOKEN` \
                 or the console's login, or set it to \"deny\""
            ));
        }
    }

    /// `hosts` as (canonical host, port if given), the entries [`problems`](Self::problems)
    /// accepts; an entry it reports is left out.
    pub(crate) fn host_names(&self) -> Vec<(String, Option<u16>)> {
        self.hosts.iter().filter_map(|entry| host_and_port(entry)).collect()
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
        for (i, entry) in self.hosts.iter().enumerate() {
            if host_and_port(entry).is_none() {
                problems.push(format!(
                    "[admin] hosts entry #{} {entry:?}: not a host name or address with an optional port; \
                     write e.g. \"admin.internal\" (any port) or \"admin.internal:9090\"",
                    i + 1
                ));
            }
        }
        if let Some(listen) = self.listen
            && !listen.ip().is_loopback()
            && !self.has_token()
        {
            problems.push(format!(
                "[admin] listen = \"{listen}\" is reachable beyond loopback but [admin] token_sha256 is not set; \
                 set token_sha256 (or add [[admin.tokens]]) to {HOW_TO_HASH} and send `Authorization: Bearer TOKEN`, \
                 or listen on loopback, e.g. \"127.0.0.1:9090\""
            ));
        }
    }
}

/// `host` or `host:port` (an IPv6 address in brackets) with the host in canonical form
/// (`crate::net::host`): how a `Host` header, an `Origin`'s authority and an `[admin] hosts`
/// entry are read. `None` for anything else (a scheme, a path, user info, a bad host or
/// port, a wildcard).
pub(crate) fn host_and_port(authority: &str) -> Option<(String, Option<u16>)> {
    let (host, port) = match authority.strip_prefix('[') {
        Some(bracketed) => {
            let (inside, after) = bracketed.split_once(']')?;
            inside.parse::<std::net::Ipv6Addr>().ok()?;
            let port = if after.is_empty() { None } else { Some(after.strip_prefix(':')?) };
            (inside, port)
        }
        // A `:` left in the host is an IPv6 address without brackets.
        None => match authority.rsplit_once(':') {
            Some((host, _)) if host.contains(':') => return None,
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let port = match port {
        None => None,
        Some(digits) if (1..=5).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit()) => {
            Some(digits.parse::<u16>().ok()?)
        }
        Some(_) => return None,
    };
    // The WHATWG host parser allows `*`.
    if host.contains('*') {
        return None;
    }
    Some((crate::net::canonical_host(host).ok()?.into_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::host_and_port;
    use crate::config::Config;
    use crate::config::testing::problems;

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
    fn hosts_are_names_or_addresses_with_an_optional_port() {
        let text = "[admin]\nhosts = [\"Admin.Internal.\", \"agentgate:9090\", \"[::1]:9\", \"10.0.0.5\"]\n";
        let config = Config::from_toml_str(text, "t.toml").expect("valid");
        assert_eq!(
            config.admin.host_names(),
            [
                ("admin.internal".to_owned(), None),
                ("agentgate".to_owned(), Some(9090)),
                ("::1".to_owned(), Some(9)),
                ("10.0.0.5".to_owned(), None),
            ]
        );
        let bad =
            "[admin]\nhosts = [\"http://admin\", \"*.internal\", \"a b\", \"admin:\", \"\", \"x:99999\", \"u@h\"]\n";
        let found = problems(bad);
        assert_eq!(found.len(), 7, "{found:?}");
        assert!(found[0].starts_with("[admin] hosts entry #1 \"http://admin\": not a host name"), "{found:?}");
        assert!(found[6].contains("write e.g. \"admin.internal\""), "{found:?}");
        assert_eq!(host_and_port("0x7f.1:9090"), Some(("127.0.0.1".to_owned(), Some(9090))));
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
