//! The parent proxy (`[upstream] parent`): where the only way out is a corporate proxy,
//! every connection to an origin is a `CONNECT` through it, and agentgate speaks to the
//! origin inside that tunnel exactly as it would over a direct socket (its own TLS with the
//! original name as SNI and `Host`, so MITM is unchanged and the parent sees a tunnel).
//! Plain HTTP goes the same way: an absolute-form request to the vetted address would have
//! the parent rewrite `Host` to that address (Squid does), and one path keeps the pool, the
//! cap and the guard alike for both schemes (docs/upstream.md, "Through a parent proxy").
//!
//! Owns: the `[upstream] parent*` keys checked (`problems`), the credentials read from
//! `parent_password_env` once at start, which hosts `parent_bypass` sends directly, and the
//! `CONNECT` exchange itself. The guarded connector (`resolve`) asks it for a tunnel only
//! after the network guard vetted the destination, and names the vetted address
//! (`parent_connect = "address"`, the default) or the name (`"name"`).
//!
//! Never: vets a destination (the guard did), opens a socket outside the budget (the
//! connector holds the permit), or shows the credentials: errors name the parent as
//! `host:port` only.

use std::io;
use std::net::SocketAddr;

use base64::Engine as _;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::config::{ParentConnect, UpstreamConfig};
use crate::net::{Dial, canonical_host, canonical_pattern, is_host_pattern};
use crate::policy::operator::host_matches;

/// The most bytes of the parent's answer to a `CONNECT` read before giving up on it.
const MAX_ANSWER_HEAD: usize = 8 * 1024;

/// The parent proxy of a running proxy, its credentials read (never shown: its `Debug`
/// leaves them out).
pub(crate) struct Parent {
    /// The host to dial, without brackets.
    host: String,
    port: u16,
    /// `host:port` as errors show it (brackets kept for IPv6).
    shown: String,
    /// `Basic <base64(user:password)>` when a user is configured.
    authorization: Option<String>,
    /// `parent_bypass`, canonical.
    bypass: Vec<String>,
    connect: ParentConnect,
}

/// Why the parent proxy could not be used at start.
#[derive(Debug, thiserror::Error)]
pub enum ParentSetupError {
    /// `parent_password_env` names a variable that is not set.
    #[error(
        "[upstream] parent_password_env = {name:?}: the environment variable is not set; set it to the parent proxy's password or remove the key"
    )]
    PasswordEnv {
        /// The variable's name.
        name: String,
    },
    /// `parent` is not usable (also reported by `agentgate config check`).
    #[error("{0}")]
    Url(String),
}

/// Why no tunnel through the parent opened. Never names the credentials.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ParentError {
    /// The parent could not be resolved or connected to.
    #[error("the parent proxy {parent} ([upstream] parent) cannot be reached: {cause}")]
    Unreachable {
        /// The parent, `host:port`.
        parent: String,
        /// The whole cause.
        cause: String,
    },
    /// The parent answered the `CONNECT` with something other than 2xx, or not HTTP.
    #[error("the parent proxy {parent} ([upstream] parent) refused CONNECT {target}: {answer}; {hint}")]
    Refused {
        /// The parent, `host:port`.
        parent: String,
        /// What was asked for: the vetted address or the name, with the port.
        target: String,
        /// The parent's status line, cleaned.
        answer: String,
        /// What to check.
        hint: &'static str,
    },
}

impl ParentError {
    /// True for a parent that answered and refused; false for one that could not be reached.
    pub(crate) fn refused(&self) -> bool {
        matches!(self, ParentError::Refused { .. })
    }
}

impl std::fmt::Debug for Parent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parent")
            .field("parent", &self.shown)
            .field("authorization", &self.authorization.as_ref().map(|_| "REDACTED"))
            .field("bypass", &self.bypass)
            .field("connect", &self.connect)
            .finish()
    }
}

