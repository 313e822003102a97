//! Graceful shutdown: once it starts, no new connections are accepted, and a request already
//! in flight still gets its full response.

use tokio::net::TcpStream;

use crate::support::binary::Agentgate;
use crate::support::origin::Origin;
use crate::support::pki::TestCa;
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
