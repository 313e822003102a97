//! robots.txt (RFC 9309): what a fetch of `/robots.txt` means for an origin, and what the
//! file says about one request.
//!
//! Owns: the fetch-outcome semantics (§2.3.1: 2xx parse, 4xx "unavailable" allows all, 5xx
//! and network failures "unreachable" disallow all), the parser (§2.1–2.2, with the
//! Google-compatible tolerances listed in `docs/robots.md`), group selection by product
//! token (§2.2.1, SEMANTICS X2, matching groups merged, else the `*` groups), longest match
//! with `allow` winning a tie (§2.2.2), the 500 KiB parse cap (§2.5), `lint`, and the
//! stale rule (a parsed copy outlives an unreachable origin, §2.3.1.4: `Robots::refresh`).
//!
//! Never: fetches, caches (the cache carries out the stale rule), looks at the clock, or
//! logs. A disallow denies every method (SEMANTICS X1, D18); it never looks at the method.

mod group;
mod index;
mod parse;
#[cfg(test)]
mod tests;

use crate::policy::{FetchError, Weigh};
use std::sync::Arc;
use std::time::Duration;

use self::group::{AgentLine, Group, Rule};
use super::path::{Reading, decide_both_readings};
use super::pattern::{Pattern, normalized_path};
use super::text::{Findings, sha256_hex};
use super::usage;
use super::weight::allocation;
use super::{
    Advice, Diagnostic, FetchOutcome, HeaderLookup, Limit, LimitKind, LimitScope, Opinion, PolicyReport, PolicyStatus,
    Previous, Reason, Reasons, Refreshed, RequestView, RobotsCode, Source, SourceVerdict, StaleRules, joined,
};

/// The robots.txt size cap: the first 500 KiB are parsed, the rest ignored with an
/// `over-cap` warning (RFC 9309 §2.5, SEMANTICS X6).
pub const MAX_BYTES: usize = 500 * 1024;

/// The longest `Crawl-delay` honoured, in milliseconds (60 s): a longer one counts as this,
/// with the lint finding `crawl-delay-capped`. One request a minute is already far slower
/// than any agent task waits for; a day-long delay would only make the site unusable
/// through agentgate while the agent could not tell why.
pub const MAX_CRAWL_DELAY_MS: u32 = 60_000;

/// A line the matcher does not use (`Sitemap`, `Crawl-delay`, `Content-Usage`,
/// `Content-Signal`, anything unknown), kept for explain and the log. Such lines never end
/// a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtherLine {
    /// 1-based line.
    pub line: u32,
    /// The key as written (`Sitemap`).
    pub key: String,
    /// The value, trimmed, without its comment.
    pub value: String,
}

/// Which usage-preference line a [`UsageLine`] is (SEMANTICS U3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageKey {
    /// `Content-Usage: [path] prefs` (draft-ietf-aipref-attach §4).
    ContentUsage,
    /// `Content-Signal: prefs` (contentsignals.org), for the whole group.
    ContentSignal,
}

/// A `Content-Usage` or `Content-Signal` line inside a group, as written: the usage
/// module reads its value (`policy::usage`); the matcher never does, so these lines never
/// change an Allow/Disallow outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageLine {
    /// Index of the group in the file's group list.
    group: usize,
    /// 1-based line.
    pub line: u32,
    /// Which of the two lines.
    pub key: UsageKey,
    /// The value, trimmed, without its comment.
    pub value: Arc<str>,
    /// A `Content-Usage` line's path (`/` when it has none) as written, shared by the
    /// preferences it states; `None` for `Content-Signal`, which applies to the whole group.
    pub(crate) path: Option<Arc<str>>,
    /// The same path as a pattern, compiled when the file is read.
    pub(crate) pattern: Option<Pattern>,
    /// What the line states, parsed when the file is read (empty when malformed: a warning
    /// says so).
    pub(crate) stated: Vec<usage::vocab::Stated>,
}

