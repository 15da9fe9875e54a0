//! Credit assignment of the SPADE method (docs/environment-contract.md section 3) as pure
//! functions of typed values: a rollout's designs and played episodes in, one advantage per
//! trained sequence out. No sandbox and no model here, so every rule is unit-tested from
//! hand-computed examples.
//!
//! The rules, as the reference applies them:
//! - **Agent**: only the no-hint plays are trained (hint plays measure regret). Advantages are
//!   taken per game over its no-hint episodes (a z-score, or the return minus a per-game EMA
//!   baseline, the reference's default), one value per *episode*, shared by all its turns.
//! - **Designer**: the first-attempt completion is trained; repairs are inference-only unless
//!   asked for. A design that never validated is never trained (the reference resamples or
//!   drops it); a first attempt saved only by a repair gets raw reward 0 (`turn1_valid`).
//!   Its advantage is its raw reward (regret or blend, recomputed when it leaves the delay
//!   buffer: [`crate::delay`]) minus the mean raw reward of its skill among the designs of its
//!   rollout, times `env_reward_scale`, used directly: each designer sample is its own group,
//!   so nothing normalises the skill centring away.
//! - **Subsampling** keeps whole groups, after advantages are computed, with a budget per role,
//!   so a long agent batch never crowds the designer out and never breaks a baseline.
//! - **Contexts**: an episode trains as few sequences as possible, each exactly what the policy
//!   saw: turn `t + 1` extends turn `t`'s sequence only when its prompt starts with turn `t`'s
//!   prompt and completion token for token; observation tokens between turns are context, not
//!   trained. A sequence longer than the cap ends after its last turn that fits: the head
//!   (system prompt, rules, first observation with any hint) is never cut.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use spade_model::grpo::GrpoSample;

use super::policy::{Role, Sampled};
use super::rewards;
use super::seeds;

/// How agent advantages are baselined within a game.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentBaseline {
    /// `(return - mean) / (std + 1e-6)` over the game's no-hint episodes of this rollout (the
    /// reference's "grpo" mode).
    Zscore,
    /// `return - b`, with `b` the game's exponential moving average of mean returns over the
    /// rollouts it was played in (the reference's default). A game played for the first time
    /// starts at [`EmaStart`]; after the rollout `b <- decay * b + (1 - decay) * mean`.
    Ema,
}

/// Where a game's EMA baseline starts, the first rollout it is played in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EmaStart {
    /// At 0 (the reference: its EMA table starts empty and reads 0).
    #[default]
    Zero,
    /// At the game's first mean return (the first rollout's advantages are then centred).
    FirstMean,
}

/// How a design fared in validation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Validity {
    /// The first attempt validated.
    FirstAttempt,
    /// The first attempt failed and a repair validated.
    Repaired,
    /// No attempt validated.
    Invalid,
}

/// The choices credit assignment offers (built from the config by
/// [`TrainConfig::credit`](crate::TrainConfig::credit)).
#[derive(Debug, Clone, PartialEq)]
pub struct CreditConfig {
    /// Agent baseline.
    pub agent_baseline: AgentBaseline,
    /// EMA decay of [`AgentBaseline::Ema`] (reference: 0.5).
    pub ema_decay: f64,
    /// Where a game's EMA baseline starts (reference: 0).
    pub ema_start: EmaStart,
    /// `Some(reward)`: designs that never validated are trained with this raw reward; `None`
    /// (the reference): they are never trained.
    pub invalid_design_reward: Option<f64>,
    /// A first attempt saved only by a repair gets raw reward 0 (the reference's
    /// `turn1_valid`); false gives it the repaired environment's reward.
    pub zero_repaired_first_attempts: bool,
    /// Train repair completions too, with their design's advantage (reference: no).
    pub train_repairs: bool,
    /// Train the hint plays too, in their own per-game groups (reference: no).
    pub train_hint_plays: bool,
    /// Designer reward scale; `None` computes the reference's
    /// `min(cap, no-hint episodes / designs * regen_interval)`.
    pub env_reward_scale: Option<f64>,
    /// Cap of the computed scale (reference: 50).
    pub env_reward_scale_cap: f64,
    /// Regenerate-every interval, a factor of the computed scale.
    pub regen_interval: u64,
    /// Most agent sequences per update (0 = all).
    pub max_agent_samples: usize,
    /// Most designer (and repair) sequences per update (0 = all).
    pub max_designer_samples: usize,
    /// Most tokens (prompt + completion) of one agent sequence (0 = no limit).
    pub max_agent_sequence_tokens: usize,
}

