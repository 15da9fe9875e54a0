//! The self-play configuration: every number of the method is a field with a documented
//! default (docs/environment-contract.md section 3), read from TOML or JSON.
//!
//! [`TrainConfig`] is one flat table, so every key of a user's TOML and of a run's saved
//! `config.json` keeps its name. Each part of the loop takes only its own settings, built
//! here: [`TrainConfig::credit`], [`TrainConfig::rewards`], [`TrainConfig::memory`],
//! [`TrainConfig::policy`] and [`TrainConfig::sampling`]. The types those settings use live
//! in the parts' modules, which never import this one.
use std::path::Path;

use serde::{Deserialize, Serialize};
use spade_model::dry::Dry;
use spade_model::grpo::{GrpoConfig, LossAggregation};
use spade_model::model::{DecodeActivations, DecodeWeights, LoraConfig, ModelConfig, TrainMemory};
use spade_model::optim::AdamWConfig;
use spade_model::schedule::{DecayKind, LrSchedule};

use super::credit::{AgentBaseline, CreditConfig, EmaStart};
use super::difficulty::DifficultyConfig;
use super::error::{Result, TrainError};
use super::memory::MemoryConfig;
use super::policy::{PolicyConfig, Role, SamplingConfig, Temperatures};
use super::prompts::{AgentExample, check_agent_examples};
use super::rewards::{BlendConfig, RewardConfig};
use super::seeds;
use super::update_memory::{
    self, DEFAULT_MAX_AGENT_TRAIN_TOKENS, UNRESOLVED_MICRO_BATCH_TOKENS, UpdateMemoryConfig,
    UpdateMemoryPlan,
};

/// The `[inference]` section, where it was before [`crate::remote`] took it.
pub use super::remote::InferenceConfig;
/// The designer reward's kinds, where they were before [`crate::rewards`] took them.
pub use super::rewards::DesignerReward;

/// The example environment `designer_example_env` shows the designer (written for spade).
pub const DESIGNER_EXAMPLE_ENV: &str = include_str!("../assets/designer/example_env.py");

/// A named set of settings that a config starts from; its own keys override the preset's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// The reference's game scripts (spade-rl/spade `cmd/games/train_spade_4b.sh`,
    /// `train_spade_8b.sh`, `train_spade_tinker.py`): see [`TrainConfig::reference`].
    Reference,
}

