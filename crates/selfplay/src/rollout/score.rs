//! Phase 5, score: per game, win rates and mean returns with and without the hint, regret
//! (docs/environment-contract.md section 3), the environment memory, and each design's raw reward.
use std::collections::BTreeMap;

use super::play::Played;
use super::validate::DesignResult;
use super::{EnvMetrics, Metrics, Run};
use crate::memory::MemoryRecord;
use crate::rewards::{self, PlayOutcome};

/// Fraction of `returns` that are wins.
fn win_rate(returns: &[f64]) -> f64 {
    let wins: Vec<f64> = returns
        .iter()
        .map(|&x| f64::from(u8::from(rewards::is_win(x))))
        .collect();
    rewards::mean(&wins)
}

impl Run<'_> {
    /// Scores every game (bans those that timed out, records them in memory) and returns each
    /// design's raw reward, in `designs` order.
    pub(super) fn score(
        &mut self,
        games: &[usize],
        episodes: &[Played],
        designs: &[DesignResult],
        m: &mut Metrics,
    ) -> Vec<f64> {
        let cfg = self.cfg.clone();
        let mut outcome: BTreeMap<usize, (PlayOutcome, f64)> = BTreeMap::new();
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
            let o = if timeout {
                env.banned = true;
                m.timeouts += 1;
                PlayOutcome::Timeout
            } else {
                PlayOutcome::Played {
                    without: rewards::mean(&without),
                    with: rewards::mean(&with),
                    hint_ok,
                }
            };
            let regret = match o {
                PlayOutcome::Played {
                    without,
                    with,
                    hint_ok,
                } => rewards::regret(without, with, hint_ok),
                PlayOutcome::Timeout => 0.0,
            };
            outcome.insert(pi, (o, w));
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
        let raw: Vec<f64> = designs
            .iter()
            .map(|d| match d.env {
                None => cfg.invalid_design_reward,
                Some(pi) => match outcome.get(&pi) {
                    Some((o, w)) => rewards::designer_reward(&cfg, *o, *w),
                    None => 0.0,
                },
            })
            .collect();
        m.designer_rewards = raw.clone();
        raw
    }
}
