//! The body of every response the proxy hands to hyper ([`ProxyBody`]: the origin's streamed
//! body, or a small one agentgate wrote itself), and [`hold_until_body_ends`], which ties a
//! value's life to a response body: a request's concurrency slots, or its place among its
//! connection's requests in flight.
//!
//! Never reads, buffers or changes the bytes of a body.

use http::Response;
use http_body_util::BodyExt;

/// The body of every response the proxy hands to hyper: either the origin's streamed body or
/// a small body agentgate wrote itself.
pub(crate) type ProxyBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, hyper::Error>;

/// The response with `held` tied to its body, released when the body ends or is dropped
/// (the client hung up mid-response): a request's concurrency slots (C21), or its place in
/// the connection's requests in flight (`conn::idle`).
pub(crate) fn hold_until_body_ends<H: Send + 'static>(response: Response<ProxyBody>, held: H) -> Response<ProxyBody> {
    response.map(|body| {
        body.map_frame(move |frame| {
            let _held = &held;
            frame
        })
        .boxed_unsync()
    })
}
