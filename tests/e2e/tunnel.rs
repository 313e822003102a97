//! CONNECT (RFC 9110 §9.3.6): interception with h2 and HTTP/1.1 on either side, IP targets
//! without SNI, pooled upstream connections across tunnels, TLS session resumption on both
//! sides, passthrough hosts, and plain HTTP inside a tunnel.

use std::sync::Arc;
use std::time::Duration;

use http::Version;
use rustls::HandshakeKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::forward::{LARGE_BODY, large_body_both_directions};
use crate::support::curl::curl;
use crate::support::origin::Origin;
use crate::support::pki::TestCa;
use crate::support::raw::{connect_tunnel, tls_client, tls_client_config, tls_client_with};
use crate::support::{TestProxy, TestResult, bypass_all, header};

#[tokio::test]
async fn mitm_get_and_post_with_h2_on_both_sides() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;

    let get = client.get(origin.url("/echo")).send().await?;
    assert_eq!(get.status(), 200);
    assert_eq!(get.version(), Version::HTTP_2, "client to proxy: h2 by ALPN");
    assert_eq!(header(&get, "x-version"), "HTTP/2.0", "proxy to origin: h2 by ALPN");
    assert_eq!(header(&get, "x-host"), origin.authority(), "routed to the CONNECT target");
    assert_eq!(header(&get, "x-via"), "2 agentgate");
    assert_eq!(header(&get, "via"), "2 agentgate");

    let post = client.post(origin.url("/echo")).body("secret payload").send().await?;
    assert_eq!(post.status(), 200);
    assert_eq!(header(&post, "x-method"), "POST");
    assert_eq!(header(&post, "via"), "2 agentgate");
    assert_eq!(post.text().await?, "secret payload");
    Ok(())
}

#[tokio::test]
async fn mitm_with_an_http1_client() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client_builder()?.http1_only().build()?;
    let response = client.post(origin.url("/echo")).body("over http/1.1").send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.version(), Version::HTTP_11);
    assert_eq!(header(&response, "x-via"), "1.1 agentgate");
    assert_eq!(header(&response, "x-host"), origin.authority());
    assert_eq!(response.text().await?, "over http/1.1");
    Ok(())
}

#[tokio::test]
async fn mitm_head_204_and_304_over_h2() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;

    let head = client.head(origin.url("/hello")).send().await?;
    assert_eq!((head.status().as_u16(), head.version()), (200, Version::HTTP_2));
    assert_eq!(header(&head, "content-length"), "5");
    assert_eq!(header(&head, "via"), "2 agentgate");
    assert_eq!(head.bytes().await?.len(), 0);

    let no_content = client.get(origin.url("/status/204")).send().await?;
    assert_eq!(no_content.status(), 204);
    assert_eq!(no_content.bytes().await?.len(), 0);

    let not_modified = client.get(origin.url("/etag")).header("if-none-match", "\"v1\"").send().await?;
    assert_eq!(not_modified.status(), 304);
    assert_eq!(header(&not_modified, "etag"), "\"v1\"");
    assert_eq!(not_modified.bytes().await?.len(), 0);
    Ok(())
}

#[tokio::test]
async fn mitm_large_body_streams_both_directions() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start(&ca).await?;
    let url = origin.url(&format!("/bytes/{LARGE_BODY}"));
    large_body_both_directions(&proxy.client()?, &url, &origin.url("/sink"), LARGE_BODY).await
}

#[tokio::test]
async fn upstream_connections_are_pooled_across_tunnels() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start_edge(&ca).await?;
    // Two clients, so two CONNECT tunnels; h1 and h2 towards the proxy.
    let clients = [proxy.client()?, proxy.client_builder()?.http1_only().build()?];
    for client in &clients {
        for _ in 0..2 {
            let response = client.get(origin.url("/echo")).send().await?;
            assert_eq!(response.status(), 200);
            assert_eq!(header(&response, "x-version"), "HTTP/2.0");
        }
    }
    assert_eq!(origin.connections(), 1, "one pooled h2 connection to the origin");
    Ok(())
}

