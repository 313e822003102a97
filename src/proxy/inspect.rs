//! Phase `inspect` (`[inspect]`, docs/inspect.md): for a request to an inspected host from an
//! inspected agent (`InspectConfig::applies`, asked by the service), reads the body into memory up to `max_body` (a declared `Content-Length`
//! over it is not read at all), has `crate::inspect` scan the request, and hands the gate's
//! permit the report (`Permitted::check_request`): refused, the block is answered here;
//! permitted, the request goes on with the very bytes it was read with. The same read serves
//! `[[mcp]]` (`super::mcp`), so a body is read once. Every other request goes on untouched,
//! its body streamed as before.
//!
//! Never decides (the gate turns the report into a block), never logs a finding's value (a
//! finding holds none), and never buffers a body it was not asked to inspect.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http::Request;
use http::header::CONTENT_LENGTH;
use http::request::Parts;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use tracing::info;

use super::answer::Exit;
use super::body::{BodyError, ProxyBody};
use super::conn::Drain;
use super::context::{Generation, ProxyState, RequestContext};
use super::error::ProxyError;
use super::headers::is_upgrade_request;
use super::mcp::{AnswerFilter, check};
use super::record::RequestRecord;
use crate::error_chain::error_chain;
use crate::gate::Permitted;
use crate::inspect::{Body, Head, OnUnreadable};
use crate::mcp::Served;

/// A request to an `[inspect]` or `[[mcp]]` host and agent: its body read once, bounded,
/// for both phases (`inspect`, then `super::mcp::check`), and the request with the body it
/// will be forwarded with; the filter an MCP answer goes through, if it must.
///
/// # Errors
/// Either phase's block answer, or [`ProxyError::ClientBody`] when the client's body cannot
/// be read.
pub(crate) async fn vet_body(
    (state, live): (&Arc<ProxyState>, &Generation),
    record: &mut RequestRecord,
    permit: Permitted,
    request: Request<Incoming>,
    context: &RequestContext,
    vetting: Vetting<'_>,
    drain: Drain,
) -> Result<(Permitted, Request<ProxyBody>, Option<AnswerFilter>), Exit> {
    let mut read = ReadRequest::read(request, live.settings.inspect.max_body, context).await?;
    let permit = match vetting.inspected {
        true => inspect(live, record, permit, &read, context)?,
        false => permit,
    };
    let (permit, filter) = match vetting.mcp {
        Some(served) => check(state, live, record, permit, &mut read, served, drain).await?,
        None => (permit, None),
    };
    Ok((permit, read.into_request(), filter))
}

/// Which phases read the body of a request.
#[derive(Clone, Copy)]
pub(crate) struct Vetting<'a> {
    /// `[inspect]` applies.
    pub(crate) inspected: bool,
    /// An `[[mcp]]` table names the host.
    pub(crate) mcp: Option<Served<'a>>,
}

/// Phase `inspect`, for a request `[inspect]` applies to: `permit` checked against what the
/// request carries.
///
/// # Errors
/// The block answer (`inspect.secret_in_request`, `inspect.unreadable`).
#[expect(
    clippy::result_large_err,
    reason = "Exit is a phase's early return, moved once per request; boxing it would cost every blocked request an allocation"
)]
fn inspect(
    live: &Generation,
    record: &mut RequestRecord,
    permit: Permitted,
    read: &ReadRequest,
    context: &RequestContext,
) -> Result<Permitted, Exit> {
    let config = &live.settings.inspect;
    let parts = &read.parts;
    let path_and_query = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    // The secrets' real values, wherever they hide in a body bound for a host they are not for.
    let default_port = if context.scheme == http::uri::Scheme::HTTPS { 443 } else { 80 };
    let port = context.authority.port_u16().unwrap_or(default_port);
    let values = live.gate.secret_values_elsewhere(context.authority.host(), port);
    let secrets: Vec<(String, &str)> =
        values.iter().map(|(name, value)| (format!("secret {name}"), value.as_str())).collect();
    let head = Head { host: context.authority.host(), path_and_query, headers: &parts.headers, secrets: &secrets };
    let report = config.inspect(head, read.body());
    if !report.findings.is_empty() || report.unreadable.is_some() {
        // Detectors and places only: a finding holds no value.
        let found: Vec<String> = report.findings.iter().map(ToString::to_string).collect();
        let unreadable = report.unreadable.as_ref().map(ToString::to_string);
        info!(findings = ?found, unreadable, allow_unreadable = config.on_unreadable == OnUnreadable::Allow, "inspection");
    }
    permit.check_request(&report).map_err(|blocked| record.block(*blocked, &parts.headers))
}

