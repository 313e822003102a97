//! Credentials the agent never holds (`[[secrets]]`, docs/secrets.md): the agent sends a
//! placeholder, agentgate puts the real value in on the way out, only towards the hosts the
//! secret is bound to, and takes it back out of what comes back.
//!
//! Owns: the secrets in force and the values retired by a reload ([`Secrets`]); the check of
//! a request before anything about its host is looked up ([`Secrets::check`]: a placeholder
//! sent where it does not belong, or a real value sent anywhere but its hosts, is a
//! [`Misuse`]); the plan for a request allowed to use them ([`Plan`]: what to inject, what to
//! scrub from the answer). Applying a plan to the bytes is `inject` (the request) and
//! `scrub` (the response).
//!
//! Never: decides anything else about a request, writes a value anywhere but the request to
//! its own hosts, or names a value in a reason (reasons name the secret and where).

mod config;
mod inject;
mod scrub;

use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use http::header::PROXY_AUTHORIZATION;
use zeroize::Zeroizing;

pub use config::{MIN_PLACEHOLDER_LEN, SecretConfig, SecretValue, overlap_problems};
pub use scrub::{Forms, Scrubbed, Scrubber, Unreadable, scrub_headers, scrub_response};

use crate::policy::OperatorCode;

/// How long a value a reload replaced is still scrubbed from answers and refused towards
/// other hosts: requests in flight may still carry it back, an agent may have seen it.
pub const RETIRED_GRACE: Duration = Duration::from_secs(15 * 60);

/// The secrets in force, and the values of earlier generations still watched.
#[derive(Debug, Default)]
pub struct Secrets {
    live: Vec<SecretConfig>,
    /// The forms of each live secret's value an answer is scrubbed of ([`Forms::of`]), made
    /// once here rather than for every request to its hosts; `None` for a value not loaded.
    live_forms: Vec<Option<Arc<Forms>>>,
    retired: Vec<Retired>,
}

/// A value a reload replaced or removed, watched until `until`. Its `Debug` shows the name
/// and the deadline, never the value or its forms.
#[derive(Clone)]
struct Retired {
    name: String,
    value: Arc<Zeroizing<String>>,
    /// The secret as it was: its hosts, and the placeholder answers get in its place.
    secret: SecretConfig,
    /// The forms of the value an answer is scrubbed of.
    forms: Arc<Forms>,
    until: Instant,
}

impl std::fmt::Debug for Retired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Retired").field("name", &self.name).field("until", &self.until).finish_non_exhaustive()
    }
}

/// The request facts the check reads, as the agent sent them.
#[derive(Debug, Clone, Copy)]
pub struct SecretRequest<'a> {
    /// The agent's id.
    pub agent: &'a str,
    /// Whether the request reaches its origin inside TLS agentgate terminated.
    pub tls: bool,
    /// The routed host (canonical) and port: the absolute URL's or the CONNECT target's,
    /// never an inner `Host` header.
    pub host: &'a str,
    /// The routed port.
    pub port: u16,
    /// The method, as sent.
    pub method: &'a str,
    /// The path and query, as sent.
    pub path_and_query: &'a str,
    /// The request's headers (its `Proxy-Authorization`, which goes nowhere, is skipped).
    pub headers: &'a HeaderMap,
}

/// A request that would send a secret where it does not belong: refused, nothing forwarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Misuse {
    /// The reason code.
    pub code: OperatorCode,
    /// What was refused, naming the secret and where it was found, never the value.
    pub rule: String,
}

/// What to do for one request allowed to go on: the placeholders to replace, and the values
/// to take out of the answer.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The replacements, in the places the secrets name.
    injections: Vec<Injection>,
    /// The forms of the values to replace by their placeholders in the answer (every secret
    /// bound to the host, retired ones included); empty when no secret is bound to it.
    scrub: Vec<Arc<Forms>>,
}

/// One placeholder to replace in one place.
#[derive(Debug, Clone)]
struct Injection {
    name: String,
    placeholder: String,
    value: Arc<Zeroizing<String>>,
    place: Place,
}

/// Where a placeholder is replaced.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Header(http::HeaderName),
    Query(String),
}

impl Plan {
    /// The secrets used and where, as `agentgate.secrets` writes them: `github
    /// (header authorization)`, `maps (query key)`.
    pub fn used(&self) -> Vec<String> {
        self.injections
            .iter()
            .map(|i| match &i.place {
                Place::Header(name) => format!("{} (header {name})", i.name),
                Place::Query(param) => format!("{} (query {param})", i.name),
            })
            .collect()
    }

    /// Whether the request's host has secrets bound to it: the answer is scrubbed, asked for
    /// in the identity encoding, and never a range.
    pub fn scrubs(&self) -> bool {
        !self.scrub.is_empty()
    }

