//! Graceful shutdown: once it starts, no new connections are accepted, and a request already
//! in flight still gets its full response; one grace period bounds everything that serves,
//! the admin API included.

use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::support::binary::Agentgate;
use crate::support::origin::{Origin, Served, Site};
use crate::support::pki::TestCa;
use crate::support::raw::connect_tunnel;
use crate::support::wait::eventually;
use crate::support::{TestProxy, TestResult, header};

#[tokio::test]
async fn in_flight_request_completes_during_graceful_shutdown() -> TestResult {
    let ca = TestCa::new("origin CA")?;
    let origin = Origin::http().await?;
    let mut proxy =
        TestProxy::start_with(&ca, |config| config.shutdown_grace = std::time::Duration::from_secs(60)).await?;
    let request = tokio::spawn(proxy.client()?.get(origin.url("/hold")).send());
    origin.arrived().await;

    let stopped = proxy.shut_down().ok_or("the proxy was already shut down")?;
    // Draining has begun once the listener is gone.
    eventually("the proxy port closed", async || match TcpStream::connect(proxy.addr).await {
        Ok(_) => Err("it still accepts".into()),
        Err(_) => Ok(()),
    })
    .await?;
    assert!(!stopped.is_finished(), "the in-flight request holds the shutdown open");

    origin.release();
    let response = request.await??;
    assert_eq!(response.status(), 200);
    assert_eq!(header(&response, "via"), "1.1 agentgate");
    assert_eq!(response.text().await?, "released");
    stopped.await?;
    Ok(())
}

/// The stop signals are handled from the moment the ready line is printed: a supervisor (or a
/// test) that sends SIGTERM as soon as it reads that line gets a graceful exit (status 0, the
/// log flushed), never the default action that kills the process. Five times, because the
/// window this closes was a race.
#[tokio::test]
async fn a_sigterm_right_after_the_ready_line_stops_agentgate_gracefully() -> TestResult {
    agentgate::tls::install_default_provider();
    let ca = TestCa::new("origin CA")?;
    let dir = tempfile::tempdir()?;
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, crate::reload::base_config(dir.path(), &ca))?;
    for _ in 0..5 {
        Agentgate::start(dir.path(), &config_path, "info").await?.stop().await?;
    }
    Ok(())
}

/// Completes `task` (a shutdown in progress), or fails once `limit` of real time has passed:
/// a liveness bound for a test whose tokio clock is paused, never a measurement.
async fn finishes<T>(task: tokio::task::JoinHandle<T>, limit: Duration, what: &str) -> TestResult<T> {
    let (timed_out, watchdog) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(limit);
        let _ = timed_out.send(());
    });
    tokio::select! {
        done = task => Ok(done?),
        _ = watchdog => Err(format!("{what} did not finish").into()),
    }
}

/// A shutdown was seen answering 20 s after SIGTERM with a 10 s grace. The admin
/// API took a grace period of its own once the proxy's had ended, and left whatever still ran
/// then running. Now both share one deadline, and at it the admin API's connections are
/// closed too, and so is a tunnel still waiting for its client's first byte (whose own
/// timeout is longer than the grace period). The clock is paused and only this test moves it
/// (a blocking task held open keeps tokio from moving it on its own): with a proxied
/// request and a live `/explain` both still waiting on their origins and a silent tunnel,
/// the proxy is done one millisecond past the grace period, with all three closed.
#[tokio::test(start_paused = true)]
async fn one_grace_period_bounds_the_proxy_and_the_admin_api_alike() -> TestResult {
    // Tokio does not move a paused clock on its own while a blocking task runs.
    let (release_clock, hold_clock) = std::sync::mpsc::channel::<()>();
    let clock_held = tokio::task::spawn_blocking(move || hold_clock.recv());
    let grace = Duration::from_secs(5);
    let ca = TestCa::new("origin CA")?;
    let held = Origin::http().await?;
    // Its robots.txt never comes: a live /explain of it waits (the fetch timeout is 10 s).
    let explained = Origin::http_site(Site::new()).await?;
    explained.serve("/robots.txt", Served::ok("User-agent: *\nDisallow:\n").held());
    let mut proxy = TestProxy::start_with(&ca, |config| config.shutdown_grace = grace).await?;
    let request = tokio::spawn(proxy.client()?.get(held.url("/hold")).send());
    held.arrived().await;
    let admin = crate::admin::admin_url(&proxy, &format!("/explain?url={}", explained.url("/x")))?;
    let explain = tokio::spawn(crate::admin::admin_client()?.get(admin).send());
    explained.held(1).await;
    // Intercepted, and the client never starts its TLS handshake (first byte timeout: 10 s).
    let (mut tunnel, head) = connect_tunnel(proxy.addr, &held.addr.to_string()).await?;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let tunnel = tokio::spawn(async move { tunnel.read(&mut [0; 1]).await });

    let stopped = proxy.shut_down().ok_or("the proxy was running")?;
    // The deadline is set when the listener closes.
    while TcpStream::connect(proxy.addr).await.is_ok() {
        tokio::task::yield_now().await;
    }
    tokio::time::advance(grace - Duration::from_millis(1)).await;
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(!stopped.is_finished() && !explain.is_finished(), "both may run for the whole grace period");
    assert!(!tunnel.is_finished(), "the tunnel too");
    tokio::time::advance(Duration::from_millis(2)).await;
    finishes(stopped, Duration::from_secs(30), "the shutdown, past its one grace period,").await?;
    let explain = finishes(explain, Duration::from_secs(30), "the admin request").await?;
    assert!(explain.is_err(), "the admin request was closed at the deadline: {explain:?}");
    let request = finishes(request, Duration::from_secs(30), "the proxied request").await?;
    assert!(request.is_err(), "the proxied request was closed at the deadline: {request:?}");
    let tunnel = finishes(tunnel, Duration::from_secs(30), "the silent tunnel").await?;
    assert!(matches!(tunnel, Ok(0) | Err(_)), "the tunnel was closed at the deadline: {tunnel:?}");
    drop(release_clock);
    let _ = clock_held.await?;
    Ok(())
}
