//! What parsed policies cost in memory, measured: a counting global allocator
//! gives the bytes a parsed file really holds, and the test checks that the weight each
//! format reports (the policy cache bounds the sum, `[cache] max_bytes`) is never below
//! it. Run with `--nocapture --test-threads=1` to see the figures: file size, live heap
//! bytes, reported weight and their ratio to the file, and the growth of the process's RSS
//! (one thread, so the RSS growth is this parse alone).
//!
//! Its own test binary, because the allocator is global.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use agentgate::policy::{FetchOutcome, Headers, Weigh, agents_md, agents_txt, autoctl, robots};

struct Counting;

thread_local! {
    /// Bytes allocated minus bytes freed by this thread: tests run in parallel, and parsing
    /// happens on the measuring thread. Const-initialised, so reading it never allocates.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn count(delta: isize) {
    // `try_with`: the allocator also runs while a thread's locals are being torn down.
    let _ = LIVE.try_with(|live| live.set(live.get() + delta));
}

fn live() -> isize {
    LIVE.with(Cell::get)
}

// SAFETY: forwards to the system allocator and only counts; `forbid(unsafe_code)` is a lib
// attribute, and a global allocator cannot be written without `unsafe impl`.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size() as isize);
        // SAFETY: same layout, passed through.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-(layout.size() as isize));
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size as isize - layout.size() as isize);
        // SAFETY: as for `alloc` and `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn served(body: &[u8], content_type: &str) -> FetchOutcome {
    FetchOutcome::Response {
        status: 200,
        headers: Headers::new(vec![("Content-Type".to_owned(), content_type.to_owned())]),
        body: body.to_vec(),
        over_cap: false,
    }
}

/// Resident set size in bytes, from `/proc/self/statm` (0 where there is none).
fn rss() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    statm.split_whitespace().nth(1).and_then(|pages| pages.parse::<usize>().ok()).unwrap_or(0) * 4096
}

/// Parses `body` with `parse`, keeps the state, and returns (live heap bytes it holds,
/// reported weight, RSS growth).
fn measure<S: Weigh>(body: &[u8], parse: impl Fn(&FetchOutcome) -> S) -> (usize, usize, usize) {
    let outcome = served(body, "text/plain");
    let (rss_before, live_before) = (rss(), live());
    let state = parse(&outcome);
    let live = (live() - live_before).max(0) as usize + std::mem::size_of::<S>();
    let grown = rss().saturating_sub(rss_before);
    let weight = state.heap_bytes() + std::mem::size_of::<S>();
    drop(state);
    (live, weight, grown)
}

/// Prints the figures and checks the weight is honest; returns (live, weight).
fn report(name: &str, size: usize, (live, weight, grown): (usize, usize, usize)) -> (usize, usize) {
    let ratio = |n: usize| n as f64 / size as f64;
    println!(
        "{name}: file {size} B, live heap {live} B ({:.1}x), weight {weight} B ({:.1}x), RSS +{grown} B ({:.1}x)",
        ratio(live),
        ratio(weight),
        ratio(grown),
    );
    assert!(weight >= live, "{name}: the weight ({weight}) must not be below what the state holds ({live})");
    (live, weight)
}

/// 500 KiB, 20,000 rules of about 25 bytes: the robots.txt.
fn big_robots() -> Vec<u8> {
    let mut out = String::from("User-agent: *\n");
    for i in 0..20_000 {
        out.push_str(&format!("Disallow: /d{:02}/p-{i:05}\n", i % 97));
    }
    out.into_bytes()
}

#[test]
fn weight_of_a_500_kib_robots_txt_with_20000_rules() {
    let body = big_robots();
    assert!(body.len() <= robots::MAX_BYTES, "{}", body.len());
    let (live, weight) = report("robots.txt", body.len(), measure(&body, robots::from_fetch));
    // A compact parsed form, at most 3x the file, both as held and as accounted.
    assert!(live <= 3 * body.len(), "robots.txt holds {live} B for a {} B file: over 3x", body.len());
    assert!(weight <= 3 * body.len(), "robots.txt weighs {weight} B for a {} B file: over 3x", body.len());
}

#[test]
fn weight_of_large_agents_txt_agents_md_and_autoctl() {
    let rules: String = (0..15_000).map(|i| format!("/d{:02}/page-{i:05} DISALLOW\n", i % 97)).collect();
    let agents = agents_txt::fix_hash(rules.as_bytes());
    let agents = &agents[..agents.len().min(agents_txt::MAX_BYTES)];
    report("agents.txt", agents.len(), measure(agents, agents_txt::from_fetch));

    let mut md = String::from("# AGENTS.md\n\n## Identity\n- site: example.com\n\n## Restrictions\n");
    while md.len() < 1000 * 1024 {
        md.push_str(&format!("- disallowed-paths: /d{:02}/page-{:05}/*\n", md.len() % 97, md.len() % 100_000));
    }
    let md = md.into_bytes();
    let served_md = |o: &FetchOutcome| agents_md::discover(agents_md::from_fetch(o), None);
    report("AGENTS.md", md.len(), measure(&md, served_md));

    let mut autoctl_text = String::new();
    while autoctl_text.len() < 490 * 1024 {
        let n = autoctl_text.len();
        autoctl_text.push_str(&format!("scope: /d{:02}/p-{n}\nallowed-methods: GET\n\n", n % 97));
    }
    report("automation-preferences.txt", autoctl_text.len(), measure(autoctl_text.as_bytes(), autoctl::from_fetch));
}
