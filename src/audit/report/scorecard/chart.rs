//! The scorecard's charts, drawn as inline SVG by this code (no script, no library): an
//! agent's requests over time as stacked bars (allowed, would-deny, refused, other), and
//! the share of each class as one stacked bar. Every coordinate lies inside the chart's
//! `viewBox`; colours come from the page's style through each shape's class.
//!
//! Never: writes text from the log (a bar's tooltip holds times and counts only).

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use super::{Class, Timeline};

/// The timeline's size, in SVG user units.
pub(super) const WIDTH: u32 = 720;
/// See [`WIDTH`].
pub(super) const HEIGHT: u32 = 180;
/// Room for the count labels on the left.
const LEFT: u32 = 44;
/// Room for the time labels at the bottom.
const BOTTOM: u32 = 22;
/// Room above the tallest bar.
const TOP: u32 = 8;

/// The share bar's size.
const SHARE_WIDTH: u32 = 240;
const SHARE_HEIGHT: u32 = 14;

/// `timeline` as an SVG: one column of stacked rectangles per bar, the tallest bar's count
/// on the left, the first and last bar's start time below, each column's tooltip its time
/// and counts.
pub(super) fn timeline(timeline: &Timeline) -> String {
    let mut svg = format!(
        "<svg class=\"timeline\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" \
         aria-label=\"requests over time\" xmlns=\"http://www.w3.org/2000/svg\">"
    );
    let plot_width = f64::from(WIDTH - LEFT);
    let plot_height = f64::from(HEIGHT - BOTTOM - TOP);
    let base = f64::from(HEIGHT - BOTTOM);
    let _ = write!(svg, "<line class=\"axis\" x1=\"{LEFT}\" y1=\"{base}\" x2=\"{WIDTH}\" y2=\"{base}\"/>");
    let (Some(start), false) = (timeline.start, timeline.bars.is_empty()) else {
        let _ = write!(svg, "<text x=\"{LEFT}\" y=\"{}\">no timed requests</text></svg>", HEIGHT / 2);
        return svg;
    };
    let tallest = timeline.bars.iter().map(|bar| bar.iter().sum::<u64>()).max().unwrap_or(0).max(1);
    let slot = plot_width / timeline.bars.len() as f64;
    let gap = if slot > 4.0 { 1.0 } else { 0.0 };
    for (index, bar) in timeline.bars.iter().enumerate() {
        let x = f64::from(LEFT) + slot * index as f64;
        let from = start + timeline.bucket * u32::try_from(index).unwrap_or(u32::MAX);
        let counts: Vec<String> = Class::ALL
            .iter()
            .zip(bar)
            .filter(|(_, n)| **n > 0)
            .map(|(class, n)| format!("{n} {}", class.name()))
            .collect();
        let tip = if counts.is_empty() { "none".to_owned() } else { counts.join(", ") };
        let _ = write!(svg, "<g><title>{} (+{}): {tip}</title>", clock(from), span(timeline.bucket));
        let mut top = base;
        for (class, n) in Class::ALL.iter().zip(bar) {
            if *n == 0 {
                continue;
            }
            let height = plot_height * (*n as f64) / (tallest as f64);
            top -= height;
            let _ = write!(
                svg,
                "<rect class=\"{}\" x=\"{x:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{height:.1}\"/>",
                class.name(),
                (slot - gap).max(0.5)
            );
        }
        svg.push_str("</g>");
    }
    let last = start + timeline.bucket * u32::try_from(timeline.bars.len() - 1).unwrap_or(u32::MAX);
    let label_y = HEIGHT - 6;
    let _ = write!(
        svg,
        "<text class=\"label\" x=\"{}\" y=\"{}\" text-anchor=\"end\">{tallest}</text>\
         <text class=\"label\" x=\"{}\" y=\"{base}\" text-anchor=\"end\">0</text>\
         <text class=\"label\" x=\"{LEFT}\" y=\"{label_y}\">{}</text>\
         <text class=\"label\" x=\"{WIDTH}\" y=\"{label_y}\" text-anchor=\"end\">{}</text></svg>",
        LEFT - 4,
        TOP + 10,
        LEFT - 4,
        clock(start),
        clock(last)
    );
    svg
}

/// The share of each class in `counts` (per [`Class::ALL`]) as one stacked bar.
pub(super) fn share(counts: [u64; 4]) -> String {
    let total: u64 = counts.iter().sum();
    let mut svg = format!(
        "<svg class=\"share\" viewBox=\"0 0 {SHARE_WIDTH} {SHARE_HEIGHT}\" width=\"{SHARE_WIDTH}\" \
         height=\"{SHARE_HEIGHT}\" role=\"img\" aria-label=\"outcomes\" xmlns=\"http://www.w3.org/2000/svg\">\
         <rect class=\"empty\" x=\"0\" y=\"0\" width=\"{SHARE_WIDTH}\" height=\"{SHARE_HEIGHT}\"/>"
    );
    let mut x = 0.0;
    for (class, n) in Class::ALL.iter().zip(counts) {
        if n == 0 || total == 0 {
            continue;
        }
        let width = f64::from(SHARE_WIDTH) * (n as f64) / (total as f64);
        let _ = write!(
            svg,
            "<rect class=\"{}\" x=\"{x:.1}\" y=\"0\" width=\"{width:.1}\" height=\"{SHARE_HEIGHT}\"><title>{n} {}</title></rect>",
            class.name(),
            class.name()
        );
        x += width;
    }
    svg.push_str("</svg>");
    svg
}

