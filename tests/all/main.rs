//! spade's integration tests: one binary, a module per area. Fixture environments live in
//! `tests/envs/<name>/` (`env.py`, the actions to play, the expected outcome beside them).

mod check;
mod cli;
mod common;
mod credit;
mod determinism;
mod envs;
mod escape;
mod faults;
mod fidelity;
mod fuzz;
mod guest_memory;
mod learning;
// Reads RSS from /proc.
#[cfg(target_os = "linux")]
mod limits;
mod model;
mod model_cli;
mod real_model;
mod replay;
mod report;
mod sandbox;
mod selfplay;
mod serve;
mod snapshots;
mod unicode;
mod yields;
