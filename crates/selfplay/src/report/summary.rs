//! The run at a glance: counts and the last rollout's numbers.
use super::metrics::RolloutRow;
use super::svg::num;

/// Headline numbers of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Metrics lines read.
    pub rollouts: usize,
    /// Index of the first rollout.
    pub first_rollout: u64,
    /// Index of the last rollout.
    pub last_rollout: u64,
    /// Last rollout's win rate without the hint.
    pub last_win_rate: Option<f64>,
    /// Last rollout's win rate with the hint.
    pub last_win_rate_hint: Option<f64>,
    /// Last rollout's mean regret.
    pub last_regret: Option<f64>,
    /// Last rollout's playable pool size.
    pub last_pool_size: Option<f64>,
    /// Last rollout's GRPO loss.
    pub last_loss: Option<f64>,
    /// Mean of the rollouts' regrets (those that have a number).
    pub mean_regret: Option<f64>,
    /// Rollouts that ran the design phase.
    pub design_rounds: usize,
    /// Designs sampled over the run.
    pub designs: usize,
    /// Designs that validated.
    pub valid: usize,
    /// Games that timed out over the run.
    pub timeouts: usize,
    /// Fixed-env training: each environment's last window `(env, low, high)` and the highest
    /// difficulty it was played at, sorted by environment (empty in self-play).
    pub difficulty: Vec<Reached>,
}

/// The difficulty one fixed environment reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reached {
    /// The environment.
    pub env: String,
    /// Its window after the last rollout it was played in.
    pub low: u64,
    /// Its highest difficulty then.
    pub high: u64,
    /// The highest difficulty it was played at.
    pub max_played: u64,
}

impl Summary {
    /// The summary of `rows` (at least one).
    pub fn of(rows: &[RolloutRow]) -> Self {
        let first = rows.first().expect("at least one rollout");
        let last = rows.last().expect("at least one rollout");
        let regrets: Vec<f64> = rows
            .iter()
            .filter_map(|r| r.regret.filter(|v| v.is_finite()))
            .collect();
        Self {
            rollouts: rows.len(),
            first_rollout: first.rollout,
            last_rollout: last.rollout,
            last_win_rate: last.win_rate,
            last_win_rate_hint: last.win_rate_hint,
            last_regret: last.regret,
            last_pool_size: last.pool_size,
            last_loss: last.loss,
            mean_regret: (!regrets.is_empty())
                .then(|| regrets.iter().sum::<f64>() / regrets.len() as f64),
            design_rounds: rows.iter().filter(|r| r.designed).count(),
            designs: rows.iter().map(|r| r.designs).sum(),
            valid: rows.iter().map(|r| r.valid).sum(),
            timeouts: rows.iter().map(|r| r.timeouts).sum(),
            difficulty: reached(rows),
        }
    }
}

/// Each fixed environment's last window and highest difficulty played.
fn reached(rows: &[RolloutRow]) -> Vec<Reached> {
    let mut by_env: std::collections::BTreeMap<&str, Reached> = std::collections::BTreeMap::new();
    for f in rows.iter().flat_map(|r| &r.fixed) {
        let e = by_env.entry(&f.env).or_insert_with(|| Reached {
            env: f.env.clone(),
            low: 0,
            high: 0,
            max_played: 0,
        });
        (e.low, e.high) = (f.low, f.high);
        e.max_played = e.max_played.max(f.difficulty);
    }
    by_env.into_values().collect()
}

/// `v` with `decimals` decimals, or `-` when missing or not finite.
pub fn opt(v: Option<f64>, decimals: usize) -> String {
    v.filter(|v| v.is_finite())
        .map_or_else(|| "-".to_string(), |v| num(v, decimals))
}
