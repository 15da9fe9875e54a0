//! Fuzzing generated environments: seeded, structure-aware action generators, oracles that
//! every call and episode must satisfy, and campaigns that keep every failure as a replayable
//! trajectory. `spade fuzz` and `spade check` are thin layers over this module; the cargo-fuzz
//! targets in `fuzz/` call it too, and `cargo test` exercises it with fixed seeds.

pub mod actions;
pub mod campaign;
pub mod oracles;
pub mod rng;
pub mod session;
pub mod targets;

pub use actions::{ActionGen, MAX_ACTION_CHARS, Style, ToolSpec, parse_tools};
pub use campaign::{FuzzFinding, FuzzOptions, FuzzReport, Progress, check_replay, fuzz};
pub use oracles::{REWARD_BOUND, Severity, Violation};
pub use rng::{Rng, derive_seed};
pub use session::Session;