impl Default for CreditConfig {
    fn default() -> Self {
        Self {
            agent_baseline: AgentBaseline::Ema,
            ema_decay: 0.5,
            ema_start: EmaStart::Zero,
            invalid_design_reward: None,
            zero_repaired_first_attempts: true,
            train_repairs: false,
            train_hint_plays: false,
            env_reward_scale: None,
            env_reward_scale_cap: 50.0,
            regen_interval: 4,
            max_agent_samples: 0,
            max_designer_samples: 0,
            max_agent_sequence_tokens: 0,
        }
    }
}

/// One designer prompt's completion and what came of it, when it is trained.
#[derive(Debug, Clone, PartialEq)]
pub struct Design {
    /// The rollout that sampled it (with the skill, the centring key).
    pub rollout: u64,
    /// The skill the prompt asked for.
    pub skill: String,
    /// The first-attempt completion (what the designer is trained on).
    pub first: Sampled,
    /// Repair completions, in order (inference-only unless [`CreditConfig::train_repairs`]).
    pub repairs: Vec<Sampled>,
    /// How validation went.
    pub validity: Validity,
    /// The environment's raw reward (regret or blend over the window, or the timeout
    /// reward); not read for an invalid design.
    pub reward: f64,
}

/// The raw reward a design trains with, or `None` when it is not trained: an invalid design
/// gets [`CreditConfig::invalid_design_reward`] (none by default), a first attempt saved only
/// by a repair 0 (with [`CreditConfig::zero_repaired_first_attempts`]), any other its
/// environment's reward.
pub fn design_reward(d: &Design, cfg: &CreditConfig) -> Option<f64> {
    match d.validity {
        Validity::Invalid => cfg.invalid_design_reward,
        Validity::Repaired if cfg.zero_repaired_first_attempts => Some(0.0),
        Validity::Repaired | Validity::FirstAttempt => Some(d.reward),
    }
}

/// One played episode.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    /// The game (pool id of the environment).
    pub game: String,
    /// Whether the first observation carried the hint.
    pub hint: bool,
    /// The episode return (the last reward clipped to [-1, 1] if it terminated, else 0).
    pub ret: f64,
    /// The agent's turns in order, each with the exact prompt it was sampled from.
    pub turns: Vec<Sampled>,
}

/// The group a trained sequence belongs to: the samples that share one baseline.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    /// Designer sample `i` of the rollout (with its repairs, when those are trained).
    Design(usize),
    /// The episodes of one game, with or without the hint.
    Game {
        /// Pool id.
        env: String,
        /// Hint plays or not.
        hint: bool,
    },
}

/// One trained sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct Trained {
    /// Who produced it: [`Role::Designer`], [`Role::Repair`] or [`Role::Agent`].
    pub role: Role,
    /// Its baseline group.
    pub group: Group,
    /// Whether it comes from a hint play.
    pub hint: bool,
    /// What the update trains.
    pub sample: GrpoSample,
}

/// Per-game baselines carried between rollouts ([`AgentBaseline::Ema`]), saved in the run state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baselines {
    /// EMA of mean no-hint returns, by game.
    pub games: BTreeMap<String, f64>,
}

