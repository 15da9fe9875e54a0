//! `spade report`: charts and environment tables for a run directory of `spade train`.
//!
//! Reads `metrics.jsonl` (and, when present, the latest checkpoint's pool and the trajectory
//! and design files) and writes `win_rate.svg`, `regret.svg`, `validity.svg`,
//! `pool_size.svg` and a self-contained `index.html` into the report directory. The output
//! depends only on the run's files: no timestamps, fixed float formatting.
pub mod charts;
pub mod envs;
pub mod error;
pub mod html;
pub mod links;
pub mod metrics;
pub mod summary;
pub mod svg;

use std::path::{Path, PathBuf};

pub use envs::EnvSummary;
pub use error::ReportError;
pub use summary::Summary;
use summary::opt;

use crate::state::{self, RunState};

/// Where to write and how much to show.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    /// Report directory (default: `RUN/report`).
    pub out: Option<PathBuf>,
    /// Environments per table (best and worst).
    pub top: usize,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self { out: None, top: 5 }
    }
}

/// What [`write_report`] found and wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    /// The run directory.
    pub run: PathBuf,
    /// The report directory.
    pub out: PathBuf,
    /// Headline numbers.
    pub summary: Summary,
    /// Environments played over the run.
    pub envs_played: usize,
    /// Best environments, best first.
    pub best: Vec<EnvSummary>,
    /// Worst environments, worst first.
    pub worst: Vec<EnvSummary>,
    /// Files written: the charts, then `index.html`.
    pub files: Vec<PathBuf>,
    /// Problems that did not stop the report (no checkpoint, an unfinished last line).
    pub warnings: Vec<String>,
}

/// Reads the run in `run` and writes its report. Each file is written through a temporary
/// file and a rename; `index.html` comes last.
pub fn write_report(run: &Path, options: &ReportOptions) -> Result<Report, ReportError> {
    let metrics = metrics::read_metrics(run)?;
    let mut warnings = Vec::new();
    if metrics.skipped_partial_line {
        warnings.push(format!(
            "{}: skipped an unfinished last line (a rollout still being written)",
            metrics.path.display()
        ));
    }
    let state = latest_state(run, &mut warnings);
    let out = options.out.clone().unwrap_or_else(|| run.join("report"));
    std::fs::create_dir_all(&out).map_err(|e| {
        ReportError::io(
            format!("creating the report directory {}", out.display()),
            e,
        )
    })?;
    let prefix = links::relative_prefix(&out, run).unwrap_or_else(|| {
        let abs = run.canonicalize().unwrap_or_else(|_| run.to_path_buf());
        format!("{}/", abs.display())
    });

    let mut all = envs::aggregate(&metrics.rows);
    let envs_played = all.len();
    let mut trajectories = envs::trajectory_files(run)?;
    envs::attach_files(&mut all, run, state.as_ref(), &mut trajectories);
    let (best, worst) = envs::rank(all, options.top);

    let mut files = Vec::new();
    let mut svgs = Vec::new();
    for named in charts::charts(&metrics.rows) {
        let text = svg::render(&named.chart);
        let path = out.join(named.file);
        state::write_atomic(&path, text.as_bytes())?;
        files.push(path);
        svgs.push((named.file.to_string(), text));
    }
    let summary = Summary::of(&metrics.rows);
    let run_files: Vec<&str> = ["config.json", "metrics.jsonl", "checkpoints/"]
        .into_iter()
        .filter(|f| run.join(f).exists())
        .collect();
    let page = html::Page {
        run_files: &run_files,
        run_name: &run.display().to_string(),
        prefix: &prefix,
        summary: &summary,
        charts: &svgs,
        best: &best,
        worst: &worst,
        envs_played,
        warnings: &warnings,
    };
    let index = out.join("index.html");
    state::write_atomic(&index, html::render(&page).as_bytes())?;
    files.push(index);
    Ok(Report {
        run: run.to_path_buf(),
        out,
        summary,
        envs_played,
        best,
        worst,
        files,
        warnings,
    })
}

/// The latest checkpoint's state, or `None` with a warning saying why.
fn latest_state(run: &Path, warnings: &mut Vec<String>) -> Option<RunState> {
    let Some(ckpt) = state::latest_checkpoint(run) else {
        warnings.push(format!(
            "no complete checkpoint in {}: class and origin are not shown",
            state::checkpoints_dir(run).display()
        ));
        return None;
    };
    match state::load_state(&ckpt) {
        Ok(st) => Some(st),
        Err(err) => {
            warnings.push(format!(
                "cannot read the latest checkpoint ({err}): class and origin are not shown"
            ));
            None
        }
    }
}

impl Report {
    /// A few lines for the terminal: rollouts, the last rollout's numbers, mean regret, the
    /// best environment and the files written.
    pub fn summary_lines(&self) -> Vec<String> {
        let s = &self.summary;
        let mut lines = vec![
            format!(
                "report on {}: {} rollouts ({}..{}), {} environments played",
                self.run.display(),
                s.rollouts,
                s.first_rollout,
                s.last_rollout,
                self.envs_played
            ),
            format!(
                "last rollout {}: win rate {} without hint, {} with; regret {}; pool {}",
                s.last_rollout,
                opt(s.last_win_rate, 3),
                opt(s.last_win_rate_hint, 3),
                opt(s.last_regret, 3),
                opt(s.last_pool_size, 0)
            ),
            format!(
                "mean regret over rollouts {}; {} of {} designs valid over {} design rounds; {} timeouts",
                opt(s.mean_regret, 3),
                s.valid,
                s.designs,
                s.design_rounds,
                s.timeouts
            ),
        ];
        if !s.difficulty.is_empty() {
            let reached: Vec<String> = s
                .difficulty
                .iter()
                .map(|r| format!("{} {} (window [{}, {}])", r.env, r.high, r.low, r.high))
                .collect();
            lines.push(format!("difficulty reached: {}", reached.join("; ")));
        }
        if let Some(b) = self.best.first() {
            lines.push(format!(
                "best environment: {} (mean regret {}, played in {} rollout{})",
                b.id,
                opt(b.mean_regret, 3),
                b.played,
                if b.played == 1 { "" } else { "s" }
            ));
        }
        // index.html (written last) first: it is the file to open.
        if let Some((index, charts)) = self.files.split_last() {
            lines.push(format!("wrote {}", index.display()));
            for f in charts {
                lines.push(format!("wrote {}", f.display()));
            }
        }
        lines
    }
}
