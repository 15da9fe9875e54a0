//! The runtime API: concurrency, limits and sandbox lifecycle.

use std::time::Duration;

use spade_sandbox::{CallError, ErrorKind, ExtraFields, Limits, SandboxOptions};

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

#[tokio::test]
async fn a_cancelled_call_frees_the_sandbox_and_later_calls_say_why() {
    let limits = Limits {
        fuel_per_call: u64::MAX / 2,
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
    // Drop the call's future while the guest spins: the store goes with it.
    let timed_out = tokio::time::timeout(Duration::from_millis(200), sandbox.step("x")).await;
    assert!(timed_out.is_err(), "the infinite loop returned");
    assert_eq!(sandbox.dead(), Some(ErrorKind::Cancelled));
    let err = sandbox.step("x").await.unwrap_err();
    assert_eq!(err, CallError::Dead(ErrorKind::Cancelled));
    assert_eq!(
        err.to_string(),
        "this sandbox is dead after an earlier call was cancelled (its future was dropped \
         before it finished); create a new sandbox"
    );
}

#[tokio::test]
async fn a_refused_call_reports_no_fuel_and_no_output() {
    let source = "class NoisyEnv:\n    def reset(self, seed=None):\n        print('hello')\n        return 'x', {}\n    def step(self, a):\n        while True:\n            pass\n";
    let limits = Limits {
        fuel_per_call: 30_000_000,
        ..crate::common::test_limits()
    };
    let mut sandbox = runtime()
        .with_limits(limits)
        .sandbox(source, SandboxOptions::seeded(0))
        .await
        .unwrap();
    sandbox.reset(None).await.unwrap();
    assert_eq!(sandbox.last_output().stdout, "hello\n");
    assert!(sandbox.last_fuel() > 0);
    let err = sandbox.step("a").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutOfFuel);
    assert_eq!(sandbox.last_fuel(), 30_000_000);
    // The refused call ran nothing: it reports neither the last call's fuel nor its output.
    assert_eq!(
        sandbox.reset(None).await.unwrap_err(),
        CallError::Dead(ErrorKind::OutOfFuel)
    );
    assert_eq!(sandbox.last_fuel(), 0);
    assert_eq!(sandbox.last_output(), &spade_sandbox::CallOutput::default());
}

#[tokio::test]
async fn a_memory_error_the_environment_raises_is_an_exception_and_the_sandbox_lives() {
    let source = "class BigEnv:\n    def reset(self, seed=None):\n        return 'x', {}\n    def step(self, a):\n        if a == 'raise':\n            raise MemoryError('x')\n        return 'fine', 0.0, False, False, {}\n";
    let mut sandbox = runtime()
        .sandbox(source, SandboxOptions::seeded(0))
        .await
        .unwrap();
    sandbox.reset(None).await.unwrap();
    let err = sandbox.step("raise").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Exception, "{err}");
    assert!(err.to_string().ends_with("MemoryError: x"), "{err}");
    assert_eq!(sandbox.dead(), None);
    assert_eq!(sandbox.step("again").await.unwrap().observation, "fine");
}

#[tokio::test]
async fn reaching_the_memory_cap_is_memory_limit_even_if_python_catches_it() {
    // The limiter denies the growth; the environment swallows the MemoryError and returns
    // normally. The cap was reached all the same.
    let source = "class GreedyEnv:\n    def reset(self, seed=None):\n        return 'x', {}\n    def step(self, a):\n        try:\n            b = bytearray(1 << 30)\n        except MemoryError:\n            pass\n        return 'survived', 0.0, False, False, {}\n";
    let mut sandbox = runtime()
        .sandbox(source, SandboxOptions::seeded(0))
        .await
        .unwrap();
    sandbox.reset(None).await.unwrap();
    let err = sandbox.step("a").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MemoryLimit, "{err}");
    let message = err.to_string();
    assert!(
        message.starts_with("memory limit: the environment tried to grow the sandbox memory")
            && message.ends_with(&format!("(limit {} bytes)", 128 << 20)),
        "{message}"
    );
    assert_eq!(sandbox.dead(), Some(ErrorKind::MemoryLimit));
}