/// What robots.txt means for one origin: a parsed file, "unavailable" (allow all) or
/// "unreachable" (disallow all). Cheap to clone.
#[derive(Debug, Clone)]
pub struct RobotsState {
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    /// A 2xx response, parsed.
    Parsed(Arc<RobotsFile>),
    /// A 4xx response (RFC 9309 §2.3.1.3): every path may be accessed.
    Unavailable { status: u16 },
    /// A 5xx, another unusable status, or a failed fetch (RFC 9309 §2.3.1.4): complete
    /// disallow. `why` names the status or error; `origin` is set when the origin itself
    /// could not be connected to ([`FetchError::Unreachable`]), or when agentgate had no
    /// connection to spare ([`FetchError::AtCapacity`]).
    Unreachable { why: String, origin: Option<FetchError> },
}

/// A `Crawl-delay` line (not in RFC 9309; a widespread extension): the group it sits in
/// and the delay, fractional seconds allowed, capped at [`MAX_CRAWL_DELAY_MS`].
#[derive(Debug, Clone)]
struct CrawlDelay {
    /// Index of the group in the file's group list.
    group: usize,
    millis: u32,
    /// 1-based line.
    line: u32,
    /// The line as written, without its comment.
    text: Arc<str>,
}

#[derive(Debug)]
struct RobotsFile {
    /// The text of every rule line, and each pattern that normalising changed: rules are
    /// spans of it (one buffer per file, not an allocation per rule).
    text: Box<str>,
    groups: Vec<Group>,
    other_lines: Vec<OtherLine>,
    crawl_delays: Vec<CrawlDelay>,
    usage_lines: Vec<UsageLine>,
    /// True when some pattern reads differently decoded: the file is then decided in both
    /// readings (SEMANTICS R9).
    has_decoded: bool,
    /// Hex SHA-256 of the bytes served.
    digest: Arc<str>,
    diagnostics: Vec<Diagnostic>,
}

/// The state a fetch outcome leads to (RFC 9309 §2.3.1). 2xx: parsed (first
/// [`MAX_BYTES`] only; an HTML content type is parsed too, with a warning). 4xx, including
/// 401 and 403: unavailable, allow all. 5xx, any other status (the fetcher follows
/// redirects itself), timeout, network error, too many redirects: unreachable, disallow
/// all.
pub fn from_fetch(outcome: &FetchOutcome) -> RobotsState {
    let kind = match outcome {
        FetchOutcome::Response { status: 200..=299, headers, body, over_cap } => {
            let mut file = RobotsFile::parse(body, *over_cap, Findings::default());
            if headers.is_html() {
                file.diagnostics.insert(
                    0,
                    Diagnostic::warning(
                        None,
                        "html-content-type",
                        "robots.txt is served as HTML; it is parsed as robots.txt anyway, so lines that are not \
                         directives are ignored: serve it as text/plain",
                    ),
                );
            }
            Kind::Parsed(Arc::new(file))
        }
        FetchOutcome::Response { status: status @ 400..=499, .. } => Kind::Unavailable { status: *status },
        FetchOutcome::Response { status, .. } => Kind::Unreachable { why: format!("answered {status}"), origin: None },
        FetchOutcome::Failed(error) => Kind::Unreachable {
            why: format!("could not be fetched ({error})"),
            origin: matches!(
                error,
                FetchError::Unreachable { .. } | FetchError::AtCapacity { .. } | FetchError::Parent { .. }
            )
            .then(|| error.clone()),
        },
    };
    RobotsState { kind }
}

/// Every finding about a robots.txt body, in line order: unknown directives (with the
/// likely intended name), lines without `:`, misspelt keys, rules before any user-agent,
/// patterns not starting with `/` or `*`, invalid UTF-8, NUL bytes, over-long lines and a
/// body over [`MAX_BYTES`]. All are warnings: robots.txt has no fatal syntax errors
/// (RFC 9309 §2.3.1.5).
pub fn lint(body: &[u8]) -> Vec<Diagnostic> {
    RobotsFile::parse(body, false, Findings::all()).diagnostics
}

