//! `spade serve`: the OpenEnv wire protocol on loopback, driven by real clients (the stock
//! `openenv` client and `spade_client` in Python, a raw WebSocket/HTTP client in Rust).

mod cli;
mod harness;
mod limits;
mod load;
mod protocol;
mod python;

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
