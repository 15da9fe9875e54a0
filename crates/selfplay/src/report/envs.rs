//! Per-environment aggregation over all rollouts, ranking by regret, and the files (design
//! record, trajectories) that belong to each environment.
use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::path::Path;

use super::error::ReportError;
use super::metrics::RolloutRow;
use crate::state::RunState;

/// What the latest checkpoint's pool says about an environment.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolInfo {
    /// Class name found by validation.
    pub class_name: String,
    /// `designed`, `seed:<name>` (a starter environment) or `fixed:<name>`.
    pub origin: String,
    /// Difficulty.
    pub difficulty: String,
    /// Whether it is banned after a timeout.
    pub banned: bool,
}

/// One environment's record over the whole run.
#[derive(Debug, Clone, PartialEq)]
pub struct EnvSummary {
    /// Pool id (`env00012`).
    pub id: String,
    /// Target skill (from its last metrics entry).
    pub skill: String,
    /// Rollouts that played it.
    pub played: usize,
    /// Mean regret over those rollouts (`None` when no entry had a number).
    pub mean_regret: Option<f64>,
    /// Mean win rate without the hint.
    pub mean_win_rate: Option<f64>,
    /// Mean win rate with the hint.
    pub mean_win_rate_hint: Option<f64>,
    /// Rollouts in which a play timed out.
    pub timeouts: usize,
    /// First rollout that played it.
    pub first_rollout: u64,
    /// Last rollout that played it.
    pub last_rollout: u64,
    /// From the latest checkpoint, when it lists the environment.
    pub pool: Option<PoolInfo>,
    /// Its design record, relative to the run directory, when the file exists.
    pub design_file: Option<String>,
    /// Its trajectory files, relative to the run directory, by rollout then name.
    pub trajectories: Vec<String>,
}

#[derive(Default)]
struct Acc {
    skill: String,
    played: usize,
    regret: Vec<f64>,
    win: Vec<f64>,
    win_hint: Vec<f64>,
    timeouts: usize,
    first: u64,
    last: u64,
}

fn mean(xs: &[f64]) -> Option<f64> {
    (!xs.is_empty()).then(|| xs.iter().sum::<f64>() / xs.len() as f64)
}

fn push(xs: &mut Vec<f64>, v: Option<f64>) {
    if let Some(v) = v.filter(|v| v.is_finite()) {
        xs.push(v);
    }
}

/// Aggregates every rollout's `envs` entries per env id (missing and non-finite numbers are
/// left out of the means). Sorted by id; pool info and files are left empty.
pub fn aggregate(rows: &[RolloutRow]) -> Vec<EnvSummary> {
    let mut acc: BTreeMap<&str, Acc> = BTreeMap::new();
    for row in rows {
        for e in &row.envs {
            let a = acc.entry(&e.id).or_insert_with(|| Acc {
                first: row.rollout,
                ..Acc::default()
            });
            a.skill.clone_from(&e.skill);
            a.played += 1;
            push(&mut a.regret, e.regret);
            push(&mut a.win, e.win_rate);
            push(&mut a.win_hint, e.win_rate_hint);
            a.timeouts += usize::from(e.timeout);
            a.first = a.first.min(row.rollout);
            a.last = a.last.max(row.rollout);
        }
    }
    acc.into_iter()
        .map(|(id, a)| EnvSummary {
            id: id.to_string(),
            skill: a.skill,
            played: a.played,
            mean_regret: mean(&a.regret),
            mean_win_rate: mean(&a.win),
            mean_win_rate_hint: mean(&a.win_hint),
            timeouts: a.timeouts,
            first_rollout: a.first,
            last_rollout: a.last,
            pool: None,
            design_file: None,
            trajectories: Vec::new(),
        })
        .collect()
}

/// Best first: environments that never timed out before those that did, then higher mean
/// regret (the edge of the agent's ability; no regret number counts lowest), then id.
pub fn compare(a: &EnvSummary, b: &EnvSummary) -> Ordering {
    let regret = |e: &EnvSummary| e.mean_regret.unwrap_or(f64::NEG_INFINITY);
    (a.timeouts > 0)
        .cmp(&(b.timeouts > 0))
        .then_with(|| regret(b).total_cmp(&regret(a)))
        .then_with(|| a.id.cmp(&b.id))
}

/// The `top` best environments (best first) and the `top` worst among the rest (worst
/// first), so that no environment is in both lists.
pub fn rank(mut envs: Vec<EnvSummary>, top: usize) -> (Vec<EnvSummary>, Vec<EnvSummary>) {
    envs.sort_by(compare);
    let split = top.min(envs.len());
    let rest = envs.split_off(split);
    let worst = rest.into_iter().rev().take(top).collect();
    (envs, worst)
}

