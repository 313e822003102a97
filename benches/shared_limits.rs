//! Shared-store speed (issue 14): requests per second and p50/p99 latency of one limited
//! request's `check_and_spend` with the Redis store against the memory store, 50 concurrent
//! callers (one per agent, as 50 connections would be), on loopback. Measures the limiter
//! alone: the rest of a request costs the same with either store, so the difference is what
//! the store adds to a limited request.
//!
//! Run: `cargo bench --bench shared_limits` (starts its own `redis-server` on a free
//! loopback port; `.ci/run` installs it). Bounded: 20,000 checks per case.

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agentgate::limits::{Declared, Limiter, Usage};
use agentgate::limits::{LimitsConfig, Store};
use agentgate::metrics::StoreMetrics;
use agentgate::policy::{AgentsMdCode, Limit, LimitKind, LimitScope, Reason, Source};

const CALLERS: usize = 50;
const CHECKS_PER_CALLER: usize = 400;

fn limit(kind: LimitKind, rule: &str) -> Limit {
    let reason = Reason::new(AgentsMdCode::RateLimit, rule).at_line(7);
    Limit { source: Source::AgentsMd, kind, scope: LimitScope::Host, reason }
}

/// Limits that never refuse at benchmark speed, so every check spends (and takes a slot).
fn cases() -> Vec<(&'static str, Vec<Limit>)> {
    let rate = limit(LimitKind::Rate { requests: 4_000_000_000, window_s: 60 }, "requests-per-minute: 4000000000");
    let slots = limit(LimitKind::Concurrent { max: 1_000_000 }, "concurrent-sessions: 1000000");
    vec![("requests-per-minute", vec![rate.clone()]), ("requests-per-minute + concurrent-sessions", vec![rate, slots])]
}

async fn run(limiter: Arc<Limiter>, limits: Arc<Vec<Limit>>) -> (f64, Duration, Duration) {
    let started = Instant::now();
    let tasks: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let (limiter, limits) = (Arc::clone(&limiter), Arc::clone(&limits));
            tokio::spawn(async move {
                let agent = format!("agent-{caller}");
                let usage = Usage { agent: &agent, origin: "https://example.com:443", host: "example.com" };
                let mut latencies = Vec::with_capacity(CHECKS_PER_CALLER);
                for _ in 0..CHECKS_PER_CALLER {
                    let at = Instant::now();
                    let permit = limiter.check_and_spend(usage, &limits, Declared::default()).await;
                    latencies.push(at.elapsed());
                    assert!(permit.is_ok(), "a generous limit never refuses");
                }
                latencies
            })
        })
        .collect();
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.expect("a caller finishes"));
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    (latencies.len() as f64 / elapsed.as_secs_f64(), at(0.50), at(0.99))
}

fn main() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("bound").port();
    let mut redis = Command::new("redis-server")
        .args(["--bind", "127.0.0.1", "--port", &port.to_string(), "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .expect("redis-server runs: .ci/run installs it (apt-get install redis-server)");
    let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
    runtime.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(Instant::now() < deadline, "redis-server answers within 10 s");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for (name, limits) in cases() {
            let limits = Arc::new(limits);
            for store in [Store::Memory, Store::Redis] {
                let mut config = LimitsConfig { store, ..LimitsConfig::default() };
                config.redis.url = format!("redis://127.0.0.1:{port}");
                // A first check may include connecting: a bench measures steady state.
                config.redis.timeout = Duration::from_secs(5);
                let limiter =
                    Arc::new(Limiter::from_config(&config, &[], StoreMetrics::default()).expect("the store starts"));
                let (rps, p50, p99) = run(limiter, Arc::clone(&limits)).await;
                println!(
                    "{name:<42} {store:<7} {rps:>10.0} checks/s   p50 {p50:>9.1?}   p99 {p99:>9.1?}",
                    store = format!("{store:?}")
                );
            }
        }
    });
    let _ = redis.kill();
    let _ = redis.wait();
}
