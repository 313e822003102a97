//! MCP through the gate (`[[mcp]]`, docs/mcp.md), the pure half: given the `POST` body an
//! agent sends an MCP server over Streamable HTTP (one JSON-RPC message, or a batch), it
//! reads each message's method, id and tool ([`Messages::parse`]), rules each `tools/call` by
//! the table scoping the agent ([`Messages::refusals`]), writes the JSON-RPC error a refused
//! call is answered with ([`Messages::refusal_answer`]), and removes the refused tools from a
//! `tools/list` result, in a JSON answer ([`filter_json`]) or each event of an event stream
//! ([`EventFilter`]).
//!
//! Owns `[[mcp]]` (`config.rs`). Never: reads a socket or buffers a body (the proxy does,
//! `proxy::mcp`), decides a block (the gate's permit does, `Permitted::check_mcp`), or logs
//! a call's arguments unless its table says so.

mod config;
mod sse;

use serde_json::{Map, Value, json};

pub use config::{McpConfig, McpTable, Served, Unlisted};
pub use sse::{EventFilter, EventTooLong};

/// The JSON-RPC error code of a call agentgate refused (in the server-defined range).
pub const TOOL_REFUSED: i64 = -32001;
/// The JSON-RPC error code of a call not sent because another in its batch was refused.
pub const NOT_SENT: i64 = -32002;

/// One JSON-RPC message of a request body.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The method; `None` for a response the client sends the server (to its own request).
    pub method: Option<String>,
    /// The id; `None` for a notification.
    pub id: Option<Value>,
    /// The tool a `tools/call` names.
    pub tool: Option<String>,
    /// The arguments a `tools/call` passes.
    pub arguments: Option<Value>,
}

/// The JSON-RPC messages of one request body.
#[derive(Debug, Clone, PartialEq)]
pub struct Messages {
    /// Each message, in order.
    pub messages: Vec<Message>,
    /// True when the body was a batch (an array).
    pub batch: bool,
}

/// Why a body to an MCP host is not JSON-RPC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotJsonRpc {
    /// Not JSON at all (or not UTF-8).
    #[error("the body is not JSON ({0})")]
    NotJson(String),
    /// JSON, but not a JSON-RPC 2.0 message or a batch of them.
    #[error("the body is JSON but not a JSON-RPC 2.0 message or batch")]
    NotAMessage,
    /// A `tools/call` without a string `params.name`.
    #[error("a tools/call without a tool name (params.name)")]
    NoToolName,
}

/// A refused message: its place in the body and why, in plain words naming the rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The message's index in [`Messages::messages`].
    pub index: usize,
    /// The tool it called.
    pub tool: String,
    /// The rule that refused it ([`McpTable::refusal`]).
    pub rule: String,
    /// True when a human may still let it through (`unlisted_tools = "hold"`).
    pub held: bool,
}

impl Messages {
    /// Reads `body` as one JSON-RPC 2.0 message or a batch of them.
    ///
    /// # Errors
    /// [`NotJsonRpc`] when it is not JSON, not JSON-RPC, or a `tools/call` names no tool.
    pub fn parse(body: &[u8]) -> Result<Messages, NotJsonRpc> {
        let value: Value = serde_json::from_slice(body).map_err(|e| NotJsonRpc::NotJson(e.to_string()))?;
        let (items, batch) = match value {
            Value::Array(items) if !items.is_empty() => (items, true),
            Value::Object(_) => (vec![value], false),
            _ => return Err(NotJsonRpc::NotAMessage),
        };
        let messages = items.into_iter().map(message).collect::<Result<_, _>>()?;
        Ok(Messages { messages, batch })
    }

    /// Each `tools/call` `table` refuses; none without a table (the host is MCP's, but no
    /// table scopes the agent).
    pub fn refusals(&self, table: Option<&McpTable>) -> Vec<Refusal> {
        let Some(table) = table else { return Vec::new() };
        let calls = self.messages.iter().enumerate().filter_map(|(i, m)| Some((i, m.tool.as_deref()?)));
        calls
            .filter_map(|(index, tool)| {
                let rule = table.refusal(tool)?;
                Some(Refusal { index, tool: tool.to_owned(), rule, held: table.holds(tool) })
            })
            .collect()
    }