impl Parent {
    /// The parent of `config`, or `None` without `[upstream] parent`.
    ///
    /// # Errors
    /// [`ParentSetupError`] when the URL is unusable or the password's variable is not set.
    pub(crate) fn from_config(config: &UpstreamConfig) -> Result<Option<Parent>, ParentSetupError> {
        let Some(text) = &config.parent else { return Ok(None) };
        let url = parse(text).map_err(ParentSetupError::Url)?;
        let authorization = match (&url.user, &config.parent_password_env) {
            (Some(user), Some(name)) => {
                let password = std::env::var(name).map_err(|_| ParentSetupError::PasswordEnv { name: name.clone() })?;
                let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
                Some(format!("Basic {token}"))
            }
            _ => None,
        };
        Ok(Some(Parent {
            shown: url.shown,
            host: url.host,
            port: url.port,
            authorization,
            bypass: config.parent_bypass.iter().map(|p| canonical_pattern(p)).collect(),
            connect: config.parent_connect,
        }))
    }

    /// Whether connections to `host` go through the parent (it is not in `parent_bypass`).
    pub(crate) fn routes(&self, host: &str) -> bool {
        let host = canonical_host(host).unwrap_or_else(|_| host.to_ascii_lowercase().into());
        !self.bypass.iter().any(|pattern| host_matches(pattern, &host))
    }

    /// A tunnel through the parent to `host:port`, whose vetted addresses are `vetted`: one
    /// `CONNECT` per vetted address in turn until one opens (`parent_connect = "address"`),
    /// or one naming `host` (`"name"`). A `407` ends the attempts: the next address would
    /// get the same answer.
    ///
    /// # Errors
    /// The last [`ParentError`].
    pub(crate) async fn tunnel(
        &self,
        dialer: &dyn Dial,
        host: &str,
        port: u16,
        vetted: &[SocketAddr],
    ) -> Result<TcpStream, ParentError> {
        if self.connect == ParentConnect::Name {
            return self.connect_to(dialer, &format!("{host}:{port}")).await;
        }
        let mut last = ParentError::Unreachable { parent: self.shown.clone(), cause: "no address to ask for".into() };
        for addr in vetted {
            match self.connect_to(dialer, &addr.to_string()).await {
                Ok(stream) => return Ok(stream),
                Err(error @ ParentError::Refused { hint: AUTH_HINT, .. }) => return Err(error),
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    /// One `CONNECT target` on a new connection to the parent.
    async fn connect_to(&self, dialer: &dyn Dial, target: &str) -> Result<TcpStream, ParentError> {
        let unreachable = |cause: String| ParentError::Unreachable { parent: self.shown.clone(), cause };
        let mut stream = self.dial(dialer).await.map_err(|error| unreachable(error.to_string()))?;
        let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
        if let Some(authorization) = &self.authorization {
            head.push_str("Proxy-Authorization: ");
            head.push_str(authorization);
            head.push_str("\r\n");
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await.map_err(|error| unreachable(error.to_string()))?;
        let (answer, more) = read_head(&mut stream).await.map_err(|error| unreachable(error.to_string()))?;
        let refused = |answer: String, hint| ParentError::Refused {
            parent: self.shown.clone(),
            target: target.to_owned(),
            answer,
            hint,
        };
        match status_of(&answer) {
            Some((status, line)) if (200..300).contains(&status) => {
                if more {
                    // A tunnel's first bytes come from the origin only after agentgate speaks.
                    return Err(refused(line, "it sent bytes after its answer, so the tunnel cannot be trusted"));
                }
                Ok(stream)
            }
            Some((407, line)) => Err(refused(line, AUTH_HINT)),
            Some((_, line)) => Err(refused(line, RULES_HINT)),
            None => Err(refused("an answer that is not HTTP/1.x".into(), RULES_HINT)),
        }
    }

    /// A TCP connection to the parent: its name resolved by the system (the parent is the
    /// operator's, not a destination the guard vets), each address tried in turn.
    async fn dial(&self, dialer: &dyn Dial) -> io::Result<TcpStream> {
        let mut last = io::Error::new(io::ErrorKind::NotFound, format!("{} has no address", self.host));
        for addr in tokio::net::lookup_host((self.host.as_str(), self.port)).await? {
            match dialer.dial(addr).await {
                Ok(stream) => return Ok(stream),
                Err(error) => last = error,
            }
        }
        Err(last)
    }
}

/// What to check after a `407`.
const AUTH_HINT: &str =
    "check the user in [upstream] parent and the password in the variable [upstream] parent_password_env names";
/// What to check after any other refusal.
const RULES_HINT: &str = "the parent's rules refuse this destination or it cannot reach it; ask its operator, or list the host in [upstream] parent_bypass if it may be reached directly";

/// Reads the parent's answer head, up to its blank line, and whether more bytes came with it
/// (a refusal's body).
async fn read_head(stream: &mut TcpStream) -> io::Result<(String, bool)> {
    let mut head = Vec::with_capacity(256);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the parent closed the connection"));
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok((String::from_utf8_lossy(&head[..end]).into_owned(), end + 4 != head.len()));
        }
        if head.len() > MAX_ANSWER_HEAD {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "the parent's answer head is over 8 KiB"));
        }
    }
}