/// Everything `spade train` needs besides the model and corpus paths.
///
/// CPU defaults are smaller than the paper's 30B recipe (24 games, 16 + 16 plays, 16,384
/// designer tokens); each such field says so.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// The preset this config started from (`None`: the CPU defaults below).
    pub preset: Option<Preset>,
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
    /// Repair prompts per invalid design before it is given up (reference: "a few"; CPU
    /// default 1: each repair is a full designer-length completion sampled alone).
    pub max_repair_attempts: usize,
    /// Fresh draws of a design that is still rejected after its repairs: each redraw is a new
    /// first attempt at the same skill, difficulty and variant, grounded in a corpus document
    /// the design has not used yet (reference: up to 5, and no repairs, in its paper scripts).
    /// Each draw gets its own `max_repair_attempts` repairs, so a design costs at most
    /// `(1 + design_redraws) * (1 + max_repair_attempts)` completions; the reference's choice
    /// is `design_redraws = 5` with `max_repair_attempts = 0`. Only the draw that validated
    /// trains (its own first attempt, as the reference trains first attempts); failed draws
    /// are kept in `rejected/` and never trained. CPU default 0: every draw is a full
    /// designer-length completion, minutes each on the default model.
    pub design_redraws: usize,
    /// Show the designer one complete example environment (a multi-turn game written for
    /// spade, `assets/designer/example_env.py`, 66 lines, which passes `spade check`) after
    /// the contract (reference: its no-corpus and tool-use templates show one of about 80
    /// lines). Default off: it adds about 600 prompt tokens to every design, and whether it
    /// helps the default model is what `spade eval --designer` measures.
    pub designer_example_env: bool,
    /// Train designs that never validated, with `invalid_design_reward` (reference: no, such a
    /// design is dropped, never trained: `spade/core/orchestrator.py`).
    pub train_invalid_designs: bool,
    /// Raw reward of a design that never validated, when `train_invalid_designs` is on.
    pub invalid_design_reward: f64,
    /// A first attempt that failed validation and was saved only by a repair gets raw reward 0
    /// (reference: yes, `env_rewards.py`, `turn1_valid`); off, it gets its environment's.
    pub zero_repaired_first_attempts: bool,
    /// Designer reward when an environment hit a fuel or deadline limit during play (paper: -0.5).
    pub timeout_reward: f64,
    /// Return of a play whose reset or step failed (an exception, a contract error, a limit):
    /// reference -1 (`spade/core/utils/trajectory_build.py`).
    pub failed_play_return: f64,
    /// The designer samples of rollout K train at rollout K + this (reference: 4), with their
    /// rewards recomputed over the window's plays; the last rollout (`rollouts`, when set)
    /// trains whatever is still held. 0 trains them in their own rollout.
    pub designer_delay: u64,
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
    /// Positive examples: lower end of the win-rate band (paper: 0.15..=0.85).
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
    /// Worked exchanges (`[[agent_examples]]` with `user` and `assistant`) shown to the agent
    /// before the first observation of every play, in training and in `spade eval
    /// --agent-examples`; prompt, never trained. Default none, as the reference: they are for a
    /// model that does not answer in the environments' format when only told to.
    pub agent_examples: Vec<AgentExample>,
    /// Sampling temperature of every role without its own below.
    pub temperature: f64,
    /// The designer's (and repairs') temperature (`None`: `temperature`; reference 0.6).
    pub designer_temperature: Option<f64>,
    /// The hint writer's temperature (`None`: `temperature`; reference 0.3).
    pub hint_temperature: Option<f64>,
    /// The agent's temperature (`None`: `temperature`; reference 0.6).
    pub agent_temperature: Option<f64>,
    /// Nucleus mass.
    pub top_p: f64,
    /// The designer's (and repairs') nucleus mass (`None`: `top_p`; reference 0.95).
    pub designer_top_p: Option<f64>,
    /// The designer's (and repairs') top-k: only the k likeliest tokens are sampled (0: off,
    /// every token the nucleus keeps; reference 20). Default 0, the sampling every earlier
    /// run used; `spade eval --designer` measures 20.
    pub designer_top_k: usize,
    /// A design budget up to the model's context: a designer completion may use all the
    /// context its prompt leaves (not just half of it), and the corpus document is trimmed
    /// so that prompt and `designer_max_new_tokens` fit (`designer::design_budget`). Only an
    /// in-process model can tell its context and token counts; on an inference server it
    /// changes nothing. Default off: the budget every earlier run had (at most half the
    /// context, 4,096 tokens on the default model); the reference's paper scripts ask 16,384.
    pub designer_fill_context: bool,
    /// The designer's (and repairs') DRY penalty against loops (`spade_model::dry`, beyond the
    /// reference): before each draw, a token that would continue a repeat of `L >=
    /// designer_dry_allowed_length` tokens of the completion so far loses
    /// `designer_dry_multiplier * designer_dry_base^(L - allowed)` of its logit. 0 (the
    /// default): off. On the default model most rejected designs were loops cut at the token
    /// budget (docs/selfplay.md); in-process sampling only.
    pub designer_dry_multiplier: f64,
    /// Growth of the DRY penalty per token of repeat (llama.cpp's default, 1.75).
    pub designer_dry_base: f64,
    /// The longest repeat DRY leaves free, in tokens. Default 16: code repeats short stretches
    /// (`return obs, 0.0, False, truncated, {}`, `{"type": "string"}`) by design; llama.cpp's 2
    /// is for prose.
    pub designer_dry_allowed_length: usize,
    /// The designer's (and repairs') lexical guard over the Python it writes
    /// (`spade_model::pyguard`, beyond the reference): a token after which the code in the
    /// completion's first ```` ```python ```` fence could not be valid Python (a closing
    /// bracket of the wrong kind, a line break inside a one-line string, `f"{}"`, a `return`
    /// inside an open bracket, the fence closing with a bracket open) is masked and redrawn.
    /// Default off; in-process sampling only.
    pub designer_python_guard: bool,
    /// Validation (`spade check`) episodes per probe.
    pub check_seeds: u32,
    /// Validation steps per episode when the environment has no `max_turns`.
    pub check_max_steps: u32,
    /// Fuel for one validation, summed over all its calls; past it the design is invalid with a
    /// `validation_fuel` error. Fuel, unlike the reference's 60 s of wall clock, gives the same
    /// verdict on every machine, and 5*10^10 is about 20 s of guest work on two cores.
    pub validation_fuel: u64,
    /// Apply the automatic fixes (f-string brace mistakes, standard-library names used but
    /// never imported: `spade_envtools::autofix`) to a design before validating it; the fixed
    /// source is the one admitted, and its design record lists the fixes. Default `true`: the
    /// reference fixes both automatically, and a fix never changes a source that already
    /// parses and runs (docs/check-and-fuzz.md says what is fixed and what is not).
    pub auto_fix: bool,
    /// Learning rate (AdamW). 3e-4 is a LoRA rate (10-100x a full fine-tune's) at which the
    /// default model's adapters gain held-out wins while staying close to the base.
    pub lr: f64,
    /// Train LoRA adapters (true, the default) or all weights.
    pub lora: bool,
    /// LoRA rank.
    pub lora_rank: usize,
    /// LoRA alpha.
    pub lora_alpha: f64,
    /// Adam's second-moment decay (reference: 0.98; CPU default 0.999, the common default,
    /// because with a handful of samples per step a shorter memory makes steps noisier).
    pub adam_beta2: f64,
    /// Decoupled weight decay (reference: 0.1, on full weights; CPU default 0: LoRA adapters
    /// start at B = 0 and decay would pull them back to the base).
    pub weight_decay: f64,
    /// GRPO ratio clip, low side (and high side unless `clip_eps_high` is set; reference 0.2).
    pub clip_eps: f64,
    /// GRPO ratio clip, high side (`None`: `clip_eps`; reference 0.28).
    pub clip_eps_high: Option<f64>,
    /// Loss aggregation: `sample_mean` (the reference: token mean within each sample, then
    /// the mean over samples) or `token_mean` (over every trained token of the step).
    pub loss_aggregation: LossAggregation,
    /// Truncated importance sampling: each token's policy-gradient term is weighted by
    /// `exp(logp_train - logp_rollout)` clamped to [0, this] (reference: 2, `--use-tis`);
    /// 0 disables it. It corrects for quantised sampling and for delayed designer samples.
    pub tis_clamp: f64,
    /// GRPO gradient-norm clip.
    pub max_grad_norm: f64,
    /// GRPO micro-batch (samples per forward/backward).
    pub micro_batch: usize,
    /// The memory an update may take in all, in GiB (`None`, the default: three quarters of
    /// the machine's memory, from `/proc/meminfo`). `spade train` chooses `micro_batch_tokens`
    /// and `max_agent_train_tokens` from it with the model's estimate
    /// (`spade_model::memory`; `crate::update_memory`), and writes the three into the run's
    /// `config.json`, so that no update of a default run takes more, and a resumed run trains
    /// with the same numbers.
    pub train_memory_gib: Option<f64>,
    /// What an update keeps for its backward: `"saved"` (the default: what each layer's own
    /// hand-written backward reads, about 1.2 MB a token of SmolLM2-135M's LoRA update, no
    /// layer run twice), `"checkpointed"` (each layer's input, the layers recomputed one at a
    /// time in the backward; about 0.7 MB a token, for one more forward pass) or `"kept"`
    /// (candle's whole graph, 4.7 MB a token). docs/benchmarks.md measures them.
    pub train_memory: TrainMemory,
    /// Most padded tokens per GRPO micro-batch, and the longest sequence of any role: a longer
    /// designer sequence is cut to it (its completion past it is not trained). `None` (the
    /// default): the most `train_memory_gib` holds (11,175 for SmolLM2-135M's LoRA update
    /// with saved layers in 18 GiB; 17,338 with `train_memory = "checkpointed"`, 3,211 with
    /// `"kept"`). An explicit value the budget cannot hold is an error.
    pub micro_batch_tokens: Option<usize>,
    /// Longest agent sequence trained on, in tokens: an episode trains as one sequence of its
    /// turns, and a longer one ends after its last turn that fits (its head, the system
    /// prompt, rules and first observation, is never cut, and its first turn is always kept).
    /// `None` (the default): 1,024, or `micro_batch_tokens` when that is less. 1,024 bounds an
    /// update on two cores, where a 25-turn chat reaches about 3,000 tokens at 10-30 ms per
    /// trained token. At most `micro_batch_tokens`.
    pub max_agent_train_tokens: Option<usize>,
    /// Most agent sequences per update (0 = all): whole games are kept in a seeded order,
    /// after advantages were computed over the whole game. (`max_update_samples` is read as
    /// this.)
    pub max_agent_update_samples: usize,
    /// Most designer sequences per update (0 = all), a budget of its own so agent sequences
    /// never crowd the designer out.
    pub max_designer_update_samples: usize,
    /// Agent baseline per game: `ema` (the reference's default: return minus the game's EMA
    /// of mean returns) or `zscore` (the reference's "grpo" mode).
    pub agent_baseline: AgentBaseline,
    /// EMA decay of the `ema` baseline (reference: 0.5).
    pub agent_ema_decay: f64,
    /// Where a game's EMA starts: `zero` (reference) or `first_mean`.
    pub agent_ema_start: EmaStart,
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
    /// Optimiser steps per batch: from the second on the policy has moved, so the ratio leaves
    /// 1 and the clip acts; the update's time grows with it. 4 (the reference takes 1 at 1e-6
    /// on all weights) learns more per rollout at lr 3e-4 while KL and clip fraction stay small.
    pub ppo_epochs: usize,
    /// Weight of the KL penalty to the frozen base model (k3 estimator; needs `lora`, where the
    /// base without adapters is the reference at no memory cost; each micro-batch then costs
    /// one more forward pass). 0 disables it.
    pub kl_coef: f64,
    /// Weight of the entropy bonus (`GrpoConfig::entropy_coef`): the update also raises the
    /// entropy of the next-token distribution at each trained token, which still moves a group
    /// whose plays all gave one answer (its advantages are 0; such samples then go through the
    /// model too). 0 disables it, as the reference's `--entropy-coef 0.00`.
    pub entropy_coef: f64,
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
    /// `q8_0` (every projection quantised at load), or `f32` (the training path's weights).
    /// Quantised decoding needs `lora` (a frozen base); with full fine-tuning sampling reads f32
    /// whatever this says. Training always reads f32.
    pub decode_weights: DecodeWeights,
    /// How sampling's quantised products take their inputs: `f32` (the default: the weights
    /// are dequantised in registers, so the sampled policy equals the trained one within the
    /// order of f32 sums) or `q8` (8-bit blocks as llama.cpp rounds them: faster, but greedy
    /// tokens can differ from the training path's). Unused where sampling reads f32.
    pub decode_activations: DecodeActivations,
    /// Recompute the sampled tokens' old log-probabilities on the training path at the start
    /// of each update (free: the first GRPO step's forward pass), so the importance ratio
    /// never mixes quantised sampling with f32 training. On by default; the measured gap is
    /// `logprob_gap` in `metrics.jsonl`.
    pub recompute_old_logprobs: bool,
    /// Fixed-environment training (the reference's fixed-env mode), the environments the
    /// agent trains on as `spade train --fixed-envs` names them (`rlve:Multiplication`, a
    /// file). Empty (the default): self-play. With them nothing is designed and nothing is
    /// played with a hint: each rollout plays `fixed_envs_per_rollout` of them,
    /// `plays_per_game` times each on one problem (one seed, one difficulty the controller
    /// draws), and trains the agent on those plays, baselined per environment and difficulty.
    pub fixed_envs: Vec<String>,
    /// Environments played per rollout in fixed-env training (0 = all of them).
    pub fixed_envs_per_rollout: usize,
    /// The difficulty controller of fixed-env training.
    pub difficulty: DifficultyConfig,
    /// Sample on an OpenAI-compatible inference server instead of in-process (`[inference]`;
    /// `spade train --inference URL` sets it). `None` (the default): in-process.
    pub inference: Option<InferenceConfig>,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            preset: None,
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
            design_redraws: 0,
            designer_example_env: false,
            train_invalid_designs: false,
            invalid_design_reward: -1.0,
            zero_repaired_first_attempts: true,
            timeout_reward: -0.5,
            failed_play_return: -1.0,
            designer_delay: 4,
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
            agent_examples: Vec::new(),
            temperature: 1.0,
            designer_temperature: None,
            hint_temperature: None,
            agent_temperature: None,
            top_p: 0.95,
            designer_top_p: None,
            designer_top_k: 0,
            designer_fill_context: false,
            designer_dry_multiplier: 0.0,
            designer_dry_base: 1.75,
            designer_dry_allowed_length: 16,
            designer_python_guard: false,
            check_seeds: 1,
            check_max_steps: 10,
            validation_fuel: 50_000_000_000,
            auto_fix: true,
            lr: 3e-4,
            lora: true,
            lora_rank: 8,
            lora_alpha: 16.0,
            adam_beta2: 0.999,
            weight_decay: 0.0,
            clip_eps: 0.2,
            clip_eps_high: None,
            loss_aggregation: LossAggregation::SampleMean,
            tis_clamp: 2.0,
            max_grad_norm: 1.0,
            micro_batch: 4,
            train_memory_gib: None,
            train_memory: TrainMemory::Saved,
            micro_batch_tokens: None,
            max_agent_train_tokens: None,
            max_agent_update_samples: 16,
            max_designer_update_samples: 8,
            agent_baseline: AgentBaseline::Ema,
            agent_ema_decay: 0.5,
            agent_ema_start: EmaStart::Zero,
            train_repairs: false,
            train_hint_plays: false,
            env_reward_scale: 0.0,
            env_reward_scale_cap: 50.0,
            ppo_epochs: 4,
            kl_coef: 0.0,
            entropy_coef: 0.0,
            lr_warmup_steps: 2,
            lr_schedule: DecayKind::Constant,
            lr_decay_steps: 0,
            lr_min_ratio: 0.1,
            decode_weights: DecodeWeights::Gguf,
            decode_activations: DecodeActivations::F32,
            recompute_old_logprobs: true,
            fixed_envs: Vec::new(),
            fixed_envs_per_rollout: 0,
            difficulty: DifficultyConfig::default(),
            inference: None,
        }
    }
}

