//! Which requests are addressed to the admin API: the guard against DNS rebinding. A page
//! the operator opens at `rebind.attacker.example:9090`, once that name resolves to
//! 127.0.0.1, is same-origin with the admin API in the browser, so the browser lets it read
//! the answers and post to it. What tells its requests apart is what the browser writes in
//! them: `Host` is the page's own name, and a write carries the page's `Origin`. So a request
//! is answered only when its `Host` is one the API is reached by, and a write whose `Origin`
//! is present only when that is the API's own origin (`docs/admin.md#dns-rebinding`).
//!
//! Owns: the accepted hosts (built once from `[admin] hosts`), the checks, and their answers
//! (`400` without a `Host`, `421` for another `Host`, `403` for another `Origin`). Never:
//! authenticates (`super::access`), resolves a name, or enumerates the host's interfaces
//! (the address a connection arrived on is the one it names).

use std::net::{IpAddr, SocketAddr};

use http::header::{HOST, ORIGIN};
use http::{Method, Request, Response, StatusCode, Version};

use super::answer::{AdminBody, error, text};
use super::config::host_and_port;
use crate::admin::AdminConfig;
use crate::net::host::canonical_ip;

/// Where one admin connection was accepted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Arrival {
    /// The address the admin listener is bound to (the real port when `listen` said 0).
    pub(crate) listen: SocketAddr,
    /// The local address the connection arrived on: one of the host's own addresses when
    /// `listen` is unspecified (`0.0.0.0`, `[::]`).
    pub(crate) local: SocketAddr,
    /// The client.
    pub(crate) peer: SocketAddr,
}

/// The names `[admin] hosts` adds to the listen address and loopback.
#[derive(Debug, Default)]
pub(crate) struct AcceptedHosts {
    /// Canonical host, and the port when the entry gave one (otherwise any port).
    names: Vec<(String, Option<u16>)>,
}

impl AcceptedHosts {
    pub(crate) fn new(config: &AdminConfig) -> Self {
        AcceptedHosts { names: config.host_names() }
    }

    /// Whether `authority` (`host[:port]`, `default_port` when it has none) names this API:
    /// `localhost`, a loopback address (any 127.x.x.x, `[::1]`), the listen address or the
    /// address the connection arrived on, each with the listener's port; or an `[admin] hosts`
    /// entry (its port, or any when it gave none).
    fn accepts(&self, authority: &str, default_port: u16, at: &Arrival) -> bool {
        let Some((host, port)) = host_and_port(authority) else { return false };
        let port = port.unwrap_or(default_port);
        if port == at.listen.port() {
            if host == "localhost" {
                return true;
            }
            if let Ok(ip) = host.parse::<IpAddr>() {
                let own = [at.listen.ip(), at.local.ip()].map(canonical_ip);
                if ip.is_loopback() || own.iter().any(|own| !own.is_unspecified() && *own == ip) {
                    return true;
                }
            }
        }
        self.names.iter().any(|(name, only)| *name == host && only.is_none_or(|only| only == port))
    }

    /// The answer to a request that is not addressed to this API, or `None` to go on: `400`
    /// for an HTTP/1.1 request without exactly one `Host`; `421` when its `Host` (or its
    /// absolute-form authority) is not accepted, `/healthz` aside; `403` for a `POST`, `PUT`,
    /// `PATCH` or `DELETE` whose `Origin` is present and is not `http://` or `https://` and
    /// an accepted host (`null` included).
    pub(super) fn refusal<B>(&self, request: &Request<B>, at: &Arrival) -> Option<Response<AdminBody>> {
        let hosts: Vec<_> = request.headers().get_all(HOST).iter().collect();
        let named = match (request.uri().authority(), hosts.as_slice()) {
            // Absolute form: the request line's authority is the target (RFC 9112 §3.2.2).
            (Some(authority), _) => Some(authority.as_str().to_owned()),
            (None, [host]) => Some(host.to_str().unwrap_or_default().to_owned()),
            (None, []) if request.version() <= Version::HTTP_10 => None,
            (None, _) => {
                let message = "an HTTP/1.1 request needs exactly one Host header (RFC 9112 §3.2)";
                return Some(error(StatusCode::BAD_REQUEST, None, message));
            }
        };
        // Liveness and readiness stay answerable by a probe that names the service its own way
        // (`Host: agentgate:9090` from another container); their answers are fixed words.
        if !matches!(request.uri().path(), "/healthz" | "/readyz")
            && let Some(named) = named
            && !self.accepts(&named, 80, at)
        {
            return Some(misdirected(&named, at));
        }
        let writes = [Method::POST, Method::PUT, Method::PATCH, Method::DELETE];
        let origins: Vec<_> = request.headers().get_all(ORIGIN).iter().collect();
        if writes.contains(request.method()) && !origins.is_empty() {
            let own = match origins.as_slice() {
                [origin] => origin.to_str().ok().is_some_and(|origin| self.is_own_origin(origin, at)),
                _ => false,
            };
            if !own {
                let message = "this admin API takes a write only from its own pages: the request's Origin \
                    is another site's (a page that is not the console cannot change anything here)";
                return Some(error(StatusCode::FORBIDDEN, None, message));
            }
        }
        None
    }

