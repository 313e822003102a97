//! `Rewind`: a stream that first replays bytes already read from it.
//!
//! After a CONNECT, the proxy reads the tunnel's first bytes to tell a TLS ClientHello from
//! plain HTTP; whichever server then takes the stream must see those bytes again. Never
//! interprets them.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, ReadBuf};

/// `inner` with `prefix` put back in front of its read side; writes go straight through.
#[derive(Debug)]
pub(crate) struct Rewind<T> {
    prefix: Bytes,
    inner: T,
}

impl<T> Rewind<T> {
    pub(crate) fn new(prefix: Bytes, inner: T) -> Self {
        Rewind { prefix, inner }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Rewind<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.prefix.has_remaining() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

// Writes pass straight through to the wrapped stream.
super::write_through!(Rewind);

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn replays_the_prefix_then_reads_the_stream() -> io::Result<()> {
        let (near, mut far) = tokio::io::duplex(64);
        far.write_all(b" world").await?;
        drop(far);
        let mut rewound = Rewind::new(Bytes::from_static(b"hello"), near);
        let mut text = String::new();
        rewound.read_to_string(&mut text).await?;
        assert_eq!(text, "hello world");
        Ok(())
    }
}
