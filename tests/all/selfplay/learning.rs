//! Tests that fail when self-play stops learning: whole `spade train` rollouts (real sandboxes,
//! real credit assignment, real GRPO updates of a tiny trainable model) in which the model's
//! first sampled token chooses what it writes, so the probability of each choice is something
//! the update must move in the direction the method's rewards point.
use std::path::{Path, PathBuf};

use spade_model::chat::Message;
use spade_model::grpo::{GrpoSample, UpdateStats};
use spade_selfplay::memory::DesignerExamples;
use spade_selfplay::policy::Sampled;
use spade_selfplay::prompts::{self, DesignSpec, VARIANTS};
use spade_selfplay::{CandlePolicy, Corpus, Policy, Role, Run, TrainConfig};

use crate::common::runtime;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-learning-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// A one-step game: `\boxed{N}` with N the secret wins. The secret is 7 for every seed.
fn secret_env(class: &str, secret: &str, obs: &str) -> String {
    format!(
        r#"class {class}:
    def __init__(self, max_turns=1):
        self.max_turns = max_turns
        self.done = False

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.done = False
        return "{obs} Seed " + str(seed) + ". Answer as \\boxed{{N}}.", {{}}

    def step(self, action):
        self.done = True
        win = "\\boxed{{{secret}}}" in action
        return ("right" if win else "wrong"), (1.0 if win else 0.0), True, False, {{}}

    def solution(self):
        return "\\boxed{{{secret}}}"
"#
    )
}

/// An environment any answer wins.
const FREE_ENV: &str = r#"class FreeEnv:
    def __init__(self, max_turns=1):
        self.max_turns = max_turns

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        return "Say anything, seed " + str(seed) + ". Answer as \\boxed{N}.", {}

    def step(self, action):
        return "right", 1.0, True, False, {}

    def solution(self):
        return "\\boxed{1}"
"#;

/// The designer's three templates: the first is won only with the hint (regret 1), the second
/// always (regret 0), the third never (the agent never says 3: regret 0).
fn templates() -> Vec<String> {
    vec![
        secret_env("HiddenEnv", "7", "Guess the hidden number."),
        FREE_ENV.to_string(),
        secret_env("HardEnv", "3", "Guess the other number."),
    ]
    .into_iter()
    .map(|src| format!("```python\n{src}```\n"))
    .collect()
}

/// The agent's three actions: only the first wins the secret-7 env.
const ACTIONS: [&str; 3] = ["\\boxed{7}", "\\boxed{1}", "\\boxed{2}"];

/// A policy in which the model's first sampled token picks a role's text (token id mod the
/// number of choices); roles without choices follow a fixed script and train nothing (their
/// turns carry no tokens). Everything else (log-probs, updates, checkpoints) is the model's.
struct Chooser {
    model: CandlePolicy,
    designer: Option<Vec<String>>,
    agent: Option<Vec<String>>,
}

/// The scripted agent: the secret is in the hint, so it wins the hidden-number game only with
/// the hint; otherwise it answers 1.
fn scripted_agent(chat: &[Message]) -> String {
    if chat[1].content.contains("HINT: The number is 7.") {
        "\\boxed{7}".into()
    } else {
        "\\boxed{1}".into()
    }
}

fn untrained(text: String) -> Sampled {
    Sampled {
        prompt: Vec::new(),
        tokens: Vec::new(),
        logprobs: Vec::new(),
        text,
    }
}

impl Chooser {
    fn choices(&self, role: Role) -> Option<&Vec<String>> {
        match role {
            Role::Designer => self.designer.as_ref(),
            Role::Agent => self.agent.as_ref(),
            Role::Repair | Role::Hint => None,
        }
    }
}

impl Policy for Chooser {
    fn sample(
        &mut self,
        role: Role,
        messages: &[Message],
        n: usize,
        _max_new_tokens: usize,
        seed: u64,
    ) -> spade_selfplay::error::Result<Vec<Sampled>> {
        if let Some(choices) = self.choices(role).cloned() {
            let out = self.model.sample(role, messages, n, 1, seed)?;
            return Ok(out
                .into_iter()
                .map(|s| Sampled {
                    text: choices[s.tokens[0] as usize % choices.len()].clone(),
                    ..s
                })
                .collect());
        }
        let text = match role {
            Role::Hint => "The number is 7.".to_string(),
            Role::Agent => scripted_agent(messages),
            Role::Designer | Role::Repair => templates()[0].clone(),
        };
        Ok((0..n).map(|_| untrained(text.clone())).collect())
    }

    fn update(
        &mut self,
        batch: &[GrpoSample],
    ) -> spade_selfplay::error::Result<Option<UpdateStats>> {
        self.model.update(batch)
    }