    /// Whether `origin` (as a browser serialises it: `scheme://host[:port]`) is this API's own.
    fn is_own_origin(&self, origin: &str, at: &Arrival) -> bool {
        let (authority, default_port) = if let Some(rest) = origin.strip_prefix("http://") {
            (rest, 80)
        } else if let Some(rest) = origin.strip_prefix("https://") {
            // A TLS terminator in front, reached by an `[admin] hosts` name.
            (rest, 443)
        } else {
            return false;
        };
        self.accepts(authority, default_port, at)
    }
}

/// `421 Misdirected Request` for a request whose `Host` names something else: plain text
/// saying which `Host` values are answered and which key adds one.
fn misdirected(named: &str, at: &Arrival) -> Response<AdminBody> {
    let port = at.listen.port();
    let shown: String = named.chars().take(100).collect();
    let mut accepted = vec![format!("localhost:{port}"), format!("127.0.0.1:{port} (or any 127.x.x.x)")];
    accepted.push(format!("[::1]:{port}"));
    let listen = canonical_ip(at.listen.ip());
    let local = canonical_ip(at.local.ip());
    if !listen.is_unspecified() && !listen.is_loopback() {
        accepted.push(SocketAddr::new(listen, port).to_string());
    }
    if local != listen && !local.is_loopback() {
        accepted.push(format!("{} (the address this connection arrived on)", SocketAddr::new(local, port)));
    }
    let body = format!(
        "421 Misdirected Request: this is agentgate's admin API, and it does not answer to Host {shown:?} \
         (a page on another name that resolves here must not reach it: DNS rebinding). It answers Host {}, \
         or a name listed in [admin] hosts. To reach it by another name, add that name to [admin] hosts, \
         e.g. hosts = [\"admin.internal\"], and restart.\n",
        accepted.join(", ")
    );
    text(StatusCode::MISDIRECTED_REQUEST, "text/plain; charset=utf-8", body)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arrival(listen: &str, local: &str) -> Arrival {
        let parse = |addr: &str| addr.parse::<SocketAddr>().expect("a socket address");
        Arrival { listen: parse(listen), local: parse(local), peer: parse("127.0.0.1:50000") }
    }

    fn names(entries: &[&str]) -> AcceptedHosts {
        let config = AdminConfig { hosts: entries.iter().map(|e| (*e).to_owned()).collect(), ..AdminConfig::default() };
        AcceptedHosts::new(&config)
    }

    fn request(method: Method, path: &str, host: Option<&str>, origin: Option<&str>) -> Request<()> {
        let mut builder = Request::builder().method(method).uri(path);
        if let Some(host) = host {
            builder = builder.header(HOST, host);
        }
        if let Some(origin) = origin {
            builder = builder.header(ORIGIN, origin);
        }
        builder.body(()).expect("a request")
    }

    #[test]
    fn loopback_names_and_the_listen_address_with_its_port_are_accepted() {
        let hosts = AcceptedHosts::default();
        let at = arrival("127.0.0.1:9090", "127.0.0.1:9090");
        for host in
            ["127.0.0.1:9090", "localhost:9090", "LOCALHOST.:9090", "127.0.0.2:9090", "[::1]:9090", "0x7f.1:9090"]
        {
            assert!(hosts.accepts(host, 80, &at), "{host}");
        }
        for host in [
            "rebind.attacker.example:9090",
            "127.0.0.1:9091",
            "localhost",
            "127.0.0.1",
            "localhost.attacker.example:9090",
            "0.0.0.0:9090",
            "[::1:9090",
            "",
            "user@127.0.0.1:9090",
        ] {
            assert!(!hosts.accepts(host, 80, &at), "{host}");
        }
        let on_80 = arrival("127.0.0.1:80", "127.0.0.1:80");
        assert!(hosts.accepts("localhost", 80, &on_80), "no port is port 80");
    }

    #[test]
    fn an_unspecified_listen_accepts_the_address_the_connection_arrived_on() {
        let hosts = AcceptedHosts::default();
        let at = arrival("0.0.0.0:9090", "192.0.2.7:9090");
        assert!(hosts.accepts("192.0.2.7:9090", 80, &at));
        assert!(!hosts.accepts("192.0.2.8:9090", 80, &at), "another interface's address, on this connection");
        assert!(!hosts.accepts("0.0.0.0:9090", 80, &at));
        let v6 = arrival("[::]:9090", "[::ffff:192.0.2.7]:9090");
        assert!(hosts.accepts("192.0.2.7:9090", 80, &v6), "an IPv4 client on a dual-stack listener");
        let specific = arrival("192.0.2.7:9090", "192.0.2.7:9090");
        assert!(hosts.accepts("192.0.2.7:9090", 80, &specific));
    }

    #[test]
    fn configured_names_are_accepted_with_their_port_or_any() {
        let hosts = names(&["Admin.Internal", "agentgate:9090"]);
        let at = arrival("0.0.0.0:9090", "172.17.0.2:9090");
        for host in ["admin.internal", "admin.internal:8443", "ADMIN.internal.:9090", "agentgate:9090"] {
            assert!(hosts.accepts(host, 80, &at), "{host}");
        }
        for host in ["agentgate", "agentgate:80", "other.internal:9090", "admin.internal.attacker.example"] {
            assert!(!hosts.accepts(host, 80, &at), "{host}");
        }
    }

    #[test]
    fn a_foreign_host_is_421_saying_what_is_accepted_and_healthz_is_exempt() {
        let hosts = AcceptedHosts::default();
        let at = arrival("0.0.0.0:9090", "192.0.2.7:9090");
        let foreign = request(Method::GET, "/approvals", Some("rebind.attacker.example:9090"), None);
        let refused = hosts.refusal(&foreign, &at).expect("refused");
        assert_eq!(refused.status(), StatusCode::MISDIRECTED_REQUEST);
        let body = format!("{:?}", refused.body());
        for expected in ["localhost:9090", "192.0.2.7:9090 (the address this connection arrived on)", "[admin] hosts"] {
            assert!(body.contains(expected), "{expected} in {body}");
        }
        let health = request(Method::GET, "/healthz", Some("agentgate:9090"), None);
        assert!(hosts.refusal(&health, &at).is_none());
        let absolute =
            request(Method::GET, "http://rebind.attacker.example:9090/approvals", Some("127.0.0.1:9090"), None);
        assert_eq!(hosts.refusal(&absolute, &at).map(|r| r.status()), Some(StatusCode::MISDIRECTED_REQUEST));
    }

    #[test]
    fn an_http_1_1_request_needs_one_host() {
        let hosts = AcceptedHosts::default();
        let at = arrival("127.0.0.1:9090", "127.0.0.1:9090");
        let missing = request(Method::GET, "/healthz", None, None);
        assert_eq!(hosts.refusal(&missing, &at).map(|r| r.status()), Some(StatusCode::BAD_REQUEST));
        let mut twice = request(Method::GET, "/healthz", Some("127.0.0.1:9090"), None);
        twice.headers_mut().append(HOST, http::HeaderValue::from_static("127.0.0.1:9090"));
        assert_eq!(hosts.refusal(&twice, &at).map(|r| r.status()), Some(StatusCode::BAD_REQUEST));
        let mut old = request(Method::GET, "/metrics", None, None);
        *old.version_mut() = Version::HTTP_10;
        assert!(hosts.refusal(&old, &at).is_none(), "HTTP/1.0 has no Host to check");
    }

    #[test]
    fn a_write_from_another_origin_is_403_and_from_its_own_goes_on() {
        let hosts = names(&["admin.internal"]);
        let at = arrival("127.0.0.1:9090", "127.0.0.1:9090");
        let host = Some("127.0.0.1:9090");
        for origin in ["http://127.0.0.1:9090", "http://localhost:9090", "https://admin.internal"] {
            let post = request(Method::POST, "/approvals/1", host, Some(origin));
            assert!(hosts.refusal(&post, &at).is_none(), "{origin}");
        }
        for origin in [
            "http://rebind.attacker.example:9090",
            "null",
            "http://127.0.0.1:9091",
            "https://127.0.0.1",
            "ftp://127.0.0.1:9090",
            "http://127.0.0.1:9090/path",
        ] {
            for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
                let write = request(method.clone(), "/approvals/1", host, Some(origin));
                assert_eq!(
                    hosts.refusal(&write, &at).map(|r| r.status()),
                    Some(StatusCode::FORBIDDEN),
                    "{method} {origin}"
                );
            }
            let read = request(Method::GET, "/approvals", host, Some(origin));
            assert!(hosts.refusal(&read, &at).is_none(), "a read is judged by its Host: {origin}");
        }
        let no_origin = request(Method::POST, "/approvals/1", host, None);
        assert!(hosts.refusal(&no_origin, &at).is_none(), "a client that is not a browser sends none");
    }
}
