//! The origin a policy cache entry belongs to: scheme, canonical host and port (RFC 6454,
//! SEMANTICS X5), and the URLs of its policy files. The host is the canonical host
//! (`crate::net::host`), so `127.1` and `0x7f.1` share one cache entry with `127.0.0.1`.

use std::fmt;

use http::Uri;
use http::uri::{Authority, PathAndQuery};

use crate::net::{HostError, canonical_host};
use crate::policy::FetchError;

/// `http` or `https`: the only schemes an origin of the proxy can have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scheme {
    /// Plain HTTP (default port 80).
    Http,
    /// HTTP over TLS (default port 443).
    Https,
}

impl Scheme {
    /// `http` or `https`.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }

    /// 80 or 443.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Http => 80,
            Scheme::Https => 443,
        }
    }
}

/// Why a request target does not name an origin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    /// The scheme is neither `http` nor `https`.
    #[error("`{uri}`: scheme `{scheme}` is not http or https, so it has no policy files")]
    UnsupportedScheme {
        /// The request target.
        uri: String,
        /// Its scheme.
        scheme: String,
    },
    /// The host is not a host name or an IP address.
    #[error("`{uri}`: {source}")]
    InvalidHost {
        /// The request target.
        uri: String,
        /// What is wrong with the host.
        source: HostError,
    },
    /// The URI has no scheme or no host (origin-form `/path`, or `host:port` alone).
    #[error("`{uri}` has no scheme and host; policies need an absolute URI such as https://example.com/")]
    NotAbsolute {
        /// The request target.
        uri: String,
    },
}

/// One origin: scheme, canonical host (IPv6 in brackets) and port (explicit or the
/// scheme's default). robots.txt, agents.txt and automation-preferences.txt are per origin
/// (RFC 9309 §2.3); AGENTS.md is fetched over HTTPS for the host (SEMANTICS C2). Displays
/// as `https://example.com:443`.
///
/// Held as that text, the host a part of it: one allocation per origin, and the limit keys
/// read the text where it is (a request some limit counts made it anew before).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Origin {
    scheme: Scheme,
    /// `scheme://host:port`.
    text: String,
    /// Where the host ends in `text` (it starts after `scheme://`).
    host_end: usize,
    port: u16,
}

impl Origin {
    /// The origin of a request's scheme and authority (the proxy has both for absolute-form
    /// requests and for MITM'd requests once it rebuilt their URI). User info is dropped.
    ///
    /// # Errors
    /// [`OriginError::UnsupportedScheme`] for anything but `http` and `https`;
    /// [`OriginError::InvalidHost`] when the host has no canonical form.
    pub fn from_parts(scheme: &http::uri::Scheme, authority: &Authority) -> Result<Self, OriginError> {
        // Compared in place: lowering a copy first cost every request an allocation.
        let scheme = match scheme.as_str() {
            s if s.eq_ignore_ascii_case("http") => Scheme::Http,
            s if s.eq_ignore_ascii_case("https") => Scheme::Https,
            other => {
                return Err(OriginError::UnsupportedScheme {
                    uri: format!("{scheme}://{authority}"),
                    scheme: other.to_ascii_lowercase(),
                });
            }
        };
        let host = canonical_host(authority.host())
            .map_err(|source| OriginError::InvalidHost { uri: format!("{}://{authority}", scheme.as_str()), source })?;
        let (open, close) = if host.contains(':') { ("[", "]") } else { ("", "") };
        let port = authority.port_u16().unwrap_or(scheme.default_port());
        let mut digits = itoa::Buffer::new();
        let pieces = [scheme.as_str(), "://", open, &host, close, ":", digits.format(port)];
        let mut text = String::with_capacity(pieces.iter().map(|piece| piece.len()).sum());
        pieces.iter().for_each(|piece| text.push_str(piece));
        let host_end = text.len() - 1 - pieces[6].len();
        Ok(Origin { scheme, text, host_end, port })
    }

    /// The origin of an absolute URI (`https://example.com/path`).
    ///
    /// # Errors
    /// [`OriginError::NotAbsolute`] without scheme or host; [`OriginError::UnsupportedScheme`]
    /// for schemes other than `http` and `https`.
    pub fn from_uri(uri: &Uri) -> Result<Self, OriginError> {
        match (uri.scheme(), uri.authority()) {
            (Some(scheme), Some(authority)) => Origin::from_parts(scheme, authority),
            _ => Err(OriginError::NotAbsolute { uri: uri.to_string() }),
        }
    }

    /// `http` or `https`.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// The canonical host; an IPv6 address keeps its brackets (`[::1]`).
    pub fn host(&self) -> &str {
        &self.text[self.scheme.as_str().len() + "://".len()..self.host_end]
    }