    /// The scrubber for the answer, when [`scrubs`](Self::scrubs): every form of each value,
    /// and `made`, the texts [`apply`] made for this request.
    pub fn scrubber(&self, made: Vec<Made>) -> Option<Scrubber> {
        self.scrubs().then(|| Scrubber::new(self.scrub.clone(), made))
    }
}

impl Secrets {
    /// The secrets of a config (their values loaded with it), keeping from `previous` every
    /// value it held that is not in force any more, for [`RETIRED_GRACE`] from `now`.
    pub fn new(config: &[SecretConfig], previous: Option<&Secrets>, now: Instant) -> Secrets {
        let live = config.to_vec();
        let live_forms =
            live.iter().map(|s| s.value.get().map(|value| Arc::new(Forms::of(value, &s.placeholder)))).collect();
        let in_force = |value: &str| live.iter().any(|s| s.value.get() == Some(value));
        let mut retired: Vec<Retired> = Vec::new();
        if let Some(previous) = previous {
            retired.extend(previous.retired.iter().filter(|r| r.until > now && !in_force(&r.value)).cloned());
            for (old, forms) in previous.live.iter().zip(&previous.live_forms) {
                let (Some(value), Some(forms)) = (old.value.shared(), forms) else { continue };
                if !in_force(&value) && !retired.iter().any(|r| *r.value == *value) {
                    let until = now + RETIRED_GRACE;
                    let forms = Arc::clone(forms);
                    retired.push(Retired { name: old.name.clone(), value, secret: old.clone(), forms, until });
                }
            }
        }
        Secrets { live, live_forms, retired }
    }

    /// Whether there is any secret to watch for.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty() && self.retired.is_empty()
    }

    /// `text` (agent-supplied text as a record or a diagnostic line shows it: a URL, a
    /// method, a header, a tunnel's target, a reason naming a host) with every value in force
    /// or retired replaced by `[secret <name>]`, in any ASCII case (host names are lowered on
    /// the way); `None` when it holds none. So a value an agent typed where it does not
    /// belong is written to neither log nor stderr.
    pub fn redact(&self, text: &str) -> Option<String> {
        let values = self
            .live
            .iter()
            .filter_map(|s| Some((s.name.as_str(), s.value.get()?)))
            .chain(self.retired.iter().map(|r| (r.name.as_str(), r.value.as_str())));
        let mut redacted: Option<String> = None;
        for (name, value) in values {
            let current = redacted.as_deref().unwrap_or(text);
            if let Some(replaced) = replace_ignoring_case(current, value, name) {
                redacted = Some(replaced);
            }
        }
        redacted
    }

    /// The names and values (in force, and retired ones still watched at `now`) of the
    /// secrets not bound to `host:port`: what request inspection looks for in a body.
    pub fn values_elsewhere(&self, host: &str, port: u16, now: Instant) -> Vec<(String, Arc<Zeroizing<String>>)> {
        let live = self
            .live
            .iter()
            .filter(|s| !s.is_bound_to(host, port))
            .filter_map(|s| Some((s.name.clone(), s.value.shared()?)));
        let retired = self
            .retired
            .iter()
            .filter(|r| r.until > now && !r.secret.is_bound_to(host, port))
            .map(|r| (r.name.clone(), Arc::clone(&r.value)));
        live.chain(retired).collect()
    }

    /// Checks a request before its host is looked up, and plans what to replace in it.
    ///
    /// # Errors
    /// A [`Misuse`]: a real value (in force, or retired less than [`RETIRED_GRACE`] ago) in
    /// a request to a host it is not bound to (host name, method, path, query, header names
    /// and values); a
    /// placeholder sent to a host its secret is not bound to, by an agent it is not for, or
    /// over plain HTTP where the secret does not allow it.
    pub fn check(&self, req: &SecretRequest<'_>, now: Instant) -> Result<Plan, Misuse> {
        if self.is_empty() {
            return Ok(Plan::default());
        }
        let places = Places::of(req);
        let retired = self.retired.iter().filter(|r| r.until > now);
        let values = self
            .live
            .iter()
            .filter_map(|s| Some((s.name.as_str(), s.value.get()?, s)))
            .chain(retired.clone().map(|r| (r.name.as_str(), r.value.as_str(), &r.secret)));
        for (name, value, secret) in values {
            if secret.is_bound_to(req.host, req.port) {
                continue;
            }
            if let Some(place) = places.find(value) {
                // The host may be where the value is: the reason names it redacted.
                let host = self.redact(req.host);
                let host = host.as_deref().unwrap_or(req.host);
                return Err(Misuse {
                    code: OperatorCode::SecretValueLeak,
                    rule: format!(
                        "the value of secret {name:?} is in the {place} of a request to {host}:{}, a host it is not bound to",
                        req.port
                    ),
                });
            }
        }
        let mut plan = Plan::default();
        for (secret, forms) in self.live.iter().zip(&self.live_forms) {
            let bound = secret.is_bound_to(req.host, req.port);
            if bound && let Some(forms) = forms {
                plan.scrub.push(Arc::clone(forms));
            }
            let Some(place) = places.find(&secret.placeholder) else { continue };
            let name = &secret.name;
            let refused = |code, why: String| {
                Err(Misuse { code, rule: format!("the placeholder of secret {name:?} is in the {place}: {why}") })
            };
            if !bound {
                return refused(
                    OperatorCode::SecretNotBound,
                    format!("it is bound to {}, not {}:{}", secret.hosts.join(", "), req.host, req.port),
                );
            }
            if !secret.allows(req.agent) {
                return refused(
                    OperatorCode::SecretAgentNotAllowed,
                    format!("it is for {}, not agent {:?}", secret.agents.join(", "), req.agent),
                );
            }
            if !req.tls && !secret.plain_http {
                return refused(
                    OperatorCode::SecretPlainHttp,
                    "it is injected into HTTPS only (plain_http = false); use https://".to_owned(),
                );
            }
            let Some(value) = secret.value.shared() else { continue };
            let injection = |place| Injection {
                name: name.clone(),
                placeholder: secret.placeholder.clone(),
                value: Arc::clone(&value),
                place,
            };
            for header in &secret.headers {
                let Ok(header) = http::HeaderName::try_from(header.as_str()) else { continue };
                if req.headers.get_all(&header).iter().any(|v| inject::header_holds(v.as_bytes(), &secret.placeholder))
                {
                    plan.injections.push(injection(Place::Header(header)));
                }
            }
            for param in &secret.query {
                if inject::query_has(req.path_and_query, param, &secret.placeholder) {
                    plan.injections.push(injection(Place::Query(param.clone())));
                }
            }
        }
        for r in retired.filter(|r| r.secret.is_bound_to(req.host, req.port)) {
            plan.scrub.push(Arc::clone(&r.forms));
        }
        Ok(plan)
    }
}

