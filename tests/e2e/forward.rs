//! Absolute-form HTTP through the proxy (RFC 9112 §3.2.2): bodies both ways, streamed; HEAD,
//! 204, 304; keep-alive on both sides; hop-by-hop fields and `Via` (RFC 9110 §7.6).

use std::io;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::reload::base_config;
use crate::support::binary::Agentgate;
use crate::support::curl::curl;
use crate::support::origin::Origin;
use crate::support::pattern::{PatternCheck, pattern_chunks};
use crate::support::pki::TestCa;
use crate::support::raw::exchange;
use crate::support::{TestProxy, TestResult, header};

/// The size of the large-body tests (256 MiB passes too; this keeps the suite quick).
pub const LARGE_BODY: u64 = 64 * 1024 * 1024;

#[tokio::test]
async fn get_and_post_with_bodies() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;

    let get = client.get(origin.url("/echo")).send().await?;
    assert_eq!(get.status(), 200);
    assert_eq!(header(&get, "x-method"), "GET");
    assert_eq!(header(&get, "x-host"), origin.authority());
    assert_eq!(header(&get, "x-via"), "1.1 agentgate", "the origin sees Via");
    assert_eq!(header(&get, "via"), "1.1 agentgate", "the client sees Via");
    assert_eq!(get.text().await?, "");

    let post = client.post(origin.url("/echo")).body("hello through agentgate").send().await?;
    assert_eq!(post.status(), 200);
    assert_eq!(header(&post, "x-method"), "POST");
    assert_eq!(header(&post, "via"), "1.1 agentgate");
    assert_eq!(post.text().await?, "hello through agentgate");
    Ok(())
}

#[tokio::test]
async fn hop_by_hop_fields_do_not_reach_the_origin() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start(&ca).await?;
    let url = origin.url("/echo");
    let request = format!(
        "GET {url} HTTP/1.1\r\nHost: {}\r\nConnection: close, X-Named-In-Connection\r\n\
         X-Named-In-Connection: 1\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n\
         Proxy-Authorization: Basic YWdlbnQ6c2VjcmV0\r\nTE: gzip, trailers\r\nVia: 1.0 upstream-proxy\r\n\r\n",
        origin.authority()
    );
    let answer = exchange(proxy.addr, request.as_bytes()).await?;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("x-hop-by-hop: \r\n"), "no hop-by-hop field arrived: {answer}");
    assert!(answer.contains("x-via: 1.0 upstream-proxy, 1.1 agentgate\r\n"), "Via appended: {answer}");
    assert!(answer.contains("x-te: trailers\r\n"), "TE reduced to trailers: {answer}");
    Ok(())
}

#[tokio::test]
async fn chunked_upload_is_forwarded() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start(&ca).await?;
    let len = 1024 * 1024 + 7;
    let chunks = futures_util::stream::iter(pattern_chunks(len).map(Ok::<_, io::Error>));
    let response = proxy.client()?.post(origin.url("/sink")).body(reqwest::Body::wrap_stream(chunks)).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "via"), "1.1 agentgate");
    assert_eq!(response.text().await?, format!("received {len} bytes, intact=true"));
    Ok(())
}

/// Downloads `len` pattern bytes from `url` and uploads as many to `sink`, checking both.
pub async fn large_body_both_directions(client: &reqwest::Client, url: &str, sink: &str, len: u64) -> TestResult {
    let mut download = client.get(url).send().await?;
    assert_eq!(download.status(), 200);
    assert!(header(&download, "via").ends_with("agentgate"));
    let mut check = PatternCheck::new();
    while let Some(chunk) = download.chunk().await? {
        check.feed(&chunk);
    }
    assert_eq!((check.len, check.intact), (len, true), "download length and content");

    let chunks = futures_util::stream::iter(pattern_chunks(len).map(Ok::<_, io::Error>));
    let upload = client.post(sink).body(reqwest::Body::wrap_stream(chunks)).send().await?;
    assert_eq!(upload.status(), 200);
    assert_eq!(upload.text().await?, format!("received {len} bytes, intact=true"), "upload length and content");
    Ok(())
}

#[tokio::test]
async fn large_body_streams_both_directions() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start(&ca).await?;
    let url = origin.url(&format!("/bytes/{LARGE_BODY}"));
    large_body_both_directions(&proxy.client()?, &url, &origin.url("/sink"), LARGE_BODY).await
}

