//! Limits under attack, measured: dead sandboxes free their memory at once, oversized values
//! never reach host memory, and the deadline counts only a call's own time under load.
//!
//! The memory tests read the process's RSS, so each runs alone in a child process of this test
//! binary (`in_own_process`), where no other test allocates at the same time. They print what
//! they measured (`cargo test --test all limits:: -- --nocapture`). Linux only (`/proc`).

use std::time::{Duration, Instant};

use spade_sandbox::{CallError, ErrorKind, Limits, Runtime, SandboxOptions};

use crate::common::{runtime, test_limits};

const MIB: u64 = 1 << 20;

/// Runs the test `name` alone in a child process of this test binary and returns false; in
/// that child it returns true, and the test's body runs there.
fn in_own_process(name: &str) -> bool {
    const VAR: &str = "SPADE_TEST_OWN_PROCESS";
    if std::env::var(VAR).is_ok_and(|v| v == name) {
        return true;
    }
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(VAR, name)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{name} failed in its own process:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("1 passed"),
        "{name} did not run in the child:\n{stdout}"
    );
    false
}

/// A field of `/proc/self/status` in bytes (`VmRSS`, `VmHWM`).
fn status_bytes(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status"));
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

fn rss() -> u64 {
    status_bytes("VmRSS:")
}

/// Resets the peak RSS (`VmHWM`) to the current RSS.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

const SPIN_ENV: &str = "class SpinEnv:\n    def reset(self, seed=None):\n        return 'ready', {}\n    def step(self, action):\n        while True:\n            pass\n";

/// Fills its memory 1 MiB at a time, writing one byte per 4 KiB page (so every page is really
/// touched, cheaply), until it has `action` MiB (or forever, which the cap ends).
const HOG_ENV: &str = "class HogEnv:\n    def reset(self, seed=None):\n        return 'ready', {}\n    def step(self, action):\n        self.chunks = []\n        while len(self.chunks) < int(action):\n            b = bytearray(1 << 20)\n            b[::4096] = b'x' * 256\n            self.chunks.append(b)\n        return 'full', 0.0, False, False, {}\n";

#[tokio::test]
async fn a_thousand_killed_sandboxes_kept_by_their_callers_hold_no_memory() {
    if !in_own_process("limits::a_thousand_killed_sandboxes_kept_by_their_callers_hold_no_memory") {
        return;
    }
    let memory_limit = 64 << 20;
    let fuel = runtime().with_limits(Limits {
        fuel_per_call: 20_000_000,
        memory_limit,
        ..test_limits()
    });
    let memory = runtime().with_limits(Limits {
        fuel_per_call: 20_000_000_000,
        memory_limit,
        ..test_limits()
    });
    let spin = fuel.prepare(SPIN_ENV).await.unwrap();
    let hog = memory.prepare(HOG_ENV).await.unwrap();
    // The measurement sees guest memory: one live sandbox holding 32 MiB shows in RSS.
    let before = rss();
    let mut live = memory
        .sandbox_from(&hog, SandboxOptions::seeded(0))
        .await
        .unwrap();
    live.reset(None).await.unwrap();
    live.step("32").await.unwrap();
    let one = rss().saturating_sub(before);
    assert!(
        one > 28 * MIB,
        "a live 32 MiB sandbox shows as {} MiB",
        one / MIB
    );
    drop(live);
    let started = Instant::now();
    let mut kept = Vec::new();
    let mut after_warmup = 0;
    let mut by_memory = 0;
    for i in 0..1000 {
        // Every tenth sandbox fills its memory to the cap; the others run out of fuel.
        let (rt, source, kind) = if i % 10 == 0 {
            (&memory, &hog, ErrorKind::MemoryLimit)
        } else {
            (&fuel, &spin, ErrorKind::OutOfFuel)
        };
        let mut sandbox = rt
            .sandbox_from(source, SandboxOptions::seeded(i))
            .await
            .unwrap();
        sandbox.reset(None).await.unwrap();
        let err = sandbox.step("1000000").await.unwrap_err();
        assert_eq!(err.kind(), kind, "sandbox {i}: {err}");
        assert_eq!(sandbox.dead(), Some(kind));
        by_memory += usize::from(kind == ErrorKind::MemoryLimit);
        kept.push(sandbox);
        if i == 19 {
            after_warmup = rss();
        }
    }
    let end = rss();
    let growth = end.saturating_sub(after_warmup);
    println!(
        "one live sandbox holding 32 MiB: RSS +{} MiB; 1000 killed sandboxes ({by_memory} by memory at {} MiB, the rest by fuel) kept: RSS {} MiB after 20, {} MiB after 1000, growth {} MiB, in {:.1} s",
        one / MIB,
        memory_limit >> 20,
        after_warmup / MIB,
        end / MIB,
        growth / MIB,
        started.elapsed().as_secs_f64()
    );
    // A few sandboxes' worth: had each dead sandbox kept its store, the 100 at the memory cap
    // alone would hold about 5 GiB.
    assert!(
        growth < 3 * memory_limit as u64,
        "RSS grew by {} MiB while 980 dead sandboxes were kept",
        growth / MIB
    );
    // Every kept handle still answers, without its store.
    assert!(matches!(
        kept[1].step("again").await,
        Err(CallError::Dead(ErrorKind::OutOfFuel))
    ));
}

/// An environment that builds a 300 MiB string in every call and either returns it (where
/// `big`) or returns something small. Which value is big is chosen by the constructor's
/// `max_turns` (tool schemas are read at load) and by `reset`'s seed.
const BIG_ENV: &str = r#"
N = 300 * 1024 * 1024
BLOCK = 'y' * 4096


class BigEnv(ToolUseBaseEnv):
    def __init__(self, max_turns=1):
        super().__init__(max_turns=max_turns)
        self.big = None
        description = 'short'
        if max_turns in (2, 3):
            blob = BLOCK * (N // 4096)
            description = blob if max_turns == 2 else blob[:5]
        self._tools = {'lookup': {'description': description, 'parameters': {'type': 'object', 'properties': {}}}}

    def reset(self, seed=None):
        self.big = seed
        blob = BLOCK * (N // 4096)
        obs = blob if seed == 1 else blob[:5]
        info = {'blob': blob} if seed == 2 else {'n': len(blob)}
        return obs, info

    def solution(self):
        blob = BLOCK * (N // 4096)
        return blob if self.big == 3 else blob[:5]

    def tool_lookup(self):
        return 'nothing'
"#;

/// Peak RSS growth (bytes) while `call` runs, and its result.
async fn peak_growth<T>(call: impl std::future::Future<Output = T>) -> (u64, T) {
    reset_peak();
    let before = rss();
    let result = call.await;
    (status_bytes("VmHWM:").saturating_sub(before), result)
}

#[tokio::test]
async fn oversized_values_are_contract_errors_that_never_reach_host_memory() {
    if !in_own_process("limits::oversized_values_are_contract_errors_that_never_reach_host_memory")
    {
        return;
    }
    let rt: Runtime = runtime().with_limits(Limits {
        memory_limit: 1 << 30,
        fuel_per_call: 20_000_000_000,
        load_fuel: 40_000_000_000,
        ..test_limits()
    });
    let source = rt.prepare(BIG_ENV).await.unwrap();
    let n = 300u64 << 20;
    let options = |max_turns| SandboxOptions {
        seed: 0,
        max_turns: Some(max_turns),
    };

    // Tool schemas, at load: the baseline builds the same string but keeps it out of them.
    let (base, ok) = peak_growth(rt.sandbox_from(&source, options(3))).await;
    drop(ok.unwrap());
    let (hostile, err) = peak_growth(rt.sandbox_from(&source, options(2))).await;
    let err = err.err().unwrap();
    // The walk stops at the value that crossed the limit: the size is the JSON up to the end
    // of the description.
    let tools_json =
        n + r#"[{"type":"function","function":{"name":"lookup","description":"""#.len() as u64;
    assert_eq!(
        err.to_string(),
        format!(
            "contract error: get_tools(): the tool schemas are at least {tools_json} bytes as JSON, over the limit of 1048576 bytes (Limits::tools_limit)"
        )
    );
    let mut extra = vec![("tool schemas", base, hostile)];

    // Observation, info and solution: the baseline calls are the same calls with small values.
    let expected = [
        (
            "observation",
            1,
            format!(
                "contract error: reset(): the observation is {n} bytes, over the limit of 1048576 bytes (Limits::observation_limit)"
            ),
        ),
        (
            "info",
            2,
            format!(
                "contract error: reset(): the info dict is at least {} bytes as JSON, over the limit of 1048576 bytes (Limits::info_limit)",
                n + r#"{"blob":"""#.len() as u64
            ),
        ),
        (
            "solution",
            3,
            format!(
                "contract error: solution()'s str is {n} bytes, over the limit of 1048576 bytes (Limits::solution_limit)"
            ),
        ),
    ];
    for (what, seed, message) in expected {
        let mut sandbox = rt.sandbox_from(&source, options(1)).await.unwrap();
        let (base, ok) = peak_growth(async {
            sandbox.reset(Some(0)).await.unwrap();
            sandbox.solution().await
        })
        .await;
        ok.unwrap();
        drop(sandbox);
        let mut sandbox = rt.sandbox_from(&source, options(1)).await.unwrap();
        let (hostile, err) = peak_growth(async {
            let reset = sandbox.reset(Some(seed)).await;
            if what == "solution" {
                reset.unwrap();
                sandbox.solution().await.unwrap_err()
            } else {
                reset.unwrap_err()
            }
        })
        .await;
        assert_eq!(err.to_string(), message);
        assert_eq!(err.kind(), ErrorKind::Contract);
        assert_eq!(
            sandbox.dead(),
            None,
            "a contract error leaves the sandbox usable"
        );
        drop(sandbox);
        extra.push((what, base, hostile));
    }
    for (what, base, hostile) in &extra {
        println!(
            "300 MiB {what}: peak RSS growth {} MiB (the same call with a small value: {} MiB), host share {} MiB",
            hostile / MIB,
            base / MIB,
            hostile.saturating_sub(*base) / MIB
        );
    }
    for (what, base, hostile) in extra {
        assert!(
            hostile.saturating_sub(base) < 64 * MIB,
            "a 300 MiB {what} grew the host's peak RSS by {} MiB more than a small one",
            hostile.saturating_sub(base) / MIB
        );
    }
}

const WORK_ENV: &str = "class WorkEnv:\n    def reset(self, seed=None):\n        return 'ready', {}\n    def step(self, action):\n        x = 0\n        for i in range(int(action)):\n            x += i\n        return str(x), 0.0, True, False, {}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_load_the_deadline_counts_only_each_calls_own_time() {
    let deadline = Duration::from_secs(2);
    let rt = runtime().with_limits(Limits {
        fuel_per_call: 200_000_000_000,
        call_deadline: deadline,
        ..test_limits()
    });
    let source = rt.prepare(WORK_ENV).await.unwrap();
    // Calibrate alone: how many iterations make half a second of work on this machine.
    let mut probe = rt
        .sandbox_from(&source, SandboxOptions::seeded(0))
        .await
        .unwrap();
    probe.reset(None).await.unwrap();
    let started = Instant::now();
    probe.step("200000").await.unwrap();
    let per_iteration = started.elapsed().as_secs_f64() / 200_000.0;
    let iterations = (0.5 / per_iteration) as u64;

    let started = Instant::now();
    let tasks: Vec<_> = (0..64)
        .map(|i| {
            let rt = rt.clone();
            let source = source.clone();
            tokio::spawn(async move {
                let mut sandbox = rt.sandbox_from(&source, SandboxOptions::seeded(i)).await?;
                sandbox.reset(None).await?;
                let call = Instant::now();
                let step = sandbox.step(&iterations.to_string()).await;
                step.map(|_| call.elapsed())
            })
        })
        .collect();
    let mut walls = Vec::new();
    for task in tasks {
        match task.await.unwrap() {
            Ok(wall) => walls.push(wall),
            Err(err) => panic!("a call under load failed: {err}"),
        }
    }
    let total = started.elapsed();
    let longest = walls.iter().max().unwrap();
    println!(
        "64 concurrent calls of {iterations} iterations (0.5 s alone) on 2 workers under a {deadline:?} deadline: all finished; longest call {:.1} s of wall time, all in {:.1} s",
        longest.as_secs_f64(),
        total.as_secs_f64()
    );
    // The load was real: calls took longer than the deadline in wall time, yet none timed out.
    assert!(
        *longest > deadline,
        "no call waited longer than the deadline ({longest:?}): the test did not load the machine"
    );
}

/// Compares two lists nested `depth` deep with Python's recursion limit lifted: the
/// comparison recurses in the interpreter's native code, bounded only by the guest's stack.
const NATIVE_RECURSION: &str = r#"
import sys

class DeepEnv:
    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        sys.setrecursionlimit(10**8)
        x, y = [], []
        for _ in range(int(action)):
            x, y = [x], [y]
        return str(x == y), 0.0, False, False, {}

    def solution(self):
        return 'none'
"#;

#[tokio::test]
async fn native_recursion_past_the_guest_stack_is_a_typed_stack_overflow() {
    let rt: Runtime = runtime().with_limits(Limits {
        fuel_per_call: 20_000_000_000,
        memory_limit: 1 << 30,
        ..test_limits()
    });
    let source = rt.prepare(NATIVE_RECURSION).await.unwrap();
    // Shallow: an answer. A million levels: the guest's stack (1 MiB at the bottom of its
    // memory, see `guest_layout`) overflows and wraps out of the memory; the outcome is a
    // stack overflow that ends the sandbox, not a trap of unknown cause.
    let mut sandbox = rt
        .sandbox_from(&source, SandboxOptions::seeded(0))
        .await
        .unwrap();
    sandbox.reset(Some(0)).await.unwrap();
    assert_eq!(sandbox.step("100").await.unwrap().observation, "True");
    let err = sandbox.step("1000000").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::StackOverflow, "{err}");
    assert_eq!(
        err.to_string(),
        "stack overflow: the environment recursed too deeply for the sandbox's stack"
    );
    assert_eq!(
        sandbox.step("1").await.unwrap_err().kind(),
        ErrorKind::Dead,
        "the sandbox is dead after it"
    );
    // The next sandbox of the source is unharmed.
    let mut next = rt
        .sandbox_from(&source, SandboxOptions::seeded(0))
        .await
        .unwrap();
    next.reset(Some(0)).await.unwrap();
    assert_eq!(next.step("100").await.unwrap().observation, "True");
}

/// A constructor that keeps `{mib}` MiB (too much to snapshot: every sandbox constructs).
const BIG_CONSTRUCTOR: &str = r#"
class KeepEnv:
    def __init__(self):
        self.blob = b'y' * ({mib} << 20)

    def reset(self, seed=None):
        return 'ready', {}

    def step(self, action):
        return 'ok', 0.0, True, False, {}

    def solution(self):
        return 'none'
"#;

#[tokio::test]
async fn the_first_sandbox_of_a_source_costs_at_most_one_more_sandbox_of_memory() {
    if !in_own_process(
        "limits::the_first_sandbox_of_a_source_costs_at_most_one_more_sandbox_of_memory",
    ) {
        return;
    }
    let rt: Runtime = runtime().with_limits(Limits {
        fuel_per_call: 10_000_000_000,
        load_fuel: 20_000_000_000,
        memory_limit: 512 << 20,
        ..test_limits()
    });
    // A source no earlier process probed: the first sandbox probes it, diffs its memory after
    // the constructor and finds it too changed to snapshot, then loads.
    let source = BIG_CONSTRUCTOR.replace("{mib}", "150").replace(
        "class KeepEnv",
        &format!(
            "# {} {:?}\nclass KeepEnv",
            std::process::id(),
            std::time::SystemTime::now()
        ),
    );
    let prepared = rt.prepare(&source).await.unwrap();
    let (first, sandbox) = peak_growth(rt.sandbox_from(&prepared, SandboxOptions::seeded(0))).await;
    drop(sandbox.unwrap());
    let (later, sandbox) = peak_growth(rt.sandbox_from(&prepared, SandboxOptions::seeded(0))).await;
    drop(sandbox.unwrap());
    // Snapshotted before the constructor: after it, the memory is too changed to keep.
    let (_, snapshot_bytes) = rt.snapshot_size(&prepared, None).unwrap();
    assert!(snapshot_bytes < 16 * MIB as usize, "{snapshot_bytes} bytes");
    println!(
        "first sandbox: peak growth {} MiB; a later one: {} MiB",
        first / MIB,
        later / MIB
    );
    // The probe is one more sandbox of the source, alive before the first one loads (plus a
    // fresh interpreter's memory, the base of every diff, once per runtime). Copying the
    // probe's memory out to diff it, as the host did, cost two more.
    assert!(
        first <= 2 * later + 64 * MIB,
        "the first sandbox grew the host by {} MiB, a later one by {} MiB",
        first / MIB,
        later / MIB
    );
}
