//! `index.html`: one self-contained page with the charts inline and the environment tables;
//! every link is relative, so the report directory can be moved with its run directory.
use std::fmt::Write as _;

use super::envs::EnvSummary;
use super::links::encode;
use super::summary::{Summary, opt};
use super::svg::escape;

/// What the page shows.
pub struct Page<'a> {
    /// The run directory as the user named it (shown, not linked).
    pub run_name: &'a str,
    /// Prefix from the report directory to the run directory (`../`).
    pub prefix: &'a str,
    /// Files of the run directory to link at the top (those that exist).
    pub run_files: &'a [&'a str],
    /// Headline numbers.
    pub summary: &'a Summary,
    /// Chart file names and their SVG text.
    pub charts: &'a [(String, String)],
    /// Best environments, best first.
    pub best: &'a [EnvSummary],
    /// Worst environments, worst first.
    pub worst: &'a [EnvSummary],
    /// Environments played over the run.
    pub envs_played: usize,
    /// Problems found while reading the run.
    pub warnings: &'a [String],
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}\
table{border-collapse:collapse;margin:0.5em 0 1.5em}th,td{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}\
td.n{text-align:right}figure{margin:1em 0}svg{max-width:100%;height:auto}.warn{color:#a40}code{background:#f4f4f4}";

fn link(prefix: &str, rel: &str, text: &str) -> String {
    format!(
        "<a href=\"{}\">{}</a>",
        escape(&encode(&format!("{prefix}{rel}"))),
        escape(text)
    )
}

/// Renders the page.
pub fn render(page: &Page) -> String {
    let s = page.summary;
    let p = page.prefix;
    let mut out = String::new();
    let title = format!("spade report: {}", page.run_name);
    let _ = writeln!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>",
        escape(&title)
    );
    let _ = writeln!(out, "<h1>{}</h1>", escape(&title));
    let files: Vec<String> = page.run_files.iter().map(|f| link(p, f, f)).collect();
    let _ = writeln!(out, "<p>Run files: {}.</p>", files.join(", "));
    for w in page.warnings {
        let _ = writeln!(out, "<p class=\"warn\">warning: {}</p>", escape(w));
    }
    out.push_str("<h2>Summary</h2>\n<table id=\"summary\">\n");
    let rows: [(&str, String); 10] = [
        (
            "Rollouts",
            format!("{} ({}..{})", s.rollouts, s.first_rollout, s.last_rollout),
        ),
        ("Last win rate without hint", opt(s.last_win_rate, 3)),
        ("Last win rate with hint", opt(s.last_win_rate_hint, 3)),
        ("Last regret", opt(s.last_regret, 3)),
        ("Mean regret over rollouts", opt(s.mean_regret, 3)),
        ("Last pool size", opt(s.last_pool_size, 0)),
        ("Last loss", opt(s.last_loss, 4)),
        (
            "Valid designs",
            format!(
                "{} of {} over {} design rounds",
                s.valid, s.designs, s.design_rounds
            ),
        ),
        ("Timed-out games", s.timeouts.to_string()),
        ("Environments played", page.envs_played.to_string()),
    ];
    for (k, v) in rows {
        let _ = writeln!(out, "<tr><th>{k}</th><td>{}</td></tr>", escape(&v));
    }
    for r in &s.difficulty {
        let _ = writeln!(
            out,
            "<tr><th>Difficulty reached: {}</th><td>{} (window [{}, {}]; highest played {})</td></tr>",
            escape(&r.env),
            r.high,
            r.low,
            r.high,
            r.max_played
        );
    }
    out.push_str("</table>\n<h2>Charts</h2>\n");
    for (file, svg) in page.charts {
        let id = file.trim_end_matches(".svg");
        let _ = writeln!(
            out,
            "<figure id=\"{}\">\n{svg}<figcaption>{}</figcaption>\n</figure>",
            escape(id),
            link("", file, file)
        );
    }
    table(
        &mut out,
        "best",
        "Best environments",
        "Highest mean regret first: the edge of the agent's ability (environments that timed out come last).",
        page.best,
        p,
    );
    table(
        &mut out,
        "worst",
        "Worst environments",
        "Timed out or lowest mean regret first; environments already in the best table are left out.",
        page.worst,
        p,
    );
    out.push_str(
        "<p>Replay a trajectory with <code>spade replay FILE</code>.</p>\n</body>\n</html>\n",
    );
    out
}

fn table(out: &mut String, id: &str, title: &str, note: &str, envs: &[EnvSummary], p: &str) {
    let _ = writeln!(out, "<h2>{title}</h2>\n<p>{}</p>", escape(note));
    if envs.is_empty() {
        let _ = writeln!(out, "<p id=\"{id}\">None.</p>");
        return;
    }
    let _ = writeln!(
        out,
        "<table id=\"{id}\">\n<tr><th>#</th><th>Env</th><th>Skill</th><th>Class</th><th>Origin</th><th>Played</th><th>Mean regret</th><th>Win</th><th>Win with hint</th><th>Timeouts</th><th>Design</th><th>Trajectories</th></tr>"
    );
    for (i, e) in envs.iter().enumerate() {
        let (class, origin, banned) = match &e.pool {
            Some(info) => (info.class_name.as_str(), info.origin.as_str(), info.banned),
            None => ("-", "-", false),
        };
        let design = e
            .design_file
            .as_deref()
            .map_or_else(|| "-".to_string(), |f| link(p, f, "design"));
        let trajectories = if e.trajectories.is_empty() {
            "none".to_string()
        } else {
            let links: Vec<String> = e
                .trajectories
                .iter()
                .map(|t| {
                    let label = t.strip_prefix("trajectories/").unwrap_or(t);
                    link(p, t, label.trim_end_matches(".jsonl"))
                })
                .collect();
            let n = e.trajectories.len();
            format!(
                "<details><summary>{n} file{}</summary>{}</details>",
                if n == 1 { "" } else { "s" },
                links.join("<br>")
            )
        };
        let played = if e.first_rollout == e.last_rollout {
            format!("{} (rollout {})", e.played, e.first_rollout)
        } else {
            format!(
                "{} (rollouts {}..{})",
                e.played, e.first_rollout, e.last_rollout
            )
        };
        let timeouts = if banned {
            format!("{} (banned)", e.timeouts)
        } else {
            e.timeouts.to_string()
        };
        let _ = writeln!(
            out,
            "<tr data-env=\"{id_}\"><td class=\"n\">{}</td><td>{id_}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{design}</td><td>{trajectories}</td></tr>",
            i + 1,
            escape(&e.skill),
            escape(class),
            escape(origin),
            escape(&played),
            opt(e.mean_regret, 3),
            opt(e.mean_win_rate, 3),
            opt(e.mean_win_rate_hint, 3),
            escape(&timeouts),
            id_ = escape(&e.id),
        );
    }
    out.push_str("</table>\n");
}