#[tokio::test]
async fn only_the_wasi_interfaces_the_guest_imports_are_linked_and_no_sockets() {
    let runtime = runtime();
    let linked = runtime.linked_interfaces();
    for name in linked {
        assert!(
            !name.starts_with("wasi:sockets/") && !name.starts_with("wasi:http/"),
            "{name} is linked"
        );
    }
    // Exactly what the RustPython guest imports: streams and polling, clocks, random, the CLI
    // world's stdio/exit/environment/terminals, and the filesystem types (with no preopened
    // directory). A guest that starts importing more must be reviewed here.
    let expected = [
        "wasi:cli/environment",
        "wasi:cli/exit",
        "wasi:cli/stderr",
        "wasi:cli/stdin",
        "wasi:cli/stdout",
        "wasi:cli/terminal-input",
        "wasi:cli/terminal-output",
        "wasi:cli/terminal-stderr",
        "wasi:cli/terminal-stdin",
        "wasi:cli/terminal-stdout",
        "wasi:clocks/monotonic-clock",
        "wasi:clocks/wall-clock",
        "wasi:filesystem/preopens",
        "wasi:filesystem/types",
        "wasi:io/error",
        "wasi:io/poll",
        "wasi:io/streams",
        "wasi:random/insecure-seed",
        "wasi:random/random",
    ];
    // Besides WASI, only spade's own snapshot host, which only the guest's Rust code calls.
    let expected: Vec<&str> = std::iter::once("spade:env/snapshot-host")
        .chain(expected)
        .collect();
    assert_eq!(linked, expected);
    for name in runtime.trapped_interfaces() {
        assert!(!linked.contains(name));
    }
    println!(
        "linked: {linked:?}\ntrapping stubs: {:?}",
        runtime.trapped_interfaces()
    );
}

