//! The console: the admin listener's web page at `/` for operators who would rather look
//! than read JSON lines. Server-rendered HTML with a small vanilla script, embedded in the
//! binary (no build step, no CDN, works offline), reading the admin API it sits on: the live
//! `/decisions/stream`, `/decisions/recent`, `/agents/summary`, `/policies` and the
//! approvals. `docs/console.md` is the reference.
//!
//! Owns: the page (with its first paint of the latest decisions, `first_paint`), its two
//! static assets, the login form and `/login`/`/logout` (a session cookie for a browser,
//! where the API takes a bearer token), `/agents/summary`, and `/report` (the scorecard of
//! the running log, `crate::audit::scorecard`). Never: writes a value from
//! the log as markup (the first paint escapes every value; the script writes them as text),
//! keeps or logs a token, or decides anything.

mod first_paint;

use std::net::IpAddr;
use std::time::Instant;

use bytes::Bytes;
use http::header::{CACHE_CONTROL, CONTENT_TYPE, COOKIE, LOCATION, SET_COOKIE};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use serde_json::json;

use super::answer::{AdminBody, error, json_response, read_body, text};
use super::state::AdminState;
use crate::audit;

const PAGE: &str = include_str!("console/index.html");
const LOGIN: &str = include_str!("console/login.html");
const SCRIPT: &str = include_str!("console/console.js");
const STYLE: &str = include_str!("console/console.css");

/// The largest `/login` form read; a token and its field name fit many times over.
const MAX_LOGIN_FORM: usize = 4096;

/// What the page may load: only itself. No inline script or style, no frames around it (the
/// Approve button must not be clickjacked), forms post only back here.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// `GET /`: the console, or (a token configured, no credentials) the login form with `401`.
pub(super) fn page(state: &AdminState, authorized: bool) -> Response<AdminBody> {
    if !authorized {
        return login_form(StatusCode::UNAUTHORIZED, "");
    }
    // The logout button only makes sense when there is a session to end.
    let logout = if !state.access.is_open() {
        r#"<form method="post" action="/logout"><button id="logout" type="submit">Log out</button></form>"#
    } else {
        ""
    };
    let first_paint = first_paint::rows(&state.audit.recent().latest(first_paint::ROWS));
    html(StatusCode::OK, PAGE.replace("<!--logout-->", logout).replace("<!--first-paint-->", &first_paint))
}

/// `GET /console.js` and `GET /console.css`: the page's static assets, the same for everyone
/// (they hold no data, so they need no credentials: the login form uses the style too).
pub(super) fn asset(path: &str) -> Response<AdminBody> {
    let (content_type, body) = match path {
        "/console.js" => ("text/javascript; charset=utf-8", SCRIPT),
        _ => ("text/css; charset=utf-8", STYLE),
    };
    let mut response = text(StatusCode::OK, content_type, body.to_owned());
    response.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// `POST /login` with form field `token`: a configured token opens a session acting as that
/// token's name (an `HttpOnly; SameSite=Strict` cookie) and redirects to `/`; any other shows
/// the form again with `401`, after the wait the throttle gives `client` (`super::throttle`).
pub(super) async fn login<B>(state: &AdminState, request: Request<B>, client: IpAddr) -> Response<AdminBody>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    if state.access.is_open() {
        // Nothing to check: the console is open (loopback only, as the API).
        return redirect_home(None);
    }
    if !is_form(request.headers()) {
        return error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            None,
            "POST /login takes a form (application/x-www-form-urlencoded) with the field token",
        );
    }
    let (head, body) = request.into_parts();
    let form = match read_body(&head.headers, body, MAX_LOGIN_FORM).await {
        Ok(form) => form,
        Err(cause) => {
            return login_form(cause.status(), &format!("The form could not be read (at most 4 KiB): {cause}."));
        }
    };
    let token = url::form_urlencoded::parse(&form).find(|(name, _)| name == "token").map(|(_, value)| value);
    // A form without the field is a failed attempt like a wrong token.
    let Some(name) = state.access.check(token.as_deref().unwrap_or_default(), client, true).await else {
        return login_form(StatusCode::UNAUTHORIZED, "That token is not one of those configured.");
    };
    match state.access.sessions.open(&name, Instant::now()) {
        Ok(cookie) => {
            tracing::info!(token = %name, "console session opened");
            redirect_home(Some(cookie))
        }
        Err(no_randomness) => {
            tracing::error!(error = %no_randomness, "console login failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, None, &no_randomness.to_string())
        }
    }
}