    /// The body a request with `refusals` is answered with instead of forwarded: for each
    /// message with an id, a JSON-RPC error with that id, the refused ones naming their rule,
    /// the others in their batch saying they were not sent (a batch goes whole or not at all).
    /// `None` when no message has an id (notifications: answered `202` with no body).
    pub fn refusal_answer(&self, refusals: &[Refusal], event_id: &str) -> Option<Vec<u8>> {
        let answers: Vec<Value> = self
            .messages
            .iter()
            .enumerate()
            .filter_map(|(i, message)| {
                let id = message.id.clone()?;
                let (code, text) = match refusals.iter().find(|r| r.index == i) {
                    Some(refusal) => (
                        TOOL_REFUSED,
                        format!(
                            "agentgate refused this call to tool {:?} (mcp.tool_refused): {}. The operator does not let \
                             this agent use that tool on this server; do not retry it, use another tool or ask the operator.",
                            refusal.tool, refusal.rule
                        ),
                    ),
                    None => (
                        NOT_SENT,
                        "agentgate did not send this message: another call in its batch was refused (mcp.tool_refused)"
                            .to_owned(),
                    ),
                };
                let data = json!({"code": "mcp.tool_refused", "event_id": event_id});
                Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": text, "data": data}}))
            })
            .collect();
        let answer = match (self.batch, answers.len()) {
            (_, 0) => return None,
            (false, _) => answers.into_iter().next().unwrap_or_default(),
            (true, _) => Value::Array(answers),
        };
        Some(answer.to_string().into_bytes())
    }

    /// True when a message asks for `tools/list`: its answer is filtered.
    pub fn lists_tools(&self) -> bool {
        self.messages.iter().any(|m| m.method.as_deref() == Some("tools/list"))
    }

    /// The methods, joined with `,` for a batch (`agentgate.mcp.method`); `response` for a
    /// message that answers the server.
    pub fn methods(&self) -> String {
        let names = self.messages.iter().map(|m| m.method.as_deref().unwrap_or("response"));
        names.collect::<Vec<_>>().join(",")
    }

    /// The tools called, joined with `,` (`agentgate.mcp.tool`); `None` when none.
    pub fn tools(&self) -> Option<String> {
        let tools: Vec<&str> = self.messages.iter().filter_map(|m| m.tool.as_deref()).collect();
        (!tools.is_empty()).then(|| tools.join(","))
    }

    /// The ids, joined with `,` (`agentgate.mcp.request_id`): a string id as it is, a number
    /// as written; `None` when only notifications.
    pub fn ids(&self) -> Option<String> {
        let ids: Vec<String> = self
            .messages
            .iter()
            .filter_map(|m| match m.id.as_ref()? {
                Value::String(id) => Some(id.clone()),
                other => Some(other.to_string()),
            })
            .collect();
        (!ids.is_empty()).then(|| ids.join(","))
    }

    /// The calls' arguments as one JSON text (an array for several), for a table with
    /// `log_arguments`; the caller redacts it.
    pub fn arguments(&self) -> Option<String> {
        let arguments: Vec<&Value> = self.messages.iter().filter_map(|m| m.arguments.as_ref()).collect();
        match arguments.as_slice() {
            [] => None,
            [one] => Some(one.to_string()),
            many => Some(Value::Array(many.iter().map(|v| (*v).clone()).collect()).to_string()),
        }
    }
}

/// Whether a body that is not JSON-RPC ([`Messages::parse`] failed) could still carry a call
/// a lenient server runs, so it must be refused rather than forwarded unruled: an encoded
/// body (`encoded`: its `Content-Encoding` is not undone here), or JSON with a `method`
/// member at its top level or in an array's objects. Anything else (a form, JSON with no
/// `method`: an OAuth token or client registration request on the server's host) is no call.
pub fn may_carry_calls(body: &[u8], encoded: bool) -> bool {
    if encoded {
        return true;
    }
    let has_method = |value: &Value| value.get("method").is_some();
    match serde_json::from_slice::<Value>(body) {
        Ok(Value::Array(items)) => items.iter().any(has_method),
        Ok(value) => has_method(&value),
        Err(_) => false,
    }
}

