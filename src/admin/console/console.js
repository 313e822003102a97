// agentgate console: reads the admin API it is served from. Every value from the log is
// written with textContent, never as markup: URLs and agent names come from clients. And
// never raw when it could disguise itself: see `visible`.
"use strict";

const MAX_ROWS = 500;
const decisions = new Map(); // event.id -> {record, row, details}
let selected = null; // the event.id whose policies are shown

// Characters that reorder or hide the text around them: C0 controls but tab and newline, DEL,
// C1 controls, the bidirectional formatting characters (U+061C, U+200E, U+200F,
// U+202A-U+202E, U+2066-U+2069) and the line and paragraph separators (U+2028, U+2029).
// The same set as `is_display_unsafe` in src/audit/redact.rs, which percent-encodes them in
// `url.full`; rule text, policy files and agent names can still carry them.
const UNSAFE = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/g;

// `text` with each unsafe character shown as its escape (`\u202E`), so it is seen, not obeyed.
function visible(text) {
  return text.replace(UNSAFE, (c) => "\\u" + c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0"));
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (name === "class") node.className = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) node.append(child instanceof Node ? child : visible(String(child)));
  }
  return node;
}

async function api(path, options) {
  const response = await fetch(path, Object.assign({ credentials: "same-origin", cache: "no-store" }, options));
  if (response.status === 401) {
    location.reload(); // the session ended: the page answers with the login form
    throw new Error("not logged in");
  }
  return response;
}

function originOf(url) {
  try {
    return new URL(url).origin;
  } catch (_) {
    return "";
  }
}

function reasonText(reason) {
  const at = reason.line ? `${reason.source}:${reason.line}` : reason.source;
  return `${at} ${reason.code}${reason.rule ? " " + reason.rule : ""}`;
}

function decidingReasons(record) {
  const reasons = record["agentgate.reasons"] || [];
  const blocking = reasons.filter((r) => r.blocking);
  return blocking.length ? blocking : reasons.slice(0, 1);
}

// ---- decisions -------------------------------------------------------------------------

// The gate's decision: `event.action`; a line written before that field held it in
// `event.outcome` (docs/decision-log.md, "ECS").
function actionOf(record) {
  return record["event.action"] || record["event.outcome"];
}

function matchesFilters(record) {
  const agent = document.getElementById("filter-agent").value.trim().toLowerCase();
  const origin = document.getElementById("filter-origin").value.trim().toLowerCase();
  const outcome = document.getElementById("filter-outcome").value;
  return (!agent || (record["agentgate.agent"] || "").toLowerCase().includes(agent))
    && (!origin || originOf(record["url.full"] || "").toLowerCase().includes(origin))
    && (!outcome || actionOf(record) === outcome);
}

function applyFilters() {
  for (const entry of decisions.values()) {
    const shown = matchesFilters(entry.record);
    entry.row.hidden = !shown;
    entry.details.hidden = !shown || !entry.row.classList.contains("open");
  }
}

function renderDetails(record) {
  const reasons = record["agentgate.reasons"] || [];
  const list = el("ul", { class: "reasons" });
  for (const reason of reasons) {
    list.append(el("li", { class: reason.blocking ? "blocking" : "" },
      el("span", { class: "source" }, reason.source),
      el("span", { class: "line" }, reason.line ? `line ${reason.line}` : "no line"),
      el("code", {}, reason.code),
      el("span", { class: "rule" }, reason.rule || "")));
  }
  if (!reasons.length) list.append(el("li", { class: "muted" }, "no reasons recorded"));
  const facts = [`event.id ${record["event.id"]}`];
  if (record["error.message"]) facts.push(`error: ${record["error.message"]}`);
  const approval = record["agentgate.approval.decision"];
  if (approval) {
    const by = record["agentgate.approval.by"] ? ` by ${record["agentgate.approval.by"]}` : "";
    const why = record["agentgate.approval.reason"] ? `: ${record["agentgate.approval.reason"]}` : "";
    facts.push(`approval ${approval}${by}${why}`);
  }
  return el("td", { colspan: "7" }, list, el("p", { class: "muted" }, facts.join(" · ")));
}

function renderRow(entry) {
  const r = entry.record;
  const deciding = decidingReasons(r);
  const cells = [
    (r["@timestamp"] || "").slice(11, 23),
    r["agentgate.agent"],
    el("span", { class: `outcome ${actionOf(r)}` }, actionOf(r)),
    r["http.response.status_code"] || "…",
    r["http.request.method"],
    el("span", { class: "url" }, r["url.full"]),
    deciding.map(reasonText).join("; "),
  ];
  entry.row.replaceChildren(...cells.map((cell) => el("td", {}, cell)));
  entry.details.replaceChildren(renderDetails(r));
}

