//! Fixed-environment training (`spade train --fixed-envs`): the difficulty controller driven by
//! a scripted agent whose skill is known (it answers levels 0 to 2 and fails from 3 on), so
//! every window move is derived by hand from the rule; resume; a tiny model that trains on
//! mixed groups; and the errors a user can hit.
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use spade_envtools::{Episode, Record};
use spade_model::chat::Message;
use spade_selfplay::credit::AgentBaseline;
use spade_selfplay::difficulty::{ControllerKind, DifficultyConfig};
use spade_selfplay::eval::{EvalEnv, PlaySettings, evaluate};
use spade_selfplay::lockstep::{self, LiveEpisode};
use spade_selfplay::prompts::AgentExample;
use spade_selfplay::{CandlePolicy, Corpus, Metrics, Role, Run, Scripted, TrainConfig};

use crate::common::{fails_with, numbers_in, play_settings, runtime};

/// An environment whose problem is its difficulty: answer `\boxed{d}` at level `d`.
pub(crate) const LEVEL_ENV: &str = r#"
class LevelEnv:
    def __init__(self, max_turns=None):
        self.level = None

    def reset(self, seed=None, difficulty=0):
        self.level = difficulty
        return f"Level {difficulty} (seed {seed}). Answer with the level number.", {}

    def step(self, action):
        won = action.strip() == "\\boxed{%d}" % self.level
        return ("right" if won else "wrong"), (1.0 if won else 0.0), True, False, {}

    def solution(self):
        return "\\boxed{%d}" % self.level

    def close(self):
        pass
"#;

/// The level in the first observation of an agent chat.
fn level(msgs: &[Message]) -> u64 {
    let obs = &msgs[1].content;
    obs.strip_prefix("Level ")
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .expect("a level observation")
}