#[cfg(unix)]
#[test]
fn a_cached_artifact_that_others_can_write_is_refused() {
    use std::os::unix::fs::PermissionsExt;

    let key = runtime().artifact_key();
    let name = format!("guest-{}.cwasm", &key[..32]);
    let cached = spade_sandbox::default_cache_dir().unwrap().join(&name);
    assert!(
        cached.exists(),
        "the test runtime caches {}",
        cached.display()
    );
    let dir = std::env::temp_dir().join(format!("spade-cache-perm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let copy = dir.join(&name);
    std::fs::copy(&cached, &copy).unwrap();
    let config = |dir: &std::path::Path| spade_sandbox::Config {
        cache_dir: Some(dir.to_owned()),
        ..spade_sandbox::Config::default()
    };

    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o600)).unwrap();
    spade_sandbox::Runtime::new(config(&dir)).expect("a private artifact loads");
    // A warm cache builds nothing, so the hook that announces a build is never called.
    spade_sandbox::Runtime::new_announcing(config(&dir), || {
        panic!("the hook announcing a build ran with the artifact cached")
    })
    .expect("a private artifact loads");

    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o666)).unwrap();
    let err = spade_sandbox::Runtime::new(config(&dir))
        .err()
        .expect("an artifact every user can write is refused");
    let message = err.to_string();
    assert!(
        message.contains(&format!(
            "refusing the cache: the cached file {} is writable by every user (mode 0666)",
            copy.display()
        )),
        "{message}"
    );
    assert!(message.contains("native code"), "{message}");

    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o775)).unwrap();
    let message = spade_sandbox::Runtime::new(config(&dir))
        .err()
        .expect("an artifact in a group-writable directory is refused")
        .to_string();
    assert!(
        message.contains(&format!(
            "refusing the cache: the cache directory {} is writable by its group (mode 0775)",
            dir.display()
        )),
        "{message}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A cache directory of this test's own, holding a copy of the test runtime's compiled guest
/// (so that no test compiles it again).
#[cfg(unix)]
fn private_cache_with_the_guest(name: &str) -> std::path::PathBuf {
    let key = runtime().artifact_key();
    let artifact = format!("guest-{}.cwasm", &key[..32]);
    let cached = spade_sandbox::default_cache_dir().unwrap().join(&artifact);
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    std::fs::copy(&cached, dir.join(&artifact)).unwrap();
    dir
}

#[cfg(unix)]
#[tokio::test]
async fn cache_files_truncated_under_a_live_runtime_cannot_fault_it() {
    let dir = private_cache_with_the_guest("spade-cache-truncate");
    let config = spade_sandbox::Config {
        cache_dir: Some(dir.clone()),
        ..spade_sandbox::Config::default()
    };
    let source = env_source("arithmetic_puzzle");
    let play = |runtime: spade_sandbox::Runtime| {
        let source = source.clone();
        async move {
            let mut sandbox = runtime
                .sandbox(&source, SandboxOptions::seeded(3))
                .await
                .unwrap();
            sandbox.reset(Some(3)).await.unwrap().observation
        }
    };
    // The first runtime writes the snapshot; the second (as a new process would) loads the
    // compiled guest and the snapshot from the files.
    let first = spade_sandbox::Runtime::new(config.clone()).unwrap();
    let expected = play(first.clone()).await;
    let prepared = first.prepare(&source).await.unwrap();
    let snapshot = first.snapshot_file(&prepared, None).unwrap();
    assert!(snapshot.exists(), "the first sandbox cached its snapshot");
    let second = spade_sandbox::Runtime::new(config).unwrap();
    assert_eq!(play(second.clone()).await, expected);

    // Truncate the snapshot and the bytecode in place, as a full disk, a stale network file or
    // a careless user can (spade itself only ever renames new files over old ones). Had the
    // runtime mapped the snapshot, the next restore would die of SIGBUS. (The compiled guest
    // stays mapped, shared between processes: docs/snapshots.md, "The cache's threat model".)
    let mut truncated = 0;
    for entry in walk(&dir) {
        if entry.extension().is_some_and(|e| e == "cwasm") {
            continue;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .open(&entry)
            .unwrap()
            .set_len(0)
            .unwrap();
        truncated += 1;
    }
    assert_eq!(truncated, 2, "the bytecode and the snapshot");
    for _ in 0..3 {
        assert_eq!(play(second.clone()).await, expected);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Bytes of the regular files directly in `dir`.
#[cfg(unix)]
fn folder_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().metadata().unwrap())
        .filter(|meta| meta.is_file())
        .map(|meta| meta.len())
        .sum()
}

#[cfg(unix)]
#[tokio::test]
async fn the_verdict_folder_stays_within_its_bound_least_recently_used_out() {
    // Without a bound, every distinct source checked left a verdict file for ever: a tenant
    // registering many distinct sources could fill the disk.
    let dir = private_cache_with_the_guest("spade-cache-verdict-bound");
    let bound: u64 = 24 << 10;
    let runtime = spade_sandbox::Runtime::new(spade_sandbox::Config {
        cache_dir: Some(dir.clone()),
        caches: spade_sandbox::Caches {
            code_disk_bytes: bound,
            ..spade_sandbox::Caches::default()
        },
        ..spade_sandbox::Config::default()
    })
    .unwrap();
    let verdict = |i: usize| {
        format!(
            "{{\"accepted\": {}, \"pad\": \"{}\"}}",
            i.is_multiple_of(2),
            "x".repeat(1000)
        )
    };
    let folder = dir.join("verdicts");
    for i in 0..80 {
        runtime
            .store_verdict(&format!("source-{i}"), verdict(i).as_bytes())
            .unwrap();
        assert!(
            folder_bytes(&folder) <= bound,
            "after {} verdicts the folder holds {} bytes, over its bound of {bound}",
            i + 1,
            folder_bytes(&folder)
        );
        // Verdict 0 is read often (a registration played again): reads keep it.
        if i.is_multiple_of(4) {
            assert_eq!(
                runtime.cached_verdict("source-0").unwrap(),
                verdict(0).as_bytes()
            );
        }
        // Modification times have the kernel's tick as their grain: let the order show.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // An evicted verdict is gone, so the caller checks its source again; every verdict still
    // there is its own key's.
    assert_eq!(
        runtime.cached_verdict("source-1"),
        None,
        "the oldest unread verdict is evicted"
    );
    assert_eq!(
        runtime.cached_verdict("source-0").unwrap(),
        verdict(0).as_bytes()
    );
    let kept: Vec<usize> = (0..80)
        .filter(|&i| match runtime.cached_verdict(&format!("source-{i}")) {
            Some(bytes) => {
                assert_eq!(
                    bytes,
                    verdict(i).as_bytes(),
                    "verdict {i} came back as another's"
                );
                true
            }
            None => false,
        })
        .collect();
    assert!(kept.contains(&79), "the newest verdict is kept: {kept:?}");
    assert!(
        kept.len() < 40,
        "at most the bound's worth is kept: {kept:?}"
    );
    // Stored again (the check ran again), an evicted verdict is served again.
    runtime
        .store_verdict("source-1", verdict(1).as_bytes())
        .unwrap();
    assert_eq!(
        runtime.cached_verdict("source-1").unwrap(),
        verdict(1).as_bytes()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(unix)]
#[tokio::test]
async fn the_code_folder_stays_within_its_bound_and_an_evicted_source_compiles_again() {
    let dir = private_cache_with_the_guest("spade-cache-code-bound");
    let config = |bound: u64| spade_sandbox::Config {
        cache_dir: Some(dir.clone()),
        caches: spade_sandbox::Caches {
            code_disk_bytes: bound,
            ..spade_sandbox::Caches::default()
        },
        ..spade_sandbox::Config::default()
    };
    let source = |i: usize| format!("{}\n# distinct source {i}\n", env_source("grid_walk"));
    let play = |runtime: spade_sandbox::Runtime, text: String| async move {
        let prepared = runtime.prepare(&text).await.unwrap();
        let mut sandbox = runtime
            .sandbox_from(&prepared, SandboxOptions::seeded(4))
            .await
            .unwrap();
        let first = sandbox.reset(Some(4)).await.unwrap().observation;
        let step = sandbox.step("\\boxed{right}").await.unwrap();
        (first, step.observation, step.reward)
    };
    // One file's size, to bound the folder at three and a half of them.
    let probe = spade_sandbox::Runtime::new(config(u64::MAX)).unwrap();
    let expected = play(probe.clone(), source(0)).await;
    let file = probe
        .code_file(&probe.prepare(&source(0)).await.unwrap())
        .unwrap();
    let one = std::fs::metadata(&file).unwrap().len();
    let bound = one * 7 / 2;
    // A later process, bounded, compiles eight more distinct sources.
    let runtime = spade_sandbox::Runtime::new(config(bound)).unwrap();
    for i in 1..=8 {
        runtime.prepare(&source(i)).await.unwrap();
        let held = folder_bytes(&dir.join("code"));
        assert!(
            held <= bound,
            "after source {i} the folder holds {held} bytes, over {bound}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        !file.exists(),
        "the least recently used code file is removed"
    );
    // A new process compiles source 0 again (its file comes back) and plays it the same.
    let again = spade_sandbox::Runtime::new(config(bound)).unwrap();
    assert_eq!(play(again, source(0)).await, expected);
    assert!(file.exists(), "the compile wrote the file again");
    assert!(folder_bytes(&dir.join("code")) <= bound);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Every file under `dir`.
#[cfg(unix)]
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else if path.extension().is_none_or(|e| e != "lock") {
            files.push(path);
        }
    }
    files
}

/// An environment whose `reset` has `signature` and returns `body` as its info dict.
fn reset_env(signature: &str, body: &str) -> String {
    format!(
        "class KwEnv:\n    def __init__(self, max_turns=3):\n        self.max_turns = max_turns\n\n    {signature}:\n        return 'ok', {body}\n\n    def step(self, action):\n        return 'done', 1.0, True, False, {{}}\n\n    def solution(self):\n        return 'x'\n\n    def close(self):\n        pass\n"
    )
}

#[tokio::test]
async fn reset_fields_go_to_the_parameters_reset_takes_and_the_rest_are_dropped() {
    use serde_json::{Value, json};
    // (reset's signature, its info, the fields, the info expected, the names dropped): what
    // OpenEnv's server does with a reset request's fields, by the same rule.
    let cases = [
        (
            "def reset(self, seed=None, difficulty=1, *, label='x')",
            "{'difficulty': difficulty, 'label': label}",
            json!({"difficulty": 3, "label": "y", "prompt": "a column", "seed": 9}),
            json!({"difficulty": 3, "label": "y"}),
            vec!["prompt", "seed"],
        ),
        (
            "def reset(self, seed=None, **options)",
            "{'seed': seed, **options}",
            json!({"b": [1, 2.5, true], "a": null, "c": {"d": "e"}, "seed": 9}),
            json!({"seed": 4, "b": [1, 2.5, true], "a": null, "c": {"d": "e"}}),
            vec!["seed"],
        ),
        (
            "def reset(self, seed=None)",
            "{}",
            json!({"x": 1}),
            json!({}),
            vec!["x"],
        ),
        (
            "def reset(self, /, seed=None, level=0)",
            "{'level': level}",
            json!({"level": 2, "self": 1}),
            json!({"level": 2}),
            vec!["self"],
        ),
    ];
    let runtime = runtime();
    for (signature, body, fields, info, dropped) in cases {
        let source = reset_env(signature, body);
        let mut sandbox = runtime
            .sandbox(&source, SandboxOptions::seeded(4))
            .await
            .unwrap();
        let (reset, names) = sandbox
            .reset_with(Some(4), &ExtraFields::from_map(fields.as_object().unwrap()))
            .await
            .unwrap_or_else(|e| panic!("{signature}: {e}"));
        assert_eq!(reset.observation, "ok");
        let got: Value = serde_json::from_str(&reset.info).unwrap();
        assert_eq!(got, info, "{signature}");
        assert_eq!(names, dropped, "{signature}");
        // A plain reset passes nothing.
        assert_eq!(sandbox.reset(Some(4)).await.unwrap().observation, "ok");
    }
    // A field reset does not take by its type is the environment's exception, as in CPython.
    let source = reset_env(
        "def reset(self, seed=None, level=0)",
        "{'twice': level * 2}",
    );
    let mut sandbox = runtime
        .sandbox(&source, SandboxOptions::seeded(0))
        .await
        .unwrap();
    let (reset, _) = sandbox
        .reset_with(None, &ExtraFields::parse(r#"{"level": "ab"}"#).unwrap())
        .await
        .unwrap();
    assert_eq!(reset.info, r#"{"twice":"abab"}"#);
    let err = sandbox
        .reset_with(None, &ExtraFields::parse(r#"{"level": null}"#).unwrap())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Exception, "{err}");
    assert!(err.to_string().contains("TypeError"), "{err}");
}

/// Issue 53 (Low): reset fields reach `reset` as Python's `json.loads` gives them, as OpenEnv's
/// server passes them: an integer beyond `u64` stays an exact int (it arrived as a float), and
/// one beyond `f64` (`10**400`, which was refused) is an int of 401 digits.
#[tokio::test]
async fn integer_reset_fields_of_any_size_arrive_as_exact_ints() {
    let source = reset_env(
        "def reset(self, seed=None, n=0, m=0, f=0)",
        "{'n': str(n), 'n_type': type(n).__name__, 'm_digits': len(str(m)), 'm_type': type(m).__name__, 'm_mod': m % 1000003, 'f': f}",
    );
    let mut sandbox = runtime()
        .sandbox(&source, SandboxOptions::seeded(0))
        .await
        .unwrap();
    let ten_400 = format!("1{}", "0".repeat(400));
    let fields = ExtraFields::parse(&format!(
        "{{\"n\": 18446744073709551617, \"m\": {ten_400}, \"f\": 2.5}}"
    ))
    .unwrap();
    let (reset, dropped) = sandbox.reset_with(None, &fields).await.unwrap();
    assert!(dropped.is_empty(), "{dropped:?}");
    let info: serde_json::Value = serde_json::from_str(&reset.info).unwrap();
    // 2**64 + 1, exactly; 10**400 mod 1000003, computed by hand below.
    let m_mod = (0..400).fold(1u64, |acc, _| acc * 10 % 1_000_003);
    assert_eq!(
        info,
        serde_json::json!({
            "n": "18446744073709551617", "n_type": "int",
            "m_digits": 401, "m_type": "int", "m_mod": m_mod, "f": 2.5,
        })
    );
}

/// Issue 53/3: an environment that replaces the prelude's field splitter cannot make a reset
/// send the host more names than the reset had fields (one reset produced a 190 MiB answer
/// frame): a name that is not a field, or one named twice, is a contract error of that reset.
#[tokio::test]
async fn a_replaced_field_splitter_cannot_invent_dropped_names() {
    let splitters = [
        // 100,000 names of 1 KiB: 100 MiB that no request sent.
        "lambda env, fields: ((), (), ('x' * 1024,) * 100000)",
        // A real field, dropped twice.
        "lambda env, fields: ((), (), ('level', 'level'))",
        // A real field both passed and dropped.
        "lambda env, fields: (('level',), (1,), ('level',))",
    ];
    let runtime = runtime();
    for splitter in splitters {
        let source = format!(
            "import spade_prelude\nspade_prelude.split_reset_fields = {splitter}\n\n{}",
            reset_env("def reset(self, seed=None, level=0)", "{}")
        );
        let mut sandbox = runtime
            .sandbox(&source, SandboxOptions::seeded(0))
            .await
            .unwrap();
        let err = sandbox
            .reset_with(None, &ExtraFields::parse(r#"{"level": 1}"#).unwrap())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Contract, "{splitter}: {err}");
        assert!(
            err.to_string().contains("split_reset_fields named"),
            "{splitter}: {err}"
        );
        assert!(err.to_string().len() < 1024, "{err:.300}");
    }
}
