//! Limiter speed (issue 7): check-and-spend on one key and spread over 100,000 keys, and a
//! whole decision (the typical four files evaluated, then their limits checked and spent).
//!
//! Run: `cargo bench --bench limits`. Targets: ≤ 150 ns per check; a decision with limits
//! ≤ 1.5 µs. Timings belong here, never in tests.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};

use agentgate::limits::{LocalLimiter, Usage};
use agentgate::policy::{
    AgentsMdCode, FetchOutcome, Headers, Limit, LimitKind, LimitScope, Policies, Reason, RequestView, Source,
    agents_txt, evaluate,
};
use governor::clock::DefaultClock;

/// A limit that never refuses at benchmark speed, so every iteration spends.
fn generous_limit() -> Limit {
    let reason = Reason::new(AgentsMdCode::RateLimit, "requests-per-minute: 4000000000").at_line(7);
    Limit {
        source: Source::AgentsMd,
        kind: LimitKind::Rate { requests: 4_000_000_000, window_s: 60 },
        scope: LimitScope::Host,
        reason,
    }
}

fn usage(agent: &str) -> Usage<'_> {
    Usage { agent, origin: "https://example.com:443", host: "example.com" }
}

fn response(body: &[u8], content_type: &str) -> FetchOutcome {
    let mut headers = Headers::default();
    headers.push("Content-Type", content_type);
    FetchOutcome::Response { status: 200, headers, body: body.to_vec(), over_cap: false }
}

/// The decision benchmark's site: a robots.txt, an agents.txt with `limit=` on the path, an
/// AGENTS.md with both AGENTS.md rates and concurrent sessions, and an autoctl file.
fn policies() -> Policies {
    let agents_md_body = "# AGENTS.md\n\n## Identity\n- site: example.com\n\n## Rate Limits\n\
        - requests-per-minute: 4000000000\n- requests-per-hour: 4000000000\n- concurrent-sessions: 1000\n";
    let agents_txt_body = agents_txt::fix_hash(b"/api ALLOW limit=4000000000\n/admin DISALLOW\n");
    let read = |path: &str, _cap: usize| {
        Ok::<_, std::convert::Infallible>(match path {
            "/robots.txt" => response(b"User-agent: *\nDisallow: /admin/\nAllow: /\n", "text/plain"),
            "/agents.txt" => response(&agents_txt_body, "text/plain"),
            "/AGENTS.md" => response(agents_md_body.as_bytes(), "text/markdown"),
            "/automation-preferences.txt" => {
                response(b"user-agent: *\nscope: /\nallowed-methods: GET, HEAD\n", "text/plain")
            }
            _ => FetchOutcome::not_found(),
        })
    };
    let Ok(policies) = Policies::read("example.com", read);
    policies
}

fn bench(c: &mut Criterion) {
    let limits = [generous_limit()];

    c.bench_function("limits/check_and_spend_one_key", |b| {
        let limiter = LocalLimiter::new(DefaultClock::default());
        b.iter(|| limiter.check_and_spend(black_box(usage("agent-1")), black_box(&limits)).is_ok())
    });

    c.bench_function("limits/check_and_spend_100000_keys", |b| {
        // Set up inside the closure, so a filtered run that skips this benchmark skips it too.
        let limiter = LocalLimiter::new(DefaultClock::default());
        let agents: Vec<String> = (0..100_000).map(|i| format!("agent-{i}")).collect();
        for agent in &agents {
            let _ = limiter.check_and_spend(usage(agent), &limits);
        }
        let mut next = 0;
        b.iter(|| {
            next = (next + 1) % agents.len();
            limiter.check_and_spend(black_box(usage(&agents[next])), black_box(&limits)).is_ok()
        })
    });

    let policies = policies();
    let headers = Headers::default();
    let purposes: Vec<String> = Vec::new();
    let view = RequestView {
        method: "GET",
        scheme: "https",
        host: "example.com",
        port: 443,
        path_and_query: "/api/items?id=42",
        product_token: None,
        user_agent: Some("Mozilla/5.0 (compatible; ExampleBot/1.0)"),
        agent_id: "agent-1",
        trust_level: 2,
        purposes: &purposes,
        headers: &headers,
    };
    let decision = evaluate(&policies, &view);
    assert_eq!(decision.limits.len(), 4, "agents.txt limit, two AGENTS.md rates, concurrent sessions");
    c.bench_function("decision/evaluate_only", |b| b.iter(|| evaluate(black_box(&policies), black_box(&view))));
    let limiter = LocalLimiter::new(DefaultClock::default());
    c.bench_function("decision/evaluate_and_check_limits", |b| {
        b.iter(|| {
            let decision = evaluate(black_box(&policies), black_box(&view));
            let permit = limiter.check_and_spend(usage("agent-1"), &decision.limits);
            // The permit (a concurrency slot) is dropped here, as at the end of a response.
            permit.is_ok()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