impl RobotsState {
    /// The state for a body served with a 2xx status, as [`from_fetch`] builds it; the cap
    /// applies when `body` is longer than [`MAX_BYTES`].
    pub fn parse(body: &[u8]) -> Self {
        RobotsState { kind: Kind::Parsed(Arc::new(RobotsFile::parse(body, false, Findings::default()))) }
    }

    /// True when the fetch failed or the origin answered 5xx: the state disallows every
    /// path. A cache holding a good copy should keep serving that copy instead
    /// (RFC 9309 §2.3.1.4, DESIGN §5).
    pub fn is_unreachable(&self) -> bool {
        matches!(self.kind, Kind::Unreachable { .. })
    }

    /// The connection failure, when robots.txt failed because the origin itself could not be
    /// reached (refused, no route, connect timeout), not because it answered badly: then the
    /// origin is down, not forbidding. robots.txt is fetched from the origin's own
    /// scheme, host and port, like the request. Also [`FetchError::AtCapacity`]: nothing was
    /// fetched, and the origin was never asked.
    pub fn origin_unreachable(&self) -> Option<&FetchError> {
        match &self.kind {
            Kind::Unreachable { origin, .. } => origin.as_ref(),
            Kind::Parsed(_) | Kind::Unavailable { .. } => None,
        }
    }

    /// Lines of the file the matcher does not use (`Sitemap`, `Crawl-delay`, ...), in
    /// order; empty when there is no parsed file.
    pub fn other_lines(&self) -> &[OtherLine] {
        match &self.kind {
            Kind::Parsed(file) => &file.other_lines,
            Kind::Unavailable { .. } | Kind::Unreachable { .. } => &[],
        }
    }

    /// The `Crawl-delay` of the groups that apply to the request's agent, chosen as for
    /// [`RobotsState::evaluate`] (RFC 9309 §2.2.1: the groups naming it, else the `*`
    /// groups), as a limit of one request per delay per (agent, origin) (code
    /// `robots.crawl_delay`); the longest when several of those groups set one. `None`
    /// without a parsed file, without such a line, or for a delay of 0.
    pub fn crawl_delay(&self, req: &RequestView<'_>) -> Option<Limit> {
        let Kind::Parsed(file) = &self.kind else { return None };
        if file.crawl_delays.is_empty() {
            return None;
        }
        let applies = file.selected_groups(req);
        let delay = file.crawl_delays.iter().filter(|d| applies(d.group)).max_by_key(|d| d.millis)?;
        (delay.millis > 0).then(|| Limit {
            source: Source::Robots,
            kind: LimitKind::Delay { millis: delay.millis },
            scope: LimitScope::Origin,
            reason: file.reason(RobotsCode::CrawlDelay, delay.line, Arc::clone(&delay.text)),
        })
    }