/// The body a request whose messages cannot be ruled is answered with: a JSON-RPC error
/// with a null id (its ids are unknown) saying `why` (`mcp.unreadable`).
pub fn unreadable_answer(why: &str, event_id: &str) -> Vec<u8> {
    let text = format!(
        "agentgate could not read this request to rule its tools (mcp.unreadable): {why}. Send a smaller, \
         uncompressed JSON-RPC body, or ask the operator."
    );
    let data = json!({"code": "mcp.unreadable", "event_id": event_id});
    let answer = json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": text, "data": data}});
    answer.to_string().into_bytes()
}

/// One message, checked to be JSON-RPC 2.0.
fn message(value: Value) -> Result<Message, NotJsonRpc> {
    let Value::Object(mut object) = value else { return Err(NotJsonRpc::NotAMessage) };
    if object.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return Err(NotJsonRpc::NotAMessage);
    }
    let id = object.remove("id").filter(|id| !id.is_null());
    let method = match object.remove("method") {
        Some(Value::String(method)) => Some(method),
        Some(_) => return Err(NotJsonRpc::NotAMessage),
        None if id.is_some() && (object.contains_key("result") || object.contains_key("error")) => None,
        None => return Err(NotJsonRpc::NotAMessage),
    };
    let (mut tool, mut arguments) = (None, None);
    if method.as_deref() == Some("tools/call") {
        let mut params = match object.remove("params") {
            Some(Value::Object(params)) => params,
            _ => Map::new(),
        };
        match params.remove("name") {
            Some(Value::String(name)) => tool = Some(name),
            _ => return Err(NotJsonRpc::NoToolName),
        }
        arguments = params.remove("arguments");
    }
    Ok(Message { method, id, tool, arguments })
}

/// A JSON answer (one message or a batch) with the tools `table` refuses removed from each
/// `tools/list` result; `None` when nothing was removed (or it is not JSON), so the answer
/// goes on as it came.
pub fn filter_json(body: &[u8], table: &McpTable) -> Option<Vec<u8>> {
    let mut value: Value = serde_json::from_slice(body).ok()?;
    let removed: usize = match &mut value {
        Value::Array(items) => items.iter_mut().map(|item| filter_result(item, table)).sum(),
        item => filter_result(item, table),
    };
    (removed > 0).then(|| value.to_string().into_bytes())
}

