//! Byte relays once HTTP is out of the way: a passthrough tunnel, or a WebSocket (any `101`
//! upgrade) after both sides switched protocols. A relay of an agent with byte budgets spends
//! its bytes both ways as they pass (from the agent: sending budgets; to it: receiving ones)
//! and is cut, both ways at once, when a frame would cross one; the cut is recorded
//! (`RelayBudget::record_cut`).
//!
//! Never looks at the bytes.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, copy_bidirectional, split};
use tracing::debug;

use super::drain::Drain;
use crate::limits::Refused;
use crate::policy::Direction;
use crate::proxy::budget::RelayBudget;

/// How much a budgeted relay reads at a time, each way: a read's bytes are spent before they
/// are written on.
const CHUNK: usize = 16 * 1024;

/// Copies bytes both ways until both sides have closed, a byte budget cuts the relay
/// (`budget`), or the shutdown grace period ends. `what` names the relay in the log line
/// (`passthrough tunnel`, `websocket`).
pub(crate) async fn splice<A, B>(
    mut client: A,
    mut origin: B,
    mut drain: Drain,
    what: &'static str,
    budget: Option<RelayBudget>,
) where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let Some(budget) = budget else {
        tokio::select! {
            result = copy_bidirectional(&mut client, &mut origin) => match result {
                Ok((to_origin, to_client)) => debug!(to_origin, to_client, "{what} closed"),
                Err(error) => debug!(%error, "{what} ended with an error"),
            },
            () = drain.stopped() => debug!("{what} cut: shutdown grace period over"),
        }
        return;
    };
    let counts = [AtomicU64::new(0), AtomicU64::new(0)];
    let relayed = tokio::select! {
        relayed = metered(client, origin, &budget, &counts) => relayed,
        () = drain.stopped() => {
            debug!("{what} cut: shutdown grace period over");
            return;
        }
    };
    let (to_origin, to_client) = (counts[0].load(Ordering::Relaxed), counts[1].load(Ordering::Relaxed));
    match relayed {
        Ok(()) => debug!(to_origin, to_client, "{what} closed"),
        Err(Stop::Io(error)) => debug!(%error, "{what} ended with an error"),
        Err(Stop::Cut(refused)) => budget.record_cut(&refused, to_origin, to_client).await,
    }
}

/// Why a budgeted relay stopped before both sides closed.
enum Stop {
    Io(std::io::Error),
    Cut(Refused),
}

/// Relays both ways, spending every read against `budget` before it is written on, counting
/// what passed into `counts` (to the origin, to the client); the first error or cut ends both.
async fn metered<A, B>(client: A, origin: B, budget: &RelayBudget, counts: &[AtomicU64; 2]) -> Result<(), Stop>
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = split(client);
    let (mut origin_read, mut origin_write) = split(origin);
    let up = pump(&mut client_read, &mut origin_write, budget, Direction::Sent, &counts[0]);
    let down = pump(&mut origin_read, &mut client_write, budget, Direction::Received, &counts[1]);
    tokio::try_join!(up, down).map(|_| ())
}

/// One way of a budgeted relay: reads, spends, writes, until the reader's end (then shuts
/// the writer down, as `copy_bidirectional` does).
async fn pump<R, W>(
    from: &mut R,
    to: &mut W,
    budget: &RelayBudget,
    direction: Direction,
    count: &AtomicU64,
) -> Result<(), Stop>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buffer = vec![0u8; CHUNK];
    loop {
        let n = from.read(&mut buffer).await.map_err(Stop::Io)?;
        if n == 0 {
            return to.shutdown().await.map_err(Stop::Io);
        }
        let passed = count.load(Ordering::Relaxed);
        budget.spend(direction, n as u64, passed).await.map_err(Stop::Cut)?;
        to.write_all(&buffer[..n]).await.map_err(Stop::Io)?;
        to.flush().await.map_err(Stop::Io)?;
        count.store(passed + n as u64, Ordering::Relaxed);
    }
}
