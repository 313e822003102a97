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
            if !this.prefix.has_remaining() {
                // An empty slice still holds its whole buffer (4 KiB read for the first
                // bytes): let it go for the rest of the connection's life.
                this.prefix = Bytes::new();
            }
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

    #[tokio::test]
    async fn the_prefix_buffer_is_let_go_once_replayed() -> io::Result<()> {
        let (near, _far) = tokio::io::duplex(64);
        let mut first = bytes::BytesMut::with_capacity(4096);
        first.extend_from_slice(b"hello");
        let prefix = first.freeze();
        let probe = prefix.clone();
        let mut rewound = Rewind::new(prefix, near);
        let mut read = [0u8; 5];
        rewound.read_exact(&mut read).await?;
        assert_eq!(&read, b"hello");
        assert!(probe.is_unique(), "the rewind still holds the buffer the first bytes were read into");
        Ok(())
    }
}
