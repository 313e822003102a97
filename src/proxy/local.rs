//! `http://agentgate.local/`: the one host agentgate answers itself, as mitmproxy answers
//! `mitm.it`, so a container bootstraps its trust with one command through the proxy
//! (`curl -x http://agentgate:8080 http://agentgate.local/ca.pem`): `/ca.pem` is the CA
//! certificate, `/` a short page of instructions per client.
//!
//! Checked right after the request is routed, before the network guard, the gate and any
//! DNS: the name is never resolved and nothing is forwarded (test
//! `e2e::admin::agentgate_local_serves_the_ca_without_any_lookup_or_dial`). Each answer is
//! recorded as an `allow` with reason `operator.served_locally` (docs/admin.md).
//!
//! Never: forwards, resolves, or answers any other host.

use http::header::ALLOW;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::ProxyBody;
use super::block::body_response;
use super::context::{ProxyState, RequestContext};
use super::service::record;
use crate::audit::{DecisionRecord, Outcome};
use crate::policy::{Reason, Source};

/// The host agentgate answers itself.
pub(crate) const LOCAL_HOST: &str = "agentgate.local";

/// The reason code every local answer is recorded with.
const SERVED_LOCALLY: &str = "operator.served_locally";

/// The answer when `context` routes to [`LOCAL_HOST`] over plain HTTP, recorded; `None` for
/// every other request, which goes on through the phases.
pub(crate) async fn answer(
    state: &ProxyState,
    context: &RequestContext,
    request: &Request<Incoming>,
) -> Option<Response<ProxyBody>> {
    let host = context.authority.host().trim_end_matches('.');
    if !host.eq_ignore_ascii_case(LOCAL_HOST) || context.scheme != http::uri::Scheme::HTTP {
        return None;
    }
    let path = request.uri().path();
    let method = request.method();
    let mut response = if method != Method::GET && method != Method::HEAD {
        let mut response = body_response(format!("{LOCAL_HOST} answers GET and HEAD only\n"), TEXT);
        *response.status_mut() = StatusCode::METHOD_NOT_ALLOWED;
        response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        response
    } else if path == "/ca.pem" {
        body_response(state.certs.ca_cert_pem().to_owned(), "application/x-pem-file")
    } else if path == "/" {
        body_response(INSTRUCTIONS.to_owned(), TEXT)
    } else {
        let mut response = body_response(format!("{LOCAL_HOST} serves / and /ca.pem only\n"), TEXT);
        *response.status_mut() = StatusCode::NOT_FOUND;
        response
    };
    if method == Method::HEAD {
        *response.body_mut() = body_response(String::new(), TEXT).into_body();
    }
    let url = format!("http://{LOCAL_HOST}{}", request.uri().path_and_query().map_or("/", |p| p.as_str()));
    // Proxy credentials are not needed to fetch a public certificate; the agent is named
    // when it sent them, else by its address, as the gate names it.
    let agent = state
        .gate
        .identify_agent(context.client, method.as_str(), &url, request.headers())
        .map_or_else(|_| context.client.ip().to_string(), |identity| identity.id.to_string());
    let mut decision =
        DecisionRecord::new(Outcome::Allow, state.config.mode, context.client, agent, method.as_str(), url);
    decision.reasons.push(Reason::new(
        Source::Operator,
        SERVED_LOCALLY,
        "agentgate.local is answered by agentgate itself (its CA and setup instructions); never forwarded",
    ));
    record(state, decision, context.started, Ok(response.status())).await;
    Some(response)
}

const TEXT: &str = "text/plain; charset=utf-8";

/// The page at `http://agentgate.local/`.
const INSTRUCTIONS: &str = "\
agentgate: trust this proxy's CA so that HTTPS through it works
================================================================

Set PROXY to agentgate's address as your container reaches it, e.g.
  export PROXY=http://agentgate:8080

1. Fetch the CA (this page's host is answered by agentgate itself; no DNS needed):
  curl -fsS -x \"$PROXY\" http://agentgate.local/ca.pem -o /usr/local/share/ca-certificates/agentgate.crt

2. Trust it system-wide:
  Debian/Ubuntu:  update-ca-certificates
  Alpine:         apk add ca-certificates && update-ca-certificates

3. Point each client at the proxy and the bundle:
  export http_proxy=\"$PROXY\" https_proxy=\"$PROXY\" HTTP_PROXY=\"$PROXY\" HTTPS_PROXY=\"$PROXY\"
  curl:             export CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
                    (curl reads lower-case http_proxy only)
  Python requests:  export REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
  Python (ssl, httpx, aiohttp): export SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
  Node:             export NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/agentgate.crt
                    (built-in fetch ignores proxy variables: use undici's EnvHttpProxyAgent)
  git:              export GIT_SSL_CAINFO=/etc/ssl/certs/ca-certificates.crt

NO_PROXY=localhost,127.0.0.1 sends local requests past agentgate: they are not gated.
";
