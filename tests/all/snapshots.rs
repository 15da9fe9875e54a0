//! Per-environment snapshots and pooled sandboxes: a sandbox started from a snapshot is the
//! sandbox that ran the source itself, call for call and byte for byte; a full pool refuses a
//! sandbox with a clear error and frees its slot when a sandbox is dropped; snapshots and
//! bytecode are cached on disk for later processes.

use std::sync::OnceLock;

use spade_envtools::trajectory::RecordMeta;
use spade_envtools::{Episode, Record};
use spade_sandbox::{CacheStats, Caches, CallError, Config, Limits, Pool, Runtime, SandboxOptions};

use crate::common::{env_actions, env_dir, env_source, fixtures, spade, test_limits};

/// A runtime that runs the source in every sandbox.
fn without_snapshots() -> Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            Runtime::new(Config {
                snapshots: false,
                ..Config::default()
            })
            .expect("runtime")
        })
        .with_limits(test_limits())
}

/// A runtime whose sandboxes start from snapshots (the default).
fn with_snapshots() -> Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| Runtime::new(Config::default()).expect("runtime"))
        .with_limits(test_limits())
}

/// The trajectory file of: load, `reset(seed)`, the actions (until the episode ends or a call
/// fails), then `solution()`.
async fn trajectory(runtime: &Runtime, source: &str, seed: u64, actions: &[String]) -> String {
    let record = Record::Memory(RecordMeta::default());
    let mut recorder = Episode::start(runtime, source, SandboxOptions::seeded(seed), record)
        .await
        .unwrap();
    if recorder.info().is_ok() && recorder.reset(Some(seed)).await.result.is_ok() {
        for action in actions {
            match recorder.step(action).await.result {
                Ok(step) if !(step.terminated || step.truncated) => {}
                _ => break,
            }
        }
        let _ = recorder.solution().await;
    }
    recorder.finish().unwrap().trajectory.unwrap()
}

fn fixture_actions(name: &str) -> Vec<String> {
    if env_dir(name).join("actions.txt").exists() {
        env_actions(name)
    } else {
        vec!["\\boxed{1}".to_owned(), "hello".to_owned()]
    }
}

#[tokio::test]
async fn every_fixture_gives_the_same_trajectory_with_and_without_snapshots() {
    let (on, off) = (with_snapshots(), without_snapshots());
    let mut snapshotted = 0;
    for name in fixtures(false).into_iter().chain(fixtures(true)) {
        let source = env_source(&name);
        let actions = fixture_actions(&name);
        for seed in [3, 4] {
            let expected = trajectory(&off, &source, seed, &actions).await;
            let got = trajectory(&on, &source, seed, &actions).await;
            assert_eq!(got, expected, "{name}, seed {seed}");
        }
        let prepared = on.prepare(&source).await;
        if let Ok(prepared) = prepared
            && on.snapshot_size(&prepared, None).is_some()
        {
            eprintln!("snapshotted: {name}");
            snapshotted += 1;
        }
    }
    // Most fixtures load without randomness, output or open resources: those start from a
    // snapshot (the others run the source, which the comparison above covers just the same).
    assert!(
        snapshotted >= 20,
        "only {snapshotted} fixtures were snapshotted"
    );
}

#[tokio::test]
async fn every_escape_program_gives_the_same_trajectory_with_and_without_snapshots() {
    let (on, off) = (with_snapshots(), without_snapshots());
    let actions = ["\\boxed{1}".to_owned()];
    for (name, path) in crate::common::escape_programs() {
        let source = std::fs::read_to_string(&path).unwrap();
        let expected = trajectory(&off, &source, 1, &actions).await;
        let got = trajectory(&on, &source, 1, &actions).await;
        assert_eq!(got, expected, "{name}");
    }
}

