//! Taking secret values back out of what an origin answers: every header value, and the body
//! as it streams ([`Scrubbed`], replacing across chunk boundaries with a look-behind of one
//! byte less than the longest needle), each value replaced by its secret's placeholder. A
//! value is looked for in every form agentgate itself may have given it to the origin: as
//! it is, percent-encoded (either hex case, as a query parameter carries it), in base64 at
//! each of the three alignments (as a `Basic` token carries it), and as the exact `Basic`
//! tokens [`super::apply`] made for this request, which go back as the agent's own tokens.
//! A body in codings the origin sends although agentgate asked for `identity` is decoded
//! first, every layer (`crate::coding`), whole and up to `MAX_DECODED`; a coding it cannot
//! decode, anywhere in the stack, is [`Unreadable`] and the answer is withheld.
//!
//! Never: lets a value through in a frame it has not scanned, keeps a value in a carried
//! buffer past the end of the body, or sends a coded body without its label.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_LENGTH, ETAG, HeaderName, HeaderValue, TRANSFER_ENCODING};
use http::{HeaderMap, Response};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, SizeHint};
use zeroize::Zeroizing;

use crate::coding::{self, Undecodable};

/// The most bytes a coded answer may be, read or decoded, before it is withheld.
pub(super) const MAX_DECODED: usize = 8 * 1024 * 1024;

/// Why an answer could not be scrubbed, so it is withheld (502).
#[derive(Debug, thiserror::Error)]
pub enum Unreadable {
    /// A coding agentgate cannot undo, or a layer that does not decode within `MAX_DECODED`.
    #[error(transparent)]
    Coding(#[from] Undecodable),
    /// A coded body longer than `MAX_DECODED` before decoding.
    #[error("its coded body is over {MAX_DECODED} bytes")]
    TooLarge,
    /// The body failed while it was read.
    #[error("its body failed while it was read: {0}")]
    Body(String),
}

/// Every form of one secret value an answer may quote, each with the same form of its
/// placeholder: made once per value when the secrets are loaded ([`Forms::of`]), shared by
/// every scrubber of a request to its hosts.
pub struct Forms(Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>);

/// Never the value: how many forms there are.
impl std::fmt::Debug for Forms {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Forms({} forms)", self.0.len())
    }
}

/// A secret value's forms and what replaces each, and what a body carries between chunks.
#[derive(Debug)]
pub struct Scrubber {
    /// (needle, replacement): the exact texts [`super::apply`] made for this request and what
    /// the agent sent in their place, looked for first.
    made: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)>,
    /// The forms of each value bound to the request's host.
    values: Vec<Arc<Forms>>,
    /// The tail of the bytes seen that may be the start of a value: held back until the next
    /// chunk says (zeroised when dropped).
    carry: Zeroizing<Vec<u8>>,
    /// How many bytes the carry may need: the longest needle less one.
    keep: usize,
}