/// What credit assignment produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch {
    /// The sequences to train, designers first, in a deterministic order.
    pub samples: Vec<Trained>,
    /// The designer reward scale used.
    pub env_reward_scale: f64,
    /// The raw rewards of the trained designs, in input order (invalid ones left out).
    pub designer_rewards: Vec<f64>,
    /// Centred, scaled designer advantages of the same designs (before subsampling).
    pub designer_advantages: Vec<f64>,
    /// The rollout each of those designs was sampled in.
    pub designer_trained_from: Vec<u64>,
    /// Designs left out because they never validated.
    pub invalid_dropped: usize,
    /// Trained designs whose first attempt failed and a repair saved (raw reward 0 when
    /// [`CreditConfig::zero_repaired_first_attempts`]).
    pub repaired_first_attempts: usize,
    /// Trained episodes whose turns did not chain into one sequence (a prompt that does not
    /// start with the previous turn's context: a re-tokenisation or a context cut).
    pub split_episodes: usize,
}

impl Batch {
    /// Sequences of `role` (hint plays included for the agent).
    pub fn count(&self, role: Role) -> usize {
        self.samples.iter().filter(|t| t.role == role).count()
    }

    /// Agent sequences that came from hint plays.
    pub fn hint_count(&self) -> usize {
        self.samples.iter().filter(|t| t.hint).count()
    }

    /// Fraction of sequences whose advantage is exactly 0 (they move nothing).
    pub fn zero_advantage_fraction(&self) -> f64 {
        if self.samples.is_empty() {
            return 0.0;
        }
        let zero = self
            .samples
            .iter()
            .filter(|t| t.sample.advantage == 0.0)
            .count();
        zero as f64 / self.samples.len() as f64
    }
}

/// The reference's designer reward scale: `min(cap, agent_episodes / designs * regen_interval)`
/// (0 when nothing was designed).
pub fn env_reward_scale(
    agent_episodes: usize,
    designs: usize,
    regen_interval: u64,
    cap: f64,
) -> f64 {
    if designs == 0 {
        return 0.0;
    }
    (agent_episodes as f64 / designs as f64 * regen_interval as f64).min(cap)
}

/// Designer advantages: each raw reward minus the mean of its (rollout, skill) group, times
/// `scale`.
pub fn designer_advantages(designs: &[(u64, String, f64)], scale: f64) -> Vec<f64> {
    let keyed: Vec<(String, f64)> = designs
        .iter()
        .map(|(r, skill, reward)| (format!("{r}\u{0}{skill}"), *reward))
        .collect();
    rewards::centre_per_skill(&keyed)
        .into_iter()
        .map(|c| c * scale)
        .collect()
}

/// `(x - mean) / (std + 1e-6)` of each value (population std; all zeros for a constant group).
pub fn zscore(xs: &[f64]) -> Vec<f64> {
    let mean = rewards::mean(xs);
    let var = rewards::mean(&xs.iter().map(|x| (x - mean).powi(2)).collect::<Vec<_>>());
    xs.iter()
        .map(|x| (x - mean) / (var.sqrt() + 1e-6))
        .collect()
}

/// Advantages of one game's episode returns under `baseline`; with [`AgentBaseline::Ema`] the
/// game's entry in `ema` is read and then updated (without an entry, the baseline is this
/// mean).
pub fn game_advantages(
    returns: &[f64],
    baseline: AgentBaseline,
    decay: f64,
    ema: Option<&mut f64>,
) -> Vec<f64> {
    match baseline {
        AgentBaseline::Zscore => zscore(returns),
        AgentBaseline::Ema => {
            let mean = rewards::mean(returns);
            let b = ema.as_deref().copied().unwrap_or(mean);
            if let Some(slot) = ema {
                *slot = decay * b + (1.0 - decay) * mean;
            }
            returns.iter().map(|r| r - b).collect()
        }
    }
}