#[test]
fn a_snapshotted_run_in_another_process_equals_one_without_snapshots() {
    for name in ["grid_walk", "tool_inventory", "reset_init_random"] {
        let dir = env_dir(name);
        let (env, actions) = (dir.join("env.py"), dir.join("actions.txt"));
        let run = |extra: Option<&str>| {
            let mut args = vec![
                "run",
                env.to_str().unwrap(),
                "--seed",
                "5",
                "--actions",
                actions.to_str().unwrap(),
                "--json",
            ];
            args.extend(extra);
            let output = spade(&args);
            assert!(
                output.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&output.stderr)
            );
            String::from_utf8(output.stdout).unwrap()
        };
        assert_eq!(run(None), run(Some("--no-snapshots")), "{name}");
    }
}

const MODULE_RANDOM: &str = r#"
import random

DRAWN = random.randint(0, 10**9)

class DrawEnv:
    def reset(self, seed=None):
        return f"drawn {DRAWN}", {}

    def step(self, action):
        return "done", 0.0, True, False, {}

    def solution(self):
        return "x"
"#;

const CONSTRUCTOR_WORK: &str = r#"
class SumEnv:
    def __init__(self):
        self.table = [i * i for i in range(5000)]

    def reset(self, seed=None):
        return f"sum {sum(self.table)}", {}

    def step(self, action):
        return "done", 1.0, True, False, {}

    def solution(self):
        return "x"
"#;

#[tokio::test]
async fn a_source_that_draws_randomness_while_loading_is_seeded_first_and_never_snapshotted() {
    let runtime = with_snapshots();
    let observation = |seed| {
        let runtime = runtime.clone();
        async move {
            let mut sandbox = runtime
                .sandbox(MODULE_RANDOM, SandboxOptions::seeded(seed))
                .await
                .unwrap();
            sandbox.reset(Some(seed)).await.unwrap().observation
        }
    };
    let (a, b, a_again) = (
        observation(1).await,
        observation(2).await,
        observation(1).await,
    );
    assert_ne!(a, b, "module-level randomness must follow the sandbox seed");
    assert_eq!(a, a_again);
    let prepared = runtime.prepare(MODULE_RANDOM).await.unwrap();
    assert_eq!(runtime.snapshot_size(&prepared, None), None);

    let mut off = without_snapshots()
        .sandbox(MODULE_RANDOM, SandboxOptions::seeded(1))
        .await
        .unwrap();
    assert_eq!(off.reset(Some(1)).await.unwrap().observation, a);
}

/// Sources that draw from the module-global `random` while loading and hide it from a
/// comparison of its state: `{draw}` is replaced by each way of drawing below.
const HIDDEN_DRAW: &str = r#"
import random
import _random

DRAWN = None
{module}

class HiddenEnv:
    def __init__(self):
        global DRAWN
        {constructor}

    def reset(self, seed=None):
        return repr(DRAWN), {}

    def step(self, action):
        return "done", 0.0, True, False, {}

    def solution(self):
        return "x"
"#;

#[tokio::test]
async fn a_load_that_hides_its_draw_from_random_is_still_seeded_first() {
    // Each draw, in the module or in the constructor, is the first draw after the seed, so
    // its value is CPython's `random.seed(s); random.random()` for s = 1, 2, 3.
    let expected = [
        "0.13436424411240122",
        "0.9560342718892494",
        "0.23796462709189137",
    ];
    let hiding = [
        (
            "draws, then puts the state back",
            "s = random.getstate()\nDRAWN = random.random()\nrandom.setstate(s)",
        ),
        (
            "replaces random.getstate first",
            "s = random.getstate()\nrandom.getstate = lambda: s\nDRAWN = random.random()",
        ),
        (
            "calls the native method directly, then puts the state back",
            "s = _random.Random.getstate(random._inst)\nDRAWN = _random.Random.random(random._inst)\n_random.Random.setstate(random._inst, s)",
        ),
    ];
    for (how, draw) in hiding {
        for in_constructor in [false, true] {
            let source = if in_constructor {
                let body = draw.replace('\n', "\n        ");
                HIDDEN_DRAW
                    .replace("{module}", "")
                    .replace("{constructor}", &body)
            } else {
                HIDDEN_DRAW
                    .replace("{module}", draw)
                    .replace("{constructor}", "pass")
            };
            let place = if in_constructor {
                "constructor"
            } else {
                "module"
            };
            for runtime in [with_snapshots(), without_snapshots()] {
                let mut drawn = Vec::new();
                for seed in 1..=3 {
                    let mut sandbox = runtime
                        .sandbox(&source, SandboxOptions::seeded(seed))
                        .await
                        .unwrap();
                    drawn.push(sandbox.reset(Some(seed)).await.unwrap().observation);
                }
                assert_eq!(drawn, expected, "a {place} that {how}");
            }
        }
    }
}

