//! A small hand-written SVG line-chart renderer with deterministic output: fixed float
//! formatting, series in the order given, nothing that depends on time or the machine.
use std::fmt::Write as _;

/// Width and height of every chart, in SVG user units.
pub const WIDTH: f64 = 640.0;
/// See [`WIDTH`].
pub const HEIGHT: f64 = 360.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 56.0;
const BOTTOM: f64 = 52.0;

/// One line in a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text; also the group's `data-series` attribute.
    pub name: String,
    /// Stroke colour (`#rrggbb`).
    pub color: String,
    /// `(x, y)` points in x order; a `None` or non-finite `y` breaks the line.
    pub points: Vec<(f64, Option<f64>)>,
    /// Draw a marker at every point (otherwise only at points with no neighbour to join).
    pub markers: bool,
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// Label under the x axis.
    pub x_label: String,
    /// Label beside the y axis.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
    /// x values the axis must span besides the points' (e.g. every rollout).
    pub x_include: Vec<f64>,
    /// y values the axis must span besides the points' (e.g. 0 and 1 for rates).
    pub y_include: Vec<f64>,
    /// Whether y values are counts (integer ticks).
    pub y_integer: bool,
    /// Text shown across the plot area; "no data" is shown when it is `None` and no series
    /// has a point.
    pub note: Option<String>,
}

/// A linear axis: its domain and tick values.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// Lower end of the domain.
    pub lo: f64,
    /// Upper end of the domain (always above `lo`).
    pub hi: f64,
    /// Tick values inside the domain, ascending, multiples of one "nice" step.
    pub ticks: Vec<f64>,
    /// Decimals that tick labels need at that step.
    pub decimals: usize,
}

/// The smallest of 1, 2, 5 times a power of ten that is at least `raw` (> 0).
pub fn nice_step(raw: f64) -> f64 {
    let exp = raw.log10().floor();
    let base = 10f64.powf(exp);
    let f = raw / base;
    let nf = if f <= 1.0 + 1e-9 {
        1.0
    } else if f <= 2.0 + 1e-9 {
        2.0
    } else if f <= 5.0 + 1e-9 {
        5.0
    } else {
        10.0
    };
    nf * base
}

/// An axis over `[lo, hi]` with at most about `max_ticks` ticks at a nice step (at least 1
/// when `integer`). With `snap`, the domain grows to the nearest ticks outside it. A
/// degenerate range `[v, v]` becomes `[0, 1]` for `v == 0`, else `v ± |v|/2`; a non-finite
/// or reversed one becomes `[0, 1]`.
pub fn axis(lo: f64, hi: f64, max_ticks: usize, integer: bool, snap: bool) -> Axis {
    let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() && lo <= hi {
        (lo, hi)
    } else {
        (0.0, 1.0)
    };
    if hi - lo <= 1e-12 * lo.abs().max(1.0) {
        if lo == 0.0 {
            hi = 1.0;
        } else {
            let pad = lo.abs() / 2.0;
            (lo, hi) = (lo - pad, lo + pad);
        }
    }
    let mut step = nice_step((hi - lo) / max_ticks.max(2).saturating_sub(1) as f64);
    if integer {
        step = step.max(1.0);
    }
    if snap {
        lo = (lo / step + 1e-9).floor() * step;
        hi = (hi / step - 1e-9).ceil() * step;
    }
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    let ticks = (first..=last).map(|k| k as f64 * step).collect();
    let decimals = if step >= 1.0 - 1e-9 {
        0
    } else {
        (-step.log10() - 1e-9).ceil() as usize
    };
    Axis {
        lo,
        hi,
        ticks,
        decimals,
    }
}

/// `v` with `decimals` decimals, never `-0`.
pub fn num(v: f64, decimals: usize) -> String {
    let s = format!("{v:.decimals$}");
    match s.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => s,
    }
}

/// Escapes text for XML and HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            _ => out.push(c),
        }
    }
    out
}

fn finite(y: Option<f64>) -> Option<f64> {
    y.filter(|v| v.is_finite())
}

