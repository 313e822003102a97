//! Fetching one policy file: agentgate's own `User-Agent`, up to [`MAX_REDIRECTS`]
//! redirects resolved against the current URL, HTTPS kept for AGENTS.md, the body streamed
//! up to the format's cap plus one byte, one timeout over all of it, and one tracing line.
//! The result is a [`FetchOutcome`] for the format's `from_fetch`, plus the response's
//! freshness lifetime; nothing here reads the body or gives a status a meaning. Its line is
//! at `debug`: a load's files are told at `info` in one line (`fetch::cache`).
//!
//! Revalidation (RFC 9111 §4.3): given the stored copy of the file, the request carries its
//! validators (`If-None-Match` from `ETag`, `If-Modified-Since` from `Last-Modified`); a
//! `304 Not Modified` then hands back the stored copy with the 304's headers merged in
//! (§4.3.4), its lifetime computed from those merged headers, and no body read.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::header::{self, HeaderValue};
use http::{HeaderMap, Request, Uri};
use http_body_util::BodyExt;
use tokio::time::Instant;

use super::file::{MAX_REDIRECTS, PolicyFile};
use super::freshness::TtlBounds;
use super::transport::{PolicyBody, PolicyTransport};
use super::{Origin, USER_AGENT};
use crate::error_chain::error_chain;
use crate::policy::{FetchError, FetchOutcome, Headers};

/// How long a fetch refused at agentgate's cap on connections to origins
/// ([`FetchError::AtCapacity`]) stands: requests queued behind the load share its answer
/// rather than each waiting for a connection again; the next request after it fetches again.
const AT_CAPACITY_TTL: Duration = Duration::from_secs(1);

/// One fetched file: what the format's `from_fetch` takes, and how long it is fresh.
#[derive(Debug)]
pub(crate) struct Fetched {
    /// The response after redirects, or why there is none; after a `304` to a conditional
    /// request, the stored copy with the 304's headers merged in.
    pub(crate) outcome: FetchOutcome,
    /// RFC 9111 freshness, floored and capped ([`TtlBounds`]).
    pub(crate) ttl: Duration,
    /// True when the origin answered `304 Not Modified` to the stored copy's validators:
    /// `outcome` is that copy, its body unchanged.
    pub(crate) not_modified: bool,
}

/// The transport plus the limits every fetch obeys.
pub(crate) struct Fetcher {
    pub(crate) transport: Arc<dyn PolicyTransport>,
    /// For the whole fetch of one file: every redirect and the body.
    pub(crate) timeout: Duration,
    pub(crate) ttl: TtlBounds,
}

/// A final response, read.
struct Answer {
    url: Uri,
    request: Request<()>,
    head: http::response::Parts,
    body: Vec<u8>,
    over_cap: bool,
}

impl Fetcher {
    /// Fetches `file` from `origin`; never fails (a failure is [`FetchOutcome::Failed`]).
    /// With `stored`, the copy kept from the last fetch, the request is conditional on its
    /// validators when it has any ([`Fetched::not_modified`]).
    pub(crate) async fn fetch(&self, origin: &Origin, file: PolicyFile, stored: Option<&FetchOutcome>) -> Fetched {
        let started = Instant::now();
        let conditions = stored.map(conditions).unwrap_or_default();
        let conditional = !conditions.is_empty();
        let result = match file.url(origin) {
            Ok(url) => tokio::time::timeout(self.timeout, self.follow(file, url, conditions))
                .await
                .unwrap_or(Err(FetchError::Timeout)),
            Err(error) => Err(error),
        };
        let ms = started.elapsed().as_millis() as u64;
        match (result, stored) {
            (Ok(answer), Some(FetchOutcome::Response { status, headers: stored_headers, body, over_cap }))
                if conditional && answer.head.status == http::StatusCode::NOT_MODIFIED =>
            {
                let mut head = answer.head;
                head.headers = merge_headers(stored_headers, &head.headers);
                head.status = http::StatusCode::from_u16(*status).unwrap_or(http::StatusCode::OK);
                let ttl = self.ttl.lifetime(&answer.request, &head, SystemTime::now());
                tracing::debug!(
                    origin = %origin, file = file.path(), url = %answer.url, status = 304, bytes = 0, ttl_s = ttl.as_secs(), ms,
                    "policy file not modified; the stored copy is fresh again"
                );
                let outcome = FetchOutcome::Response {
                    status: *status,
                    headers: policy_headers(&head.headers),
                    body: body.clone(),
                    over_cap: *over_cap,
                };
                Fetched { outcome, ttl, not_modified: true }
            }
            (Ok(answer), _) => {
                let ttl = self.ttl.lifetime(&answer.request, &answer.head, SystemTime::now());
                tracing::debug!(
                    origin = %origin, file = file.path(), url = %answer.url, status = answer.head.status.as_u16(),
                    bytes = answer.body.len(), over_cap = answer.over_cap, ttl_s = ttl.as_secs(), ms,
                    "policy file fetched"
                );
                let outcome = FetchOutcome::Response {
                    status: answer.head.status.as_u16(),
                    headers: policy_headers(&answer.head.headers),
                    body: answer.body,
                    over_cap: answer.over_cap,
                };
                Fetched { outcome, ttl, not_modified: false }
            }
            (Err(error), _) => {
                let ttl = match error {
                    // agentgate's own cap, not the origin's answer: kept only long enough for
                    // the requests waiting on this load to share it, then fetched again.
                    // Likewise the parent proxy's failure: the origin was never asked.
                    FetchError::AtCapacity { .. } | FetchError::Parent { .. } => AT_CAPACITY_TTL,
                    _ => self.ttl.failed(),
                };
                tracing::debug!(
                    origin = %origin, file = file.path(), error = %error, bytes = 0, ttl_s = ttl.as_secs(), ms,
                    "policy file fetch failed"
                );
                Fetched { outcome: FetchOutcome::Failed(error), ttl, not_modified: false }
            }
        }
    }

