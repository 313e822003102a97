//! The body of every response the proxy hands to hyper ([`ProxyBody`]: the origin's streamed
//! body, or a small one agentgate wrote itself), and [`Metered`], which counts a body's bytes
//! as they stream and tells a [`Meter`] how the body ended (the request's record,
//! `record.rs`), or cuts it when the meter says so; a meter may hold a frame back until a
//! future of its own resolves (a byte budget's next reservation from the shared limits store).
//!
//! Never reads, buffers or changes the bytes of a body: a metered body passes each frame on
//! as it came, or ends with an error in its place.

use std::error::Error as StdError;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};

/// The error a [`ProxyBody`] ends with: the origin's or the agent's (`hyper::Error`), or
/// agentgate's own cut ([`Cut`]).
pub(crate) type BodyError = Box<dyn StdError + Send + Sync>;

/// The body of every response the proxy hands to hyper (and of every request it sends an
/// origin): either a streamed body or a small body agentgate wrote itself.
pub(crate) type ProxyBody = http_body_util::combinators::UnsyncBoxBody<Bytes, BodyError>;

/// How a metered body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Every byte passed: the body reached its end.
    Complete,
    /// The body it reads failed (the origin's or the agent's stream broke).
    Failed,
    /// Dropped before its end: whoever read it stopped (the agent hung up, or the origin
    /// stopped reading a request body).
    Dropped,
    /// The meter cut it ([`Meter::passed`] refused).
    Cut,
}

/// Why a metered body was cut: what the reader of the body gets in place of the rest (hyper
/// resets the stream or closes the connection, so the cut never looks like an end).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Cut(pub(crate) String);

/// What a [`Meter`] says of the bytes about to pass: they pass now, or once its future
/// resolves; an error is the [`Cut`] that ends the body there, those bytes withheld.
pub(crate) enum Pass {
    /// Decided now.
    Now(Result<(), Cut>),
    /// Decided when this resolves; the frame waits, polled with the body.
    After(Decision),
}

/// A meter's decision to come ([`Pass::After`]).
pub(crate) type Decision = Pin<Box<dyn Future<Output = Result<(), Cut>> + Send>>;

/// What a [`Metered`] body reports to.
pub(crate) trait Meter: Send + 'static {
    /// `bytes` more are about to pass (`total` so far, these included).
    fn passed(&mut self, bytes: u64, total: u64) -> Pass;

    /// The body ended as `how`, after `total` bytes; called exactly once.
    fn ended(&mut self, how: Ended, total: u64);
}

/// A body counted as it streams: each data frame is told to the meter before it passes on,
/// and how the body ended is told exactly once (from `Drop` when it was never read to its
/// end).
pub(crate) struct Metered<B: Body, M: Meter> {
    inner: B,
    meter: M,
    total: u64,
    ended: bool,
    /// A frame the meter holds back ([`Pass::After`]), with the total it brings.
    waiting: Option<(Frame<Bytes>, u64, Decision)>,
    /// The meter's cut, told to the reader one poll later: hyper writes out what it has
    /// buffered while the body is pending, so the reader gets every byte counted before
    /// the cut (an error at once would close the connection with them unsent).
    cut: Option<Cut>,
}

impl<B: Body, M: Meter> Metered<B, M> {
    /// `inner`, counted into `meter`.
    pub(crate) fn new(inner: B, meter: M) -> Self {
        Metered { inner, meter, total: 0, ended: false, waiting: None, cut: None }
    }

