//! Phase `forward` under `[record]` (`crate::record`): while recording, the request about
//! to be forwarded is tapped as the agent sent it (before `forward` adds the secrets the
//! permit plans), and its answer as the agent gets it (after `forward` scrubbed it); in
//! replay, the permitted request is answered from the recording instead of being
//! forwarded, or refused `504 replay.miss` when the recording has no answer to it.
//!
//! Never decides: it runs after the gate's `Permitted`, and a replayed answer goes through
//! the same response-time checks (`RequestRecord::answered`) as an origin's.

use http::header::{ACCEPT, CONTENT_LENGTH};
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::BodyExt;
use sha2::{Digest, Sha256};

use super::answer::Exit;
use super::body::{BodyError, Meter, Pass, ProxyBody};
use super::context::{Generation, ProxyState};
use super::error::ProxyError;
use super::record::RequestRecord;
use crate::gate::Permitted;
use crate::record::Recording;
use crate::record::network::recorded_response;
use crate::record::tap::{Asked, ExchangeTap};

/// The request, tapped when its agent is recorded, and the tap its answer is to go through
/// ([`answered`]).
pub(crate) fn tap(
    state: &ProxyState,
    live: &Generation,
    permit: &Permitted,
    url: &str,
    request: Request<ProxyBody>,
) -> (Request<ProxyBody>, Option<ExchangeTap>) {
    let Some(recorder) = state.record.recorder() else { return (request, None) };
    let (settings, decided) = (&live.settings, permit.record());
    if !settings.record.records(settings.mode, &decided.agent, &settings.agent, &settings.agents) {
        return (request, None);
    }
    let asked = Asked { event_id: decided.id.to_string(), agent: decided.agent.to_string(), url: url.to_owned() };
    let (request, tap) = ExchangeTap::request(recorder, asked, request);
    (request.map(BodyExt::boxed_unsync), Some(tap))
}

/// The answer as the agent gets it, through the request's tap when it has one.
pub(crate) fn answered(tap: Option<ExchangeTap>, response: Response<ProxyBody>) -> Response<ProxyBody> {
    match tap {
        Some(tap) => tap.response(response).map(BodyExt::boxed_unsync),
        None => response,
    }
}

/// Phase `forward` in replay: the recorded answer to the permitted request (matched by its
/// agent, method, `url` and body digest), through the response-time checks; `504
/// replay.miss` naming the nearest recorded URL when there is none.
///
/// # Errors
/// The miss's block answer; [`ProxyError::ClientBody`] when the request body could not be
/// read; the 503 answer when the decision could not be committed first.
pub(crate) async fn replay(
    recording: &Recording,
    record: &mut RequestRecord,
    permit: Permitted,
    (url, host): (&str, &str),
    request: Request<ProxyBody>,
    accept: Option<HeaderValue>,
) -> Result<Response<ProxyBody>, Exit> {
    let (parts, body) = request.into_parts();
    let (digest, length) = digest(body).await.map_err(|error| ProxyError::ClientBody {
        host: host.to_owned(),
        cause: crate::error_chain::error_chain(&*error),
    })?;
    let agent = permit.record().agent.clone();
    let answer = match recording.answer(&agent, parts.method.as_str(), url, &digest) {
        Ok(answer) => answer,
        Err(why) => {
            let accept = HeaderMap::from_iter(accept.map(|value| (ACCEPT, value)));
            return Err(record.block(permit.replay_miss(why), &accept));
        }
    };
    let (_, mut sent) = record.forwarding(permit).await?;
    // The request's bytes count as sent, as a forwarded body's do (and spend its budgets).
    if let Pass::After(spent) = sent.passed(length, length) {
        let _ = spent.await;
    }
    let mut response: Response<ProxyBody> =
        recorded_response(answer.status, &answer.headers, answer.body.kept.clone(), |never| match never {});
    if answer.body.cut || answer.body.incomplete {
        // Only part of the body was kept: it goes without the whole's length.
        response.headers_mut().remove(CONTENT_LENGTH);
    }
    Ok(record.answered(response, accept).await)
}

/// The SHA-256 (hex) and length of a whole request body, read as it streams (nothing kept).
async fn digest(mut body: ProxyBody) -> Result<(String, u64), BodyError> {
    let (mut hasher, mut length) = (Sha256::new(), 0u64);
    while let Some(frame) = body.frame().await {
        if let Some(data) = frame?.data_ref() {
            hasher.update(data);
            length += data.len() as u64;
        }
    }
    Ok((hex::encode(hasher.finalize()), length))
}
