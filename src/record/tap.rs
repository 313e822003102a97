//! Taking a copy of bodies as they pass, for the recorder: [`Tapped`] wraps a body and hands
//! what passed (the first `max_body` bytes, the whole's length and digest, whether it reached
//! its end) to a callback once, when it ends or is dropped; [`ExchangeTap`] pairs a request's
//! tap with its answer's and submits the exchange once both are done.
//!
//! Never: holds a frame back, changes a byte, or buffers past `max_body`; a body's length
//! hint and end are its inner body's, so framing (`Content-Length`) is unchanged.

use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, Request, Response};
use hyper::body::{Body as HttpBody, Frame, SizeHint};

use super::format::{Answer, Body, Capture, Exchange, Line, Message};
use super::writer::Recorder;

/// What a tap calls once with the body that passed.
type Done = Box<dyn FnOnce(Body) + Send>;

/// A body whose bytes are captured as they pass.
pub struct Tapped<B> {
    inner: B,
    capture: Option<(Capture, Done)>,
}

impl<B> Tapped<B> {
    /// `inner`, its first `max` bytes captured and handed to `done` at its end or drop.
    pub fn new(inner: B, max: u64, done: impl FnOnce(Body) + Send + 'static) -> Self {
        Tapped { inner, capture: Some((Capture::new(max), Box::new(done))) }
    }

    fn finish(&mut self, complete: bool) {
        if let Some((capture, done)) = self.capture.take() {
            done(capture.finish(complete));
        }
    }
}

impl<B: HttpBody<Data = Bytes> + Unpin> HttpBody for Tapped<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(data), Some((capture, _))) = (frame.data_ref(), self.capture.as_mut()) {
                    capture.push(data);
                }
                // hyper stops polling a body that says it has ended.
                if self.inner.is_end_stream() {
                    self.finish(true);
                }
            }
            Poll::Ready(None) => self.finish(true),
            Poll::Ready(Some(Err(_))) => self.finish(false),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for Tapped<B> {
    fn drop(&mut self) {
        // A body nobody read to its end: complete only when nothing was left to read (an
        // empty body its reader never polled).
        let nothing_left = self.capture.as_ref().is_some_and(|(capture, _)| capture.is_empty());
        self.finish(nothing_left);
    }
}

/// Header lines as recorded: in order, values that are not UTF-8 kept lossily;
/// `Proxy-Authorization` (the agent's credential for agentgate) left out.
pub fn header_lines(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| *name != http::header::PROXY_AUTHORIZATION)
        .map(|(name, value)| (name.as_str().to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned()))
        .collect()
}

/// Who asked what, fixed when the request is forwarded.
pub struct Asked {
    /// The decision log's `event.id`.
    pub event_id: String,
    /// The agent id.
    pub agent: String,
    /// The URL as the decision log names it.
    pub url: String,
}

/// One exchange being recorded: submitted once its request and answer bodies are both done.
pub struct ExchangeTap {
    draft: Arc<Draft>,
}

struct Draft {
    recorder: Recorder,
    asked: Asked,
    method: String,
    version: String,
    headers: Vec<(String, String)>,
    started: SystemTime,
    clock: Instant,
    request: Mutex<Option<Body>>,
    answer: Mutex<Option<(Answer, u64)>>,
}

impl ExchangeTap {
    /// Taps `request` (as the agent sent it) for `recorder`.
    pub fn request<B>(recorder: &Recorder, asked: Asked, request: Request<B>) -> (Request<Tapped<B>>, ExchangeTap) {
        let draft = Arc::new(Draft {
            recorder: recorder.clone(),
            asked,
            method: request.method().as_str().to_owned(),
            version: format!("{:?}", request.version()),
            headers: header_lines(request.headers()),
            started: SystemTime::now(),
            clock: Instant::now(),
            request: Mutex::new(None),
            answer: Mutex::new(None),
        });
        let held = Arc::clone(&draft);
        let max = recorder.max_body();
        let request = request.map(|body| {
            Tapped::new(body, max, move |body| {
                *held.request.lock().unwrap_or_else(PoisonError::into_inner) = Some(body)
            })
        });
        (request, ExchangeTap { draft })
    }

    /// Taps `response` (as the agent gets it): the exchange is submitted when its body is
    /// done and the request's is.
    pub fn response<B>(self, response: Response<B>) -> Response<Tapped<B>> {
        let (status, headers) = (response.status().as_u16(), header_lines(response.headers()));
        let max = self.draft.recorder.max_body();
        let draft = self.draft;
        response.map(move |body| {
            Tapped::new(body, max, move |body| {
                let time_ms = draft.clock.elapsed().as_millis() as u64;
                *draft.answer.lock().unwrap_or_else(PoisonError::into_inner) =
                    Some((Answer { status, headers, body }, time_ms));
            })
        })
    }
}

impl Drop for Draft {
    fn drop(&mut self) {
        let request = self.request.lock().unwrap_or_else(PoisonError::into_inner).take();
        let answer = self.answer.lock().unwrap_or_else(PoisonError::into_inner).take();
        // No answer (the origin failed): not an exchange the agent saw.
        let Some((response, time_ms)) = answer else { return };
        let request = request.unwrap_or_else(|| Capture::new(0).finish(false));
        let started = humantime::format_rfc3339_millis(self.started).to_string();
        let Asked { event_id, agent, url } = std::mem::replace(
            &mut self.asked,
            Asked { event_id: String::new(), agent: String::new(), url: String::new() },
        );
        self.recorder.submit(Line::Exchange(Box::new(Exchange {
            event_id,
            started,
            time_ms,
            agent,
            method: std::mem::take(&mut self.method),
            url,
            http_version: std::mem::take(&mut self.version),
            request: Message { headers: std::mem::take(&mut self.headers), body: request },
            response,
        })));
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use http_body_util::{BodyExt, Full};

    use super::*;

    #[test]
    fn the_agents_proxy_credential_is_never_among_the_recorded_headers() {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::PROXY_AUTHORIZATION, HeaderValue::from_static("Basic Ym90OnRva2Vu"));
        headers.insert(http::header::AUTHORIZATION, HeaderValue::from_static("Bearer agp_placeholder"));
        assert_eq!(header_lines(&headers), [("authorization".to_owned(), "Bearer agp_placeholder".to_owned())]);
    }

    #[tokio::test]
    async fn a_tapped_body_passes_unchanged_and_hands_over_what_passed_once() {
        let (sender, received) = std::sync::mpsc::channel();
        let tapped = Tapped::new(Full::new(Bytes::from_static(b"hello world")), 5, move |body| {
            let _ = sender.send(body);
        });
        assert_eq!(tapped.size_hint().exact(), Some(11), "the length hint is the inner body's");
        assert_eq!(tapped.collect().await.unwrap().to_bytes(), "hello world");
        let body = received.recv().unwrap();
        assert_eq!((body.kept, body.bytes, body.cut, body.incomplete), (b"hello".to_vec(), 11, true, false));
        assert!(received.try_recv().is_err(), "handed over once");
    }
}
