//! What holds one connection, below any request: the caps on agents' connections
//! (`admission`) and on sockets to origins (`sockets`), the first-byte and idle timeouts
//! (`first_byte`, `idle`), graceful shutdown (`drain`), the stream wrappers (`rewind` replays
//! bytes read to sniff a protocol; `sockets::Counted` carries a socket's place under the cap),
//! the byte relay once HTTP is out of the way (`relay`), and a redirected connection's original
//! destination (`original_dst`).
//!
//! Generic over what runs on the connection: nothing here names the request service, decides,
//! or writes the decision log.

/// `impl AsyncWrite for $wrapper<T>` writing straight through to its `inner` field: the
/// wrappers that change only how a stream is read (`Rewind`) or how long it is counted
/// (`Counted`).
macro_rules! write_through {
    ($wrapper:ident) => {
        impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $wrapper<T> {
            fn poll_write(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }

            fn poll_flush(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
            }

            fn poll_shutdown(
                self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
            }
        }
    };
}
use write_through;

mod admission;
mod drain;
mod first_byte;
mod idle;
mod original_dst;
mod relay;
mod rewind;
mod sockets;

pub(crate) use admission::Admission;
pub(crate) use drain::{Drain, DrainController};
pub(crate) use first_byte::FirstByte;
pub(crate) use idle::{Activity, InFlight};
pub(crate) use original_dst::original_destination;
pub(crate) use relay::splice;
pub(crate) use rewind::Rewind;
pub(crate) use sockets::{AtCapacity, CloseIdle, Counted, SocketPermit, Sockets};
