//! The method's reward arithmetic.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// How the designer's reward is computed from a played environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DesignerReward {
    /// `max(0, regret)` (the paper's default).
    Regret,
    /// `blend_plateau_weight * plateau(mean return) + blend_regret_weight * min(1, max(0,
    /// regret / blend_regret_scale))`, the mean return over every no-hint play of the window.
    Blend,
}

/// The designer reward's settings (`designer_reward`, `timeout_reward`, `blend_*` and
/// `plateau_*` in the config).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RewardConfig {
    /// Regret or blend.
    pub designer_reward: DesignerReward,
    /// The reward of an environment that hit a fuel or deadline limit during play.
    pub timeout_reward: f64,
    /// The blend's weights and plateau.
    pub blend: BlendConfig,
}

/// The blend's settings: `plateau_weight * plateau(mean_return) + regret_weight * min(1,
/// max(0, regret / regret_scale))`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BlendConfig {
    /// Weight of `plateau(mean_return)`.
    pub plateau_weight: f64,
    /// Weight of the regret term.
    pub regret_weight: f64,
    /// The regret is divided by this.
    pub regret_scale: f64,
    /// `plateau` is 1 on `[plateau_low, plateau_high]`.
    pub plateau_low: f64,
    /// Upper end of the plateau.
    pub plateau_high: f64,
    /// Width of the linear ramp to 0 outside the plateau.
    pub plateau_ramp: f64,
}

/// Episode return: the last reward clipped to [-1, 1] if the episode terminated, else 0.
pub fn episode_return(last_reward: Option<f64>, terminated: bool) -> f64 {
    match (last_reward, terminated) {
        (Some(r), true) if r.is_finite() => r.clamp(-1.0, 1.0),
        _ => 0.0,
    }
}

/// Whether a return counts as a win.
pub fn is_win(ret: f64) -> bool {
    ret >= 1.0 - 1e-9
}

/// Mean of `xs` (0 when empty).
pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        0.0
    } else {
        xs.iter().sum::<f64>() / xs.len() as f64
    }
}

/// What a designer's environment scored, for its raw reward. (`spade eval`'s per-environment
/// win rate is [`crate::eval::EnvScore`].)
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DesignOutcome {
    /// Played: the regret measured in its design rollout and the mean no-hint return of every
    /// play of it in the window (the blend's plateau reads it).
    Played {
        /// `max(0, mean(with hint) - mean(without))`, 0 when the hint failed.
        regret: f64,
        /// Mean no-hint return over the window's plays.
        mean_return: f64,
    },
    /// A step ran out of fuel or hit the deadline.
    Timeout,
}

/// Regret: `mean(with) - mean(without)` floored at 0; 0 when the hint failed.
pub fn regret(without: f64, with: f64, hint_ok: bool) -> f64 {
    if hint_ok {
        (with - without).max(0.0)
    } else {
        0.0
    }
}

/// `plateau(w)`: 1 on `[low, high]`, falling linearly to 0 over `ramp` outside.
pub fn plateau(w: f64, low: f64, high: f64, ramp: f64) -> f64 {
    let d = if w < low {
        low - w
    } else if w > high {
        w - high
    } else {
        0.0
    };
    if ramp <= 0.0 {
        return if d == 0.0 { 1.0 } else { 0.0 };
    }
    (1.0 - d / ramp).max(0.0)
}

/// The blend (docs/environment-contract.md section 3):
/// `plateau_weight * plateau(mean_return) + regret_weight * min(1, max(0, regret / scale))`;
/// the regret term saturates at 1.
pub fn blend(cfg: &BlendConfig, regret: f64, mean_return: f64) -> f64 {
    let p = plateau(
        mean_return,
        cfg.plateau_low,
        cfg.plateau_high,
        cfg.plateau_ramp,
    );
    let r = (regret / cfg.regret_scale).clamp(0.0, 1.0);
    cfg.plateau_weight * p + cfg.regret_weight * r
}

/// The designer's raw reward for an environment (before centring per skill).
pub fn designer_reward(cfg: &RewardConfig, outcome: DesignOutcome) -> f64 {
    match outcome {
        DesignOutcome::Timeout => cfg.timeout_reward,
        DesignOutcome::Played {
            regret,
            mean_return,
        } => match cfg.designer_reward {
            DesignerReward::Regret => regret,
            DesignerReward::Blend => blend(&cfg.blend, regret, mean_return),
        },
    }
}

/// Subtracts the per-skill mean from each `(skill, reward)`.
pub fn centre_per_skill(items: &[(String, f64)]) -> Vec<f64> {
    let mut sums: BTreeMap<&str, (f64, usize)> = BTreeMap::new();
    for (s, r) in items {
        let e = sums.entry(s.as_str()).or_default();
        e.0 += r;
        e.1 += 1;
    }
    items
        .iter()
        .map(|(s, r)| {
            let (sum, n) = sums[s.as_str()];
            r - sum / n as f64
        })
        .collect()
}
