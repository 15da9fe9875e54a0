//! The self-play configuration: every number of the method is a field with a documented
//! default (docs/environment-contract.md section 3), read from TOML or JSON.
use std::path::Path;

use serde::{Deserialize, Serialize};
use spade_model::error::{ModelError, Result};
use spade_model::model::DecodeWeights;
use spade_model::schedule::{DecayKind, LrSchedule};

use super::credit::{AgentBaseline, CreditConfig};

/// How the designer's reward is computed from a played environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DesignerReward {
    /// `max(0, regret)` (the paper's default).
    Regret,
    /// `blend_plateau_weight * plateau(win_rate) + blend_regret_weight * max(0, regret) / blend_regret_scale`.
    Blend,
}

/// Everything `spade train` needs besides the model and corpus paths.
///
/// CPU defaults are smaller than the paper's 30B recipe (24 games, 16 + 16 plays, 16,384
/// designer tokens); each such field says so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// Master seed: every sampling, play and selection seed derives from it and the rollout index.
    pub seed: u64,
    /// Rollouts to run (0 = until interrupted).
    pub rollouts: u64,
    /// Design new environments every this many rollouts (paper: 4).
    pub regen_interval: u64,
    /// Also design when the pool holds fewer playable environments than this.
    pub min_games: usize,
    /// Designer prompts per design phase (each gets `designer_group` completions).
    pub designs_per_round: usize,
    /// Completions sampled per designer prompt (the GRPO group G).
    pub designer_group: usize,
    /// Environments the agent plays per rollout (paper: 24; CPU default 2).
    pub games_per_rollout: usize,
    /// Plays of each environment without the hint (paper: 16; CPU default 2).
    pub plays_per_game: usize,
    /// Plays of each environment with the hint (paper: 16; CPU default 2).
    pub hint_plays: usize,
    /// Most turns per episode, passed to the environment as `max_turns` (paper: 25).
    pub max_turns: u32,
    /// Corpus documents are cut to this many words (paper: 6000); the prompt is cut further
    /// to fit the model's context.
    pub max_doc_words: usize,
    /// Repair prompts per invalid design before it is penalised (reference: "a few"; CPU
    /// default 1: each repair is a full designer-length completion sampled alone).
    pub max_repair_attempts: usize,
    /// Reward of a design that never validated.
    pub invalid_design_reward: f64,
    /// Designer reward when an environment hit a fuel or deadline limit during play (paper: -0.5).
    pub timeout_reward: f64,
    /// Designer samples join the GRPO batch from this rollout on (paper: after 4 rollouts).
    pub designer_start_rollout: u64,
    /// Regret or blend.
    pub designer_reward: DesignerReward,
    /// Blend: weight of `plateau(win_rate)` (paper: 0.6).
    pub blend_plateau_weight: f64,
    /// Blend: weight of the regret term (paper: 0.4).
    pub blend_regret_weight: f64,
    /// Blend: the regret is divided by this (paper: 0.15).
    pub blend_regret_scale: f64,
    /// Blend: `plateau` is 1 on `[low, high]` (paper: 0.4, 0.6).
    pub plateau_low: f64,
    /// Upper end of the plateau.
    pub plateau_high: f64,
    /// Width of the linear ramp to 0 outside the plateau (paper: 0.25).
    pub plateau_ramp: f64,
    /// Environment memory: most records kept, oldest dropped first (paper: 200).
    pub memory_size: usize,
    /// Characters of code each memory record keeps (paper: 2000).
    pub memory_code_chars: usize,
    /// Positive examples put into each designer prompt (paper: 2).
    pub memory_positive_examples: usize,
    /// Positive seeds: win rate range (paper: 0.15..=0.85).
    pub memory_win_low: f64,
    /// Upper end of the positive win-rate band.
    pub memory_win_high: f64,
    /// Negative examples: "too easy" above this win rate (paper: 0.9).
    pub memory_too_easy: f64,
    /// Negative examples: "too hard" below this win rate (paper: 0.1).
    pub memory_too_hard: f64,
    /// Class names listed per negative list in the prompt.
    pub memory_negative_examples: usize,
    /// Hints longer than this many words are cut (paper: under 100).
    pub hint_max_words: usize,
    /// Designer completion budget (paper: 16,384; CPU default 1024).
    pub designer_max_new_tokens: usize,
    /// Hint completion budget.
    pub hint_max_new_tokens: usize,
    /// Agent completion budget per turn.
    pub agent_max_new_tokens: usize,
    /// Sampling temperature.
    pub temperature: f64,
    /// Nucleus mass.
    pub top_p: f64,
    /// Validation (`spade check`) episodes per probe.
    pub check_seeds: u32,
    /// Validation steps per episode when the environment has no `max_turns`.
    pub check_max_steps: u32,
    /// Fuel for one validation, summed over all its calls (the reference gives 60 s of wall
    /// clock; 5*10^10 fuel is about 20 s of guest work on this machine's cores). Past it the
    /// design is invalid with a `validation_fuel` error. Fuel, unlike time, gives the same
    /// verdict on every machine and every run, so a run stays reproducible.
    pub validation_fuel: u64,
    /// Learning rate (AdamW).
    pub lr: f64,
    /// Train LoRA adapters (true, the default) or all weights.
    pub lora: bool,
    /// LoRA rank.
    pub lora_rank: usize,
    /// LoRA alpha.
    pub lora_alpha: f64,
    /// GRPO ratio clip.
    pub clip_eps: f64,
    /// GRPO gradient-norm clip.
    pub max_grad_norm: f64,
    /// GRPO micro-batch (samples per forward/backward).
    pub micro_batch: usize,
    /// Most padded tokens per GRPO micro-batch (0 = no limit): training memory grows with
    /// samples x length^2 in attention, so long samples train in smaller groups. 2,048 keeps
    /// a LoRA update of SmolLM2-135M under about 8 GiB.
    pub micro_batch_tokens: usize,
    /// Longest agent sequence trained on, in tokens (0 = no limit). An episode trains as one
    /// sequence (its turns' exact prompts chained, observation tokens as context only), so a
    /// 25-turn chat reaches about 3,000 tokens, and training costs 10-30 ms per token on 2
    /// cores. A longer sequence ends after its last turn that fits: the head (system prompt,
    /// rules, first observation with any hint) is never cut, so no turn trains on a context the
    /// policy did not act in; a sequence always keeps its first turn. Designer samples are never
    /// cut (their prompt is the task).
    pub max_agent_train_tokens: usize,
    /// Most agent sequences per update (0 = all): whole games are kept in a seeded order,
    /// after advantages were computed over the whole game.
    #[serde(alias = "max_update_samples")]
    pub max_agent_update_samples: usize,
    /// Most designer sequences per update (0 = all), a budget of its own so agent sequences
    /// never crowd the designer out.
    pub max_designer_update_samples: usize,
    /// Agent baseline per game: `ema` (the reference's default: return minus the game's EMA
    /// of mean returns) or `zscore` (the reference's "grpo" mode).
    pub agent_baseline: AgentBaseline,
    /// EMA decay of the `ema` baseline (reference: 0.5).
    pub agent_ema_decay: f64,
    /// Train the designer's repair completions too (reference: no; repairs only salvage a
    /// valid env for the agent).
    pub train_repairs: bool,
    /// Train the hint plays too, in their own groups (reference: no; they measure regret and
    /// are hint-conditioned contexts the agent never sees at evaluation).
    pub train_hint_plays: bool,
    /// Designer reward scale (0 = the reference's `min(cap, no-hint episodes / designs *
    /// regen_interval)`).
    pub env_reward_scale: f64,
    /// Cap of the computed designer reward scale (reference: 50).
    pub env_reward_scale_cap: f64,
    /// Optimiser steps per batch: from the second on the policy has moved, so the ratio
    /// leaves 1 and the clip acts. 2 doubles the update's time.
    pub ppo_epochs: usize,
    /// Weight of the KL penalty to the frozen base model (k3 estimator; needs `lora`, where the
    /// base without adapters is the reference at no memory cost; each micro-batch then costs
    /// one more forward pass). 0 disables it.
    pub kl_coef: f64,
    /// Optimiser steps of linear learning-rate warmup.
    pub lr_warmup_steps: u64,
    /// Decay after warmup: `constant`, `cosine` or `linear`.
    pub lr_schedule: DecayKind,
    /// Optimiser steps over which the decay reaches its floor (0 = `rollouts * ppo_epochs`
    /// when `rollouts` is set, else no decay).
    pub lr_decay_steps: u64,
    /// The decay's floor as a fraction of `lr`.
    pub lr_min_ratio: f64,
    /// Base weights that sampling reads: `gguf` (the default: a GGUF's own `Q8_0`/`Q4_1`
    /// blocks where it has them, f32 for other tensors and for models that are not GGUFs),
    /// `q8_0` (every projection quantised at load), or `f32` (the training path's weights). Quantised decoding needs `lora` (a frozen base); with full fine-tuning
    /// sampling reads f32 whatever this says. Training always reads f32.
    pub decode_weights: DecodeWeights,
    /// Recompute the sampled tokens' old log-probabilities on the training path at the start
    /// of each update (free: the first GRPO step's forward pass), so the importance ratio
    /// never mixes quantised sampling with f32 training. On by default; the measured gap is
    /// `logprob_gap` in `metrics.jsonl`.
    pub recompute_old_logprobs: bool,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            seed: 0,
            rollouts: 0,
            regen_interval: 4,
            min_games: 2,
            designs_per_round: 1,
            designer_group: 2,
            games_per_rollout: 2,
            plays_per_game: 2,
            hint_plays: 2,
            max_turns: 25,
            max_doc_words: 6000,
            max_repair_attempts: 1,
            invalid_design_reward: -1.0,
            timeout_reward: -0.5,
            designer_start_rollout: 4,
            designer_reward: DesignerReward::Regret,
            blend_plateau_weight: 0.6,
            blend_regret_weight: 0.4,
            blend_regret_scale: 0.15,
            plateau_low: 0.4,
            plateau_high: 0.6,
            plateau_ramp: 0.25,
            memory_size: 200,
            memory_code_chars: 2000,
            memory_positive_examples: 2,
            memory_win_low: 0.15,
            memory_win_high: 0.85,
            memory_too_easy: 0.9,
            memory_too_hard: 0.1,
            memory_negative_examples: 5,
            hint_max_words: 100,
            designer_max_new_tokens: 1024,
            hint_max_new_tokens: 128,
            agent_max_new_tokens: 32,
            temperature: 1.0,
            top_p: 0.95,
            check_seeds: 1,
            check_max_steps: 10,
            validation_fuel: 50_000_000_000,
            lr: 1e-5,
            lora: true,
            lora_rank: 8,
            lora_alpha: 16.0,
            clip_eps: 0.2,
            max_grad_norm: 1.0,
            micro_batch: 4,
            micro_batch_tokens: 2048,
            max_agent_train_tokens: 1024,
            max_agent_update_samples: 16,
            max_designer_update_samples: 8,
            agent_baseline: AgentBaseline::Ema,
            agent_ema_decay: 0.5,
            train_repairs: false,
            train_hint_plays: false,
            env_reward_scale: 0.0,
            env_reward_scale_cap: 50.0,
            ppo_epochs: 2,
            kl_coef: 0.0,
            lr_warmup_steps: 2,
            lr_schedule: DecayKind::Constant,
            lr_decay_steps: 0,
            lr_min_ratio: 0.1,
            decode_weights: DecodeWeights::Gguf,
            recompute_old_logprobs: true,
        }
    }
}

