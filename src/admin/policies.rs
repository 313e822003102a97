//! The admin API's views of the policy cache: `GET /policies` (what is cached for an origin,
//! file by file), `DELETE /policies` (forget it, so the next request fetches every file
//! again) and `GET /explain` (a live decision for a configured agent: its egress lists and
//! the operator's rules that apply to it first, then the origin's policies through the cache,
//! fetched if needed behind the same network guard as the proxy, rendered exactly as
//! `agentgate explain --config --agent` renders it).
//!
//! Never: evaluates or renders policy itself (`crate::explain` and `crate::policy` do),
//! fetches the policies of a host the operator's side decided (a refused host is never
//! fetched), or checks limits (`/explain` never spends an agent's budget; see docs/admin.md).

use http::{Method, Response, StatusCode, Uri};
use serde_json::{Value, json};

use super::answer::{AdminBody, BadParameter, Query, error, json_response};
use super::state::{AdminState, LiveAgents};
use crate::agents::AgentConfig;
use crate::audit::rfc3339_millis;
use crate::explain::{ExplainRequest, explain_operator, explain_under, report_json};
use crate::fetch::Origin;

/// The agent name `/explain` uses when no `agent` is given: the `[agent]` table.
const DEFAULT_AGENT: &str = "default";

/// `GET /policies?origin=…`: each cached file's status, digest, diagnostics, freshness,
/// where the copy came from (`from`: `origin` or `shared_store`) and text (`null` when the
/// origin served none).
pub(super) async fn show(state: &AdminState, query: &Query) -> Result<Response<AdminBody>, BadParameter> {
    let origin = origin_of(query, "origin")?;
    let Some(files) = state.cache.cached(&origin).await else {
        let message =
            format!("{origin} is not in the policy cache; a request through the proxy or GET /explain loads it");
        return Ok(error(StatusCode::NOT_FOUND, None, &message));
    };
    let mut shown = serde_json::Map::new();
    for file in files {
        let mut entry = report_json(&file.report);
        if let Some(fields) = entry.as_object_mut() {
            fields.insert("fetched_at".to_owned(), json!(rfc3339_millis(file.fetched_at).to_string()));
            fields.insert("fresh_until".to_owned(), json!(rfc3339_millis(file.fresh_until).to_string()));
            fields.insert("from".to_owned(), json!(file.from.as_str()));
            // The console numbers its lines and highlights the one that decided a request.
            fields.insert("text".to_owned(), file.text.as_deref().map_or(Value::Null, |text| json!(text)));
        }
        shown.insert(file.source.as_str().to_owned(), entry);
    }
    Ok(json_response(StatusCode::OK, &json!({"origin": origin.to_string(), "files": Value::Object(shown)})))
}

/// `DELETE /policies?origin=…`: forgets the origin's files, here and in the shared store;
/// the next request fetches them.
pub(super) async fn purge(state: &AdminState, query: &Query) -> Result<Response<AdminBody>, BadParameter> {
    let origin = origin_of(query, "origin")?;
    let was_cached = state.cache.cached(&origin).await.is_some();
    state.cache.purge(&origin).await;
    tracing::info!(%origin, was_cached, "policies purged through the admin API");
    Ok(json_response(StatusCode::OK, &json!({"origin": origin.to_string(), "purged": was_cached})))
}

/// `GET /explain?url=…&method=…&agent=…`: the decision for one request, live.
pub(super) async fn explain(state: &AdminState, query: &Query) -> Result<Response<AdminBody>, BadParameter> {
    let origin = origin_of(query, "url")?;
    let method = query.get("method").unwrap_or("GET");
    if Method::from_bytes(method.as_bytes()).is_err() {
        return Err(BadParameter::new("method", format!("method = {method:?}: not an HTTP method")));
    }
    let live = (state.agents)();
    let (name, agent) = agent(&live, query.get("agent"))?;
    let operator =
        (state.operator)(query.get("agent")).map_err(|problem| BadParameter::new("agent", problem.to_string()))?;
    let request = ExplainRequest {
        user_agent: agent.product_token.clone(),
        agent: Some(name.to_owned()),
        trust_level: agent.trust_level,
        purposes: agent.purposes.clone(),
        method: method.to_ascii_uppercase(),
        url: query.get("url").unwrap_or_default().to_owned(),
        ..ExplainRequest::default()
    };
    let bad_url = |problem: crate::explain::ExplainError| BadParameter::new("url", problem.to_string());
    let explanation = match explain_operator(&request, &operator).map_err(bad_url)? {
        Some(decided) => decided,
        None => explain_under(&request, (*state.cache.policies(&origin).await).clone(), operator.settings())
            .map_err(bad_url)?,
    };
    Ok(json_response(StatusCode::OK, &explanation.to_json()))
}

/// The configured agent named `id` (`[[agents]]`), or `[agent]` when none is named.
fn agent<'a>(live: &'a LiveAgents, id: Option<&'a str>) -> Result<(&'a str, &'a AgentConfig), BadParameter> {
    let Some(id) = id else { return Ok((DEFAULT_AGENT, &live.default)) };
    match live.agents.iter().find(|agent| agent.id.as_deref() == Some(id)) {
        Some(agent) => Ok((id, agent)),
        None => {
            let known: Vec<&str> = live.agents.iter().filter_map(|a| a.id.as_deref()).collect();
            let message = format!(
                "agent = {id:?}: no [[agents]] entry has this id (configured: {}); leave agent out for [agent]",
                if known.is_empty() { "none".to_owned() } else { known.join(", ") }
            );
            Err(BadParameter::new("agent", message))
        }
    }
}

/// The origin of the absolute URL in parameter `name`.
fn origin_of(query: &Query, name: &str) -> Result<Origin, BadParameter> {
    let raw = query.required(name, "https://example.com")?;
    let bad = |why: String| BadParameter::new(name, format!("{name} = {raw:?}: {why}"));
    let uri: Uri = raw.parse().map_err(|e| bad(format!("not a URL ({e}); write e.g. https://example.com")))?;
    Origin::from_uri(&uri).map_err(|e| bad(e.to_string()))
}