    /// The canonical host without an IPv6 address's brackets (`::1`): what the policy core
    /// and the limit keys name.
    pub fn bare_host(&self) -> &str {
        let host = self.host();
        host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host)
    }

    /// The port, explicit or the scheme's default.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `path` on this origin: `scheme://host:port/path`.
    pub(crate) fn url(&self, path: &'static str) -> Result<Uri, FetchError> {
        build_url(self.scheme, self.host(), self.port, path)
    }

    /// `path` over HTTPS for this host (SEMANTICS C2): the origin's own port when it is an
    /// https origin, else 443; never plain http.
    pub(crate) fn https_url(&self, path: &'static str) -> Result<Uri, FetchError> {
        let port = match self.scheme {
            Scheme::Https => self.port,
            Scheme::Http => Scheme::Https.default_port(),
        };
        build_url(Scheme::Https, self.host(), port, path)
    }
}

impl Origin {
    /// `scheme://host:port`, as `Display` writes it: what the limit keys name the origin by.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn build_url(scheme: Scheme, host: &str, port: u16, path: &'static str) -> Result<Uri, FetchError> {
    let authority = Authority::try_from(format!("{host}:{port}"))
        .map_err(|e| FetchError::Network(format!("{host}:{port} is not a valid authority: {e}")))?;
    Uri::builder()
        .scheme(scheme.as_str())
        .authority(authority)
        .path_and_query(PathAndQuery::from_static(path))
        .build()
        .map_err(|e| FetchError::Network(format!("cannot build the URL of {path} on {host}:{port}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origin(uri: &str) -> Origin {
        Origin::from_uri(&uri.parse().unwrap()).unwrap()
    }

    #[test]
    fn text_is_what_display_writes() {
        for uri in ["https://example.com/", "http://Example.COM:8080/x", "https://[::1]:8443/", "http://127.0.0.2/"] {
            let origin = origin(uri);
            assert_eq!(origin.text(), origin.to_string(), "{uri}");
            assert_eq!(origin.host_end, origin.text.rfind(':').expect("a port"), "{uri}");
            assert_eq!(origin.text(), format!("{}://{}:{}", origin.scheme().as_str(), origin.host(), origin.port()));
        }
    }

    #[test]
    fn default_ports_case_and_display() {
        assert_eq!(origin("https://Example.COM/x").to_string(), "https://example.com:443");
        assert_eq!(origin("http://example.com/").to_string(), "http://example.com:80");
        assert_eq!(origin("http://user@example.com:8080/").to_string(), "http://example.com:8080");
        assert_eq!(origin("https://[::1]:9443/").host(), "[::1]");
        assert_eq!(origin("https://example.com"), origin("https://example.com:443/other"));
    }

    #[test]
    fn one_cache_key_for_every_spelling() {
        for spelling in ["http://127.1/", "http://0x7f.1/", "http://2130706433/", "http://[::ffff:127.0.0.1]/"] {
            assert_eq!(origin(spelling).to_string(), "http://127.0.0.1:80", "{spelling}");
        }
        assert_eq!(origin("https://[0:0::1]/").host(), "[::1]");
        assert_eq!(origin("https://Example.com./").host(), "example.com");
    }

    #[test]
    fn non_origins_are_errors_naming_the_uri() {
        let err = Origin::from_uri(&"/robots.txt".parse().unwrap()).unwrap_err();
        assert!(err.to_string().contains("/robots.txt"), "{err}");
        let err = Origin::from_uri(&"ftp://example.com/".parse().unwrap()).unwrap_err();
        assert!(matches!(err, OriginError::UnsupportedScheme { .. }), "{err}");
        let err = Origin::from_uri(&"FTP://example.com/".parse().unwrap()).unwrap_err();
        assert!(matches!(&err, OriginError::UnsupportedScheme { scheme, .. } if scheme == "ftp"), "{err}");
    }

    #[test]
    fn the_scheme_is_read_in_any_case() {
        let upper = http::uri::Scheme::try_from("HTTPS").expect("a scheme");
        let authority = Authority::from_static("example.com");
        let origin = Origin::from_parts(&upper, &authority).expect("https in capitals");
        assert_eq!(origin.to_string(), "https://example.com:443");
        let mixed = http::uri::Scheme::try_from("hTTp").expect("a scheme");
        assert_eq!(Origin::from_parts(&mixed, &authority).expect("http").to_string(), "http://example.com:80");
    }

    #[test]
    fn c2_agents_md_url_is_https_on_443_for_an_http_origin() {
        let http = origin("http://example.com:8080/");
        assert_eq!(http.url("/robots.txt").unwrap().to_string(), "http://example.com:8080/robots.txt");
        assert_eq!(http.https_url("/AGENTS.md").unwrap().to_string(), "https://example.com:443/AGENTS.md");
        let https = origin("https://example.com:8443/");
        assert_eq!(https.https_url("/AGENTS.md").unwrap().to_string(), "https://example.com:8443/AGENTS.md");
    }
}
