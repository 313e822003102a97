//! Policy evaluation speed (issue 3): the typical four-file set, a 500 KiB robots.txt with
//! 10,000 rules, and the pathological wildcard pattern against a 16 KiB path.
//!
//! Run: `cargo bench --bench policy`. Targets: ≤ 1 µs median for the typical set; the big
//! robots.txt no more than 10× the typical robots.txt alone. Timings belong here, never in
//! tests.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};

use agentgate::policy::{FetchOutcome, Headers, Policies, RequestView, agents_txt, evaluate, robots};

const TYPICAL_ROBOTS: &str = "\
User-agent: Googlebot
Disallow: /nogoogle/

User-agent: *
Disallow: /admin/
Disallow: /cart
Disallow: /checkout/
Disallow: /search?
Disallow: /*.pdf$
Disallow: /private*
Allow: /private/press/
Disallow: /tmp/
Disallow: /user/*/settings
Allow: /user/*/profile
Disallow: /api/
Allow: /api/public/
Crawl-delay: 5
Sitemap: https://example.com/sitemap.xml
";

const TYPICAL_AGENTS_TXT: &str = "\
# agents.txt for example.com
*e37fd0bbf5b647010a78772b8755ffa92efe6aa07b2bb0d373b2a61adfc9435a
/status ALLOW
/dashboard ALLOW limit=50
/admin DISALLOW
";

const TYPICAL_AUTOCTL: &str = "\
user-agent: *
scope: /
allowed-methods: GET, HEAD, OPTIONS
allowed-purposes: search, ai-input

user-agent: *
scope: /api/
allowed-methods: GET, POST
";

fn response(body: &[u8], content_type: &str) -> FetchOutcome {
    let mut headers = Headers::default();
    headers.push("Content-Type", content_type);
    FetchOutcome::Response { status: 200, headers, body: body.to_vec(), over_cap: false }
}

fn agents_md_example() -> Vec<u8> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/conformance/agents-md/examples/e-commerce.agents.md");
    std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}: the benchmark uses the spec's e-commerce example"))
}

/// agents.txt's hash covers its directive lines; recompute it so the typical file is valid.
fn with_valid_hash(text: &str) -> Vec<u8> {
    agents_txt::fix_hash(text.as_bytes())
}

fn policies(robots_body: &[u8]) -> Policies {
    let read = |path: &str, _cap: usize| {
        Ok::<_, std::convert::Infallible>(match path {
            "/robots.txt" => response(robots_body, "text/plain"),
            "/agents.txt" => response(&with_valid_hash(TYPICAL_AGENTS_TXT), "text/plain"),
            "/AGENTS.md" => response(&agents_md_example(), "text/markdown"),
            "/automation-preferences.txt" => response(TYPICAL_AUTOCTL.as_bytes(), "text/plain"),
            _ => FetchOutcome::not_found(),
        })
    };
    let Ok(policies) = Policies::read("example.com", read);
    policies
}

/// About 500 KiB and 10,000 rules in a few groups, shaped like large real files.
fn big_robots() -> Vec<u8> {
    let mut out = String::from("User-agent: SomeOtherBot\nDisallow: /\n\nUser-agent: *\n");
    let mut i = 0;
    while i < 10_000 {
        let rule = match i % 5 {
            0 => format!("Disallow: /catalog/department-{i}/listing/page-{}/\n", i * 7),
            1 => format!("Allow: /catalog/department-{i}/listing/public-{}/\n", i * 3),
            2 => format!("Disallow: /*/session-{i}/*?tracking=true\n"),
            3 => format!("Disallow: /archive/{}/{}/old-content-{i}.html$\n", 2000 + i % 25, i % 12),
            _ => format!("Disallow: /user/{i}/settings/private-area/\n"),
        };
        out.push_str(&rule);
        i += 1;
    }
    while out.len() < 500 * 1024 {
        out.push_str("# padding comment to reach the size of a large real-world robots.txt file\n");
    }
    out.into_bytes()
}

fn view<'a>(method: &'a str, path: &'a str, headers: &'a Headers, purposes: &'a [String]) -> RequestView<'a> {
    RequestView {
        method,
        scheme: "https",
        host: "example.com",
        port: 443,
        path_and_query: path,
        product_token: None,
        user_agent: Some("Mozilla/5.0 (compatible; ExampleBot/1.0; +https://example.org/bot)"),
        agent_id: "agent-1",
        trust_level: 2,
        purposes,
        headers,
    }
}

fn bench(c: &mut Criterion) {
    let headers = Headers::default();
    let purposes = vec!["search".to_owned()];
    let typical = policies(TYPICAL_ROBOTS.as_bytes());
    let path = "/catalog/department-7/listing/page-12/item?id=42&ref=home";
    c.bench_function("evaluate/typical_four_files", |b| {
        b.iter(|| evaluate(black_box(&typical), black_box(&view("GET", path, &headers, &purposes))))
    });

    // Each source of the typical set on its own, to see where the time goes.
    let req = view("GET", path, &headers, &purposes);
    c.bench_function("robots/typical", |b| b.iter(|| typical.robots.evaluate(black_box(&req))));
    c.bench_function("agents_txt/typical", |b| b.iter(|| typical.agents_txt.evaluate(black_box(&req))));
    c.bench_function("agents_md/typical", |b| b.iter(|| typical.agents_md.evaluate(black_box(&req), false)));
    c.bench_function("autoctl/typical", |b| b.iter(|| typical.autoctl.evaluate(black_box(&req))));
    let big = robots::from_fetch(&response(&big_robots(), "text/plain"));
    c.bench_function("robots/500KiB_10000_rules", |b| {
        b.iter(|| big.evaluate(black_box(&view("GET", path, &headers, &purposes))))
    });

    let pathological = robots::from_fetch(&response(b"User-agent: *\nDisallow: /*a*a*a*a*a*a*a*a*b\n", "text/plain"));
    // Two sizes, so the report shows the cost growing linearly with the path, not faster.
    for kib in [4, 16] {
        let long_path = format!("/{}", "a".repeat(kib * 1024));
        c.bench_function(&format!("robots/pathological_wildcards_{kib}KiB_path"), |b| {
            b.iter(|| pathological.evaluate(black_box(&view("GET", &long_path, &headers, &purposes))))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
