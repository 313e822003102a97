//! Phase `mcp` (`[[mcp]]`, docs/mcp.md): for a request to a host an `[[mcp]]` table names,
//! whose body `super::inspect` read (bounded by `[inspect] max_body`), has `crate::mcp` read
//! its JSON-RPC messages and rule each `tools/call`, records what it is (`agentgate.mcp.*`),
//! and hands the gate's permit the refusals (`Permitted::check_mcp`): a refused call is
//! answered here with a JSON-RPC error (`200`, the session goes on), a body that cannot be
//! read or ruled with `413` or `400`. A call `unlisted_tools = "hold"` holds waits in the
//! approvals queue (`super::hold::ask`) with its tool and redacted arguments: approved, it
//! goes on; denied or timed out, it gets the JSON-RPC error. A `tools/list` is forwarded with `Accept-Encoding:
//! identity`, and its answer (JSON, or each event of an event stream; and each event of a
//! `GET` stream, where the older HTTP+SSE transport answers) loses the refused tools on its
//! way back ([`AnswerFilter`]). On the older transport, whose client reads every answer on
//! its `GET` stream, a refused call's error is delivered on that stream (`streams`) and its
//! `POST` answered `202`.
//!
//! Never decides (the gate's permit does), never logs a call's arguments unless its table
//! says so (then redacted), never the session id (a digest of it).

mod streams;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::SystemTime;

use bytes::{Bytes, BytesMut};
use http::header::{ACCEPT_ENCODING, CONTENT_ENCODING, CONTENT_LENGTH, CONTENT_TYPE, HeaderValue};
use http::{Method, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::{Body as HttpBody, Frame};
use sha2::{Digest, Sha256};

use super::answer::Exit;
use super::body::{BodyError, Cut, ProxyBody};
use super::conn::Drain;
use super::context::{Generation, ProxyState};
use super::hold::ask;
use super::inspect::ReadRequest;
use super::record::RequestRecord;
use crate::approvals::{ApprovalMode, Held, HeldRule};
use crate::audit::{McpFields, redact_url};
use crate::gate::Permitted;
use crate::inspect::Body;
use crate::mcp::{EventFilter, McpTable, Messages, Refusal, Served, filter_json, may_carry_calls, unreadable_answer};
use crate::policy::{OperatorCode, Reason};
pub(crate) use streams::OpenStreams;
use streams::{StreamKey, Tap};

/// The most bytes of a JSON `tools/list` answer held to filter it (8 MiB); a longer one is cut.
const MAX_ANSWER: usize = 8 * 1024 * 1024;

/// Phase `mcp`: `permit` checked against the `tools/call`s in `read`'s body, by `served`'s
/// table, and the request's record given its MCP fields.
///
/// # Errors
/// The answer of a refused call (a JSON-RPC error), or of a body that cannot be ruled.
pub(crate) async fn check(
    state: &Arc<ProxyState>,
    live: &Generation,
    record: &mut RequestRecord,
    mut permit: Permitted,
    read: &mut ReadRequest,
    served: Served<'_>,
    drain: Drain,
) -> Result<(Permitted, Option<AnswerFilter>), Exit> {
    let session = read.parts.headers.get("mcp-session-id").map(|id| session_digest(id.as_bytes()));
    let mut fields = McpFields { session, ..McpFields::default() };
    // A `GET` stream or a `DELETE` carries no JSON-RPC of the agent's; a `GET` stream may
    // carry `tools/list` answers (the older HTTP+SSE transport answers every request there).
    if read.parts.method != Method::POST {
        permit.set_mcp(fields);
        let get = read.parts.method == Method::GET && !permit.is_monitored();
        let opens = get.then(|| Opens {
            streams: Arc::clone(&state.mcp_streams),
            agent: permit.record().agent.to_string(),
            origin: origin_of(&permit.record().url).to_owned(),
        });
        let filter = served.table.filter(|_| get).map(|table| filter_for(read, table, opens));
        return Ok((permit, filter));
    }
    let max_body = live.settings.inspect.max_body;
    let parsed = match read.body() {
        Body::Read(bytes) => match Messages::parse(bytes) {
            Ok(messages) => Ok(messages),
            // No call a server could run (an OAuth token or registration request on the same
            // host): recorded as MCP's, forwarded unruled.
            Err(_) if !may_carry_calls(bytes, read.parts.headers.contains_key(CONTENT_ENCODING)) => {
                permit.set_mcp(fields);
                return Ok((permit, None));
            }
            Err(not) => Err((StatusCode::BAD_REQUEST, not.to_string())),
        },
        Body::TooLarge => Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over [inspect] max_body = {max_body} bytes, so its tools cannot be ruled"),
        )),
        Body::Upgrade => Err((StatusCode::BAD_REQUEST, "a WebSocket upgrade carries no JSON-RPC body".to_owned())),
    };
    let messages = match parsed {
        Ok(messages) => messages,
        Err((status, why)) => {
            permit.set_mcp(fields);
            let reason = Reason::new(OperatorCode::McpUnreadable, format!("[[mcp]] {why}"));
            let blocked = match permit.check_mcp(vec![reason]) {
                Ok(permit) => return Ok((permit, None)),
                Err(blocked) => blocked,
            };
            let body = unreadable_answer(&why, &blocked.record().id.to_string());
            return Err(record.block_with(*blocked, json_response(status, body)));
        }
    };
    fields.method = Some(messages.methods());
    fields.tool = messages.tools();
    fields.request_id = messages.ids();
    let redacted = |arguments: String| live.settings.inspect.redacted(&live.gate.redacted(&arguments));
    if served.table.is_some_and(|table| table.log_arguments) {
        fields.arguments = messages.arguments().map(redacted);
    }
    permit.set_mcp(fields);
    let mut refusals = messages.refusals(served.table);
    // Held calls wait for a human, when every refused call may be held and nothing else
    // refuses them first (monitor mode and `[approvals] mode = "deny"` hold nothing).
    let holds = live.settings.approvals.mode == ApprovalMode::Hold && !permit.is_monitored();
    if holds && !refusals.is_empty() && refusals.iter().all(|r| r.held) {
        let blocking = refusals.iter().map(|r| Reason::new(OperatorCode::McpToolRefused, r.rule.clone())).collect();
        let mut blocked = permit.held_for(blocking);
        let held = Held {
            record_id: blocked.record().id.to_string(),
            method: blocked.record().method.to_string(),
            url: redact_url(&blocked.record().url, state.settings.log_query).full.into_owned(),
            agent: blocked.record().agent.to_string(),
            origin: origin_of(&blocked.record().url).to_owned(),
            rule: Some(HeldRule { file: "[[mcp]]", line: None, text: held_text(&messages, &refusals, redacted) }),
            new_host: None,
            held_since: SystemTime::now(),
        };
        match ask(state, &live.settings.approvals, record, &mut blocked, held, drain).await {
            Some(approval) => {
                permit.approved_by(approval);
                refusals.clear();
            }
            None => {
                let ended = blocked.record().approval.as_ref().map_or("not approved", |a| a.decision.as_str());
                for refusal in &mut refusals {
                    refusal.rule = format!("{}; held for a human's approval: {ended}", refusal.rule);
                }
                let answer = refusal_answer(state, read, &messages, &refusals, blocked.record());
                return Err(record.block_with(blocked, answer));
            }
        }
    }
    let blocking = refusals.iter().map(|r| Reason::new(OperatorCode::McpToolRefused, r.rule.clone())).collect();
    let permit = match permit.check_mcp(blocking) {
        Ok(permit) => permit,
        Err(blocked) => {
            let answer = refusal_answer(state, read, &messages, &refusals, blocked.record());
            return Err(record.block_with(*blocked, answer));
        }
    };
    // Monitor mode withholds nothing: the model is offered every tool, and its calls learned.
    let filtered = messages.lists_tools() && !permit.is_monitored();
    let filter = served.table.filter(|_| filtered).map(|table| filter_for(read, table, None));
    Ok((permit, filter))
}