/// The places of a request a secret may be found in, as text: the host, the method, the path
/// and query (as sent and percent-decoded), each header's name and each value (Basic
/// credentials decoded too).
struct Places<'a> {
    req: &'a SecretRequest<'a>,
    decoded_target: Option<String>,
}

impl<'a> Places<'a> {
    fn of(req: &'a SecretRequest<'a>) -> Places<'a> {
        // Only a `%` escape decodes to anything else: without one there is no copy to make.
        let decoded = req.path_and_query.contains('%').then(|| inject::percent_decode(req.path_and_query));
        Places { req, decoded_target: decoded.filter(|decoded| decoded != req.path_and_query) }
    }

    /// Where `needle` is first found, named for a reason (`host name`, `method`, `path or
    /// query`, `header authorization`, `header names`: never the name that holds it).
    fn find(&self, needle: &str) -> Option<String> {
        if needle.is_empty() {
            return None;
        }
        // Host names are canonical and header names arrive in lowercase: what is looked for
        // in them is compared in any ASCII case, in place (a lowered copy per needle was two
        // allocations a request for each secret).
        if inject::contains_ignoring_case(self.req.host.as_bytes(), needle) {
            return Some("host name".to_owned());
        }
        if inject::contains(self.req.method.as_bytes(), needle) {
            return Some("method".to_owned());
        }
        let target = std::iter::once(self.req.path_and_query).chain(self.decoded_target.as_deref());
        if target.into_iter().any(|t| inject::contains(t.as_bytes(), needle)) {
            return Some("path or query".to_owned());
        }
        for (name, value) in self.req.headers {
            if name == PROXY_AUTHORIZATION {
                continue;
            }
            if inject::contains_ignoring_case(name.as_str().as_bytes(), needle) {
                return Some("header names".to_owned());
            }
            if inject::header_holds(value.as_bytes(), needle) {
                return Some(format!("header {name}"));
            }
        }
        None
    }
}

/// `text` with every occurrence of `needle`, in any ASCII case, replaced by
/// `[secret <name>]`; `None` when there is none. A match begins and ends on character
/// boundaries: its non-ASCII bytes equal the needle's.
fn replace_ignoring_case(text: &str, needle: &str, name: &str) -> Option<String> {
    let (haystack, wanted) = (text.as_bytes(), needle.as_bytes());
    if wanted.is_empty() {
        return None;
    }
    let (mut out, mut kept, mut at) = (String::new(), 0, 0);
    while at + wanted.len() <= haystack.len() {
        if haystack[at..at + wanted.len()].eq_ignore_ascii_case(wanted) {
            out.push_str(&text[kept..at]);
            // The marker written only where a value is found: a `format!` of it per secret
            // and per text cost an allocation each time (bench/RESULTS.md Round 16).
            out.push_str("[secret ");
            out.push_str(name);
            out.push(']');
            at += wanted.len();
            kept = at;
        } else {
            at += 1;
        }
    }
    (kept > 0).then(|| out + &text[kept..])
}

pub use inject::{Made, apply};

#[cfg(test)]
mod tests;
