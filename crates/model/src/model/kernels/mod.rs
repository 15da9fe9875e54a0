//! The CPU kernels behind the decoder, named by the role they play.
//!
//! Training path:
//! - [`train_matmul`]: `x Wᵀ` for a frozen base weight, with a backward pass that computes
//!   only the input's gradient.
//! - [`train_attention`]: causal attention computed block by block with an online softmax,
//!   keeping only each row's log-sum-exp for its backward pass (FlashAttention-2).
//!
//! Inference (decode) path, each with a portable loop and an AVX2 (and, where it pays,
//! AVX-512) loop chosen at run time:
//! - [`decode_matmul`]: `x Wᵀ` for the few rows of a decode step with f32 weights;
//! - [`decode_quant_matmul`]: `x Wᵀ` with quantised (GGML block) weights, the LoRA adapter
//!   fused in;
//! - [`decode_attention`]: one new position's attention over the cache, read in place;
//! - [`decode_ops`]: RMSNorm, RoPE and SiLU·up without rayon for small inputs;
//! - [`decode_pool`]: the threads that stay awake through a decode step.

pub mod decode_attention;
pub mod decode_matmul;
pub mod decode_ops;
pub mod decode_pool;
pub mod decode_quant_matmul;
pub mod train_attention;
pub mod train_matmul;
