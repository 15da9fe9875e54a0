//! Phase 5, score: per game, win rates and mean returns with and without the hint, regret
//! (docs/environment-contract.md section 3), the environment memory, and what each game
//! scored for its designer (the delay buffer recomputes the reward over its window).
use std::collections::BTreeMap;

use super::play::Played;
use super::validate::DesignResult;
use super::{EnvMetrics, Metrics, Run};
use crate::memory::MemoryRecord;
use crate::rewards::{self, DesignOutcome};

/// What one game scored this rollout, for the designer that made it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct GameScore {
    /// Regret (0 after a timeout, or when the hint failed).
    pub regret: f64,
    /// The no-hint returns of this rollout's plays.
    pub returns: Vec<f64>,
    /// Whether a play ran out of fuel or past its deadline.
    pub timed_out: bool,
}

/// Fraction of `returns` that are wins.
fn win_rate(returns: &[f64]) -> f64 {
    let wins: Vec<f64> = returns
        .iter()
        .map(|&x| f64::from(u8::from(rewards::is_win(x))))
        .collect();
    rewards::mean(&wins)
}

impl Run<'_> {
    /// Scores every game (bans those that timed out, records them in memory) and returns
    /// each game's score by pool index; `m.designer_rewards` gets each design's reward as of
    /// this rollout.
    pub(super) fn score(
        &mut self,
        games: &[usize],
        episodes: &[Played],
        designs: &[DesignResult],
        m: &mut Metrics,
    ) -> BTreeMap<usize, GameScore> {
        let cfg = self.cfg.clone();
        let mut scores: BTreeMap<usize, GameScore> = BTreeMap::new();
        let (mut wins, mut wins_h, mut rets, mut rets_h) = (vec![], vec![], vec![], vec![]);
        for &pi in games {
            let eps: Vec<&Played> = episodes.iter().filter(|e| e.pool == pi).collect();
            let without: Vec<f64> = eps.iter().filter(|e| !e.hint).map(|e| e.ret).collect();
            let with: Vec<f64> = eps.iter().filter(|e| e.hint).map(|e| e.ret).collect();
            let (w, wh) = (win_rate(&without), win_rate(&with));
            let env = &mut self.state.pool[pi];
            let hint_ok = env.hint.is_some();
            if !hint_ok {
                m.hint_failures += 1;
            }
            let timeout = eps.iter().any(|e| e.timed_out());
            if timeout {
                env.banned = true;
                m.timeouts += 1;
            }
            let regret = if timeout {
                0.0
            } else {
                rewards::regret(rewards::mean(&without), rewards::mean(&with), hint_ok)
            };
            scores.insert(
                pi,
                GameScore {
                    regret,
                    returns: without.clone(),
                    timed_out: timeout,
                },
            );
            wins.push(w);
            wins_h.push(wh);
            rets.extend(&without);
            rets_h.extend(&with);
            m.envs.push(EnvMetrics {
                id: env.id.clone(),
                skill: env.skill.clone(),
                win_rate: w,
                win_rate_hint: wh,
                regret,
                timeout,
            });
            let record = MemoryRecord {
                env_id: env.id.clone(),
                class_name: env.class_name.clone(),
                skill: env.skill.clone(),
                code: env.source.clone(),
                win_rate: w,
                regret,
            };
            self.state
                .memory
                .add(record, cfg.memory_size, cfg.memory_code_chars);
        }
        m.win_rate = rewards::mean(&wins);
        m.win_rate_hint = rewards::mean(&wins_h);
        m.mean_return = rewards::mean(&rets);
        m.mean_return_hint = rewards::mean(&rets_h);
        m.regret = rewards::mean(&m.envs.iter().map(|e| e.regret).collect::<Vec<_>>());
        let reward_cfg = cfg.rewards();
        m.designer_rewards = designs
            .iter()
            .map(|d| {
                let s = scores.get(&d.env?)?;
                let score = if s.timed_out {
                    DesignOutcome::Timeout
                } else {
                    DesignOutcome::Played {
                        regret: s.regret,
                        mean_return: rewards::mean(&s.returns),
                    }
                };
                Some(rewards::designer_reward(&reward_cfg, score))
            })
            .collect();
        scores
    }
}
