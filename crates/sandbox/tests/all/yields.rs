//! How long calls yield to the executor ([`Yields`]): by fuel interval (the default) or by
//! epoch tick. Either way a call gets the same results and fuel, and the deadline bounds it.

use std::time::{Duration, Instant};

use spade_sandbox::{Config, ErrorKind, Limits, Runtime, SandboxOptions, Yields};

use crate::common::{env_actions, env_source, runtime, test_limits};

/// A runtime whose calls yield on the epoch tick (its own compiled artifact).
fn epoch_runtime() -> Runtime {
    Runtime::new(Config {
        yields: Yields::Epochs,
        ..Config::default()
    })
    .expect("runtime with epoch yields")
    .with_limits(test_limits())
}

/// Every step of `env` with its actions: observation, reward, flags, info and the fuel used.
async fn play(runtime: &Runtime, env: &str) -> Vec<(String, f64, bool, bool, String, u64)> {
    let mut sandbox = runtime
        .sandbox(&env_source(env), SandboxOptions::seeded(11))
        .await
        .unwrap();
    let mut seen = vec![(
        String::new(),
        0.0,
        false,
        false,
        String::new(),
        sandbox.last_fuel(),
    )];
    let reset = sandbox.reset(Some(11)).await.unwrap();
    seen.push((
        reset.observation,
        0.0,
        false,
        false,
        reset.info,
        sandbox.last_fuel(),
    ));
    for action in env_actions(env) {
        let step = sandbox.step(&action).await.unwrap();
        let done = step.terminated || step.truncated;
        seen.push((
            step.observation,
            step.reward,
            step.terminated,
            step.truncated,
            step.info,
            sandbox.last_fuel(),
        ));
        if done {
            break;
        }
    }
    seen
}

#[tokio::test]
async fn fuel_and_epoch_yields_give_the_same_steps_and_fuel() {
    let epochs = epoch_runtime();
    for env in ["grid_walk", "tool_inventory"] {
        let by_fuel = play(&runtime(), env).await;
        let by_epoch = play(&epochs, env).await;
        assert!(by_fuel.len() > 2, "{env} played no step");
        assert!(
            by_fuel.iter().all(|s| s.5 > 0),
            "{env}: a call used no fuel"
        );
        assert_eq!(by_fuel, by_epoch, "{env}");
    }
}

/// `fault_infinite_loop`'s step spins forever; with unbounded fuel only the deadline ends it.
async fn spin_until_deadline(runtime: &Runtime) {
    let limits = Limits {
        fuel_per_call: u64::MAX / 2,
        call_deadline: Duration::from_millis(300),
        ..test_limits()
    };
    let mut sandbox = runtime
        .with_limits(limits)
        .sandbox(
            &env_source("fault_infinite_loop"),
            SandboxOptions::seeded(0),
        )
        .await
        .unwrap();
    sandbox.reset(None).await.unwrap();
    let started = Instant::now();
    let err = sandbox.step("x").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Deadline, "{err}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn either_way_the_deadline_ends_a_spinning_call() {
    spin_until_deadline(&runtime()).await;
    spin_until_deadline(&epoch_runtime()).await;
}

#[tokio::test(flavor = "current_thread")]
async fn fuel_yields_let_other_tasks_run_during_a_long_call() {
    // One executor thread: a timer task only gets its turn when the spinning guest yields. It
    // ticks every 10 ms while the call spins for its 300 ms deadline.
    let ticks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = ticks.clone();
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_millis(10)).await;
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    spin_until_deadline(&runtime()).await;
    ticker.abort();
    let ticks = ticks.load(std::sync::atomic::Ordering::Relaxed);
    assert!(
        ticks >= 5,
        "the timer ticked {ticks} times during a 300 ms call"
    );
}

#[test]
fn a_zero_fuel_interval_is_refused() {
    let err = Runtime::new(Config {
        yields: Yields::Fuel(0),
        ..Config::default()
    })
    .err()
    .expect("a zero interval must be refused");
    assert_eq!(
        err.to_string(),
        "could not configure the WebAssembly engine: Yields::Fuel needs a positive fuel interval"
    );
}
