//! What the real binary tells a newcomer (issue 12): `agentgate run` prints the line scripts
//! wait for, then the config, mode, decision log and admin address in use and the client
//! recipe; `agentgate config check` names the mode as the file spells it.

use tokio::process::Command;

use crate::support::TestResult;
use crate::support::binary::run_reading_stdout;

#[tokio::test]
async fn run_prints_where_everything_is_and_the_client_recipe() -> TestResult {
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("logs/decisions.jsonl");
    let config = format!(
        "listen = \"127.0.0.1:0\"\nmode = \"monitor\"\n[ca]\ndir = {ca:?}\n[audit]\npath = {log:?}\n[admin]\nlisten = \"off\"\n",
        ca = dir.path().join("ca"),
    );
    let config_path = dir.path().join("agentgate.toml");
    std::fs::write(&config_path, config)?;
    let (mut child, mut stdout) = run_reading_stdout(&config_path)?;
    let mut lines = Vec::new();
    while let Some(line) = stdout.next_line().await? {
        let last = line.starts_with("NO_PROXY");
        lines.push(line);
        if last {
            break;
        }
    }
    child.kill().await?;
    let text = lines.join("\n");
    let addr = lines[0]
        .strip_prefix("agentgate listening on http://")
        .and_then(|rest| rest.split_whitespace().next())
        .ok_or_else(|| format!("unexpected first line: {text}"))?;
    let ca = std::fs::canonicalize(dir.path().join("ca/agentgate-ca.pem"))?.display().to_string();
    assert!(lines[0].contains(&format!("(CA {ca}); for agents: HTTPS_PROXY=http://{addr}")), "{text}");
    assert_eq!(lines[1], format!("  config        {}", config_path.display()));
    assert_eq!(lines[2], "  mode          monitor");
    assert_eq!(lines[3], format!("  decision log  {}", log.display()));
    assert_eq!(lines[4], "  admin API     off");
    assert!(text.contains(&format!("export http_proxy=http://{addr} https_proxy=http://{addr}")), "{text}");
    assert!(text.contains(&format!("CURL_CA_BUNDLE={ca} GIT_SSL_CAINFO={ca}")), "{text}");
    assert!(text.contains("EnvHttpProxyAgent"), "{text}");
    Ok(())
}

#[tokio::test]
async fn config_check_prints_the_mode_as_written() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("agentgate.toml");
    for mode in ["enforce", "monitor"] {
        std::fs::write(&path, format!("mode = \"{mode}\"\n"))?;
        let out = Command::new(env!("CARGO_BIN_EXE_agentgate")).args(["config", "check"]).arg(&path).output().await?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(stdout.trim_end().ends_with(&format!("mode {mode})")), "{stdout}");
    }
    Ok(())
}
