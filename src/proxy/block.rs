//! Every response agentgate writes itself instead of the origin: the CONNECT `200`, and the
//! one mapping from a [`ProxyError`] to a status and a plain-text body (pingora's blame rule:
//! the client's fault is 400, an unreachable origin 502, a slow one 504). The gate's 403/429
//! block responses (issue 4, DESIGN.md §6) belong here too.
//!
//! Never forwards anything; never decides whether a request is allowed.

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HeaderValue};
use http::{Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};

use super::ProxyBody;
use super::error::ProxyError;

/// The status an error is answered with.
pub(crate) fn status_for(error: &ProxyError) -> StatusCode {
    match error {
        ProxyError::NotAProxyRequest { .. }
        | ProxyError::UnsupportedScheme { .. }
        | ProxyError::BadConnectTarget { .. }
        | ProxyError::BadTunnelRequest { .. } => StatusCode::BAD_REQUEST,
        ProxyError::UpstreamCertificate { .. }
        | ProxyError::UpstreamResolve { .. }
        | ProxyError::UpstreamConnect { .. }
        | ProxyError::Upstream { .. } => StatusCode::BAD_GATEWAY,
        ProxyError::UpstreamTimeout { .. } => StatusCode::GATEWAY_TIMEOUT,
        // Start-up and tunnel-handshake errors never become a response; if one did, it
        // would be our bug.
        ProxyError::Ca { .. }
        | ProxyError::UpstreamClient { .. }
        | ProxyError::Bind { .. }
        | ProxyError::ClientHandshake { .. }
        | ProxyError::LeafCertificate { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

/// The response for `error`: its status and `agentgate: <message>` as the body, so an agent
/// (often an LLM) reading it learns what failed, on which host, and why.
pub(crate) fn error_response(error: &ProxyError) -> Response<ProxyBody> {
    let body = Full::new(Bytes::from(format!("agentgate: {error}\n"))).map_err(|never| match never {}).boxed_unsync();
    let mut response = Response::new(body);
    *response.status_mut() = status_for(error);
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    response
}

/// The `200` that opens a CONNECT tunnel: no body, no content length (RFC 9110 §9.3.6).
pub(crate) fn tunnel_established() -> Response<ProxyBody> {
    Response::new(Empty::new().map_err(|never| match never {}).boxed_unsync())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blame_picks_the_status() {
        let host = || "example.test:443".to_owned();
        let cause = || "cause".to_owned();
        assert_eq!(status_for(&ProxyError::BadConnectTarget { target: "x".into() }), StatusCode::BAD_REQUEST);
        assert_eq!(status_for(&ProxyError::UpstreamConnect { host: host(), cause: cause() }), StatusCode::BAD_GATEWAY);
        assert_eq!(
            status_for(&ProxyError::UpstreamTimeout { host: host(), cause: cause() }),
            StatusCode::GATEWAY_TIMEOUT
        );
    }

    #[test]
    fn certificate_failures_name_host_and_cause() {
        let error = ProxyError::UpstreamCertificate { host: "example.test:443".into(), cause: "UnknownIssuer".into() };
        let response = error_response(&error);
        assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
        assert!(error.to_string().starts_with("cannot verify the TLS certificate of example.test:443: UnknownIssuer"));
    }
}