/// The status of an answer head and its status line (printable ASCII, at most 120 bytes).
fn status_of(head: &str) -> Option<(u16, String)> {
    let line = head.lines().next()?;
    let mut parts = line.splitn(3, ' ');
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let status = parts.next()?.parse().ok()?;
    let shown: String = line.chars().filter(|c| c.is_ascii_graphic() || *c == ' ').take(120).collect();
    Some((status, shown))
}

/// `[upstream] parent`, parsed.
struct ParentUrl {
    host: String,
    port: u16,
    shown: String,
    user: Option<String>,
}

/// Parses `[upstream] parent`; the error names the key, the problem and the fix.
fn parse(text: &str) -> Result<ParentUrl, String> {
    let problem = |why: &str| format!("[upstream] parent = {:?}: {why}", redacted(text));
    let url = url::Url::parse(text)
        .map_err(|error| problem(&format!("not a URL ({error}); write e.g. \"http://proxy.corp.example:3128\"")))?;
    if url.scheme() != "http" {
        return Err(problem(
            "the scheme must be http (agentgate sends CONNECT to the parent in plain HTTP and its own TLS inside the tunnel); write e.g. \"http://proxy.corp.example:3128\"",
        ));
    }
    if url.password().is_some() {
        return Err(problem(
            "a password in the URL; keep only the user (http://user@host:port) and put the password in the environment variable named by [upstream] parent_password_env",
        ));
    }
    if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
        return Err(problem("a path, query or fragment; write only http://[user@]host:port"));
    }
    let (host, shown_host) = match url.host() {
        Some(url::Host::Domain(name)) => (name.to_owned(), name.to_owned()),
        Some(url::Host::Ipv4(ip)) => (ip.to_string(), ip.to_string()),
        Some(url::Host::Ipv6(ip)) => (ip.to_string(), format!("[{ip}]")),
        None => return Err(problem("no host; write e.g. \"http://proxy.corp.example:3128\"")),
    };
    let port = url.port_or_known_default().unwrap_or(80);
    if url.username().contains('%') {
        return Err(problem(
            "a user with characters that need percent-encoding; use a user name of letters, digits, `.`, `_` and `-`",
        ));
    }
    let user = (!url.username().is_empty()).then(|| url.username().to_owned());
    Ok(ParentUrl { host, port, shown: format!("{shown_host}:{port}"), user })
}

/// `text` with anything after `:` in its user info hidden, for error messages.
fn redacted(text: &str) -> String {
    match url::Url::parse(text) {
        Ok(mut url) if url.password().is_some() => {
            let _ = url.set_password(Some("REDACTED"));
            url.to_string()
        }
        _ => text.to_owned(),
    }
}

