//! A design's admission in a scripted rollout (issue 52): the automatic fixes run before
//! validation, the fixed source is the one admitted and its design record lists the fixes; with
//! `auto_fix = false` the broken design is rejected; a multi-turn design whose `solution()`
//! gives a wrong answer never enters the pool.
use std::path::PathBuf;

use spade_model::chat::Message;
use spade_selfplay::{Corpus, Role, Run, Scripted, TrainConfig};

use crate::common::{repo_root, runtime};

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-admission-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap()
}

/// A designer (and repairer) that always writes `source`; the agent answers 0.
fn designer(source: String) -> Scripted {
    let reply = format!("Here it is.\n```python\n{source}```\n");
    Scripted::new(
        Box::new(move |role: Role, _: &[Message]| match role {
            Role::Designer | Role::Repair => reply.clone(),
            Role::Hint => "Add the two numbers.".to_owned(),
            Role::Agent => "\\boxed{0}".to_owned(),
        }),
        None,
    )
}

fn cfg(auto_fix: bool) -> TrainConfig {
    TrainConfig {
        designs_per_round: 1,
        designer_group: 1,
        games_per_rollout: 1,
        plays_per_game: 1,
        hint_plays: 1,
        max_turns: 2,
        designer_delay: 0,
        max_repair_attempts: 0,
        max_agent_update_samples: 0,
        auto_fix,
        ..TrainConfig::default()
    }
}

fn corpus() -> Corpus {
    Corpus::parse(
        "{\"text\": \"Fractions add over a common denominator.\"}",
        6000,
    )
    .unwrap()
}

#[tokio::test]
async fn the_fixed_design_is_admitted_and_its_record_lists_the_fixes() {
    let broken = read("tests/autofix/both.py");
    let dir = tmp("fixed");
    let mut policy = designer(broken.clone());
    let mut run = Run::create(&dir, cfg(true), corpus(), runtime(), &mut policy, vec![]).unwrap();
    let m = run.rollout().await.unwrap();
    assert_eq!((m.designs, m.valid), (1, 1));
    let env = &run.state.pool[0];
    assert_eq!(env.class_name, "FractionBothEnv");
    assert_eq!(env.source, spade_envtools::autofix(&broken).source);
    assert_ne!(env.source, broken);
    let record: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join(env.design_file.as_deref().unwrap())).unwrap(),
    )
    .unwrap();
    let kinds: Vec<&str> = record["attempts"][1]["fixes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["f_string_brace", "missing_import"]);
    let _ = std::fs::remove_dir_all(&dir);

    // Without the fixes the same design is rejected (a syntax error).
    let dir = tmp("unfixed");
    let mut policy = designer(broken);
    let mut run = Run::create(&dir, cfg(false), corpus(), runtime(), &mut policy, vec![]).unwrap();
    let m = run.rollout().await.unwrap();
    assert_eq!((m.designs, m.valid, m.pool_size), (1, 0, 0));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_multi_turn_design_whose_solution_does_not_win_is_rejected() {
    let dir = tmp("wrong");
    let mut policy = designer(read("tests/solutions/multi_turn_wrong_answer.py"));
    let mut run = Run::create(&dir, cfg(true), corpus(), runtime(), &mut policy, vec![]).unwrap();
    let m = run.rollout().await.unwrap();
    assert_eq!((m.designs, m.valid, m.pool_size), (1, 0, 0));
    let _ = std::fs::remove_dir_all(&dir);
}
