//! Self-play training (`spade train`): reward math, memory, corpus, config, extraction, and
//! whole rollouts driven by a scripted policy and by a tiny random model.
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use spade_model::chat::Message;
use spade_model::load::LoadedModel;
use spade_sandbox::{Limits, Runtime};
use spade_selfplay::config::DesignerReward;
use spade_selfplay::memory::{EnvMemory, MemoryRecord};
use spade_selfplay::policy::Script;
use spade_selfplay::{
    CandlePolicy, Corpus, Policy, Role, Run, Scripted, TrainConfig, extract, prompts, rewards,
};

use crate::common::{env_source, numbers_in, play_settings, runtime, test_limits};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-selfplay-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

// ---------------------------------------------------------------- reward math

#[test]
fn episode_return_is_the_clipped_last_reward_of_a_terminated_episode() {
    assert_eq!(rewards::episode_return(Some(1.0), true), 1.0);
    assert_eq!(rewards::episode_return(Some(5.0), true), 1.0);
    assert_eq!(rewards::episode_return(Some(-3.0), true), -1.0);
    assert_eq!(rewards::episode_return(Some(0.7), false), 0.0);
    assert_eq!(rewards::episode_return(None, true), 0.0);
    assert_eq!(rewards::episode_return(Some(f64::NAN), true), 0.0);
}

#[test]
fn regret_is_hint_minus_no_hint_floored_and_zero_without_a_hint() {
    assert!((rewards::regret(0.25, 0.75, true) - 0.5).abs() < 1e-12);
    assert_eq!(rewards::regret(0.75, 0.25, true), 0.0);
    assert_eq!(rewards::regret(0.25, 0.75, false), 0.0);
    let cfg = TrainConfig::default();
    let timeout = rewards::designer_reward(&cfg.rewards(), rewards::DesignOutcome::Timeout);
    assert_eq!(timeout, -0.5);
}

#[test]
fn blend_uses_the_plateau_and_scaled_regret() {
    assert_eq!(rewards::plateau(0.5, 0.4, 0.6, 0.25), 1.0);
    assert!((rewards::plateau(0.2, 0.4, 0.6, 0.25) - 0.2).abs() < 1e-12);
    assert_eq!(rewards::plateau(0.0, 0.4, 0.6, 0.25), 0.0);
    assert!((rewards::plateau(0.7, 0.4, 0.6, 0.25) - 0.6).abs() < 1e-12);
    let cfg = TrainConfig {
        designer_reward: DesignerReward::Blend,
        ..TrainConfig::default()
    };
    let played = |regret: f64, mean_return: f64| rewards::DesignOutcome::Played {
        regret,
        mean_return,
    };
    // 0.6 * plateau(0.5) + 0.4 * 0.15 / 0.15 = 0.6 + 0.4 = 1.0
    assert!((rewards::designer_reward(&cfg.rewards(), played(0.15, 0.5)) - 1.0).abs() < 1e-9);
    // The regret term saturates at 1: regret 0.6 is 4 scales, but the term stays 0.4
    // (unclipped it would be 0.6 + 1.6 = 2.2).
    assert!((rewards::designer_reward(&cfg.rewards(), played(0.6, 0.5)) - 1.0).abs() < 1e-9);
    assert!((rewards::blend(&cfg.rewards().blend, 1.0, 0.5) - 1.0).abs() < 1e-9);
    // Half a scale of regret off the plateau: plateau(0.3) = 1 - 0.1 / 0.25 = 0.6, so
    // 0.6 * 0.6 + 0.4 * 0.5 = 0.56.
    assert!((rewards::designer_reward(&cfg.rewards(), played(0.075, 0.3)) - 0.56).abs() < 1e-9);
    // Regret mode reads the regret alone.
    let regret_mode = TrainConfig::default();
    assert_eq!(
        rewards::designer_reward(&regret_mode.rewards(), played(0.6, 0.5)),
        0.6
    );
}

#[test]
fn designer_rewards_are_centred_per_skill() {
    let items = vec![
        ("a".to_string(), 1.0),
        ("a".to_string(), 0.0),
        ("b".to_string(), -0.5),
    ];
    assert_eq!(rewards::centre_per_skill(&items), vec![0.5, -0.5, 0.0]);
}

// ---------------------------------------------------------------- memory

fn rec(i: usize, win: f64, regret: f64) -> MemoryRecord {
    MemoryRecord {
        env_id: format!("env{i}"),
        class_name: format!("Game{i}Env"),
        skill: "Logical Deduction".into(),
        code: "x".repeat(3000),
        win_rate: win,
        regret,
    }
}