    fn save(&self, dir: &Path) -> spade_selfplay::error::Result<()> {
        self.model.save(dir)
    }

    fn load(&mut self, dir: &Path) -> spade_selfplay::error::Result<()> {
        self.model.load(dir)
    }
}

/// How often the model's first token picks choice 0 of `k` after `messages` (256 samples).
fn choice_rate(model: &mut CandlePolicy, role: Role, messages: &[Message], k: usize) -> f64 {
    let out = model.sample(role, messages, 256, 1, 12345).unwrap();
    let hits = out
        .iter()
        .filter(|s| (s.tokens[0] as usize).is_multiple_of(k))
        .count();
    hits as f64 / out.len() as f64
}

/// A tiny byte-level chat model with a 256-position context: prompts are cut to fit, which keeps
/// each update to a few hundred tokens per sequence.
fn small_model(seed: u64) -> spade_model::load::LoadedModel {
    crate::common::tiny_chat_model(seed, Some(256))
}

/// Prints each rollout's phase times (the test's cost, for whoever tunes it).
fn print_times(metrics: &[spade_selfplay::Metrics]) {
    for m in metrics {
        eprintln!("rollout {}: {:?}", m.rollout, m.time);
    }
}

fn corpus() -> Corpus {
    Corpus::parse("{\"text\": \"Numbers can be hidden.\"}", 6000).unwrap()
}

fn designer_messages() -> Vec<Message> {
    let spec = DesignSpec {
        skill: "Memory Recall".into(),
        difficulty: "easy".into(),
        variant: VARIANTS[0],
        doc_id: 0,
    };
    let user = prompts::designer_prompt(
        &spec,
        "Numbers can be hidden.",
        &DesignerExamples::default(),
    );
    vec![
        Message::new("system", prompts::DESIGNER_SYSTEM),
        Message::new("user", user),
    ]
}

fn learning_cfg() -> TrainConfig {
    TrainConfig {
        seed: 11,
        regen_interval: 1,
        designs_per_round: 1,
        designer_group: 8,
        games_per_rollout: 8,
        plays_per_game: 1,
        hint_plays: 1,
        max_turns: 1,
        max_repair_attempts: 0,
        designer_delay: 0,
        lora: false,
        lr: 3e-3,
        lr_warmup_steps: 0,
        max_grad_norm: 0.0,
        // These tests were calibrated at 2 optimiser steps per rollout. At the default 4 (and
        // their lr of 1e-2 on the tiny model) both roles fell in
        // both_roles_learn_together_at_the_computed_designer_scale: 0.273 -> 0.066 and
        // 0.336 -> 0.047.
        ppo_epochs: 2,
        ..TrainConfig::default()
    }
}

