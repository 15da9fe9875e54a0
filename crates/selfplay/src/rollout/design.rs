//! Phase 1, design: each designer prompt (a skill, a difficulty, a variant, a corpus document
//! and examples from memory) gets `designer_group` completions.
use std::time::Instant;

use spade_model::chat::Message;

use super::{Metrics, Run};
use crate::corpus::truncate_words;
use crate::designer;
use crate::error::{Result, TrainError};
use crate::memory::DesignerExamples;
use crate::policy::{Role, Sampled};
use crate::prompts::{self, DIFFICULTIES, DesignSpec, SKILLS, VARIANTS};

/// One designer prompt and its completions.
pub(super) struct Designed {
    /// What the prompt asked for.
    pub spec: DesignSpec,
    /// The prompt's user message (kept in the design record).
    pub prompt: String,
    /// The memory examples it showed (a redraw shows them again with a fresh document).
    pub examples: DesignerExamples,
    /// The completions' token budget.
    pub max_new: usize,
    /// Its completions, first attempts.
    pub completions: Vec<Sampled>,
}

impl Run<'_> {
    /// The designer's user message under the run's settings (the example environment when
    /// `designer_example_env` is on).
    pub(super) fn designer_prompt(
        &self,
        spec: &DesignSpec,
        document: &str,
        examples: &DesignerExamples,
    ) -> String {
        let example = self.cfg.designer_example_source();
        prompts::designer_prompt_with(spec, document, examples, example.as_deref())
    }

    /// The designer's user message and completion budget. With `designer_fill_context` and
    /// a policy that can count tokens, the budget reaches up to the context
    /// ([`designer::design_budget`]) and the document keeps its first words that fit;
    /// otherwise the whole document and `designer_max_new_tokens`.
    pub(super) fn fit_design(
        &self,
        spec: &DesignSpec,
        document: &str,
        examples: &DesignerExamples,
    ) -> Result<(String, usize)> {
        let want = self.cfg.designer_max_new_tokens;
        let prompt = self.designer_prompt(spec, document, examples);
        if !self.cfg.designer_fill_context {
            return Ok((prompt, want));
        }
        let measure = |p: &str| {
            self.policy.measure(&[
                Message::new("system", prompts::DESIGNER_SYSTEM),
                Message::new("user", p),
            ])
        };
        let Some((ctx, full)) = measure(&prompt)? else {
            return Ok((prompt, want));
        };
        let bare = self.designer_prompt(spec, "", examples);
        let fixed = measure(&bare)?.map_or(full, |(_, n)| n);
        let doc_tokens = full.saturating_sub(fixed);
        let budget = designer::design_budget(ctx, fixed, doc_tokens, want)
            .map_err(TrainError::InvalidParameter)?;
        if budget.doc_tokens >= doc_tokens {
            return Ok((prompt, budget.max_new_tokens));
        }
        // Words in proportion to the tokens that fit, then fewer until the prompt fits.
        let words = document.split_whitespace().count();
        let mut keep = words * budget.doc_tokens / doc_tokens.max(1);
        loop {
            let p = self.designer_prompt(spec, truncate_words(document, keep), examples);
            let n = measure(&p)?.map_or(0, |(_, n)| n);
            if n + budget.max_new_tokens <= ctx || keep == 0 {
                return Ok((p, budget.max_new_tokens));
            }
            keep = keep * 9 / 10;
        }
    }

    /// Samples the design phase when it is due (every `regen_interval` rollouts, or when the
    /// pool is below `min_games`); nothing otherwise.
    pub(super) fn design(&mut self, r: u64, m: &mut Metrics) -> Result<Vec<Designed>> {
        let cfg = self.cfg.clone();
        let due = r.is_multiple_of(cfg.regen_interval) || self.playable() < cfg.min_games;
        if !due || cfg.designs_per_round == 0 {
            return Ok(Vec::new());
        }
        m.designed = true;
        let mut out = Vec::with_capacity(cfg.designs_per_round);
        for d in 0..cfg.designs_per_round {
            let parts = [r, d as u64];
            let pick = |tag: &str, n: usize| (self.seed(tag, &parts) % n as u64) as usize;
            let doc = self.corpus.sample(self.seed("doc", &parts)).clone();
            let spec = DesignSpec {
                skill: SKILLS[pick("skill", SKILLS.len())].to_string(),
                difficulty: DIFFICULTIES[pick("difficulty", DIFFICULTIES.len())].to_string(),
                variant: VARIANTS[pick("variant", VARIANTS.len())],
                doc_id: doc.id,
            };
            let examples = self
                .state
                .memory
                .examples(&cfg.memory(), self.seed("memory", &parts));
            let (prompt, max_new) = self.fit_design(&spec, &doc.text, &examples)?;
            let msgs = [
                Message::new("system", prompts::DESIGNER_SYSTEM),
                Message::new("user", prompt.clone()),
            ];
            let ts = Instant::now();
            let phase = format!(
                "design {}/{} ({} completions)",
                d + 1,
                cfg.designs_per_round,
                cfg.designer_group
            );
            self.start_sampling(r, &phase, cfg.designer_group * max_new);
            let completions = self.policy.sample(
                Role::Designer,
                &msgs,
                cfg.designer_group,
                max_new,
                self.seed("design", &parts),
            );
            self.end_phase();
            let completions = completions?;
            m.time.design += ts.elapsed().as_secs_f64();
            m.designs += completions.len();
            m.tokens_sampled += completions.iter().map(|s| s.tokens.len()).sum::<usize>();
            out.push(Designed {
                spec,
                prompt,
                examples,
                max_new,
                completions,
            });
        }
        Ok(out)
    }
}
