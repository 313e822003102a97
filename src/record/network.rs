//! The recording at the network's seams: while recording, the policy fetcher's transport
//! ([`RecordingTransport`]) and the network guard's resolver ([`RecordingResolver`]) hand
//! a copy of what they got to the recorder; in replay, they answer from the recording
//! instead ([`ReplayTransport`], [`ReplayResolver`]) and the dialer refuses every address
//! ([`NoDial`]), so a replayed run resolves and dials nothing, its policy files included.
//!
//! Never: decides, changes what passes (a recorded policy body streams on unchanged), or
//! falls back to the network in replay.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use tokio::net::TcpStream;

use super::format::{Body, Line, PolicyFile, Resolved};
use super::replay::Recording;
use super::tap::{Tapped, header_lines};
use super::writer::Recorder;
use crate::fetch::{PolicyTransport, TransportFuture};
use crate::net::{Dial, NetFuture, Resolve};

/// The policy fetcher's transport, each answer recorded as it streams to the fetcher.
pub struct RecordingTransport {
    /// The transport that fetches.
    pub inner: Arc<dyn PolicyTransport>,
    /// Where the answers go.
    pub recorder: Recorder,
}

impl PolicyTransport for RecordingTransport {
    fn get(&self, url: Uri, headers: HeaderMap) -> TransportFuture<'_> {
        Box::pin(async move {
            let response = self.inner.get(url.clone(), headers).await?;
            let (status, headers) = (response.status().as_u16(), header_lines(response.headers()));
            let (recorder, max) = (self.recorder.clone(), self.recorder.max_body());
            let url = url.to_string();
            Ok(response.map(|body| {
                let done = move |body: Body| recorder.submit(Line::Policy(PolicyFile { url, status, headers, body }));
                Tapped::new(body, max, done).boxed_unsync()
            }))
        })
    }
}

/// Policy fetches answered from the recording. A file the recording lacks is answered
/// `404` (the site has none): the run never fetched it, so no decision used it.
pub struct ReplayTransport {
    /// The recording answered from.
    pub recording: Arc<Recording>,
}

impl PolicyTransport for ReplayTransport {
    fn get(&self, url: Uri, _headers: HeaderMap) -> TransportFuture<'_> {
        let (status, headers, body) = match self.recording.policy(&url.to_string()) {
            Some(file) => (file.status, file.headers.clone(), file.body.kept.clone()),
            None => (StatusCode::NOT_FOUND.as_u16(), Vec::new(), Vec::new()),
        };
        let response = recorded_response(status, &headers, body, |never| match never {});
        Box::pin(async move { Ok(response) })
    }
}

/// A recorded answer as a response: its status, its header lines (those that no longer
/// parse left out) and its kept body, whose error type is `E`.
pub fn recorded_response<E: 'static>(
    status: u16,
    headers: &[(String, String)],
    body: Vec<u8>,
    error: fn(std::convert::Infallible) -> E,
) -> Response<http_body_util::combinators::UnsyncBoxBody<Bytes, E>> {
    let mut response = Response::new(Full::new(Bytes::from(body)).map_err(error).boxed_unsync());
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    for (name, value) in headers {
        if let (Ok(name), Ok(value)) = (HeaderName::try_from(name.as_str()), HeaderValue::try_from(value.as_str())) {
            response.headers_mut().append(name, value);
        }
    }
    response
}

/// The guard's resolver, each answer recorded.
pub struct RecordingResolver {
    /// The resolver that resolves.
    pub inner: Arc<dyn Resolve>,
    /// Where the answers go.
    pub recorder: Recorder,
}

impl Resolve for RecordingResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
        Box::pin(async move {
            let addresses = self.inner.resolve(name).await?;
            self.recorder.submit(Line::Resolved(Resolved { host: name.to_owned(), addresses: addresses.clone() }));
            Ok(addresses)
        })
    }
}

/// Names resolved from the recording: a name it lacks does not resolve.
pub struct ReplayResolver {
    /// The recording answered from.
    pub recording: Arc<Recording>,
}

impl Resolve for ReplayResolver {
    fn resolve<'a>(&'a self, name: &'a str) -> NetFuture<'a, Vec<IpAddr>> {
        let answer = self.recording.resolved(name).map(<[IpAddr]>::to_vec).ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("replay: the recording never resolved {name}"))
        });
        Box::pin(async move { answer })
    }
}

/// The dialer of a replay: every address refused, nothing sent.
pub struct NoDial;

impl Dial for NoDial {
    fn dial(&self, addr: SocketAddr) -> NetFuture<'_, TcpStream> {
        Box::pin(async move {
            Err(io::Error::new(io::ErrorKind::PermissionDenied, format!("replay: agentgate dials nothing ({addr})")))
        })
    }
}

#[cfg(test)]
mod tests {
    use http_body_util::BodyExt;

    use super::*;
    use crate::record::format::Capture;

    #[tokio::test]
    async fn policy_fetches_in_replay_are_answered_from_the_recording_or_404() {
        let mut capture = Capture::new(100);
        capture.push(b"User-agent: *\nDisallow: /private/\n");
        let robots = PolicyFile {
            url: "https://h.test/robots.txt".to_owned(),
            status: 200,
            headers: vec![("content-type".to_owned(), "text/plain".to_owned())],
            body: capture.finish(true),
        };
        let recording = Arc::new(Recording::from_lines(vec![Line::Policy(robots)]));
        let transport = ReplayTransport { recording: Arc::clone(&recording) };
        let answer = transport.get(Uri::from_static("https://h.test/robots.txt"), HeaderMap::new()).await.unwrap();
        assert_eq!((answer.status().as_u16(), answer.headers()["content-type"].to_str().unwrap()), (200, "text/plain"));
        let body = answer.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "User-agent: *\nDisallow: /private/\n");
        let absent = transport.get(Uri::from_static("https://h.test/agents.txt"), HeaderMap::new()).await.unwrap();
        assert_eq!(absent.status(), 404);
        let resolver = ReplayResolver { recording };
        assert!(resolver.resolve("h.test").await.is_err(), "a name the recording never resolved");
        assert!(NoDial.dial(SocketAddr::from(([127, 0, 0, 1], 80))).await.is_err());
    }
}