#[tokio::test]
async fn the_designer_learns_to_write_the_environment_with_positive_regret() {
    // Through the delay buffer (each rollout trains the designs of two rollouts before), with
    // LoRA adapters and a sampler that reads Q8_0 weights (TIS corrects for it).
    let cfg = TrainConfig {
        designer_delay: 2,
        lora: true,
        lr: 1e-2,
        decode_weights: spade_model::model::DecodeWeights::Q8_0,
        // 8-bit inputs too, as these tests were calibrated: the widest sampler-trainer gap
        // spade has, for TIS and the recomputed log-probs to correct.
        decode_activations: spade_model::model::DecodeActivations::Q8,
        ..learning_cfg()
    };
    let dir = tmp("designer");
    let model = CandlePolicy::new(small_model(21), &cfg.policy()).unwrap();
    let mut policy = Chooser {
        model,
        designer: Some(templates()),
        agent: None,
    };
    let msgs = designer_messages();
    let before = choice_rate(&mut policy.model, Role::Designer, &msgs, 3);
    let mut run = Run::create(&dir, cfg, corpus(), runtime(), &mut policy, vec![]).unwrap();
    let metrics = run.run(20).await.unwrap();
    drop(run);
    print_times(&metrics);
    let after = choice_rate(&mut policy.model, Role::Designer, &msgs, 3);
    eprintln!("P(regret-positive template): {before:.3} -> {after:.3}");
    // Rollouts 0 and 1 train no designer sample; every later one trains the 8 of two
    // rollouts before.
    for m in &metrics {
        let trained = if m.rollout < 2 { 0 } else { 8 };
        assert_eq!(m.designer_samples_trained, trained, "{m:?}");
        let from = (m.rollout >= 2).then(|| m.rollout - 2);
        assert_eq!(m.designer_trained_from, from.map_or(vec![], |r| vec![r; 8]));
        assert_eq!(m.agent_samples_trained, 0);
        // Q8_0 sampling and the older policy of a delayed sample: weights off 1, within the
        // clamp.
        if let Some(t) = m.tis_mean {
            assert!(t > 0.0 && t <= 2.0 && t != 1.0, "{m:?}");
        }
    }
    assert!(metrics.iter().any(|m| m.tis_mean.is_some()));
    let first_regret = metrics[0].regret;
    let last = &metrics[metrics.len() - 1];
    eprintln!("mean regret {first_regret:.3} -> {:.3}", last.regret);
    // Measured: 0.43 -> 0.81 as written; 0.43 -> 0.67 with the designer's centring removed.
    assert!(
        after > before + 0.3,
        "the designer did not learn: P(template with regret) {before:.3} -> {after:.3}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_agent_learns_the_winning_action_of_a_one_step_env() {
    // With LoRA adapters and a sampler that reads Q8_0 weights (TIS corrects for it).
    let cfg = TrainConfig {
        designs_per_round: 0,
        games_per_rollout: 1,
        plays_per_game: 8,
        min_games: 1,
        lora: true,
        lr: 1e-2,
        decode_weights: spade_model::model::DecodeWeights::Q8_0,
        // 8-bit inputs too, as these tests were calibrated: the widest sampler-trainer gap
        // spade has, for TIS and the recomputed log-probs to correct.
        decode_activations: spade_model::model::DecodeActivations::Q8,
        ..learning_cfg()
    };
    let dir = tmp("agent");
    let model = CandlePolicy::new(small_model(22), &cfg.policy()).unwrap();
    let mut policy = Chooser {
        model,
        designer: None,
        agent: Some(ACTIONS.iter().map(|a| a.to_string()).collect()),
    };
    let source = secret_env("HiddenEnv", "7", "Guess the hidden number.");
    let system = prompts::agent_system(false);
    let mut sb = runtime()
        .sandbox(&source, spade_sandbox::SandboxOptions::seeded(5))
        .await
        .unwrap();
    let obs = sb.reset(Some(5)).await.unwrap().observation;
    let msgs = vec![Message::new("system", system), Message::new("user", obs)];
    let before = choice_rate(&mut policy.model, Role::Agent, &msgs, 3);
    let starters = vec![("hidden".to_string(), source)];
    let mut run = Run::create(&dir, cfg, corpus(), runtime(), &mut policy, starters).unwrap();
    let metrics = run.run(10).await.unwrap();
    drop(run);
    print_times(&metrics);
    let after = choice_rate(&mut policy.model, Role::Agent, &msgs, 3);
    eprintln!(
        "P(winning action): {before:.3} -> {after:.3}; win rate {:.3} -> {:.3}",
        metrics[0].win_rate,
        metrics[metrics.len() - 1].win_rate
    );
    assert!(metrics.iter().all(|m| m.hint_samples_trained == 0));
    assert!(
        after > before + 0.25,
        "the agent did not learn: P(winning action) {before:.3} -> {after:.3}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn strip_times(metrics: &str) -> Vec<serde_json::Value> {
    metrics
        .lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("time");
            v
        })
        .collect()
}

fn ckpt(dir: &Path, file: &str) -> Vec<u8> {
    std::fs::read(dir.join("checkpoints/rollout-000002/policy").join(file)).unwrap()
}

/// Both roles choose with the model, so both have non-zero advantages in every rollout.
fn both_choose(seed: u64, cfg: &TrainConfig) -> Chooser {
    Chooser {
        model: CandlePolicy::new(small_model(seed), &cfg.policy()).unwrap(),
        designer: Some(templates()),
        agent: Some(ACTIONS.iter().map(|a| a.to_string()).collect()),
    }
}