    /// `frame`, bringing the count to `total`, once the meter said `passed`.
    fn release(
        &mut self,
        frame: Frame<Bytes>,
        total: u64,
        passed: Result<(), Cut>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        if let Err(cut) = passed {
            self.end(Ended::Cut);
            self.cut = Some(cut);
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        self.total = total;
        // hyper stops polling a body that says it has ended.
        if self.inner.is_end_stream() {
            self.end(Ended::Complete);
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn end(&mut self, how: Ended) {
        if !self.ended {
            self.ended = true;
            self.meter.ended(how, self.total);
        }
    }
}

impl<B, M> Body for Metered<B, M>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BodyError>,
    M: Meter + Unpin,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        if let Some(cut) = this.cut.take() {
            return Poll::Ready(Some(Err(Box::new(cut))));
        }
        if this.ended {
            return Poll::Ready(None);
        }
        if let Some((frame, total, mut until)) = this.waiting.take() {
            let Poll::Ready(passed) = until.as_mut().poll(cx) else {
                this.waiting = Some((frame, total, until));
                return Poll::Pending;
            };
            return this.release(frame, total, passed, cx);
        }
        let polled = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(polled) => polled,
        };
        match polled {
            None => {
                this.end(Ended::Complete);
                Poll::Ready(None)
            }
            Some(Err(error)) => {
                this.end(Ended::Failed);
                Poll::Ready(Some(Err(error.into())))
            }
            Some(Ok(frame)) => {
                let bytes = frame.data_ref().map_or(0, |data| data.len() as u64);
                let total = this.total + bytes;
                match if bytes > 0 { this.meter.passed(bytes, total) } else { Pass::Now(Ok(())) } {
                    Pass::Now(passed) => this.release(frame, total, passed, cx),
                    Pass::After(until) => {
                        this.waiting = Some((frame, total, until));
                        Pin::new(this).poll_frame(cx)
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        // A cut still to be told is no end: a reader that stopped here would take the short
        // body for a whole one.
        self.cut.is_none() && (self.ended || (self.waiting.is_none() && self.inner.is_end_stream()))
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: Body, M: Meter> Drop for Metered<B, M> {
    fn drop(&mut self) {
        // An empty body (HEAD, 204, 304, a 101) may never be polled: it ended all the same.
        let how = if self.waiting.is_none() && self.inner.is_end_stream() { Ended::Complete } else { Ended::Dropped };
        self.end(how);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http_body_util::{BodyExt, Full, StreamBody};

    use super::*;

    /// Records what a metered body told it; cuts past `limit` bytes.
    #[derive(Clone, Default)]
    struct Tape {
        told: Arc<Mutex<Vec<String>>>,
        limit: Option<u64>,
        /// Decides each frame in a future ([`Pass::After`]).
        later: bool,
    }

    impl Meter for Tape {
        fn passed(&mut self, bytes: u64, total: u64) -> Pass {
            self.told.lock().expect("not poisoned").push(format!("+{bytes}={total}"));
            let passed = match self.limit {
                Some(limit) if total > limit => Err(Cut(format!("over {limit}"))),
                _ => Ok(()),
            };
            if !self.later {
                return Pass::Now(passed);
            }
            // Decided only after the body's task yielded once, as a store's answer is.
            Pass::After(Box::pin(async move {
                tokio::task::yield_now().await;
                passed
            }))
        }

        fn ended(&mut self, how: Ended, total: u64) {
            self.told.lock().expect("not poisoned").push(format!("{how:?} after {total}"));
        }
    }

    fn chunks(parts: &[&'static [u8]]) -> impl Body<Data = Bytes, Error = std::convert::Infallible> + Unpin {
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> =
            parts.iter().map(|part| Ok(Frame::data(Bytes::from_static(part)))).collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    fn told(tape: &Tape) -> Vec<String> {
        tape.told.lock().expect("not poisoned").clone()
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_is_counted_once_and_complete() {
        let tape = Tape::default();
        let body = Metered::new(chunks(&[b"abc", b"", b"defg"]), tape.clone());
        let bytes = body.collect().await.expect("no error").to_bytes();
        assert_eq!(&bytes[..], b"abcdefg", "the bytes pass unchanged");
        assert_eq!(told(&tape), ["+3=3", "+4=7", "Complete after 7"]);
    }

    #[tokio::test]
    async fn a_body_that_says_it_ended_is_complete_without_another_poll() {
        let tape = Tape::default();
        let mut body = Metered::new(Full::new(Bytes::from_static(b"hello")), tape.clone());
        let frame = body.frame().await.expect("a frame").expect("no error");
        assert_eq!(frame.data_ref().map(Bytes::len), Some(5));
        assert!(body.is_end_stream());
        drop(body);
        assert_eq!(told(&tape), ["+5=5", "Complete after 5"]);
    }

    #[tokio::test]
    async fn a_body_dropped_midway_says_so_with_what_passed() {
        let tape = Tape::default();
        let mut body = Metered::new(chunks(&[b"abc", b"def"]), tape.clone());
        let _first = body.frame().await;
        drop(body);
        assert_eq!(told(&tape), ["+3=3", "Dropped after 3"]);
    }

    #[tokio::test]
    async fn a_meter_that_refuses_cuts_the_body_with_an_error() {
        let tape = Tape { limit: Some(4), ..Tape::default() };
        let body = Metered::new(chunks(&[b"abc", b"def", b"ghi"]), tape.clone());
        let error = body.collect().await.expect_err("cut, never a short body that looks complete");
        assert_eq!(error.to_string(), "over 4");
        assert_eq!(told(&tape), ["+3=3", "+3=6", "Cut after 3"]);
    }

    /// The cut is told one poll after the meter refused, so hyper writes out the bytes it
    /// holds first; until then the body is not at its end, even when its source is.
    #[tokio::test]
    async fn a_cut_waits_one_poll_and_is_no_end_until_told() {
        let tape = Tape { limit: Some(4), ..Tape::default() };
        let mut body = Metered::new(Full::new(Bytes::from_static(b"hello")), tape.clone());
        assert!(futures_util::poll!(body.frame()).is_pending(), "the cut waits one poll");
        assert!(!body.is_end_stream(), "a short body must not look whole");
        let error = body.frame().await.expect("an answer").expect_err("then the cut");
        assert_eq!(error.to_string(), "over 4");
        assert!(body.is_end_stream());
        assert_eq!(told(&tape), ["+5=5", "Cut after 0"]);
    }

    #[tokio::test]
    async fn a_meter_that_decides_later_holds_the_frame_then_passes_it_or_cuts() {
        let tape = Tape { later: true, ..Tape::default() };
        let body = Metered::new(chunks(&[b"abc", b"defg"]), tape.clone());
        let bytes = body.collect().await.expect("no error").to_bytes();
        assert_eq!(&bytes[..], b"abcdefg", "every frame passed once decided, in order");
        assert_eq!(told(&tape), ["+3=3", "+4=7", "Complete after 7"]);

        // A body whose source has ended is not at its end while its last frame waits.
        let tape = Tape { later: true, ..Tape::default() };
        let mut body = Metered::new(Full::new(Bytes::from_static(b"hi")), tape.clone());
        assert!(futures_util::poll!(body.frame()).is_pending(), "the meter has not decided yet");
        assert!(!body.is_end_stream(), "the waiting frame is still to come");
        let frame = body.frame().await.expect("a frame").expect("passed");
        assert_eq!(frame.data_ref().map(Bytes::len), Some(2));
        assert!(body.is_end_stream());
        drop(body);
        assert_eq!(told(&tape), ["+2=2", "Complete after 2"]);

        let tape = Tape { later: true, limit: Some(4), ..Tape::default() };
        let mut body = Metered::new(Full::new(Bytes::from_static(b"hello")), tape.clone());
        let error = body.frame().await.expect("an answer").expect_err("cut after the wait");
        assert_eq!(error.to_string(), "over 4");
        assert!(body.is_end_stream(), "a cut body has ended");
        drop(body);
        assert_eq!(told(&tape), ["+5=5", "Cut after 0"]);
    }
}
