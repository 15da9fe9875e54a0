//! The decoder: configuration, layers, KV cache, LoRA, seeded initialisation, and the
//! quantised base weights the inference path can read.
pub mod cache;
pub mod config;
pub mod decode_attention;
pub mod decode_pool;
pub mod decode_weights;
pub mod decoder;
pub mod frozen;
pub mod infer_ops;
pub mod init;
pub mod linear;
pub mod lora;
pub mod ops;
pub mod quant;
pub mod quant_matmul;
pub mod rope;
pub mod small_matmul;

pub use cache::KvCache;
pub use config::{Config, Family};
pub use decode_weights::{DecodePath, DecodeWeights};
pub use decoder::{Decoder, PREFILL_CHUNK};
pub use lora::LoraConfig;