/// Through the real binary, with `[inspect]` on for another host: a 64 MiB download and
/// upload through MITM stream without being held, so the process's peak RSS (`VmHWM`) grows
/// by far less than one body (it would grow by at least one if a body were buffered).
#[tokio::test]
async fn the_binary_streams_64_mib_outside_inspect_with_its_peak_rss_far_below_the_body() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::https(&ca).await?;
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("agentgate.toml");
    let inspect = "[inspect]\nhosts = [\"elsewhere.example\"]\n";
    std::fs::write(&path, format!("{}{inspect}", base_config(dir.path(), &ca)))?;
    let agentgate = Agentgate::start(dir.path(), &path, "agentgate=info").await?;
    let client = agentgate.client()?;
    // Warm: the leaf minted, the policy files fetched, buffers and connections at their size.
    large_body_both_directions(&client, &origin.url("/bytes/1048576"), &origin.url("/sink"), 1024 * 1024).await?;
    let before = agentgate.memory_kib("VmHWM")?;
    let url = origin.url(&format!("/bytes/{LARGE_BODY}"));
    large_body_both_directions(&client, &url, &origin.url("/sink"), LARGE_BODY).await?;
    let after = agentgate.memory_kib("VmHWM")?;
    let bound = LARGE_BODY / 1024 / 4;
    assert!(
        after.saturating_sub(before) < bound,
        "peak RSS went from {before} KiB to {after} KiB streaming {LARGE_BODY} bytes each way (bound: {bound} KiB more)"
    );
    agentgate.stop().await
}

#[tokio::test]
async fn bodies_are_streamed_not_buffered() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;

    // Download: the first chunk reaches the client while the origin still holds the rest.
    let mut response = client.get(origin.url("/trickle")).send().await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.chunk().await?, Some(Bytes::from_static(b"first;")));
    origin.arrived().await;
    origin.release();
    assert_eq!(response.chunk().await?, Some(Bytes::from_static(b"rest")));

    // Upload: the origin gets the first chunk while the client has not sent the rest.
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(1);
    let stream = futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|chunk| (Ok::<_, io::Error>(chunk), receiver))
    });
    let upload = client.post(origin.url("/trickle-upload")).body(reqwest::Body::wrap_stream(stream)).send();
    let upload = tokio::spawn(upload);
    sender.send(Bytes::from_static(b"first;")).await?;
    origin.arrived().await;
    sender.send(Bytes::from_static(b"rest")).await?;
    drop(sender);
    let response = upload.await??;
    assert_eq!(response.status(), 200);
    assert_eq!(response.text().await?, "first;rest");
    Ok(())
}

#[tokio::test]
async fn head_204_and_304() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start(&ca).await?;
    let client = proxy.client()?;

    let head = client.head(origin.url("/hello")).send().await?;
    assert_eq!(head.status(), 200);
    assert_eq!(header(&head, "content-length"), "5", "HEAD keeps the length of the GET body");
    assert_eq!(header(&head, "via"), "1.1 agentgate");
    assert_eq!(head.bytes().await?.len(), 0);

    let no_content = client.get(origin.url("/status/204")).send().await?;
    assert_eq!(no_content.status(), 204);
    assert_eq!(header(&no_content, "via"), "1.1 agentgate");
    assert_eq!(no_content.bytes().await?.len(), 0);

    let fresh = client.get(origin.url("/etag")).send().await?;
    assert_eq!(fresh.status(), 200);
    assert_eq!(fresh.text().await?, "versioned");
    let not_modified = client.get(origin.url("/etag")).header("if-none-match", "\"v1\"").send().await?;
    assert_eq!(not_modified.status(), 304);
    assert_eq!(header(&not_modified, "etag"), "\"v1\"");
    assert_eq!(header(&not_modified, "via"), "1.1 agentgate");
    assert_eq!(not_modified.bytes().await?.len(), 0);
    Ok(())
}

#[tokio::test]
async fn keep_alive_is_reused_on_both_sides() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start_edge(&ca).await?;

    // Client side: three requests on one TCP connection to the proxy.
    let tcp = TcpStream::connect(proxy.addr).await?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(connection);
    for round in 0..3 {
        let request = http::Request::get(origin.url("/echo"))
            .header(http::header::HOST, origin.authority())
            .body(Empty::<Bytes>::new())?;
        let response = sender.send_request(request).await?;
        assert_eq!(response.status(), 200, "request {round} on the same client connection");
        assert_eq!(response.headers().get("via").map(|v| v.as_bytes()), Some(&b"1.1 agentgate"[..]));
        response.into_body().collect().await?;
    }
    // Origin side: the pooled upstream connection served all three.
    assert_eq!(origin.connections(), 1);
    Ok(())
}

#[tokio::test]
async fn curl_through_the_proxy() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let proxy = TestProxy::start(&ca).await?;
    let out = curl(&["-x", &proxy.url(), "--data-binary", "from curl", &origin.url("/echo")]).await?;
    assert_eq!((out.status, out.version.as_str()), (200, "1.1"));
    assert!(out.headers.to_ascii_lowercase().contains("via: 1.1 agentgate"), "{}", out.headers);
    assert!(out.headers.contains("x-method: POST"), "{}", out.headers);
    assert_eq!(out.body, b"from curl");
    Ok(())
}
