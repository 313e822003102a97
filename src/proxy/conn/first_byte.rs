//! [`FirstByte`]: a stream wrapper that fails reads with `TimedOut` when the peer sends
//! nothing within a deadline from the start, so a connection that never speaks is closed
//! (`[connections] first_byte_timeout`). After the first byte it is a plain pass-through.
//!
//! Never parses what it reads, never times anything after the first byte (hyper's header
//! read timeout takes over).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// A stream whose first byte must arrive before a deadline.
pub(crate) struct FirstByte<I> {
    inner: I,
    /// Running until the first byte arrives; `None` afterwards.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl<I> FirstByte<I> {
    /// Wraps `inner`; the clock starts now.
    pub(crate) fn new(inner: I, timeout: Duration) -> Self {
        FirstByte { inner, deadline: Some(Box::pin(tokio::time::sleep(timeout))) }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for FirstByte<I> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let Some(deadline) = this.deadline.as_mut() else { return polled };
        match polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                this.deadline = None;
                Poll::Ready(Ok(()))
            }
            Poll::Pending if deadline.as_mut().poll(cx).is_ready() => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client sent nothing before the first-byte timeout",
            ))),
            other => other,
        }
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for FirstByte<I> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn silence_times_out_and_a_first_byte_disarms_the_deadline() {
        let (_peer, quiet) = tokio::io::duplex(64);
        let mut quiet = FirstByte::new(quiet, Duration::from_secs(10));
        let error = quiet.read_u8().await.expect_err("nothing was sent");
        assert_eq!(error.kind(), io::ErrorKind::TimedOut);

        let (mut peer, talking) = tokio::io::duplex(64);
        let mut talking = FirstByte::new(talking, Duration::from_secs(10));
        peer.write_all(b"G").await.expect("the pipe is open");
        assert_eq!(talking.read_u8().await.expect("one byte"), b'G');
        // Past the deadline, a read waits for data rather than failing.
        tokio::time::advance(Duration::from_secs(60)).await;
        peer.write_all(b"E").await.expect("the pipe is open");
        assert_eq!(talking.read_u8().await.expect("one byte"), b'E');
    }
}
