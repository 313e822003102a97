//! Log values as HTML text, for the pages that show them (the console's first paint, the
//! scorecard): a URL, a host, an agent name or a rule quoted from a site's file come from
//! clients and sites, so each is written as text, never as markup.
//!
//! Never: decides what a page shows; it only makes a value inert in it.

use std::fmt::Write as _;

use super::is_display_unsafe;

/// `text` as HTML text, safe in element content and in a quoted attribute value: `& < > " '`
/// as entities, each display-unsafe character (`is_display_unsafe`: bidi controls and
/// the like) as `\uXXXX`, as the console's script shows them.
pub(crate) fn html_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if is_display_unsafe(c) => {
                let _ = write!(out, "\\u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}