#[tokio::test]
async fn fuel_per_call_is_the_same_for_the_first_and_the_hundredth_sandbox() {
    let runtime = with_snapshots();
    // Its constructor draws the puzzle from `random`: the snapshot holds the loaded module, and
    // every sandbox seeds and then constructs (comparing no state of `random`).
    let source = env_source("arithmetic_puzzle");
    let actions = env_actions("arithmetic_puzzle");
    let mut fuels = Vec::new();
    for i in 0..100 {
        let mut sandbox = runtime
            .sandbox(&source, SandboxOptions::seeded(7))
            .await
            .unwrap();
        if i == 0 || i == 99 {
            let mut fuel = vec![sandbox.last_fuel()];
            sandbox.reset(Some(7)).await.unwrap();
            fuel.push(sandbox.last_fuel());
            sandbox.step(&actions[0]).await.unwrap();
            fuel.push(sandbox.last_fuel());
            fuels.push(fuel);
        }
    }
    assert_eq!(fuels[0], fuels[1]);
    let off = without_snapshots()
        .sandbox(&source, SandboxOptions::seeded(7))
        .await
        .unwrap();
    assert_eq!(
        off.last_fuel(),
        fuels[0][0],
        "load fuel with and without snapshots"
    );
    assert!(fuels[0].iter().all(|&f| f > 0), "{fuels:?}");
    let prepared = runtime.prepare(&source).await.unwrap();
    let (pages, bytes) = runtime.snapshot_size(&prepared, None).unwrap();
    assert!(
        pages > 0 && bytes >= pages * 4096,
        "{pages} pages, {bytes} bytes"
    );
}

#[tokio::test]
async fn a_constructor_that_works_runs_once_per_source_not_once_per_sandbox() {
    let runtime = with_snapshots();
    let mut first = runtime
        .sandbox(CONSTRUCTOR_WORK, SandboxOptions::seeded(1))
        .await
        .unwrap();
    let load_fuel = first.last_fuel();
    let mut second = runtime
        .sandbox(CONSTRUCTOR_WORK, SandboxOptions::seeded(2))
        .await
        .unwrap();
    let expected = format!("sum {}", (0..5000u64).map(|i| i * i).sum::<u64>());
    assert_eq!(first.reset(None).await.unwrap().observation, expected);
    assert_eq!(second.reset(None).await.unwrap().observation, expected);
    assert_eq!(first.info().class_name, "SumEnv");
    assert_eq!(second.info().class_name, "SumEnv");
    // The constructor draws no randomness, so the snapshot holds the constructed environment
    // (with its 5,000-element table): well over the module's own pages.
    let prepared = runtime.prepare(CONSTRUCTOR_WORK).await.unwrap();
    let (pages, _) = runtime.snapshot_size(&prepared, None).unwrap();
    assert!(pages > 0, "{pages}");
    // Without snapshots every sandbox runs that constructor unseeded, as the probe did, so the
    // load costs the same fuel as the snapshot's recorded stages.
    let off = without_snapshots()
        .sandbox(CONSTRUCTOR_WORK, SandboxOptions::seeded(1))
        .await
        .unwrap();
    assert_eq!(
        off.last_fuel(),
        load_fuel,
        "load fuel, snapshots off and on"
    );
}

