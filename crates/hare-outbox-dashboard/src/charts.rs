//! The page's charts, drawn on the server as one SVG image from the journal's timeline: no
//! script, no external library. Every text in them is escaped.

use std::fmt::Write as _;

use hare_outbox_core::journal::TimelineBucket;

const WIDTH: f64 = 360.0;
const HEIGHT: f64 = 110.0;
const TOP: f64 = 16.0;
const BOTTOM: f64 = 16.0;
const LEFT: f64 = 4.0;

/// One line of a chart.
struct Series {
    label: &'static str,
    colour: &'static str,
    values: Vec<Option<f64>>,
}

/// A panel's title, caption, series and unit.
struct Panel {
    title: &'static str,
    caption: String,
    series: Vec<Series>,
    unit: &'static str,
}

const MUTED: &str = "#6b7280";
const GAP: f64 = 16.0;

/// The page's charts as one SVG image (served as `charts.svg`, so the table never waits for
/// them): backlog, delivery rate (published and dead-lettered per bucket) and latency (p50 and
/// p95, ms). Colours are presentation attributes, not CSS, so the image needs no style sheet.
pub(crate) fn charts_svg(buckets: &[TimelineBucket]) -> String {
    let seconds = buckets
        .first()
        .map_or(60, |b| (b.end - b.start).num_seconds());
    let per = if seconds == 60 {
        "per minute".to_owned()
    } else {
        format!("per {seconds} s")
    };
    let panels = [
        Panel {
            title: "Backlog",
            caption: "events still to deliver".to_owned(),
            series: vec![Series {
                label: "backlog",
                colour: "#b7791f",
                values: buckets.iter().map(|b| Some(b.backlog as f64)).collect(),
            }],
            unit: "",
        },
        Panel {
            title: "Delivery rate",
            caption: format!("events {per}"),
            series: vec![
                Series {
                    label: "published",
                    colour: "#1f8f4e",
                    values: buckets.iter().map(|b| Some(b.published as f64)).collect(),
                },
                Series {
                    label: "dead",
                    colour: "#c53030",
                    values: buckets
                        .iter()
                        .map(|b| Some(b.dead_lettered as f64))
                        .collect(),
                },
            ],
            unit: "",
        },
        Panel {
            title: "Delivery latency",
            caption: "created → published".to_owned(),
            series: vec![
                Series {
                    label: "p50",
                    colour: "#2f6fde",
                    values: buckets.iter().map(|b| b.latency_p50_ms).collect(),
                },
                Series {
                    label: "p95",
                    colour: "#8a4fd8",
                    values: buckets.iter().map(|b| b.latency_p95_ms).collect(),
                },
            ],
            unit: " ms",
        },
    ];
    let span = span_label(buckets);
    let total = 3.0 * WIDTH + 2.0 * GAP;
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {total} {h}" width="{total}" height="{h}" font-family="system-ui, sans-serif">"##,
        h = HEIGHT + 18.0
    );
    for (i, panel) in panels.iter().enumerate() {
        let _ = write!(
            out,
            r##"<g transform="translate({x},0)"><text x="{LEFT}" y="13" font-size="13" font-weight="600" fill="#1d2330">{}</text><g transform="translate(0,18)">{}</g></g>"##,
            escape(panel.title),
            plot(&panel.caption, &span, &panel.series, panel.unit),
            x = i as f64 * (WIDTH + GAP)
        );
    }
    out.push_str("</svg>");
    out
}

/// The SVG image shown instead of the charts when the timeline cannot be read.
pub(crate) fn unavailable_svg(reason: &str) -> String {
    let reason: String = reason.chars().take(200).collect();
    format!(
        r##"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {w} 24" width="{w}" height="24" font-family="system-ui, sans-serif"><text x="4" y="16" font-size="12" fill="{MUTED}">charts unavailable: {}</text></svg>"##,
        escape(&reason),
        w = 3.0 * WIDTH + 2.0 * GAP
    )
}

fn span_label(buckets: &[TimelineBucket]) -> String {
    match (buckets.first(), buckets.last()) {
        (Some(first), Some(last)) => format!(
            "{} – {} UTC",
            first.start.format("%H:%M"),
            last.end.format("%H:%M")
        ),
        _ => String::new(),
    }
}

/// One panel's plot: a polyline per series (gaps where a value is missing), the largest value
/// at the top left, the legend and the time span at the bottom.
fn plot(caption: &str, span: &str, series: &[Series], unit: &str) -> String {
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0_f64, |m, v| m.max(*v));
    let scale = if max > 0.0 { max } else { 1.0 };
    let plot_h = HEIGHT - TOP - BOTTOM;
    let mut out = String::new();
    let _ = write!(
        out,
        r##"<rect x="0.5" y="0.5" width="{}" height="{}" fill="none" stroke="#e2e5ea" rx="4"/>"##,
        WIDTH - 1.0,
        HEIGHT - 1.0
    );
    let _ = write!(
        out,
        r##"<line x1="{LEFT}" y1="{y}" x2="{x2}" y2="{y}" stroke="#e2e5ea"/>"##,
        y = TOP + plot_h,
        x2 = WIDTH - LEFT
    );
    for s in series {
        let n = s.values.len().max(2) as f64 - 1.0;
        let step = (WIDTH - 2.0 * LEFT) / n;
        let mut run: Vec<String> = Vec::new();
        let flush = |run: &mut Vec<String>, out: &mut String| {
            if run.len() == 1 {
                run.push(run[0].clone());
            }
            if !run.is_empty() {
                let _ = write!(
                    out,
                    r##"<polyline points="{}" fill="none" stroke="{}" stroke-width="1.6"/>"##,
                    run.join(" "),
                    s.colour
                );
            }
            run.clear();
        };
        for (i, value) in s.values.iter().enumerate() {
            match value {
                Some(v) => {
                    let x = LEFT + step * i as f64;
                    let y = TOP + plot_h - (v / scale) * plot_h;
                    run.push(format!("{x:.1},{y:.1}"));
                }
                None => flush(&mut run, &mut out),
            }
        }
        flush(&mut run, &mut out);
    }
    let _ = write!(
        out,
        r##"<text x="{LEFT}" y="12" font-size="10" fill="{MUTED}">max {}{} · {}</text>"##,
        number(max),
        escape(unit),
        escape(caption)
    );
    let mut x = LEFT;
    for s in series {
        let _ = write!(
            out,
            r##"<text x="{x:.0}" y="{}" font-size="10" font-weight="600" fill="{}">{}</text>"##,
            HEIGHT - 4.0,
            s.colour,
            escape(s.label)
        );
        x += 7.0 * s.label.len() as f64 + 12.0;
    }
    let _ = write!(
        out,
        r##"<text x="{}" y="{}" font-size="10" fill="{MUTED}" text-anchor="end">{}</text>"##,
        WIDTH - LEFT,
        HEIGHT - 4.0,
        escape(span)
    );
    out
}

fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_gaps_and_the_maximum() {
        let svg = plot(
            "latency",
            "10:00 – 11:00 UTC",
            &[Series {
                label: "p50",
                colour: "#000",
                values: vec![Some(1.0), None, Some(3.0), Some(2.0)],
            }],
            " ms",
        );
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert!(svg.contains("max 3 ms"), "{svg}");
    }

    #[test]
    fn three_panels_in_one_image_and_escaped_errors() {
        let svg = charts_svg(&[]);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(svg.matches("<rect").count(), 3);
        let svg = unavailable_svg("<b>down</b>");
        assert!(svg.contains("&lt;b&gt;down"), "{svg}");
    }
}
