//! Byte relays once HTTP is out of the way: a passthrough tunnel, or a WebSocket (any `101`
//! upgrade) after both sides switched protocols.
//!
//! Never looks at the bytes.

use tokio::io::{AsyncRead, AsyncWrite, copy_bidirectional};
use tracing::debug;

use super::drain::Drain;

/// Copies bytes both ways until both sides have closed, or the shutdown grace period ends.
/// `what` names the relay in the log line (`passthrough tunnel`, `websocket`).
pub(crate) async fn splice<A, B>(mut client: A, mut origin: B, mut drain: Drain, what: &'static str)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    tokio::select! {
        result = copy_bidirectional(&mut client, &mut origin) => match result {
            Ok((to_origin, to_client)) => debug!(to_origin, to_client, "{what} closed"),
            Err(error) => debug!(%error, "{what} ended with an error"),
        },
        () = drain.stopped() => debug!("{what} cut: shutdown grace period over"),
    }
}
