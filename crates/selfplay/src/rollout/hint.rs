//! Phase 3, hint: the same model reads each new environment's source (and, in rollout 0, each
//! starter environment's) and writes a short strategy hint, all of them decoded as one batch; a
//! failed hint is `None` (regret 0).
use std::time::Instant;

use spade_model::chat::Message;

use super::validate::DesignResult;
use super::{Metrics, Run};
use crate::error::{Result, TrainError};
use crate::extract;
use crate::policy::Role;
use crate::prompts;
use crate::starter_envs::STARTER_ORIGIN;

impl Run<'_> {
    /// Writes the hints of this rollout's new environments.
    pub(super) fn hint_phase(
        &mut self,
        r: u64,
        designs: &[DesignResult],
        m: &mut Metrics,
    ) -> Result<()> {
        let th = Instant::now();
        let mut to_hint: Vec<usize> = Vec::new();
        if r == 0 {
            to_hint.extend(
                (0..self.state.pool.len())
                    .filter(|&i| self.state.pool[i].origin.starts_with(STARTER_ORIGIN)),
            );
        }
        to_hint.extend(designs.iter().filter_map(|d| d.env));
        if !to_hint.is_empty() {
            self.start_sampling(
                r,
                &format!("hints for {} envs", to_hint.len()),
                to_hint.len() * self.cfg.hint_max_new_tokens,
            );
            let tokens = self.hint_envs(r, &to_hint);
            self.end_phase();
            m.tokens_sampled += tokens?;
        }
        m.time.hint = th.elapsed().as_secs_f64();
        Ok(())
    }

    /// Samples the hints of pool envs `envs` as one batch (env `i` seeded by its index, as
    /// when sampled alone); returns the tokens sampled.
    fn hint_envs(&mut self, r: u64, envs: &[usize]) -> Result<usize> {
        let chats: Vec<[Message; 2]> = envs
            .iter()
            .map(|&i| {
                let env = &self.state.pool[i];
                [
                    Message::new("system", prompts::DESIGNER_SYSTEM),
                    Message::new("user", prompts::hint_prompt(&env.source, env.tool_use)),
                ]
            })
            .collect();
        let chats: Vec<&[Message]> = chats.iter().map(|c| c.as_slice()).collect();
        let seeds: Vec<u64> = envs
            .iter()
            .map(|&i| self.seed("hint", &[r, i as u64]))
            .collect();
        let out =
            self.policy
                .sample_each(Role::Hint, &chats, self.cfg.hint_max_new_tokens, &seeds)?;
        if out.len() != envs.len() {
            return Err(TrainError::Policy(format!(
                "the policy returned {} hints for {} envs",
                out.len(),
                envs.len()
            )));
        }
        let mut tokens = 0;
        for (&i, s) in envs.iter().zip(&out) {
            tokens += s.tokens.len();
            self.state.pool[i].hint = extract::hint(&s.text, self.cfg.hint_max_words);
        }
        Ok(tokens)
    }
}