impl TrainConfig {
    /// The reference's script settings (`preset = "reference"`), each with where it comes
    /// from. Everything that is the method itself (the delay buffer, invalid designs dropped,
    /// repaired first attempts at 0, per-sample loss, TIS, a failed play at -1, the blend's
    /// clip) is already the default; these are the scripts' choices:
    /// - agent advantages per-game z-score, "grpo" (`cmd/games/train_spade_4b.sh`,
    ///   `--advantage-estimator grpo`);
    /// - designer reward blend (the games scripts' default);
    /// - clip 0.2 low, 0.28 high (`--eps-clip 0.2 --eps-clip-high 0.28`);
    /// - Adam beta2 0.98, weight decay 0.1 (`--adam-beta2 0.98 --weight-decay 0.1`);
    /// - lr 1e-6 and one optimiser step per rollout (`--lr 1e-6`, the 4B/8B scripts; the
    ///   Tinker LoRA script uses 1e-6 too), KL coefficient 0 (4B), LoRA rank 32
    ///   (`train_spade_tinker.py`);
    /// - temperatures designer 0.6, agent 0.6, hint 0.3;
    /// - 24 design prompts x 1 completion per regeneration, 24 games per rollout, 16 + 16
    ///   plays per game, designer output up to 16,384 tokens (the paper's recipe).
    pub fn reference() -> Self {
        Self {
            preset: Some(Preset::Reference),
            agent_baseline: AgentBaseline::Zscore,
            designer_reward: DesignerReward::Blend,
            clip_eps: 0.2,
            clip_eps_high: Some(0.28),
            adam_beta2: 0.98,
            weight_decay: 0.1,
            lr: 1e-6,
            ppo_epochs: 1,
            lr_warmup_steps: 0,
            kl_coef: 0.0,
            entropy_coef: 0.0,
            lora_rank: 32,
            lora_alpha: 32.0,
            designer_temperature: Some(0.6),
            agent_temperature: Some(0.6),
            hint_temperature: Some(0.3),
            designs_per_round: 24,
            designer_group: 1,
            games_per_rollout: 24,
            plays_per_game: 16,
            hint_plays: 16,
            designer_max_new_tokens: 16_384,
            ..Self::default()
        }
    }