#[test]
fn memory_is_a_bounded_fifo_that_keeps_2000_characters_of_code() {
    let cfg = TrainConfig::default();
    assert_eq!((cfg.memory_size, cfg.memory_code_chars), (200, 2000));
    let mut m = EnvMemory::default();
    for i in 0..205 {
        m.add(rec(i, 0.5, 0.1), cfg.memory_size, cfg.memory_code_chars);
    }
    assert_eq!(m.records.len(), 200);
    assert_eq!(m.records[0].env_id, "env5");
    assert_eq!(m.records[0].code.len(), 2000);
    let path = tmp("memory").with_extension("json");
    m.save(&path).unwrap();
    assert_eq!(EnvMemory::load(&path).unwrap(), m);
    let _ = std::fs::remove_file(path);
}

#[test]
fn memory_examples_pick_two_in_band_by_regret_and_list_too_easy_and_too_hard() {
    let cfg = TrainConfig::default();
    let mut m = EnvMemory::default();
    // 12 in band with regret i/100, 2 out of band with huge regret, easy and hard ones.
    for i in 0..12 {
        m.add(rec(i, 0.5, i as f64 / 100.0), 200, 2000);
    }
    m.add(rec(100, 0.95, 9.0), 200, 2000);
    m.add(rec(101, 0.05, 9.0), 200, 2000);
    m.add(rec(102, 0.14, 9.0), 200, 2000);
    let s = m.examples(&cfg.memory(), 7);
    assert_eq!(s.positive.len(), 2);
    for p in &s.positive {
        assert!(p.win_rate >= 0.15 && p.win_rate <= 0.85);
        // Pool is the top max(3n, 10) = 10 by regret: env2..env11.
        let i: usize = p.env_id[3..].parse().unwrap();
        assert!(i >= 2, "{} is not in the top 10 by regret", p.env_id);
    }
    assert_ne!(s.positive[0].env_id, s.positive[1].env_id);
    assert_eq!(s.too_easy, vec!["Game100Env"]);
    assert_eq!(s.too_hard, vec!["Game101Env"]);
    assert_eq!(m.examples(&cfg.memory(), 7), s, "seeded");
}

// ---------------------------------------------------------------- corpus, config, prompts

#[test]
fn corpus_reads_text_or_orig_doc_truncates_and_samples_deterministically() {
    let jsonl =
        "{\"text\": \"one two three four\"}\n\n{\"orig_doc\": \"a b c\"}\n{\"text\": \"x\"}\n";
    let c = Corpus::parse(jsonl, 2).unwrap();
    assert_eq!(c.docs().len(), 3);
    assert_eq!(c.docs()[0].text, "one two");
    assert_eq!(c.docs()[1].text, "a b");
    assert_eq!(c.docs()[1].id, 2);
    let picks: Vec<usize> = (0..50).map(|s| c.sample(s).id).collect();
    let again: Vec<usize> = (0..50).map(|s| c.sample(s).id).collect();
    assert_eq!(picks, again);
    for id in [0, 2, 3] {
        assert!(picks.contains(&id), "uniform sampling reaches doc {id}");
    }
    let err = Corpus::parse("{\"title\": \"no text\"}", 10).unwrap_err();
    assert!(err.to_string().contains("`text` or `orig_doc`"), "{err}");
    let bundled = Corpus::parse(spade_selfplay::corpus::DEFAULT_CORPUS, 6000).unwrap();
    assert!(bundled.docs().len() >= 8);
}

#[test]
fn config_defaults_follow_the_contract_and_round_trip() {
    let cfg = TrainConfig::default();
    assert_eq!(cfg.regen_interval, 4);
    assert_eq!(cfg.max_turns, 25);
    assert_eq!(cfg.max_doc_words, 6000);
    assert_eq!(cfg.designer_delay, 4);
    assert_eq!(cfg.timeout_reward, -0.5);
    assert_eq!(cfg.failed_play_return, -1.0);
    assert!(!cfg.train_invalid_designs);
    assert!(cfg.zero_repaired_first_attempts);
    assert_eq!(cfg.tis_clamp, 2.0);
    assert_eq!(
        cfg.loss_aggregation,
        spade_model::grpo::LossAggregation::SampleMean
    );
    assert_eq!(cfg.memory_positive_examples, 2);
    assert_eq!(
        (
            cfg.blend_plateau_weight,
            cfg.blend_regret_weight,
            cfg.blend_regret_scale
        ),
        (0.6, 0.4, 0.15)
    );
    assert_eq!(TrainConfig::parse(&cfg.to_json(), false).unwrap(), cfg);
    assert_eq!(TrainConfig::parse("", true).unwrap(), cfg);
    let t = TrainConfig::parse("seed = 9\nplays_per_game = 3\n", true).unwrap();
    assert_eq!((t.seed, t.plays_per_game, t.hint_plays), (9, 3, 2));
    let err = TrainConfig::parse("{\"plays_per_gmae\": 3}", false).unwrap_err();
    assert!(err.to_string().contains("plays_per_gmae"), "{err}");
    let err = TrainConfig::parse("regen_interval = 0", true).unwrap_err();
    assert!(err.to_string().contains("regen_interval"), "{err}");
}