/// The fewest exact sequences that carry an episode's turns (see the module docs), each at most
/// `max_tokens` long (0 = no limit) except that a sequence always keeps its first turn.
pub fn episode_sequences(turns: &[Sampled], advantage: f64, max_tokens: usize) -> Vec<GrpoSample> {
    let mut out: Vec<GrpoSample> = Vec::new();
    let mut open: Option<GrpoSample> = None;
    let mut full = false;
    for turn in turns {
        if let Some(seq) = open.as_mut() {
            let ctx = seq.prompt.len() + seq.completion.len();
            let extends = turn.prompt.len() >= ctx
                && turn.prompt[..seq.prompt.len()] == seq.prompt[..]
                && turn.prompt[seq.prompt.len()..ctx] == seq.completion[..];
            if extends {
                if full {
                    continue;
                }
                let total = turn.prompt.len() + turn.tokens.len();
                if max_tokens > 0 && total > max_tokens {
                    // Later turns of this sequence would only be longer.
                    full = true;
                    continue;
                }
                seq.completion.extend_from_slice(&turn.prompt[ctx..]);
                let start = seq.completion.len();
                seq.completion.extend_from_slice(&turn.tokens);
                if !turn.tokens.is_empty() {
                    seq.spans.push(start..seq.completion.len());
                }
                seq.old_logprobs.extend_from_slice(&turn.logprobs);
                continue;
            }
            out.extend(open.take());
        }
        full = false;
        open = Some(GrpoSample::new(
            turn.prompt.clone(),
            turn.tokens.clone(),
            turn.logprobs.clone(),
            advantage,
        ));
    }
    out.extend(open);
    out.retain(|s| s.trained_tokens() > 0);
    out
}

/// Keeps whole groups of `items` (in a seeded order) while they fit in `budget` sequences
/// (0 = keep all). When not even one group fits, a seeded subset of the first group's
/// sequences is kept, so the role still trains; its advantages were computed over the whole
/// group, so the subset keeps the group's baseline. The kept items stay in input order.
pub fn subsample(items: Vec<Trained>, budget: usize, seed: u64) -> Vec<Trained> {
    if budget == 0 || items.len() <= budget {
        return items;
    }
    let mut groups: BTreeMap<&Group, Vec<usize>> = BTreeMap::new();
    for (i, t) in items.iter().enumerate() {
        groups.entry(&t.group).or_default().push(i);
    }
    let mut order: Vec<Vec<usize>> = groups.into_values().collect();
    let mut s = seed;
    for i in (1..order.len()).rev() {
        s = seeds::mix(s, i as u64);
        order.swap(i, (s % (i as u64 + 1)) as usize);
    }
    let mut keep: Vec<usize> = Vec::new();
    for g in &order {
        if keep.len() + g.len() <= budget {
            keep.extend(g);
        }
    }
    if keep.is_empty() {
        let mut g = order[0].clone();
        while g.len() > budget {
            s = seeds::mix(s, g.len() as u64);
            g.remove((s % g.len() as u64) as usize);
        }
        keep = g;
    }
    keep.sort_unstable();
    let mut slots: Vec<Option<Trained>> = items.into_iter().map(Some).collect();
    keep.into_iter()
        .map(|i| slots[i].take().expect("each index once"))
        .collect()
}