    /// The settings a preset starts from.
    pub fn of_preset(preset: Option<Preset>) -> Self {
        match preset {
            None => Self::default(),
            Some(Preset::Reference) => Self::reference(),
        }
    }

    /// Parses TOML (`.toml`) or JSON (anything else) text; unknown fields are errors. With
    /// `preset = "..."`, the preset's settings come first and the text's keys override them.
    pub fn parse(text: &str, toml_format: bool) -> Result<Self> {
        let value: serde_json::Value = if toml_format {
            let table: toml::Table = toml::from_str(text)
                .map_err(|e| TrainError::Config(format!("the config is not valid TOML: {e}")))?;
            serde_json::to_value(table).map_err(|e| {
                TrainError::Config(format!("the config has a value JSON cannot hold: {e}"))
            })?
        } else {
            serde_json::from_str(text)
                .map_err(|e| TrainError::Config(format!("the config is not valid JSON: {e}")))?
        };
        let serde_json::Value::Object(mut keys) = value else {
            return Err(TrainError::Config(
                "the config must be a table of settings".into(),
            ));
        };
        if keys.contains_key("designer_start_rollout") {
            return Err(TrainError::Config(
                "designer_start_rollout was replaced by designer_delay: designer samples are \
                 now held and trained designer_delay rollouts after they were made (the \
                 reference's buffer), not dropped before a start rollout"
                    .into(),
            ));
        }
        let preset: Option<Preset> = match keys.get("preset") {
            None | Some(serde_json::Value::Null) => None,
            Some(p) => Some(serde_json::from_value(p.clone()).map_err(|e| {
                TrainError::Config(format!("the config's preset: {e} (known: \"reference\")"))
            })?),
        };
        let serde_json::Value::Object(mut merged) =
            serde_json::to_value(Self::of_preset(preset)).expect("the config serialises")
        else {
            unreachable!("a config serialises to an object")
        };
        // The one alias, under its field's name, so that it overrides the preset's value.
        if let Some(v) = keys.remove("max_update_samples") {
            if keys.contains_key("max_agent_update_samples") {
                return Err(TrainError::Config(
                    "the config sets both max_update_samples and max_agent_update_samples \
                     (the same setting)"
                        .into(),
                ));
            }
            keys.insert("max_agent_update_samples".into(), v);
        }
        merged.extend(keys);
        let cfg: Self = serde_json::from_value(serde_json::Value::Object(merged))
            .map_err(|e| TrainError::Config(format!("the config: {e}")))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// The sampling temperature of `role` (repairs sample as the designer).
    pub fn temperature_of(&self, role: Role) -> f64 {
        let own = match role {
            Role::Designer | Role::Repair => self.designer_temperature,
            Role::Hint => self.hint_temperature,
            Role::Agent => self.agent_temperature,
        };
        own.unwrap_or(self.temperature)
    }

    /// How every role samples: each role's temperature and top-p.
    pub fn sampling(&self) -> SamplingConfig {
        SamplingConfig {
            temperatures: Temperatures {
                designer: self.temperature_of(Role::Designer),
                hint: self.temperature_of(Role::Hint),
                agent: self.temperature_of(Role::Agent),
            },
            top_p: self.top_p,
            designer_top_p: self.designer_top_p.unwrap_or(self.top_p),
            designer_top_k: self.designer_top_k,
            designer_fill_context: self.designer_fill_context,
            designer_dry: (self.designer_dry_multiplier > 0.0).then_some(Dry {
                multiplier: self.designer_dry_multiplier as f32,
                base: self.designer_dry_base as f32,
                allowed_length: self.designer_dry_allowed_length,
            }),
            designer_python_guard: self.designer_python_guard,
        }
    }

    /// The in-process policy's settings: adapters (or full fine-tuning), optimiser, GRPO,
    /// decoding and sampling.
    pub fn policy(&self) -> PolicyConfig {
        PolicyConfig {
            lora: self.lora.then(|| LoraConfig {
                r: self.lora_rank,
                lora_alpha: self.lora_alpha,
                ..LoraConfig::default()
            }),
            lora_seed: seeds::derive(self.seed, "lora", &[]),
            decode_weights: self.decode_weights,
            decode_activations: self.decode_activations,
            adam: AdamWConfig {
                lr: self.lr,
                beta2: self.adam_beta2,
                weight_decay: self.weight_decay,
                ..AdamWConfig::default()
            },
            grpo: GrpoConfig {
                clip_eps: self.clip_eps,
                clip_eps_high: self.clip_eps_high,
                aggregation: self.loss_aggregation,
                tis_clamp: self.tis_clamp,
                kl_coef: self.kl_coef,
                entropy_coef: self.entropy_coef,
                max_grad_norm: self.max_grad_norm,
                micro_batch: self.micro_batch,
                micro_batch_tokens: self.max_sequence_tokens(),
                epochs: self.ppo_epochs,
                schedule: Some(self.lr_schedule()),
                recompute_old_logprobs: self.recompute_old_logprobs,
            },
            sampling: self.sampling(),
            train_memory: self.train_memory,
        }
    }

    /// The designer reward's settings.
    pub fn rewards(&self) -> RewardConfig {
        RewardConfig {
            designer_reward: self.designer_reward,
            timeout_reward: self.timeout_reward,
            blend: BlendConfig {
                plateau_weight: self.blend_plateau_weight,
                regret_weight: self.blend_regret_weight,
                regret_scale: self.blend_regret_scale,
                plateau_low: self.plateau_low,
                plateau_high: self.plateau_high,
                plateau_ramp: self.plateau_ramp,
            },
        }
    }

    /// The admission settings of a design: automatic fixes and validation.
    pub fn admission(&self) -> crate::admission::AdmissionSettings {
        crate::admission::AdmissionSettings {
            auto_fix: self.auto_fix,
            check_seeds: self.check_seeds,
            check_max_steps: self.check_max_steps,
            validation_fuel: self.validation_fuel,
        }
    }

    /// The example environment the designer is shown, when `designer_example_env` is on.
    pub fn designer_example_source(&self) -> Option<String> {
        self.designer_example_env
            .then(|| DESIGNER_EXAMPLE_ENV.to_string())
    }

    /// The settings an update's tokens are chosen by.
    pub fn update_memory(&self) -> UpdateMemoryConfig {
        UpdateMemoryConfig {
            budget_gib: self.train_memory_gib,
            micro_batch_tokens: self.micro_batch_tokens,
            max_agent_train_tokens: self.max_agent_train_tokens,
            lora: self.lora,
            train_memory: self.train_memory,
        }
    }

    /// Chooses an update's tokens for a model of `model`'s shape on a machine of `machine`
    /// bytes ([`update_memory::plan`]) and sets `train_memory_gib`, `micro_batch_tokens` and
    /// `max_agent_train_tokens` to what it chose.
    pub fn resolve_update_memory(
        &mut self,
        model: &ModelConfig,
        machine: Option<u64>,
    ) -> Result<UpdateMemoryPlan> {
        let plan = update_memory::plan(&self.update_memory(), model, machine)?;
        self.train_memory_gib = Some(plan.budget_gib);
        self.micro_batch_tokens = Some(plan.micro_batch_tokens);
        self.max_agent_train_tokens = Some(plan.max_agent_train_tokens);
        Ok(plan)
    }

    /// The longest sequence an update trains on (`micro_batch_tokens`; before it is resolved,
    /// [`UNRESOLVED_MICRO_BATCH_TOKENS`]).
    pub fn max_sequence_tokens(&self) -> usize {
        self.micro_batch_tokens
            .unwrap_or(UNRESOLVED_MICRO_BATCH_TOKENS)
    }

    /// The environment memory's settings.
    pub fn memory(&self) -> MemoryConfig {
        MemoryConfig {
            size: self.memory_size,
            code_chars: self.memory_code_chars,
            positive_examples: self.memory_positive_examples,
            win_low: self.memory_win_low,
            win_high: self.memory_win_high,
            too_easy: self.memory_too_easy,
            too_hard: self.memory_too_hard,
            negative_examples: self.memory_negative_examples,
        }
    }

    /// Reads a config file: TOML when the name ends in `.toml`, else JSON.
    pub fn from_file(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|e| TrainError::file("reading", path, e))?;
        let toml_format = path.extension().is_some_and(|e| e == "toml");
        Self::parse(&text, toml_format)
    }

