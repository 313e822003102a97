//! Who may use the admin API, request by request: whether the request is addressed to it at
//! all (`super::hosts`, against DNS rebinding), and who the caller is: the holder of a
//! configured bearer token, of the console session that token opened (`super::session`), or
//! `anonymous` when no token is configured. A wrong token is answered late
//! (`super::throttle`); a right one never waits. Built once from `[admin]` when the proxy
//! starts (`[admin]` needs a restart to change).
//!
//! Never: answers a request (`super::routes` does), keeps a token in clear or logs one.

use std::net::IpAddr;
use std::time::Instant;

use http::Request;
use http::header::{AUTHORIZATION, COOKIE};

use super::hosts::AcceptedHosts;
use super::session::Sessions;
use super::throttle::Throttle;
use crate::admin::AdminConfig;
use crate::token::TokenDigest;

/// Who calls when the admin API has no token.
pub(super) const ANONYMOUS: &str = "anonymous";

/// The admin API's credentials and the guards around them.
#[derive(Debug)]
pub(crate) struct AdminAccess {
    /// The tokens (holder's name, digest) of which every endpoint but `/healthz` requires
    /// one; none configured, none required.
    tokens: Vec<(String, TokenDigest)>,
    /// The console's browser sessions.
    pub(super) sessions: Sessions,
    /// Failed token attempts per client.
    throttle: Throttle,
    /// The names the API answers to beside its own addresses.
    pub(super) hosts: AcceptedHosts,
}

impl AdminAccess {
    pub(crate) fn new(config: &AdminConfig) -> Self {
        AdminAccess {
            tokens: config.tokens(),
            sessions: Sessions::default(),
            throttle: Throttle::default(),
            hosts: AcceptedHosts::new(config),
        }
    }

    /// Whether no token is configured: every caller is [`ANONYMOUS`].
    pub(super) fn is_open(&self) -> bool {
        self.tokens.is_empty()
    }

    /// Who the caller of `request` from `client` is: the name of the configured token its
    /// `Authorization: Bearer` carries, or of the token that opened its console session, or
    /// [`ANONYMOUS`] when no token is configured; `None` when tokens are configured and it
    /// carries none of them. A bearer token that is none of them is a failed attempt: unless
    /// the path needs no credentials (`needs_credentials` false), its answer waits what the
    /// throttle says first.
    pub(super) async fn caller<B>(
        &self,
        request: &Request<B>,
        client: IpAddr,
        needs_credentials: bool,
    ) -> Option<String> {
        if self.is_open() {
            return Some(ANONYMOUS.to_owned());
        }
        let presented = request.headers().get(AUTHORIZATION).and_then(|v| v.to_str().ok());
        let bearer = presented.and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")));
        match bearer {
            Some(token) => self.check(token, client, needs_credentials).await,
            None => {
                let now = Instant::now();
                let cookies = request.headers().get_all(COOKIE).iter().filter_map(|value| value.to_str().ok());
                cookies.into_iter().find_map(|cookies| self.sessions.name(cookies, now))
            }
        }
    }

    /// The name of the configured token `token` is; when it is none, `None` after the wait
    /// the throttle gives `client` (when `throttled`). Every digest is compared, so the
    /// timing does not say which name matched.
    pub(super) async fn check(&self, token: &str, client: IpAddr, throttled: bool) -> Option<String> {
        let token = token.trim();
        let matched: Vec<&String> =
            self.tokens.iter().filter(|(_, digest)| digest.matches(token)).map(|(name, _)| name).collect();
        let name = matched.first().map(|name| (*name).clone());
        if name.is_none() && throttled {
            self.throttle.fail(client).await;
        }
        name
    }
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;
    use std::time::Duration;

    use super::*;
    use crate::admin::AdminToken;
    use crate::admin::throttle::{FIRST_WAIT, FREE_FAILURES};

    const LOOPBACK: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    fn access() -> AdminAccess {
        // `printf %s admin-secret | sha256sum`
        let sha256 = "16175223c8ddce5ace0493c948569c211b03c4c6bb3d3e484434999448cffe01".to_owned();
        AdminAccess::new(&AdminConfig {
            tokens: vec![AdminToken { name: "alice".to_owned(), sha256 }],
            ..AdminConfig::default()
        })
    }

    fn bearer(token: &str) -> Request<()> {
        Request::builder().header(AUTHORIZATION, format!("Bearer {token}")).body(()).expect("a request")
    }

    /// In paused time a wait is exact and anything that waits moves the clock, so a clock
    /// that did not move proves nothing waited.
    #[tokio::test(start_paused = true)]
    async fn wrong_tokens_wait_and_a_right_one_right_after_never_does() {
        let access = access();
        let start = tokio::time::Instant::now();
        for _ in 0..FREE_FAILURES {
            assert_eq!(access.caller(&bearer("guess"), LOOPBACK, true).await, None);
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert_eq!(access.caller(&bearer("guess"), LOOPBACK, true).await, None);
        assert_eq!(access.caller(&bearer("guess"), LOOPBACK, true).await, None);
        let slowed = start.elapsed();
        assert_eq!(slowed, FIRST_WAIT * 3, "250 ms, then 500 ms");

        // The same address, its count at its highest: the right token is answered at once.
        assert_eq!(access.caller(&bearer("admin-secret"), LOOPBACK, true).await.as_deref(), Some("alice"));
        assert_eq!(start.elapsed(), slowed, "the right token did not wait");
        // The console's login checks the same way.
        assert_eq!(access.check("admin-secret", LOOPBACK, true).await.as_deref(), Some("alice"));
        assert_eq!(start.elapsed(), slowed);
        assert_eq!(access.check("guess", LOOPBACK, true).await, None);
        assert_eq!(start.elapsed(), slowed + FIRST_WAIT * 4, "the 8th failure waits 1 s");
    }

    #[tokio::test(start_paused = true)]
    async fn no_credentials_and_open_paths_never_wait() {
        let access = access();
        let start = tokio::time::Instant::now();
        for _ in 0..20 {
            let bare = Request::builder().body(()).expect("a request");
            assert_eq!(access.caller(&bare, LOOPBACK, true).await, None, "no token is not a guess");
            assert_eq!(access.caller(&bearer("guess"), LOOPBACK, false).await, None, "/healthz needs none");
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
        let open = AdminAccess::new(&AdminConfig::default());
        assert_eq!(open.caller(&bearer("anything"), LOOPBACK, true).await.as_deref(), Some(ANONYMOUS));
    }
}