/// The filter of the answer to `read`, which is asked to come back unencoded: it is read.
fn filter_for(read: &mut ReadRequest, table: &McpTable, opens: Option<Opens>) -> AnswerFilter {
    read.parts.headers.insert(ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    AnswerFilter { table: table.clone(), opens }
}

/// The answer to `read`, a request with `refusals` (recorded as `refused`): `200` with their
/// JSON-RPC errors; or `202` when it held notifications only, or when it went to the
/// endpoint of an older-transport stream open through agentgate, which gets the errors.
fn refusal_answer(
    state: &ProxyState,
    read: &ReadRequest,
    messages: &Messages,
    refusals: &[Refusal],
    refused: &crate::audit::DecisionRecord,
) -> Response<ProxyBody> {
    let accepted = || {
        let mut accepted = Response::new(Empty::new().map_err(|never| match never {}).boxed_unsync());
        *accepted.status_mut() = StatusCode::ACCEPTED;
        accepted
    };
    let Some(body) = messages.refusal_answer(refusals, &refused.id.to_string()) else { return accepted() };
    let endpoint = read.parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let stream = StreamKey::new(&refused.agent, origin_of(&refused.url), endpoint);
    if stream.is_some_and(|stream| state.mcp_streams.deliver(&stream, &body)) {
        return accepted();
    }
    json_response(StatusCode::OK, body)
}

/// `scheme://host[:port]` of `url`.
fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    url[after_scheme..].find('/').map_or(url, |end| &url[..after_scheme + end])
}

/// What the operator sees of held calls: each tool, its rule, and its arguments redacted.
fn held_text(messages: &Messages, refusals: &[Refusal], redacted: impl Fn(String) -> String) -> String {
    let calls = refusals.iter().map(|refusal| {
        let arguments = messages.messages.get(refusal.index).and_then(|m| m.arguments.as_ref());
        let arguments = arguments.map_or_else(|| "none".to_owned(), |a| redacted(a.to_string()));
        format!("tools/call {:?} with arguments {arguments}: {}", refusal.tool, refusal.rule)
    });
    calls.collect::<Vec<_>>().join("; ")
}

