//! The decision log as evidence, on the real binary writing real files: 2,000 requests
//! across size rotations, a SIGHUP reopen and a gzip'd rotated file verify with
//! `agentgate audit verify`, and an independent Python verifier (`chain_verify.py`: hashlib
//! and `cryptography`, none of agentgate's code) agrees on the line count and the chain head;
//! each kind of tampering, on a copy, is named at its file and line by both; after `kill -9`
//! under load, a restart chains on.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::process::Command;
use tokio::task::JoinSet;

use crate::support::TestResult;
use crate::support::binary::Agentgate;
use crate::support::origin::Origin;
use crate::support::wait::eventually;

const VERIFIER: &str = include_str!("chain_verify.py");

/// A config logging to `log` in `dir`, with `audit` appended to its `[audit]` table.
fn write_config(dir: &Path, log: &Path, audit: &str) -> TestResult<PathBuf> {
    let config = format!(
        "listen = \"127.0.0.1:0\"\n[ca]\ndir = {ca:?}\n[network]\nallow_cidrs = [\"127.0.0.0/8\"]\n\
         [audit]\npath = {log:?}\n{audit}\n[admin]\nlisten = \"off\"\n",
        ca = dir.join("ca"),
    );
    let path = dir.join("agentgate.toml");
    std::fs::write(&path, config)?;
    Ok(path)
}

/// `count` GETs of `/evidence/<from + n>` through `client`, `parallel` at a time; each must
/// get an answer from the origin unless `may_fail` (the proxy is killed meanwhile).
async fn load(client: &reqwest::Client, origin: &Origin, from: usize, count: usize, may_fail: bool) -> TestResult {
    let mut tasks = JoinSet::new();
    for n in from..from + count {
        let request = client.get(origin.url(&format!("/evidence/{n}")));
        tasks.spawn(async move { request.send().await.map(|r| r.status().as_u16()) });
        if tasks.len() >= 16
            && let Some(done) = tasks.join_next().await
        {
            let status = done?;
            assert!(may_fail || status.is_ok(), "{status:?}");
        }
    }
    while let Some(done) = tasks.join_next().await {
        let status = done?;
        assert!(may_fail || status.is_ok(), "{status:?}");
    }
    Ok(())
}

/// What `agentgate audit verify` printed and whether it exited 0.
struct Verdict {
    ok: bool,
    text: String,
}

impl Verdict {
    fn field(&self, prefix: &str, after: &str) -> Option<String> {
        let line = self.text.lines().find(|l| l.starts_with(prefix))?;
        let rest = &line[line.find(after)? + after.len()..];
        Some(rest.split([' ', ',']).next()?.to_owned())
    }

    fn lines(&self) -> Option<u64> {
        self.field("verified:", "verified: ")?.parse().ok()
    }

    fn head(&self) -> Option<String> {
        self.field("verified:", "chain head ")
    }

    fn after_last_checkpoint(&self) -> Option<u64> {
        self.field("after the last checkpoint", "): ")?.parse().ok()
    }
}

async fn audit_verify(files: &[PathBuf]) -> TestResult<Verdict> {
    audit_verify_with(&[], files).await
}

/// `agentgate audit verify ARGS FILES`.
async fn audit_verify_with(args: &[&str], files: &[PathBuf]) -> TestResult<Verdict> {
    let output =
        Command::new(env!("CARGO_BIN_EXE_agentgate")).args(["audit", "verify"]).args(args).args(files).output().await?;
    let text = String::from_utf8(output.stdout)? + &String::from_utf8_lossy(&output.stderr);
    Ok(Verdict { ok: output.status.success(), text })
}

async fn python_verdict(python: &Path, files: &[PathBuf]) -> TestResult<Value> {
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("chain_verify.py");
    std::fs::write(&script, VERIFIER)?;
    let output = Command::new(python).arg(&script).args(files).output().await?;
    assert!(output.status.success(), "the verifier crashed: {}", String::from_utf8_lossy(&output.stderr));
    Ok(serde_json::from_slice(&output.stdout)?)
}

fn read_lines(path: &Path) -> TestResult<Vec<String>> {
    Ok(std::fs::read_to_string(path)?.lines().map(str::to_owned).collect())
}