#[tokio::test]
async fn a_resumed_run_with_nonzero_advantages_matches_an_uninterrupted_one() {
    let cfg = TrainConfig {
        designer_group: 6,
        games_per_rollout: 6,
        plays_per_game: 3,
        lora: true,
        lr: 1e-2,
        // Rollout 0's designer samples wait in the buffer across the checkpoint and train at
        // rollout 1, after the resume.
        designer_delay: 1,
        ..learning_cfg()
    };
    let straight = tmp("straight");
    let mut metrics = Vec::new();
    {
        let mut policy = both_choose(1, &cfg);
        let mut run = Run::create(
            &straight,
            cfg.clone(),
            corpus(),
            runtime(),
            &mut policy,
            vec![],
        )
        .unwrap();
        metrics.extend(run.run(2).await.unwrap());
    }
    // Rollout 0 holds its 6 designs; rollout 1 trains them (and holds its own 6).
    assert_eq!(metrics[0].designer_samples_trained, 0);
    assert_eq!(metrics[0].designer_samples_buffered, 6);
    assert_eq!(metrics[1].designer_trained_from, vec![0; 6]);
    assert_eq!(metrics[1].designer_samples_buffered, 6);
    assert!(metrics[1].designer_samples_trained > 0);
    // The update had something to learn from: advantages and moments are not all zero.
    for m in &metrics {
        assert!(m.zero_advantage_fraction < 1.0, "{m:?}");
        assert!(m.agent_samples_trained > 0, "{m:?}");
        assert!(m.grad_norm.unwrap() > 0.0, "{m:?}");
    }
    let moments = candle_core::safetensors::load(
        straight.join("checkpoints/rollout-000002/policy/optimizer.safetensors"),
        &candle_core::Device::Cpu,
    )
    .unwrap();
    let nonzero = moments.values().any(|t| {
        t.abs()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            > 0.0
    });
    assert!(nonzero, "every Adam moment is zero");
    let resumed = tmp("resumed");
    {
        let mut policy = both_choose(1, &cfg);
        let mut run = Run::create(
            &resumed,
            cfg.clone(),
            corpus(),
            runtime(),
            &mut policy,
            vec![],
        )
        .unwrap();
        run.rollout().await.unwrap();
    }
    {
        // A fresh process: a model with a different LoRA init, restored from the checkpoint.
        let other = TrainConfig {
            seed: 99,
            ..cfg.clone()
        };
        let mut policy = both_choose(1, &other);
        let mut run = Run::resume(&resumed, corpus(), runtime(), &mut policy).unwrap();
        run.rollout().await.unwrap();
    }
    let a = std::fs::read_to_string(straight.join("metrics.jsonl")).unwrap();
    let b = std::fs::read_to_string(resumed.join("metrics.jsonl")).unwrap();
    assert_eq!(strip_times(&a), strip_times(&b));
    for f in [
        "adapter_model.safetensors",
        "optimizer.safetensors",
        "optimizer.json",
    ] {
        assert!(
            ckpt(&straight, f) == ckpt(&resumed, f),
            "{f} differs after resume"
        );
    }
    let _ = std::fs::remove_dir_all(straight);
    let _ = std::fs::remove_dir_all(resumed);
}

#[tokio::test]
async fn both_roles_learn_together_at_the_computed_designer_scale() {
    // Both roles choose with one model and train in the same updates, the designer through
    // the default delay of 4. The designer's advantages are scaled by env_reward_scale
    // (8 no-hint episodes / 8 designs * regen 1 = 1 here) against the agent's; a scale far off
    // lets one role's gradient drown the other's in the shared weights. Measured: with the
    // computed scale both rise (~0.60/0.60 here); with the scale multiplied by 100 neither
    // rises and this test fails. A scale 100 times too small still passes (the clipped
    // gradient norm and Adam hide it), so the credit unit tests pin the formula itself.
    let cfg = TrainConfig {
        lora: true,
        lr: 1e-2,
        designer_delay: 4,
        max_grad_norm: 1.0,
        decode_weights: spade_model::model::DecodeWeights::Q8_0,
        // 8-bit inputs too, as these tests were calibrated: the widest sampler-trainer gap
        // spade has, for TIS and the recomputed log-probs to correct.
        decode_activations: spade_model::model::DecodeActivations::Q8,
        ..learning_cfg()
    };
    let dir = tmp("both");
    let mut policy = both_choose(23, &cfg);
    let msgs = designer_messages();
    let designer_before = choice_rate(&mut policy.model, Role::Designer, &msgs, 3);
    let source = secret_env("HiddenEnv", "7", "Guess the hidden number.");
    let mut sb = runtime()
        .sandbox(&source, spade_sandbox::SandboxOptions::seeded(5))
        .await
        .unwrap();
    let obs = sb.reset(Some(5)).await.unwrap().observation;
    let agent_msgs = vec![
        Message::new("system", prompts::agent_system(false)),
        Message::new("user", obs),
    ];
    let agent_before = choice_rate(&mut policy.model, Role::Agent, &agent_msgs, 3);
    let mut run = Run::create(&dir, cfg, corpus(), runtime(), &mut policy, vec![]).unwrap();
    let metrics = run.run(24).await.unwrap();
    drop(run);
    print_times(&metrics);
    let designer_after = choice_rate(&mut policy.model, Role::Designer, &msgs, 3);
    let agent_after = choice_rate(&mut policy.model, Role::Agent, &agent_msgs, 3);
    eprintln!(
        "P(regret-positive template) {designer_before:.3} -> {designer_after:.3}; \
         P(winning action) {agent_before:.3} -> {agent_after:.3}; scales {:?}",
        metrics
            .iter()
            .map(|m| m.env_reward_scale)
            .collect::<Vec<_>>()
    );
    assert!(
        designer_after > designer_before + 0.2,
        "the designer did not learn: {designer_before:.3} -> {designer_after:.3}"
    );
    assert!(
        agent_after > agent_before + 0.2,
        "the agent did not learn: {agent_before:.3} -> {agent_after:.3}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
