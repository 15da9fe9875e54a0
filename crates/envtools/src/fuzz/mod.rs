//! `spade fuzz`: campaigns of seeded episodes with generated actions ([`crate::actions`]),
//! judged by the oracles every call and episode must satisfy ([`crate::oracles`]), keeping
//! every failure as a replayable trajectory; and the bodies of the cargo-fuzz targets in `fuzz/`
//! ([`targets`]), which `cargo test` runs with fixed inputs.

pub mod campaign;
pub mod novelty;
pub mod targets;

pub use campaign::{FuzzFinding, FuzzOptions, FuzzReport, Progress, fuzz};
