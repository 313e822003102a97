//! What the proxy answers when something is at fault: the origin's certificate does not
//! verify (502 naming the cause), the origin is down (502) or silent (504), the client sent
//! garbage or a request that is not for a proxy (400), or an HTTP/2 preface (closed).

use tokio::net::TcpListener;

use crate::support::origin::Origin;
use crate::support::pki::TestCa;
use crate::support::raw::{connect_tunnel, exchange};
use crate::support::{TestProxy, TestResult, bypass_all, header};

/// A loopback port with nothing listening on it.
async fn closed_port() -> TestResult<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    Ok(listener.local_addr()?.port())
}

#[tokio::test]
async fn untrusted_origin_certificate_is_502_naming_the_cause() -> TestResult {
    let trusted = TestCa::new("trusted origin CA")?;
    let untrusted = TestCa::new("some other CA")?;
    let origin = Origin::https(&untrusted).await?;
    let proxy = TestProxy::start_edge(&trusted).await?;
    let response = proxy.client()?.get(origin.url("/echo")).send().await?;
    assert_eq!(response.status(), 502);
    assert_eq!(header(&response, "content-type"), "text/plain; charset=utf-8");
    let body = response.text().await?;
    let expected = format!("agentgate: cannot verify the TLS certificate of {}: ", origin.authority());
    assert!(body.starts_with(&expected), "{body}");
    assert!(body.contains("invalid peer certificate: UnknownIssuer"), "{body}");
    assert_eq!(origin.connections(), 1, "one failed handshake; no retry over plain HTTP");
    Ok(())
}

#[tokio::test]
async fn origin_down_is_502_over_http_and_https() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start_edge(&ca).await?;
    let port = closed_port().await?;
    let client = proxy.client()?;
    for url in [format!("http://127.0.0.1:{port}/"), format!("https://127.0.0.1:{port}/")] {
        let response = client.get(&url).send().await?;
        assert_eq!(response.status(), 502, "{url}");
        let body = response.text().await?;
        assert!(body.starts_with(&format!("agentgate: cannot connect to 127.0.0.1:{port}: ")), "{body}");
        assert!(body.to_ascii_lowercase().contains("refused"), "{body}");
    }
    Ok(())
}

#[tokio::test]
async fn passthrough_to_a_down_origin_is_502_before_the_tunnel_opens() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.mitm.set_passthrough_hosts(vec!["127.0.0.1".into()]);
    })
    .await?;
    let port = closed_port().await?;
    let (_stream, head) = connect_tunnel(proxy.addr, &format!("127.0.0.1:{port}")).await?;
    assert!(head.starts_with("HTTP/1.1 502"), "{head}");
    Ok(())
}

#[tokio::test]
async fn malformed_request_line_is_400() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start(&ca).await?;
    let answer = exchange(proxy.addr, b"THIS IS NOT HTTP\r\n\r\n").await?;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    Ok(())
}

#[tokio::test]
async fn an_http2_preface_on_the_proxy_port_is_closed_and_the_port_keeps_serving() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start(&ca).await?;
    // The proxy port speaks HTTP/1.1 only (CONNECT and Upgrade live there): an h2
    // prior-knowledge client gets the connection closed, not an h2 session.
    let answer = exchange(proxy.addr, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await?;
    assert_eq!(answer, "", "no HTTP/2 SETTINGS frame, no HTTP/1.1 answer either");
    let next = exchange(proxy.addr, b"THIS IS NOT HTTP\r\n\r\n").await?;
    assert!(next.starts_with("HTTP/1.1 400"), "{next:?}");
    Ok(())
}

#[tokio::test]
async fn origin_form_request_to_the_proxy_is_400_explaining_why() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start(&ca).await?;
    let response = reqwest::Client::builder().no_proxy().build()?.get(format!("{}/status", proxy.url())).send().await?;
    assert_eq!(response.status(), 400);
    assert_eq!(header(&response, "content-type"), "text/plain; charset=utf-8");
    let body = response.text().await?;
    assert!(body.starts_with("agentgate: this is a forward proxy, not a web server: got `GET /status`"), "{body}");
    Ok(())
}

#[tokio::test]
async fn bad_targets_are_400() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let proxy = TestProxy::start(&ca).await?;
    let no_port =
        exchange(proxy.addr, b"CONNECT example.com HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
    let answer = no_port.await?;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("CONNECT needs a `host:port` target, got `example.com`"), "{answer}");

    let ftp =
        exchange(proxy.addr, b"GET ftp://example.com/file HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n");
    let answer = ftp.await?;
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("only http:// and https:// URLs are proxied"), "{answer}");
    Ok(())
}

#[tokio::test]
async fn origin_that_never_answers_the_handshake_is_504() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    // The kernel completes the TCP handshake from the backlog; nobody ever answers TLS.
    let silent = TcpListener::bind("127.0.0.1:0").await?;
    let port = silent.local_addr()?.port();
    let proxy = TestProxy::start_with(&ca, |config| {
        bypass_all(config);
        config.upstream.connect_timeout = std::time::Duration::from_millis(300);
    })
    .await?;
    let response = proxy.client()?.get(format!("https://127.0.0.1:{port}/")).send().await?;
    assert_eq!(response.status(), 504);
    assert_eq!(header(&response, "content-type"), "text/plain; charset=utf-8");
    let body = response.text().await?;
    assert!(body.starts_with(&format!("agentgate: timed out connecting to 127.0.0.1:{port}: ")), "{body}");
    drop(silent);
    Ok(())
}

#[tokio::test]
async fn a_bad_chunked_request_body_is_400_blamed_on_the_client() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start_edge(&ca).await?;
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\nzz\r\n",
        origin.url("/sink"),
        origin.authority()
    );
    // `/sink` reads the whole body before answering, so the body fails before any answer.
    let head = exchange(proxy.addr, request.as_bytes()).await?;
    assert!(head.starts_with("HTTP/1.1 400"), "{head}");
    let records = proxy.finish().await?;
    let logged = crate::support::log::for_request(&records, "POST", "/sink");
    assert_eq!(logged.len(), 1, "{records:#?}");
    assert_eq!(logged[0]["http.response.status_code"], 400);
    assert_eq!(logged[0]["event.action"], "error");
    assert_eq!(logged[0]["error.type"], "client");
    let message = logged[0]["error.message"].as_str().unwrap_or_default();
    assert!(message.contains("could not be read from the client"), "{message}");
    Ok(())
}
