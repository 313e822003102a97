//! Large bodies made and checked on the fly: byte `i` of a body is `i % 251` (a prime, so a
//! lost, repeated or reordered chunk shows), produced and compared in slices of one shared
//! buffer, never held whole.

use std::pin::Pin;
use std::sync::LazyLock;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame};

const PERIOD: usize = 251;
const CHUNK: usize = 64 * 1024;

/// `PERIOD` + `CHUNK` bytes of the pattern: any chunk is a slice of it.
static PATTERN: LazyLock<Bytes> = LazyLock::new(|| (0..PERIOD + CHUNK).map(|i| (i % PERIOD) as u8).collect());

/// The pattern bytes `[offset, offset + len)`, `len <= CHUNK`.
pub fn pattern_chunk(offset: u64, len: usize) -> Bytes {
    let start = (offset % PERIOD as u64) as usize;
    PATTERN.slice(start..start + len)
}

/// The chunks of a pattern body of `len` bytes, in order.
pub fn pattern_chunks(len: u64) -> impl Iterator<Item = Bytes> {
    (0..len.div_ceil(CHUNK as u64)).map(move |i| {
        let offset = i * CHUNK as u64;
        pattern_chunk(offset, (len - offset).min(CHUNK as u64) as usize)
    })
}

/// A response body of `len` pattern bytes, made as it is sent (no length announced, so it
/// goes out chunked).
pub struct PatternBody {
    chunks: Box<dyn Iterator<Item = Bytes> + Send + Sync>,
}

impl PatternBody {
    pub fn new(len: u64) -> Self {
        PatternBody { chunks: Box::new(pattern_chunks(len)) }
    }
}

impl Body for PatternBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.chunks.next().map(|chunk| Ok(Frame::data(chunk))))
    }
}

/// Checks a stream of chunks against the pattern as it arrives.
#[derive(Debug, Default)]
pub struct PatternCheck {
    /// Bytes seen so far.
    pub len: u64,
    /// Whether every byte so far matched.
    pub intact: bool,
}

impl PatternCheck {
    pub fn new() -> Self {
        PatternCheck { len: 0, intact: true }
    }

    pub fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            let n = chunk.len().min(CHUNK);
            self.intact &= chunk[..n] == pattern_chunk(self.len, n)[..];
            self.len += n as u64;
            chunk = &chunk[n..];
        }
    }
}