/// TLS 1.3 resumption both ways. A client that comes back with the ticket the intercepting
/// leaf gave it resumes (no certificate, no signature), and agentgate resumes towards an
/// origin once the pooled connection it had there is gone.
#[tokio::test]
async fn tls_sessions_resume_towards_the_client_and_towards_the_origin() -> TestResult {
    /// A guard against a hang, not a timing assertion.
    const GUARD: Duration = Duration::from_secs(30);
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        // The pooled connection to the origin ends soon after each request, so the second
        // request needs a new handshake there.
        config.upstream.idle_timeout = Duration::from_millis(100);
    })
    .await?;
    // One config for both tunnels: its session cache keeps the first tunnel's ticket.
    let client_config = tls_client_config(&proxy.ca_pem, &[b"http/1.1"])?;
    let mut client_handshakes = Vec::new();
    for round in 1..=2 {
        let (tunnel, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let mut tls = tls_client_with(tunnel, "localhost", Arc::clone(&client_config)).await?;
        client_handshakes.push(tls.get_ref().1.handshake_kind());
        let request = format!("GET /hello HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", origin.authority());
        tls.write_all(request.as_bytes()).await?;
        // Reading to the end also reads the session tickets sent after the handshake.
        let mut answer = Vec::new();
        tokio::time::timeout(GUARD, tls.read_to_end(&mut answer)).await??;
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200"), "round {round}: {answer}");
        tokio::time::timeout(GUARD, origin.closed(round)).await?;
    }
    assert_eq!(client_handshakes, [Some(HandshakeKind::Full), Some(HandshakeKind::Resumed)], "client to agentgate");
    assert_eq!(origin.handshakes(), [HandshakeKind::Full, HandshakeKind::Resumed], "agentgate to the origin");
    Ok(())
}

#[tokio::test]
async fn ip_target_without_sni() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start(&ca).await?;
    let response = proxy.client()?.get(origin.ip_url("/echo")).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "x-host"), format!("127.0.0.1:{}", origin.addr.port()));
    assert_eq!(header(&response, "via"), "2 agentgate");
    Ok(())
}

#[tokio::test]
async fn curl_h2_and_http1_through_mitm() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start(&ca).await?;
    let ca_path = proxy.ca_path.to_string_lossy().into_owned();
    let url = origin.url("/echo");
    for (flag, version) in [("--http2", "2"), ("--http1.1", "1.1")] {
        let args = ["-x", &proxy.url(), "--cacert", &ca_path, flag, "--data-binary", "via curl", &url];
        let out = curl(&args).await?;
        assert_eq!((out.status, out.version.as_str()), (200, version), "curl {flag}");
        assert!(out.headers.to_ascii_lowercase().contains("via: "), "{}", out.headers);
        assert!(out.headers.contains("x-version: HTTP/2.0"), "{}", out.headers);
        assert_eq!(out.body, b"via curl");
    }
    Ok(())
}

#[tokio::test]
async fn passthrough_hosts_are_spliced_untouched() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy =
        TestProxy::start_with(&ca, |config| config.mitm.set_passthrough_hosts(vec!["localhost".into()])).await?;
    // This client trusts only the origin's CA: it can only succeed if it sees the origin's
    // own certificate.
    let client = proxy.passthrough_client(&ca)?;
    let response = client.get(origin.url("/echo")).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "via"), "", "the proxy did not touch the response");
    assert_eq!(header(&response, "x-via"), "", "the proxy did not touch the request");

    // And a client that trusts only agentgate's CA is refused: nothing was minted.
    let refused = proxy.client()?.get(origin.url("/echo")).send().await;
    assert!(refused.is_err(), "agentgate's CA must not verify a passthrough host");
    Ok(())
}

#[tokio::test]
async fn plain_http_inside_a_tunnel_is_served_and_routed_to_the_connect_target() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start(&ca).await?;
    let (mut tunnel, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let head = head.to_ascii_lowercase();
    assert!(!head.contains("content-length") && !head.contains("transfer-encoding"), "{head}");

    // The inner Host names another host: routing follows the CONNECT target regardless.
    tunnel.write_all(b"GET /echo HTTP/1.1\r\nHost: elsewhere.example\r\nConnection: close\r\n\r\n").await?;
    let mut answer = String::new();
    tunnel.read_to_string(&mut answer).await?;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("via: 1.1 agentgate\r\n"), "{answer}");
    assert!(answer.contains(&format!("x-host: {}\r\n", origin.authority())), "{answer}");
    Ok(())
}

#[tokio::test]
async fn tls_inside_a_tunnel_trusts_agentgate_ca() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let proxy = TestProxy::start(&ca).await?;
    let (tunnel, head) = connect_tunnel(proxy.addr, &origin.authority()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let mut tls = tls_client(tunnel, "localhost", &proxy.ca_pem, &[b"http/1.1"]).await?;
    tls.write_all(b"GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await?;
    let mut answer = String::new();
    tls.read_to_string(&mut answer).await?;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("hello"), "{answer}");
    Ok(())
}
