//! The memory account shared by a runtime's sandboxes (`Config::memory_account`): while a call
//! runs, its sandbox's whole linear memory is charged to it (waiting for room, up to the call's
//! deadline); between calls, only what the memory holds privately; a growth past what is left
//! fails as that sandbox's `MemoryLimit` while the others go on, and a dropped sandbox gives
//! its charge back.

use spade_sandbox::{Config, ErrorKind, Limits, MemoryAccount, Runtime, SandboxOptions};

use crate::common::{env_actions, env_source, test_limits};

const MIB: u64 = 1 << 20;

/// Fills its memory 1 MiB at a time, writing every 4 KiB page, until it holds `action` MiB.
const HOG_ENV: &str = "class HogEnv:\n    def reset(self, seed=None):\n        return 'ready', {}\n    def step(self, action):\n        self.chunks = []\n        while len(self.chunks) < int(action):\n            b = bytearray(1 << 20)\n            b[::4096] = b'x' * 256\n            self.chunks.append(b)\n        return 'full', 0.0, False, False, {}\n";

/// A runtime whose sandboxes draw from `account`.
fn runtime_on(account: &MemoryAccount) -> Runtime {
    Runtime::new(Config {
        memory_account: Some(account.clone()),
        ..Config::default()
    })
    .expect("runtime")
    .with_limits(test_limits())
}

#[tokio::test]
async fn a_sandbox_is_charged_its_private_pages_between_calls_and_gives_them_back_when_dropped() {
    let account = MemoryAccount::new(1 << 30);
    let runtime = runtime_on(&account);
    let fresh = runtime.fresh_memory_bytes().await.unwrap();
    assert_eq!(account.charged(), 0, "the fresh sandbox measured is gone");
    let source = runtime.prepare(&env_source("grid_walk")).await.unwrap();
    let mut sandbox = runtime
        .sandbox_from(&source, SandboxOptions::seeded(1))
        .await
        .unwrap();
    sandbox.reset(Some(1)).await.unwrap();
    for action in env_actions("grid_walk") {
        sandbox.step(&action).await.unwrap();
    }
    let one = account.charged();
    println!(
        "a fresh sandbox's memory: {fresh} bytes ({:.1} MiB); a grid_walk sandbox after its episode is charged {one} bytes ({:.1} MiB)",
        fresh as f64 / MIB as f64,
        one as f64 / MIB as f64
    );
    // Between calls: the pages its load and episode wrote (the issue measured 1.57 MiB of
    // private memory per live sandbox), not the 29.5 MiB image; while a call ran: the whole
    // memory.
    assert!(one > 0 && one < fresh / 4, "{one} vs {fresh}");
    assert!(account.peak() >= fresh, "{} vs {fresh}", account.peak());
    drop(sandbox);
    assert_eq!(account.charged(), 0);
}

#[tokio::test]
async fn a_growth_past_the_shared_budget_is_that_sandboxs_memory_limit_and_the_others_go_on() {
    // Room for three fresh sandboxes (a source's first sandbox is planned with two: the probe
    // and a fresh interpreter to compare it with) and a little: about 110 MiB in all, while
    // each sandbox's own limit is 128 MiB.
    let probe = MemoryAccount::new(1 << 30);
    let fresh = runtime_on(&probe).fresh_memory_bytes().await.unwrap();
    let budget = 3 * fresh + 24 * MIB;
    let account = MemoryAccount::new(budget);
    let runtime = runtime_on(&account);
    let grid = runtime.prepare(&env_source("grid_walk")).await.unwrap();
    let hog = runtime.prepare(HOG_ENV).await.unwrap();
    let mut other = runtime
        .sandbox_from(&grid, SandboxOptions::seeded(3))
        .await
        .unwrap();
    other.reset(Some(3)).await.unwrap();
    let actions = env_actions("grid_walk");
    other.step(&actions[0]).await.unwrap();
    let before = account.charged();

    let mut greedy = runtime
        .sandbox_from(&hog, SandboxOptions::seeded(0))
        .await
        .unwrap();
    greedy.reset(None).await.unwrap();
    // Within its own limit (128 MiB: 29.5 MiB and 96 more) but past what the budget has
    // left (3 x 29.5 MiB and 24 more, of which the other sandbox holds a few).
    let err = greedy.step("96").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MemoryLimit, "{err}");
    let message = err.to_string();
    assert!(
        message.starts_with("memory limit: the environment tried to grow the sandbox memory to ")
            && message.contains(
                "bytes, more than is left of the memory budget shared by all sandboxes ("
            )
            && message.contains(&format!(" of {budget} bytes in use)")),
        "{message}"
    );
    assert_eq!(greedy.dead(), Some(ErrorKind::MemoryLimit));
    assert!(account.charged() <= budget);
    // The sandbox is dead and its store gone: its charge is back already.
    assert_eq!(account.charged(), before);
    drop(greedy);
    assert_eq!(account.charged(), before);

    // The other sandbox never noticed, and a new one fits again.
    for action in &actions[1..] {
        other.step(action).await.unwrap();
    }
    let mut again = runtime
        .sandbox_from(&hog, SandboxOptions::seeded(1))
        .await
        .unwrap();
    again.reset(None).await.unwrap();
    assert_eq!(again.step("4").await.unwrap().observation, "full");
}

