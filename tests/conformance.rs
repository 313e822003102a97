//! Conformance corpora from `../shared/conformance`, run through the real binary
//! (`agentgate explain --policy-dir`) by the checkers that ship with them.
//!
//! - robots.txt: `robots/check.py` on `google.jsonl` and `rfc9309.jsonl`. The cases we
//!   knowingly decide differently (Google-specific behaviour, each with its reason) are
//!   listed in `tests/conformance/robots-known-differences.txt`; the failures must be
//!   exactly that list, no more and no fewer.
//! - agents.txt, AGENTS.md, automation-preferences.txt: `check_policy.py` on the three
//!   `proposed/cases.json`, with zero failures.
//!
//! A missing corpus or checker fails the test: a conformance run that silently did
//! nothing would be worse than none.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn conformance_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/conformance");
    assert!(
        dir.is_dir(),
        "conformance corpora not found at {}: check out the shared folder beside this repository",
        dir.display()
    );
    dir
}

fn require_file(path: PathBuf) -> PathBuf {
    assert!(path.is_file(), "conformance file missing: {}", path.display());
    path
}

fn explain_cmd() -> String {
    format!("{} explain", env!("CARGO_BIN_EXE_agentgate"))
}

/// Runs a checker and returns its stdout; panics when it could not run at all.
fn run_checker(args: &[&str]) -> (bool, String) {
    let out = Command::new("python3")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run python3 {args:?}: {e}; install Python 3"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.code().is_some_and(|c| c == 0 || c == 1),
        "checker {args:?} failed to run (status {:?}):\n{stdout}\n{stderr}",
        out.status
    );
    (out.status.success(), stdout)
}

/// The last `N passed, M failed` line.
fn tally(stdout: &str) -> (usize, usize) {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" passed, ") && l.contains(" failed"))
        .unwrap_or_else(|| panic!("no 'N passed, M failed' line in checker output:\n{stdout}"));
    let numbers: Vec<usize> = line.split(|c: char| !c.is_ascii_digit()).filter_map(|n| n.parse().ok()).collect();
    assert!(numbers.len() >= 2, "cannot read the tally line {line:?}");
    (numbers[0], numbers[1])
}

/// `id<TAB>reason` lines, `#` comments.
fn known_differences() -> BTreeMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/robots-known-differences.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut known = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (id, reason) = line
            .split_once('\t')
            .unwrap_or_else(|| panic!("{}:{}: expected `<case id><TAB><reason>`", path.display(), i + 1));
        assert!(!reason.trim().is_empty(), "{}:{}: {id} has no reason", path.display(), i + 1);
        assert!(
            known.insert(id.to_owned(), reason.to_owned()).is_none(),
            "{}:{}: {id} listed twice",
            path.display(),
            i + 1
        );
    }
    known
}

#[test]
fn robots_google_and_rfc9309_corpora() {
    let dir = conformance_dir();
    let check = require_file(dir.join("robots/check.py"));
    let google = require_file(dir.join("robots/google.jsonl"));
    let rfc = require_file(dir.join("robots/rfc9309.jsonl"));
    let cmd = explain_cmd();
    let (_, stdout) = run_checker(&[
        check.to_str().expect("path is UTF-8"),
        "--cmd",
        &cmd,
        "--jsonl",
        google.to_str().expect("path is UTF-8"),
        "--jsonl",
        rfc.to_str().expect("path is UTF-8"),
        "--jobs",
        "2",
    ]);
    let (passed, failed) = tally(&stdout);
    println!("robots corpora: {passed} passed, {failed} failed (known differences included)");

    // Each failure block starts with `FAIL <id> (<file>)`; its lines say how it failed.
    let mut failures: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("FAIL ") {
            let id = rest.split_whitespace().next().unwrap_or_default().to_owned();
            failures.insert(id.clone(), String::new());
            current = Some(id);
        } else if let Some(id) = &current
            && line.starts_with("  ")
        {
            if let Some(block) = failures.get_mut(id) {
                block.push_str(line);
                block.push('\n');
            }
        } else {
            current = None;
        }
    }
    for (id, block) in &failures {
        assert!(
            !block.contains("crashed") && !block.contains("timed out") && !block.contains("could not run"),
            "{id}: explain did not give a verdict:\n{block}"
        );
    }
    let known = known_differences();
    let unexpected: Vec<_> = failures.keys().filter(|id| !known.contains_key(*id)).collect();
    let now_passing: Vec<_> = known.keys().filter(|id| !failures.contains_key(*id)).collect();
    assert!(unexpected.is_empty(), "robots cases failing that are not known differences: {unexpected:?}\n{stdout}");
    assert!(
        now_passing.is_empty(),
        "known differences that now pass (remove them from robots-known-differences.txt): {now_passing:?}"
    );
    assert_eq!(failed, known.len(), "tally disagrees with the FAIL lines:\n{stdout}");
    assert!(passed >= 150, "too few robots cases ran ({passed}): is the corpus complete?");
}