/// Credit assignment for one update: the `designs` that leave the delay buffer now and this
/// rollout's `episodes` in, the sequences to train out. `baselines` carries the per-game EMA
/// across rollouts; `seed` drives subsampling.
pub fn assign(
    designs: &[Design],
    episodes: &[Episode],
    cfg: &CreditConfig,
    baselines: &mut Baselines,
    seed: u64,
) -> Batch {
    let kept: Vec<(usize, f64)> = designs
        .iter()
        .enumerate()
        .filter_map(|(i, d)| design_reward(d, cfg).map(|r| (i, r)))
        .collect();
    let no_hint = episodes.iter().filter(|e| !e.hint).count();
    let scale = cfg.env_reward_scale.unwrap_or_else(|| {
        env_reward_scale(
            no_hint,
            kept.len(),
            cfg.regen_interval,
            cfg.env_reward_scale_cap,
        )
    });
    let raw: Vec<(u64, String, f64)> = kept
        .iter()
        .map(|&(i, r)| (designs[i].rollout, designs[i].skill.clone(), r))
        .collect();
    let designer_adv = designer_advantages(&raw, scale);
    let mut designer = Vec::new();
    for (&(i, _), &adv) in kept.iter().zip(&designer_adv) {
        let d = &designs[i];
        let repairs = if cfg.train_repairs {
            &d.repairs[..]
        } else {
            &[]
        };
        let parts = std::iter::once((Role::Designer, &d.first))
            .chain(repairs.iter().map(|r| (Role::Repair, r)));
        for (role, s) in parts {
            if s.tokens.is_empty() {
                continue;
            }
            designer.push(Trained {
                role,
                group: Group::Design(i),
                hint: false,
                sample: GrpoSample::new(
                    s.prompt.clone(),
                    s.tokens.clone(),
                    s.logprobs.clone(),
                    adv,
                ),
            });
        }
    }
    let (agent, split_episodes) = agent_sequences(episodes, cfg, baselines);
    let mut samples = subsample(designer, cfg.max_designer_samples, seeds::mix(seed, 1));
    samples.extend(subsample(agent, cfg.max_agent_samples, seeds::mix(seed, 2)));
    Batch {
        samples,
        env_reward_scale: scale,
        designer_rewards: raw.iter().map(|(_, _, r)| *r).collect(),
        designer_advantages: designer_adv,
        designer_trained_from: raw.iter().map(|(r, _, _)| *r).collect(),
        invalid_dropped: designs
            .iter()
            .filter(|d| d.validity == Validity::Invalid && cfg.invalid_design_reward.is_none())
            .count(),
        repaired_first_attempts: kept
            .iter()
            .filter(|&&(i, _)| designs[i].validity == Validity::Repaired)
            .count(),
        split_episodes,
    }
}

/// The agent's trained sequences: per game (and hint flag, when hint plays are trained), one
/// advantage per episode under the configured baseline, fanned out to the episode's sequences;
/// also the number of episodes that needed more than one sequence.
fn agent_sequences(
    episodes: &[Episode],
    cfg: &CreditConfig,
    baselines: &mut Baselines,
) -> (Vec<Trained>, usize) {
    let mut groups: BTreeMap<Group, Vec<&Episode>> = BTreeMap::new();
    for e in episodes {
        if e.hint && !cfg.train_hint_plays {
            continue;
        }
        let key = Group::Game {
            env: e.game.clone(),
            hint: e.hint,
        };
        groups.entry(key).or_default().push(e);
    }
    let mut out = Vec::new();
    let mut split = 0;
    for (group, eps) in groups {
        let returns: Vec<f64> = eps.iter().map(|e| e.ret).collect();
        let hint = matches!(group, Group::Game { hint: true, .. });
        // Only the no-hint plays keep an EMA: it is the agent's own baseline.
        let advs = match &group {
            Group::Game { env, hint: false } if cfg.agent_baseline == AgentBaseline::Ema => {
                let start = match cfg.ema_start {
                    EmaStart::Zero => 0.0,
                    EmaStart::FirstMean => rewards::mean(&returns),
                };
                let slot = baselines.games.entry(env.clone()).or_insert(start);
                game_advantages(&returns, cfg.agent_baseline, cfg.ema_decay, Some(slot))
            }
            _ => game_advantages(&returns, cfg.agent_baseline, cfg.ema_decay, None),
        };
        for (e, adv) in eps.iter().zip(advs) {
            let seqs = episode_sequences(&e.turns, adv, cfg.max_agent_sequence_tokens);
            split += usize::from(seqs.len() > 1);
            for sample in seqs {
                out.push(Trained {
                    role: Role::Agent,
                    group: group.clone(),
                    hint,
                    sample,
                });
            }
        }
    }
    (out, split)
}
