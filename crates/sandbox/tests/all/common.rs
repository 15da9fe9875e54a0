//! Helpers shared by the test modules: the repository's fixtures.

#[path = "../../../../tests/support/fixtures.rs"]
mod fixtures;
pub use fixtures::*;
