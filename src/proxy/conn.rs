//! What holds one connection, below any request: the caps on agents' connections
//! (`admission`) and on sockets to origins (`sockets`), the first-byte and idle timeouts
//! (`first_byte`, `idle`), graceful shutdown (`drain`), the stream wrappers (`rewind` replays
//! bytes read to sniff a protocol; `sockets::Counted` carries a socket's place under the cap),
//! the byte relay once HTTP is out of the way (`relay`), and a redirected connection's original
//! destination (`original_dst`).
//!
//! Generic over what runs on the connection: nothing here names the request service, decides,
//! or writes the decision log.

mod admission;
mod drain;
mod first_byte;
mod idle;
mod original_dst;
mod relay;
mod rewind;
mod sockets;

pub(crate) use admission::{Admission, Throttled};
pub(crate) use drain::{Drain, DrainController};
pub(crate) use first_byte::FirstByte;
pub(crate) use idle::{Activity, InFlight};
pub(crate) use original_dst::original_destination;
pub(crate) use relay::splice;
pub(crate) use rewind::Rewind;
pub(crate) use sockets::{AtCapacity, CloseIdle, Counted, SocketPermit, Sockets};
