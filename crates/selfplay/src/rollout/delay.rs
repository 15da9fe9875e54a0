//! Phase 6, delay: this rollout's designer samples join the buffer ([`crate::delay`]), this
//! rollout's plays are recorded for every held environment, and the samples due now (made
//! `designer_delay` rollouts ago, or all at the last rollout) leave it with their rewards
//! recomputed over the window.
use std::collections::BTreeMap;

use super::score::GameScore;
use super::validate::DesignResult;
use super::{Metrics, Run};
use crate::credit::{Design, Validity};
use crate::delay::{self, Held};

impl Run<'_> {
    /// Holds `designs`, records this rollout's `scores` and returns the designs due now.
    pub(super) fn delay(
        &mut self,
        r: u64,
        designs: Vec<DesignResult>,
        scores: &BTreeMap<usize, GameScore>,
        m: &mut Metrics,
    ) -> Vec<Design> {
        let held: Vec<Held> = designs
            .into_iter()
            .map(|d| {
                let validity = match (d.env, d.repairs.is_empty()) {
                    (None, _) => Validity::Invalid,
                    (Some(_), true) => Validity::FirstAttempt,
                    (Some(_), false) => Validity::Repaired,
                };
                let regret = d
                    .env
                    .and_then(|pi| scores.get(&pi))
                    .map_or(0.0, |s| s.regret);
                Held {
                    rollout: r,
                    skill: d.skill,
                    first: d.first,
                    repairs: d.repairs,
                    validity,
                    env: d.env.map(|pi| self.state.pool[pi].id.clone()),
                    regret,
                }
            })
            .collect();
        let buffer = &mut self.state.designer_buffer;
        buffer.hold(held);
        for (&pi, s) in scores {
            buffer.record(&self.state.pool[pi].id, &s.returns, s.timed_out);
        }
        let flush = self.cfg.is_last_rollout(r);
        let released = buffer.release(r, self.cfg.designer_delay, flush);
        m.designer_samples_buffered = buffer.len();
        delay::designs(&self.cfg.rewards(), released)
    }
}
