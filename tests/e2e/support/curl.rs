//! The system `curl` as a client. A fresh machine has it (README); where it is missing the
//! test fails saying so: a curl part skipped in silence would prove nothing.

use std::io;

use tokio::process::Command;

use super::TestResult;

/// What curl got: the final status, the HTTP version (`1.1`, `2`), the header block(s) as
/// text, and the body.
pub struct CurlOutput {
    pub status: u16,
    pub version: String,
    pub headers: String,
    pub body: Vec<u8>,
}

/// Runs `curl -sS <args>`, capturing status, version, headers and body.
pub async fn curl(args: &[&str]) -> TestResult<CurlOutput> {
    run_curl(Command::new("curl"), args).await
}

/// [`curl`] inside the network namespace `netns` (`ip netns exec`).
pub async fn curl_in_netns(netns: &str, args: &[&str]) -> TestResult<CurlOutput> {
    let mut command = Command::new("ip");
    command.args(["netns", "exec", netns, "curl"]);
    run_curl(command, args).await
}

async fn run_curl(mut command: Command, args: &[&str]) -> TestResult<CurlOutput> {
    let dir = tempfile::tempdir()?;
    let headers_path = dir.path().join("headers");
    let body_path = dir.path().join("body");
    let output = command
        .args(["-sS", "--noproxy", "", "-w", "%{http_code} %{http_version}", "-D"])
        .arg(&headers_path)
        .arg("-o")
        .arg(&body_path)
        .args(args)
        // An inherited NO_PROXY or proxy variable must not change where curl goes.
        .env_remove("NO_PROXY")
        .env_remove("no_proxy")
        .env_remove("HTTPS_PROXY")
        .env_remove("https_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .output()
        .await;
    let output = match output {
        Ok(output) => output,
        Err(error) if error.kind() == io::ErrorKind::NotFound => {
            return Err("curl is missing: the tests need it (apt-get install curl; scripts/test.sh installs it)".into());
        }
        Err(error) => return Err(error.into()),
    };
    if !output.status.success() {
        return Err(format!("curl {args:?} failed: {}", String::from_utf8_lossy(&output.stderr)).into());
    }
    let summary = String::from_utf8(output.stdout)?;
    let (status, version) = summary.split_once(' ').ok_or_else(|| format!("unexpected curl -w output {summary:?}"))?;
    Ok(CurlOutput {
        status: status.parse()?,
        version: version.to_owned(),
        headers: std::fs::read_to_string(&headers_path)?,
        body: std::fs::read(&body_path).unwrap_or_default(),
    })
}
