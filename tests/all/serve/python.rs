//! The Python package: typed client, TRL-style environment, example script, and the Ray run.

use serde_json::{Value, json};

use super::env_path;
use super::harness::{ServeProcess, run_python};
use crate::common::{env_dir, spade, stdout};

/// `spade run --json` of grid_walk seed 7 as (actions, texts, rewards, end line).
fn grid_walk_run() -> (Vec<String>, Vec<String>, Vec<f64>, Value) {
    let actions = env_dir("grid_walk").join("actions.txt");
    let out = spade(&[
        "run",
        &env_path("grid_walk"),
        "--seed",
        "7",
        "--actions",
        actions.to_str().unwrap(),
        "--json",
    ]);
    let lines: Vec<Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut acts = Vec::new();
    let mut texts = Vec::new();
    let mut rewards = Vec::new();
    let mut end = Value::Null;
    for line in lines {
        match line["call"].as_str().unwrap() {
            "reset" => texts.push(line["observation"].as_str().unwrap().to_owned()),
            "step" => {
                acts.push(line["action"].as_str().unwrap().to_owned());
                texts.push(line["observation"].as_str().unwrap().to_owned());
                rewards.push(line["reward"].as_f64().unwrap());
            }
            "end" => end = line,
            _ => {}
        }
    }
    assert_eq!(
        end["ended"], "terminated",
        "grid_walk's fixture actions win"
    );
    (acts, texts, rewards, end)
}

#[test]
fn the_python_client_package_registers_plays_and_fetches_trajectories() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("traj");
    let server = ServeProcess::start(&[
        &env_path("grid_walk"),
        "--record-dir",
        record.to_str().unwrap(),
    ]);
    let (actions, texts, rewards, _) = grid_walk_run();
    let faulty = env_dir("fault_nan_reward").join("env.py");
    let check = spade(&[
        "check",
        faulty.to_str().unwrap(),
        "--json",
        "--total-fuel",
        "50000000000",
        "--out",
        dir.path().join("c").to_str().unwrap(),
    ]);
    let report: Value = serde_json::from_str(&stdout(&check)).unwrap();
    let codes: Vec<&Value> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["severity"] == "error")
        .map(|f| &f["code"])
        .collect();
    assert!(!codes.is_empty());
    let expected = json!({
        "env_id": "grid_walk", "seed": 7, "actions": actions, "texts": texts, "rewards": rewards,
        "source": std::fs::read_to_string(env_dir("grid_walk").join("env.py")).unwrap(),
        "faulty_source": std::fs::read_to_string(&faulty).unwrap(),
        "faulty_codes": codes,
    });
    let file = dir.path().join("expected.json");
    std::fs::write(&file, expected.to_string()).unwrap();
    let out = run_python(
        "tests/client_flow.py",
        &[&server.url(), file.to_str().unwrap()],
    );
    assert_eq!(out.trim(), "ok");
}

#[test]
fn the_example_script_plays_an_episode() {
    let server = ServeProcess::start(&[&env_path("grid_walk")]);
    let (_, _, _, end) = grid_walk_run();
    let actions = env_dir("grid_walk").join("actions.txt");
    let out = run_python(
        "examples/play_episode.py",
        &[
            "--url",
            &server.url(),
            "--seed",
            "7",
            "--actions",
            actions.to_str().unwrap(),
        ],
    );
    let last = out.lines().last().unwrap();
    assert_eq!(
        last,
        format!(
            "== episode terminated after {} steps, total reward {}",
            end["steps"], end["total_reward"]
        )
    );
}

#[test]
fn two_servers_under_a_local_ray_cluster_share_the_sessions() {
    let (_, texts, rewards, _) = grid_walk_run();
    let want_texts = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(
        texts.join("\n\u{0}").as_bytes(),
    ));
    let want_total: f64 = rewards.iter().sum();
    let out = run_python(
        "tests/ray_two_servers.py",
        &[
            env!("CARGO_BIN_EXE_spade"),
            &env_dir("grid_walk").join("env.py").display().to_string(),
            &env_dir("grid_walk")
                .join("actions.txt")
                .display()
                .to_string(),
            "8",
        ],
    );
    let result: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let urls = result["urls"].as_array().unwrap();
    assert_eq!(urls.len(), 2, "{result}");
    assert_ne!(urls[0], urls[1]);
    assert_ne!(result["pids"][0], result["pids"][1]);
    for url in urls {
        assert!(
            url.as_str().unwrap().starts_with("http://127.0.0.1:"),
            "{url}"
        );
        assert_eq!(result["per_server"][url.as_str().unwrap()], 4, "{result}");
    }
    for i in 0..8 {
        let r = &result["results"][i.to_string()];
        assert_eq!(r[0], want_texts.as_str(), "session {i}");
        assert_eq!(r[1].as_f64().unwrap(), want_total, "session {i}");
    }
    assert_eq!(result["exit_codes"], json!([0, 0]));
    assert_eq!(
        result["refused_without_token"],
        "refusing to start spade serve on 10.255.255.1 without a token: pass token_file= (a file readable on every node), or insecure_no_auth=True on a trusted network"
    );
}

#[test]
fn trl_grpo_trainer_trains_through_spade_tool_env_unchanged() {
    // TRL 1.16's GRPOTrainer with `environment_factory=SpadeToolEnv.factory(url)` and nothing
    // patched: one GRPO step on a tiny model the script writes, through a real server that
    // records every episode. The rewards TRL logs must be the environment's: trl_echo scores
    // 0.75 for a reply with \boxed{} and 0.25 otherwise, and an episode the model never
    // replied in scores 0.
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("traj");
    let server = ServeProcess::start(&[
        &super::serve_fixture("trl_echo.py"),
        "--record-dir",
        record.to_str().unwrap(),
    ]);
    let out = run_python(
        "tests/trl_grpo_step.py",
        &[
            &server.url(),
            "trl_echo",
            dir.path().join("out").to_str().unwrap(),
        ],
    );
    let result: Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let episodes = result["episodes"].as_array().unwrap();
    assert_eq!(episodes.len(), 4, "one episode per rollout: {result}");
    // The script has exited, so its sessions are closed and every trajectory has its footer.
    let mut totals = Vec::new();
    for episode in episodes {
        let path = record.join(format!("{}.jsonl", episode.as_str().unwrap()));
        let mut footer = Value::Null;
        for _ in 0..200 {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            if let Some(last) = text.lines().last()
                && let Ok(line) = serde_json::from_str::<Value>(last)
                && line["type"] == "footer"
            {
                footer = line;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let total = footer["total_reward"]
            .as_f64()
            .unwrap_or_else(|| panic!("{}: no footer", path.display()));
        assert!([0.0, 0.25, 0.75].contains(&total), "{total}");
        totals.push(total);
    }
    let mean = totals.iter().sum::<f64>() / totals.len() as f64;
    assert!(mean > 0.0, "no rollout called the tool: {totals:?}");
    let logged = result["reward_mean"].as_f64().unwrap();
    assert!(
        (logged - mean).abs() < 1e-6,
        "TRL logged a mean reward of {logged}, the environment gave {totals:?}"
    );
}
