//! Example environments bundled into the binary to seed the pool of a run started without
//! `--seed-envs`: a small model rarely writes a valid environment, and with an empty pool an
//! iteration would have nothing to play (the paper's fixed-environment baseline seeds the same
//! way). Three are at the default model's edge (`trainer/seed_envs/`: SmolLM2-135M wins them
//! sometimes, neither never nor always, so GRPO has signal on a CPU; README.md gives the
//! measured win rates), three are the repository's fixture environments, which the tests check
//! in detail (a single-answer, a multi-turn and a tool-use game, all hard for a small model).

/// `(name, source)` of each bundled example environment.
pub const EXAMPLE_ENVS: [(&str, &str); 6] = [
    (
        "bigger_number",
        include_str!("../../seed_envs/bigger_number/env.py"),
    ),
    (
        "next_number",
        include_str!("../../seed_envs/next_number/env.py"),
    ),
    (
        "guess_three",
        include_str!("../../seed_envs/guess_three/env.py"),
    ),
    (
        "arithmetic_puzzle",
        include_str!("../../../tests/envs/arithmetic_puzzle/env.py"),
    ),
    (
        "grid_walk",
        include_str!("../../../tests/envs/grid_walk/env.py"),
    ),
    (
        "tool_inventory",
        include_str!("../../../tests/envs/tool_inventory/env.py"),
    ),
];

/// The bundled examples as owned `(name, source)` pairs, the form `Run::create` takes.
pub fn example_envs() -> Vec<(String, String)> {
    EXAMPLE_ENVS
        .iter()
        .map(|(n, s)| ((*n).to_string(), (*s).to_string()))
        .collect()
}
