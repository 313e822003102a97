//! What can go wrong at the proxy edge, by phase: [`StartError`] at start-up (CA, listen
//! address, decision log), [`TunnelError`] while an intercepted tunnel is set up (no HTTP
//! request exists yet, so nothing is answered), and [`ProxyError`] for one request (a bad
//! request target, an origin that cannot be reached), which always becomes a response.
//!
//! `ProxyError` is turned into a status and a plain body by `answer::error_response`, the only
//! place that does so; this file never writes a response.

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::tls::TlsError;

/// The longest method accepted, in bytes (the longest registered one, `UPDATEREDIRECTREF`,
/// has 17).
pub(crate) const MAX_METHOD_LEN: usize = 32;

/// Why the proxy could not start: out of `app::Proxy::new` and `app::Proxy::bind` (the
/// composition root, `crate::app`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// `[record]` could not be recorded to, or its recording read for `mode = "replay"`.
    #[error("{source}")]
    Record {
        /// What the recorder or the replay reported.
        source: crate::record::SessionError,
    },
    /// The CA could not be loaded from, or created in, `[ca] dir`.
    #[error("cannot use the CA in {}: {source}", dir.display())]
    Ca {
        /// The CA directory from the config.
        dir: PathBuf,
        /// What the TLS module reported.
        source: TlsError,
    },

    /// The upstream TLS client could not be built, usually because a file in
    /// `[upstream] extra_ca_files` is missing or not PEM.
    #[error("cannot build the upstream TLS client: {source}; check [upstream] extra_ca_files")]
    UpstreamClient {
        /// What the TLS module reported.
        source: TlsError,
    },

    /// `[upstream] parent` cannot be used: its URL, or its password's variable.
    #[error("{source}")]
    Parent {
        /// What is wrong, naming the key and the fix.
        source: super::parent::ParentSetupError,
    },

    /// The key of the minted leaf certificates could not be made.
    #[error("{source}")]
    LeafKey {
        /// What the TLS module reported.
        source: TlsError,
    },

    /// A signing agent's key could not be loaded or created (`signing` in `[agent]` / `[[agents]]`).
    #[error("{source}")]
    Signing {
        /// What the signing module reported, naming the file.
        source: crate::signing::KeyError,
    },

    /// The decision log could not be opened.
    #[error("cannot start the decision log: {source}")]
    Audit {
        /// What the audit module reported.
        source: crate::audit::AuditError,
    },

    /// The decision log's checkpoint signing key could not be loaded or created.
    #[error("cannot load the decision log's signing key ([audit] signing_key_file): {source}")]
    AuditKey {
        /// What the key loader reported.
        source: crate::signing::KeyError,
    },

    /// The shared policy store could not be set up (`[cache] store = "redis"`).
    #[error("cannot set up the shared policy store ([cache.redis]): {source}")]
    PolicyStore {
        /// What the Redis client setup reported.
        source: crate::redis_connection::ConnectError,
    },

    /// The fleet's approvals store could not be set up (`[approvals] store = "redis"`).
    #[error("cannot set up the fleet's approvals store ([approvals.redis]): {source}")]
    ApprovalsStore {
        /// What the Redis client setup reported.
        source: crate::redis_connection::ConnectError,
    },

    /// The limits store could not be set up (`[limits]`).
    #[error("cannot set up the limits store: {source}")]
    Limits {
        /// What the limits module reported.
        source: crate::redis_connection::ConnectError,
    },

    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}; choose a free address with `listen` in the config or --listen")]
    Bind {
        /// The address from `listen`.
        addr: SocketAddr,
        /// The operating system's error.
        source: io::Error,
    },

    /// The admin API's address could not be bound.
    #[error(
        "cannot listen on {addr} for the admin API: {source}; choose a free address with [admin] listen, or \"off\""
    )]
    AdminBind {
        /// The address from `[admin] listen`.
        addr: SocketAddr,
        /// The operating system's error.
        source: io::Error,
    },
    /// A `[transparent] listen` address could not be bound.
    #[error(
        "cannot listen on {addr} for transparent mode: {source}; choose a free address in [transparent] listen, or remove it"
    )]
    TransparentBind {
        /// The address from `[transparent] listen`.
        addr: SocketAddr,
        /// The operating system's error.
        source: io::Error,
    },
}