fn write_lines(path: &Path, lines: &[String]) -> TestResult {
    std::fs::write(path, lines.iter().map(|l| format!("{l}\n")).collect::<String>())?;
    Ok(())
}

fn is_checkpoint(line: &str) -> bool {
    serde_json::from_str::<Value>(line).is_ok_and(|v| v["event.action"] == "checkpoint")
}

/// The lines of `file` among the independent verifier's breaks.
fn b_at(breaks: &[Value], file: &str) -> Vec<u64> {
    breaks.iter().filter(|b| b["file"] == file).filter_map(|b| b["line"].as_u64()).collect()
}

/// `files` copied into a fresh directory under `root` named `case`, same names.
fn copy(root: &Path, case: &str, files: &[PathBuf]) -> TestResult<Vec<PathBuf>> {
    let dir = root.join(case);
    std::fs::create_dir_all(&dir)?;
    let mut copies = Vec::new();
    for file in files {
        let to = dir.join(file.file_name().ok_or("a file name")?);
        std::fs::copy(file, &to)?;
        copies.push(to);
    }
    Ok(copies)
}

#[tokio::test]
#[ignore = "needs python3-cryptography: run by scripts/test.sh"]
async fn a_rotated_log_of_2000_requests_verifies_and_each_tampering_is_named_at_its_line() -> TestResult {
    agentgate::tls::install_default_provider();
    let python = crate::signing::verifier().await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("decisions.jsonl");
    let config = write_config(dir.path(), &log, "max_file_size = \"256KiB\"\nmax_files = 100")?;
    let origin = Origin::http().await?;
    let agentgate = Agentgate::start(dir.path(), &config, "info").await?;
    let client = agentgate.client()?;
    load(&client, &origin, 0, 1000, false).await?;
    // logrotate's way: rename, then SIGHUP; the renamed file is sealed and a new one opened.
    let renamed = dir.path().join("decisions-hup.jsonl");
    std::fs::rename(&log, &renamed)?;
    agentgate.signal("HUP").await?;
    eventually("the log reopened after SIGHUP", async || {
        client.get(origin.url("/evidence/reopen")).send().await?;
        if log.exists() { Ok(()) } else { Err("no new log file yet".into()) }
    })
    .await?;
    load(&client, &origin, 1000, 1000, false).await?;
    agentgate.stop().await?;

    let mut files = vec![renamed, log.clone()];
    for n in 1..=100 {
        let rotated = PathBuf::from(format!("{}.{n}", log.display()));
        if rotated.exists() {
            files.push(rotated);
        }
    }
    assert!(files.len() >= 6, "rotated several times: {files:?}");
    // One rotated file gzip'd, as logrotate's compress does.
    let gzipped = PathBuf::from(format!("{}.2", log.display()));
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(&std::fs::read(&gzipped)?)?;
    std::fs::write(&gzipped, encoder.finish()?)?;

    let verdict = audit_verify(&files).await?;
    assert!(verdict.ok, "{}", verdict.text);
    assert!(verdict.text.contains("breaks: 0"), "{}", verdict.text);
    let lines = verdict.lines().ok_or_else(|| format!("no line count in {}", verdict.text))?;
    assert!(lines > 4000, "2,000 requests, two lines each, and checkpoints: {}", verdict.text);
    assert_eq!(verdict.after_last_checkpoint(), Some(0), "shutdown seals the log: {}", verdict.text);
    let independent = python_verdict(&python, &files).await?;
    assert_eq!(independent["breaks"], serde_json::json!([]), "{independent}");
    assert_eq!(independent["lines"], lines, "{independent}\n{}", verdict.text);
    assert_eq!(independent["head"].as_str().map(str::to_owned), verdict.head(), "{independent}\n{}", verdict.text);

    // Tampering, each on a copy of the files, in a plain rotated file between others.
    let target = PathBuf::from(format!("{}.3", log.display()));
    let original = read_lines(&target)?;
    let k = (2..original.len() - 2)
        .find(|&k| !is_checkpoint(&original[k - 1]) && !is_checkpoint(&original[k]) && !is_checkpoint(&original[k + 1]))
        .ok_or("three records in a row")?;
    // 1-based line numbers: `line` is original[line - 1].
    let line = k + 1;
    let last = original.len();
    let root = dir.path().join("tampered");
    type Tamper = Box<dyn Fn(&mut Vec<String>)>;
    // Where the independent verifier sees breaks: links in the target (`.3`), its closing
    // checkpoint's count when a line went or came, or the first line of the file after it
    // (`.2`) when the target's last line changed.
    let (this, next) = ("decisions.jsonl.3", "decisions.jsonl.2");
    // The case, the tampering, the line and kind verify names, the independent verifier's breaks.
    type Case = (&'static str, Tamper, usize, &'static str, Vec<(&'static str, usize)>);
    let cases: Vec<Case> = vec![
        (
            "edited",
            Box::new(move |l| l[k] = l[k].replacen("/evidence/", "/evidencE/", 1)),
            line,
            "edited",
            vec![(this, line + 1)],
        ),
        ("deleted", Box::new(move |l| drop(l.remove(k))), line, "deleted", vec![(this, line), (this, last - 1)]),
        (
            "swapped",
            Box::new(move |l| l.swap(k, k + 1)),
            line,
            "reordered",
            vec![(this, line), (this, line + 1), (this, line + 2)],
        ),
        (
            "inserted",
            Box::new(move |l| {
                let forged = l[k - 1].replacen("/evidence/", "/forged/", 1);
                l.insert(k, forged);
            }),
            line,
            "inserted",
            vec![(this, line), (this, line + 1), (this, last + 1)],
        ),
        (
            "signature",
            Box::new(move |l| {
                let at = l[last - 1].find("signature\":\"").map(|i| i + "signature\":\"".len()).unwrap_or(0);
                let mut bytes = l[last - 1].clone().into_bytes();
                bytes[at] = if bytes[at] == b'A' { b'B' } else { b'A' };
                l[last - 1] = String::from_utf8(bytes).unwrap_or_default();
            }),
            last,
            "signature",
            vec![(this, last), (next, 1)],
        ),
    ];
    for (case, tamper, at, kind, python_lines) in cases {
        let copies = copy(&root, case, &files)?;
        let copied = copies.iter().find(|c| c.file_name() == target.file_name()).ok_or("the target copied")?;
        let mut lines = original.clone();
        tamper(&mut lines);
        write_lines(copied, &lines)?;
        let verdict = audit_verify(&copies).await?;
        assert!(!verdict.ok, "{case}: verify must fail: {}", verdict.text);
        let named = format!("{}:{at}: {kind}", copied.display());
        assert!(verdict.text.contains(&named), "{case}: {named} in\n{}", verdict.text);
        let independent = python_verdict(&python, &copies).await?;
        let breaks = independent["breaks"].as_array().ok_or("breaks")?;
        assert!(!breaks.is_empty(), "{case}: python finds a break");
        for b in breaks {
            let file = b["file"].as_str().and_then(|f| Path::new(f).file_name()?.to_str()).unwrap_or_default();
            let found = (file, b["line"].as_u64().unwrap_or_default() as usize);
            assert!(
                python_lines.contains(&found),
                "{case}: python's break at {found:?}, expected {python_lines:?}: {independent}"
            );
        }
        let target_lines = b_at(breaks, &copied.display().to_string());
        assert!(!target_lines.is_empty(), "{case}: python names a line of the target: {independent}");
    }
    // A middle rotated file removed: the one after it chains to a line in none of the files.
    let copies = copy(&root, "missing", &files)?;
    let kept: Vec<PathBuf> = copies.iter().filter(|c| c.file_name() != target.file_name()).cloned().collect();
    let verdict = audit_verify(&kept).await?;
    assert!(!verdict.ok, "{}", verdict.text);
    let after = root.join("missing").join(format!("decisions.jsonl.{}", 2));
    let named = format!("{}:1: missing file", after.display());
    assert!(verdict.text.contains(&named), "{named} in\n{}", verdict.text);
    let independent = python_verdict(&python, &kept).await?;
    assert_eq!(
        independent["breaks"],
        serde_json::json!([{"file": after.to_str(), "line": 1, "kind": "first"}]),
        "{independent}"
    );
    Ok(())
}

#[tokio::test]
#[ignore = "needs python3-cryptography: run by scripts/test.sh"]
async fn after_kill_9_under_load_a_restart_chains_on_and_verify_reports_the_unsigned_tail() -> TestResult {
    agentgate::tls::install_default_provider();
    let python = crate::signing::verifier().await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("decisions.jsonl");
    let config = write_config(dir.path(), &log, "checkpoint_interval = \"1s\"")?;
    let origin = Origin::http().await?;
    let agentgate = Agentgate::start(dir.path(), &config, "info").await?;
    let client = agentgate.client()?;
    load(&client, &origin, 0, 100, false).await?;
    // A checkpoint every second while lines come: wait for one, then kill under load.
    eventually("an interval checkpoint in the log", async || {
        client.get(origin.url("/evidence/tick")).send().await?;
        let text = std::fs::read_to_string(&log)?;
        if text.lines().any(is_checkpoint) { Ok(()) } else { Err("no checkpoint yet".into()) }
    })
    .await?;
    let under_load = tokio::spawn({
        let (client, url) = (client.clone(), origin.url("/evidence/load/"));
        async move {
            for n in 0..400 {
                let _ = client.get(format!("{url}{n}")).send().await;
            }
        }
    });
    eventually("more lines under load", async || {
        let lines = read_lines(&log)?;
        if lines.len() > 300 { Ok(()) } else { Err(format!("{} lines", lines.len()).into()) }
    })
    .await?;
    agentgate.kill().await?;
    under_load.abort();

    let killed = read_lines(&log)?;
    let last_checkpoint = killed.iter().rposition(|l| is_checkpoint(l)).ok_or("a checkpoint")?;
    let tail = killed.len() - last_checkpoint - 1;
    let verdict = audit_verify(std::slice::from_ref(&log)).await?;
    assert!(verdict.ok, "a killed log has no break: {}", verdict.text);
    assert_eq!(verdict.after_last_checkpoint(), Some(tail as u64), "{}", verdict.text);

    let agentgate = Agentgate::start(dir.path(), &config, "info").await?;
    load(&agentgate.client()?, &origin, 1000, 20, false).await?;
    agentgate.stop().await?;
    let lines = read_lines(&log)?;
    let first_after: Value = serde_json::from_str(&lines[killed.len()])?;
    let head_before = hex::encode(Sha256::digest(killed[killed.len() - 1].as_bytes()));
    assert_eq!(first_after["agentgate.chain.prev"], head_before, "the first line after the restart chains on");
    assert!(first_after["agentgate.chain.start"].is_null(), "no new chain: {first_after}");
    let verdict = audit_verify(std::slice::from_ref(&log)).await?;
    assert!(verdict.ok, "{}", verdict.text);
    assert_eq!(verdict.text.matches("a new chain starts").count(), 1, "only at the first start: {}", verdict.text);
    assert_eq!(verdict.after_last_checkpoint(), Some(0), "{}", verdict.text);
    assert!(verdict.text.contains("only --key proves who signed"), "{}", verdict.text);
    // With the key `agentgate audit key` prints, the signer is proven: no warning.
    let key =
        Command::new(env!("CARGO_BIN_EXE_agentgate")).args(["audit", "key", "--config"]).arg(&config).output().await?;
    assert!(key.status.success(), "{}", String::from_utf8_lossy(&key.stderr));
    let key = String::from_utf8(key.stdout)?.trim().to_owned();
    assert_eq!(key.len(), 44, "base64 of 32 bytes: {key}");
    let keyed = audit_verify_with(&["--key", &key], std::slice::from_ref(&log)).await?;
    assert!(keyed.ok && !keyed.text.contains("warning"), "{}", keyed.text);
    let other = "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=";
    let forged = audit_verify_with(&["--key", other], std::slice::from_ref(&log)).await?;
    assert!(!forged.ok && forged.text.contains(": signature: "), "another key proves nothing: {}", forged.text);
    let independent = python_verdict(&python, std::slice::from_ref(&log)).await?;
    assert_eq!(independent["breaks"], serde_json::json!([]), "{independent}");
    assert_eq!(independent["lines"], lines.len(), "{independent}");
    assert_eq!(independent["head"].as_str().map(str::to_owned), verdict.head(), "{independent}");
    Ok(())
}
