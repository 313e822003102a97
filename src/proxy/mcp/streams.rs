//! The event streams of the older HTTP+SSE transport open through agentgate
//! ([`OpenStreams`]), each known by its agent, its origin and the endpoint its server named in
//! its `endpoint` event. That transport's client reads every answer on the stream, never on
//! its `POST`s, so a refused call `POST`ed to a known endpoint has its JSON-RPC error delivered
//! on the stream ([`OpenStreams::deliver`]) and the `POST` is answered `202`, as the server
//! answers it.
//!
//! Never: reads or writes a socket, decides a call, or delivers to a stream another agent or
//! another origin opened.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use dashmap::DashMap;
use tokio::sync::mpsc;

/// How many of agentgate's answers may wait on one stream; past it a refusal is answered on
/// its `POST` instead.
const QUEUE: usize = 16;

/// Which stream a `POST` answers to: the agent, the origin (`scheme://host:port`) and the
/// endpoint (path and query) the server named.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct StreamKey {
    agent: String,
    origin: String,
    endpoint: String,
}

impl StreamKey {
    /// The key of `agent`'s stream on `origin` whose messages go to `endpoint`: a path with
    /// its query, or an absolute URI on `origin` (its path and query are kept). `None` for
    /// an endpoint on another origin or a relative one without a leading `/`.
    pub(crate) fn new(agent: &str, origin: &str, endpoint: &str) -> Option<Self> {
        let path = if endpoint.starts_with('/') {
            endpoint
        } else {
            let rest = endpoint.strip_prefix(origin)?;
            if !rest.starts_with('/') {
                return None;
            }
            rest
        };
        Some(StreamKey { agent: agent.to_owned(), origin: origin.to_owned(), endpoint: path.to_owned() })
    }
}

/// The open streams, shared by every connection of the proxy.
#[derive(Default)]
pub(crate) struct OpenStreams {
    open: DashMap<StreamKey, (u64, mpsc::Sender<Bytes>)>,
    next: AtomicU64,
}

impl OpenStreams {
    /// Opens the stream `key` names (a later stream with the same key takes its place): what
    /// [`deliver`](Self::deliver) sends it arrives on the tap until the tap is dropped.
    pub(crate) fn open(self: &Arc<Self>, key: StreamKey) -> Tap {
        let (sender, events) = mpsc::channel(QUEUE);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.open.insert(key.clone(), (id, sender));
        Tap { streams: Arc::clone(self), key, id, events }
    }

    /// `json` (one JSON-RPC answer or a batch) as a `message` event on the stream `key`
    /// names; false when no such stream is open or its queue is full.
    pub(crate) fn deliver(&self, key: &StreamKey, json: &[u8]) -> bool {
        let Some(open) = self.open.get(key) else { return false };
        let mut event = BytesMut::from(&b"event: message\n"[..]);
        for line in json.split(|b| *b == b'\n') {
            event.extend_from_slice(b"data: ");
            event.extend_from_slice(line.strip_suffix(b"\r").unwrap_or(line));
            event.extend_from_slice(b"\n");
        }
        event.extend_from_slice(b"\n");
        open.1.try_send(event.freeze()).is_ok()
    }
}

/// One open stream's end of [`OpenStreams`]: the events delivered to it; closed when dropped.
pub(crate) struct Tap {
    streams: Arc<OpenStreams>,
    key: StreamKey,
    id: u64,
    pub(crate) events: mpsc::Receiver<Bytes>,
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.streams.open.remove_if(&self.key, |_, (id, _)| *id == self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ORIGIN: &str = "https://mcp.test:443";

    fn key(agent: &str, endpoint: &str) -> StreamKey {
        StreamKey::new(agent, ORIGIN, endpoint).expect("a known endpoint")
    }

    #[test]
    fn an_endpoint_is_a_path_or_an_absolute_uri_on_the_same_origin() {
        assert_eq!(key("a", "https://mcp.test:443/messages/?s=1"), key("a", "/messages/?s=1"));
        assert_eq!(StreamKey::new("a", ORIGIN, "https://other.test:443/messages/"), None);
        assert_eq!(StreamKey::new("a", ORIGIN, "messages/"), None);
    }

    #[tokio::test]
    async fn a_delivery_reaches_only_the_stream_of_its_agent_and_endpoint_while_it_is_open() {
        let streams = Arc::new(OpenStreams::default());
        let mut tap = streams.open(key("a", "/messages/?s=1"));
        assert!(!streams.deliver(&key("b", "/messages/?s=1"), b"{}"), "another agent's POST");
        assert!(!streams.deliver(&key("a", "/messages/?s=2"), b"{}"), "another session");
        assert!(streams.deliver(&key("a", "/messages/?s=1"), b"{\"id\":7}"));
        let event = tap.events.recv().await.expect("delivered");
        assert_eq!(&event[..], b"event: message\ndata: {\"id\":7}\n\n");
        drop(tap);
        assert!(!streams.deliver(&key("a", "/messages/?s=1"), b"{}"), "closed with its tap");
    }

    #[test]
    fn a_full_queue_refuses_the_delivery() {
        let streams = Arc::new(OpenStreams::default());
        let _tap = streams.open(key("a", "/m"));
        let delivered = (0..QUEUE + 1).filter(|_| streams.deliver(&key("a", "/m"), b"{}")).count();
        assert_eq!(delivered, QUEUE);
    }
}