// A line from the stream goes on top; one from `/decisions/recent` (read once the stream is
// open, so no line falls between the two) below what the stream already showed, and never
// over a row the stream already has.
function addLine(line, fromRecent) {
  let record;
  try {
    record = JSON.parse(line);
  } catch (_) {
    return;
  }
  const id = record["event.id"];
  let entry = decisions.get(id);
  if (entry) {
    // A forwarded request's end line completes its decision line (same event.id): it
    // carries what the end adds, the decision line the reasons and limits. A line from
    // `/decisions/recent` never overrides what the stream showed.
    entry.record = fromRecent ? { ...record, ...entry.record } : { ...entry.record, ...record };
  } else {
    const row = el("tr", { class: "decision", "data-id": id });
    const details = el("tr", { class: "details" });
    details.hidden = true;
    entry = { record, row, details };
    row.addEventListener("click", () => toggle(id));
    decisions.set(id, entry);
    const body = document.querySelector("#decision-log tbody");
    if (fromRecent) body.append(row, details);
    else body.prepend(row, details);
    if (decisions.size > MAX_ROWS) {
      const rows = body.querySelectorAll("tr.decision");
      const oldest = rows[rows.length - 1].dataset.id;
      const gone = decisions.get(oldest);
      gone.row.remove();
      gone.details.remove();
      decisions.delete(oldest);
    }
  }
  renderRow(entry);
  entry.row.hidden = !matchesFilters(record);
  agentsSoon();
  if (id === selected) showPolicies(id);
}

function toggle(id) {
  const entry = decisions.get(id);
  const open = entry.row.classList.toggle("open");
  entry.details.hidden = !open;
  if (open) {
    for (const other of document.querySelectorAll("tr.decision.selected")) other.classList.remove("selected");
    entry.row.classList.add("selected");
    selected = id;
    showPolicies(id);
  }
}

function connectStream() {
  const state = document.getElementById("stream-state");
  const source = new EventSource("/decisions/stream");
  let first = true;
  source.addEventListener("open", () => {
    state.textContent = "live";
    state.className = "state live";
    if (first) loadRecent().catch(() => {});
    first = false;
  });
  source.addEventListener("error", () => { state.textContent = "reconnecting…"; state.className = "state"; });
  source.addEventListener("decision", (event) => addLine(event.data));
  source.addEventListener("lagged", (event) => {
    const missed = JSON.parse(event.data).missed;
    state.textContent = `live (missed ${missed} lines: see the log)`;
  });
}

async function loadRecent() {
  const response = await api("/decisions/recent?n=200");
  if (!response.ok) return;
  // The rows the server painted go: the same lines come back here.
  for (const row of document.querySelectorAll("#decision-log tr.first-paint")) row.remove();
  // Newest first, each appended below the rows already shown.
  for (const record of await response.json()) addLine(JSON.stringify(record), true);
}

// ---- policy files ----------------------------------------------------------------------

async function showPolicies(id) {
  const entry = decisions.get(id);
  if (!entry) return;
  const record = entry.record;
  const origin = originOf(record["url.full"] || "");
  const target = document.getElementById("policy-files");
  document.getElementById("policies-origin").textContent = visible(origin) || "(no origin)";
  if (!origin) return target.replaceChildren();
  const response = await api(`/policies?origin=${encodeURIComponent(origin)}`);
  const answer = await response.json();
  if (!response.ok) return target.replaceChildren(el("p", { class: "muted" }, answer.error));
  const reasons = decidingReasons(record);
  // The files that decided come first.
  const decided = (name) => reasons.some((r) => r.source === name);
  const entries = Object.entries(answer.files).sort(([a], [b]) => decided(b) - decided(a));
  const files = entries.map(([name, file]) => {
    const deciding = reasons.filter((r) => r.source === name && r.line);
    const diagnostics = el("ul", { class: "diagnostics" },
      ...file.diagnostics.map((d) => el("li", { class: d.severity },
        `${d.line ? "line " + d.line : "file"}: ${d.severity} ${d.code}: ${d.message}`)));
    return el("article", { class: "policy-file", "data-file": name },
      el("h3", {}, name, " ", el("span", { class: `status ${file.status}` }, file.status)),
      el("p", { class: "muted" }, `fetched ${file.fetched_at} · fresh until ${file.fresh_until}` + (file.digest ? ` · sha256 ${file.digest.slice(0, 16)}…` : "")),
      renderText(file, deciding),
      file.diagnostics.length ? diagnostics : null);
  });
  target.replaceChildren(...files);
}

// The file's text with line numbers when the API has it, the deciding lines highlighted;
// otherwise the deciding lines alone, as the reasons quote them.
function renderText(file, deciding) {
  const decidingLines = new Set(deciding.map((r) => r.line));
  if (typeof file.text === "string") {
    const lines = file.text.replace(/\r?\n$/, "").split(/\r?\n/);
    return el("ol", { class: "policy-text" }, ...lines.map((text, i) =>
      el("li", { class: decidingLines.has(i + 1) ? "deciding" : "", value: String(i + 1) }, text)));
  }
  if (!deciding.length) return null;
  return el("ol", { class: "policy-text" }, ...deciding.map((r) =>
    el("li", { class: "deciding", value: String(r.line) }, r.rule || r.code)));
}

// ---- agents ----------------------------------------------------------------------------

