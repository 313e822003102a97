//! Taking secret values back out of what an origin answers: every header value, and the body
//! as it streams ([`Scrubbed`], replacing across chunk boundaries with a look-behind of one
//! byte less than the longest value), each value replaced by its secret's placeholder. A
//! `gzip` body the origin sends although agentgate asked for `identity` is decoded first
//! (whole, up to [`MAX_DECODED`]); any other encoding, or more, is [`Unreadable`] and the
//! answer is withheld.
//!
//! Never: lets a value through in a frame it has not scanned, or keeps a value in a carried
//! buffer past the end of the body.

use std::io::Read;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, ETAG, HeaderName, HeaderValue};
use http::{HeaderMap, Response};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use zeroize::Zeroizing;

/// The most bytes a `gzip` answer may decode to before it is withheld.
pub(super) const MAX_DECODED: usize = 8 * 1024 * 1024;

/// Why an answer could not be scrubbed, so it is withheld (502).
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    /// An encoding agentgate cannot decode.
    #[error("its body is `{0}`-encoded, which agentgate cannot read to remove a secret from it")]
    Encoding(String),
    /// A gzip body that does not decode, or decodes to too much.
    #[error("its gzip body cannot be read to remove a secret from it: {0}")]
    Gzip(String),
    /// The body failed while it was read.
    #[error("its body failed while it was read: {0}")]
    Body(String),
}

/// The values to replace and their placeholders, and what a body carries between chunks.
#[derive(Debug)]
pub struct Scrubber {
    pairs: Vec<(Arc<Zeroizing<String>>, String)>,
    /// The tail of the bytes seen that may be the start of a value: held back until the next
    /// chunk says (zeroised when dropped).
    carry: Zeroizing<Vec<u8>>,
    /// How many bytes the carry may need: the longest value less one.
    keep: usize,
}

impl Scrubber {
    /// A scrubber for `pairs` (value, placeholder).
    pub fn new(pairs: Vec<(Arc<Zeroizing<String>>, String)>) -> Scrubber {
        let keep = pairs.iter().map(|(value, _)| value.len()).max().unwrap_or(1).saturating_sub(1);
        Scrubber { pairs, carry: Zeroizing::new(Vec::new()), keep }
    }

    /// `text` with every value replaced, or `None` when it holds none.
    pub fn text(&self, text: &[u8]) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(text.len());
        let rest = self.replace_in(text, text.len(), &mut out);
        out.extend_from_slice(&text[rest..]);
        (out != text).then_some(out)
    }

    /// The bytes of the next chunk that are safe to send: every value replaced, the tail
    /// that may begin one held back.
    pub fn push(&mut self, chunk: &[u8]) -> Bytes {
        self.carry.extend_from_slice(chunk);
        let limit = self.carry.len().saturating_sub(self.keep);
        self.drain(limit)
    }

    /// The rest, at the end of the body.
    pub fn finish(&mut self) -> Bytes {
        let limit = self.carry.len();
        self.drain(limit)
    }

    /// Sends the carry up to `limit` (a value starting before it is replaced whole).
    fn drain(&mut self, limit: usize) -> Bytes {
        let mut out = Vec::with_capacity(self.carry.len());
        let used = self.replace_in(&self.carry, limit, &mut out);
        self.carry.drain(..used);
        Bytes::from(out)
    }

    /// Copies `text` into `out` with every value that starts before `limit` replaced,
    /// stopping at `limit` (or after a value that crosses it); returns how far it read.
    fn replace_in(&self, text: &[u8], limit: usize, out: &mut Vec<u8>) -> usize {
        let mut at = 0;
        loop {
            let next = self
                .pairs
                .iter()
                .filter_map(|(value, placeholder)| {
                    let found = memchr::memmem::find(&text[at..], value.as_bytes())?;
                    Some((at + found, value.len(), placeholder))
                })
                .min_by_key(|(start, len, _)| (*start, usize::MAX - len));
            match next {
                Some((start, len, placeholder)) if start < limit => {
                    out.extend_from_slice(&text[at..start]);
                    out.extend_from_slice(placeholder.as_bytes());
                    at = start + len;
                }
                _ => {
                    if at < limit {
                        out.extend_from_slice(&text[at..limit]);
                        at = limit;
                    }
                    return at;
                }
            }
        }
    }
}

