//! What every fuzz target does with its bytes, so the four targets stay one line each: the
//! bytes go to the parser's `lint`, and, served as a 200 response, through `from_fetch`,
//! `evaluate` on a few fixed requests, and `report`. The only assertion is that nothing
//! panics (libFuzzer also reports leaks, timeouts and memory over `-rss_limit_mb`).

use agentgate::policy::{FetchOutcome, Headers, RequestView};

/// The fuzzed bytes as a 200 response with this `Content-Type`.
pub fn served(body: &[u8], content_type: &str) -> FetchOutcome {
    FetchOutcome::Response {
        status: 200,
        headers: Headers::new(vec![("Content-Type".to_owned(), content_type.to_owned())]),
        body: body.to_vec(),
        over_cap: false,
    }
}

/// Calls `each` with fixed requests that reach the interesting paths of every parser: a
/// read by an agent with a product token and a purpose, a form write to an escaped path
/// with a query, and a DELETE from an agent known only by its `User-Agent` header.
pub fn for_each_request(mut each: impl FnMut(&RequestView<'_>)) {
    let headers = Headers::new(vec![("Content-Type".to_owned(), "application/x-www-form-urlencoded".to_owned())]);
    let purposes = vec!["search".to_owned()];
    let read = RequestView {
        method: "GET",
        scheme: "https",
        host: "www.example.com",
        port: 443,
        path_and_query: "/",
        product_token: Some("ExampleBot"),
        user_agent: None,
        agent_id: "fuzz",
        trust_level: 2,
        purposes: &purposes,
        headers: &headers,
    };
    each(&read);
    each(&RequestView { method: "POST", path_and_query: "/admin/%e3%83%84/a.php?q=1&x=%2F", ..read });
    each(&RequestView {
        method: "DELETE",
        path_and_query: "/private/x",
        product_token: None,
        user_agent: Some("Mozilla/5.0 (compatible; ExampleBot/0.1; +https://example.com/bot)"),
        purposes: &[],
        ..read
    });
}

/// Defines the fuzz target for one module of `agentgate::policy` (`robots`, `agents_txt`,
/// `agents_md`, `autoctl`), its bytes served with the given `Content-Type`.
macro_rules! fuzz_policy_parser {
    ($module:ident, $content_type:literal) => {
        libfuzzer_sys::fuzz_target!(|body: &[u8]| {
            let _ = agentgate::policy::$module::lint(body);
            let state = agentgate::policy::$module::from_fetch(&$crate::policy_input::served(body, $content_type));
            $crate::policy_input::for_each_request(|req| {
                let _ = state.evaluate(req);
            });
            let _ = state.report();
        });
    };
}
pub(crate) use fuzz_policy_parser;
