//! A recording read back for `mode = "replay"`: the answer to a request, matched by agent,
//! method, URL and the SHA-256 of its body, in the order recorded when the same request
//! was made more than once (past the last, the last again); the policy files by URL, in
//! order likewise; the addresses each name resolved to. A request with no recorded answer
//! gets the reason it is refused (`replay.miss`), naming the nearest recorded URL.
//!
//! Never: dials or resolves (it is what answers instead), decides (the gate does, before
//! anything is asked of it).

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::format::{self, Answer, Line, PolicyFile, ReadError};

/// Recorded items of one key, handed out in order; past the last, the last again.
struct InOrder<T> {
    items: Vec<T>,
    next: AtomicUsize,
}

impl<T> InOrder<T> {
    fn new() -> Self {
        InOrder { items: Vec::new(), next: AtomicUsize::new(0) }
    }

    fn next(&self) -> Option<&T> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        self.items.get(n.min(self.items.len().saturating_sub(1)))
    }
}

/// What a replayed request is matched by.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    agent: String,
    method: String,
    url: String,
    body_sha256: String,
}

/// A recording, read whole at start.
pub struct Recording {
    exchanges: HashMap<Key, InOrder<Answer>>,
    /// Every recorded (agent, URL), in order, for the nearest one to a miss.
    urls: Vec<(String, String)>,
    policies: HashMap<String, InOrder<PolicyFile>>,
    resolved: HashMap<String, Vec<IpAddr>>,
}

impl Recording {
    /// Reads the recording in `dir`.
    ///
    /// # Errors
    /// [`ReadError`]: the file is missing or unreadable, or a line is not a recording line.
    pub fn load(dir: &Path) -> Result<Recording, ReadError> {
        Ok(Recording::from_lines(format::read(dir)?))
    }

    /// The recording made of `lines`, in the order written.
    pub(crate) fn from_lines(lines: Vec<Line>) -> Recording {
        let mut recording = Recording {
            exchanges: HashMap::new(),
            urls: Vec::new(),
            policies: HashMap::new(),
            resolved: HashMap::new(),
        };
        for line in lines {
            match line {
                Line::Exchange(exchange) => {
                    let exchange = *exchange;
                    let key = Key {
                        agent: exchange.agent.clone(),
                        method: exchange.method,
                        url: exchange.url.clone(),
                        body_sha256: exchange.request.body.sha256,
                    };
                    recording.urls.push((exchange.agent, exchange.url));
                    recording.exchanges.entry(key).or_insert_with(InOrder::new).items.push(exchange.response);
                }
                Line::Policy(file) => {
                    recording.policies.entry(file.url.clone()).or_insert_with(InOrder::new).items.push(file)
                }
                Line::Resolved(resolved) => {
                    recording.resolved.insert(resolved.host, resolved.addresses);
                }
            }
        }
        recording
    }

    /// The recorded answer to `agent`'s `method url` with a body of digest `body_sha256`.
    ///
    /// # Errors
    /// Why there is none, in plain words naming the nearest recorded URL: the rule of the
    /// request's `replay.miss`.
    pub fn answer(&self, agent: &str, method: &str, url: &str, body_sha256: &str) -> Result<&Answer, String> {
        let key = Key {
            agent: agent.to_owned(),
            method: method.to_owned(),
            url: url.to_owned(),
            body_sha256: body_sha256.to_owned(),
        };
        if let Some(answer) = self.exchanges.get(&key).and_then(InOrder::next) {
            return Ok(answer);
        }
        let nearest = self.nearest(agent, url);
        Err(match nearest {
            Some(nearest) if nearest == url => format!(
                "the recording has {url} for agent {agent}, but not as {method} with this request body; replay the request as it was recorded"
            ),
            Some(nearest) => format!(
                "the recording has no answer to {method} {url} for agent {agent}; the nearest recorded URL is {nearest}"
            ),
            None => format!("the recording has no answer to {method} {url}, and no exchange of agent {agent} at all"),
        })
    }

    /// The recorded URL of `agent` sharing the longest start with `url`, the first of equals.
    fn nearest(&self, agent: &str, url: &str) -> Option<&str> {
        let shared = |other: &str| url.bytes().zip(other.bytes()).take_while(|(a, b)| a == b).count();
        let mut best: Option<(&str, usize)> = None;
        for (_, recorded) in self.urls.iter().filter(|(who, _)| who == agent) {
            let length = shared(recorded);
            if best.is_none_or(|(_, longest)| length > longest) {
                best = Some((recorded, length));
            }
        }
        best.map(|(recorded, _)| recorded)
    }

    /// The next recorded answer to a policy fetch of `url`.
    pub fn policy(&self, url: &str) -> Option<&PolicyFile> {
        self.policies.get(url).and_then(InOrder::next)
    }

    /// The addresses `host` resolved to while recording.
    pub fn resolved(&self, host: &str) -> Option<&[IpAddr]> {
        self.resolved.get(host).map(Vec::as_slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::format::{Body, Capture, Exchange, Message};

    fn body(text: &str) -> Body {
        let mut capture = Capture::new(1024);
        capture.push(text.as_bytes());
        capture.finish(true)
    }

    fn exchange(agent: &str, method: &str, url: &str, sent: &str, answered: &str) -> Line {
        Line::Exchange(Box::new(Exchange {
            event_id: "0".repeat(32),
            started: "2026-01-01T00:00:00.000Z".to_owned(),
            time_ms: 1,
            agent: agent.to_owned(),
            method: method.to_owned(),
            url: url.to_owned(),
            http_version: "HTTP/1.1".to_owned(),
            request: Message { headers: Vec::new(), body: body(sent) },
            response: Answer { status: 200, headers: Vec::new(), body: body(answered) },
        }))
    }

    #[test]
    fn repeated_requests_are_answered_in_order_then_the_last_again() {
        let recording = Recording::from_lines(vec![
            exchange("a", "GET", "http://h/x", "", "first"),
            exchange("a", "GET", "http://h/x", "", "second"),
        ]);
        let digest = format::sha256(b"");
        let answers: Vec<Vec<u8>> =
            (0..3).map(|_| recording.answer("a", "GET", "http://h/x", &digest).unwrap().body.kept.clone()).collect();
        assert_eq!(answers, [b"first".to_vec(), b"second".to_vec(), b"second".to_vec()]);
    }

    #[test]
    fn agent_method_url_and_body_digest_all_match_or_the_miss_names_the_nearest_url() {
        let recording = Recording::from_lines(vec![
            exchange("a", "POST", "http://h/api/items", "{\"n\":1}", "made"),
            exchange("a", "GET", "http://h/page", "", "page"),
        ]);
        let sent = format::sha256(b"{\"n\":1}");
        assert_eq!(recording.answer("a", "POST", "http://h/api/items", &sent).unwrap().body.kept.clone(), b"made");
        let other_body = recording.answer("a", "POST", "http://h/api/items", &format::sha256(b"{}")).unwrap_err();
        assert!(other_body.contains("not as POST with this request body"), "{other_body}");
        let miss = recording.answer("a", "GET", "http://h/api/other", &format::sha256(b"")).unwrap_err();
        assert!(miss.contains("the nearest recorded URL is http://h/api/items"), "{miss}");
        let stranger = recording.answer("b", "GET", "http://h/page", &format::sha256(b"")).unwrap_err();
        assert!(stranger.contains("no exchange of agent b"), "{stranger}");
    }
}
