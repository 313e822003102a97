//! The admin API's answers and what every handler reads a request with: the small full body
//! of every answer but the live stream ([`AdminBody`]), text, JSON and JSON-error answers,
//! query parameters checked with errors that name the parameter ([`Query`],
//! [`BadParameter`]), and a request body read whole, bounded in bytes and time
//! ([`read_body`]).
//!
//! Never: routes a request or decides who may call (`super::routes`, `super::access`).

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use serde_json::{Value, json};

/// The body of every admin answer but the live stream.
pub(super) type AdminBody = Full<Bytes>;

/// A query parameter at fault: answered `400` with a JSON error naming it.
#[derive(Debug)]
pub(super) struct BadParameter {
    name: String,
    message: String,
}

impl BadParameter {
    pub(super) fn new(name: &str, message: String) -> Self {
        BadParameter { name: name.to_owned(), message }
    }

    pub(super) fn response(self) -> Response<AdminBody> {
        error(StatusCode::BAD_REQUEST, Some(&self.name), &self.message)
    }
}

/// The query parameters of one request, percent-decoded; each name at most once.
pub(super) struct Query(Vec<(String, String)>);

impl Query {
    pub(super) fn parse(query: Option<&str>, known: &[&str]) -> Result<Query, BadParameter> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        for (name, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            if !known.contains(&&*name) {
                let expected = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
                let message = format!("unknown parameter {name:?}; this endpoint reads: {expected}");
                return Err(BadParameter::new(&name, message));
            }
            if pairs.iter().any(|(seen, _)| *seen == name) {
                return Err(BadParameter::new(&name, format!("{name} is given more than once")));
            }
            pairs.push((name.into_owned(), value.into_owned()));
        }
        Ok(Query(pairs))
    }

    /// The value of `name`, if given.
    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The value of `name`, or a 400 naming it when it is missing or empty.
    pub(super) fn required(&self, name: &str, example: &str) -> Result<&str, BadParameter> {
        match self.get(name) {
            Some(value) if !value.is_empty() => Ok(value),
            _ => Err(BadParameter::new(name, format!("{name} is required, e.g. {name}={example}"))),
        }
    }
}

/// How long a client may take to send a request body once its head has arrived: a local
/// process that sends a head and never the body must not hold an admin connection (the API
/// has 64) for longer than it may take to send the head (`server::HEADER_READ_TIMEOUT`).
pub(super) const BODY_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Why a request body was not read.
#[derive(Debug, thiserror::Error)]
pub(super) enum BodyError {
    /// Over the endpoint's bound (declared or sent).
    #[error("the body is over {0} bytes")]
    TooLarge(usize),
    /// Not all sent within [`BODY_READ_TIMEOUT`].
    #[error("the body did not arrive within {}s", BODY_READ_TIMEOUT.as_secs())]
    Slow,
    /// The connection failed while it was read.
    #[error("cannot read the body: {0}")]
    Broken(String),
}

impl BodyError {
    /// The status to answer with: `413`, `408` or `400`.
    pub(super) fn status(&self) -> StatusCode {
        match self {
            BodyError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            BodyError::Slow => StatusCode::REQUEST_TIMEOUT,
            BodyError::Broken(_) => StatusCode::BAD_REQUEST,
        }
    }
}

/// Reads a request body whole, bounded in bytes (`max`, the declared `Content-Length`
/// checked first) and in time ([`BODY_READ_TIMEOUT`]). The one way an admin endpoint reads a
/// body (test `admin::routes::tests::a_body_that_never_arrives_is_given_up_on`).
pub(super) async fn read_body<B>(headers: &http::HeaderMap, body: B, max: usize) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let declared =
        headers.get(http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|length| length > max as u64) {
        return Err(BodyError::TooLarge(max));
    }
    match tokio::time::timeout(BODY_READ_TIMEOUT, Limited::new(body, max).collect()).await {
        Err(_) => Err(BodyError::Slow),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
        Ok(Err(cause)) if cause.downcast_ref::<LengthLimitError>().is_some() => Err(BodyError::TooLarge(max)),
        Ok(Err(cause)) => Err(BodyError::Broken(cause.to_string())),
    }
}

/// A `status` answer with `body` of `content_type`.
pub(super) fn text(status: StatusCode, content_type: &'static str, body: String) -> Response<AdminBody> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

/// A JSON answer.
pub(super) fn json_response(status: StatusCode, body: &Value) -> Response<AdminBody> {
    text(status, "application/json", body.to_string())
}

/// A JSON error: `{"error": message, "parameter": name}` (the parameter when one is at fault).
pub(super) fn error(status: StatusCode, parameter: Option<&str>, message: &str) -> Response<AdminBody> {
    let body = match parameter {
        Some(parameter) => json!({"error": message, "parameter": parameter}),
        None => json!({"error": message}),
    };
    json_response(status, &body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_never_arrives_is_given_up_on() {
        // A head that promises 10 bytes, and a body whose sender never sends them.
        let (_sender, body) = http_body_util::channel::Channel::<Bytes, std::io::Error>::new(1);
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from_static("10"));
        let read = read_body(&headers, body, 4096).await;
        assert!(matches!(read, Err(BodyError::Slow)), "{read:?}");
        assert_eq!(read.map_err(|e| e.status()).err(), Some(StatusCode::REQUEST_TIMEOUT));
    }

    #[tokio::test]
    async fn a_body_over_its_bound_is_refused_declared_or_sent() {
        let mut headers = http::HeaderMap::new();
        headers.insert(http::header::CONTENT_LENGTH, HeaderValue::from_static("5000"));
        let declared = read_body(&headers, Full::new(Bytes::from_static(b"{}")), 4096).await;
        assert!(matches!(declared, Err(BodyError::TooLarge(4096))), "{declared:?}");
        let sent = read_body(&http::HeaderMap::new(), Full::new(Bytes::from(vec![b'x'; 5000])), 4096).await;
        assert!(matches!(sent, Err(BodyError::TooLarge(4096))), "{sent:?}");
        let fine = read_body(&http::HeaderMap::new(), Full::new(Bytes::from_static(b"{}")), 4096).await;
        assert_eq!(fine.ok(), Some(Bytes::from_static(b"{}")));
    }
}