#[test]
fn agents_txt_agents_md_and_autoctl_corpora() {
    let dir = conformance_dir();
    let check = require_file(dir.join("check_policy.py"));
    let cases: Vec<PathBuf> = ["agents-txt", "agents-md", "autoctl"]
        .iter()
        .map(|f| require_file(dir.join(f).join("proposed/cases.json")))
        .collect();
    let cmd = explain_cmd();
    let mut args =
        vec![check.to_str().expect("path is UTF-8").to_owned(), "--cmd".into(), cmd, "--jobs".into(), "2".into()];
    for c in &cases {
        args.push("--cases".into());
        args.push(c.to_str().expect("path is UTF-8").to_owned());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (ok, stdout) = run_checker(&args);
    let (passed, failed) = tally(&stdout);
    println!("policy corpora: {passed} passed, {failed} failed");
    assert!(ok && failed == 0, "policy corpus failures:\n{stdout}");
    assert!(passed >= 150, "too few policy checks ran ({passed}): is the corpus complete?\n{stdout}");
}

/// The usage-preference corpus (`tests/conformance/usage/`, its README says the shape):
/// each check run through `agentgate explain --purpose`, compared on the verdict, the lines
/// the `usage.refused` reasons cite and the preferences listed in `usage`.
#[test]
fn usage_preference_corpus() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/usage");
    let path = require_file(dir.join("cases.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let corpus: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(corpus["format"], "agentgate-usage-v1");
    let cases = corpus["cases"].as_array().unwrap_or_else(|| panic!("{}: no cases", path.display()));
    let mut failures = Vec::new();
    let mut checks = 0;
    for case in cases {
        let id = case["id"].as_str().unwrap_or("?");
        let policy_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        let robots = case["robots"].as_str().unwrap_or_else(|| panic!("{id}: no robots text"));
        std::fs::write(policy_dir.path().join("robots.txt"), robots).unwrap_or_else(|e| panic!("{id}: {e}"));
        for (i, check) in case["checks"].as_array().into_iter().flatten().enumerate() {
            checks += 1;
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_agentgate"));
            cmd.arg("explain").arg("--policy-dir").arg(policy_dir.path());
            if let Some(agent) = check["user_agent"].as_str() {
                cmd.args(["--user-agent", agent]);
            }
            for purpose in check["purposes"].as_array().into_iter().flatten().filter_map(|p| p.as_str()) {
                cmd.args(["--purpose", purpose]);
            }
            let url = format!("https://example.com{}", check["path"].as_str().unwrap_or("/"));
            let out = cmd.args(["--method", "GET", &url]).output().unwrap_or_else(|e| panic!("run explain: {e}"));
            let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
                panic!("{id}#{i}: explain printed no JSON ({e}): {}", String::from_utf8_lossy(&out.stderr))
            });
            let allowed = json["allowed"].as_bool();
            let refused: Vec<u64> = json["reasons"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|r| r["code"] == "usage.refused")
                .filter_map(|r| r["line"].as_u64())
                .collect();
            let usage: Vec<serde_json::Value> = json["usage"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|p| serde_json::json!([p["line"], p["label"], p["value"]]))
                .collect();
            let want_refused: Vec<u64> =
                check["refused"].as_array().into_iter().flatten().filter_map(serde_json::Value::as_u64).collect();
            let want_usage = check["usage"].as_array().cloned().unwrap_or_default();
            if allowed != check["allow"].as_bool() || out.status.success() != (allowed == Some(true)) {
                failures.push(format!("{id}#{i}: allowed {allowed:?}, want {}: {json}", check["allow"]));
            }
            if refused != want_refused {
                failures.push(format!("{id}#{i}: refused lines {refused:?}, want {want_refused:?}"));
            }
            if usage != want_usage {
                failures.push(format!("{id}#{i}: usage {usage:?}, want {want_usage:?}"));
            }
        }
    }
    assert!(checks >= 20, "the corpus lost checks: {checks}");
    assert!(failures.is_empty(), "{} of {checks} usage checks failed:\n{}", failures.len(), failures.join("\n"));
}