    /// GETs `url`, following redirects, and reads the final body up to the cap.
    async fn follow(&self, file: PolicyFile, mut url: Uri, conditions: HeaderMap) -> Result<Answer, FetchError> {
        let mut headers = conditions;
        headers.insert(header::USER_AGENT, HeaderValue::from_static(USER_AGENT));
        for hop in 0..=MAX_REDIRECTS {
            let response = self.transport.get(url.clone(), headers.clone()).await.map_err(|error| match error {
                // The origin answered with a redirect: a target that cannot be reached does
                // not make the origin unreachable.
                FetchError::Unreachable { cause, .. } if hop > 0 => FetchError::Network(cause),
                error => error,
            })?;
            let location = response.headers().get(header::LOCATION).filter(|_| file.follows(response.status()));
            if let Some(location) = location {
                if hop == MAX_REDIRECTS {
                    return Err(FetchError::TooManyRedirects);
                }
                let next = resolve_location(&url, location)?;
                if file.https_only() && next.scheme() != Some(&http::uri::Scheme::HTTPS) {
                    return Err(FetchError::InsecureRedirect);
                }
                tracing::debug!(from = %url, to = %next, status = response.status().as_u16(), "policy file redirected");
                url = next;
                continue;
            }
            let (head, body) = response.into_parts();
            let (body, over_cap) = read_capped(body, file.max_bytes(), &url).await?;
            let mut request = Request::new(());
            *request.uri_mut() = url.clone();
            *request.headers_mut() = headers;
            return Ok(Answer { url, request, head, body, over_cap });
        }
        Err(FetchError::TooManyRedirects)
    }
}

/// The conditional request headers for a stored copy (RFC 9110 §13.1): `If-None-Match`
/// with its `ETag`, `If-Modified-Since` with its `Last-Modified`; none for a failure or a
/// copy without validators (or with values that are not valid header values).
fn conditions(stored: &FetchOutcome) -> HeaderMap {
    let mut conditions = HeaderMap::new();
    let FetchOutcome::Response { headers, .. } = stored else { return conditions };
    for (validator, condition) in
        [(header::ETAG, header::IF_NONE_MATCH), (header::LAST_MODIFIED, header::IF_MODIFIED_SINCE)]
    {
        if let Some(value) = headers.get(validator.as_str()).and_then(|v| HeaderValue::from_str(v).ok()) {
            conditions.insert(condition, value);
        }
    }
    conditions
}

/// The stored copy's headers updated with those of a `304` (RFC 9111 §3.2, §4.3.4): each
/// field the 304 carries replaces the stored field of that name, except the framing fields
/// that describe the 304's own (empty) body.
fn merge_headers(stored: &Headers, not_modified: &HeaderMap) -> HeaderMap {
    let mut merged = HeaderMap::new();
    for (name, value) in stored.iter() {
        if let (Ok(name), Ok(value)) = (header::HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            merged.append(name, value);
        }
    }
    let framing = [header::CONTENT_LENGTH, header::TRANSFER_ENCODING, header::CONTENT_ENCODING, header::CONTENT_RANGE];
    for name in not_modified.keys().filter(|name| !framing.contains(name)) {
        merged.remove(name);
        for value in not_modified.get_all(name) {
            merged.append(name.clone(), value.clone());
        }
    }
    merged
}

