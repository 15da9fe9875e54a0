//! Self-play training (the SPADE method): a designer writes environments, the sandbox
//! validates them, the same model writes hints and plays with and without them, hint-based
//! regret rewards the designer, and one GRPO step updates the one policy. [`report`] turns a
//! run's files into charts and tables (`spade report`). Failures are [`TrainError`]s.
#![warn(missing_docs)]
pub mod admission;
pub mod config;
pub mod corpus;
pub mod credit;
pub mod delay;
pub mod designer;
pub mod difficulty;
pub mod error;
pub mod eval;
pub mod extract;
pub mod library;
pub mod lockstep;
pub mod memory;
pub mod policy;
pub mod progress;
pub mod prompts;
pub mod remote;
pub mod report;
pub mod rewards;
pub mod rollout;
pub mod seeds;
pub mod sft;
pub mod starter_envs;
pub mod state;
pub mod update_memory;

pub use config::TrainConfig;
pub use corpus::Corpus;
pub use error::TrainError;
pub use policy::{CandlePolicy, Policy, Role, Scripted};
pub use rollout::{Metrics, Run};