#[test]
fn extraction_finds_code_boxed_answers_and_tool_calls() {
    let t = "Here:\n```python\nclass AEnv:\n    pass\n```\nbye";
    assert_eq!(extract::python_block(t).unwrap(), "class AEnv:\n    pass\n");
    assert_eq!(extract::python_block("no code"), None);
    assert_eq!(
        extract::action("so \\boxed{1} no, \\boxed{\\frac{3}{4}} yes", false),
        "\\boxed{\\frac{3}{4}}"
    );
    assert_eq!(extract::action("  plain ", false), "plain");
    let tc = "I will call <tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> now";
    assert_eq!(
        extract::action(tc, true),
        "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>"
    );
    assert_eq!(
        extract::action("<answer>42</answer>", true),
        "<answer>42</answer>"
    );
    assert_eq!(extract::hint("  ", 100), None);
    assert_eq!(extract::hint("HINT: a b c", 2).unwrap(), "a b");
}

#[test]
fn prompts_carry_document_examples_avoid_lists_and_the_hint_suffix() {
    let cfg = TrainConfig::default();
    let mut m = EnvMemory::default();
    m.add(rec(1, 0.5, 0.3), 200, 2000);
    m.add(rec(2, 0.5, 0.2), 200, 2000);
    m.add(rec(3, 0.99, 0.0), 200, 2000);
    let examples = m.examples(&cfg.memory(), 1);
    let spec = prompts::DesignSpec {
        skill: "Optimization".into(),
        difficulty: "hard".into(),
        variant: prompts::Variant::ToolUse,
        doc_id: 0,
    };
    let p = prompts::designer_prompt(&spec, "THE DOCUMENT", &examples);
    assert!(p.contains("THE DOCUMENT") && p.contains("Optimization") && p.contains("hard"));
    assert!(p.contains("Example 1") && p.contains("Example 2") && !p.contains("Example 3"));
    assert!(p.contains("too easy: Game3Env"));
    assert!(p.contains("ToolUseBaseEnv"));
    assert_eq!(prompts::with_hint("obs", Some("h")), "obs\n\nHINT: h");
    assert_eq!(prompts::with_hint("obs", None), "obs");
}

// ---------------------------------------------------------------- scripted rollouts

/// The answer to the arithmetic fixture's observation "Compute A * B + C. ...".
fn arithmetic_answer(obs: &str) -> Option<i64> {
    let rest = obs.strip_prefix("Compute ")?;
    let expr = rest.split('.').next()?;
    let parts: Vec<&str> = expr.split_whitespace().collect();
    let (a, b, c): (i64, i64, i64) = (
        parts.first()?.parse().ok()?,
        parts.get(2)?.parse().ok()?,
        parts.get(4)?.parse().ok()?,
    );
    Some(a * b + c)
}

/// Designer writes `designs` in turn (repairs continue the list), hint is fixed, the agent
/// answers correctly on the first turn of the plays whose first-turn index is in `correct`.
fn script(designs: Vec<String>, correct: Vec<usize>, action: Option<String>) -> Script {
    let state = Arc::new(Mutex::new((0usize, 0usize)));
    Box::new(move |role: Role, msgs: &[Message]| {
        let mut st = state.lock().unwrap();
        match role {
            Role::Designer | Role::Repair => {
                let d = designs[st.0.min(designs.len() - 1)].clone();
                st.0 += 1;
                d
            }
            Role::Hint => "Multiply first, then add.".to_string(),
            Role::Agent => {
                if let Some(a) = &action {
                    return a.clone();
                }
                if msgs.len() == 2 {
                    let k = st.1;
                    st.1 += 1;
                    if correct.contains(&k) {
                        let ans = arithmetic_answer(&msgs[1].content).expect("arithmetic obs");
                        return format!("It is \\boxed{{{ans}}}");
                    }
                }
                "\\boxed{0}".to_string()
            }
        }
    })
}

fn fenced(source: &str) -> String {
    format!("Sure.\n```python\n{source}```\n")
}

fn small_cfg() -> TrainConfig {
    TrainConfig {
        designs_per_round: 1,
        designer_group: 1,
        games_per_rollout: 1,
        plays_per_game: 4,
        hint_plays: 4,
        max_turns: 3,
        designer_delay: 0,
        max_repair_attempts: 1,
        max_agent_update_samples: 0,
        ..TrainConfig::default()
    }
}

fn corpus() -> Corpus {
    Corpus::parse("{\"text\": \"Multiplication is repeated addition.\"}", 6000).unwrap()
}