/// Every header value holding a value, with it replaced (a value that no longer is a header
/// value is dropped).
pub fn scrub_headers(headers: &mut HeaderMap, scrubber: &Scrubber) {
    let names: Vec<HeaderName> = headers.keys().cloned().collect();
    for name in names {
        let values: Vec<HeaderValue> = headers.get_all(&name).iter().cloned().collect();
        if !values.iter().any(|v| scrubber.text(v.as_bytes()).is_some()) {
            continue;
        }
        headers.remove(&name);
        for value in values {
            let scrubbed =
                scrubber.text(value.as_bytes()).map_or(Some(value), |text| HeaderValue::from_bytes(&text).ok());
            if let Some(value) = scrubbed {
                headers.append(name.clone(), value);
            }
        }
    }
}

/// An answer with its headers scrubbed and its body scrubbed as it streams; a `gzip` body
/// is decoded whole first. The body may change length, so `Content-Length`, `ETag` and
/// `Content-Digest` go.
///
/// # Errors
/// [`Unreadable`] when the body is in an encoding agentgate cannot read, or gzip that does
/// not decode within `MAX_DECODED`.
pub async fn scrub_response<B>(
    response: Response<B>,
    mut scrubber: Scrubber,
) -> Result<Response<Scrubbed<B>>, Unreadable>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let (mut parts, body) = response.into_parts();
    scrub_headers(&mut parts.headers, &scrubber);
    for name in [CONTENT_LENGTH, ETAG, HeaderName::from_static("content-digest")] {
        parts.headers.remove(name);
    }
    let encoding =
        parts.headers.get(CONTENT_ENCODING).map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_ascii_lowercase());
    let body = match encoding.as_deref() {
        None | Some("identity" | "") => Scrubbed { inner: Some(body), scrubber, decoded: None, trailers: None },
        Some("gzip" | "x-gzip") => {
            let decoded = decode_gzip(body).await?;
            let mut scrubbed = scrubber.push(&decoded).to_vec();
            scrubbed.extend_from_slice(&scrubber.finish());
            parts.headers.remove(CONTENT_ENCODING);
            parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(scrubbed.len()));
            Scrubbed { inner: None, scrubber, decoded: Some(Bytes::from(scrubbed)), trailers: None }
        }
        Some(other) => return Err(Unreadable::Encoding(other.to_owned())),
    };
    Ok(Response::from_parts(parts, body))
}

/// The whole gzip body, decoded, within [`MAX_DECODED`].
async fn decode_gzip<B>(mut body: B) -> Result<Vec<u8>, Unreadable>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut compressed = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Unreadable::Body(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if compressed.len() + data.len() > MAX_DECODED {
                return Err(Unreadable::Gzip(format!("over {MAX_DECODED} bytes")));
            }
            compressed.extend_from_slice(&data);
        }
    }
    let mut decoded = Vec::new();
    let limit = (MAX_DECODED + 1) as u64;
    flate2::read::MultiGzDecoder::new(compressed.as_slice())
        .take(limit)
        .read_to_end(&mut decoded)
        .map_err(|e| Unreadable::Gzip(e.to_string()))?;
    if decoded.len() > MAX_DECODED {
        return Err(Unreadable::Gzip(format!("decodes to over {MAX_DECODED} bytes")));
    }
    Ok(decoded)
}

/// A body with every secret value replaced as it streams.
pub struct Scrubbed<B> {
    /// The origin's body, until it ends (`None` for a body decoded whole).
    inner: Option<B>,
    scrubber: Scrubber,
    /// A body decoded and scrubbed whole, not sent yet.
    decoded: Option<Bytes>,
    /// Trailers held back while the carry goes out.
    trailers: Option<HeaderMap>,
}

impl<B> Body for Scrubbed<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = &mut *self;
        if let Some(decoded) = this.decoded.take() {
            return Poll::Ready(Some(Ok(Frame::data(decoded))));
        }
        loop {
            let Some(inner) = this.inner.as_mut() else {
                return Poll::Ready(this.trailers.take().map(|t| Ok(Frame::trailers(t))));
            };
            match ready!(Pin::new(inner).poll_frame(cx)) {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let out = this.scrubber.push(&data);
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                    Err(frame) => {
                        // Trailers end the body: the carry goes first.
                        this.inner = None;
                        this.trailers = frame.into_trailers().ok().map(|mut t| {
                            scrub_headers(&mut t, &this.scrubber);
                            t
                        });
                        let out = this.scrubber.finish();
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(out))));
                        }
                    }
                },
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => {
                    this.inner = None;
                    let out = this.scrubber.finish();
                    if !out.is_empty() {
                        return Poll::Ready(Some(Ok(Frame::data(out))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_none() && self.decoded.is_none() && self.trailers.is_none() && self.scrubber.carry.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.decoded {
            Some(decoded) => SizeHint::with_exact(decoded.len() as u64),
            None => SizeHint::default(),
        }
    }
}
