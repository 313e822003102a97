//! Browser sessions of the console: after a correct token at `POST /login`, a random 256-bit
//! id from the operating system's generator is set as an `HttpOnly; SameSite=Strict` cookie
//! and mapped here to the name of the token that opened it, for [`SESSION_LIFETIME`].
//!
//! Owns: making, finding and forgetting session ids, and the cookie's text. Never: checks a
//! token (`crate::token` does), keeps the token itself, or writes an id to a log.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use rand::TryRngCore;
use rand::rngs::OsRng;

/// The cookie's name.
pub(super) const COOKIE: &str = "agentgate_session";

/// How long a session lasts from login.
pub(super) const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 3600);

/// Sessions kept at once; a login past it forgets the session closest to expiry, so a
/// script logging in in a loop cannot grow the map.
pub(super) const MAX_SESSIONS: usize = 64;

/// A session id: 32 random bytes, written as 64 hex digits in the cookie.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct SessionId([u8; 32]);

/// The open sessions, each with the token name it acts as and when it expires.
#[derive(Default)]
pub(crate) struct Sessions {
    open: Mutex<HashMap<SessionId, (String, Instant)>>,
}

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the ids: they are the credentials.
        f.debug_struct("Sessions").finish_non_exhaustive()
    }
}

/// The operating system's random generator failed: no session can be made safely.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot draw a session id from the operating system's random generator: {0}; log in again, or use Authorization: Bearer"
)]
pub(super) struct NoRandomness(String);

impl Sessions {
    /// Opens a session acting as `name`, valid until `now + SESSION_LIFETIME`; returns the
    /// `Set-Cookie` value.
    ///
    /// # Errors
    /// [`NoRandomness`] when the OS generator fails.
    pub(super) fn open(&self, name: &str, now: Instant) -> Result<String, NoRandomness> {
        let mut id = [0u8; 32];
        OsRng.try_fill_bytes(&mut id).map_err(|err| NoRandomness(err.to_string()))?;
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|_, (_, expires)| *expires > now);
        if open.len() >= MAX_SESSIONS
            && let Some(oldest) = open.iter().min_by_key(|(_, (_, expires))| *expires).map(|(id, _)| *id)
        {
            open.remove(&oldest);
        }
        open.insert(SessionId(id), (name.to_owned(), now + SESSION_LIFETIME));
        Ok(format!(
            "{COOKIE}={}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}",
            hex::encode(id),
            SESSION_LIFETIME.as_secs()
        ))
    }

    /// The token name of the live session in the `Cookie` header `cookies`, if any.
    pub(super) fn name(&self, cookies: &str, now: Instant) -> Option<String> {
        let id = session_id(cookies)?;
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&id).filter(|(_, expires)| *expires > now).map(|(name, _)| name.clone())
    }

    /// Forgets the session in `cookies`; returns the `Set-Cookie` value that clears it.
    pub(super) fn close(&self, cookies: Option<&str>) -> String {
        if let Some(id) = cookies.and_then(session_id) {
            self.open.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
        }
        format!("{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0")
    }
}

/// The session id in a `Cookie` header, when it holds a well-formed one.
fn session_id(cookies: &str) -> Option<SessionId> {
    let value = cookies.split(';').find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))?;
    if value.len() != 64 {
        return None;
    }
    let bytes = hex::decode(value).ok()?;
    bytes.try_into().ok().map(SessionId)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cookie_pair(set_cookie: &str) -> String {
        set_cookie.split(';').next().expect("split yields at least one part").to_owned()
    }

    #[test]
    fn a_session_names_its_token_until_it_expires_or_is_closed() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let set = sessions.open("admin", now).expect("the OS generator works in tests");
        assert!(set.contains("HttpOnly") && set.contains("SameSite=Strict") && set.contains("Path=/"), "{set}");
        let cookie = format!("theme=dark; {}", cookie_pair(&set));
        assert_eq!(sessions.name(&cookie, now).as_deref(), Some("admin"));
        assert_eq!(sessions.name(&cookie, now + SESSION_LIFETIME), None, "expired after 12 h");
        assert!(sessions.close(Some(&cookie)).contains("Max-Age=0"));
        assert_eq!(sessions.name(&cookie, now), None, "closed by logout");
    }

    #[test]
    fn ids_are_random_and_malformed_cookies_name_nobody() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let a = cookie_pair(&sessions.open("admin", now).expect("random"));
        let b = cookie_pair(&sessions.open("admin", now).expect("random"));
        assert_ne!(a, b);
        assert_eq!(a.len(), COOKIE.len() + 1 + 64);
        for bad in ["", "agentgate_session=", "agentgate_session=zz", &format!("{COOKIE}={}", "0".repeat(64)), &a[1..]]
        {
            assert_eq!(sessions.name(bad, now), None, "{bad}");
        }
    }

    #[test]
    fn the_count_is_bounded() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let first = cookie_pair(&sessions.open("admin", now).expect("random"));
        for i in 1..=MAX_SESSIONS as u64 {
            sessions.open("admin", now + Duration::from_secs(i)).expect("random");
        }
        assert_eq!(sessions.open.lock().expect("not poisoned").len(), MAX_SESSIONS);
        assert_eq!(sessions.name(&first, now), None, "the session closest to expiry made room");
    }
}
