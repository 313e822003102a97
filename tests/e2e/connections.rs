//! Connection bounds on the proxy port: silent connections are closed after
//! `[connections] first_byte_timeout` (on the proxy port and inside a CONNECT tunnel), and a
//! client over `max_connections_per_client` has its new connection closed, from whichever
//! loopback address it comes (every loopback address is one client), while one of its held
//! connections is served. Idle keep-alive connections and intercepted tunnels idle after the TLS
//! handshake (h1 and h2) are closed too, and so is an h2 connection with no stream open for
//! `idle_timeout`, while one with a slow download in flight is not. On the origin side,
//! pooled h2 connections are closed after `[upstream] idle_timeout`.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::task::JoinHandle;

use crate::support::origin::Origin;
use crate::support::pki::TestCa;
use crate::support::raw::{connect_tunnel, read_head, tls_client};
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult, bypass_all, log};

/// hyper's h2 client on an intercepted tunnel: the request sender, and the connection task,
/// which ends when the proxy closes the connection.
type H2Tunnel = (SendRequest<Empty<Bytes>>, JoinHandle<Result<(), hyper::Error>>);

/// A bound on how long a test waits for the proxy to close a connection: a guard against a
/// hang, far above the timeouts under test, not a timing assertion.
const CLOSE_GUARD: Duration = Duration::from_secs(60);

/// Waits until the proxy closes `stream` (EOF or reset), failing if it sends anything.
async fn closed_by_proxy(stream: &mut TcpStream) -> TestResult {
    let mut buf = [0u8; 64];
    match tokio::time::timeout(CLOSE_GUARD, stream.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Ok(()),
        Ok(Ok(n)) => Err(format!("the proxy sent {:?} instead of closing", String::from_utf8_lossy(&buf[..n])).into()),
        Err(_) => Err(format!("the connection was still open after {CLOSE_GUARD:?}").into()),
    }
}

/// A connection to `proxy` from the local address `from`.
async fn connect_from(from: IpAddr, proxy: SocketAddr) -> TestResult<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    Ok(socket.connect(proxy).await?)
}

#[tokio::test]
async fn silent_connections_are_closed_after_the_first_byte_timeout() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.connections.first_byte_timeout = Duration::from_millis(500);
    })
    .await?;
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(TcpStream::connect(proxy.addr).await?);
    }
    // A tunnel whose client never sends its ClientHello.
    let (mut tunnel, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    for stream in &mut silent {
        closed_by_proxy(stream).await?;
    }
    closed_by_proxy(&mut tunnel).await?;

    // The proxy still serves, and a request sent promptly is not cut off.
    let response = proxy.client()?.get(origin.url("/echo")).send().await?;
    assert_eq!(response.status(), 200);
    let records = proxy.finish().await?;
    let served = log::for_request(&records, "GET", "/echo");
    assert_eq!(served.len(), 1, "{records:#?}");
    assert_eq!(served[0]["http.response.status_code"], 200);
    Ok(())
}

#[tokio::test]
async fn the_connection_over_the_per_client_cap_is_closed_whichever_loopback_address_it_comes_from() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.connections.max_connections_per_client = 50;
        // Long enough that only the cap closes anything here.
        config.connections.first_byte_timeout = Duration::from_secs(3600);
    })
    .await?;
    // One local process spreads its connections over 127.0.0.1 to 127.0.0.5: one client.
    let mut held = Vec::new();
    for n in 0..50u8 {
        held.push(connect_from(IpAddr::from([127, 0, 0, 1 + n % 5]), proxy.addr).await?);
    }
    // The proxy accepts in order, so the first 50 hold their places when the next arrive.
    for fresh in [6u8, 200] {
        let mut over = connect_from(IpAddr::from([127, 0, 0, fresh]), proxy.addr).await?;
        // Whatever the client sends, the proxy closes without answering.
        let _ = over.write_all(format!("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", origin.url("/refused")).as_bytes()).await;
        closed_by_proxy(&mut over).await?;
    }

    // One of the 50 is still served.
    let first = &mut held[0];
    first.write_all(format!("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", origin.url("/echo")).as_bytes()).await?;
    let head = read_head(first).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    drop(held);
    // Places are given back (another client address is counted on its own:
    // `proxy::conn::admission::tests::each_cap_refuses_past_its_limit_and_a_closed_connection_frees_its_place`).
    let later = proxy.client_builder()?.local_address(IpAddr::from([127, 0, 0, 2])).build()?;
    let response = eventually("a place given back", async || Ok(later.get(origin.url("/echo")).send().await?)).await?;
    assert_eq!(response.status(), 200);
    let records = proxy.finish().await?;
    let served = log::for_request(&records, "GET", "/echo");
    assert_eq!(served.len(), 2, "{records:#?}");
    assert!(served.iter().all(|r| r["http.response.status_code"] == 200), "{records:#?}");
    assert_eq!(log::for_request(&records, "GET", "/refused").len(), 0, "the refused connections made no request");
    Ok(())
}

