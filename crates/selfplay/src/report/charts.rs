//! The report's charts, built from metrics rows.
use super::metrics::RolloutRow;
use super::svg::{Chart, Series};

/// Colour of the no-hint win rate (and of single-series charts).
const BLUE: &str = "#1f77b4";
/// Colour of the with-hint win rate.
const ORANGE: &str = "#ff7f0e";

/// A chart and the file it is written to.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedChart {
    /// File name inside the report directory (`win_rate.svg`).
    pub file: &'static str,
    /// The chart.
    pub chart: Chart,
}

fn series(name: &str, color: &str, points: Vec<(f64, Option<f64>)>, markers: bool) -> Series {
    Series {
        name: name.into(),
        color: color.into(),
        points,
        markers,
    }
}

fn chart(title: &str, y_label: &str, rows: &[RolloutRow], series: Vec<Series>) -> Chart {
    Chart {
        title: title.into(),
        x_label: "Rollout".into(),
        y_label: y_label.into(),
        series,
        x_include: rows.iter().map(|r| r.rollout as f64).collect(),
        y_include: vec![0.0],
        y_integer: false,
        note: None,
    }
}

/// The charts over rollouts: win rate without and with the hint, regret, validity rate
/// (rollouts that designed only), pool size, and for fixed-env training the difficulty each
/// environment reached.
pub fn charts(rows: &[RolloutRow]) -> Vec<NamedChart> {
    let over = |f: fn(&RolloutRow) -> Option<f64>| -> Vec<(f64, Option<f64>)> {
        rows.iter().map(|r| (r.rollout as f64, f(r))).collect()
    };
    let mut win = chart(
        "Win rate without and with the hint",
        "Win rate",
        rows,
        vec![
            series("without hint", BLUE, over(|r| r.win_rate), false),
            series("with hint", ORANGE, over(|r| r.win_rate_hint), false),
        ],
    );
    win.y_include = vec![0.0, 1.0];
    let regret = chart(
        "Mean regret of played environments",
        "Regret",
        rows,
        vec![series("regret", BLUE, over(|r| r.regret), false)],
    );
    let designed: Vec<(f64, Option<f64>)> = rows
        .iter()
        .filter(|r| r.designed)
        .map(|r| (r.rollout as f64, r.validity_rate))
        .collect();
    let mut validity = chart(
        "Validity rate of designs (rollouts that designed)",
        "Valid / designed",
        rows,
        vec![series("validity rate", BLUE, designed.clone(), true)],
    );
    validity.y_include = vec![0.0, 1.0];
    if designed.is_empty() {
        validity.note = Some("no rollout designed environments".into());
    }
    let mut pool = chart(
        "Playable pool size",
        "Environments",
        rows,
        vec![series("pool size", BLUE, over(|r| r.pool_size), false)],
    );
    pool.y_integer = true;
    let mut named = vec![
        NamedChart {
            file: "win_rate.svg",
            chart: win,
        },
        NamedChart {
            file: "regret.svg",
            chart: regret,
        },
        NamedChart {
            file: "validity.svg",
            chart: validity,
        },
        NamedChart {
            file: "pool_size.svg",
            chart: pool,
        },
    ];
    if let Some(chart) = difficulty(rows) {
        named.push(NamedChart {
            file: "difficulty.svg",
            chart,
        });
    }
    named
}

/// Colours of the difficulty chart's environments, in turn.
const PALETTE: [&str; 8] = [
    BLUE, ORANGE, "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// Fixed-env training: each environment's highest difficulty over rollouts (a gap where it
/// was not played). `None` for a self-play run.
fn difficulty(rows: &[RolloutRow]) -> Option<Chart> {
    let mut envs: Vec<&str> = rows
        .iter()
        .flat_map(|r| r.fixed.iter().map(|f| f.env.as_str()))
        .collect();
    envs.sort_unstable();
    envs.dedup();
    if envs.is_empty() {
        return None;
    }
    let lines = envs
        .iter()
        .enumerate()
        .map(|(k, env)| {
            let points = rows
                .iter()
                .map(|r| {
                    let high = r
                        .fixed
                        .iter()
                        .find(|f| f.env == *env)
                        .map(|f| f.high as f64);
                    (r.rollout as f64, high)
                })
                .collect();
            series(env, PALETTE[k % PALETTE.len()], points, true)
        })
        .collect();
    let mut c = chart(
        "Highest difficulty reached per fixed environment",
        "Difficulty",
        rows,
        lines,
    );
    c.y_integer = true;
    Some(c)
}
