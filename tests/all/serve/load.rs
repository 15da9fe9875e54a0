//! Load: 256 concurrent sessions from one client process, each a full episode; every session's
//! observations and trace hash equal those of the same episode played alone.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use spade_envtools::trajectory::RecordMeta;
use spade_envtools::{Episode, Record};
use spade_sandbox::{Limits, SandboxOptions};

use super::env_path;
use super::harness::{ServeProcess, run_python};
use crate::common::{env_actions, spade, stderr};

const ENVS: &[&str] = &[
    "arithmetic_puzzle",
    "fraction_answer",
    "grid_walk",
    "tool_inventory",
];
const SESSIONS: u64 = 256;

/// One session's episode, played alone in-process as `spade run --record` would.
struct Expected {
    env: &'static str,
    seed: u64,
    actions: Vec<String>,
    texts_sha256: String,
    trace_sha256: String,
}

fn texts_hash(texts: &[String]) -> String {
    hex::encode(Sha256::digest(texts.join("\n\u{0}").as_bytes()))
}

/// Plays `env` with `seed`, cycling through its fixture actions until the episode ends.
async fn play_alone(env: &'static str, seed: u64) -> Expected {
    let runtime = crate::common::runtime().with_limits(Limits::default());
    let source = crate::common::env_source(env);
    let fixture = env_actions(env);
    let options = SandboxOptions {
        seed,
        max_turns: None,
    };
    let record = Record::Memory(RecordMeta::default());
    let mut recorder = Episode::start(&runtime, &source, options, record)
        .await
        .unwrap();
    let mut texts = vec![recorder.reset(Some(seed)).await.result.unwrap().observation];
    let mut actions = Vec::new();
    for action in fixture.iter().cycle().take(200) {
        let step = recorder.step(action).await.result.unwrap();
        actions.push(action.clone());
        texts.push(step.observation);
        if step.terminated || step.truncated {
            let footer = recorder.finish().unwrap().summary.unwrap();
            return Expected {
                env,
                seed,
                actions,
                texts_sha256: texts_hash(&texts),
                trace_sha256: footer.trace_sha256,
            };
        }
    }
    panic!("{env} seed {seed}: no end within 200 steps");
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_256_at_once_each_match_their_spade_run_trace() {
    let mut expected = Vec::new();
    for i in 0..SESSIONS {
        expected.push(play_alone(ENVS[(i % 4) as usize], i).await);
    }
    // The in-process recording is what `spade run --record` writes (checked on one per env).
    let dir = tempfile::tempdir().unwrap();
    for e in &expected[..4] {
        let actions = dir.path().join(format!("{}.txt", e.env));
        std::fs::write(&actions, e.actions.join("\n")).unwrap();
        let record = dir.path().join(format!("{}.jsonl", e.env));
        let out = spade(&[
            "run",
            &env_path(e.env),
            "--seed",
            &e.seed.to_string(),
            "--actions",
            actions.to_str().unwrap(),
            "--record",
            record.to_str().unwrap(),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        let text = std::fs::read_to_string(&record).unwrap();
        let footer: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        assert_eq!(footer["trace_sha256"], e.trace_sha256.as_str(), "{}", e.env);
    }

    let record = dir.path().join("traj");
    let envs: Vec<String> = ENVS.iter().map(|e| env_path(e)).collect();
    let mut args: Vec<&str> = envs.iter().map(String::as_str).collect();
    args.extend([
        "--max-sessions",
        "300",
        // 300 sessions, each charged a fresh sandbox's 29.5 MiB and twice that during a
        // reset: more than 3/4 of a 24 GiB machine at the peak, though these sandboxes touch a
        // few MiB each, so the test states its own budget. The default memory limit keeps the
        // traces equal to `spade run`'s.
        "--memory-budget",
        "301G",
        "--record-dir",
        record.to_str().unwrap(),
    ]);
    let server = ServeProcess::start(&args);
    let plan: Vec<Value> = expected
        .iter()
        .map(|e| json!({"env_id": e.env, "seed": e.seed, "episode_id": format!("load-{}", e.seed), "actions": e.actions}))
        .collect();
    let plan_file = dir.path().join("plan.json");
    std::fs::write(&plan_file, serde_json::to_string(&plan).unwrap()).unwrap();
    let out = run_python(
        "tests/load_sessions.py",
        &[&server.url(), plan_file.to_str().unwrap()],
    );
    let got: BTreeMap<String, Value> = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(got.len(), SESSIONS as usize, "no session lost");
    for e in &expected {
        let id = format!("load-{}", e.seed);
        let g = &got[&id];
        assert_eq!(
            g["texts_sha256"],
            e.texts_sha256.as_str(),
            "{id}: observations mixed up"
        );
        assert_eq!(g["steps"], e.actions.len(), "{id}");
        assert_eq!(
            g["trace_sha256"],
            e.trace_sha256.as_str(),
            "{id}: trace differs"
        );
    }
    assert_eq!(
        std::fs::read_dir(&record).unwrap().count(),
        SESSIONS as usize
    );
}
