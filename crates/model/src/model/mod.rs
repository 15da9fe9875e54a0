//! The decoder: configuration, layers, KV cache, LoRA, seeded initialisation, and the
//! quantised base weights the inference path can read.
//!
//! Two paths read the same weights: the training path ([`Decoder::forward_train`]) uses only
//! differentiable ops ([`train_ops`]), the inference path ([`Decoder::forward`]) the CPU
//! kernels in [`kernels`].

pub mod config;
pub mod decode_weights;
pub mod decoder;
pub mod init;
pub mod kernels;
pub mod kv_cache;
pub mod linear;
pub mod lora;
pub mod quant;
pub mod rope;
pub mod train_ops;

pub use config::{Family, ModelConfig};
pub use decode_weights::{DecodeActivations, DecodePath, DecodeWeights};
pub use decoder::{
    Decoder, LayerCheckpoints, PREFILL_CHUNK, TrainAttention, TrainMemory, TrainOps,
};
pub use kv_cache::KvCache;
pub use lora::LoraConfig;