/// `at` in UTC as the page writes it: `2026-11-23 10:00:05`.
pub(super) fn clock(at: SystemTime) -> String {
    let text = humantime::format_rfc3339_seconds(at).to_string();
    text.trim_end_matches('Z').replacen('T', " ", 1)
}

/// A bucket's width, as `5s`, `15m`, `1h`.
fn span(bucket: Duration) -> String {
    humantime::format_duration(bucket).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every number of every `x`, `y`, `width`, `height`, `x1`.. attribute.
    fn numbers(svg: &str, attribute: &str) -> Vec<f64> {
        let needle = format!(" {attribute}=\"");
        svg.match_indices(&needle)
            .filter_map(|(at, _)| {
                let rest = &svg[at + needle.len()..];
                rest[..rest.find('"')?].parse().ok()
            })
            .collect()
    }

    fn assert_inside(svg: &str, width: f64, height: f64) {
        for (attribute, bound) in [("x", width), ("width", width), ("x1", width), ("x2", width)] {
            for n in numbers(svg, attribute) {
                assert!((0.0..=bound).contains(&n), "{attribute}={n} outside 0..{bound}: {svg}");
            }
        }
        for (attribute, bound) in [("y", height), ("height", height), ("y1", height), ("y2", height)] {
            for n in numbers(svg, attribute) {
                assert!((0.0..=bound).contains(&n), "{attribute}={n} outside 0..{bound}: {svg}");
            }
        }
        let rects: Vec<(f64, f64, f64, f64)> = svg
            .split("<rect ")
            .skip(1)
            .map(|r| {
                let n = |a: &str| numbers(&format!(" {r}"), a).first().copied().unwrap_or(f64::NAN);
                (n("x"), n("y"), n("width"), n("height"))
            })
            .collect();
        for (x, y, w, h) in rects {
            assert!(x + w <= width + 0.11 && y + h <= height + 0.11, "rect {x},{y} {w}x{h} leaves the chart: {svg}");
        }
    }

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000 + seconds)
    }

    #[test]
    fn bars_stay_inside_the_chart_whatever_the_counts() {
        let many = Timeline {
            start: Some(at(0)),
            bucket: Duration::from_secs(5),
            bars: (0..61).map(|i| [i * 1000, u64::MAX / 8, i % 3, 0]).collect(),
            untimed: 0,
        };
        let one = Timeline { start: Some(at(0)), bucket: Duration::from_secs(1), bars: vec![[1, 0, 0, 0]], untimed: 0 };
        for bars in [many, one] {
            let svg = timeline(&bars);
            assert_inside(&svg, f64::from(WIDTH), f64::from(HEIGHT));
            assert_eq!(svg.matches("<g>").count(), bars.bars.len());
        }
        for counts in [[0, 0, 0, 0], [1, 2, 3, 4], [u64::MAX / 4, 1, 0, 0]] {
            assert_inside(&share(counts), f64::from(SHARE_WIDTH), f64::from(SHARE_HEIGHT));
        }
    }

    #[test]
    fn a_bars_height_is_its_count_over_the_tallest_and_its_tooltip_says_when_and_how_many() {
        let bars = Timeline {
            start: Some(at(0)),
            bucket: Duration::from_secs(10),
            bars: vec![[2, 0, 2, 0], [0, 1, 0, 0]],
            untimed: 0,
        };
        let svg = timeline(&bars);
        let plot = f64::from(HEIGHT - BOTTOM - TOP);
        let heights = numbers(&svg, "height");
        // The svg's own height, then the three rectangles: 2 allowed, 2 refused, 1 would-deny.
        assert_eq!(&heights[1..], [plot / 2.0, plot / 2.0, plot / 4.0].map(|h| (h * 10.0).round() / 10.0));
        assert!(svg.contains(&format!("<title>{} (+10s): 2 allowed, 2 refused</title>", clock(at(0)))), "{svg}");
        assert!(svg.contains(&format!("<title>{} (+10s): 1 would-deny</title>", clock(at(10)))), "{svg}");
    }

    #[test]
    fn an_empty_timeline_says_so() {
        let svg = timeline(&Timeline::default());
        assert!(svg.contains("no timed requests") && !svg.contains("<rect"), "{svg}");
        assert_inside(&svg, f64::from(WIDTH), f64::from(HEIGHT));
    }
}
