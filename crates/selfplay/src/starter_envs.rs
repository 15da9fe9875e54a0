//! Starter environments bundled into the binary: the pool of a run started without
//! `--starter-envs` begins with them. A small model rarely writes a valid environment, and with
//! an empty pool an iteration would have nothing to play (the paper's fixed-environment
//! baseline starts the same way). Three are at the default model's edge (SmolLM2-135M wins them
//! sometimes, neither never nor always, so GRPO has signal on a CPU; docs/selfplay.md gives the
//! measured win rates). Three are copies of the repository's fixture environments
//! (`tests/envs/`), which the tests check in detail (a single-answer, a multi-turn and a
//! tool-use game, all hard for a small model). They are copied rather than read from `tests/`
//! so that the binary embeds no test fixture; a test checks that each copy still equals its
//! fixture, so a change to one is a change to both.
//!
//! All six live in this crate's `assets/starter_envs/<name>/env.py`.

/// The skill of a starter environment in the pool of a self-play run (a designed one has the
/// skill its prompt asked for). Runs written before this name had `"Seed"`.
pub const STARTER_SKILL: &str = "Starter";

/// The prefix of a starter environment's `origin` in the pool (`seed:bigger_number`). It is
/// read back from `state.json` when a run resumes, so it keeps the name older runs wrote; here
/// "seed" means "what the pool started with", not an RNG seed.
pub const STARTER_ORIGIN: &str = "seed:";

/// `(name, source)` of each bundled starter environment.
pub const STARTER_ENVS: [(&str, &str); 6] = [
    (
        "bigger_number",
        include_str!("../assets/starter_envs/bigger_number/env.py"),
    ),
    (
        "next_number",
        include_str!("../assets/starter_envs/next_number/env.py"),
    ),
    (
        "guess_three",
        include_str!("../assets/starter_envs/guess_three/env.py"),
    ),
    (
        "arithmetic_puzzle",
        include_str!("../assets/starter_envs/arithmetic_puzzle/env.py"),
    ),
    (
        "grid_walk",
        include_str!("../assets/starter_envs/grid_walk/env.py"),
    ),
    (
        "tool_inventory",
        include_str!("../assets/starter_envs/tool_inventory/env.py"),
    ),
];

/// The bundled starter environments as owned `(name, source)` pairs, the form `Run::create`
/// takes.
pub fn starter_envs() -> Vec<(String, String)> {
    STARTER_ENVS
        .iter()
        .map(|(n, s)| ((*n).to_string(), (*s).to_string()))
        .collect()
}