/// Renders `chart` as a standalone SVG document.
pub fn render(chart: &Chart) -> String {
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM);
    let points = || {
        chart
            .series
            .iter()
            .flat_map(|s| &s.points)
            .filter(|(x, y)| x.is_finite() && finite(*y).is_some())
    };
    let xs: Vec<f64> = points()
        .map(|(x, _)| *x)
        .chain(chart.x_include.iter().copied().filter(|x| x.is_finite()))
        .collect();
    let ys: Vec<f64> = points()
        .filter_map(|(_, y)| *y)
        .chain(chart.y_include.iter().copied().filter(|y| y.is_finite()))
        .collect();
    let (mut xlo, mut xhi) = min_max(&xs).unwrap_or((0.0, 1.0));
    if xhi - xlo < 1e-12 {
        // One rollout: centre it.
        (xlo, xhi) = (xlo - 0.5, xhi + 0.5);
    }
    let xa = axis(xlo, xhi, 8, true, false);
    let (ylo, yhi) = min_max(&ys).unwrap_or((0.0, 1.0));
    let ya = axis(ylo, yhi, 6, chart.y_integer, true);
    let sx = |x: f64| x0 + (x - xa.lo) / (xa.hi - xa.lo) * (x1 - x0);
    let sy = |y: f64| y1 - (y - ya.lo) / (ya.hi - ya.lo) * (y1 - y0);
    let c = |v: f64| num(v, 2);

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#,
        w = WIDTH,
        h = HEIGHT
    );
    let title = escape(&chart.title);
    let _ = writeln!(out, "<title>{title}</title>");
    let _ = writeln!(
        out,
        r#"<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>"#
    );
    let _ = writeln!(
        out,
        r#"<text class="title" x="{}" y="24" text-anchor="middle" font-size="15" font-weight="bold">{title}</text>"#,
        c(WIDTH / 2.0)
    );
    // Grid and y ticks.
    out.push_str("<g class=\"y-ticks\">\n");
    for &t in &ya.ticks {
        let y = c(sy(t));
        let _ = writeln!(
            out,
            r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="#e6e6e6"/><text x="{}" y="{y}" dy="4" text-anchor="end">{}</text>"##,
            c(x0),
            c(x1),
            c(x0 - 6.0),
            num(t, ya.decimals)
        );
    }
    out.push_str("</g>\n<g class=\"x-ticks\">\n");
    for &t in &xa.ticks {
        let x = c(sx(t));
        let _ = writeln!(
            out,
            r##"<line x1="{x}" y1="{}" x2="{x}" y2="{}" stroke="#333"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"##,
            c(y1),
            c(y1 + 5.0),
            c(y1 + 18.0),
            num(t, xa.decimals)
        );
    }
    out.push_str("</g>\n");
    let _ = writeln!(
        out,
        r##"<path class="axes" d="M{} {}V{}H{}" fill="none" stroke="#333"/>"##,
        c(x0),
        c(y0),
        c(y1),
        c(x1)
    );
    let _ = writeln!(
        out,
        r#"<text class="x-label" x="{}" y="{}" text-anchor="middle">{}</text>"#,
        c((x0 + x1) / 2.0),
        c(HEIGHT - 12.0),
        escape(&chart.x_label)
    );
    let (lx, ly) = (c(16.0), c((y0 + y1) / 2.0));
    let _ = writeln!(
        out,
        r#"<text class="y-label" x="{lx}" y="{ly}" text-anchor="middle" transform="rotate(-90 {lx} {ly})">{}</text>"#,
        escape(&chart.y_label)
    );
    // Series: a polyline per run of present points, markers at lone points (or all).
    for s in &chart.series {
        let _ = writeln!(
            out,
            r#"<g class="series" data-series="{}" stroke="{color}" fill="{color}">"#,
            escape(&s.name),
            color = escape(&s.color)
        );
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new()];
        for &(x, y) in &s.points {
            match finite(y) {
                Some(y) if x.is_finite() => runs.last_mut().expect("a run").push((x, y)),
                _ => runs.push(Vec::new()),
            }
        }
        for run in runs.iter().filter(|r| !r.is_empty()) {
            if run.len() > 1 {
                let pts: Vec<String> = run
                    .iter()
                    .map(|&(x, y)| format!("{},{}", c(sx(x)), c(sy(y))))
                    .collect();
                let _ = writeln!(
                    out,
                    r#"<polyline points="{}" fill="none" stroke-width="2"/>"#,
                    pts.join(" ")
                );
            }
            if s.markers || run.len() == 1 {
                for &(x, y) in run {
                    let _ = writeln!(
                        out,
                        r#"<circle cx="{}" cy="{}" r="3.5" stroke="none"/>"#,
                        c(sx(x)),
                        c(sy(y))
                    );
                }
            }
        }
        out.push_str("</g>\n");
    }
    // Legend: one row between the title and the plot, right-aligned, when there is more
    // than one series (so it never hides data).
    if chart.series.len() > 1 {
        let widths: Vec<f64> = chart
            .series
            .iter()
            .map(|s| 22.0 + 7.0 * s.name.chars().count() as f64 + 14.0)
            .collect();
        let mut lx = x1 - widths.iter().sum::<f64>() + 14.0;
        let y = c(TOP - 12.0);
        out.push_str("<g class=\"legend\">\n");
        for (s, w) in chart.series.iter().zip(&widths) {
            let _ = writeln!(
                out,
                r#"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{color}" stroke-width="2"/><text x="{}" y="{y}" dy="4">{}</text>"#,
                c(lx),
                c(lx + 16.0),
                c(lx + 22.0),
                escape(&s.name),
                color = escape(&s.color)
            );
            lx += w;
        }
        out.push_str("</g>\n");
    }
    let note = match &chart.note {
        Some(n) => Some(n.as_str()),
        None if points().next().is_none() => Some("no data"),
        None => None,
    };
    if let Some(n) = note {
        let _ = writeln!(
            out,
            r##"<text class="note" x="{}" y="{}" text-anchor="middle" fill="#666" font-size="14">{}</text>"##,
            c((x0 + x1) / 2.0),
            c((y0 + y1) / 2.0),
            escape(n)
        );
    }
    out.push_str("</svg>\n");
    out
}