async function loadAgents() {
  const response = await api("/agents/summary");
  if (!response.ok) return;
  const { agents } = await response.json();
  const columns = ["requests", "allowed", "denied", "needs_approval", "would_deny", "rate_limited", "errors"];
  document.querySelector("#agent-summary tbody").replaceChildren(...agents.map((a) =>
    el("tr", { "data-agent": a.agent }, el("td", {}, a.agent), ...columns.map((c) => el("td", { class: c }, a[c])))));
}

// A decision just arrived: the counts change too (at most one refresh per 250 ms).
let agentsPending = null;
function agentsSoon() {
  if (agentsPending) return;
  agentsPending = setTimeout(() => { agentsPending = null; loadAgents().catch(() => {}); }, 250);
}

// ---- approvals -------------------------------------------------------------------------

async function decide(id, decision, row) {
  const reason = row.querySelector("input.reason").value;
  const remember = row.querySelector("select.remember").value;
  for (const button of row.querySelectorAll("button")) button.disabled = true;
  const response = await api(`/approvals/${encodeURIComponent(id)}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ decision, reason, remember }),
  });
  const answer = await response.json().catch(() => ({}));
  document.getElementById("approvals-answer").textContent =
    visible(response.ok ? `${answer.decision} by ${answer.by}` : (answer.error || `HTTP ${response.status}`));
  loadApprovals();
}

function heldText(p) {
  return `${(p.held_since || "").slice(11, 19)} (${p.expires_in_s}s left)`;
}

function renderPending(p) {
  const row = el("tr", { class: "pending", "data-id": p.id });
  // A new host (the agent's allow_hosts does not list it) or a site's rule asked for a human.
  const rule = p.new_host ? `agent ${p.agent} wants to reach ${p.new_host}`
    : p.rule ? `${p.rule.file}:${p.rule.line} ${p.rule.text}` : "";
  const wider = p.new_host
    ? el("option", { value: "host-for-agent" }, "this host and port for this agent, 1 h")
    : el("option", { value: "path-for-agent-15m" }, "this path for this agent, 15 min");
  const remember = el("select", { class: "remember" }, el("option", { value: "this-request" }, "this request"), wider);
  const reason = el("input", { class: "reason", type: "text", placeholder: "reason for a deny (optional)" });
  const approve = el("button", { class: "approve", type: "button", onclick: () => decide(p.id, "approve", row) }, "Approve");
  const deny = el("button", { class: "deny", type: "button", onclick: () => decide(p.id, "deny", row) }, "Deny");
  row.append(
    el("td", { class: "held" }, heldText(p)),
    // The replica holding it: with [approvals] store = "redis" the fleet's holds are listed.
    el("td", { class: "replica" }, p.replica || ""),
    el("td", {}, p.agent),
    el("td", {}, p.method),
    el("td", { class: "url" }, p.url),
    el("td", {}, rule),
    el("td", {}, remember),
    el("td", { class: "actions" }, approve, deny, reason));
  return row;
}

async function loadApprovals() {
  const state = document.getElementById("approvals-state");
  const response = await api("/approvals");
  if (response.status === 404) {
    state.textContent = "This agentgate has no approvals API.";
    return;
  }
  if (!response.ok) return;
  const { pending } = await response.json();
  const body = document.querySelector("#pending tbody");
  // Rows being answered keep their input; only new and settled ones change.
  const ids = new Set(pending.map((p) => p.id));
  for (const row of body.querySelectorAll("tr.pending")) if (!ids.has(row.dataset.id)) row.remove();
  for (const p of pending) {
    const row = body.querySelector(`tr.pending[data-id="${CSS.escape(p.id)}"]`);
    if (row) row.querySelector("td.held").textContent = heldText(p);
    else body.append(renderPending(p));
  }
  state.textContent = pending.length === 1 ? "1 request waits for a human."
    : pending.length ? `${pending.length} requests wait for a human.` : "Nothing is waiting for a human.";
}

// ---- host grants -----------------------------------------------------------------------

async function loadGrants() {
  const response = await api("/agents");
  if (!response.ok) return;
  const { agents } = await response.json();
  const grants = agents.flatMap((a) => a.grants);
  document.querySelector("#grants tbody").replaceChildren(...grants.map((g) =>
    el("tr", { class: "grant" }, el("td", {}, g.agent), el("td", {}, `${g.host}:${g.port}`), el("td", {}, g.by || ""),
      el("td", {}, (g.until || "").slice(0, 19).replace("T", " ")), el("td", {}, g.reason || ""))));
  document.getElementById("grants-state").textContent = grants.length
    ? "" : "No host is granted to an agent now.";
}

// ---- start -----------------------------------------------------------------------------

function every(ms, task) {
  const run = () => task().catch(() => {}).finally(() => setTimeout(run, ms));
  run();
}

document.addEventListener("DOMContentLoaded", () => {
  for (const id of ["filter-agent", "filter-origin", "filter-outcome"]) {
    for (const event of ["input", "change"]) document.getElementById(id).addEventListener(event, applyFilters);
  }
  document.getElementById("filters").addEventListener("submit", (event) => event.preventDefault());
  connectStream();
  every(5000, loadAgents);
  every(1000, loadApprovals);
  every(5000, loadGrants);
});