/// Removes the tools `table` refuses from `message`'s `result.tools`; how many it removed.
fn filter_result(message: &mut Value, table: &McpTable) -> usize {
    let Some(Value::Array(tools)) = message.get_mut("result").and_then(|r| r.get_mut("tools")) else { return 0 };
    let before = tools.len();
    // A tool without a name cannot be ruled, so it cannot be offered.
    tools.retain(|tool| tool.get("name").and_then(Value::as_str).is_some_and(|name| table.offers(name)));
    before - tools.len()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> McpTable {
        McpTable {
            hosts: vec!["mcp.test".to_owned()],
            agents: Vec::new(),
            allow_tools: vec!["search".to_owned(), "create_*".to_owned()],
            deny_tools: Vec::new(),
            unlisted_tools: None,
            log_arguments: false,
        }
    }

    fn call(id: u32, tool: &str) -> Value {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {"q": "x"}}})
    }

    #[test]
    fn a_call_to_an_unlisted_tool_is_refused_with_a_json_rpc_error_of_the_same_id() {
        let body = call(7, "delete_repo").to_string();
        let messages = Messages::parse(body.as_bytes()).expect("JSON-RPC");
        assert_eq!(messages.methods(), "tools/call");
        assert_eq!(messages.tools().as_deref(), Some("delete_repo"));
        assert_eq!(messages.ids().as_deref(), Some("7"));
        let refusals = messages.refusals(Some(&table()));
        assert_eq!(refusals.len(), 1);
        let answer = messages.refusal_answer(&refusals, "abc").expect("an id");
        let answer: Value = serde_json::from_slice(&answer).expect("JSON");
        assert_eq!(answer["id"], 7);
        assert_eq!(answer["error"]["code"], TOOL_REFUSED);
        let text = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(text.contains("mcp.tool_refused") && text.contains("allow_tools (search, create_*)"), "{text}");
        assert_eq!(answer["error"]["data"]["event_id"], "abc");
        let search = Messages::parse(call(8, "search").to_string().as_bytes()).expect("ok");
        assert!(search.refusals(Some(&table())).is_empty());
        assert!(messages.refusals(None).is_empty());
    }

    #[test]
    fn a_batch_with_one_refused_call_is_answered_whole_and_notifications_get_nothing() {
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let body = json!([call(1, "search"), call(2, "delete_repo"), note]).to_string();
        let messages = Messages::parse(body.as_bytes()).expect("batch");
        assert!(messages.batch);
        assert_eq!(messages.methods(), "tools/call,tools/call,notifications/initialized");
        let refusals = messages.refusals(Some(&table()));
        assert_eq!(refusals.iter().map(|r| r.index).collect::<Vec<_>>(), [1]);
        let answer = messages.refusal_answer(&refusals, "e").expect("ids");
        let answer: Value = serde_json::from_slice(&answer).expect("JSON");
        assert_eq!(answer[0]["error"]["code"], NOT_SENT);
        assert_eq!(answer[1]["error"]["code"], TOOL_REFUSED);
        assert_eq!(answer.as_array().map(Vec::len), Some(2));
        let notification = json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "delete_repo"}});
        let messages = Messages::parse(notification.to_string().as_bytes()).expect("notification");
        assert_eq!(messages.refusal_answer(&messages.refusals(Some(&table())), "e"), None);
    }

    #[test]
    fn what_is_not_json_rpc_says_why() {
        assert!(matches!(Messages::parse(b"\x1f\x8b gzip"), Err(NotJsonRpc::NotJson(_))));
        assert_eq!(Messages::parse(b"[]"), Err(NotJsonRpc::NotAMessage));
        assert_eq!(Messages::parse(br#"{"id":1,"method":"x"}"#), Err(NotJsonRpc::NotAMessage));
        let nameless = br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#;
        assert_eq!(Messages::parse(nameless), Err(NotJsonRpc::NoToolName));
        let response = br#"{"jsonrpc":"2.0","id":"s-1","result":{}}"#;
        let messages = Messages::parse(response).expect("a response to the server");
        assert_eq!((messages.methods().as_str(), messages.ids().as_deref()), ("response", Some("s-1")));
    }

    #[test]
    fn a_body_that_is_not_json_rpc_is_refused_only_when_it_could_carry_a_call() {
        assert!(may_carry_calls(b"\x1f\x8b gzip", true), "encoded: cannot be read");
        assert!(may_carry_calls(br#"{"method":"tools/call","params":{"name":"x"}}"#, false), "no jsonrpc member");
        assert!(may_carry_calls(br#"[{"id":1},{"method":"tools/call"}]"#, false));
        assert!(!may_carry_calls(b"grant_type=authorization_code&code=x", false), "an OAuth token request");
        assert!(!may_carry_calls(br#"{"client_name":"agent","redirect_uris":["http://localhost/cb"]}"#, false));
    }

    #[test]
    fn arguments_are_kept_for_the_caller_to_redact_and_log_only_when_asked() {
        let messages = Messages::parse(call(1, "search").to_string().as_bytes()).expect("ok");
        assert_eq!(messages.arguments().as_deref(), Some(r#"{"q":"x"}"#));
        let list = Messages::parse(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).expect("ok");
        assert!(list.lists_tools() && list.arguments().is_none() && list.tools().is_none());
    }

    #[test]
    fn a_tools_list_result_loses_the_refused_tools_and_an_unchanged_one_is_left_alone() {
        let tools = json!([{"name": "search"}, {"name": "delete_repo"}, {"name": "create_issue"}, {"title": "x"}]);
        let body = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": tools}}).to_string();
        let filtered = filter_json(body.as_bytes(), &table()).expect("changed");
        let filtered: Value = serde_json::from_slice(&filtered).expect("JSON");
        let names: Vec<&str> =
            filtered["result"]["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
        assert_eq!(names, ["search", "create_issue"]);
        let kept = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [{"name": "search"}]}}).to_string();
        assert_eq!(filter_json(kept.as_bytes(), &table()), None);
        assert_eq!(filter_json(b"not json", &table()), None);
    }
}
