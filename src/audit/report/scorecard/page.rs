//! The scorecard as one self-contained HTML page: inline style, inline SVG charts
//! (`super::chart`), no script, no font, no image, no link to fetch; a
//! `Content-Security-Policy` in the page itself allows only its own style, so even a value
//! that slipped through as markup could not run or load anything. Per agent: the summary's
//! figures (each cell carrying `data-figure`, the `audit summary --format json` key, and
//! `data-value`, the exact number), its share of outcomes, its timeline, blocks by source
//! and by code, its busiest origins and the rules that refused most with their file and line.
//!
//! Never: writes a value from the log as markup: every one goes through `html_text`.

use std::fmt::Write as _;

use base64::Engine as _;
use sha2::{Digest, Sha256};

use super::{AgentCard, Blocks, Class, Scorecard, chart};
use crate::audit::{Counts, html_text as text};

/// The page's style, inlined.
const STYLE: &str = include_str!("style.css");

/// The summary figures each agent shows, as `audit summary --format json` names them, with
/// their heading.
const FIGURES: [(&str, &str); 11] = [
    ("requests", "requests"),
    ("allowed", "allowed"),
    ("denied", "denied"),
    ("needs_approval", "needs approval"),
    ("rate_limited", "rate limited"),
    ("would_deny", "would deny"),
    ("auth_challenges", "auth challenges"),
    ("errors", "errors"),
    ("sent_bytes", "bytes sent"),
    ("received_bytes", "bytes received"),
    ("budget_cut", "cut by budget"),
];

/// The policy the page runs under: nothing but its own inline style (by digest), no
/// script, nothing fetched, no base or form target. The admin console serves the page with
/// it as a header too (adding `frame-ancestors`, which a `<meta>` cannot carry).
pub fn content_security_policy() -> String {
    let digest = base64::engine::general_purpose::STANDARD.encode(Sha256::digest(STYLE.as_bytes()));
    format!("default-src 'none'; style-src 'sha256-{digest}'; base-uri 'none'; form-action 'none'")
}

/// The counts per [`Class::ALL`], from the summary's outcomes.
fn classes(counts: &Counts) -> [u64; 4] {
    let refused = counts.denied + counts.needs_approval + counts.rate_limited;
    let other = counts.requests.saturating_sub(counts.allowed + counts.would_deny + refused);
    [counts.allowed, counts.would_deny, refused, other]
}

/// The page's title and heading.
const TITLE: &str = "agentgate report";

/// The whole page.
pub(super) fn render(card: &Scorecard, sources: &[String]) -> String {
    let summary = &card.summary;
    let mut html = format!(
        "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"{}\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n<header>\n<h1>{}</h1>\n<p id=\"report-scope\">",
        content_security_policy(),
        TITLE,
        TITLE,
    );
    let _ = write!(html, "{} requests by {} agents", summary.requests, summary.groups.len());
    if let Some((first, last)) = card.span {
        let _ = write!(html, ", {} to {} UTC", chart::clock(first), chart::clock(last));
    }
    if summary.malformed_lines > 0 {
        let _ = write!(html, "; {} lines were not records", summary.malformed_lines);
    }
    if !sources.is_empty() {
        let files: Vec<String> = sources.iter().map(|s| text(s)).collect();
        let _ = write!(html, "; read from {}", files.join(", "));
    }
    html.push_str("</p>\n</header>\n<main>\n");
    overview(&mut html, card);
    for (index, (group, agent)) in summary.groups.iter().zip(&card.cards).enumerate() {
        agent_section(&mut html, index, &group.counts, agent);
    }
    html.push_str("</main>\n</body>\n</html>\n");
    html
}

fn legend(html: &mut String) {
    html.push_str("<p class=\"legend\">");
    for class in Class::ALL {
        let _ = write!(html, "<span><i class=\"{0}\"></i>{0}</span>", class.name());
    }
    html.push_str("</p>\n");
}

/// Every agent on one table, with a total row.
fn overview(html: &mut String, card: &Scorecard) {
    html.push_str("<section id=\"overview\">\n<h2>Agents</h2>\n");
    if card.summary.groups.is_empty() {
        html.push_str("<p id=\"no-records\" class=\"muted\">No requests in the log.</p>\n</section>\n");
        return;
    }
    legend(html);
    html.push_str("<table id=\"agents\">\n<thead><tr><th>agent</th><th>outcomes</th>");
    for (_, heading) in FIGURES {
        let _ = write!(html, "<th class=\"n\">{heading}</th>");
    }
    html.push_str("</tr></thead>\n<tbody>\n");
    for (index, group) in card.summary.groups.iter().enumerate() {
        let _ = write!(
            html,
            "<tr data-agent=\"{0}\"><th><a href=\"#agent-{index}\">{0}</a></th><td>{1}</td>",
            text(&group.key),
            chart::share(classes(&group.counts))
        );
        figure_cells(html, &group.counts);
        html.push_str("</tr>\n");
    }
    html.push_str("</tbody>\n<tfoot><tr id=\"total\"><th>total</th><td></td>");
    figure_cells(html, &card.summary.total);
    html.push_str("</tr></tfoot>\n</table>\n</section>\n");
}

