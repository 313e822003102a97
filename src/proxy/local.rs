//! `http://agentgate.local/`: the one host agentgate answers itself, as mitmproxy answers
//! `mitm.it`, so a container bootstraps its trust with one command through the proxy
//! (`curl -x http://agentgate:8080 http://agentgate.local/ca.pem`): `/ca.pem` is the CA
//! certificate, `/` a short page of instructions per client. Absolute-form requests and
//! requests inside a CONNECT tunnel to it (plain HTTP, or TLS with a minted certificate) are
//! answered alike.
//!
//! Checked right after the request is routed, before the network guard, the gate and any
//! DNS: the name is never resolved and nothing is forwarded (test
//! `e2e::admin::agentgate_local_serves_the_ca_without_any_lookup_or_dial`). Each answer is
//! recorded as an `allow` with reason `operator.served_locally` (docs/admin.md).
//!
//! Never: forwards, resolves, or answers any other host.

use http::header::{ALLOW, CONTENT_LENGTH};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;

use super::answer::body_response;
use super::body::ProxyBody;
use super::context::{ProxyState, RequestContext};
use super::record::RequestRecord;
use crate::audit::{DecisionRecord, Outcome};
use crate::policy::{OperatorCode, Reason};

/// The host agentgate answers itself.
pub(crate) const LOCAL_HOST: &str = "agentgate.local";

/// Whether `host` (as routed: the absolute URI's, or the CONNECT target's) is [`LOCAL_HOST`].
pub(crate) fn is_local(host: &str) -> bool {
    host.trim_end_matches('.').eq_ignore_ascii_case(LOCAL_HOST)
}

/// The answer to a request that `context` routes to [`LOCAL_HOST`] ([`is_local`]; absolute-form,
/// or inside a tunnel to it); its record becomes the request's.
pub(crate) fn answer(
    state: &ProxyState,
    record: &mut RequestRecord,
    context: &RequestContext,
    request: &Request<Incoming>,
) -> Response<ProxyBody> {
    let path = request.uri().path();
    let method = request.method();
    let (status, body, content_type) = if method != Method::GET && method != Method::HEAD {
        (StatusCode::METHOD_NOT_ALLOWED, format!("{LOCAL_HOST} answers GET and HEAD only\n"), TEXT)
    } else if path == "/ca.pem" {
        (StatusCode::OK, state.certs.ca_cert_pem().to_owned(), "application/x-pem-file")
    } else if path == "/" {
        (StatusCode::OK, INSTRUCTIONS.to_owned(), TEXT)
    } else {
        (StatusCode::NOT_FOUND, format!("{LOCAL_HOST} serves / and /ca.pem only\n"), TEXT)
    };
    // A length, not chunks: the simplest clients (a shell script's `curl -o`) read it whole.
    let length = HeaderValue::from(body.len());
    let body = if method == Method::HEAD { String::new() } else { body };
    let mut response = body_response(body, content_type);
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_LENGTH, length);
    if status == StatusCode::METHOD_NOT_ALLOWED {
        response.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    let path_and_query = request.uri().path_and_query().map_or("/", |p| p.as_str());
    let url = format!("{}://{LOCAL_HOST}{path_and_query}", context.scheme);
    // Proxy credentials are not needed to fetch a public certificate; the agent is named
    // when it sent them, else by its address, as the gate names it.
    let live = state.generation();
    let agent = live
        .gate
        .identify_agent(context.client, method.as_str(), &url, request.headers())
        .map_or_else(|_| context.client.ip().to_string(), |identity| identity.id.to_string());
    let mut decision =
        DecisionRecord::new(Outcome::Allow, live.settings.mode, context.client, agent, method.as_str(), url);
    decision.reasons.push(Reason::new(
        OperatorCode::ServedLocally,
        "agentgate.local is answered by agentgate itself (its CA and setup instructions); never forwarded",
    ));
    record.decided(decision);
    response
}

const TEXT: &str = "text/plain; charset=utf-8";

/// The page at `http://agentgate.local/`.
const INSTRUCTIONS: &str = "\
agentgate: trust this proxy's CA so that HTTPS through it works
================================================================

Set PROXY to agentgate's address as your container reaches it, e.g.
  export PROXY=http://agentgate:8080

1. Fetch the CA (this page's host is answered by agentgate itself; no DNS needed):
  curl -fsS -x \"$PROXY\" http://agentgate.local/ca.pem -o /usr/local/share/ca-certificates/agentgate-ca.crt

2. Trust it system-wide:
  Debian/Ubuntu:  update-ca-certificates
  Alpine:         apk add ca-certificates && update-ca-certificates

3. Point each client at the proxy and the bundle:
  export http_proxy=\"$PROXY\" https_proxy=\"$PROXY\" HTTP_PROXY=\"$PROXY\" HTTPS_PROXY=\"$PROXY\"
  curl:             export CURL_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
                    (curl reads lower-case http_proxy only)
  Python requests:  export REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
  Python (ssl, httpx, aiohttp): export SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
  Node:             export NODE_EXTRA_CA_CERTS=/usr/local/share/ca-certificates/agentgate-ca.crt
                    (built-in fetch ignores proxy variables: use undici's EnvHttpProxyAgent)
  git:              export GIT_SSL_CAINFO=/etc/ssl/certs/ca-certificates.crt
  wget:             echo ca_certificate=/usr/local/share/ca-certificates/agentgate-ca.crt >> ~/.wgetrc
                    (Debian's wget ignores SSL_CERT_FILE)
  Chromium:         mkdir -p ~/.pki/nssdb && certutil -d sql:$HOME/.pki/nssdb -A -t C,, -n agentgate \\
                      -i /usr/local/share/ca-certificates/agentgate-ca.crt
                    chromium --proxy-server=\"$PROXY\" --proxy-bypass-list='<-loopback>' \\
                      --no-first-run --disable-background-networking --disable-component-update --disable-sync
                    (the last four flags cut most of Chromium's own traffic to Google; set
                    allow_hosts on the agent for the rest; as root add --no-sandbox)
                    (certutil is in libnss3-tools; without <-loopback> Chromium sends localhost,
                    127.0.0.0/8 and link-local addresses straight to the site, past agentgate)

NO_PROXY=localhost,127.0.0.1 sends local requests past agentgate: they are not gated.
";
