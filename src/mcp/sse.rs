//! A `text/event-stream` answer to a `tools/list`, filtered event by event: each complete
//! event's `data` is read as JSON-RPC and written back with the refused tools removed
//! (`super::filter_json`); every other event, field and comment passes as it came. The
//! `endpoint` event of the older HTTP+SSE transport (where its client sends its `POST`s) is
//! noted ([`EventFilter::endpoint`]), so the proxy can answer a refused call on this stream.
//!
//! Never: reads a socket (the proxy hands it the bytes), or holds more than one event, at
//! most the bound it was made with.

use bytes::{Bytes, BytesMut};

use super::{McpTable, filter_json};

/// An event stream being filtered: bytes in ([`push`](Self::push)), whole events out.
#[derive(Debug)]
pub struct EventFilter {
    table: McpTable,
    /// The bytes of the event not complete yet.
    pending: BytesMut,
    /// The most bytes one event may take.
    bound: usize,
    /// The data of the last `endpoint` event, until taken.
    endpoint: Option<String>,
}

/// An event longer than the bound: it cannot be checked, so it is not passed on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "an event of the MCP server's event stream is over {0} bytes, so agentgate cannot filter it; the stream is cut"
)]
pub struct EventTooLong(pub usize);

impl EventFilter {
    /// A filter removing what `table` refuses, holding at most `bound` bytes of one event.
    pub fn new(table: McpTable, bound: usize) -> Self {
        EventFilter { table, pending: BytesMut::new(), bound, endpoint: None }
    }

    /// `bytes` more of the stream: what can go on now (every event completed by them).
    ///
    /// # Errors
    /// [`EventTooLong`] when the event being read passes the bound.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Bytes, EventTooLong> {
        self.pending.extend_from_slice(bytes);
        let mut out = BytesMut::new();
        while let Some((end, separator)) = event_end(&self.pending) {
            let event = self.pending.split_to(end + separator);
            if let Some(endpoint) = endpoint_of(&event[..end]) {
                self.endpoint = Some(endpoint);
            }
            out.extend_from_slice(&self.filtered(&event[..end]));
            out.extend_from_slice(&event[end..]);
        }
        if self.pending.len() > self.bound {
            return Err(EventTooLong(self.bound));
        }
        Ok(out.freeze())
    }

    /// Where the older HTTP+SSE transport's client is told to send its messages (the data of
    /// an `endpoint` event passed so far), once.
    pub fn endpoint(&mut self) -> Option<String> {
        self.endpoint.take()
    }

    /// The end of the stream: the last event, even without its blank line.
    pub fn finish(&mut self) -> Bytes {
        let rest = self.pending.split();
        Bytes::from(self.filtered(&rest))
    }

    /// One event (without its blank line), its data filtered when it is a `tools/list`
    /// result with refused tools.
    fn filtered(&self, event: &[u8]) -> Vec<u8> {
        let Some(json) = data_of(event).and_then(|d| filter_json(&d, &self.table)) else {
            return event.to_vec();
        };
        let mut out = Vec::with_capacity(event.len());
        let mut written = false;
        for line in lines(event) {
            if !line.starts_with(b"data:") {
                out.extend_from_slice(line);
                out.push(b'\n');
            } else if !written {
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(&json);
                out.push(b'\n');
                written = true;
            }
        }
        out.pop();
        out
    }
}

/// The lines of `event`, without their line ends.
fn lines(event: &[u8]) -> impl Iterator<Item = &[u8]> {
    event.split(|b| *b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l))
}

/// The data of `event`, its `data` lines joined by `\n`; `None` when it has none.
fn data_of(event: &[u8]) -> Option<Vec<u8>> {
    let data: Vec<&[u8]> = lines(event)
        .filter_map(|line| line.strip_prefix(b"data:"))
        .map(|value| value.strip_prefix(b" ").unwrap_or(value))
        .collect();
    (!data.is_empty()).then(|| data.join(&b'\n'))
}

/// The data of `event` when it is an `endpoint` event (its data: a URI).
fn endpoint_of(event: &[u8]) -> Option<String> {
    let named = lines(event).filter_map(|line| line.strip_prefix(b"event:")).last()?.trim_ascii() == b"endpoint";
    let data = data_of(event)?;
    let uri = std::str::from_utf8(&data).ok()?.trim();
    (named && !uri.is_empty()).then(|| uri.to_owned())
}

/// Where the first complete event in `bytes` ends, and the length of the blank line after it.
fn event_end(bytes: &[u8]) -> Option<(usize, usize)> {
    let lf = bytes.windows(2).position(|w| w == b"\n\n").map(|at| (at, 2));
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n").map(|at| (at, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> McpTable {
        McpTable {
            hosts: vec!["mcp.test".to_owned()],
            agents: Vec::new(),
            allow_tools: vec!["search".to_owned()],
            deny_tools: Vec::new(),
            unlisted_tools: None,
            log_arguments: false,
        }
    }

    const LIST: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"search"},{"name":"delete_repo"}]}}"#;

    #[test]
    fn each_event_is_filtered_even_when_split_across_chunks_and_others_pass_as_they_came() {
        let stream = format!(
            ": ping\n\nevent: message\nid: 4\ndata: {LIST}\n\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"x\"}}\n\n"
        );
        let mut filter = EventFilter::new(table(), 1 << 16);
        let mut out = Vec::new();
        for chunk in stream.as_bytes().chunks(7) {
            out.extend_from_slice(&filter.push(chunk).expect("within the bound"));
        }
        out.extend_from_slice(&filter.finish());
        let out = String::from_utf8(out).expect("UTF-8");
        assert!(out.starts_with(": ping\n\nevent: message\nid: 4\ndata: {"), "{out}");
        assert!(out.contains("\"search\"") && !out.contains("delete_repo"), "{out}");
        assert!(out.ends_with("data: {\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n\n"), "{out}");
    }

    #[test]
    fn a_multi_line_data_event_with_crlf_is_read_whole() {
        let (first, second) = LIST.split_at(LIST.find("\"result\"").unwrap_or(0));
        let stream = format!("data: {first}\r\ndata: {second}\r\n\r\n");
        let mut filter = EventFilter::new(table(), 1 << 16);
        let out = filter.push(stream.as_bytes()).expect("within the bound");
        let out = String::from_utf8(out.to_vec()).expect("UTF-8");
        assert!(!out.contains("delete_repo") && out.ends_with("\r\n\r\n"), "{out}");
    }

    #[test]
    fn the_endpoint_event_of_the_older_transport_is_noted_once_and_passes_as_it_came() {
        let stream = "event: endpoint\r\ndata: /messages/?session_id=ab12\r\n\r\nevent: message\ndata: {}\n\n";
        let mut filter = EventFilter::new(table(), 1 << 16);
        let out = filter.push(stream.as_bytes()).expect("within the bound");
        assert_eq!(&out[..], stream.as_bytes());
        assert_eq!(filter.endpoint().as_deref(), Some("/messages/?session_id=ab12"));
        assert_eq!(filter.endpoint(), None, "taken once");
        assert_eq!(endpoint_of(b"event: message\ndata: /x"), None, "only an endpoint event names one");
    }

    #[test]
    fn an_event_over_the_bound_is_refused_not_passed() {
        let mut filter = EventFilter::new(table(), 16);
        assert_eq!(filter.push(LIST.as_bytes()), Err(EventTooLong(16)));
    }
}
