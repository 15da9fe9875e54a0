//! The memory account shared by a runtime's sandboxes (`Config::memory_account`): every
//! sandbox's linear memory is charged to it, a growth past what is left fails as that
//! sandbox's `MemoryLimit` while the others go on, and a dropped sandbox gives its charge back.

use spade_sandbox::{Config, ErrorKind, MemoryAccount, Runtime, SandboxOptions};

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
async fn a_sandbox_is_charged_its_linear_memory_and_gives_it_back_when_dropped() {
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
    // At least the interpreter's image, and the few MiB a small environment grows by.
    assert!(one >= fresh && one < fresh + 16 * MIB, "{one} vs {fresh}");
    drop(sandbox);
    assert_eq!(account.charged(), 0);
    assert!(account.peak() >= one);
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
    // Within its own limit (128 MiB) but past what the budget has left.
    let err = greedy.step("64").await.unwrap_err();
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
async fn a_sandbox_whose_fresh_memory_does_not_fit_is_refused_with_memory_limit() {
    let probe = MemoryAccount::new(1 << 30);
    let fresh = runtime_on(&probe).fresh_memory_bytes().await.unwrap();
    // One sandbox fits, two do not.
    let account = MemoryAccount::new(fresh + fresh / 2);
    let runtime = runtime_on(&account);
    let source = runtime.prepare(&env_source("grid_walk")).await.unwrap();
    let mut first = runtime
        .sandbox_from(&source, SandboxOptions::seeded(0))
        .await
        .unwrap();
    first.reset(Some(0)).await.unwrap();
    let before = account.charged();
    let Err(err) = runtime
        .sandbox_from(&source, SandboxOptions::seeded(1))
        .await
    else {
        panic!("a second sandbox fits in a budget of one and a half");
    };
    assert_eq!(err.kind(), ErrorKind::MemoryLimit, "{err}");
    assert!(
        err.to_string().contains(&format!(
            "to {fresh} bytes, more than is left of the memory budget shared by all sandboxes ({before} of {} bytes in use)",
            account.budget()
        )),
        "{err}"
    );
    assert_eq!(account.charged(), before);
    first.step(&env_actions("grid_walk")[0]).await.unwrap();
}
