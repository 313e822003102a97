//! `GET /decisions/stream`: the decision-log lines as Server-Sent Events, live, for the
//! console. Each line the log's writer hands to `/decisions/recent` is sent as one
//! `decision` event holding the line as written (redacted as the log is); a subscriber that
//! fell behind gets a `lagged` event with how many lines it missed; a comment every
//! [`KEEP_ALIVE`] keeps proxies and browsers from closing an idle stream.
//!
//! Owns: the event framing, the cap on streams open at once ([`MAX_STREAMS`]) and ending
//! every stream when the admin server stops. Never: slows the writer or the request path
//! (the broadcast drops the oldest lines for a slow reader), or buffers more than a few
//! events per stream.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderValue, Response, StatusCode};
use http_body_util::Either;
use http_body_util::channel::Channel;
use hyper::body::Frame;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{Semaphore, watch};

use super::answer::{AdminBody, error};
use crate::audit::AuditLog;

/// Streams open at once; past it `/decisions/stream` answers 503. A console tab holds one.
pub(crate) const MAX_STREAMS: usize = 16;

/// How often an idle stream sends a keep-alive comment.
pub(crate) const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Events waiting to be written to one stream's socket; past it the stream task waits, and
/// the broadcast behind it drops the oldest lines for this reader only.
const QUEUED_EVENTS: usize = 16;

/// What the admin listener sends: a full answer, or the live stream's.
pub(super) type AnswerBody = Either<AdminBody, StreamBody>;

/// The body of a live stream.
pub(crate) type StreamBody = Channel<Bytes>;

/// The streams' shared state: how many may still open, and the signal that ends them.
pub(crate) struct Streams {
    slots: Arc<Semaphore>,
    closing: watch::Sender<bool>,
}

impl Default for Streams {
    fn default() -> Self {
        Streams { slots: Arc::new(Semaphore::new(MAX_STREAMS)), closing: watch::Sender::new(false) }
    }
}

impl Streams {
    /// Ends every open stream and refuses new ones: the admin server is stopping, and an open
    /// stream must not hold its graceful shutdown.
    pub(crate) fn close(&self) {
        self.closing.send_replace(true);
    }
}

impl Streams {
    /// `GET /decisions/stream`: a `text/event-stream` answer fed until the client leaves or the
    /// server stops; `503` when [`MAX_STREAMS`] are open or the server is stopping.
    pub(super) fn open(&self, audit: &AuditLog) -> Response<AnswerBody> {
        let streams = self;
        let mut closing = streams.closing.subscribe();
        if *closing.borrow_and_update() {
            return error(StatusCode::SERVICE_UNAVAILABLE, None, "the admin API is shutting down").map(Either::Left);
        }
        let Ok(slot) = Arc::clone(&streams.slots).try_acquire_owned() else {
            let message = format!("{MAX_STREAMS} decision streams are open already; close a console tab and retry");
            return error(StatusCode::SERVICE_UNAVAILABLE, None, &message).map(Either::Left);
        };
        let mut lines = audit.recent().subscribe();
        let (mut tx, body) = Channel::new(QUEUED_EVENTS);
        tokio::spawn(async move {
            let _slot = slot;
            // The first event tells the browser how soon to reconnect and that the stream is open.
            let mut next = Some(Bytes::from_static(b"retry: 2000\n: agentgate decision stream\n\n"));
            let mut keep_alive = tokio::time::interval_at(tokio::time::Instant::now() + KEEP_ALIVE, KEEP_ALIVE);
            loop {
                if let Some(event) = next.take()
                    && tx.send(Frame::data(event)).await.is_err()
                {
                    return; // the client went away
                }
                next = tokio::select! {
                    received = lines.recv() => match event(received) {
                        Some(event) => Some(event),
                        None => return, // the log is gone: the process is stopping
                    },
                    _ = keep_alive.tick() => Some(Bytes::from_static(b": keep-alive\n\n")),
                    _ = closing.wait_for(|closing| *closing) => return,
                };
            }
        });
        let mut response = Response::new(Either::Right(body));
        let headers = response.headers_mut();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        response
    }
}

/// The event for what the broadcast gave: a `decision` with the line as written, or a
/// `lagged` saying how many lines this reader missed; `None` once the log is gone.
fn event(received: Result<Arc<str>, RecvError>) -> Option<Bytes> {
    match received {
        Ok(line) => Some(Bytes::from(format!("event: decision\ndata: {line}\n\n"))),
        Err(RecvError::Lagged(missed)) => {
            Some(Bytes::from(format!("event: lagged\ndata: {{\"missed\":{missed}}}\n\n")))
        }
        Err(RecvError::Closed) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_one_decision_event_and_a_lag_says_how_many_were_missed() {
        let line: Arc<str> = Arc::from(r#"{"event.id":"01","event.outcome":"deny"}"#);
        let decision = event(Ok(line)).expect("a line is an event");
        assert_eq!(&decision[..], b"event: decision\ndata: {\"event.id\":\"01\",\"event.outcome\":\"deny\"}\n\n");
        let lagged = event(Err(RecvError::Lagged(7))).expect("a lag is an event");
        assert_eq!(&lagged[..], b"event: lagged\ndata: {\"missed\":7}\n\n");
        assert_eq!(event(Err(RecvError::Closed)), None);
    }
}