impl TrainConfig {
    /// Parses TOML (`.toml`) or JSON (anything else) text; unknown fields are errors.
    pub fn parse(text: &str, toml_format: bool) -> Result<Self> {
        let cfg: Self = if toml_format {
            toml::from_str(text).map_err(|e| ModelError::InvalidParameter(e.to_string()))?
        } else {
            serde_json::from_str(text).map_err(|source| ModelError::Json {
                context: "parsing the config".into(),
                source,
            })?
        };
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads a config file: TOML when the name ends in `.toml`, else JSON.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ModelError::io(format!("reading {}", path.display()), e))?;
        let toml_format = path.extension().is_some_and(|e| e == "toml");
        Self::parse(&text, toml_format)
    }

    /// Rejects values the loop cannot run with.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(ModelError::InvalidParameter(m.to_string()));
        if self.regen_interval == 0 {
            return bad("regen_interval must be at least 1");
        }
        if self.designer_group == 0 {
            return bad("designer_group must be at least 1");
        }
        if self.plays_per_game == 0 || self.hint_plays == 0 {
            return bad("plays_per_game and hint_plays must be at least 1");
        }
        if self.max_turns == 0 {
            return bad("max_turns must be at least 1");
        }
        if self.micro_batch == 0 {
            return bad("micro_batch must be at least 1");
        }
        if self.memory_size == 0 {
            return bad("memory_size must be at least 1");
        }
        if self.ppo_epochs == 0 {
            return bad("ppo_epochs must be at least 1");
        }
        if !(0.0..=1.0).contains(&self.agent_ema_decay) {
            return bad("agent_ema_decay must be in [0, 1]");
        }
        if self.kl_coef < 0.0 || !self.kl_coef.is_finite() {
            return bad("kl_coef must be a finite number >= 0");
        }
        if self.kl_coef > 0.0 && !self.lora {
            return bad(
                "kl_coef > 0 needs lora = true: the reference is the frozen base without \
                 adapters; full fine-tuning would need a second copy of the weights",
            );
        }
        if self.env_reward_scale < 0.0 || self.env_reward_scale_cap < 0.0 {
            return bad("env_reward_scale and env_reward_scale_cap must be >= 0");
        }
        if !(0.0..=1.0).contains(&self.lr_min_ratio) {
            return bad("lr_min_ratio must be in [0, 1]");
        }
        Ok(())
    }

    /// Credit assignment's settings for rollout `r` (the designer trains from
    /// `designer_start_rollout` on).
    pub fn credit(&self, r: u64) -> CreditConfig {
        CreditConfig {
            agent_baseline: self.agent_baseline,
            ema_decay: self.agent_ema_decay,
            train_designer: r >= self.designer_start_rollout,
            train_repairs: self.train_repairs,
            train_hint_plays: self.train_hint_plays,
            env_reward_scale: (self.env_reward_scale > 0.0).then_some(self.env_reward_scale),
            env_reward_scale_cap: self.env_reward_scale_cap,
            regen_interval: self.regen_interval,
            max_agent_samples: self.max_agent_update_samples,
            max_designer_samples: self.max_designer_update_samples,
            max_agent_sequence_tokens: self.max_agent_train_tokens,
        }
    }

    /// The learning-rate schedule over optimiser steps.
    pub fn lr_schedule(&self) -> LrSchedule {
        let total = match (self.lr_decay_steps, self.rollouts) {
            (0, 0) => 0,
            (0, n) => n * self.ppo_epochs as u64,
            (s, _) => s,
        };
        LrSchedule {
            base: self.lr,
            warmup_steps: self.lr_warmup_steps,
            decay: self.lr_schedule,
            total_steps: total,
            min_ratio: self.lr_min_ratio,
        }
    }

    /// The config as pretty JSON (what the run directory keeps).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the config serialises")
    }
}
