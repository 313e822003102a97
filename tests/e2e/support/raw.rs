//! Clients by hand, for what reqwest will not send: raw bytes on a TCP stream, a CONNECT
//! tunnel, and TLS inside it trusting only agentgate's CA.

use std::sync::Arc;

use rustls::ClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::TestResult;

/// Reads a response head byte by byte, up to and including the blank line, so nothing after
/// it (a tunnel's first bytes) is consumed.
pub async fn read_head<S: AsyncRead + Unpin>(stream: &mut S) -> TestResult<String> {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let byte = stream.read_u8().await?;
        head.push(byte);
    }
    Ok(String::from_utf8(head)?)
}

/// Writes `bytes` to the proxy and returns everything it sends back until it closes.
pub async fn exchange(proxy: std::net::SocketAddr, bytes: &[u8]) -> TestResult<String> {
    let mut stream = TcpStream::connect(proxy).await?;
    stream.write_all(bytes).await?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// Opens a CONNECT tunnel to `authority` through the proxy and returns the stream after the
/// `200`, with the response head.
pub async fn connect_tunnel(proxy: std::net::SocketAddr, authority: &str) -> TestResult<(TcpStream, String)> {
    let mut stream = TcpStream::connect(proxy).await?;
    let request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let head = read_head(&mut stream).await?;
    Ok((stream, head))
}

/// Opens a CONNECT tunnel to `authority` that the proxy refuses (an intercepted host's
/// refusal is answered inside the tunnel, after a `200`), sends a plain `GET /` in it, and
/// returns that answer's head: the refusal.
pub async fn refused_tunnel(proxy: std::net::SocketAddr, authority: &str) -> TestResult<String> {
    let (mut stream, head) = connect_tunnel(proxy, authority).await?;
    if !head.starts_with("HTTP/1.1 200") {
        return Err(format!("CONNECT {authority} should open, its refusal answered inside: {head}").into());
    }
    stream.write_all(format!("GET / HTTP/1.1\r\nHost: {authority}\r\n\r\n").as_bytes()).await?;
    read_head(&mut stream).await
}

/// TLS over `stream` to `server_name`, trusting only the CA in `ca_pem`, offering `alpn`.
pub async fn tls_client(
    stream: TcpStream,
    server_name: &str,
    ca_pem: &str,
    alpn: &[&[u8]],
) -> TestResult<TlsStream<TcpStream>> {
    tls_client_with(stream, server_name, tls_client_config(ca_pem, alpn)?).await
}

/// A client config trusting only the CA in `ca_pem`, offering `alpn`. Connections made with
/// one config share its session cache, so a second connection can resume the first's session.
pub fn tls_client_config(ca_pem: &str, alpn: &[&[u8]]) -> TestResult<Arc<ClientConfig>> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let mut config = ClientConfig::builder_with_provider(agentgate::tls::crypto_provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(Arc::new(config))
}

/// TLS over `stream` to `server_name` with `config`.
pub async fn tls_client_with(
    stream: TcpStream,
    server_name: &str,
    config: Arc<ClientConfig>,
) -> TestResult<TlsStream<TcpStream>> {
    let name = ServerName::try_from(server_name.to_owned())?;
    Ok(TlsConnector::from(config).connect(name, stream).await?)
}