/// Why an intercepted tunnel could not be set up, before any request inside it: logged, never
/// answered (the client has no HTTP exchange to read an answer from).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TunnelError {
    /// The client rejected agentgate's certificate with a TLS alert (`unknown_ca`,
    /// `bad_certificate`, ...): it does not trust the CA. Logged at WARN: the operator can fix it.
    #[error(
        "the client rejected agentgate's certificate for {authority} ({cause}): install agentgate's CA in the client (agentgate ca export, or docker/trust-ca.sh), or add the host to [mitm] passthrough_hosts"
    )]
    ClientRejectedCertificate {
        /// The CONNECT target of the tunnel.
        authority: String,
        /// The alert the client sent.
        cause: String,
    },
    /// The client closed or reset the connection during the TLS handshake, without an alert:
    /// clients that give up, probe or open spare connections do this. Logged at DEBUG.
    #[error("the client hung up during the TLS handshake for {authority}: {cause}")]
    ClientHungUp {
        /// The CONNECT target of the tunnel.
        authority: String,
        /// The whole error chain.
        cause: String,
    },
    /// The client's side of an intercepted tunnel failed otherwise before any request: it
    /// sent nothing in time, or TLS it does not speak.
    #[error("TLS handshake with the client for {authority} failed: {cause}")]
    ClientHandshake {
        /// The CONNECT target of the tunnel.
        authority: String,
        /// The whole error chain.
        cause: String,
    },

    /// No leaf certificate could be minted for an intercepted host.
    #[error("cannot present a certificate for {host}: {source}")]
    LeafCertificate {
        /// The SNI name or CONNECT host.
        host: String,
        /// What the TLS module reported.
        source: TlsError,
    },
}