/// 16 hex digits of the SHA-256 of a session id: the same session reads the same in the
/// log, and the id itself (a bearer of the session) never appears there.
fn session_digest(id: &[u8]) -> String {
    hex::encode(&Sha256::digest(id)[..8])
}

/// A JSON answer agentgate writes itself.
fn json_response(status: StatusCode, body: Vec<u8>) -> Response<ProxyBody> {
    let mut response = Response::new(Full::new(Bytes::from(body)).map_err(|never| match never {}).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// What a `tools/list` answer goes through: the tools its table refuses removed.
pub(crate) struct AnswerFilter {
    table: McpTable,
    /// For a `GET` stream: where it is opened once its server names its endpoint.
    opens: Option<Opens>,
}

/// Whose stream a `GET` answer is, to open it in [`OpenStreams`] by the endpoint it names.
struct Opens {
    streams: Arc<OpenStreams>,
    agent: String,
    origin: String,
}

impl AnswerFilter {
    /// `response` with its body filtered: a JSON answer whole (at most [`MAX_ANSWER`]), an
    /// event stream event by event (each at most [`MAX_ANSWER`]); any other passes as it came.
    /// An encoded body cannot be read, so it is cut rather than passed unfiltered.
    pub(crate) fn apply(self, response: Response<ProxyBody>) -> Response<ProxyBody> {
        let media = response.headers().get(CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let media = media.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
        let mode = match media.as_str() {
            "application/json" => Mode::Json(BytesMut::new(), self.table),
            "text/event-stream" => Mode::Events(EventFilter::new(self.table, MAX_ANSWER)),
            _ => return response,
        };
        let encoded = response.headers().get(CONTENT_ENCODING).is_some_and(|e| e.as_bytes() != b"identity");
        let (mut parts, inner) = response.into_parts();
        parts.headers.remove(CONTENT_LENGTH);
        let body = Filtered { inner, mode, encoded, ended: false, opens: self.opens, tap: None };
        Response::from_parts(parts, body.boxed_unsync())
    }
}

/// How a filtered body is read.
enum Mode {
    /// Held whole, then filtered.
    Json(BytesMut, McpTable),
    /// Filtered event by event.
    Events(EventFilter),
}

/// An answer body with the refused tools taken out (see [`AnswerFilter::apply`]).
struct Filtered {
    inner: ProxyBody,
    mode: Mode,
    /// The origin encoded it (`Content-Encoding`) although asked not to.
    encoded: bool,
    ended: bool,
    /// A `GET` stream's owner, until its endpoint is known.
    opens: Option<Opens>,
    /// The open stream's deliveries, passed on between the server's events.
    tap: Option<Tap>,
}

impl Filtered {
    /// Opens the stream once `filter` has seen its server name the endpoint.
    fn note_endpoint(&mut self, endpoint: Option<String>) {
        let (Some(endpoint), Some(opens)) = (endpoint, &self.opens) else { return };
        if let Some(key) = StreamKey::new(&opens.agent, &opens.origin, &endpoint) {
            self.tap = Some(opens.streams.open(key));
        }
    }
}

impl HttpBody for Filtered {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        if this.encoded && !this.ended {
            this.ended = true;
            let cut = "agentgate cut the MCP server's tools/list answer: it came encoded, so its tools cannot be ruled";
            return Poll::Ready(Some(Err(Box::new(Cut(cut.to_owned())))));
        }
        loop {
            if this.ended {
                return Poll::Ready(None);
            }
            // agentgate's own answers go out between the server's events, which the event
            // filter passes whole.
            if let Some(tap) = &mut this.tap
                && let Poll::Ready(Some(event)) = tap.events.poll_recv(cx)
            {
                return Poll::Ready(Some(Ok(Frame::data(event))));
            }
            match ready!(Pin::new(&mut this.inner).poll_frame(cx)) {
                Some(Ok(frame)) => {
                    // Trailers are dropped: the filtered body ends with its data.
                    let Ok(data) = frame.into_data() else { continue };
                    match &mut this.mode {
                        Mode::Json(held, _) => {
                            held.extend_from_slice(&data);
                            if held.len() > MAX_ANSWER {
                                this.ended = true;
                                let cut = format!(
                                    "agentgate cut the MCP server's tools/list answer: over {MAX_ANSWER} bytes, too long to filter"
                                );
                                return Poll::Ready(Some(Err(Box::new(Cut(cut)))));
                            }
                        }
                        Mode::Events(filter) => match filter.push(&data) {
                            Ok(out) => {
                                let endpoint = filter.endpoint();
                                this.note_endpoint(endpoint);
                                if !out.is_empty() {
                                    return Poll::Ready(Some(Ok(Frame::data(out))));
                                }
                            }
                            Err(too_long) => {
                                this.ended = true;
                                return Poll::Ready(Some(Err(Box::new(too_long))));
                            }
                        },
                    }
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => {
                    this.ended = true;
                    let rest = match &mut this.mode {
                        Mode::Json(held, table) => {
                            filter_json(held, table).map_or_else(|| held.split().freeze(), Bytes::from)
                        }
                        Mode::Events(filter) => filter.finish(),
                    };
                    if !rest.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                }
            }
        }
    }
}