/// Problems in the `[upstream] parent*` keys, each naming the key, its value and the fix.
pub(crate) fn problems(config: &UpstreamConfig, problems: &mut Vec<String>) {
    let Some(text) = &config.parent else {
        let set = [
            ("parent_password_env", config.parent_password_env.is_some()),
            ("parent_bypass", !config.parent_bypass.is_empty()),
            ("parent_connect", config.parent_connect != ParentConnect::Address),
        ];
        for (key, _) in set.iter().filter(|(_, set)| *set) {
            problems.push(format!(
                "[upstream] {key} is set but [upstream] parent is not: it would have no effect; set parent = \"http://host:port\" or remove {key}"
            ));
        }
        return;
    };
    let user = match parse(text) {
        Ok(url) => url.user,
        Err(problem) => {
            problems.push(problem);
            None
        }
    };
    match (&user, &config.parent_password_env) {
        (None, Some(name)) => problems.push(format!(
            "[upstream] parent_password_env = {name:?}: [upstream] parent names no user; write the user in the URL (http://user@host:port) or remove parent_password_env"
        )),
        (Some(user), None) => problems.push(format!(
            "[upstream] parent names the user {user:?} but no password: set parent_password_env to the name of the environment variable holding it"
        )),
        (_, Some(name)) if name.is_empty() || name.contains(['=', '\0']) => problems.push(format!(
            "[upstream] parent_password_env = {name:?}: not an environment variable name; write e.g. \"PARENT_PROXY_PASSWORD\""
        )),
        _ => {}
    }
    for pattern in &config.parent_bypass {
        if !is_host_pattern(pattern) {
            problems.push(format!(
                "[upstream] parent_bypass entry {pattern:?}: not a host name or `*.suffix`; write e.g. \"intranet.example\" or \"*.corp.example\" (no scheme, port or path)"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems_of(edit: impl FnOnce(&mut UpstreamConfig)) -> Vec<String> {
        let mut config = UpstreamConfig::default();
        edit(&mut config);
        let mut found = Vec::new();
        problems(&config, &mut found);
        found
    }

    #[test]
    fn parent_urls_are_checked_and_never_show_a_password() {
        assert!(problems_of(|c| c.parent = Some("http://proxy.test:3128".into())).is_empty());
        let https = problems_of(|c| c.parent = Some("https://proxy.test:3128".into()));
        assert!(https[0].contains("the scheme must be http"), "{https:?}");
        let password = problems_of(|c| c.parent = Some("http://agent:hunter2@proxy.test:3128".into()));
        assert!(password.iter().any(|p| p.contains("parent_password_env")), "{password:?}");
        assert!(password.iter().all(|p| !p.contains("hunter2")), "{password:?}");
        let path = problems_of(|c| c.parent = Some("http://proxy.test:3128/x".into()));
        assert!(path[0].contains("path"), "{path:?}");
    }

    #[test]
    fn parent_keys_without_a_parent_or_a_user_are_refused() {
        let inert = problems_of(|c| c.parent_bypass = vec!["a.test".into()]);
        assert!(inert[0].contains("parent_bypass is set but [upstream] parent is not"), "{inert:?}");
        let no_user = problems_of(|c| {
            c.parent = Some("http://proxy.test:3128".into());
            c.parent_password_env = Some("P".into());
        });
        assert!(no_user[0].contains("names no user"), "{no_user:?}");
        let no_password = problems_of(|c| c.parent = Some("http://agent@proxy.test:3128".into()));
        assert!(no_password[0].contains("no password"), "{no_password:?}");
        let bad_bypass = problems_of(|c| {
            c.parent = Some("http://proxy.test:3128".into());
            c.parent_bypass = vec!["http://a.test/".into()];
        });
        assert!(bad_bypass[0].contains("parent_bypass entry"), "{bad_bypass:?}");
    }

    #[test]
    fn bypassed_hosts_are_matched_canonically() {
        let config = UpstreamConfig {
            parent: Some("http://[::1]:3128".into()),
            parent_bypass: vec!["*.corp.test".into(), "127.0.0.1".into()],
            ..UpstreamConfig::default()
        };
        let parent = Parent::from_config(&config).expect("no env needed").expect("a parent");
        assert_eq!(parent.shown, "[::1]:3128");
        assert!(!parent.routes("wiki.CORP.test"));
        assert!(!parent.routes("0x7f.1"));
        assert!(parent.routes("corp.test"));
        assert!(parent.routes("example.test"));
    }

    #[test]
    fn an_unset_password_variable_stops_the_start_naming_it() {
        let config = UpstreamConfig {
            parent: Some("http://agent@proxy.test:3128".into()),
            parent_password_env: Some("AGENTGATE_UNIT_TEST_UNSET_PARENT_PASSWORD".into()),
            ..UpstreamConfig::default()
        };
        let error = Parent::from_config(&config).expect_err("the variable is not set");
        let message = error.to_string();
        assert!(message.contains("AGENTGATE_UNIT_TEST_UNSET_PARENT_PASSWORD"), "{message}");
        assert!(message.contains("is not set"), "{message}");
    }

    #[test]
    fn status_lines_are_read_and_cleaned() {
        assert_eq!(status_of("HTTP/1.1 200 Connection established").map(|s| s.0), Some(200));
        let (status, line) = status_of("HTTP/1.0 407 Auth\u{7}\r\nX: y").expect("a status");
        assert_eq!((status, line.as_str()), (407, "HTTP/1.0 407 Auth"));
        assert_eq!(status_of("SSH-2.0-x"), None);
    }
}