/// Reads at most `cap + 1` bytes: enough to know the body is over the cap, never more
/// buffered. The rest is not read (the connection is dropped with the body).
async fn read_capped(mut body: PolicyBody, cap: usize, url: &Uri) -> Result<(Vec<u8>, bool), FetchError> {
    let mut bytes = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| FetchError::Network(format!("{url}: reading the body: {}", error_chain(&e))))?;
        let Ok(data) = frame.into_data() else { continue };
        let room = cap + 1 - bytes.len();
        if data.len() >= room {
            bytes.extend_from_slice(&data[..room]);
            return Ok((bytes, true));
        }
        bytes.extend_from_slice(&data);
    }
    Ok((bytes, false))
}

/// Response headers as the policy core sees them; a value that is not visible ASCII is
/// decoded lossily rather than dropped.
fn policy_headers(headers: &HeaderMap) -> Headers {
    Headers::new(
        headers
            .iter()
            .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
            .collect(),
    )
}

/// The absolute URL a `Location` names, resolved against `base` (RFC 9110 §10.2.2,
/// RFC 3986 §5.2): absolute, scheme-relative (`//host/p`), absolute-path or relative-path,
/// with dot segments removed and any fragment dropped.
///
/// # Errors
/// [`FetchError::Network`] naming both URLs when the result is not an http(s) URL.
pub(crate) fn resolve_location(base: &Uri, location: &HeaderValue) -> Result<Uri, FetchError> {
    let text = String::from_utf8_lossy(location.as_bytes());
    let invalid = |why: &str| FetchError::Network(format!("{base} redirected to {text:?}: {why}"));
    let reference = text.trim().split('#').next().unwrap_or("");
    let scheme = base.scheme_str().unwrap_or("https");
    let authority = base.authority().map(|a| a.as_str()).unwrap_or("");
    let absolute = if reference.starts_with("//") {
        format!("{scheme}:{reference}")
    } else if has_scheme(reference) {
        reference.to_owned()
    } else {
        let (path, query) = match reference.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (reference, None),
        };
        let merged = if path.is_empty() {
            base.path().to_owned()
        } else if path.starts_with('/') {
            path.to_owned()
        } else {
            let dir = base.path().rsplit_once('/').map_or("", |(dir, _)| dir);
            format!("{dir}/{path}")
        };
        let query = match query {
            Some(query) => Some(query),
            None if path.is_empty() => base.query(),
            None => None,
        };
        let mut target = crate::policy::path::remove_dot_segments(&merged);
        if let Some(query) = query {
            target.push('?');
            target.push_str(query);
        }
        format!("{scheme}://{authority}{target}")
    };
    let uri: Uri = absolute.parse().map_err(|_| invalid("not a valid URL"))?;
    match (uri.scheme_str(), uri.authority()) {
        (Some("http" | "https"), Some(_)) => Ok(uri),
        _ => Err(invalid("not an http or https URL")),
    }
}

/// True when `reference` starts with `scheme:` (RFC 3986 §3.1).
fn has_scheme(reference: &str) -> bool {
    let Some((scheme, _)) = reference.split_once(':') else { return false };
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(base: &str, location: &str) -> Result<String, FetchError> {
        resolve_location(&base.parse().unwrap(), &HeaderValue::from_str(location).unwrap()).map(|u| u.to_string())
    }

    #[test]
    fn rfc3986_reference_resolution() {
        let base = "https://example.com:443/a/b/robots.txt?x=1";
        assert_eq!(resolve(base, "https://other.example/r.txt").unwrap(), "https://other.example/r.txt");
        assert_eq!(resolve(base, "//cdn.example/r.txt").unwrap(), "https://cdn.example/r.txt");
        assert_eq!(resolve(base, "/robots.txt").unwrap(), "https://example.com:443/robots.txt");
        assert_eq!(resolve(base, "c.txt").unwrap(), "https://example.com:443/a/b/c.txt");
        assert_eq!(resolve(base, "../c.txt?y").unwrap(), "https://example.com:443/a/c.txt?y");
        assert_eq!(resolve(base, "./").unwrap(), "https://example.com:443/a/b/");
        assert_eq!(resolve(base, "?z=2").unwrap(), "https://example.com:443/a/b/robots.txt?z=2");
        assert_eq!(resolve(base, "/x#frag").unwrap(), "https://example.com:443/x");
    }

    #[test]
    fn non_http_locations_are_errors_naming_both_urls() {
        let err = resolve("https://example.com/robots.txt", "ftp://example.com/robots.txt").unwrap_err();
        assert!(err.to_string().contains("https://example.com/robots.txt"), "{err}");
        assert!(err.to_string().contains("ftp://"), "{err}");
        assert!(resolve("https://example.com/robots.txt", "https://exa mple.com/").is_err());
    }
}