/// A request whose body was read into memory up to a bound (or not at all: a declared
/// length over it, an upgrade), and the rest of its stream.
pub(crate) struct ReadRequest {
    /// The request's head.
    pub(crate) parts: Parts,
    read: Read,
    rest: Incoming,
}

impl ReadRequest {
    /// Reads `request`'s body up to `max_body` bytes (a declared `Content-Length` over it is
    /// not read at all, nor is an upgrade's).
    async fn read(request: Request<Incoming>, max_body: u64, context: &RequestContext) -> Result<Self, Exit> {
        let (parts, mut rest) = request.into_parts();
        let declared = parts.headers.get(CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        let read = if is_upgrade_request(parts.version, &parts.headers) {
            Read::Upgrade
        } else if declared.is_some_and(|length| length > max_body) {
            Read::Declared
        } else {
            read_bounded(&mut rest, max_body).await.map_err(|error| ProxyError::ClientBody {
                host: context.authority.to_string(),
                cause: error_chain(&error),
            })?
        };
        Ok(ReadRequest { parts, read, rest })
    }

    /// The body as inspection reads it.
    pub(crate) fn body(&self) -> Body<'_> {
        match &self.read {
            Read::Whole(bytes) => Body::Read(bytes),
            Read::Upgrade => Body::Upgrade,
            Read::Declared | Read::Over(_) => Body::TooLarge,
        }
    }

    /// The request, forwarded with the very bytes it was read with, then the rest.
    fn into_request(self) -> Request<ProxyBody> {
        let body = match self.read {
            Read::Whole(bytes) => Full::new(bytes).map_err(|never| match never {}).boxed_unsync(),
            Read::Over(prefix) => {
                Prefixed { prefix: Some(prefix), rest: self.rest }.map_err(BodyError::from).boxed_unsync()
            }
            Read::Declared | Read::Upgrade => self.rest.map_err(BodyError::from).boxed_unsync(),
        };
        Request::from_parts(self.parts, body)
    }
}

/// How much of a body was read.
enum Read {
    /// All of it, within `max_body`.
    Whole(Bytes),
    /// The first `max_body` bytes and a little more; the rest is still in the stream.
    Over(Bytes),
    /// None: its declared `Content-Length` is over `max_body`.
    Declared,
    /// None: a WebSocket upgrade.
    Upgrade,
}

/// Reads `body` to its end, or until more than `max_body` bytes came (trailers are dropped).
async fn read_bounded(body: &mut Incoming, max_body: u64) -> Result<Read, hyper::Error> {
    let mut read = BytesMut::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame?.into_data() {
            read.extend_from_slice(&data);
            if read.len() as u64 > max_body {
                return Ok(Read::Over(read.freeze()));
            }
        }
    }
    Ok(Read::Whole(read.freeze()))
}

/// A body whose first bytes were already read: those, then the rest of the stream.
struct Prefixed {
    prefix: Option<Bytes>,
    rest: Incoming,
}

impl HttpBody for Prefixed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        if let Some(prefix) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        Pin::new(&mut self.rest).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        let rest = self.rest.size_hint();
        let prefix = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + prefix);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + prefix);
        }
        hint
    }
}