    /// Rejects values the loop cannot run with.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: &str| Err(TrainError::InvalidParameter(m.to_string()));
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
        if self.micro_batch_tokens == Some(0) || self.max_agent_train_tokens == Some(0) {
            return bad(
                "micro_batch_tokens and max_agent_train_tokens must be at least 1 (leave them \
                 out to have them chosen from train_memory_gib)",
            );
        }
        if self.memory_size == 0 {
            return bad("memory_size must be at least 1");
        }
        if self.ppo_epochs == 0 {
            return bad("ppo_epochs must be at least 1");
        }
        if let Some(p) = self.designer_top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return bad("designer_top_p must be in (0, 1]");
        }
        let dry = Dry {
            multiplier: self.designer_dry_multiplier as f32,
            base: self.designer_dry_base as f32,
            allowed_length: self.designer_dry_allowed_length,
        };
        dry.check()
            .map_err(|m| TrainError::InvalidParameter(format!("designer_dry_*: {m}")))?;
        if self.designer_dry_multiplier > 0.0 && self.inference.is_some() {
            return bad(
                "designer_dry_multiplier > 0 needs in-process sampling: an OpenAI-compatible \
                 inference server ([inference]) has no DRY setting; set it to 0",
            );
        }
        if self.designer_python_guard && self.inference.is_some() {
            return bad(
                "designer_python_guard needs in-process sampling: an OpenAI-compatible \
                 inference server ([inference]) cannot refuse a token; set it to false",
            );
        }
        check_agent_examples(&self.agent_examples).map_err(TrainError::InvalidParameter)?;
        if !(0.0..=1.0).contains(&self.agent_ema_decay) {
            return bad("agent_ema_decay must be in [0, 1]");
        }
        if self.kl_coef < 0.0 || !self.kl_coef.is_finite() {
            return bad("kl_coef must be a finite number >= 0");
        }
        if self.entropy_coef < 0.0 || !self.entropy_coef.is_finite() {
            return bad("entropy_coef must be a finite number >= 0");
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
        if !(0.0..1.0).contains(&self.adam_beta2) {
            return bad("adam_beta2 must be in [0, 1)");
        }
        if self.weight_decay < 0.0 || !self.weight_decay.is_finite() {
            return bad("weight_decay must be a finite number >= 0");
        }
        if !(self.tis_clamp >= 0.0 && self.tis_clamp.is_finite()) {
            return bad("tis_clamp must be a finite number >= 0 (0 disables TIS)");
        }
        if self
            .clip_eps_high
            .is_some_and(|h| !(h >= 0.0 && h.is_finite()))
        {
            return bad("clip_eps_high must be a finite number >= 0");
        }
        if !(-1.0..=1.0).contains(&self.failed_play_return) {
            return bad("failed_play_return must be in [-1, 1], the range of a return");
        }
        if let Some(problem) = self.difficulty.problem() {
            return bad(&problem);
        }
        let temps = [
            ("temperature", Some(self.temperature)),
            ("designer_temperature", self.designer_temperature),
            ("hint_temperature", self.hint_temperature),
            ("agent_temperature", self.agent_temperature),
        ];
        for (name, t) in temps {
            if t.is_some_and(|t| !(t >= 0.0 && t.is_finite())) {
                return bad(&format!("{name} must be a finite number >= 0"));
            }
        }
        if let Some(inference) = &self.inference {
            inference.validate().map_err(TrainError::InvalidParameter)?;
            if !self.lora {
                return bad(
                    "training through an inference server needs lora = true: the server loads \
                     adapters after each update, not whole models",
                );
            }
            if !self.recompute_old_logprobs {
                return bad(
                    "training through an inference server needs recompute_old_logprobs = true: \
                     the server's log-probs come from other kernels than training's",
                );
            }
        }
        Ok(())
    }

    /// Whether this is fixed-environment training (`fixed_envs` is not empty).
    pub fn is_fixed(&self) -> bool {
        !self.fixed_envs.is_empty()
    }

    /// Whether rollout `r` is the run's last (`rollouts` set), which flushes the designer's
    /// delay buffer.
    pub fn is_last_rollout(&self, r: u64) -> bool {
        self.rollouts > 0 && r + 1 >= self.rollouts
    }

    /// Credit assignment's settings.
    pub fn credit(&self) -> CreditConfig {
        CreditConfig {
            agent_baseline: self.agent_baseline,
            ema_decay: self.agent_ema_decay,
            ema_start: self.agent_ema_start,
            invalid_design_reward: self
                .train_invalid_designs
                .then_some(self.invalid_design_reward),
            zero_repaired_first_attempts: self.zero_repaired_first_attempts,
            train_repairs: self.train_repairs,
            train_hint_plays: self.train_hint_plays,
            env_reward_scale: (self.env_reward_scale > 0.0).then_some(self.env_reward_scale),
            env_reward_scale_cap: self.env_reward_scale_cap,
            regen_interval: self.regen_interval,
            max_agent_samples: self.max_agent_update_samples,
            max_designer_samples: self.max_designer_update_samples,
            max_agent_sequence_tokens: self
                .max_agent_train_tokens
                .unwrap_or(DEFAULT_MAX_AGENT_TRAIN_TOKENS),
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
