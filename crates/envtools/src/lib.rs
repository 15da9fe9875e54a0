//! spade-envtools: what is done with a generated environment besides running it, built on the
//! public API of `spade-sandbox`.
//!
//! - [`Episode`]: the one door through which every caller plays an environment: a sandbox,
//!   optionally recorded, whose calls return their value with what they cost;
//! - [`trajectory`]: every episode recorded as a hash-chained JSON Lines file, read back,
//!   verified, and replayed bit for bit (`spade replay`);
//! - [`check`]: whether an environment may enter training (`spade check`);
//! - [`autofix`]: the automatic fixes applied before validation (f-string brace mistakes,
//!   standard-library names never imported: `spade check --fix`, self-play's `auto_fix`);
//! - [`fuzz`]: crash, reward-hack and nondeterminism hunting with generated actions
//!   (`spade fuzz`, and the cargo-fuzz targets in `fuzz/`).
//!
//! `check` and `fuzz` share the pieces at this crate's root, as wasmtime's fuzzing crate keeps
//! its generators and oracles apart from its targets: [`actions`] (seeded, structure-aware
//! action generators), [`oracles`] (what every call and episode must satisfy, with the one
//! [`Severity`], and [`check_replay`], the oracle that a recorded episode replays to the same
//! trace) and [`rng`] (the generators' deterministic stream).

pub mod actions;
pub mod autofix;
pub mod check;
pub mod episode;
pub mod fuzz;
pub mod oracles;
pub mod package;
pub mod rng;
pub mod trajectory;

pub use actions::{ActionGen, MAX_ACTION_CHARS, Style, ToolSpec, parse_tools};
pub use autofix::{Fix, FixKind, Fixed, autofix};
pub use episode::{
    Branch, Cost, Costed, Episode, EpisodeError, Finished, Record, Source, Spent, check_replay,
};
pub use oracles::{REWARD_BOUND, Severity, Violation};
pub use rng::{Rng, derive_seed};
