//! The designer's delay buffer (the reference's `delay`, `spade/slime/spade_rollout.py`, and
//! `spade/core/utils/delayed_env_rewards.py`): the designer samples of rollout K are held and
//! trained at rollout K + `designer_delay`, or at the last rollout, which flushes the buffer.
//! Meanwhile every no-hint play of their environments is recorded, and when they leave, their
//! raw rewards are recomputed over the window: the regret measured in rollout K, the blend's
//! plateau on the mean return of all the window's plays, and the timeout reward if any play of
//! the window timed out. The buffer is part of the run state, so a resumed run trains exactly
//! what an uninterrupted one would.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::credit::{Design, Validity};
use crate::policy::Sampled;
use crate::rewards::{self, DesignOutcome, RewardConfig};

/// A designer sample waiting in the buffer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Held {
    /// The rollout that sampled it.
    pub rollout: u64,
    /// The skill its prompt asked for.
    pub skill: String,
    /// The first-attempt completion.
    pub first: Sampled,
    /// Repair completions, in order.
    pub repairs: Vec<Sampled>,
    /// How validation went.
    pub validity: Validity,
    /// Pool id of the environment it produced (`None` when it never validated).
    pub env: Option<String>,
    /// Regret measured in its rollout (0 when invalid, or when the hint failed).
    pub regret: f64,
}

/// The no-hint plays of one held environment over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WindowPlays {
    /// Every no-hint return, in play order.
    pub returns: Vec<f64>,
    /// Whether a play (with or without the hint) ran out of fuel or past its deadline.
    pub timed_out: bool,
}

/// A sample that left the buffer, with its environment's plays in the window.
#[derive(Debug, Clone, PartialEq)]
pub struct Released {
    /// The sample.
    pub held: Held,
    /// The window's plays of its environment (empty when it had none).
    pub plays: WindowPlays,
}

/// The buffer, kept in the run state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DesignerBuffer {
    /// Samples waiting, oldest first.
    pub held: Vec<Held>,
    /// The window's plays of each held sample's environment, by pool id.
    pub plays: BTreeMap<String, WindowPlays>,
}

impl DesignerBuffer {
    /// Holds this rollout's designer samples; their environments' plays are recorded from now.
    pub fn hold(&mut self, samples: impl IntoIterator<Item = Held>) {
        for h in samples {
            if let Some(env) = &h.env {
                self.plays.entry(env.clone()).or_default();
            }
            self.held.push(h);
        }
    }

    /// Records the plays of `env` in a rollout: its no-hint returns, and whether any play timed
    /// out. Environments no held sample made are not tracked.
    pub fn record(&mut self, env: &str, no_hint_returns: &[f64], timed_out: bool) {
        if let Some(p) = self.plays.get_mut(env) {
            p.returns.extend_from_slice(no_hint_returns);
            p.timed_out |= timed_out;
        }
    }

    /// Takes the samples due at rollout `r`: those of rollout `r - delay` and earlier, or all
    /// of them when `flush` (the last rollout). The plays of environments no longer held are
    /// dropped.
    pub fn release(&mut self, r: u64, delay: u64, flush: bool) -> Vec<Released> {
        let (due, kept): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.held)
            .into_iter()
            .partition(|h| flush || h.rollout.saturating_add(delay) <= r);
        self.held = kept;
        let out = due
            .into_iter()
            .map(|held| {
                let plays = held
                    .env
                    .as_ref()
                    .and_then(|e| self.plays.get(e).cloned())
                    .unwrap_or_default();
                Released { held, plays }
            })
            .collect();
        let live: std::collections::BTreeSet<&String> =
            self.held.iter().filter_map(|h| h.env.as_ref()).collect();
        self.plays.retain(|env, _| live.contains(env));
        out
    }

    /// Samples waiting.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

/// The raw reward of a released sample, recomputed over the window: the timeout reward if a
/// play timed out, else regret or blend from the regret of its rollout and the window's mean
/// no-hint return. (An invalid sample's reward is not read: see [`crate::credit::design_reward`].)
pub fn window_reward(cfg: &RewardConfig, released: &Released) -> f64 {
    if released.plays.timed_out {
        return rewards::designer_reward(cfg, DesignOutcome::Timeout);
    }
    let score = DesignOutcome::Played {
        regret: released.held.regret,
        mean_return: rewards::mean(&released.plays.returns),
    };
    rewards::designer_reward(cfg, score)
}

/// The released samples as credit assignment's designs, rewards recomputed.
pub fn designs(cfg: &RewardConfig, released: Vec<Released>) -> Vec<Design> {
    released
        .into_iter()
        .map(|r| {
            let reward = window_reward(cfg, &r);
            let h = r.held;
            Design {
                rollout: h.rollout,
                skill: h.skill,
                first: h.first,
                repairs: h.repairs,
                validity: h.validity,
                reward,
            }
        })
        .collect()
}
