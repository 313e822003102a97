//! One request's hold on a pooled connection ([`Lease`]), from taking it until its response
//! body ends, and that body ([`PooledBody`]), which carries the lease: when the body ends the
//! connection goes back to the pool, or is closed (`Back`).
//!
//! Never sends anything: it only gives connections back.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

use super::turn::Turn;
use super::{H1, Key, Shared};

/// What happens to a connection when its response ends.
#[derive(Clone, Copy)]
pub(super) enum Back {
    /// Closed.
    Close,
    /// Back to the origin's idle HTTP/1.1 connections.
    Pool,
    /// One request fewer on the origin's shared h2 connection (this id).
    Shared(u64),
}

/// One request's hold on a connection, from taking it until its response body ends (the
/// body carries it): then the connection goes back as `back` says. Dropped early (the
/// request failed, or its future was dropped: the agent hung up), it gives back an h2
/// connection's slot all the same, and an HTTP/1.1 connection is closed instead, its framing
/// then unknown. Dropping an HTTP/1.1 sender closes the connection once its response is
/// done; an h2 connection nobody shares closes when its last stream does.
pub(super) struct Lease {
    pub(super) shared: Arc<Shared>,
    pub(super) key: Key,
    pub(super) back: Back,
    /// The HTTP/1.1 sender, once the response head is in.
    pub(super) h1: Option<H1>,
    /// The response ended cleanly: an HTTP/1.1 connection can carry another request.
    pub(super) clean: bool,
    /// The connection refused a request unsent, or carried more of a policy fetch's body
    /// than `keep_within`: not used again.
    pub(super) discard: bool,
    /// For a policy fetch on HTTP/1.1: how many more body bytes the connection may carry and
    /// still be kept ([`super::FETCH_KEEP_WITHIN`]).
    pub(super) keep_within: Option<usize>,
    /// A policy fetch's turn on the origin, let go after the connection went back (fields
    /// drop after `Drop::drop`), so the next fetch finds it idle.
    pub(super) _turn: Option<Turn>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        match self.back {
            Back::Pool => {
                if let Some(sender) = self.h1.take().filter(|_| self.clean && !self.discard) {
                    self.shared.put_h1(&self.key, sender);
                }
            }
            Back::Shared(id) => self.shared.finish_h2(&self.key, id, self.discard),
            Back::Close => {}
        }
    }
}

/// An origin's response body, streamed as hyper hands it over; when it ends it gives its
/// connection back to the pool (or closes it, [`Reuse`](super::Reuse)).
pub(crate) struct PooledBody {
    pub(super) inner: Incoming,
    pub(super) lease: Option<Lease>,
}

impl PooledBody {
    /// Gives the connection back now that the body is over: cleanly when it reached its end.
    fn finish(&mut self, clean: bool) {
        if let Some(mut lease) = self.lease.take() {
            lease.clean = clean;
        }
    }
}

impl Body for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(lease) = &mut this.lease
            && let Some(left) = &mut lease.keep_within
            && let Some(data) = frame.data_ref()
        {
            match left.checked_sub(data.len()) {
                Some(rest) => *left = rest,
                None => lease.discard = true,
            }
        }
        match &polled {
            Poll::Ready(None) => this.finish(true),
            Poll::Ready(Some(Err(_))) => this.finish(false),
            // hyper's server stops polling a body that says it has ended.
            Poll::Ready(Some(Ok(_))) if this.inner.is_end_stream() => this.finish(true),
            Poll::Ready(Some(Ok(_))) | Poll::Pending => {}
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

impl Drop for PooledBody {
    fn drop(&mut self) {
        // An empty body (HEAD, 204, 304) is never polled: it ended all the same.
        let clean = self.inner.is_end_stream();
        self.finish(clean);
    }
}