#[tokio::test]
async fn idle_keep_alive_and_idle_intercepted_tunnels_are_closed() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.connections.first_byte_timeout = Duration::from_millis(500);
        config.connections.header_read_timeout = Duration::from_millis(500);
    })
    .await?;
    // A keep-alive connection, idle after its first response.
    let mut keep_alive = TcpStream::connect(proxy.addr).await?;
    keep_alive.write_all(format!("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", origin.url("/hello")).as_bytes()).await?;
    let head = read_head(&mut keep_alive).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut body = [0u8; 64];
    let length: usize = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length: ").map(str::to_owned))
        .ok_or("a content-length")?
        .trim()
        .parse()?;
    keep_alive.read_exact(&mut body[..length]).await?;
    closed_by_proxy(&mut keep_alive).await?;

    // Intercepted tunnels that finish the TLS handshake, then say nothing, over h1 and h2.
    // Over h2 the server speaks first (its SETTINGS, RFC 9113 §3.4), then closes all the same.
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        let (stream, head) = connect_tunnel(proxy.addr, "localhost:443").await?;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let mut tls = tls_client(stream, "localhost", &proxy.ca_pem, &[alpn]).await?;
        let mut received = Vec::new();
        let closed = tokio::time::timeout(CLOSE_GUARD, async {
            let mut buf = [0u8; 256];
            loop {
                match tls.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => received.extend_from_slice(&buf[..n]),
                }
            }
        });
        if closed.await.is_err() {
            return Err(format!("the idle tunnel ({alpn:?}) was still open after {CLOSE_GUARD:?}").into());
        }
        if alpn == b"http/1.1" && !received.is_empty() {
            return Err(format!("the proxy sent {} bytes instead of closing", received.len()).into());
        }
    }
    Ok(())
}

/// Opens an intercepted tunnel to `origin` and speaks h2 inside it (ALPN `h2`).
async fn h2_tunnel(proxy: &TestProxy, origin: &Origin) -> TestResult<H2Tunnel> {
    let (stream, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let tls = tls_client(stream, "localhost", &proxy.ca_pem, &[b"h2"]).await?;
    let (sender, connection) = hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tls)).await?;
    Ok((sender, tokio::spawn(connection)))
}

/// Waits until the proxy has closed an h2 connection, and says whether the close was clean
/// (GOAWAY, then the end of the stream) as hyper's client saw it.
async fn h2_closed(connection: &mut JoinHandle<Result<(), hyper::Error>>) -> TestResult {
    match tokio::time::timeout(CLOSE_GUARD, connection).await {
        Ok(joined) => Ok(joined??),
        Err(_) => Err(format!("the idle h2 connection was still open after {CLOSE_GUARD:?}").into()),
    }
}

