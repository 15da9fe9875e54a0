//! The sandbox's own integration tests: one binary, a module per area, driving real sandboxes
//! through the crate's public API (no `spade` binary, no model). Fixture environments are the
//! repository's `tests/envs/<name>/` and `tests/escape/`; the `spade` package's tests in
//! `tests/all` cover the commands built on this crate.

mod common;
mod escape;
mod faults;
mod guest_memory;
// Reads RSS from /proc.
#[cfg(target_os = "linux")]
mod limits;
mod memory_account;
mod sandbox;
mod yields;
