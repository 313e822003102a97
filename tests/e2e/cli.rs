//! The real binary's subcommands as a shell runs them: printing into a pipe whose reader
//! leaves early (`| head -c 1`, `| head -1`) ends quietly with the command's own status, for
//! every command that prints; `agentgate run` keeps serving when nobody reads its banner;
//! `agentgate config check` lists every problem of a file in one run, each at its line; the
//! AGENTS.md example in docs/ lints clean and `explain` does with it what the docs say.

use std::io::{PipeReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::support::TestResult;
use crate::support::binary::WAIT_LIMIT;

const AGENTGATE: &str = env!("CARGO_BIN_EXE_agentgate");

/// A decision log of `records` records, each from one of 50 agents to its own origin (so
/// every summary grouping is long too).
fn big_log(dir: &Path, records: usize) -> TestResult<PathBuf> {
    let path = dir.join("decisions.jsonl");
    let mut text = String::new();
    for i in 0..records {
        let outcome = if i % 3 == 0 { "deny" } else { "allow" };
        text.push_str(&format!(
            "{{\"@timestamp\":\"2026-11-23T10:00:00.000Z\",\"agentgate.agent\":\"agent-{}\",\"event.outcome\":\"{outcome}\",\"url.full\":\"https://site-{i}.example/page\"}}\n",
            i % 50
        ));
    }
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Runs `agentgate ARGS` with stdout a pipe of which the test reads `read` bytes (none: the
/// read end is closed before the child starts, so its first write fails) and then closes.
fn in_a_pipe(args: &[&str], read: usize) -> TestResult<Output> {
    let (reader, writer) = std::io::pipe()?;
    let reader: Option<PipeReader> = if read == 0 {
        drop(reader);
        None
    } else {
        Some(reader)
    };
    let mut command = Command::new(AGENTGATE);
    command.args(args).stdin(Stdio::null()).stdout(writer).stderr(Stdio::piped());
    let child = command.spawn()?;
    // The test's copy of the write end goes with `command`, so the child holds the only one.
    drop(command);
    if let Some(mut reader) = reader {
        let mut head = vec![0; read];
        reader.read_exact(&mut head)?;
    }
    Ok(child.wait_with_output()?)
}

/// Asserts the run ended with `code` and printed nothing on stderr.
fn quiet(args: &[&str], output: &Output, code: i32) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(code), "agentgate {args:?}: {}\n{stderr}", output.status);
    assert!(stderr.is_empty(), "agentgate {args:?} wrote to stderr:\n{stderr}");
}

#[test]
fn every_printing_command_ends_quietly_when_the_reader_leaves() -> TestResult {
    let dir = tempfile::tempdir()?;
    let log = big_log(dir.path(), 20_000)?;
    let log = log.to_str().ok_or("a UTF-8 path")?;
    // robots.txt with warnings (lint prints them, exit 0) and an AGENTS.md with an error (exit 1).
    let policies = dir.path().join("policies");
    std::fs::create_dir(&policies)?;
    std::fs::write(policies.join("robots.txt"), "User-agent: *\nDisallow: /private\nFoo bar\n")?;
    let agents_md = dir.path().join("AGENTS.md");
    std::fs::write(&agents_md, "# AGENTS.md\n\n## Identity\n- contact: ops@example.com\n")?;
    let config = dir.path().join("agentgate.toml");
    std::fs::write(&config, "mode = \"monitor\"\n")?;
    let ca_dir = dir.path().join("ca");
    let (policies, robots, agents_md, config, ca_dir) = (
        policies.to_str().ok_or("UTF-8")?,
        format!("{}/robots.txt", policies.display()),
        agents_md.to_str().ok_or("UTF-8")?,
        config.to_str().ok_or("UTF-8")?,
        ca_dir.to_str().ok_or("UTF-8")?,
    );
    // Each command with the status it has when its whole answer is read.
    let commands: [(&[&str], i32); 13] = [
        (&["audit", "summary", "--format", "json", "--by", "origin", log], 0),
        (&["audit", "report", "--html", log], 0),
        (&["audit", "summary", "--format", "table", "--by", "origin", log], 0),
        (&["audit", "grep", "--outcome", "allow", log], 0),
        (&["explain", "--policy-dir", policies, "https://example.com/page"], 0),
        (&["explain", "--policy-dir", policies, "--format", "text", "https://example.com/private/x"], 1),
        (&["lint", &robots], 0),
        (&["lint", &robots, agents_md], 1),
        (&["ca", "export", "--ca-dir", ca_dir], 0),
        (&["config", "check", config], 0),
        (&["--help"], 0),
        (&["audit", "--help"], 0),
        (&["--version"], 0),
    ];
    for (args, code) in commands {
        let whole = Command::new(AGENTGATE).args(args).output()?;
        assert_eq!(whole.status.code(), Some(code), "agentgate {args:?} read to the end: {whole:?}");
        assert!(!whole.stdout.is_empty(), "agentgate {args:?} prints something");
        // The reader gone before the first write.
        quiet(args, &in_a_pipe(args, 0)?, code);
    }
    // `| head -c 1` and `| head -1` on answers far larger than a pipe holds, so the child is
    // still writing when the reader leaves; many times, as the failure was one run in four.
    for args in [
        &["audit", "summary", "--format", "json", "--by", "origin", log][..],
        &["audit", "summary", "--by", "origin", log],
        &["audit", "grep", log],
        &["audit", "report", "--html", log],
    ] {
        for read in [1, 200, 1, 200, 1] {
            quiet(args, &in_a_pipe(args, read)?, 0);
        }
    }
    Ok(())
}

#[tokio::test]
async fn run_keeps_serving_when_nobody_reads_its_banner() -> TestResult {
    let dir = tempfile::tempdir()?;
    // A free port, taken by agentgate (its banner, which says which, cannot be read).
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let config = dir.path().join("agentgate.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\n[ca]\ndir = {:?}\n[audit]\npath = {:?}\n[admin]\nlisten = \"off\"\n",
            dir.path().join("ca"),
            dir.path().join("decisions.jsonl"),
        ),
    )?;
    let (reader, writer) = std::io::pipe()?;
    drop(reader);
    let mut child = tokio::process::Command::new(AGENTGATE)
        .args(["run", "--config"])
        .arg(&config)
        .stdout(writer)
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
    let warned = tokio::time::timeout(WAIT_LIMIT, async {
        while let Some(line) = lines.next_line().await? {
            if line.contains("cannot print the start-up banner") {
                return Ok::<_, std::io::Error>(Some(line));
            }
        }
        Ok(None)
    })
    .await??;
    assert!(warned.is_some(), "agentgate warns that its banner went nowhere");
    // Still serving: agentgate.local answers its CA through the proxy.
    agentgate::tls::install_default_provider();
    let client = reqwest::Client::builder().proxy(reqwest::Proxy::http(format!("http://127.0.0.1:{port}"))?).build()?;
    let ca = client.get("http://agentgate.local/ca.pem").send().await?;
    assert_eq!(ca.status(), 200);
    assert!(ca.text().await?.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(child.try_wait()?.is_none(), "agentgate is still running");
    child.kill().await?;
    Ok(())
}

#[test]
fn config_check_lists_every_problem_of_a_file_in_one_run() -> TestResult {
    let dir = tempfile::tempdir()?;
    let missing_ca = dir.path().join("no-such-ca.pem");
    let config = dir.path().join("agentgate.toml");
    // Five mistakes in five tables; each used to take a run of its own.
    let text = format!(
        "listen = \"127.0.0.1:8080\"\n\
         \n\
         [mitm]\n\
         cert_cache_size = \"many\"\n\
         \n\
         [cache]\n\
         max_origin = 100\n\
         \n\
         [upstream]\n\
         connect_timeout = \"10 parsecs\"\n\
         extra_ca_files = [{missing_ca:?}]\n\
         \n\
         [network]\n\
         allow_cidrs = [\"10.0.0.0/33\"]\n"
    );
    std::fs::write(&config, text)?;
    let output = Command::new(AGENTGATE).args(["config", "check"]).arg(&config).output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let file = config.display().to_string();
    let expected = [
        format!("{file}:4:19: [mitm] cert_cache_size = \"many\": invalid type: string \"many\""),
        format!(
            "{file}:7:1: [cache] max_origin = 100: unknown field `max_origin`, expected one of `max_origins`, `max_bytes`, `store`, `redis`"
        ),
        format!(
            "{file}:10:19: [upstream] connect_timeout = \"10 parsecs\": invalid duration; expected a number with a unit"
        ),
        format!(
            "{file}:11:19: [upstream] extra_ca_files = [{missing_ca:?}]: cannot read {}: No such file or directory (os error 2); check that the file exists and is readable by the agentgate user",
            missing_ca.display()
        ),
        format!(
            "{file}:14:15: [network] allow_cidrs = [\"10.0.0.0/33\"]: \"10.0.0.0/33\": invalid network; expected CIDR"
        ),
    ];
    let problems: Vec<&str> = stderr.lines().filter_map(|line| line.strip_prefix("  - ")).collect();
    assert_eq!(problems.len(), expected.len(), "{stderr}");
    for (problem, expected) in problems.iter().zip(&expected) {
        assert!(problem.starts_with(expected.as_str()), "{problem}\nshould start with\n{expected}");
    }
    assert!(stderr.starts_with(&format!("agentgate: {file}: 5 invalid setting(s):\n")), "{stderr}");
    // The missing file's cause is said once.
    assert_eq!(stderr.matches("No such file or directory").count(), 1, "{stderr}");
    Ok(())
}

#[test]
fn the_agents_md_example_lints_clean_and_does_what_the_docs_say() -> TestResult {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples/AGENTS.md");
    let lint = Command::new(AGENTGATE).arg("lint").arg(&example).output()?;
    assert!(lint.status.success(), "{lint:?}");
    assert!(lint.stdout.is_empty() && lint.stderr.is_empty(), "no finding at all: {lint:?}");

    let dir = tempfile::tempdir()?;
    std::fs::copy(&example, dir.path().join("AGENTS.md"))?;
    let explain =
        |trust: &str, method: &str, content_type: Option<&str>, path: &str| -> TestResult<serde_json::Value> {
            let mut command = Command::new(AGENTGATE);
            command.args(["explain", "--agent", "bot", "--trust-level", trust, "--method", method, "--policy-dir"]);
            command.arg(dir.path());
            if let Some(content_type) = content_type {
                command.args(["--header", &format!("Content-Type: {content_type}")]);
            }
            let output = command.arg(format!("https://shop.example{path}")).output()?;
            Ok(serde_json::from_slice(&output.stdout)?)
        };
    // (trust level, method, content type, path) → decision, the deciding AGENTS.md reason.
    let form = Some("application/x-www-form-urlencoded");
    let json = Some("application/json");
    let multipart = Some("multipart/form-data; boundary=x");
    for (trust, method, content_type, path, decision, code) in [
        ("0", "GET", None, "/page", "deny", Some("agents_md.trust_level")),
        ("1", "GET", None, "/page", "allow", None),
        ("1", "POST", json, "/api/cart", "allow", Some("agents_md.action_allowed")),
        ("1", "DELETE", None, "/cart/1", "deny", Some("agents_md.action_denied")),
        ("1", "POST", multipart, "/profile/photo", "deny", Some("agents_md.action_denied")),
        ("1", "GET", None, "/admin/users", "deny", Some("agents_md.disallowed_path")),
        ("1", "POST", form, "/checkout/pay", "needs_approval", Some("agents_md.requires_human_approval")),
        ("1", "GET", None, "/blog/post", "allow", None),
        ("1", "POST", json, "/blog/comment", "deny", Some("agents_md.read_only_path")),
    ] {
        let answer = explain(trust, method, content_type, path)?;
        assert_eq!(answer["decision"], decision, "{method} {path} at trust {trust}: {answer:#}");
        let reasons = answer["reasons"].as_array().cloned().unwrap_or_default();
        let from_agents_md = reasons.iter().find(|r| r["source"] == "AGENTS.md").map(|r| r["code"].clone());
        assert_eq!(from_agents_md.as_ref().and_then(|c| c.as_str()), code, "{method} {path}: {answer:#}");
        // Every answer carries the limits and the identification header.
        assert_eq!(answer["inject_headers"][0]["name"], "X-Agent-Identity", "{answer:#}");
        let windows: Vec<(u64, u64)> = answer["limits"]
            .as_array()
            .map(|l| l.iter().filter_map(|l| Some((l["requests"].as_u64()?, l["window_s"].as_u64()?))).collect())
            .unwrap_or_default();
        assert_eq!(windows, [(30, 60), (500, 3600)], "{answer:#}");
        assert_eq!(answer["concurrency"][0]["rule"], "- concurrent-sessions: 3", "{answer:#}");
    }
    Ok(())
}
