//! WebSocket (RFC 6455) through the proxy: the `101` is passed on and bytes are relayed both
//! ways, through MITM, as an absolute-form upgrade, and inside a plain tunnel.

use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::{WebSocketStream, client_async};

use crate::support::origin::Origin;
use crate::support::pki::TestCa;
use crate::support::raw::{connect_tunnel, read_head, tls_client};
use crate::support::{TestProxy, TestResult};

/// Sends a text and a binary message and expects both back.
pub(crate) async fn assert_echo<S>(ws: &mut WebSocketStream<S>) -> TestResult
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    for message in [Message::text("hello over websocket"), Message::binary(vec![0u8, 1, 2, 255])] {
        ws.send(message.clone()).await?;
        let echoed = ws.next().await.ok_or("the websocket closed before the echo")??;
        assert_eq!(echoed, message);
    }
    ws.close(None).await?;
    Ok(())
}

#[tokio::test]
async fn websocket_echo_through_mitm() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start(&ca).await?;
    let (tunnel, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // WebSocket needs HTTP/1.1 inside the tunnel.
    let tls = tls_client(tunnel, "localhost", &proxy.ca_pem, &[b"http/1.1"]).await?;
    let (mut ws, response) = client_async(format!("wss://{}/ws", origin.authority()), tls).await?;
    assert_eq!(response.status(), 101);
    assert_eq!(response.headers().get("via").map(|v| v.as_bytes()), Some(&b"1.1 agentgate"[..]));
    assert_echo(&mut ws).await
}

#[tokio::test]
async fn websocket_echo_through_plain_http() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start(&ca).await?;
    let mut stream = TcpStream::connect(proxy.addr).await?;
    // An absolute-form upgrade request, as a client configured with HTTP_PROXY sends it.
    let handshake = format!(
        "GET {} HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        origin.url("/ws"),
        origin.authority()
    );
    stream.write_all(handshake.as_bytes()).await?;
    let head = read_head(&mut stream).await?;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // RFC 6455 §1.3's example key and answer.
    assert!(head.contains("sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"), "{head}");
    assert!(head.contains("via: 1.1 agentgate\r\n"), "{head}");
    let mut ws = WebSocketStream::from_raw_socket(stream, Role::Client, None).await;
    assert_echo(&mut ws).await
}

#[tokio::test]
async fn websocket_echo_inside_a_plain_tunnel() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start(&ca).await?;
    let (tunnel, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (mut ws, response) = client_async(format!("ws://{}/ws", origin.authority()), tunnel).await?;
    assert_eq!(response.status(), 101);
    assert_echo(&mut ws).await
}