/// The agent solves levels up to `skill` and answers 0 above it.
fn agent(skill: u64) -> Scripted {
    Scripted::new(
        Box::new(move |role: Role, msgs: &[Message]| {
            assert_eq!(
                role,
                Role::Agent,
                "fixed-env training samples only the agent"
            );
            let d = level(msgs);
            format!("\\boxed{{{}}}", if d <= skill { d } else { 0 })
        }),
        None,
    )
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-fixed-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn corpus() -> Corpus {
    Corpus::parse("{\"text\": \"unused in fixed-env training\"}", 100).unwrap()
}

fn cfg() -> TrainConfig {
    TrainConfig {
        seed: 5,
        fixed_envs: vec!["level".into()],
        plays_per_game: 4,
        max_turns: 2,
        difficulty: DifficultyConfig {
            tau_num: 4,
            ..DifficultyConfig::default()
        },
        ..TrainConfig::default()
    }
}

fn envs() -> Vec<(String, String)> {
    vec![("level".into(), LEVEL_ENV.into())]
}

/// The sliding window's rule, by hand: the rollout's difficulty lies in the window left by the
/// previous rollout; its 4 plays at `high` (tau_num 4) all win when `high <= 2`, so the window
/// rises by one; otherwise it stays. Returns the final `(low, high)`.
fn check_window_moves(ms: &[Metrics], skill: u64) -> (u64, u64) {
    let (mut low, mut high) = (0, 0);
    for m in ms {
        assert_eq!(m.fixed.len(), 1);
        let f = &m.fixed[0];
        assert!(
            (low..=high).contains(&f.difficulty),
            "rollout {}: {f:?} outside [{low}, {high}]",
            m.rollout
        );
        let won = f.difficulty <= skill;
        assert_eq!(
            f.win_rate,
            if won { 1.0 } else { 0.0 },
            "rollout {}",
            m.rollout
        );
        assert_eq!(f.plays, 4);
        if f.difficulty == high && won {
            high += 1;
            low = low.max((high + 1).saturating_sub(4));
        }
        assert_eq!((f.low, f.high), (low, high), "rollout {}: {f:?}", m.rollout);
        assert_eq!((m.games, m.episodes), (1, 4));
        assert_eq!(m.designs, 0);
        assert!(!m.designed);
    }
    (low, high)
}

/// What a perfect player of the edge starter environments answers: the bigger number, the next
/// number, and for guess_three the guesses 1, 2, 3 in turn (which find any number from 1 to 3).
fn edge_oracle() -> Scripted {
    Scripted::new(
        Box::new(|_: Role, msgs: &[Message]| {
            let obs = &msgs[1].content;
            let nums = numbers_in(obs);
            let answer = if obs.starts_with("Which number is bigger") {
                nums[0].max(nums[1])
            } else if obs.starts_with("Count up") {
                nums[0] + 1
            } else {
                assert!(obs.starts_with("I am thinking of"), "{obs}");
                msgs.iter().filter(|m| m.role == "assistant").count() as u64 + 1
            };
            format!("\\boxed{{{answer}}}")
        }),
        None,
    )
}

/// The shipped demonstration config (configs/fixed-edge.toml) is valid, names the bundled edge
/// starter environments and RLVE's Division, and its starter environments train at difficulties
/// the window moves through. By hand, with tau_num 8 and 8 plays of one problem per rollout:
/// rollout 0 plays every environment at 0 and the oracle wins all 8 plays, so each window
/// becomes [0, 1]; in rollout 1, bigger_number and next_number are won at the drawn difficulty,
/// so their window rises to [0, 2] exactly when that difficulty was 1.
#[tokio::test]
async fn the_shipped_edge_config_trains_the_starter_envs_through_their_levels() {
    let cfg = TrainConfig::from_file(std::path::Path::new("configs/fixed-edge.toml")).unwrap();
    cfg.validate().unwrap();
    let starters = spade_selfplay::starter_envs::starter_envs();
    let mut envs = Vec::new();
    for spec in &cfg.fixed_envs {
        if let Some(name) = spec.strip_prefix("rlve:") {
            assert_eq!(name, "Division");
            continue;
        }
        let source = std::fs::read_to_string(spec).unwrap();
        assert!(
            starters.iter().any(|(_, s)| *s == source),
            "{spec} is not a bundled starter environment"
        );
        envs.push((spec.clone(), source));
    }
    assert_eq!(envs.len(), 3);
    assert_eq!(
        (cfg.rollouts, cfg.plays_per_game, cfg.max_turns),
        (30, 8, 3)
    );
    assert_eq!(cfg.difficulty.tau_num, 8);
    let cfg = TrainConfig {
        fixed_envs: envs.iter().map(|(n, _)| n.clone()).collect(),
        ..cfg
    };
    let dir = tmp("edge-config");
    let mut policy = edge_oracle();
    let mut run = Run::create(&dir, cfg, corpus(), runtime(), &mut policy, envs).unwrap();
    let ms = run.run(2).await.unwrap();
    for f in &ms[0].fixed {
        assert_eq!(
            (f.difficulty, f.plays, f.win_rate, f.low, f.high),
            (0, 8, 1.0, 0, 1),
            "{f:?}"
        );
    }
    for f in &ms[1].fixed {
        assert!(f.difficulty <= 1, "{f:?}");
        if !f.env.contains("guess_three") {
            assert_eq!(f.win_rate, 1.0, "{f:?}");
            assert_eq!((f.low, f.high), (0, 1 + f.difficulty), "{f:?}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_window_climbs_to_the_agents_edge_and_stops_there() {
    let dir = tmp("climb");
    let mut policy = agent(2);
    let mut run = Run::create(&dir, cfg(), corpus(), runtime(), &mut policy, envs()).unwrap();
    let ms = run.run(16).await.unwrap();
    let (low, high) = check_window_moves(&ms, 2);
    // Levels 0, 1 and 2 are won, so the window reaches 3 and stays: 3 is never won.
    assert_eq!((low, high), (0, 3));
    assert!(ms.iter().any(|m| m.fixed[0].difficulty == 3));
    // Every play of a rollout is one problem: one seed, one difficulty, in its trajectory name.
    let names: Vec<String> = std::fs::read_dir(dir.join("trajectories/r00000"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 4);
    assert!(
        names.iter().all(|n| n.starts_with("env00000-d0-")),
        "{names:?}"
    );
    // The controller's state is in the checkpoint.
    let state: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("checkpoints/rollout-000016/state.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(state["difficulty"]["envs"]["level"]["high"], 3);
    // `spade report` names the difficulty reached and charts it.
    let report = spade_selfplay::report::write_report(&dir, &Default::default()).unwrap();
    let lines = report.summary_lines();
    assert!(
        lines.contains(&"difficulty reached: level 3 (window [0, 3])".to_string()),
        "{lines:?}"
    );
    let svg = std::fs::read_to_string(dir.join("report/difficulty.svg")).unwrap();
    assert!(svg.contains("level"), "{svg}");
    let html = std::fs::read_to_string(dir.join("report/index.html")).unwrap();
    assert!(html.contains("<tr><th>Difficulty reached: level</th><td>3 (window [0, 3]; highest played 3)</td></tr>"), "{html}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_resumed_run_continues_the_controller_exactly() {
    let straight = tmp("straight");
    let mut policy = agent(1);
    let mut run = Run::create(&straight, cfg(), corpus(), runtime(), &mut policy, envs()).unwrap();
    let all = run.run(8).await.unwrap();
    drop(run);
    let split = tmp("split");
    let mut policy = agent(1);
    let mut run = Run::create(&split, cfg(), corpus(), runtime(), &mut policy, envs()).unwrap();
    let mut parts = run.run(3).await.unwrap();
    drop(run);
    let mut run = Run::resume(&split, corpus(), runtime(), &mut policy).unwrap();
    parts.extend(run.run(5).await.unwrap());
    let fixed = |ms: &[Metrics]| ms.iter().map(|m| m.fixed.clone()).collect::<Vec<_>>();
    assert_eq!(fixed(&all), fixed(&parts));
    check_window_moves(&all, 1);
    let _ = std::fs::remove_dir_all(&straight);
    let _ = std::fs::remove_dir_all(&split);
}

#[tokio::test]
async fn learning_potential_plays_its_fixed_difficulty_and_selects_envs() {
    let dir = tmp("lp");
    let mut cfg = cfg();
    cfg.fixed_envs = vec!["a".into(), "b".into(), "c".into()];
    cfg.fixed_envs_per_rollout = 2;
    cfg.difficulty = DifficultyConfig {
        controller: ControllerKind::LearningPotential,
        lp_difficulty: 2,
        select_interval: 1,
        ..DifficultyConfig::default()
    };
    let envs = ["a", "b", "c"]
        .map(|n| (n.to_string(), LEVEL_ENV.to_string()))
        .to_vec();
    let mut policy = agent(5);
    let mut run = Run::create(&dir, cfg, corpus(), runtime(), &mut policy, envs).unwrap();
    let ms = run.run(3).await.unwrap();
    for m in &ms {
        assert_eq!(m.fixed.len(), 2);
        assert!(
            m.fixed
                .iter()
                .all(|f| f.difficulty == 2 && f.win_rate == 1.0 && f.high == 0)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_tiny_model_trains_on_a_group_with_wins_and_losses() {
    // Levels 0 and 1 won, 2 lost: a window of [0, 2] after the climb gives groups whose
    // advantages (return minus the per-level EMA baseline, which starts at 0) are nonzero.
    let dir = tmp("tiny");
    let mut cfg = cfg();
    cfg.lr = 1e-3;
    cfg.agent_max_new_tokens = 4;
    let model = CandlePolicy::new(super::train::tiny_loaded(2), &cfg.policy()).unwrap();
    let mut policy = Scripted::new(
        Box::new(|_: Role, msgs: &[Message]| {
            let d = level(msgs);
            format!("\\boxed{{{}}}", if d <= 1 { d } else { 0 })
        }),
        Some(model),
    );
    let mut run = Run::create(&dir, cfg, corpus(), runtime(), &mut policy, envs()).unwrap();
    let m = run.rollout().await.unwrap();
    // Rollout 0 plays level 0 and wins all 4: return 1 minus baseline 0 is advantage 1.
    assert_eq!(m.fixed[0].difficulty, 0);
    assert_eq!(m.agent_samples_trained, 4);
    assert_eq!(m.zero_advantage_fraction, 0.0);
    assert!(m.grad_norm.unwrap() > 0.0, "{m:?}");
    assert!(m.tokens_scored > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_environment_without_a_difficulty_is_refused_by_name() {
    let dir = tmp("nodiff");
    let src = LEVEL_ENV.replace(
        "def reset(self, seed=None, difficulty=0):",
        "def reset(self, seed=None):\n        difficulty = 0",
    );
    let mut policy = agent(1);
    let mut run = Run::create(
        &dir,
        cfg(),
        corpus(),
        runtime(),
        &mut policy,
        vec![("level".into(), src)],
    )
    .unwrap();
    let e = run.rollout().await.unwrap_err().to_string();
    assert!(
        e.contains("fixed environment env00000 (fixed:level) takes no `difficulty` in reset()"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fixed_env_cli_errors_are_clear() {
    fails_with(
        &[
            "train",
            "--fixed-envs",
            "rlve:Nope",
            "--out",
            "target/tmp/fixed-cli",
        ],
        None,
        1,
        "loading fixed environment 'rlve:Nope'",
    );
    fails_with(
        &[
            "train",
            "--fixed-envs",
            "tests/envs/grid_walk/env.py,tests/envs/grid_walk/env.py",
            "--out",
            "target/tmp/fixed-cli",
        ],
        None,
        1,
        "--fixed-envs names 'tests/envs/grid_walk/env.py' twice",
    );
    // One environment file is one environment (not a list file of Python lines).
    fails_with(
        &[
            "train",
            "--fixed-envs",
            "tests/envs/grid_walk/env.py",
            "--model",
            "target/tmp/no-such-model",
            "--out",
            "target/tmp/fixed-cli",
        ],
        None,
        1,
        "loading model target/tmp/no-such-model",
    );
    fails_with(
        &[
            "train",
            "--fixed-envs",
            " , ",
            "--out",
            "target/tmp/fixed-cli",
        ],
        None,
        1,
        "--fixed-envs names no environment",
    );
    fails_with(
        &[
            "train",
            "--fixed-envs",
            "tests/envs/missing.py",
            "--out",
            "target/tmp/fixed-cli",
        ],
        None,
        1,
        "fixed environment file 'tests/envs/missing.py' does not exist",
    );
    fails_with(
        &[
            "train",
            "--fixed-envs",
            "rlve:Sorting",
            "--resume",
            "--out",
            "target/tmp/fixed-cli",
        ],
        None,
        1,
        "the argument '--fixed-envs <LIST|FILE>' cannot be used with '--resume'",
    );
}

#[tokio::test]
async fn eval_plays_at_a_difficulty_and_gives_wilson_intervals() {
    let envs = vec![EvalEnv {
        name: "level".into(),
        skill: "Levels".into(),
        source: LEVEL_ENV.into(),
        difficulty: Some(2),
    }];
    let (solved, _) = evaluate(
        &runtime(),
        &mut agent(2),
        &envs,
        4,
        0,
        play_settings(2, 8),
        |_| {},
    )
    .await
    .unwrap();
    let (failed, _) = evaluate(
        &runtime(),
        &mut agent(1),
        &envs,
        4,
        0,
        play_settings(2, 8),
        |_| {},
    )
    .await
    .unwrap();
    assert_eq!(
        (solved[0].wins, solved[0].plays, solved[0].difficulty),
        (4, 4, Some(2))
    );
    assert_eq!(failed[0].wins, 0);
    // Wilson 95% for 4/4: [0.5101, 1]; for 0/4: [0, 0.4899] (= z^2 / (4 + z^2)).
    assert!(
        (solved[0].ci_low - 0.510_109).abs() < 1e-5,
        "{:?}",
        solved[0]
    );
    assert_eq!(solved[0].ci_high, 1.0);
    assert_eq!(failed[0].ci_low, 0.0);
    assert!(
        (failed[0].ci_high - 3.841_459 / 7.841_459).abs() < 1e-5,
        "{:?}",
        failed[0]
    );
}

/// Two worked examples, answered in the format LEVEL_ENV reads.
fn examples() -> Vec<AgentExample> {
    vec![
        AgentExample {
            user: "Level 7 (an example). Answer with the level number.".into(),
            assistant: "\\boxed{7}".into(),
        },
        AgentExample {
            user: "Level 9 (an example). Answer with the level number.".into(),
            assistant: "\\boxed{9}".into(),
        },
    ]
}

/// An agent that checks every chat it is asked to continue: the system prompt, then each
/// worked example as a user message and an assistant reply, then the observation. It answers
/// the observation's level and counts the chats it checked.
fn example_reader(want: Vec<AgentExample>, seen: Arc<Mutex<usize>>) -> Scripted {
    Scripted::new(
        Box::new(move |_: Role, msgs: &[Message]| {
            assert_eq!(msgs.len(), 2 + 2 * want.len(), "{msgs:?}");
            assert_eq!(msgs[0].role, "system");
            for (k, ex) in want.iter().enumerate() {
                assert_eq!(
                    (msgs[1 + 2 * k].role.as_str(), &msgs[1 + 2 * k].content),
                    ("user", &ex.user)
                );
                assert_eq!(
                    (msgs[2 + 2 * k].role.as_str(), &msgs[2 + 2 * k].content),
                    ("assistant", &ex.assistant)
                );
            }
            let obs = &msgs[msgs.len() - 1];
            assert_eq!(obs.role, "user");
            *seen.lock().unwrap() += 1;
            let d = level(&[msgs[0].clone(), obs.clone()]);
            format!("\\boxed{{{d}}}")
        }),
        None,
    )
}

/// `agent_examples` put each worked exchange between the system prompt and the first
/// observation, in training and in evaluation, and only the agent's own reply is sampled: the
/// examples are in the prompt it was sampled from, never in its tokens.
#[tokio::test]
async fn agent_examples_come_before_the_observation_and_are_prompt_not_reply() {
    // Training: every play of the rollout is shown both examples, and the agent that reads the
    // observation after them wins all 4 plays at level 0 (so the window rises, as in rollout 0
    // of the climb above).
    let seen = Arc::new(Mutex::new(0));
    let dir = tmp("examples");
    let cfg = TrainConfig {
        agent_examples: examples(),
        ..cfg()
    };
    let mut policy = example_reader(examples(), seen.clone());
    let mut run = Run::create(&dir, cfg, corpus(), runtime(), &mut policy, envs()).unwrap();
    let ms = run.run(1).await.unwrap();
    let f = &ms[0].fixed[0];
    assert_eq!((f.difficulty, f.win_rate, f.high), (0, 1.0, 1), "{f:?}");
    assert_eq!(*seen.lock().unwrap(), 4);
    let _ = std::fs::remove_dir_all(&dir);

    // Evaluation with the same examples: 4 plays at level 3, all won by the same reader.
    let envs = vec![EvalEnv {
        name: "level".into(),
        skill: "Levels".into(),
        source: LEVEL_ENV.into(),
        difficulty: Some(3),
    }];
    let shown = examples();
    let settings = PlaySettings {
        examples: &shown,
        ..play_settings(2, 8)
    };
    let mut reader = example_reader(examples(), seen.clone());
    let (scores, _) = evaluate(&runtime(), &mut reader, &envs, 4, 0, settings, |_| {})
        .await
        .unwrap();
    assert_eq!((scores[0].wins, scores[0].plays), (4, 4));
    assert_eq!(*seen.lock().unwrap(), 8);

    // The sampled turn: its prompt holds the examples' text, its tokens are the reply alone
    // (the scripted policy's tokens are the bytes of its text).
    let options = spade_sandbox::SandboxOptions::seeded(1);
    let mut sandbox = Episode::start(&runtime(), LEVEL_ENV, options, Record::Off)
        .await
        .unwrap();
    let mut fields = serde_json::Map::new();
    fields.insert("difficulty".into(), 5.into());
    let (reset, _) = sandbox
        .reset_with(Some(1), &spade_sandbox::ExtraFields::from_map(&fields))
        .await
        .result
        .unwrap();
    let mut episode = vec![LiveEpisode::new(
        sandbox,
        "system",
        &shown,
        reset.observation,
        false,
    )];
    let mut reader = example_reader(examples(), seen.clone());
    lockstep::play(&mut reader, &mut episode, 1, 8, |_, _| 0, || {})
        .await
        .unwrap();
    let turn = &episode[0].turns[0];
    let prompt: Vec<u8> = turn.prompt.iter().map(|&b| b as u8).collect();
    let prompt = String::from_utf8(prompt).unwrap();
    assert!(
        prompt.contains("Level 7 (an example)") && prompt.contains("\\boxed{9}"),
        "{prompt}"
    );
    assert_eq!(turn.text, "\\boxed{5}");
    assert_eq!(turn.tokens, b"\\boxed{5}".map(u32::from).to_vec());
    assert_eq!(episode[0].ret(), 1.0);
}

/// A worked example needs both messages, and a misspelt key is refused by name.
#[test]
fn a_bad_agent_example_is_refused_with_its_number() {
    let err = TrainConfig::parse(
        "[[agent_examples]]\nuser = \"Q\"\nassistant = \"\\\\boxed{1}\"\n\n\
         [[agent_examples]]\nuser = \"Q\"\nassistant = \" \"\n",
        true,
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("agent example 2 needs a non-empty `user` message and `assistant` reply"),
        "{err}"
    );
    let err = TrainConfig::parse("[[agent_examples]]\nuser = \"Q\"\nanswer = \"A\"\n", true)
        .unwrap_err()
        .to_string();
    assert!(err.contains("unknown field `answer`"), "{err}");
}

/// `spade eval --agent-examples` reads a config's examples, and says which file is wrong and
/// which example.
#[test]
fn eval_agent_examples_errors_name_the_file() {
    let env = "crates/selfplay/assets/starter_envs/bigger_number/env.py";
    fails_with(
        &[
            "eval",
            "--env",
            env,
            "--agent-examples",
            "tests/envs/missing.toml",
        ],
        None,
        1,
        "reading --agent-examples tests/envs/missing.toml",
    );
    fails_with(
        &[
            "eval",
            "--env",
            env,
            "--agent-examples",
            "configs/fixed-edge.toml",
        ],
        None,
        1,
        "--agent-examples configs/fixed-edge.toml has no agent_examples: give a config with \
         [[agent_examples]] tables (`user` and `assistant`)",
    );
    let bad = tmp("bad-examples.toml");
    std::fs::write(&bad, "[[agent_examples]]\nuser = \"Q\"\nassistant = \"\"\n").unwrap();
    let bad = bad.to_str().unwrap();
    fails_with(
        &["eval", "--env", env, "--agent-examples", bad],
        None,
        1,
        "agent example 1 needs a non-empty `user` message and `assistant` reply",
    );
    let _ = std::fs::remove_file(bad);
}

/// The shipped RLVE demonstration config (configs/fixed-rlve.toml) is valid: six RLVE
/// environments, one turn, group z-score advantages, and two worked examples whose replies are
/// the `\boxed{}` answers RLVE's adapter reads.
#[test]
fn the_shipped_rlve_config_shows_boxed_examples() {
    let cfg = TrainConfig::from_file(std::path::Path::new("configs/fixed-rlve.toml")).unwrap();
    cfg.validate().unwrap();
    assert_eq!(cfg.fixed_envs.len(), 6);
    assert!(
        cfg.fixed_envs.iter().all(|e| e.starts_with("rlve:")),
        "{:?}",
        cfg.fixed_envs
    );
    assert_eq!(
        (cfg.rollouts, cfg.plays_per_game, cfg.max_turns),
        (30, 8, 1)
    );
    assert_eq!(cfg.agent_baseline, AgentBaseline::Zscore);
    assert_eq!(cfg.agent_examples.len(), 2);
    for ex in &cfg.agent_examples {
        assert_eq!(
            spade_selfplay::extract::action(&ex.assistant, false),
            ex.assistant
        );
        assert!(ex.assistant.starts_with("\\boxed{") && ex.assistant.ends_with('}'));
    }
}

#[test]
fn a_negative_entropy_coef_is_refused() {
    for value in ["-0.01", "-1"] {
        let err = TrainConfig::parse(&format!("entropy_coef = {value}\n"), true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("entropy_coef must be a finite number >= 0"),
            "{value}: {err}"
        );
    }
    let cfg = TrainConfig::parse("entropy_coef = 0.01\n", true).unwrap();
    assert_eq!(cfg.entropy_coef, 0.01);
}
