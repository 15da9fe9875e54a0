//! Phase 7, update: credit assignment ([`crate::credit`]) turns the designs that left the
//! delay buffer and this rollout's no-hint episodes into sequences with advantages, and the
//! policy takes `ppo_epochs` GRPO steps on them.
use std::time::Instant;

use super::play::Played;
use super::{Metrics, Run};
use crate::credit::{self, Design, Episode};
use crate::error::Result;
use crate::policy::Role;
use spade_model::grpo::GrpoSample;

impl Run<'_> {
    /// The episodes as credit assignment sees them: each in its game, the environment's id
    /// (self-play) or the environment at its difficulty (fixed-env training, as the
    /// reference keys its baselines: `env@dN`).
    pub(super) fn credit_episodes(&self, played: Vec<Played>) -> Vec<Episode> {
        played
            .into_iter()
            .map(|p| {
                let id = &self.state.pool[p.pool].id;
                Episode {
                    game: match p.difficulty {
                        Some(d) => format!("{id}@d{d}"),
                        None => id.clone(),
                    },
                    hint: p.hint,
                    ret: p.ret,
                    turns: p.turns,
                }
            })
            .collect()
    }

    /// Assigns credit and updates the policy.
    pub(super) fn update(
        &mut self,
        r: u64,
        designs: Vec<Design>,
        episodes: Vec<Episode>,
        m: &mut Metrics,
    ) -> Result<()> {
        let cfg = self.cfg.credit();
        let seed = self.seed("subsample", &[r]);
        let batch = credit::assign(&designs, &episodes, &cfg, &mut self.state.baselines, seed);
        m.designer_trained_from = batch.designer_trained_from.clone();
        m.designer_recomputed_rewards = batch.designer_rewards.clone();
        m.designer_advantages = batch.designer_advantages.clone();
        m.invalid_designs_dropped = batch.invalid_dropped;
        m.repaired_first_attempts = batch.repaired_first_attempts;
        m.env_reward_scale = batch.env_reward_scale;
        m.designer_samples_trained = batch.count(Role::Designer);
        m.repair_samples_trained = batch.count(Role::Repair);
        m.agent_samples_trained = batch.count(Role::Agent);
        m.hint_samples_trained = batch.hint_count();
        m.zero_advantage_fraction = batch.zero_advantage_fraction();
        m.agent_split_episodes = batch.split_episodes;
        let samples: Vec<_> = batch.samples.into_iter().map(|t| t.sample).collect();
        let (samples, cut, dropped) = cut_to_memory(samples, self.cfg.max_sequence_tokens());
        m.sequences_cut_for_memory = cut;
        m.sequences_dropped_for_memory = dropped;
        self.progress.start(
            r,
            &format!("update on {} samples", samples.len()),
            1,
            "steps",
        );
        let tu = Instant::now();
        let stats = if samples.is_empty() {
            Ok(None)
        } else {
            self.policy.update(&samples)
        };
        self.progress.advance(1);
        self.progress.finish();
        if let Some(stats) = stats? {
            m.loss = Some(stats.loss());
            m.grad_norm = Some(stats.grad_norm());
            m.kl = Some(stats.kl());
            m.entropy = stats.entropy();
            m.clip_fraction = stats.clip_fraction();
            m.ratio_mean = stats.ratio_mean();
            m.lr = Some(stats.lr());
            m.optimizer_steps = stats.steps.len();
            m.tokens_trained = stats.tokens();
            m.tokens_scored = stats.scored_tokens();
            m.logprob_gap = stats.logprob_gap();
            m.tis_mean = stats.tis_mean();
            m.tis_clamped_fraction = stats.tis_clamped_fraction();
        }
        m.time.update = tu.elapsed().as_secs_f64();
        Ok(())
    }
}

/// `samples` with every sequence longer than `max_tokens` cut to it ([`GrpoSample::cut_to`]),
/// and how many were cut and how many dropped (no trained token left).
pub fn cut_to_memory(
    samples: Vec<GrpoSample>,
    max_tokens: usize,
) -> (Vec<GrpoSample>, usize, usize) {
    let (mut cut, mut dropped) = (0, 0);
    let kept = samples
        .into_iter()
        .filter_map(|s| {
            if s.prompt.len() + s.completion.len() <= max_tokens {
                return Some(s);
            }
            let short = s.cut_to(max_tokens);
            match short {
                Some(_) => cut += 1,
                None => dropped += 1,
            }
            short
        })
        .collect();
    (kept, cut, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_sequences_are_cut_and_counted() {
        // Lengths 3, 6 and 9 (prompts of 2, 2 and 8) against a cap of 5: the first stays
        // whole, the second is cut to 5, the third's prompt alone is past 5.
        let s = |prompt: usize, completion: usize| {
            GrpoSample::new(
                vec![1; prompt],
                vec![2; completion],
                vec![-1.0; completion],
                1.0,
            )
        };
        let (kept, cut, dropped) = cut_to_memory(vec![s(2, 1), s(2, 4), s(8, 1)], 5);
        assert_eq!((cut, dropped), (1, 1));
        let lens: Vec<usize> = kept
            .iter()
            .map(|k| k.prompt.len() + k.completion.len())
            .collect();
        assert_eq!(lens, vec![3, 5]);
        assert_eq!(kept[1].old_logprobs.len(), 3);
    }
}
