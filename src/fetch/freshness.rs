//! How long a fetched policy file stays fresh (RFC 9111 §4.2, B22, C5, D16), with
//! `http-cache-semantics` computing the explicit lifetime (max-age, Expires against Date,
//! Age, no-store, no-cache).
//!
//! The rules: an explicit lifetime is used as given; a response without one gets the
//! default (24 h) when its status is cacheable by default (RFC 9111 §4.2.2: 200, 404, 410,
//! ...), in place of the 10%-of-Last-Modified heuristic; anything not storable (`no-store`,
//! 5xx, 401, 403, 429, ...) and `no-cache` get zero. The result is then kept between the
//! floor (60 s, so `no-store` and failures cannot make every request a fetch, C5) and the
//! cap (24 h).

use std::time::{Duration, SystemTime};

use http::{HeaderMap, Request, header};
use http_cache_semantics::{CacheOptions, CachePolicy};

/// The floor and cap of a freshness lifetime.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TtlBounds {
    /// No file is fetched more often than this (C5's 60 s floor).
    pub(crate) min: Duration,
    /// No file is kept longer than this without a fetch; also the default lifetime.
    pub(crate) max: Duration,
}

impl TtlBounds {
    /// The lifetime of a fetch that got no response (timeout, network error).
    pub(crate) fn failed(self) -> Duration {
        self.min
    }

    /// The lifetime of a response to `request`, from its status and headers, measured at
    /// `received`.
    pub(crate) fn lifetime(
        self,
        request: &Request<()>,
        response: &http::response::Parts,
        received: SystemTime,
    ) -> Duration {
        let options = CacheOptions {
            // agentgate reads the file for itself; it never serves the response to anyone,
            // so `private` is fine and `s-maxage` is not ours.
            shared: false,
            // The default lifetime below replaces the Last-Modified heuristic.
            cache_heuristic: 0.0,
            immutable_min_time_to_live: Duration::ZERO,
            ignore_cargo_cult: false,
        };
        let policy = CachePolicy::new_options(request, response, received, options);
        let lifetime = if !policy.is_storable() {
            Duration::ZERO
        } else if has_explicit_lifetime(&response.headers) {
            policy.time_to_live(received)
        } else {
            self.max
        };
        lifetime.clamp(self.min, self.max.max(self.min))
    }
}

/// True when the response says how long it is fresh: `Cache-Control` `max-age` or
/// `no-cache`, `Expires`, or the legacy `Pragma: no-cache` (RFC 9111 §4.2.1, §5.4).
fn has_explicit_lifetime(headers: &HeaderMap) -> bool {
    let directive = |value: &str| {
        value.split(',').any(|d| {
            let name = d.split('=').next().unwrap_or("").trim();
            name.eq_ignore_ascii_case("max-age") || name.eq_ignore_ascii_case("no-cache")
        })
    };
    headers.get_all(header::CACHE_CONTROL).iter().filter_map(|v| v.to_str().ok()).any(directive)
        || headers.contains_key(header::EXPIRES)
        || headers.get_all(header::PRAGMA).iter().filter_map(|v| v.to_str().ok()).any(directive)
}

#[cfg(test)]
mod tests {
    use http::{Response, StatusCode};

    use super::*;

    const BOUNDS: TtlBounds = TtlBounds { min: Duration::from_secs(60), max: Duration::from_secs(24 * 3600) };

    fn lifetime(status: u16, headers: &[(&'static str, &str)]) -> Duration {
        let request = Request::get("https://example.com/robots.txt").body(()).unwrap();
        let mut response = Response::new(());
        *response.status_mut() = StatusCode::from_u16(status).unwrap();
        for (name, value) in headers {
            response.headers_mut().append(*name, value.parse().unwrap());
        }
        let (parts, ()) = response.into_parts();
        BOUNDS.lifetime(&request, &parts, SystemTime::now())
    }

    #[test]
    fn b22_max_age_is_honoured_and_capped() {
        assert_eq!(lifetime(200, &[("cache-control", "public, max-age=3600")]), Duration::from_secs(3600));
        assert_eq!(lifetime(200, &[("cache-control", "max-age=172800")]), BOUNDS.max);
        assert_eq!(lifetime(200, &[("cache-control", "max-age=3600"), ("age", "600")]), Duration::from_secs(3000));
    }

    #[test]
    fn b22_no_directive_defaults_to_24_hours_for_cacheable_statuses() {
        assert_eq!(lifetime(200, &[]), BOUNDS.max);
        assert_eq!(lifetime(404, &[("last-modified", "Mon, 01 Jan 2024 00:00:00 GMT")]), BOUNDS.max);
    }

    #[test]
    fn c5_no_store_no_cache_and_errors_get_the_floor() {
        assert_eq!(lifetime(200, &[("cache-control", "no-store")]), BOUNDS.min);
        assert_eq!(lifetime(200, &[("cache-control", "no-cache")]), BOUNDS.min);
        assert_eq!(lifetime(200, &[("cache-control", "max-age=0")]), BOUNDS.min);
        assert_eq!(lifetime(200, &[("pragma", "no-cache")]), BOUNDS.min);
        assert_eq!(lifetime(503, &[]), BOUNDS.min);
        assert_eq!(lifetime(503, &[("cache-control", "max-age=86400")]), BOUNDS.min);
        assert_eq!(lifetime(403, &[]), BOUNDS.min);
    }

    #[test]
    fn expires_counts_from_date() {
        let headers = [("date", "Mon, 01 Jan 2024 00:00:00 GMT"), ("expires", "Mon, 01 Jan 2024 02:00:00 GMT")];
        assert_eq!(lifetime(200, &headers), Duration::from_secs(7200));
        assert_eq!(lifetime(200, &[("expires", "0")]), BOUNDS.min, "an invalid Expires is already expired");
    }
}