    /// The `Content-Usage` and `Content-Signal` lines of the groups that apply to the
    /// request's agent, chosen as for [`RobotsState::evaluate`] (SEMANTICS U3), in file
    /// order; none without a parsed file. Filtered as they are read, not collected: this runs
    /// on every request to a file that has such lines.
    pub fn usage_lines<'s>(&'s self, req: &'s RequestView<'_>) -> impl Iterator<Item = &'s UsageLine> + Clone {
        let file = match &self.kind {
            Kind::Parsed(file) if !file.usage_lines.is_empty() => Some(&**file),
            Kind::Parsed(_) | Kind::Unavailable { .. } | Kind::Unreachable { .. } => None,
        };
        let applies = file.map(|file| file.selected_groups(req));
        let lines = file.map_or(&[][..], |file| &file.usage_lines[..]);
        lines.iter().filter(move |u| applies.as_ref().is_some_and(|applies| applies(u.group)))
    }

    /// What robots.txt says about one request. The groups naming the agent (configured
    /// product token, else a product name in its User-Agent header) are merged; with none,
    /// the `*` groups; with neither, no rules apply. The longest matching pattern wins,
    /// `allow` on a tie. A matched `allow` gives [`Opinion::Allow`] (`robots.allow`), a
    /// matched `disallow` [`Opinion::Deny`] (`robots.disallow`) for every method, and the
    /// second reason (`robots.group`) cites the user-agent line that selected the group. No
    /// matching rule: [`Opinion::NoOpinion`] without reasons. Unavailable: no opinion with
    /// a `robots.unavailable` reason; unreachable: deny with `robots.unreachable`.
    pub fn evaluate(&self, req: &RequestView<'_>) -> SourceVerdict {
        match &self.kind {
            Kind::Parsed(file) => file.evaluate(req),
            Kind::Unavailable { status } => SourceVerdict::with(
                Opinion::NoOpinion,
                Reason::new(
                    RobotsCode::Unavailable,
                    format!("robots.txt answered {status}: unavailable, so no path is restricted (RFC 9309 §2.3.1.3)"),
                ),
            ),
            Kind::Unreachable { why, .. } => SourceVerdict::with(
                Opinion::Deny,
                Reason::new(
                    RobotsCode::Unreachable,
                    format!("robots.txt {why}: unreachable, so every path is disallowed (RFC 9309 §2.3.1.4)"),
                ),
            ),
        }
    }

    /// Status, digest and findings for explain. A parsed file is `valid` (robots.txt has no
    /// fatal errors). Unavailable is `absent`; unreachable is `absent` too (there is no
    /// file) with an `unreachable` error saying that every path is disallowed.
    pub fn report(&self) -> PolicyReport {
        match &self.kind {
            Kind::Parsed(file) => PolicyReport {
                status: PolicyStatus::Valid,
                digest: Some(file.digest.clone()),
                diagnostics: file.diagnostics.clone(),
            },
            Kind::Unavailable { .. } => PolicyReport::absent(),
            Kind::Unreachable { why, .. } => PolicyReport {
                diagnostics: vec![Diagnostic::error(
                    None,
                    "unreachable",
                    format!(
                        "robots.txt {why}: every path is disallowed until a good fetch (RFC 9309 §2.3.1.4): fix the \
                         server or the network path to it"
                    ),
                )],
                ..PolicyReport::absent()
            },
        }
    }
}

impl RobotsFile {
    fn parse(body: &[u8], over_cap: bool, findings: Findings) -> Self {
        let parsed = parse::parse(body, over_cap, findings);
        RobotsFile {
            text: parsed.text.into_boxed_str(),
            groups: parsed.groups,
            other_lines: parsed.other_lines,
            crawl_delays: parsed.crawl_delays,
            usage_lines: parsed.usage_lines,
            has_decoded: parsed.has_decoded,
            digest: Arc::from(sha256_hex(body)),
            diagnostics: parsed.findings.finish(),
        }
    }

    /// Whether the group at an index applies to the request's agent (RFC 9309 §2.2.1): the
    /// groups naming it, else the `*` groups. Whether any group names it is found once; each
    /// group is then asked when it is looked up, so nothing is listed per request.
    fn selected_groups<'s>(&'s self, req: &'s RequestView<'_>) -> impl Fn(usize) -> bool + Clone + 's {
        let named = self.groups.iter().any(|g| g.naming_line(req).is_some());
        move |index| {
            let group = &self.groups[index];
            if named { group.naming_line(req).is_some() } else { group.any_agent_line().is_some() }
        }
    }

    /// The file's verdict: as written and, when a pattern reads differently decoded, with
    /// the patterns decoded too, the stricter (SEMANTICS R9).
    fn evaluate(&self, req: &RequestView<'_>) -> SourceVerdict {
        let path = normalized_path(req.path_and_query);
        decide_both_readings(self.has_decoded, |reading| self.evaluate_in(req, &reading.path(&path), reading))
    }

    fn evaluate_in(&self, req: &RequestView<'_>, path: &str, reading: Reading) -> SourceVerdict {
        let mut best: Option<(&Group, &Rule)> = None;
        let mut named = false;
        for group in self.groups.iter().filter(|g| g.naming_line(req).is_some()) {
            named = true;
            group.best_match(&self.text, path, reading, &mut best);
        }
        if !named {
            for group in self.groups.iter().filter(|g| g.any_agent_line().is_some()) {
                group.best_match(&self.text, path, reading, &mut best);
            }
        }
        let Some((group, rule)) = best else {
            return SourceVerdict::no_opinion();
        };
        let (opinion, code) =
            if rule.allow { (Opinion::Allow, RobotsCode::Allow) } else { (Opinion::Deny, RobotsCode::Disallow) };
        // The rule's text is copied out of the file's buffer, once per decision: that is
        // the price of holding no allocation per rule.
        let mut reasons = Reasons::new();
        reasons.push(self.reason(code, rule.line, Arc::from(rule.text.of(&self.text))));
        let selected_by = if named { group.naming_line(req) } else { group.any_agent_line() };
        if let Some(AgentLine { line, text, .. }) = selected_by {
            reasons.push(self.reason(RobotsCode::Group, *line, Arc::clone(text)));
        }
        SourceVerdict { opinion, reasons, ..SourceVerdict::no_opinion() }
    }

    fn reason(&self, code: RobotsCode, line: u32, text: Arc<str>) -> Reason {
        Reason::new(code, text).at_line(line).with_digest(Some(self.digest.clone()))
    }
}

