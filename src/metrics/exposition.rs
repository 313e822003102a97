//! The two text formats `/metrics` answers in, and which one a scraper gets: OpenMetrics
//! 1.0 as prometheus-client writes it, when the scraper's `Accept` prefers
//! `application/openmetrics-text` (Prometheus itself does); otherwise the classic Prometheus
//! text format 0.0.4, which `promtool check metrics`, older scrapers and `curl` read.
//!
//! The classic answer is the OpenMetrics text rewritten line by line, as the formats differ
//! only in these: a counter's `# HELP` and `# TYPE` name its samples' `_total` name; there
//! is no `# UNIT` line, no `_created` sample and no `# EOF`; `unknown` is `untyped`. agentgate
//! registers counters, gauges and histograms without exemplars, so nothing else needs
//! rewriting (unit test `classic_text_is_the_openmetrics_text_rewritten`, and e2e
//! `admin::metrics_pass_promtool_in_the_classic_format_and_parse_as_openmetrics`).
//!
//! Never: encodes a metric itself, or reads anything but the `Accept` header.

use std::fmt::Write as _;

/// A text format of `/metrics`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exposition {
    /// The classic Prometheus text format, version 0.0.4.
    Classic,
    /// OpenMetrics 1.0.0.
    OpenMetrics,
}

/// The media type of OpenMetrics text.
const OPENMETRICS: &str = "application/openmetrics-text";

impl Exposition {
    /// The format for a request with this `Accept` header: OpenMetrics when it asks for
    /// `application/openmetrics-text` at least as much as for `text/plain` (or `*/*`),
    /// else classic (also when there is no header).
    pub fn for_accept(accept: Option<&str>) -> Exposition {
        let (mut openmetrics, mut text) = (0.0_f32, 0.0_f32);
        for range in accept.unwrap_or_default().split(',') {
            let mut parts = range.split(';');
            let media_type = parts.next().unwrap_or_default().trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|param| param.split_once('='))
                .find(|(name, _)| name.trim().eq_ignore_ascii_case("q"))
                .map_or(1.0, |(_, value)| value.trim().parse::<f32>().unwrap_or(0.0));
            match media_type.as_str() {
                OPENMETRICS => openmetrics = openmetrics.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if openmetrics > 0.0 && openmetrics >= text { Exposition::OpenMetrics } else { Exposition::Classic }
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::Classic => "text/plain; version=0.0.4; charset=utf-8",
            Exposition::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }

    /// `openmetrics` (prometheus-client's text) in this format.
    pub fn render(self, openmetrics: String) -> String {
        match self {
            Exposition::OpenMetrics => openmetrics,
            Exposition::Classic => classic(&openmetrics),
        }
    }
}

/// OpenMetrics text as the classic Prometheus text format (see the module header).
fn classic(openmetrics: &str) -> String {
    let mut text = String::with_capacity(openmetrics.len());
    // The help of the family being read, held until its `# TYPE` says what to name it.
    let mut help: Option<&str> = None;
    // The `_created` samples of the counter being read, which the classic format lacks.
    let mut created: Option<String> = None;
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            help = Some(rest.split_once(' ').map_or("", |(_, help)| help));
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (family, kind) = rest.rsplit_once(' ').unwrap_or((rest, "unknown"));
            let (name, kind) = match kind {
                "counter" => (format!("{family}_total"), kind),
                "gauge" | "histogram" | "summary" => (family.to_owned(), kind),
                _ => (family.to_owned(), "untyped"),
            };
            if let Some(help) = help.take() {
                let _ = writeln!(text, "# HELP {name} {help}");
            }
            let _ = writeln!(text, "# TYPE {name} {kind}");
            created = (kind == "counter").then(|| format!("{family}_created"));
            continue;
        }
        let dropped = line.starts_with("# UNIT ") || line == "# EOF" || created.as_deref() == Some(sample_name(line));
        if !dropped {
            text.push_str(line);
            text.push('\n');
        }
    }
    text
}

/// The metric name of a sample line (up to its labels or its value).
fn sample_name(line: &str) -> &str {
    line.split(['{', ' ']).next().unwrap_or(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_only_when_asked_for_at_least_as_much_as_text() {
        use Exposition::{Classic, OpenMetrics};
        for (accept, expected) in [
            (None, Classic),
            (Some("text/plain; version=0.0.4"), Classic),
            (Some("*/*"), Classic),
            (Some("application/openmetrics-text"), OpenMetrics),
            (Some("Application/OpenMetrics-Text; version=1.0.0; charset=utf-8"), OpenMetrics),
            // Prometheus 2 and 3 (protobuf first, which agentgate does not speak).
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                OpenMetrics,
            ),
            (
                Some(
                    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.5,application/openmetrics-text;version=1.0.0;q=0.4,text/plain;version=0.0.4;q=0.1,*/*;q=0.05",
                ),
                OpenMetrics,
            ),
            (Some("text/plain;q=0.9, application/openmetrics-text;q=0.5"), Classic),
            (Some("application/openmetrics-text;q=0"), Classic),
        ] {
            assert_eq!(Exposition::for_accept(accept), expected, "{accept:?}");
        }
    }

    #[test]
    fn classic_text_is_the_openmetrics_text_rewritten() {
        let openmetrics = "# HELP agentgate_requests Requests decided.\n\
            # TYPE agentgate_requests counter\n\
            agentgate_requests_total{outcome=\"allow\"} 2\n\
            agentgate_requests_created{outcome=\"allow\"} 1700000000.0\n\
            # HELP agentgate_request_duration_seconds Durations.\n\
            # TYPE agentgate_request_duration_seconds histogram\n\
            # UNIT agentgate_request_duration_seconds seconds\n\
            agentgate_request_duration_seconds_sum 0.5\n\
            agentgate_request_duration_seconds_count 1\n\
            agentgate_request_duration_seconds_bucket{le=\"+Inf\"} 1\n\
            # HELP agentgate_tunnels Tunnels open.\n\
            # TYPE agentgate_tunnels gauge\n\
            agentgate_tunnels 0\n\
            # HELP agentgate_odd Something.\n\
            # TYPE agentgate_odd unknown\n\
            agentgate_odd 1\n\
            # EOF\n";
        let expected = "# HELP agentgate_requests_total Requests decided.\n\
            # TYPE agentgate_requests_total counter\n\
            agentgate_requests_total{outcome=\"allow\"} 2\n\
            # HELP agentgate_request_duration_seconds Durations.\n\
            # TYPE agentgate_request_duration_seconds histogram\n\
            agentgate_request_duration_seconds_sum 0.5\n\
            agentgate_request_duration_seconds_count 1\n\
            agentgate_request_duration_seconds_bucket{le=\"+Inf\"} 1\n\
            # HELP agentgate_tunnels Tunnels open.\n\
            # TYPE agentgate_tunnels gauge\n\
            agentgate_tunnels 0\n\
            # HELP agentgate_odd Something.\n\
            # TYPE agentgate_odd untyped\n\
            agentgate_odd 1\n";
        assert_eq!(Exposition::Classic.render(openmetrics.to_owned()), expected);
        assert_eq!(Exposition::OpenMetrics.render(openmetrics.to_owned()), openmetrics);
    }
}