fn min_max(xs: &[f64]) -> Option<(f64, f64)> {
    let lo = xs.iter().copied().reduce(f64::min)?;
    let hi = xs.iter().copied().reduce(f64::max)?;
    Some((lo, hi))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps_are_one_two_or_five_times_a_power_of_ten() {
        for (raw, step) in [
            (0.2, 0.2),
            (0.074, 0.1),
            (1.4, 2.0),
            (3.0, 5.0),
            (7.0, 10.0),
            (130.0, 200.0),
            (1.0, 1.0),
        ] {
            assert!((nice_step(raw) - step).abs() < 1e-12, "{raw} -> {step}");
        }
    }

    #[test]
    fn rates_get_ticks_every_fifth() {
        let a = axis(0.0, 1.0, 6, false, true);
        assert_eq!((a.lo, a.hi, a.decimals), (0.0, 1.0, 1));
        let labels: Vec<String> = a.ticks.iter().map(|t| num(*t, a.decimals)).collect();
        assert_eq!(labels, ["0.0", "0.2", "0.4", "0.6", "0.8", "1.0"]);
    }

    #[test]
    fn snapping_grows_the_domain_to_the_next_tick() {
        let a = axis(0.0, 0.37, 6, false, true);
        assert_eq!(a.ticks.len(), 5);
        assert!((a.hi - 0.4).abs() < 1e-12);
        assert_eq!(num(a.ticks[3], a.decimals), "0.3");
        let b = axis(0.0, 7.0, 6, true, true);
        assert_eq!(
            (b.hi, b.ticks.clone(), b.decimals),
            (8.0, vec![0.0, 2.0, 4.0, 6.0, 8.0], 0)
        );
        let n = axis(-0.03, 0.12, 6, false, true);
        assert_eq!(
            n.ticks
                .iter()
                .map(|t| num(*t, n.decimals))
                .collect::<Vec<_>>(),
            ["-0.05", "0.00", "0.05", "0.10", "0.15"]
        );
    }

    #[test]
    fn integer_axes_never_tick_between_integers_and_keep_their_domain_unsnapped() {
        let a = axis(-0.5, 0.5, 8, true, false);
        assert_eq!((a.lo, a.hi, a.ticks.clone()), (-0.5, 0.5, vec![0.0]));
        let b = axis(0.0, 11.0, 8, true, false);
        assert_eq!(b.hi, 11.0);
        assert_eq!(b.ticks, vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
    }

    #[test]
    fn degenerate_and_non_finite_ranges_get_a_usable_domain() {
        let z = axis(0.0, 0.0, 6, false, true);
        assert_eq!((z.lo, z.hi), (0.0, 1.0));
        let v = axis(4.0, 4.0, 6, false, true);
        assert!(v.lo <= 2.0 && v.hi >= 6.0, "{v:?}");
        let bad = axis(f64::NAN, 1.0, 6, false, true);
        assert_eq!((bad.lo, bad.hi), (0.0, 1.0));
    }

    #[test]
    fn numbers_never_print_as_negative_zero() {
        assert_eq!(num(-0.0001, 2), "0.00");
        assert_eq!(num(-0.0, 0), "0");
        assert_eq!(num(-0.5, 1), "-0.5");
    }

    fn chart(points: Vec<(f64, Option<f64>)>) -> Chart {
        Chart {
            title: "T <&>".into(),
            x_label: "Rollout".into(),
            y_label: "y".into(),
            series: vec![Series {
                name: "s".into(),
                color: "#123456".into(),
                points,
                markers: false,
            }],
            x_include: vec![],
            y_include: vec![0.0, 1.0],
            y_integer: false,
            note: None,
        }
    }

    #[test]
    fn missing_values_break_the_line_and_lone_points_get_a_marker() {
        let svg = render(&chart(vec![
            (0.0, Some(0.1)),
            (1.0, Some(0.2)),
            (2.0, None),
            (3.0, Some(f64::NAN)),
            (4.0, Some(0.5)),
            (5.0, None),
            (6.0, Some(0.7)),
            (7.0, Some(0.8)),
            (8.0, Some(0.9)),
        ]));
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
        assert_eq!(svg.matches("<circle").count(), 1, "{svg}");
        assert!(svg.contains("T &lt;&amp;&gt;"));
        assert!(!svg.contains("no data"));
        assert!(!svg.contains("class=\"legend\""), "one series, no legend");
    }

    #[test]
    fn a_single_point_is_a_centred_marker_and_no_points_say_no_data() {
        let svg = render(&chart(vec![(3.0, Some(0.5))]));
        assert!(!svg.contains("<polyline"));
        // Centre of the plot: x = (64 + 624) / 2, y = (56 + 308) / 2.
        assert!(svg.contains(r#"<circle cx="344.00" cy="182.00""#), "{svg}");
        let empty = render(&chart(vec![(0.0, None)]));
        assert!(empty.contains("no data"));
        assert_eq!(render(&chart(vec![(3.0, Some(0.5))])), svg, "deterministic");
    }
}
