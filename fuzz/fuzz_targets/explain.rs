//! Fuzz target for `agentgate explain` end to end: policy bytes in, decision out. The
//! fuzzed bytes are split at `\0\0` into robots.txt, agents.txt, AGENTS.md,
//! `.well-known/agents.md`, automation-preferences.txt and the request path; the files are
//! written to a directory (a part left empty is a missing file, a 404), read back through
//! the fetcher's size caps, evaluated, and rendered as JSON and text; each file is also
//! linted. Nothing may panic.
#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use agentgate::explain::{ExplainRequest, explain};
use agentgate::lint::lint_file;

const FILES: [&str; 5] =
    ["robots.txt", "agents.txt", "AGENTS.md", ".well-known/agents.md", "automation-preferences.txt"];

fn policy_dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("agentgate-fuzz-explain-{}", std::process::id()));
        std::fs::create_dir_all(dir.join(".well-known")).expect("a temporary policy directory");
        dir
    })
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let dir = policy_dir();
    let mut parts = parts(data);
    let path = String::from_utf8_lossy(parts.pop().unwrap_or_default()).into_owned();
    for (i, name) in FILES.iter().enumerate() {
        let file = dir.join(name);
        match parts.get(i).filter(|p| !p.is_empty()) {
            Some(body) => std::fs::write(&file, body).expect("write a policy file"),
            None => {
                let _ = std::fs::remove_file(&file);
            }
        }
    }
    let request = ExplainRequest {
        policy_dir: dir.clone(),
        user_agent: Some("ExampleBot".to_owned()),
        agent: Some("fuzz".to_owned()),
        trust_level: 2,
        purposes: vec!["search".to_owned()],
        headers: vec!["Content-Type: application/x-www-form-urlencoded".to_owned()],
        method: if path.len() % 2 == 0 { "GET" } else { "POST" }.to_owned(),
        url: format!("https://www.example.com/{}", path.trim_start_matches('/')),
    };
    if let Ok(explanation) = explain(&request) {
        let _ = explanation.to_json();
        let _ = explanation.to_text();
    }
    for name in FILES {
        let _ = lint_file(&dir.join(name), None, false);
    }
});

/// The input cut at every `\0\0`.
fn parts(mut rest: &[u8]) -> Vec<&[u8]> {
    let mut parts = Vec::new();
    while let Some(at) = rest.windows(2).position(|w| w == b"\0\0") {
        parts.push(&rest[..at]);
        rest = &rest[at + 2..];
    }
    parts.push(rest);
    parts
}