#[tokio::test]
async fn a_full_pool_refuses_a_sandbox_until_one_is_dropped() {
    let runtime = Runtime::new(Config {
        pool: Some(Pool {
            sandboxes: 3,
            ..Pool::default()
        }),
        ..Config::default()
    })
    .unwrap()
    .with_limits(test_limits());
    let source = env_source("arithmetic_puzzle");
    let mut live = Vec::new();
    for seed in 0..3 {
        live.push(
            runtime
                .sandbox(&source, SandboxOptions::seeded(seed))
                .await
                .unwrap(),
        );
    }
    let err = runtime
        .sandbox(&source, SandboxOptions::seeded(3))
        .await
        .err()
        .expect("a fourth sandbox in a pool of three");
    assert!(matches!(err, CallError::Capacity(_)), "{err:?}");
    let message = err.to_string();
    assert!(message.starts_with("no free sandbox slot: "), "{message}");
    assert!(message.contains("Config::pool.sandboxes"), "{message}");
    assert_eq!(err.kind().as_str(), "capacity");
    drop(live.pop());
    let mut sandbox = runtime
        .sandbox(&source, SandboxOptions::seeded(3))
        .await
        .unwrap();
    assert!(sandbox.reset(Some(3)).await.is_ok());
}

#[tokio::test]
async fn a_new_runtime_starts_from_the_cached_snapshot_and_ignores_a_damaged_or_shared_file() {
    // A source no other test uses, so that its cache file is this test's alone.
    let source = format!(
        "{CONSTRUCTOR_WORK}\n# {}-{:?}\n",
        std::process::id(),
        std::time::SystemTime::now()
    );
    let play = |runtime: Runtime| {
        let source = source.clone();
        async move {
            let actions = ["x".to_owned()];
            trajectory(&runtime, &source, 2, &actions).await
        }
    };
    let expected = play(without_snapshots()).await;
    let first = Runtime::new(Config::default())
        .unwrap()
        .with_limits(test_limits());
    assert_eq!(play(first.clone()).await, expected);
    let prepared = first.prepare(&source).await.unwrap();
    let file = first.snapshot_file(&prepared, None).unwrap();
    let cached = std::fs::read(&file).unwrap();
    assert!(cached.starts_with(b"{\"format\":\"spade-snapshot-3\""));

    // A new runtime (as in a new process) reads the file instead of probing.
    let second = Runtime::new(Config::default())
        .unwrap()
        .with_limits(test_limits());
    assert_eq!(play(second).await, expected);

    // A damaged file is ignored, the source probed again and the file rewritten.
    let mut damaged = cached.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0xff;
    std::fs::write(&file, &damaged).unwrap();
    let third = Runtime::new(Config::default())
        .unwrap()
        .with_limits(test_limits());
    assert_eq!(play(third).await, expected);
    assert_eq!(std::fs::read(&file).unwrap(), cached);

    // A file others could write is never read.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&file, &damaged).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666)).unwrap();
        let fourth = Runtime::new(Config::default())
            .unwrap()
            .with_limits(test_limits());
        assert_eq!(play(fourth).await, expected);
        std::fs::remove_file(&file).unwrap();
    }
}

