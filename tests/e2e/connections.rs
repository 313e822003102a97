//! Connection bounds on the proxy port: silent connections are closed after
//! `[connections] first_byte_timeout` (on the proxy port and inside a CONNECT tunnel), and a
//! client over `max_connections_per_client` has its new connection closed while another
//! client is served. Idle keep-alive connections and intercepted tunnels idle after the TLS
//! handshake (h1 and h2) are closed too.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use crate::support::origin::Origin;
use crate::support::pki::TestCa;
use crate::support::raw::{connect_tunnel, read_head, tls_client};
use crate::support::{TestProxy, TestResult, bypass_all, log};

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
async fn the_connection_over_the_per_client_cap_is_closed_while_another_client_is_served() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.connections.max_connections_per_client = 50;
        // Long enough that only the cap closes anything here.
        config.connections.first_byte_timeout = Duration::from_secs(3600);
    })
    .await?;
    let local = IpAddr::from([127, 0, 0, 1]);
    let mut held = Vec::new();
    for _ in 0..50 {
        held.push(connect_from(local, proxy.addr).await?);
    }
    // The proxy accepts in order, so the first 50 hold their places when the 51st arrives.
    let mut over = connect_from(local, proxy.addr).await?;
    // Whatever the client sends, the proxy closes without answering.
    let _ = over.write_all(format!("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", origin.url("/refused")).as_bytes()).await;
    closed_by_proxy(&mut over).await?;

    // One of the 50 is still served.
    let first = &mut held[0];
    first.write_all(format!("GET {} HTTP/1.1\r\nHost: x\r\n\r\n", origin.url("/echo")).as_bytes()).await?;
    let head = read_head(first).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");

    // Another client address is not affected by 127.0.0.1's cap.
    let other = proxy.client_builder()?.local_address(IpAddr::from([127, 0, 0, 2])).build()?;
    let response = other.get(origin.url("/echo")).send().await?;
    assert_eq!(response.status(), 200);
    drop(held);
    let records = proxy.finish().await?;
    let served = log::for_request(&records, "GET", "/echo");
    assert_eq!(served.len(), 2, "{records:#?}");
    assert!(served.iter().all(|r| r["http.response.status_code"] == 200), "{records:#?}");
    assert!(served.iter().any(|r| r["client.address"] == "127.0.0.2"), "{records:#?}");
    assert_eq!(log::for_request(&records, "GET", "/refused").len(), 0, "the refused connection made no request");
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
    for alpn in [&b"http/1.1"[..], &b"h2"[..]] {
        let (stream, head) = connect_tunnel(proxy.addr, "localhost:443").await?;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let mut tls = tls_client(stream, "localhost", &proxy.ca_pem, &[alpn]).await?;
        let mut buf = [0u8; 64];
        match tokio::time::timeout(CLOSE_GUARD, tls.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) => {}
            Ok(Ok(n)) => return Err(format!("the proxy sent {n} bytes instead of closing").into()),
            Err(_) => return Err(format!("the idle tunnel ({alpn:?}) was still open after {CLOSE_GUARD:?}").into()),
        }
    }
    Ok(())
}
