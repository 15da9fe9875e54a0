//! spade's trainer: a trainable decoder in candle, model loading, seeded sampling, log-probs,
//! LoRA and GRPO updates.
#![warn(missing_docs)]
pub mod chat;
pub mod checkpoint;
pub mod error;
pub mod fetch;
pub mod grpo;
pub mod load;
pub mod logprob;
pub mod model;
pub mod optim;
pub mod prefix_cache;
pub mod report;
pub mod sample;
pub mod schedule;
pub mod selfplay;

pub use error::{Result, TrainerError};
