//! The guest's allocator, seen from Python: small objects of every size keep their contents,
//! and memory freed by objects of one size is reused by objects of another (pools of small
//! blocks go back to the guest's `malloc` when they empty, as in CPython's `pymalloc`).

use spade_sandbox::{Limits, SandboxOptions};

use crate::common::{runtime, test_limits};

/// Each round keeps a sixth of 699 objects of lengths 1 to 699 (every small size class, and
/// sizes past the largest) while the rest are freed in between.
const EVERY_SIZE: &str = r#"
class EverySizeEnv:
    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        kept = []
        for round in range(6):
            made = [bytes([n % 251]) * n for n in range(1, 700)]
            kept.extend(made[round::6])
            del made
        intact = all(b == bytes([len(b) % 251]) * len(b) for b in kept)
        lengths = sorted(len(b) for b in kept)
        return f"{intact} {len(kept)} {sum(lengths)} {lengths == list(range(1, 700))}", 1.0, True, False, {}

    def solution(self):
        return ""
"#;

#[tokio::test]
async fn small_objects_of_every_size_keep_their_contents() {
    let mut sandbox = runtime()
        .sandbox(EVERY_SIZE, SandboxOptions::seeded(0))
        .await
        .unwrap();
    sandbox.reset(None).await.unwrap();
    let step = sandbox.step("go").await.unwrap();
    // Rounds 0..6 keep lengths round+1, round+7, ...: every length from 1 to 699 once, and
    // 1 + 2 + ... + 699 = 699 * 700 / 2 bytes.
    assert_eq!(step.observation, "True 699 244650 True");
}

/// Step `r` fills 16 MiB with byte strings of one length (a different small size class every
/// round) and frees them.
const CHURN: &str = r#"
class ChurnEnv:
    def reset(self, seed=None):
        return "ready", {}

    def step(self, action):
        size = 24 + 32 * int(action)
        made = [bytes(size) for _ in range((16 << 20) // (size + 64))]
        count = len(made)
        del made
        return str(count), 0.0, False, False, {}

    def solution(self):
        return ""
"#;

#[tokio::test]
async fn memory_freed_by_small_objects_of_one_size_is_reused_by_another() {
    // Sixteen rounds of 16 MiB of payload each, 256 MiB in all, in a sandbox capped at
    // 128 MiB: only memory handed back after each round lets the next one fit.
    let limits = Limits {
        memory_limit: 128 << 20,
        fuel_per_call: 4_000_000_000,
        ..test_limits()
    };
    let runtime = runtime().with_limits(limits);
    let mut sandbox = runtime
        .sandbox(CHURN, SandboxOptions::seeded(0))
        .await
        .unwrap();
    sandbox.reset(None).await.unwrap();
    for round in 0..16u32 {
        let size = 24 + 32 * round;
        let step = sandbox
            .step(&round.to_string())
            .await
            .unwrap_or_else(|e| panic!("round {round} (objects of {size} bytes): {e}"));
        assert_eq!(step.observation, ((16 << 20) / (size + 64)).to_string());
    }
}
