//! Determinism: the same environment, seed and actions give byte-identical output in separate
//! processes, whatever sources of nondeterminism the environment reaches for.

use spade_sandbox::SandboxOptions;

use crate::common::{env_dir, env_source, runtime, spade};

fn run_json(name: &str, seed: &str) -> Vec<u8> {
    let dir = env_dir(name);
    let output = spade(&[
        "run",
        dir.join("env.py").to_str().unwrap(),
        "--seed",
        seed,
        "--actions",
        dir.join("actions.txt").to_str().unwrap(),
        "--json",
    ]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output.stdout
}

#[test]
fn separate_processes_give_byte_identical_output() {
    for name in ["nondeterminism", "grid_walk", "tool_inventory"] {
        let first = run_json(name, "11");
        let second = run_json(name, "11");
        assert!(
            String::from_utf8_lossy(&first).contains("\"fuel\":"),
            "fuel is part of the output"
        );
        assert_eq!(
            String::from_utf8_lossy(&first),
            String::from_utf8_lossy(&second),
            "{name}"
        );
    }
}

#[test]
fn different_seeds_give_different_noise() {
    assert_ne!(
        run_json("nondeterminism", "1"),
        run_json("nondeterminism", "2")
    );
}

async fn noise(seed: u64) -> Vec<String> {
    let mut sandbox = runtime()
        .sandbox(&env_source("nondeterminism"), SandboxOptions::seeded(seed))
        .await
        .unwrap();
    let mut observations = vec![sandbox.reset(None).await.unwrap().observation];
    for action in ["a", "b"] {
        observations.push(sandbox.step(action).await.unwrap().observation);
    }
    observations
}

#[tokio::test]
async fn a_second_sandbox_starts_from_a_clean_state() {
    let first = noise(5).await;
    let second = noise(5).await;
    assert_eq!(
        first, second,
        "module globals or interpreter state leaked between sandboxes"
    );
    assert!(first[0].contains("\"calls\": 1"), "{}", first[0]);
    assert!(first[2].contains("\"calls\": 3"), "{}", first[2]);
}

#[tokio::test]
async fn fuel_per_call_is_deterministic() {
    let run = || async {
        let mut sandbox = runtime()
            .sandbox(&env_source("grid_walk"), SandboxOptions::seeded(9))
            .await
            .unwrap();
        let mut fuel = vec![sandbox.last_fuel()];
        sandbox.reset(Some(9)).await.unwrap();
        fuel.push(sandbox.last_fuel());
        sandbox.step("\\boxed{right}").await.unwrap();
        fuel.push(sandbox.last_fuel());
        fuel
    };
    let a = run().await;
    assert!(a.iter().all(|&f| f > 0), "{a:?}");
    assert_eq!(a, run().await);
}