/// Trajectory files under `run/trajectories/r*/`, by env id (the file name up to its first
/// `-`), as paths relative to `run` with `/` separators, sorted by rollout then name.
pub fn trajectory_files(run: &Path) -> Result<BTreeMap<String, Vec<String>>, ReportError> {
    let root = run.join("trajectories");
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    if !root.is_dir() {
        return Ok(out);
    }
    for dir in sorted_names(&root)? {
        let path = root.join(&dir);
        if !dir.starts_with('r') || !path.is_dir() {
            continue;
        }
        for file in sorted_names(&path)? {
            let Some((id, _)) = file.split_once('-') else {
                continue;
            };
            if file.ends_with(".jsonl") {
                out.entry(id.to_string())
                    .or_default()
                    .push(format!("trajectories/{dir}/{file}"));
            }
        }
    }
    Ok(out)
}

/// The UTF-8 names in `dir`, sorted.
fn sorted_names(dir: &Path) -> Result<Vec<String>, ReportError> {
    let context = || format!("listing {}", dir.display());
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| ReportError::io(context(), e))? {
        let entry = entry.map_err(|e| ReportError::io(context(), e))?;
        if let Ok(name) = entry.file_name().into_string() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}

/// Fills in pool info from `state`, the design file and the trajectory files.
pub fn attach_files(
    envs: &mut [EnvSummary],
    run: &Path,
    state: Option<&RunState>,
    trajectories: &mut BTreeMap<String, Vec<String>>,
) {
    for env in envs {
        let pooled = state.and_then(|s| s.pool.iter().find(|p| p.id == env.id));
        env.pool = pooled.map(|p| PoolInfo {
            class_name: p.class_name.clone(),
            origin: p.origin.clone(),
            difficulty: p.difficulty.clone(),
            banned: p.banned,
        });
        let candidate = pooled
            .and_then(|p| p.design_file.clone())
            .unwrap_or_else(|| format!("designs/{}.json", env.id));
        env.design_file = run.join(&candidate).is_file().then_some(candidate);
        env.trajectories = trajectories.remove(&env.id).unwrap_or_default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::metrics::EnvRow;

    fn env(id: &str, regret: Option<f64>, win: f64, timeout: bool) -> EnvRow {
        EnvRow {
            id: id.into(),
            skill: "Arithmetic".into(),
            win_rate: Some(win),
            win_rate_hint: Some(win + 0.25),
            regret,
            timeout,
        }
    }

    fn row(rollout: u64, envs: Vec<EnvRow>) -> RolloutRow {
        RolloutRow {
            rollout,
            envs,
            ..RolloutRow::default()
        }
    }

    #[test]
    fn aggregation_averages_present_numbers_and_counts_plays_and_timeouts() {
        let rows = vec![
            row(
                0,
                vec![
                    env("b", Some(0.5), 0.25, false),
                    env("a", Some(0.0), 1.0, false),
                ],
            ),
            row(1, vec![env("b", None, 0.75, false)]),
            row(2, vec![env("b", Some(0.25), 0.5, true)]),
        ];
        let envs = aggregate(&rows);
        assert_eq!(
            envs.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
        let b = &envs[1];
        assert_eq!(
            (b.played, b.timeouts, b.first_rollout, b.last_rollout),
            (3, 1, 0, 2)
        );
        assert_eq!(b.mean_regret, Some(0.375), "null regret is left out");
        assert_eq!(b.mean_win_rate, Some(0.5));
        assert_eq!(b.mean_win_rate_hint, Some(0.75));
    }

    #[test]
    fn ranking_puts_high_regret_first_and_timeouts_and_unknowns_last_without_overlap() {
        let rows = vec![row(
            0,
            vec![
                env("low", Some(0.0), 1.0, false),
                env("high", Some(0.75), 0.25, false),
                env("mid", Some(0.25), 0.5, false),
                env("tie", Some(0.25), 0.5, false),
                env("spin", Some(1.0), 0.0, true),
                env("none", None, 0.0, false),
            ],
        )];
        let ids = |v: &[EnvSummary]| v.iter().map(|e| e.id.clone()).collect::<Vec<_>>();
        let (best, worst) = rank(aggregate(&rows), 2);
        assert_eq!(ids(&best), ["high", "mid"]);
        assert_eq!(ids(&worst), ["spin", "none"]);
        let (best, worst) = rank(aggregate(&rows), 5);
        assert_eq!(ids(&best), ["high", "mid", "tie", "low", "none"]);
        assert_eq!(ids(&worst), ["spin"], "the rest only");
    }
}