/// One `<td>` per [`FIGURES`] entry, each the value `audit summary --format json` writes
/// under its name (the page reads it from that serialization, so the two cannot drift).
fn figure_cells(html: &mut String, counts: &Counts) {
    // Serializing a struct of numbers and a map of strings to numbers cannot fail.
    let json = serde_json::to_value(counts).unwrap_or_default();
    for (name, _) in FIGURES {
        let value = json[name].as_u64().unwrap_or(0);
        let _ =
            write!(html, "<td class=\"n\" data-figure=\"{name}\" data-value=\"{value}\">{}</td>", shown(name, value));
    }
}

/// A figure as shown: bytes in binary units past 1 KiB, counts as they are.
fn shown(name: &str, value: u64) -> String {
    if !name.ends_with("_bytes") || value < 1024 {
        return value.to_string();
    }
    let units = ["KiB", "MiB", "GiB", "TiB"];
    let mut scaled = value as f64 / 1024.0;
    let mut unit = 0;
    while scaled >= 1024.0 && unit + 1 < units.len() {
        scaled /= 1024.0;
        unit += 1;
    }
    format!("{scaled:.1} {}", units[unit])
}

/// One agent's section.
fn agent_section(html: &mut String, index: usize, counts: &Counts, agent: &AgentCard) {
    let name = text(&agent.agent);
    let _ = write!(html, "<section class=\"agent\" id=\"agent-{index}\" data-agent=\"{name}\">\n<h2>{name}</h2>\n");
    html.push_str("<table class=\"figures\"><thead><tr>");
    for (_, heading) in FIGURES {
        let _ = write!(html, "<th class=\"n\">{heading}</th>");
    }
    html.push_str("</tr></thead><tbody><tr>");
    figure_cells(html, counts);
    html.push_str("</tr></tbody></table>\n<h3>Requests over time</h3>\n");
    html.push_str(&chart::timeline(&agent.timeline));
    legend(html);
    if agent.timeline.untimed > 0 {
        let _ =
            writeln!(html, "<p class=\"muted\">{} requests without a time are in no bar.</p>", agent.timeline.untimed);
    }
    html.push_str("<div class=\"columns\">\n<div>\n<h3>Blocks by source</h3>\n");
    blocks_table(html, "by-source", "source", &agent.by_source);
    html.push_str("</div>\n<div>\n<h3>Blocks by code</h3>\n");
    blocks_table(html, "by-code", "source code", &agent.by_code);
    html.push_str("</div>\n<div>\n<h3>Top origins</h3>\n");
    if agent.top_origins.is_empty() {
        html.push_str("<p class=\"muted\">None.</p>\n");
    } else {
        html.push_str(
            "<table class=\"top-origins\"><thead><tr><th>origin</th><th class=\"n\">requests</th>\
             <th class=\"n\">refused</th><th class=\"n\">would deny</th></tr></thead><tbody>\n",
        );
        for origin in &agent.top_origins {
            let _ = writeln!(
                html,
                "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                text(&origin.origin),
                origin.requests,
                origin.blocks.refused,
                origin.blocks.would_deny
            );
        }
        html.push_str("</tbody></table>\n");
    }
    html.push_str("</div>\n</div>\n<h3>Rules that refused most</h3>\n");
    if agent.top_rules.is_empty() {
        html.push_str("<p class=\"muted\">None: nothing was refused.</p>\n");
    } else {
        html.push_str(
            "<table class=\"top-rules\"><thead><tr><th>origin</th><th>file:line</th><th>code</th><th>rule</th>\
             <th class=\"n\">refused</th><th class=\"n\">would deny</th></tr></thead><tbody>\n",
        );
        for (rule, blocks) in &agent.top_rules {
            let at = match rule.line {
                Some(line) => format!("{}:{line}", rule.source),
                None => rule.source.clone(),
            };
            let _ = writeln!(
                html,
                "<tr><td>{}</td><td class=\"file\">{}</td><td>{}</td><td class=\"rule\">{}</td>\
                 <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                text(&rule.origin),
                text(&at),
                text(&rule.code),
                text(&rule.rule),
                blocks.refused,
                blocks.would_deny
            );
        }
        html.push_str("</tbody></table>\n");
    }
    html.push_str("</section>\n");
}

/// A table of blocks per name, or a note that there were none.
fn blocks_table(html: &mut String, class: &str, heading: &str, rows: &[(String, Blocks)]) {
    if rows.is_empty() {
        html.push_str("<p class=\"muted\">None.</p>\n");
        return;
    }
    let _ = writeln!(
        html,
        "<table class=\"{class}\"><thead><tr><th>{heading}</th><th class=\"n\">refused</th>\
         <th class=\"n\">would deny</th></tr></thead><tbody>"
    );
    for (name, blocks) in rows {
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            text(name),
            blocks.refused,
            blocks.would_deny
        );
    }
    html.push_str("</tbody></table>\n");
}