/// `POST /logout`: forgets the session and clears its cookie.
pub(super) fn logout<B>(state: &AdminState, request: &Request<B>) -> Response<AdminBody> {
    let cookies = request.headers().get(COOKIE).and_then(|v| v.to_str().ok());
    redirect_home(Some(state.access.sessions.close(cookies)))
}

/// `GET /report`: the scorecard of the running log, as `agentgate audit report --html` writes
/// it over the log's files (`[audit] path` and its rotated files, oldest first), read off the
/// runtime's threads. `404` when the log goes to standard output (no file to read).
pub(super) async fn report(state: &AdminState) -> Response<AdminBody> {
    let files = state.log.files();
    if files.is_empty() {
        let message = "the decision log has no file to report on ([audit] path = \"-\" or not created yet); \
                       run `agentgate audit report --html` over the collected log";
        return error(StatusCode::NOT_FOUND, None, message);
    }
    let sources: Vec<String> = files.iter().map(|file| file.display().to_string()).collect();
    let built = tokio::task::spawn_blocking(move || {
        audit::scorecard(&files, audit::Filter::default()).map(|card| card.to_html(&sources))
    })
    .await;
    match built {
        Ok(Ok(page)) => {
            let policy = format!("{}; frame-ancestors 'none'", audit::content_security_policy());
            html_under(StatusCode::OK, page, &policy)
        }
        Ok(Err(unreadable)) => {
            tracing::error!(error = %unreadable, "the console's report could not read the decision log");
            error(StatusCode::INTERNAL_SERVER_ERROR, None, &format!("the decision log could not be read: {unreadable}"))
        }
        Err(failed) => {
            tracing::error!(error = %failed, "the console's report failed");
            error(StatusCode::INTERNAL_SERVER_ERROR, None, "the report could not be built; see agentgate's log")
        }
    }
}

/// `GET /agents/summary`: requests per outcome for each agent since start.
pub(super) fn agents_summary(state: &AdminState) -> Response<AdminBody> {
    let agents: Vec<_> = state
        .metrics
        .agents()
        .snapshot()
        .into_iter()
        .map(|(agent, c)| {
            json!({
                "agent": agent,
                "requests": c.requests,
                "allowed": c.allowed,
                "denied": c.denied,
                "needs_approval": c.needs_approval,
                "would_deny": c.would_deny,
                "rate_limited": c.rate_limited,
                "errors": c.errors,
            })
        })
        .collect();
    json_response(StatusCode::OK, &json!({"agents": agents}))
}

fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|media| media.trim().eq_ignore_ascii_case("application/x-www-form-urlencoded"))
}

/// The login form with `message` (fixed text, never input) above it.
fn login_form(status: StatusCode, message: &str) -> Response<AdminBody> {
    html(status, LOGIN.replace("<!--message-->", message))
}

/// `303 See Other` to `/`, setting `cookie` when given.
fn redirect_home(cookie: Option<String>) -> Response<AdminBody> {
    let mut response = text(StatusCode::SEE_OTHER, "text/plain; charset=utf-8", String::new());
    response.headers_mut().insert(LOCATION, HeaderValue::from_static("/"));
    if let Some(cookie) = cookie.and_then(|cookie| HeaderValue::from_str(&cookie).ok()) {
        response.headers_mut().insert(SET_COOKIE, cookie);
    }
    response
}

/// An HTML answer with the headers that keep it from being framed, sniffed or cached.
fn html(status: StatusCode, body: String) -> Response<AdminBody> {
    html_under(status, body, CONTENT_SECURITY_POLICY)
}

/// [`html`] under the content security `policy` (the console's own, or the report's).
fn html_under(status: StatusCode, body: String, policy: &str) -> Response<AdminBody> {
    let mut response = text(status, "text/html; charset=utf-8", body);
    let headers = response.headers_mut();
    // The report's policy is ASCII built from base64; were it not a valid header value, the
    // console's stricter one (no inline style) keeps the page inert.
    let policy = HeaderValue::from_str(policy).unwrap_or(HeaderValue::from_static(CONTENT_SECURITY_POLICY));
    headers.insert("content-security-policy", policy);
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert("x-content-type-options", HeaderValue::from_static("nosniff"));
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null`
    // with the page's own form posts (the login), which the admin API refuses as another
    // site's (`super::hosts`); no request leaves the page for another origin with a Referer.
    headers.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}