#[tokio::test]
async fn idle_h2_connections_are_closed_and_a_slow_download_is_not_cut() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.connections.idle_timeout = Duration::from_millis(500);
    })
    .await?;
    let url = |path: &str| origin.url(path);

    // A slow download, in flight from before the idle connection's request to after its close.
    let (mut downloading, mut download_connection) = h2_tunnel(&proxy, &origin).await?;
    let response = downloading.send_request(Request::get(url("/trickle")).body(Empty::new())?).await?;
    assert_eq!(response.status(), 200);
    let mut download = response.into_body();
    let first = download.frame().await.ok_or("a first chunk")??.into_data().map_err(|_| "a data frame")?;
    assert_eq!(&first[..], b"first;");
    origin.arrived().await;

    // One request, then nothing: the proxy closes the connection.
    let (mut idle, mut idle_connection) = h2_tunnel(&proxy, &origin).await?;
    let response = idle.send_request(Request::get(url("/hello")).body(Empty::new())?).await?;
    assert_eq!(response.status(), 200);
    response.into_body().collect().await?;
    h2_closed(&mut idle_connection).await?;
    assert!(idle.ready().await.is_err(), "the closed connection takes no new request");
    // A connection that sent its preface and never a request is closed the same way.
    let (_silent, mut silent_connection) = h2_tunnel(&proxy, &origin).await?;
    h2_closed(&mut silent_connection).await?;

    // The download has been in flight for longer than the idle timeout, and is still open.
    assert!(!download_connection.is_finished(), "the connection with a download in flight was closed");
    origin.release();
    let rest = download.collect().await?.to_bytes();
    assert_eq!(&rest[..], b"rest");
    // Once the download is over, that connection is idle too.
    h2_closed(&mut download_connection).await?;
    drop(downloading);

    let records = proxy.finish().await?;
    for path in ["/trickle", "/hello"] {
        let served = log::for_request(&records, "GET", path);
        assert_eq!(served.len(), 1, "{path}: {records:#?}");
        assert_eq!(served[0]["http.response.status_code"], 200, "{path}");
    }
    Ok(())
}

/// The frame types (RFC 9113 §6) in `bytes`, a whole h2 server-to-client stream after the
/// client preface.
fn h2_frame_types(mut bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    while let [l0, l1, l2, kind, _flags, _s0, _s1, _s2, _s3, rest @ ..] = bytes {
        types.push(*kind);
        let length = usize::from(*l0) << 16 | usize::from(*l1) << 8 | usize::from(*l2);
        bytes = rest.get(length..).unwrap_or_default();
    }
    types
}

#[tokio::test]
async fn an_idle_h2_client_that_never_acknowledges_the_goaway_is_dropped() -> TestResult {
    const GOAWAY: u8 = 0x7;
    const PING: u8 = 0x6;
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.connections.idle_timeout = Duration::from_millis(500);
    })
    .await?;
    let (stream, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut tls = tls_client(stream, "localhost", &proxy.ca_pem, &[b"h2"]).await?;
    // The client preface and an empty SETTINGS frame, then silence: no SETTINGS or PING ack.
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00").await?;
    // Dropped, not closed: the TLS stream ends without close_notify.
    let mut received = Vec::new();
    let until_closed = async {
        let mut buf = [0u8; 4096];
        loop {
            match tls.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    };
    if tokio::time::timeout(CLOSE_GUARD, until_closed).await.is_err() {
        return Err(format!("the idle h2 connection was still open after {CLOSE_GUARD:?}").into());
    }
    let types = h2_frame_types(&received);
    assert!(types.contains(&GOAWAY) && types.contains(&PING), "GOAWAY and its PING before the close: {types:?}");
    let records = proxy.finish().await?;
    assert!(records.is_empty(), "no request was made: {records:#?}");
    Ok(())
}

#[tokio::test]
async fn pooled_h2_connections_to_an_origin_are_closed_after_the_upstream_idle_timeout() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.upstream.idle_timeout = Duration::from_millis(500);
    })
    .await?;
    let response = proxy.client()?.get(origin.url("/echo")).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(crate::support::header(&response, "x-version"), "HTTP/2.0", "the proxy reached the origin over h2");
    // The agent's connection stays open (its idle timeout is the default 30 s); the pool's
    // h2 connection to the origin is closed once idle.
    match tokio::time::timeout(CLOSE_GUARD, origin.closed(1)).await {
        Ok(()) => assert_eq!(origin.connections(), 1),
        Err(_) => return Err(format!("the pooled h2 connection was still open after {CLOSE_GUARD:?}").into()),
    }
    let records = proxy.finish().await?;
    let served = log::for_request(&records, "GET", "/echo");
    assert_eq!(served.len(), 1, "{records:#?}");
    assert_eq!(served[0]["http.response.status_code"], 200);
    Ok(())
}