/// Why one request could not be completed; `answer::error_response` answers it with the status
/// its blame calls for.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// A request in origin-form (`GET /path`) reached the proxy port directly: this port only
    /// serves proxy requests.
    #[error(
        "this is a forward proxy, not a web server: got `{method} {target}`; send absolute-form requests (`GET http://host/path`) or `CONNECT host:port` here, for example by setting HTTP_PROXY/HTTPS_PROXY to this address"
    )]
    NotAProxyRequest {
        /// The request method.
        method: String,
        /// The request target as received.
        target: String,
    },

    /// An absolute-form request named a scheme other than `http` or `https`.
    #[error("cannot forward `{uri}`: only http:// and https:// URLs are proxied")]
    UnsupportedScheme {
        /// The request target as received.
        uri: String,
    },

    /// A method longer than `MAX_METHOD_LEN`: no HTTP method is, and a token that long is
    /// room for a credential. The method itself is not shown.
    #[error(
        "a method of {length} bytes: at most {MAX_METHOD_LEN} are accepted; send a standard method such as GET or POST"
    )]
    MethodTooLong {
        /// The method's length in bytes.
        length: usize,
    },

    /// A CONNECT request's target was not `host:port` (RFC 9110 §9.3.6).
    #[error("CONNECT needs a `host:port` target, got `{target}`; add the port, e.g. `CONNECT example.com:443`")]
    BadConnectTarget {
        /// The request target as received.
        target: String,
    },

    /// A request inside a CONNECT tunnel could not be turned into a URL on the tunnel's host,
    /// e.g. a nested CONNECT or `OPTIONS *`.
    #[error(
        "cannot forward `{method} {target}` inside the tunnel to {authority}: only requests for paths on that host are proxied"
    )]
    BadTunnelRequest {
        /// The request method.
        method: String,
        /// The request target as received.
        target: String,
        /// The CONNECT target of the tunnel.
        authority: String,
    },

    /// The origin's TLS certificate did not verify against the configured roots.
    #[error(
        "cannot verify the TLS certificate of {host}: {cause}; if the origin uses a private CA, add its PEM file to [upstream] extra_ca_files"
    )]
    UpstreamCertificate {
        /// The origin, `host:port`.
        host: String,
        /// The whole error chain.
        cause: String,
    },

    /// The network guard refused the destination at connect time (`crate::net`); nothing
    /// was dialled. Requests are normally refused earlier, with a 403 block answer.
    #[error("agentgate does not connect to {host}: {cause}")]
    DestinationRefused {
        /// The origin, `host:port`.
        host: String,
        /// The guard's reason.
        cause: String,
    },

    /// The origin's host name could not be resolved.
    #[error("cannot resolve {host}: {cause}")]
    UpstreamResolve {
        /// The origin, `host:port`.
        host: String,
        /// The whole error chain.
        cause: String,
    },

    /// The TCP connection to the origin failed (refused, unreachable, reset during TLS).
    #[error("cannot connect to {host}: {cause}")]
    UpstreamConnect {
        /// The origin, `host:port`.
        host: String,
        /// The whole error chain.
        cause: String,
    },

    /// Connecting to the origin took longer than `[upstream] connect_timeout`.
    #[error("timed out connecting to {host}: {cause}; the origin may be down or [upstream] connect_timeout too short")]
    UpstreamTimeout {
        /// The origin, `host:port`.
        host: String,
        /// The whole error chain.
        cause: String,
    },

    /// The client's request body failed while it was being forwarded: bad chunked framing,
    /// or the client hung up before sending all it announced. The client's fault, not the
    /// origin's.
    #[error(
        "the request body for {host} could not be read from the client: {cause}; send a complete, well-formed body (check Content-Length and chunked framing)"
    )]
    ClientBody {
        /// The origin, `host:port`.
        host: String,
        /// The whole error chain.
        cause: String,
    },

    /// No connection to the origin could be opened: agentgate was at its cap on connections
    /// to origins (`[upstream] max_connections`), every one busy, for the whole of
    /// `[upstream] connect_queue_timeout`. Nothing was sent; answered 503 with `Retry-After`.
    #[error(
        "cannot open a connection to {host}: {cause}; agentgate is at its cap on connections to origins, retry in a few seconds"
    )]
    UpstreamAtCapacity {
        /// The origin, `host:port`.
        host: String,
        /// The cap and how long the request waited.
        cause: String,
    },

    /// The answer of a host with secrets bound to it could not be read to take the secret
    /// values out of it (`crate::secrets`), so it is withheld.
    #[error(
        "the answer of {host} is withheld: {cause}; agentgate removes secrets from this host's answers, so it asks for the identity encoding (gzip and deflate, in any stack, it decodes within 8 MiB)"
    )]
    Unscrubbable {
        /// The origin, `host:port`.
        host: String,
        /// Why it could not be read.
        cause: String,
    },

    /// The parent proxy (`[upstream] parent`) could not be reached, or refused the `CONNECT`
    /// (a `407` included): nothing reached the origin. Names the parent, never its
    /// credentials.
    #[error("cannot connect to {host} through the parent proxy: {cause}")]
    Parent {
        /// The origin, `host:port`.
        host: String,
        /// The parent, what it answered and what to check.
        cause: String,
        /// True when the parent answered and refused; false when it could not be reached.
        refused: bool,
    },

    /// The origin was reached but the exchange failed (closed early, protocol error).
    #[error("request to {host} failed: {cause}")]
    Upstream {
        /// The origin, `host:port`.
        host: String,
        /// The whole error chain.
        cause: String,
    },
}

impl ProxyError {
    /// The reason code a failure is recorded with when it has one of its own: the parent
    /// proxy's refusal or absence, which an operator must tell from an origin's failure.
    pub(crate) fn code(&self) -> Option<crate::policy::OperatorCode> {
        match self {
            ProxyError::Parent { refused: true, .. } => Some(crate::policy::OperatorCode::ParentRefused),
            ProxyError::Parent { refused: false, .. } => Some(crate::policy::OperatorCode::ParentUnreachable),
            _ => None,
        }
    }
}

/// A request target as errors show it: redacted like `url.full` in the decision log (no user
/// info, no fragment, query values `REDACTED`), because errors are printed on stderr and
/// answered in 4xx bodies. Proven by e2e `redaction::no_secret_reaches_stderr_or_the_decision_log`.
pub(crate) fn shown_target(target: &impl std::fmt::Display) -> String {
    crate::audit::redact_url(&target.to_string(), false).full.into_owned()
}