/// A range of a parsed file's text buffer: rules point into it rather than own their text.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Span {
    start: u32,
    len: u32,
}

impl Span {
    /// Appends `part` to `buffer` and returns where it is.
    fn push(buffer: &mut String, part: &str) -> Span {
        let start = to_u32(buffer.len());
        buffer.push_str(part);
        Span { start, len: to_u32(part.len()) }
    }

    /// The text this span covers in the buffer it was made for.
    fn of(self, buffer: &str) -> &str {
        &buffer[self.start as usize..(self.start + self.len) as usize]
    }

    /// The first `len` bytes of this span.
    fn prefix(self, len: usize) -> Span {
        self.sub(0, len)
    }

    /// The last `len` bytes of this span.
    fn suffix(self, len: usize) -> Span {
        self.sub(self.len as usize - len, len)
    }

    /// `len` bytes of this span from `offset` on.
    fn sub(self, offset: usize, len: usize) -> Span {
        debug_assert!(offset + len <= self.len as usize, "a sub-span stays within its span");
        Span { start: self.start + to_u32(offset), len: to_u32(len) }
    }
}

/// Offsets and counts are bounded by the robots.txt size cap (500 KiB, patterns at most
/// tripled by %-encoding), far below `u32::MAX`.
fn to_u32(n: usize) -> u32 {
    u32::try_from(n).expect("robots.txt offsets and counts are bounded by the 500 KiB parse cap")
}

impl Weigh for RobotsState {
    fn heap_bytes(&self) -> usize {
        match &self.kind {
            Kind::Parsed(file) => file.heap_bytes(),
            Kind::Unavailable { .. } => 0,
            Kind::Unreachable { why, origin } => {
                let cause = match origin {
                    Some(
                        FetchError::Unreachable { cause, .. }
                        | FetchError::AtCapacity { cause }
                        | FetchError::Parent { cause, .. },
                    ) => cause.heap_bytes(),
                    _ => 0,
                };
                why.heap_bytes() + cause
            }
        }
    }
}

impl Weigh for RobotsFile {
    fn heap_bytes(&self) -> usize {
        allocation(self.text.len())
            + self.groups.heap_bytes()
            + self.other_lines.heap_bytes()
            + self.crawl_delays.heap_bytes()
            + self.usage_lines.heap_bytes()
            + self.digest.heap_bytes()
            + self.diagnostics.heap_bytes()
    }
}

impl Weigh for CrawlDelay {
    fn heap_bytes(&self) -> usize {
        self.text.heap_bytes()
    }
}

