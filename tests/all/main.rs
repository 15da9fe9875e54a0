//! spade's integration tests: one binary, a module per area, driving the `spade` binary and the
//! libraries behind it. Fixture environments live in `tests/envs/<name>/` (`env.py`, the
//! actions to play, the expected outcome beside them). The sandbox's own tests (limits, escape
//! corpus, faults, guest memory, yields) are in `crates/sandbox/tests/all`.

mod autofix;
mod check;
mod cli;
mod common;
mod determinism;
mod envs;
mod episode;
mod fidelity;
mod fork;
mod fuzz;
mod llama_server;
mod model;
mod model_cli;
mod packages;
mod packages_convert;
mod peft;
mod python_wheel;
mod real_model;
mod replay;
mod selfplay;
mod serve;
mod snapshots;
mod unicode;
