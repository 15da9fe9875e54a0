//! The metrics line each rollout appends to `metrics.jsonl`.
use serde::Serialize;

/// One rollout's metrics line.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// Rollout index (0-based).
    pub rollout: u64,
    /// Whether the design phase ran.
    pub designed: bool,
    /// Designer completions sampled.
    pub designs: usize,
    /// Designs that validated (first try or after repair).
    pub valid: usize,
    /// `valid / designs` (0 when nothing was designed).
    pub validity_rate: f64,
    /// Designs that validated only after repair.
    pub repaired: usize,
    /// `repaired / designs`.
    pub repair_rate: f64,
    /// Repair prompts sent.
    pub repair_attempts: usize,
    /// Fresh draws of designs rejected after their repairs (`design_redraws`).
    pub redraws: usize,
    /// Playable pool size after the rollout.
    pub pool_size: usize,
    /// Environments played.
    pub games: usize,
    /// Episodes played.
    pub episodes: usize,
    /// Win rate without the hint over all played games.
    pub win_rate: f64,
    /// Win rate with the hint.
    pub win_rate_hint: f64,
    /// Mean return without / with the hint.
    pub mean_return: f64,
    /// Mean return with the hint.
    pub mean_return_hint: f64,
    /// Mean regret over played games.
    pub regret: f64,
    /// Games whose play hit a fuel or deadline limit.
    pub timeouts: usize,
    /// Hints that failed.
    pub hint_failures: usize,
    /// Per played env: id, win rate, regret.
    pub envs: Vec<EnvMetrics>,
    /// Fixed-env training: per environment played, its difficulty and the controller's state
    /// after the rollout (empty in self-play).
    pub fixed: Vec<FixedEnvMetrics>,
    /// This rollout's designer rewards at design time (regret or blend over this rollout's
    /// plays), in sample order; `null` for a design that never validated.
    pub designer_rewards: Vec<Option<f64>>,
    /// Designer samples that left the delay buffer this rollout: the rollout each was made in.
    pub designer_trained_from: Vec<u64>,
    /// Their raw rewards, recomputed over the window (repaired first attempts at 0).
    pub designer_recomputed_rewards: Vec<f64>,
    /// Their advantages (raw reward minus its rollout and skill's mean, times
    /// `env_reward_scale`), before subsampling.
    pub designer_advantages: Vec<f64>,
    /// Designer samples still held in the buffer after this rollout.
    pub designer_samples_buffered: usize,
    /// Released designs left out because they never validated.
    pub invalid_designs_dropped: usize,
    /// Released designs whose first attempt was saved only by a repair.
    pub repaired_first_attempts: usize,
    /// The designer reward scale used.
    pub env_reward_scale: f64,
    /// First-attempt designer sequences in the update.
    pub designer_samples_trained: usize,
    /// Repair sequences in the update (0 unless `train_repairs`).
    pub repair_samples_trained: usize,
    /// Agent sequences in the update (hint plays included when trained).
    pub agent_samples_trained: usize,
    /// Agent sequences from hint plays in the update (0 unless `train_hint_plays`).
    pub hint_samples_trained: usize,
    /// Agent episodes whose turns did not chain into one exact sequence (each part trains on
    /// its own exact context).
    pub agent_split_episodes: usize,
    /// Sequences longer than `micro_batch_tokens` (the most an update holds in its memory
    /// budget) that were cut to it: their tokens past it were not trained.
    pub sequences_cut_for_memory: usize,
    /// Sequences left out of the update because their prompt alone filled
    /// `micro_batch_tokens`, so no trained token was left after the cut.
    pub sequences_dropped_for_memory: usize,
    /// Fraction of trained sequences whose advantage is exactly 0.
    pub zero_advantage_fraction: f64,
    /// Tokens sampled by the policy.
    pub tokens_sampled: usize,
    /// GRPO loss of the first optimiser step (absent when no update ran).
    pub loss: Option<f64>,
    /// Global gradient norm before clipping, mean over the update's optimiser steps.
    pub grad_norm: Option<f64>,
    /// KL estimate to the frozen base per trained token, mean over the steps (0 with `kl_coef` 0).
    pub kl: Option<f64>,
    /// Mean entropy (nats) of the policy's next-token distribution per scored token, at the
    /// update's first step (absent when no token was scored). Scored tokens are those of
    /// sequences with a nonzero advantage, or all with a KL term or `entropy_coef`.
    pub entropy: Option<f64>,
    /// Fraction of scored tokens whose ratio was outside the clip range, mean over the steps
    /// (absent when no token was scored).
    pub clip_fraction: Option<f64>,
    /// Mean importance ratio of the scored tokens, mean over the steps (1 at the first step;
    /// absent when no token was scored).
    pub ratio_mean: Option<f64>,
    /// Learning rate of the last optimiser step.
    pub lr: Option<f64>,
    /// Optimiser steps taken on the batch.
    pub optimizer_steps: usize,
    /// Tokens trained on (per optimiser step).
    pub tokens_trained: usize,
    /// Trained tokens that went through the model (per optimiser step): those of sequences
    /// with a nonzero advantage, or all with a KL term or an entropy bonus. A sequence with advantage 0 has no
    /// gradient, so the update skips its forward and backward passes.
    pub tokens_scored: usize,
    /// Mean |Δ log-prob| per scored token between sampling (quantised weights, fused
    /// kernels) and the training path, measured by the update's first forward pass (absent
    /// when no token was scored).
    pub logprob_gap: Option<f64>,
    /// Mean truncated-importance weight of the first step's scored tokens (absent when none).
    pub tis_mean: Option<f64>,
    /// Fraction of those weights cut at `tis_clamp`.
    pub tis_clamped_fraction: Option<f64>,
    /// What sampling read: the decode weights, the formats, bytes per token and the kernel
    /// (`quant-f32act/avx512`, `quant-q8act/avx2`, `f32/avx2-fma`, ...). A run resumed on a
    /// CPU with another kernel samples other tokens from the same seed; this says why.
    pub decode_path: Option<String>,
    /// Seconds per phase.
    pub time: PhaseTimes,
}

/// One played env in the metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EnvMetrics {
    /// Pool id.
    pub id: String,
    /// Skill.
    pub skill: String,
    /// Win rate without the hint.
    pub win_rate: f64,
    /// Win rate with the hint.
    pub win_rate_hint: f64,
    /// Regret.
    pub regret: f64,
    /// Whether a play timed out.
    pub timeout: bool,
}

/// One environment of fixed-env training in a rollout.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FixedEnvMetrics {
    /// The environment as named in `fixed_envs` (`rlve:Multiplication`).
    pub env: String,
    /// The difficulty of this rollout's problem.
    pub difficulty: u64,
    /// Plays, and the win rate among them.
    pub plays: usize,
    /// Wins / plays.
    pub win_rate: f64,
    /// The controller's window after the rollout (sliding window; `[0, 0]` otherwise).
    pub low: u64,
    /// Highest difficulty reached.
    pub high: u64,
    /// The learning potential after the rollout.
    pub potential: f64,
}

/// Seconds per phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PhaseTimes {
    /// Designer sampling (and repairs' sampling).
    pub design: f64,
    /// Validation in the sandbox.
    pub validate: f64,
    /// Hint sampling.
    pub hint: f64,
    /// Agent sampling during play.
    pub play_model: f64,
    /// Sandbox calls during play.
    pub play_sandbox: f64,
    /// GRPO update.
    pub update: f64,
    /// The whole rollout.
    pub total: f64,
}