impl Weigh for UsageLine {
    fn heap_bytes(&self) -> usize {
        let words =
            |stated: &usage::vocab::Stated| [&stated.label, &stated.value].map(|w| w.len()).iter().sum::<usize>();
        self.value.heap_bytes()
            + self.path.as_ref().map_or(0, Weigh::heap_bytes)
            + self.pattern.as_ref().map_or(0, Weigh::heap_bytes)
            + allocation(self.stated.capacity() * std::mem::size_of::<usage::vocab::Stated>())
            + self.stated.iter().map(words).sum::<usize>()
    }
}

impl Weigh for OtherLine {
    fn heap_bytes(&self) -> usize {
        self.key.heap_bytes() + self.value.heap_bytes()
    }
}

/// robots.txt as a [`super::Format`] (RFC 9309).
#[derive(Debug, Clone, Copy)]
pub struct Robots;

impl super::Format for Robots {
    type State = RobotsState;
    const SOURCE: Source = Source::Robots;
    const NAME: &'static str = "robots";
    const PATH: &'static str = "/robots.txt";
    const MAX_BYTES: usize = MAX_BYTES;

    fn from_fetch(outcome: &FetchOutcome) -> RobotsState {
        from_fetch(outcome)
    }

    /// When the origin is unreachable (5xx, timeout, network error) and a parsed copy is
    /// cached, that copy stays in use instead of "disallow all" (RFC 9309 §2.3.1.4, DESIGN
    /// §5), for as long as the origin stays unreachable; it is retried after `ttl`. A cached
    /// "unavailable" (4xx) is not a copy of a file, so it is not kept. Any other fetch
    /// replaces the cached state.
    fn refresh(
        previous: Option<Previous<RobotsState>>,
        fetched: RobotsState,
        ttl: Duration,
        _rules: &StaleRules,
    ) -> Refreshed<RobotsState> {
        match previous {
            Some(previous) if fetched.is_unreachable() && previous.state.report().status == PolicyStatus::Valid => {
                Refreshed::kept(previous, ttl)
            }
            _ => Refreshed::fetched(fetched, ttl),
        }
    }

    /// With `[robots] honor_crawl_delay`, the `Crawl-delay` becomes a limit.
    #[inline]
    fn evaluate(state: &RobotsState, req: &RequestView<'_>, settings: super::Settings) -> SourceVerdict {
        let mut verdict = state.evaluate(req);
        // Preferences attach only to paths the group allows (SEMANTICS U3).
        if verdict.opinion != Opinion::Deny {
            let lines = state.usage_lines(req);
            if lines.clone().next().is_some() {
                let applied = usage::robots_rules::preferences(lines, req.path_and_query);
                let decided = usage::decide(req.purposes, settings.usage_undeclared, applied);
                if decided.is_refused() {
                    verdict.opinion = Opinion::Deny;
                    verdict.reasons.insert_many(0, usage::refusal_reasons(&decided));
                }
                verdict.usage = decided.applied;
            }
        }
        if settings.honor_crawl_delay
            && let Some(delay) = state.crawl_delay(req)
        {
            verdict.limits = joined(std::mem::take(&mut verdict.limits), &[delay]);
        }
        verdict
    }

    fn report(state: &RobotsState) -> PolicyReport {
        state.report()
    }

    fn lint(body: &[u8]) -> Vec<Diagnostic> {
        lint(body)
    }
}

/// What an agent blocked by a robots.txt reason may do instead.
impl Advice for RobotsCode {
    fn advice(self) -> &'static str {
        match self {
            RobotsCode::Unreachable => {
                "The site's robots.txt could not be fetched (server error or network failure); under RFC 9309 the \
                 whole site is off limits until it can be fetched. Try again later; do not work around the block."
            }
            RobotsCode::CrawlDelay => {
                "The site's robots.txt asks for a pause between requests (the cited Crawl-delay). Wait for the \
                 Retry-After seconds, then send one request per delay to this site."
            }
            // `allow` and `unavailable` never block: the file's general advice.
            RobotsCode::Disallow | RobotsCode::Group | RobotsCode::Allow | RobotsCode::Unavailable => {
                "The site's robots.txt disallows this path for your user agent. Do not retry it. Paths the file does \
                 not disallow remain available; read /robots.txt on this site to see which."
            }
        }
    }
}