#[tokio::test]
async fn a_budget_of_one_and_a_half_memories_holds_several_idle_sandboxes() {
    let probe = MemoryAccount::new(1 << 30);
    let fresh = runtime_on(&probe).fresh_memory_bytes().await.unwrap();
    // Charged their whole memory, one sandbox fitted here; charged what they hold between
    // calls, four do, each playing its episode in turn.
    let account = MemoryAccount::new(fresh + fresh / 2);
    let runtime = runtime_on(&account);
    let source = runtime.prepare(&env_source("grid_walk")).await.unwrap();
    let mut sandboxes = Vec::new();
    for seed in 0..4 {
        let mut sandbox = runtime
            .sandbox_from(&source, SandboxOptions::seeded(seed))
            .await
            .unwrap();
        sandbox.reset(Some(seed)).await.unwrap();
        sandboxes.push(sandbox);
    }
    for sandbox in &mut sandboxes {
        for action in env_actions("grid_walk") {
            sandbox.step(&action).await.unwrap();
        }
    }
    assert!(account.peak() <= account.budget());
}

/// Counts to `action` (a call that runs for a while without growing its memory).
const SPIN_ENV: &str = "class SpinEnv:\n    def reset(self, seed=None):\n        return 'ready', {}\n    def step(self, action):\n        n = 0\n        for _ in range(int(action)):\n            n += 1\n        return str(n), 0.0, False, False, {}\n";

#[tokio::test]
async fn a_call_waits_for_room_for_its_whole_memory_and_fails_at_its_deadline() {
    let probe = MemoryAccount::new(1 << 30);
    let fresh = runtime_on(&probe).fresh_memory_bytes().await.unwrap();
    // Room for two whole memories and a little: two calls at once, not three.
    let budget = 2 * fresh + 8 * MIB;
    let account = MemoryAccount::new(budget);
    // The slow calls below run for seconds: 3,000,000 turns of the loop use about 5.4e9
    // units of fuel, 540 fuel yields. A waiting call's deadline is a timer, and the
    // single-threaded executor checks its timers only every 61 polls while tasks keep
    // waking themselves; a call shorter than that could end before the timer is seen, and
    // the waiting call would then get the room it gave back instead of its deadline.
    let slow = runtime_on(&account).with_limits(Limits {
        fuel_per_call: 20_000_000_000,
        ..test_limits()
    });
    let mut quick_limits = test_limits();
    quick_limits.call_deadline = std::time::Duration::from_millis(100);
    let quick = runtime_on(&account).with_limits(quick_limits);
    let spin = slow.prepare(SPIN_ENV).await.unwrap();
    let mut b = Vec::new();
    for seed in 0..3 {
        let mut sandbox = slow
            .sandbox_from(&spin, SandboxOptions::seeded(seed))
            .await
            .unwrap();
        sandbox.reset(None).await.unwrap();
        b.push(sandbox);
    }
    let spin_quick = quick.prepare(SPIN_ENV).await.unwrap();
    let mut a = quick
        .sandbox_from(&spin_quick, SandboxOptions::seeded(9))
        .await
        .unwrap();
    a.reset(None).await.unwrap();
    assert!(account.charged() < fresh, "four idle sandboxes hold little");

    // Three calls at once: the third waits for one of the first two to end, then runs.
    let [b0, b1, b2] = &mut b[..] else {
        unreachable!()
    };
    let (r0, r1, r2) = tokio::join!(b0.step("300000"), b1.step("300000"), b2.step("1"));
    assert_eq!(r0.unwrap().observation, "300000");
    assert_eq!(r1.unwrap().observation, "300000");
    assert_eq!(r2.unwrap().observation, "1");
    assert!(account.peak() <= budget);

    // With a deadline shorter than the calls it waits for, the third is refused.
    let (r0, r1, ra) = tokio::join!(b0.step("3000000"), b1.step("3000000"), a.step("1"));
    assert_eq!(r0.unwrap().observation, "3000000");
    assert_eq!(r1.unwrap().observation, "3000000");
    let err = ra.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::MemoryLimit, "{err}");
    let message = err.to_string();
    assert!(
        message.contains(
            "must be covered while a call runs, and that is more than is left of the memory budget shared by all sandboxes ("
        ) && message.contains(&format!(" of {budget} bytes in use, none given back within the call deadline of 100ms)")),
        "{message}"
    );
    assert_eq!(a.dead(), Some(ErrorKind::MemoryLimit));
    assert!(account.peak() <= budget);
}