impl Scrubber {
    /// A scrubber for `values` (the forms of each value, [`Forms::of`]) and for `made`: the
    /// exact texts [`super::apply`] produced for this request (a `Basic` token) and what the
    /// agent sent in their place. A needle found in both is replaced as `made` says.
    pub fn new(values: Vec<Arc<Forms>>, made: Vec<super::Made>) -> Scrubber {
        let made: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)> = made
            .into_iter()
            .filter(|(text, _)| !text.is_empty())
            .map(|(text, original)| (Zeroizing::new(text.as_bytes().to_vec()), original.into_bytes()))
            .collect();
        let mut scrubber = Scrubber { made, values, carry: Zeroizing::new(Vec::new()), keep: 0 };
        scrubber.keep = scrubber.pairs().map(|(needle, _)| needle.len()).max().unwrap_or(1).saturating_sub(1);
        scrubber
    }

    /// Every (needle, replacement), `made` first: of two equal needles the first found wins.
    fn pairs(&self) -> impl Iterator<Item = &(Zeroizing<Vec<u8>>, Vec<u8>)> {
        self.made.iter().chain(self.values.iter().flat_map(|forms| forms.0.iter()))
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
                .pairs()
                .filter_map(|(needle, replacement)| {
                    let found = memchr::memmem::find(&text[at..], needle)?;
                    Some((at + found, needle.len(), replacement))
                })
                .min_by_key(|(start, len, _)| (*start, usize::MAX - len));
            match next {
                Some((start, len, replacement)) if start < limit => {
                    out.extend_from_slice(&text[at..start]);
                    out.extend_from_slice(replacement);
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

impl Forms {
    /// The forms of `value` an answer may quote, each with the same form of `placeholder`:
    /// as it is; percent-encoded with upper- and lower-case hex (unreserved characters kept,
    /// as `inject` encodes a query value); and in base64 after 0, 1 and 2 other bytes, cut to
    /// the characters that depend on the value alone, so any base64 text holding the value
    /// holds one of the three. An empty form, or one equal to an earlier form, is left out.
    pub fn of(value: &str, placeholder: &str) -> Forms {
        let mut forms = vec![(Zeroizing::new(value.as_bytes().to_vec()), placeholder.as_bytes().to_vec())];
        for upper in [true, false] {
            let encoded = Zeroizing::new(super::inject::percent_encode(value, upper).into_bytes());
            forms.push((encoded, super::inject::percent_encode(placeholder, upper).into_bytes()));
        }
        for before in 0..3 {
            forms.push((
                Zeroizing::new(aligned_base64(value.as_bytes(), before)),
                aligned_base64(placeholder.as_bytes(), before),
            ));
        }
        let mut kept: Vec<(Zeroizing<Vec<u8>>, Vec<u8>)> = Vec::with_capacity(forms.len());
        for (form, replacement) in forms {
            if !form.is_empty() && !kept.iter().any(|(known, _)| **known == *form) {
                kept.push((form, replacement));
            }
        }
        Forms(kept)
    }
}

/// The base64 characters of (`before` zero bytes, then `bytes`) that depend on `bytes` only.
fn aligned_base64(bytes: &[u8], before: usize) -> Vec<u8> {
    let mut filled = Zeroizing::new(vec![0u8; before]);
    filled.extend_from_slice(bytes);
    let encoded = Zeroizing::new(STANDARD.encode(filled.as_slice()).into_bytes());
    let (start, end) = ((8 * before).div_ceil(6), (8 * filled.len()) / 6);
    encoded.get(start..end).map(<[u8]>::to_vec).unwrap_or_default()
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

/// An answer with its headers scrubbed and its body scrubbed as it streams; a body in any
/// coding is read whole and every layer undone first (the coding fields go). The body may
/// change length, so `Content-Length`, `ETag` and `Content-Digest` go.
///
/// # Errors
/// [`Unreadable`] when a layer is in a coding agentgate cannot undo (nothing of the body is
/// read then), or the body does not decode within `MAX_DECODED`.
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
    let stack = coding::stack(&parts.headers)?;
    if stack.is_empty() {
        return Ok(Response::from_parts(
            parts,
            Scrubbed { inner: Some(body), scrubber, decoded: None, trailers: None },
        ));
    }
    if let Some(unknown) = stack.iter().find(|c| matches!(c, coding::Coding::Other(_))) {
        return Err(Undecodable::Unknown(unknown.to_string()).into());
    }
    let coded = read_whole(body).await?;
    let decoded = Zeroizing::new(coding::undo(&stack, &coded, MAX_DECODED as u64)?.unwrap_or_else(|| coded.to_vec()));
    let mut scrubbed = scrubber.push(&decoded).to_vec();
    scrubbed.extend_from_slice(&scrubber.finish());
    parts.headers.remove(CONTENT_ENCODING);
    parts.headers.remove(TRANSFER_ENCODING);
    parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(scrubbed.len()));
    let body = Scrubbed { inner: None, scrubber, decoded: Some(Bytes::from(scrubbed)), trailers: None };
    Ok(Response::from_parts(parts, body))
}

/// The whole body, within `MAX_DECODED`.
async fn read_whole<B>(mut body: B) -> Result<Zeroizing<Vec<u8>>, Unreadable>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: std::fmt::Display,
{
    let mut whole = Zeroizing::new(Vec::new());
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| Unreadable::Body(e.to_string()))?;
        if let Ok(data) = frame.into_data() {
            if whole.len() + data.len() > MAX_DECODED {
                return Err(Unreadable::TooLarge);
            }
            whole.extend_from_slice(&data);
        }
    }
    Ok(whole)
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
