//! `spade serve`: the OpenEnv wire protocol on loopback, driven by real clients (the stock
//! `openenv` client and `spade_client` in Python, a raw WebSocket/HTTP client in Rust).

mod admission;
mod caches;
mod cli;
mod connections;
mod deadlines;
mod fork;
pub mod harness;
mod limits;
mod load;
mod mcp;
mod memory;
mod protocol;
mod python;
mod registrations;
mod trajectories;

/// The fixtures with actions that `spade check` accepts (the ones a session can play).
pub const PLAYABLE: &[&str] = &[
    "arithmetic_puzzle",
    "fraction_answer",
    "grid_walk",
    "print_flood",
    "reward_hack",
    "tool_inventory",
];

/// Fixtures with actions that `spade check` rejects, with the error code (from the probe table
/// in docs/check-and-fuzz.md: `never_ends` never ends, `brace_crash` raises on a brace, `nondeterminism`
/// keeps state across resets).
pub const REJECTED: &[(&str, &str)] = &[
    ("brace_crash", "step_failed"),
    ("never_ends", "no_end"),
    ("nondeterminism", "reset_not_reproducible"),
];

/// `tests/serve/<name>`.
pub fn serve_fixture(name: &str) -> String {
    crate::common::repo_root()
        .join("tests")
        .join("serve")
        .join(name)
        .display()
        .to_string()
}

/// `tests/envs/<name>/env.py`, relative to the repository root (where the server runs).
pub fn env_path(name: &str) -> String {
    format!("tests/envs/{name}/env.py")
}

/// The sessions `spade serve` allows by default, from the rule in docs/serve.md: a budget of
/// 3/4 of the machine's memory, less a fresh sandbox's whole memory and 4 MiB of overhead for
/// each of the 2 check workers, 2 for planning a new source and 64 for calls running at once,
/// divided by an idle session's cost (6 MiB), at most 4,096.
pub fn max_sessions_fitting() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: u64 = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap();
    let budget = kib * 1024 / 4 * 3;
    let fresh = fresh_sandbox_bytes();
    (budget.saturating_sub(68 * (fresh + (4 << 20))) / (6 << 20)).min(4096)
}

/// A fresh sandbox's linear memory, as the sandbox runtime measures it (on a thread of its own,
/// so that async tests can ask too).
pub fn fresh_sandbox_bytes() -> u64 {
    std::thread::spawn(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(crate::common::runtime().fresh_memory_bytes())
            .unwrap()
    })
    .join()
    .unwrap()
}