#[tokio::test]
async fn a_new_runtime_loads_the_cached_bytecode_and_ignores_a_damaged_file() {
    // A source no other test uses, so that its cache file is this test's alone.
    let source = format!(
        "{}\n# code cache {}-{:?}\n",
        env_source("arithmetic_puzzle"),
        std::process::id(),
        std::time::SystemTime::now()
    );
    let first = Runtime::new(Config::default())
        .unwrap()
        .with_limits(test_limits());
    let compiled = first.prepare(&source).await.unwrap();
    let file = first.code_file(&compiled).unwrap();
    let cached = std::fs::read(&file).unwrap();
    assert!(cached.starts_with(b"spade-code-1 "), "{:?}", &cached[..20]);
    assert!(cached.ends_with(compiled.code()));

    // A new runtime (as in a new process) reads the same bytecode.
    let second = Runtime::new(Config::default())
        .unwrap()
        .with_limits(test_limits());
    assert_eq!(
        second.prepare(&source).await.unwrap().code(),
        compiled.code()
    );

    // A damaged file is ignored: the source is compiled again and the file rewritten.
    let mut damaged = cached.clone();
    let last = damaged.len() - 1;
    damaged[last] ^= 0xff;
    std::fs::write(&file, &damaged).unwrap();
    let third = Runtime::new(Config::default())
        .unwrap()
        .with_limits(test_limits());
    let again = third.prepare(&source).await.unwrap();
    assert_eq!(again.code(), compiled.code());
    assert_eq!(std::fs::read(&file).unwrap(), cached);
    let mut sandbox = third
        .sandbox_from(&again, SandboxOptions::seeded(1))
        .await
        .unwrap();
    assert!(
        sandbox
            .reset(Some(1))
            .await
            .unwrap()
            .observation
            .starts_with("Compute ")
    );

    // Other limits are another file.
    let other = third.with_limits(Limits {
        load_fuel: test_limits().load_fuel - 1,
        ..test_limits()
    });
    assert_ne!(other.code_file(&again).unwrap(), file);
}

#[tokio::test]
async fn sandboxes_with_distinct_max_turns_keep_a_bounded_number_of_plans_and_files() {
    // Issue 53, item 1: 20 resets with distinct max_turns built and kept 20 snapshots (RSS
    // 186 -> 891 MiB, 614 MiB written to the cache). Every plan of a max_turns beyond the bound
    // is dropped, and its file too once the disk budget (one byte here) is exceeded. Scaled
    // down: 6 max_turns, at most 2 kept.
    let cache = crate::serve::harness::cache_with_the_compiled_guests();
    let runtime = Runtime::new(Config {
        cache_dir: Some(cache.path().to_owned()),
        caches: Caches {
            plans_per_source: 2,
            disk_bytes: 1,
            ..Caches::default()
        },
        ..Config::default()
    })
    .expect("runtime");
    let source = format!("{}\n# max_turns bound\n", env_source("grid_walk"));
    let prepared = runtime.prepare(&source).await.unwrap();
    let files = || {
        std::fs::read_dir(cache.path().join("snapshots"))
            .unwrap()
            .filter(|entry| {
                let name = entry.as_ref().unwrap().file_name();
                name.to_string_lossy().ends_with(".snap")
            })
            .count()
    };
    for max_turns in 1..=6 {
        let options = SandboxOptions {
            seed: 0,
            max_turns: Some(max_turns),
        };
        let sandbox = runtime.sandbox_from(&prepared, options).await.unwrap();
        assert_eq!(sandbox.info().max_turns, Some(max_turns));
        assert!(
            runtime.snapshot_size(&prepared, Some(max_turns)).is_some(),
            "grid_walk starts from a snapshot"
        );
        let stats = runtime.cache_stats();
        assert_eq!(stats.sources, 1);
        assert!(stats.plans <= 2, "after {max_turns}: {stats:?}");
        assert!(files() <= 2, "after {max_turns}: {} files", files());
    }
    // A max_turns whose plan was dropped is decided again, and gives the same sandbox.
    let again = runtime
        .sandbox_from(
            &prepared,
            SandboxOptions {
                seed: 0,
                max_turns: Some(1),
            },
        )
        .await
        .unwrap();
    assert_eq!(again.info().max_turns, Some(1));
    assert!(runtime.cache_stats().plans <= 2);

    // Released, the source leaves the cache, and its files the disk.
    drop(again);
    runtime.release_source(prepared);
    assert_eq!(runtime.cache_stats(), CacheStats::default());
    assert_eq!(files(), 0);
}
