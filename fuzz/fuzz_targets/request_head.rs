//! Fuzz target for the proxy's request parsing: the fuzzed bytes are sent, as a client
//! would send them, to the real proxy (started once per process on `127.0.0.1:0`), and
//! whatever it answers is read until it closes. Every head reaches hyper's HTTP/1 parser
//! and, when it parses, the proxy's own checks (request-target form, `Host`, CONNECT
//! authority, hop-by-hop headers) and the gate.
//!
//! Nothing leaves loopback: an operator rule denies every host and path, so the gate never
//! fetches a policy file and never forwards, and no host is passed through. A panic in any
//! task aborts the process (libFuzzer's panic hook); the target also fails when the proxy
//! answers `500` (our own bug, STYLE §7) or stops accepting connections.
#![no_main]

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use agentgate::config::{Config, RuleAction, RuleConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Runtime;

/// Heads longer than this are cut: hyper's own limit (~400 KiB) is not what is fuzzed here.
const MAX_INPUT: usize = 64 * 1024;

struct Harness {
    runtime: Runtime,
    addr: SocketAddr,
}

fn harness() -> &'static Harness {
    static HARNESS: OnceLock<Harness> = OnceLock::new();
    HARNESS.get_or_init(|| {
        agentgate::tls::install_default_provider();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a tokio runtime for the fuzzed proxy");
        let dir = std::env::temp_dir().join(format!("agentgate-fuzz-request-head-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a temporary directory for the CA and the decision log");
        let mut config = Config::embedded_default();
        config.listen = SocketAddr::from(([127, 0, 0, 1], 0));
        config.ca.dir = dir.clone();
        config.audit.path = dir.join("decisions.jsonl");
        config.rules = vec![RuleConfig {
            host: "*".to_owned(),
            path: "*".to_owned(),
            methods: Vec::new(),
            action: RuleAction::Deny,
            reason: "fuzzing: nothing leaves loopback".to_owned(),
        }];
        let running = runtime
            .block_on(async { agentgate::app::Proxy::new(Arc::new(config))?.bind().await })
            .expect("the proxy binds 127.0.0.1:0");
        let addr = running.local_addr();
        runtime.spawn(running.run_until(std::future::pending()));
        Harness { runtime, addr }
    })
}

libfuzzer_sys::fuzz_target!(|head: &[u8]| {
    let harness = harness();
    let head = &head[..head.len().min(MAX_INPUT)];
    let answer = harness.runtime.block_on(async {
        let mut stream = TcpStream::connect(harness.addr).await.expect("the proxy keeps accepting connections");
        // The proxy may answer and close before reading everything: a failed write is fine.
        let _ = stream.write_all(head).await;
        let _ = stream.shutdown().await;
        let mut answer = Vec::new();
        let mut capped = (&mut stream).take(1024 * 1024);
        let _ = tokio::time::timeout(Duration::from_secs(10), capped.read_to_end(&mut answer)).await;
        answer
    });
    assert!(!answer.starts_with(b"HTTP/1.1 500"), "the proxy blamed itself: {}", String::from_utf8_lossy(&answer));
});