#[tokio::test]
async fn scripted_iteration_gives_hand_computed_regret_pool_memory_and_rewards() {
    let dir = tmp("scripted");
    let src = env_source("arithmetic_puzzle");
    // No-hint plays are first-turn indices 0..4, hint plays 4..8: 1/4 vs 3/4.
    let mut policy = Scripted::new(script(vec![fenced(&src)], vec![0, 4, 5, 6], None), None);
    let mut run = Run::create(&dir, small_cfg(), corpus(), runtime(), &mut policy, vec![]).unwrap();
    let m = run.rollout().await.unwrap();
    assert!(m.designed);
    assert_eq!((m.designs, m.valid, m.repaired), (1, 1, 0));
    assert_eq!(m.validity_rate, 1.0);
    assert_eq!((m.games, m.episodes), (1, 8));
    assert_eq!(m.win_rate, 0.25);
    assert_eq!(m.win_rate_hint, 0.75);
    assert!((m.regret - 0.5).abs() < 1e-12);
    assert_eq!(m.designer_rewards, vec![Some(0.5)]);
    // Released at once (delay 0): the window is this rollout, so the same 0.5.
    assert_eq!(m.designer_trained_from, vec![0]);
    assert_eq!(m.designer_recomputed_rewards, vec![0.5]);
    assert_eq!(m.designer_samples_buffered, 0);
    // The one design is alone in its skill: centred, its advantage is 0 (the reference's rule).
    assert_eq!(m.designer_advantages, vec![0.0]);
    assert_eq!(m.designer_samples_trained, 1);
    // Only the four no-hint plays are trained, one sequence per episode.
    assert_eq!(m.agent_samples_trained, 4);
    assert_eq!(m.hint_samples_trained, 0);
    assert_eq!(m.pool_size, 1);
    let st = &run.state;
    assert_eq!(st.pool[0].class_name, "ArithmeticPuzzleEnv");
    assert_eq!(
        st.pool[0].hint.as_deref(),
        Some("Multiply first, then add.")
    );
    assert_eq!(st.memory.records.len(), 1);
    assert_eq!(st.memory.records[0].win_rate, 0.25);
    assert!((st.memory.records[0].regret - 0.5).abs() < 1e-12);
    // Files: config, metrics line, memory, checkpoint, trajectories that replay.
    assert!(dir.join("config.json").exists());
    let metrics = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 1);
    assert!(dir.join("env_memory.json").exists());
    assert!(dir.join("checkpoints/rollout-000001/state.json").exists());
    let traj = dir.join("trajectories/r00000/env00000-hint-00.jsonl");
    let text = std::fs::read_to_string(&traj).unwrap();
    assert!(text.contains("Multiply first, then add."));
    let trajectory = spade_envtools::trajectory::Trajectory::parse(&text).unwrap();
    let report = spade_envtools::trajectory::replay(
        &runtime(),
        &trajectory,
        &spade_envtools::trajectory::ReplayOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(report.divergence, None);
    assert_eq!(report.truncated, None);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn an_invalid_design_is_repaired_or_penalised() {
    let src = env_source("arithmetic_puzzle");
    let dir = tmp("repair");
    let mut policy = Scripted::new(
        script(vec!["no code here".into(), fenced(&src)], vec![], None),
        None,
    );
    let mut run = Run::create(&dir, small_cfg(), corpus(), runtime(), &mut policy, vec![]).unwrap();
    let m = run.rollout().await.unwrap();
    assert_eq!(
        (m.designs, m.valid, m.repaired, m.repair_attempts),
        (1, 1, 1, 1)
    );
    // The first attempt trains, saved only by the repair: raw reward 0.
    assert_eq!(m.repaired_first_attempts, 1);
    assert_eq!(m.designer_recomputed_rewards, vec![0.0]);
    assert_eq!(m.designer_samples_trained, 1);
    let _ = std::fs::remove_dir_all(&dir);

    let dir = tmp("penalty");
    let bad = fenced(
        "class BrokenEnv:\n    def __init__(self, max_turns=3):\n        raise ValueError('nope')\n",
    );
    let mut policy = Scripted::new(script(vec![bad], vec![], None), None);
    let mut run = Run::create(&dir, small_cfg(), corpus(), runtime(), &mut policy, vec![]).unwrap();
    let m = run.rollout().await.unwrap();
    assert_eq!((m.designs, m.valid, m.repair_attempts), (1, 0, 1));
    // Never valid: no reward and never trained (the reference drops it).
    assert_eq!(m.designer_rewards, vec![None]);
    assert_eq!(m.invalid_designs_dropped, 1);
    assert_eq!(m.designer_samples_trained, 0);
    assert!(m.designer_trained_from.is_empty());
    assert_eq!((m.games, m.pool_size), (0, 0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each `sample_each` call: its role and seeds.
type Batches = Arc<Mutex<Vec<(Role, Vec<u64>)>>>;

/// Delegates to a policy and records every `sample_each` call.
struct Recording<P> {
    inner: P,
    batches: Batches,
}

impl<P: Policy> Policy for Recording<P> {
    fn sample(
        &mut self,
        role: Role,
        messages: &[Message],
        n: usize,
        max_new_tokens: usize,
        seed: u64,
    ) -> spade_selfplay::error::Result<Vec<spade_selfplay::policy::Sampled>> {
        self.inner.sample(role, messages, n, max_new_tokens, seed)
    }

    fn sample_each(
        &mut self,
        role: Role,
        chats: &[&[Message]],
        max_new_tokens: usize,
        seeds: &[u64],
    ) -> spade_selfplay::error::Result<Vec<spade_selfplay::policy::Sampled>> {
        self.batches.lock().unwrap().push((role, seeds.to_vec()));
        self.inner.sample_each(role, chats, max_new_tokens, seeds)
    }

    fn update(
        &mut self,
        batch: &[spade_model::grpo::GrpoSample],
    ) -> spade_selfplay::error::Result<Option<spade_model::grpo::UpdateStats>> {
        self.inner.update(batch)
    }

    fn save(&self, dir: &std::path::Path) -> spade_selfplay::error::Result<()> {
        self.inner.save(dir)
    }

    fn load(&mut self, dir: &std::path::Path) -> spade_selfplay::error::Result<()> {
        self.inner.load(dir)
    }
}

#[tokio::test]
async fn rejected_designs_are_repaired_in_one_batch_and_hints_are_one_batch() {
    let src = env_source("arithmetic_puzzle");
    let dir = tmp("repair-batch");
    // Two completions without code, then two valid repairs.
    let designs = vec![
        "no code here".into(),
        "still none".into(),
        fenced(&src),
        fenced(&src),
    ];
    let batches: Batches = Arc::new(Mutex::new(Vec::new()));
    let mut policy = Recording {
        inner: Scripted::new(script(designs, vec![], None), None),
        batches: Arc::clone(&batches),
    };
    let cfg = TrainConfig {
        designer_group: 2,
        ..small_cfg()
    };
    let seed = cfg.seed;
    let mut run = Run::create(&dir, cfg, corpus(), runtime(), &mut policy, vec![]).unwrap();
    let m = run.rollout().await.unwrap();
    assert_eq!(
        (m.designs, m.valid, m.repaired, m.repair_attempts),
        (2, 2, 2, 2)
    );
    // Pool order follows the completions, whatever order the repairs finished in.
    let ids: Vec<&str> = run.state.pool.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, vec!["env00000", "env00001"]);
    let batches = batches.lock().unwrap().clone();
    let of = |role: Role| -> Vec<Vec<u64>> {
        batches
            .iter()
            .filter(|(r, _)| *r == role)
            .map(|(_, s)| s.clone())
            .collect()
    };
    // One repair batch of both designs, each with the seed it has when repaired alone
    // (rollout 0, prompt 0, completion g, attempt 1).
    let repair = |g: u64| spade_selfplay::seeds::derive(seed, "repair", &[0, 0, g, 1]);
    assert_eq!(of(Role::Repair), vec![vec![repair(0), repair(1)]]);
    // Both new envs' hints in one batch, each seeded by its pool index.
    let hint = |i: u64| spade_selfplay::seeds::derive(seed, "hint", &[0, i]);
    assert_eq!(of(Role::Hint), vec![vec![hint(0), hint(1)]]);
    assert!(run.state.pool.iter().all(|e| e.hint.is_some()));
    let _ = std::fs::remove_dir_all(&dir);
}

const SPIN_ENV: &str = r#"import re


class SpinEnv:
    def __init__(self, max_turns=3):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        if seed is not None:
            random.seed(seed)
        self.turn_count = 0
        return "Answer with a number in \\boxed{}.", {}

    def step(self, action):
        self.turn_count += 1
        if "whirl" in action:
            n = 0
            while True:
                n += 1
        if "7" in action:
            return "right", 1.0, True, False, {}
        done = self.turn_count >= self.max_turns
        return "ok", 0.0, False, done, {}

    def solution(self):
        return "7"
"#;

#[tokio::test]
async fn a_fuel_timeout_during_play_costs_the_designer_half_and_the_run_goes_on() {
    let dir = tmp("timeout");
    let rt: Runtime = runtime().with_limits(Limits {
        fuel_per_call: 300_000_000,
        ..test_limits()
    });
    let mut policy = Scripted::new(
        script(
            vec![fenced(SPIN_ENV)],
            vec![],
            Some("\\boxed{whirl}".into()),
        ),
        None,
    );
    let cfg = TrainConfig {
        plays_per_game: 1,
        hint_plays: 1,
        ..small_cfg()
    };
    let mut run = Run::create(&dir, cfg, corpus(), rt, &mut policy, vec![]).unwrap();
    let m = run.rollout().await.unwrap();
    assert_eq!(m.valid, 1, "{m:?}");
    assert_eq!(m.timeouts, 1);
    assert_eq!(m.designer_rewards, vec![Some(-0.5)]);
    assert_eq!(m.designer_recomputed_rewards, vec![-0.5]);
    assert!(run.state.pool[0].banned);
    assert_eq!(m.pool_size, 0);
    // The run continues: the next rollout designs again (pool below min_games).
    let m2 = run.rollout().await.unwrap();
    assert_eq!(m2.rollout, 1);
    assert!(m2.designed);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------- tiny random model

/// A tiny byte-level chat model (random weights) with room for long prompts.
pub fn tiny_loaded(seed: u64) -> LoadedModel {
    crate::common::tiny_chat_model(seed, Some(1024))
}

fn tiny_cfg() -> TrainConfig {
    TrainConfig {
        seed: 3,
        designs_per_round: 1,
        designer_group: 2,
        designer_max_new_tokens: 24,
        hint_max_new_tokens: 8,
        agent_max_new_tokens: 6,
        games_per_rollout: 1,
        plays_per_game: 2,
        hint_plays: 2,
        max_turns: 2,
        max_repair_attempts: 1,
        designer_delay: 0,
        max_doc_words: 40,
        lr: 1e-3,
        max_agent_update_samples: 8,
        ..TrainConfig::default()
    }
}

fn starter_envs() -> Vec<(String, String)> {
    vec![("arithmetic_puzzle".into(), env_source("arithmetic_puzzle"))]
}

#[tokio::test]
async fn a_tiny_random_model_runs_a_full_rollout_with_an_update() {
    let dir = tmp("tiny");
    let cfg = tiny_cfg();
    let mut policy = CandlePolicy::new(tiny_loaded(1), &cfg.policy()).unwrap();
    let mut run = Run::create(&dir, cfg, corpus(), runtime(), &mut policy, starter_envs()).unwrap();
    let events = std::sync::Arc::new(spade_selfplay::progress::Recorded::default());
    run.on_progress(events.clone());
    let m = run.rollout().await.unwrap();
    // Progress: every phase starts and finishes in order; sampling phases count tokens.
    let events = events.0.lock().unwrap().clone();
    let phases: Vec<&String> = events.iter().filter(|e| e.starts_with("start")).collect();
    assert_eq!(phases[0], "start 0 design 1/1 (2 completions) 48 tokens");
    assert!(
        phases
            .iter()
            .any(|p| p.starts_with("start 0 validate design 1 1 checks"))
    );
    assert!(
        phases
            .iter()
            .any(|p| p.starts_with("start 0 hints for 1 envs 8 tokens"))
    );
    assert!(phases.contains(&&"start 0 play 1 games, 4 episodes 2 turns".to_string()));
    assert!(phases[phases.len() - 2].starts_with("start 0 update on "));
    assert_eq!(phases[phases.len() - 1], "start 0 checkpoint 1 writes");
    let mut open = false;
    for e in &events {
        if e.starts_with("start") {
            assert!(
                !open,
                "a phase started before the last one finished: {events:?}"
            );
            open = true;
        } else if e == "finish" {
            assert!(open);
            open = false;
        }
    }
    let design_end = events.iter().position(|e| e == "finish").unwrap();
    let design_tokens: u64 = events[1..design_end]
        .iter()
        .map(|e| e.strip_prefix("advance ").unwrap().parse::<u64>().unwrap())
        .sum();
    assert!(design_tokens > 0 && design_tokens <= 48, "{design_tokens}");
    // The random model writes no valid env: the metrics say so; the starter env is played.
    assert!(m.designed);
    assert_eq!(m.designs, 2);
    assert_eq!(m.valid, 0);
    assert_eq!(m.designer_rewards, vec![None, None]);
    assert_eq!(m.invalid_designs_dropped, 2);
    assert_eq!(m.designer_samples_trained, 0);
    assert_eq!((m.games, m.episodes), (1, 4));
    assert!(m.loss.is_some(), "{m:?}");
    assert!(m.tokens_trained > 0);
    // This run only checks the plumbing: a random model wins nothing and its designs are all
    // invalid, so every advantage is 0 (learning is tested in tests/all/selfplay/learning.rs).
    assert_eq!(m.zero_advantage_fraction, 1.0);
    // The default ppo_epochs.
    assert_eq!(m.optimizer_steps, 4);
    assert!(
        dir.join("checkpoints/rollout-000001/policy/adapter_model.safetensors")
            .exists()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_policy_trait_is_object_safe_for_scripted_and_model_policies() {
    let cfg = tiny_cfg();
    let mut a = CandlePolicy::new(tiny_loaded(2), &cfg.policy()).unwrap();
    let mut b = Scripted::new(Box::new(|_, _| "\\boxed{1}".to_string()), None);
    let msgs = [Message::new("user", "hi")];
    for p in [&mut a as &mut dyn Policy, &mut b] {
        let out = p.sample(Role::Agent, &msgs, 2, 4, 5).unwrap();
        assert_eq!(out.len(), 2);
        assert!(out.iter().all(|s| s.tokens.len() == s.logprobs.len()));
    }
}

// ---------------------------------------------------------------- eval

fn eval_dir() -> PathBuf {
    crate::common::repo_root().join("eval_envs")
}

#[tokio::test]
async fn every_held_out_env_passes_check() {
    let envs = spade_selfplay::eval::load_envs(&eval_dir()).unwrap();
    assert_eq!(envs.len(), 4);
    let mut tool_use = 0;
    for e in &envs {
        let report = spade_envtools::check::check(
            &runtime(),
            &e.source,
            &spade_envtools::check::CheckOptions::default(),
        )
        .await;
        assert!(report.accepted, "{}: {:?}", e.name, report.codes());
        tool_use += usize::from(report.tool_use);
    }
    assert_eq!(tool_use, 1);
}

#[tokio::test]
async fn eval_reports_win_rate_per_skill_with_multi_turn_history() {
    let envs = spade_selfplay::eval::load_envs(&eval_dir()).unwrap();
    // Binary search on number_guess (reads the bounds from the last observation); a wrong
    // answer everywhere else.
    let mut policy = Scripted::new(
        Box::new(|_, msgs: &[Message]| {
            let last = &msgs.last().unwrap().content;
            if msgs[1].content.contains("from 1 to 64") {
                let (lo, hi) = match last.split_once("between ") {
                    Some((_, rest)) => {
                        let nums: Vec<i64> = rest
                            .trim_end_matches('.')
                            .split(" and ")
                            .map(|n| n.trim().parse().unwrap())
                            .collect();
                        (nums[0], nums[1])
                    }
                    None => (1, 64),
                };
                return format!("\\boxed{{{}}}", (lo + hi) / 2);
            }
            "\\boxed{0} <answer>nobody</answer>".to_string()
        }),
        None,
    );
    let (scores, per_skill) = spade_selfplay::eval::evaluate(
        &runtime(),
        &mut policy,
        &envs,
        2,
        0,
        play_settings(8, 16),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(scores.len(), 4);
    assert_eq!(per_skill.len(), 4);
    assert_eq!(per_skill["Strategic Planning"], 1.0);
    assert_eq!(per_skill["Mathematical Reasoning"], 0.0);
    assert_eq!(per_skill["Optimization"], 0.0);
}

/// Three starter environments are copies of fixtures (the binary embeds no test fixture):
/// each copy must still be byte for byte its fixture, so a change to one is made to both.
#[test]
fn the_starter_envs_copied_from_fixtures_equal_their_fixtures() {
    let starters = spade_selfplay::starter_envs::starter_envs();
    let mut copies = 0;
    for (name, source) in &starters {
        let fixture = crate::common::env_dir(name).join("env.py");
        if fixture.is_file() {
            assert_eq!(
                source,
                &std::fs::read_to_string(&fixture).unwrap(),
                "crates/selfplay/assets/starter_envs/{name}/env.py differs from {}",
                fixture.display()
            );
            copies += 1;
        }
    }
    assert_eq!(
        copies, 3,
        "arithmetic_puzzle, grid_walk and tool_inventory are copies"
    );
}

#[tokio::test]
async fn every_bundled_starter_env_passes_check_and_the_edge_envs_score_by_hand() {
    for (name, source) in spade_selfplay::starter_envs::starter_envs() {
        let report = spade_envtools::check::check(
            &runtime(),
            &source,
            &spade_envtools::check::CheckOptions::default(),
        )
        .await;
        assert!(report.accepted, "{name}: {:?}", report.codes());
    }
    // Lenient parsing, by hand: the bigger of the two numbers in the observation wins, with or
    // without \boxed{}; the smaller loses.
    let envs = spade_selfplay::starter_envs::starter_envs();
    let bigger = &envs.iter().find(|(n, _)| n == "bigger_number").unwrap().1;
    for (reply, wins) in [("big", true), ("boxed", true), ("small", false)] {
        let mut sb = runtime()
            .sandbox(bigger, spade_sandbox::SandboxOptions::seeded(3))
            .await
            .unwrap();
        let obs = sb.reset(Some(3)).await.unwrap().observation;
        let nums = numbers_in(&obs);
        let (hi, lo) = (nums[0].max(nums[1]), nums[0].min(nums[1]));
        let action = match reply {
            "big" => format!("It is {hi}."),
            "boxed" => format!("I pick {lo}... no: \\boxed{{{hi}}}"),
            _ => format!("{lo}"),
        };
        let step = sb.step(&action).await.unwrap();
        assert!(step.terminated, "{obs} / {action}");
        assert_eq!(
            step.reward,
            if wins { 1.0 } else { 0.0 },
            "{obs} / {action}"
        );
    }
    // guess_three: guessing 1, 2, 3 in turn always wins within the three guesses.
    let guess = &envs.iter().find(|(n, _)| n == "guess_three").unwrap().1;
    for seed in 0..6 {
        let mut sb = runtime()
            .sandbox(guess, spade_sandbox::SandboxOptions::seeded(seed))
            .await
            .unwrap();
        sb.reset(Some(seed)).await.unwrap();
        let mut won = false;
        for g in 1..=3 {
            let step = sb.step(&format!("\\boxed{{{g}}}")).await.unwrap();
            if step.terminated {
                won = step.reward == 1.0;
                break;
            }
        }
        assert!(won, "seed {seed}");
    }
}

/// A bundled starter environment's sandbox, reset at `difficulty` (`None`: no difficulty
/// passed, as self-play calls it).
async fn starter_at(
    name: &str,
    seed: u64,
    difficulty: Option<serde_json::Value>,
    max_turns: Option<u32>,
) -> (spade_sandbox::Sandbox, Result<String, String>) {
    let envs = spade_selfplay::starter_envs::starter_envs();
    let source = &envs.iter().find(|(n, _)| n == name).unwrap().1;
    let opts = spade_sandbox::SandboxOptions { seed, max_turns };
    let mut sb = runtime().sandbox(source, opts).await.unwrap();
    let obs = match difficulty {
        None => sb.reset(Some(seed)).await.map(|r| r.observation),
        Some(d) => {
            let mut fields = serde_json::Map::new();
            fields.insert("difficulty".into(), d);
            sb.reset_with(Some(seed), &spade_sandbox::ExtraFields::from_map(&fields))
                .await
                .map(|(r, dropped)| {
                    assert!(dropped.is_empty(), "{name} takes a difficulty");
                    r.observation
                })
        }
    };
    (sb, obs.map_err(|e| e.to_string()))
}

/// The edge starter environments take RLVE's `difficulty` so that fixed-env training can play
/// them; the levels, written from their docstrings: bigger_number draws numbers of up to d + 1
/// digits, next_number draws n from 1 to 20 * 10^d, guess_three hides a number among 1 to 3 + d.
/// Difficulty 0 is the environment self-play plays (no difficulty passed).
#[tokio::test]
async fn the_edge_starter_envs_take_a_difficulty_and_level_0_is_self_plays_env() {
    for name in ["bigger_number", "next_number", "guess_three"] {
        for seed in [1, 2, 3] {
            let (_, plain) = starter_at(name, seed, None, None).await;
            let (_, zero) = starter_at(name, seed, Some(0.into()), None).await;
            assert_eq!(plain.unwrap(), zero.unwrap(), "{name} seed {seed}");
        }
        for bad in [
            serde_json::json!(-1),
            serde_json::json!("2"),
            serde_json::json!(true),
        ] {
            let (_, e) = starter_at(name, 1, Some(bad.clone()), None).await;
            let e = e.unwrap_err();
            assert!(
                e.contains("ValueError: difficulty must be an integer >= 0, not"),
                "{name} {bad}: {e}"
            );
        }
    }
    // bigger_number at difficulty 2: both numbers below 1,000, some above 99 (the level is
    // used), and naming the bigger one still wins.
    let mut three_digits = false;
    for seed in 0..12 {
        let (mut sb, obs) = starter_at("bigger_number", seed, Some(2.into()), None).await;
        let nums = numbers_in(&obs.unwrap());
        let (a, b) = (nums[0], nums[1]);
        assert!((1..1000).contains(&a) && (1..1000).contains(&b), "{a} {b}");
        three_digits |= a.max(b) >= 100;
        let step = sb.step(&format!("\\boxed{{{}}}", a.max(b))).await.unwrap();
        assert_eq!(step.reward, 1.0);
    }
    assert!(
        three_digits,
        "difficulty 2 drew no three-digit number in 12 seeds"
    );
    // next_number at difficulty 1: n from 1 to 200, some above 20; n + 1 wins.
    let mut above_20 = false;
    for seed in 0..12 {
        let (mut sb, obs) = starter_at("next_number", seed, Some(1.into()), None).await;
        let n = numbers_in(&obs.unwrap())[0];
        assert!((1..=200).contains(&n), "{n}");
        above_20 |= n > 20;
        let step = sb.step(&format!("{}", n + 1)).await.unwrap();
        assert_eq!(step.reward, 1.0);
    }
    assert!(above_20, "difficulty 1 drew no n above 20 in 12 seeds");
    // guess_three at difficulty 2: the secret is among 1 to 5, so five guesses 1..=5 always
    // win, and some secret is above 3.
    let mut above_3 = false;
    for seed in 0..12 {
        let (mut sb, obs) = starter_at("guess_three", seed, Some(2.into()), Some(5)).await;
        let obs = obs.unwrap();
        assert!(obs.contains("a whole number from 1 to 5"), "{obs}");
        assert!(obs.contains("You have 5 guesses"), "{obs}");
        let mut won_at = None;
        for g in 1..=5 {
            let step = sb.step(&format!("\\boxed{{{g}}}")).await.unwrap();
            if step.terminated {
                assert_eq!(step.reward, 1.0);
                won_at = Some(g);
                break;
            }
        }
        let g = won_at.unwrap_or_else(|| panic!("seed {seed}: not found in 1..=5"));
        above_3 |= g > 3;
    }
    assert!(above_3, "difficulty 2 hid no number above 3 in 12 seeds");
}
