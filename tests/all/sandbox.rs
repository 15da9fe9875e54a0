//! The runtime API: concurrency, limits and sandbox lifecycle.

use spade_runtime::{CallError, ErrorKind, Limits, SandboxOptions};

use crate::common::{env_source, runtime};

async fn episode(seed: u64) -> Vec<(String, f64)> {
    let mut sandbox = runtime()
        .sandbox(&env_source("grid_walk"), SandboxOptions::seeded(seed))
        .await
        .unwrap();
    let mut log = vec![(sandbox.reset(Some(seed)).await.unwrap().observation, 0.0)];
    for action in [
        "\\boxed{right}",
        "\\boxed{down}",
        "\\boxed{right}",
        "\\boxed{down}",
    ] {
        let step = sandbox.step(action).await.unwrap();
        log.push((step.observation, step.reward));
    }
    log
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_sandboxes_run_concurrently_with_the_same_results() {
    let sequential: Vec<_> = {
        let mut all = Vec::new();
        for seed in 0..8 {
            all.push(episode(seed).await);
        }
        all
    };
    let tasks: Vec<_> = (0..8).map(|seed| tokio::spawn(episode(seed))).collect();
    let mut concurrent = Vec::new();
    for task in tasks {
        concurrent.push(task.await.unwrap());
    }
    assert_eq!(sequential, concurrent);
}

#[tokio::test]
async fn out_of_fuel_is_deterministic_and_the_next_sandbox_works() {
    let limits = Limits {
        fuel_per_call: 50_000_000,
        ..crate::common::test_limits()
    };
    let runtime = runtime().with_limits(limits);
    let source = env_source("fault_infinite_loop");
    let mut fuel = Vec::new();
    for _ in 0..2 {
        let mut sandbox = runtime
            .sandbox(&source, SandboxOptions::seeded(0))
            .await
            .unwrap();
        sandbox.reset(None).await.unwrap();
        let err = sandbox.step("x").await.unwrap_err();
        assert_eq!(err, CallError::OutOfFuel { budget: 50_000_000 });
        assert_eq!(
            err.to_string(),
            "out of fuel: the call used its whole budget of 50000000 fuel"
        );
        fuel.push(sandbox.last_fuel());
        assert_eq!(sandbox.dead(), Some(ErrorKind::OutOfFuel));
    }
    assert_eq!(fuel, vec![50_000_000, 50_000_000]);
    let mut good = runtime
        .sandbox(&env_source("grid_walk"), SandboxOptions::seeded(0))
        .await
        .unwrap();
    good.reset(Some(0)).await.unwrap();
}

#[tokio::test]
async fn deadline_stops_a_call_that_runs_too_long() {
    let limits = Limits {
        fuel_per_call: u64::MAX / 2,
        call_deadline: std::time::Duration::from_millis(300),
        ..crate::common::test_limits()
    };
    let mut sandbox = runtime()
        .with_limits(limits)
        .sandbox(
            &env_source("fault_infinite_loop"),
            SandboxOptions::seeded(0),
        )
        .await
        .unwrap();
    sandbox.reset(None).await.unwrap();
    let started = std::time::Instant::now();
    let err = sandbox.step("x").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Deadline, "{err}");
    assert_eq!(
        err.to_string(),
        "deadline exceeded: the call ran longer than 300ms"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
}

#[tokio::test]
async fn load_errors_are_not_host_outcomes() {
    let err = runtime()
        .sandbox("x = (", SandboxOptions::seeded(0))
        .await
        .err()
        .unwrap();
    assert_eq!(err.kind(), ErrorKind::Load);
    assert!(!err.kills_sandbox());
}
