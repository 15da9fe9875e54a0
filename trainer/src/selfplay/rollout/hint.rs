//! Phase 3, hint: the same model reads each new environment's source (and, in rollout 0, each
//! seed environment's) and writes a short strategy hint; a failed hint is `None` (regret 0).
use std::time::Instant;

use super::validate::DesignResult;
use super::{Metrics, Run};
use crate::chat::Message;
use crate::error::Result;
use crate::selfplay::extract;
use crate::selfplay::policy::Role;
use crate::selfplay::prompts;

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
                    .filter(|&i| self.state.pool[i].origin.starts_with("seed:")),
            );
        }
        to_hint.extend(designs.iter().filter_map(|d| d.env));
        if !to_hint.is_empty() {
            self.start_sampling(
                r,
                &format!("hints for {} envs", to_hint.len()),
                to_hint.len() * self.cfg.hint_max_new_tokens,
            );
            let mut result = Ok(());
            for &i in &to_hint {
                match self.hint_env(r, i) {
                    Ok(tokens) => m.tokens_sampled += tokens,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                }
            }
            self.end_phase();
            result?;
        }
        m.time.hint = th.elapsed().as_secs_f64();
        Ok(())
    }

    /// Samples pool env `i`'s hint; returns the tokens sampled.
    fn hint_env(&mut self, r: u64, i: usize) -> Result<usize> {
        let env = &self.state.pool[i];
        let msgs = [
            Message::new("system", prompts::DESIGNER_SYSTEM),
            Message::new("user", prompts::hint_prompt(&env.source, env.tool_use)),
        ];
        let seed = self.seed("hint", &[r, i as u64]);
        let out = self
            .policy
            .sample(Role::Hint, &msgs, 1, self.cfg.hint_max_new_tokens, seed)?;
        let tokens = out.iter().map(|s| s.tokens.len()).sum();
        self.state.pool[i].hint = out
            .first()
            .and_then(|s| extract::hint(&s.text, self.cfg.hint_max_words));
        Ok(tokens)
    }
}
