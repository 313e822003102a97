//! The floor: the least a forward proxy on agentgate's stack can cost per request. A plain
//! HTTP forward proxy (absolute-form requests only, no CONNECT, no policy, no log, no
//! tracing) made of the same pieces agentgate forwards with: hyper 1's HTTP/1 server and
//! hyper-util's pooled legacy client on a multi-thread tokio runtime. `bench/run.sh` runs it
//! beside agentgate, so a table row can say how much of agentgate's CPU per request is the
//! stack's and how much is agentgate's own. Loopback only: it listens on 127.0.0.1 and
//! forwards only to 127.0.0.0/8.
//!
//! Usage: `agentgate-bench-floor` prints `listening on 127.0.0.1:PORT` and serves until killed.

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

type Body = BoxBody<Bytes, hyper::Error>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
    println!("listening on {}", listener.local_addr()?);
    let mut connector = HttpConnector::new();
    connector.set_nodelay(true);
    let client: Client<HttpConnector, Incoming> = Client::builder(TokioExecutor::new()).build(connector);
    loop {
        let (stream, _) = listener.accept().await?;
        stream.set_nodelay(true)?;
        let client = client.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request| forward(client.clone(), request));
            // A connection's end (the client closed it) is not an error worth a line.
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

/// Forwards an absolute-form request to its loopback origin; anything else is a 400.
async fn forward(
    client: Client<HttpConnector, Incoming>,
    request: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let loopback = request.uri().host().and_then(|host| host.parse::<IpAddr>().ok()).is_some_and(|ip| ip.is_loopback());
    if !loopback {
        return Ok(answer(StatusCode::BAD_REQUEST, "absolute-form request to a 127.0.0.0/8 origin expected"));
    }
    Ok(match client.request(request).await {
        Ok(response) => response.map(BodyExt::boxed),
        Err(error) => answer(StatusCode::BAD_GATEWAY, &error.to_string()),
    })
}

fn answer(status: StatusCode, text: &str) -> Response<Body> {
    let body = Full::new(Bytes::from(format!("{text}\n"))).map_err(|never| match never {}).boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    response
}
