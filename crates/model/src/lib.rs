//! spade-model: the language-model layer. A trainable decoder in candle with a separate
//! inference path and its CPU kernels ([`model`]), model loading ([`load`]), chat templates,
//! seeded sampling ([`sample`], with [`dry`] and [`pyguard`]), log-probs ([`logprob`]), LoRA and the GRPO update ([`grpo`],
//! [`optim`], [`schedule`]), an update's memory ([`memory`]), checkpoints and the default model's download ([`fetch`]). It
//! knows nothing of the sandbox or of self-play.
#![warn(missing_docs)]
pub mod chat;
pub mod checkpoint;
pub mod dry;
pub mod error;
pub mod fetch;
pub mod gguf_lora;
pub mod grpo;
pub mod load;
pub mod logprob;
pub mod memory;
pub mod model;
pub mod optim;
pub mod prefix_cache;
pub mod pyguard;
pub mod sample;
pub mod schedule;
pub mod sft;

pub use error::{ModelError, Result};
