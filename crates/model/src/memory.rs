//! What a training update costs in memory, estimated from the model's shape before it runs, so
//! that the tokens an update takes at once can be chosen from a memory budget instead of
//! found by the OOM killer.
//!
//! An update's peak resident memory is linear in the padded tokens of its largest micro-batch
//! (gradients accumulate across micro-batches, whose activations are freed in between; the
//! blockwise training attention keeps attention linear in the sequence length too):
//!
//! ```text
//! peak ≈ fixed + per_token × tokens of one micro-batch
//! ```
//!
//! - **`fixed`**: the f32 training weights (4 bytes a parameter), a second copy for sampling
//!   (4 bytes a parameter, the most a decode path holds: f32; the quantised ones hold less),
//!   with full fine-tuning the gradients and AdamW's two moments (12 bytes a parameter), and
//!   [`PROCESS_BYTES`] for the rest of the process.
//! - **`per_token`**, with every layer's activations kept ([`TrainMemory::Kept`]): what
//!   candle's autograd keeps per token until the backward ends, and what the backward
//!   allocates: [`LAYER_FLOATS`] f32 values per layer per unit of `hidden_size +
//!   intermediate_size`, and [`VOCAB_FLOATS`] per vocabulary entry (the logits, their
//!   log-softmax and its gradient). Calibrated on `spade bench-model --update-only` (fused
//!   ops, memory kept by the allocator): SmolLM2-135M's LoRA update added 4.67-4.96 MB per
//!   token at 4 x 128 and 4 x 512; the estimate is 5.35 MB.
//! - **`per_token`, with checkpointed layers** ([`TrainMemory::Checkpointed`]):
//!   one `hidden_size` vector per layer (each layer's input), one layer's activations and
//!   gradients ([`CHECKPOINTED_LAYER_FLOATS`] per unit of `hidden_size + intermediate_size`)
//!   and the head's [`VOCAB_FLOATS`] per vocabulary entry. SmolLM2-135M's LoRA update added
//!   0.73-0.79 MB per token from 4 x 128 to 2 x 2,048 (peaks 1,139 to 3,628 MiB, 0.69 MiB a
//!   token between 512 and 4,096 tokens); the estimate is 0.99 MB.
//!
//! - **`per_token`, with saved layers** ([`TrainMemory::Saved`], the default): what each layer's own
//!   backward reads ([`saved_layer_floats`] per layer: SmolLM2-135M 5,833), one layer's
//!   backward's temporaries ([`SAVED_LAYER_FLOATS`] per unit of `hidden_size +
//!   intermediate_size`) and the head's [`VOCAB_FLOATS`] per vocabulary entry. SmolLM2-135M's
//!   LoRA update added 1.19 MB per token at 4 x 128 and 4 x 512
//!   (`examples/layer_backward_bench.rs`); the estimate is 1.54 MB.
//!
//! All are taken for full fine-tuning too, whose weights' gradients and moments are in
//! `fixed` (it measured less per token: 0.67 MiB with checkpointed layers).
//!
//! The estimate is a pure function of the shape, so every process on every machine with the
//! same budget cuts its micro-batches at the same tokens, and a run's training is the same.

use crate::model::{ModelConfig, TrainMemory};

/// f32 values kept per token per layer, per unit of `hidden_size + intermediate_size`, when
/// every layer's activations are kept.
pub const LAYER_FLOATS: u64 = 18;
/// f32 values per token of the one layer being recomputed, per unit of `hidden_size +
/// intermediate_size`, with checkpointed layers.
pub const CHECKPOINTED_LAYER_FLOATS: u64 = 16;
/// f32 values per token of the one layer whose own backward runs, per unit of
/// `hidden_size + intermediate_size`, with [`TrainMemory::Saved`].
pub const SAVED_LAYER_FLOATS: u64 = 6;
/// f32 values kept per token per vocabulary entry.
pub const VOCAB_FLOATS: u64 = 4;
/// The rest of a training process that the model's shape does not give: the compiled guest,
/// sandboxes, tokenizer, prefix caches, the allocator's slack.
pub const PROCESS_BYTES: u64 = 1 << 30;

/// An update's memory: a fixed part and a part per padded token of a micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateMemory {
    /// Bytes before any token (weights, optimiser state, the process).
    pub fixed: u64,
    /// Bytes per padded token of the largest micro-batch.
    pub per_token: u64,
}

impl UpdateMemory {
    /// The estimate for a model of `cfg`'s shape, training LoRA adapters (`lora`) or every
    /// weight, keeping what `memory` says for the backward (see the module docs).
    pub fn estimate(cfg: &ModelConfig, lora: bool, memory: TrainMemory) -> UpdateMemory {
        let params = parameters(cfg);
        let per_param = if lora { 8 } else { 8 + 12 };
        let layers = cfg.num_hidden_layers as u64;
        let width = (cfg.hidden_size + cfg.intermediate_size) as u64;
        let floats = match memory {
            TrainMemory::Kept => LAYER_FLOATS * layers * width,
            TrainMemory::Checkpointed => {
                layers * cfg.hidden_size as u64 + CHECKPOINTED_LAYER_FLOATS * width
            }
            TrainMemory::Saved => layers * saved_layer_floats(cfg) + SAVED_LAYER_FLOATS * width,
        } + VOCAB_FLOATS * cfg.vocab_size as u64;
        UpdateMemory {
            fixed: params * per_param + PROCESS_BYTES,
            per_token: floats * 4,
        }
    }

    /// The most padded tokens a micro-batch may hold for the update to stay within `budget`
    /// bytes (0 when not even the fixed part fits).
    pub fn tokens_within(&self, budget: u64) -> usize {
        usize::try_from(budget.saturating_sub(self.fixed) / self.per_token.max(1))
            .unwrap_or(usize::MAX)
    }

    /// The estimated peak of an update whose largest micro-batch holds `tokens` padded tokens.
    pub fn bytes_for(&self, tokens: usize) -> u64 {
        self.fixed
            .saturating_add(self.per_token.saturating_mul(tokens as u64))
    }
}

/// f32 values per token and layer that [`TrainMemory::Saved`] keeps: the layer's input and
/// post-attention residual, q, k and v after RoPE, the attention's output and log-sum-exp,
/// gate and up, the adapters' `x Aᵀ` (taken as 64 values: rank 8 on the seven
/// projections), and with q/k norms q and k before them.
pub fn saved_layer_floats(cfg: &ModelConfig) -> u64 {
    let h = cfg.hidden_size as u64;
    let q = (cfg.num_attention_heads * cfg.head_dim()) as u64;
    let kv = (cfg.kv_heads() * cfg.head_dim()) as u64;
    let qk_norm = if cfg.model_type == "qwen3" { q + kv } else { 0 };
    2 * h
        + 2 * q
        + 2 * kv
        + cfg.num_attention_heads as u64
        + 2 * cfg.intermediate_size as u64
        + 64
        + qk_norm
}

/// The decoder's parameters: embedding, LM head unless tied, per layer the attention's four
/// projections (and their biases), the SwiGLU's three and two norms, and the final norm.
pub fn parameters(cfg: &ModelConfig) -> u64 {
    let h = cfg.hidden_size as u64;
    let q = (cfg.num_attention_heads * cfg.head_dim()) as u64;
    let kv = (cfg.kv_heads() * cfg.head_dim()) as u64;
    let i = cfg.intermediate_size as u64;
    let embed = cfg.vocab_size as u64 * h;
    let head = if cfg.tie_word_embeddings { 0 } else { embed };
    let bias = if cfg.attention_bias || cfg.model_type == "qwen2" {
        q + 2 * kv
    } else {
        0
    };
    let layer = h * q + 2 * h * kv + q * h + bias + 3 * h * i + 2 * h;
    embed + head + cfg.num_hidden_layers as u64 * layer + h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smollm2_135m_has_its_published_parameter_count() {
        // Embedding 49,152 x 576 = 28,311,552 (tied head); per layer q and o 576 x 576 each,
        // k and v 576 x 192 each, gate, up and down 576 x 1,536 each, two norms of 576:
        // 331,776 x 2 + 110,592 x 2 + 884,736 x 3 + 1,152 = 3,540,096; 30 layers and the
        // final norm: 134,515,008 ("135M").
        assert_eq!(parameters(&ModelConfig::smollm2_135m()), 134_515_008);
    }

    #[test]
    fn the_estimate_of_smollm2_135m_is_worked_by_hand() {
        let cfg = ModelConfig::smollm2_135m();
        let lora = UpdateMemory::estimate(&cfg, true, TrainMemory::Kept);
        // 18 x 30 x (576 + 1,536) + 4 x 49,152 = 1,140,480 + 196,608 = 1,337,088 floats.
        assert_eq!(lora.per_token, 5_348_352);
        assert_eq!(lora.fixed, 134_515_008 * 8 + (1 << 30));
        let full = UpdateMemory::estimate(&cfg, false, TrainMemory::Kept);
        assert_eq!(full.per_token, lora.per_token);
        assert_eq!(full.fixed, 134_515_008 * 20 + (1 << 30));
        // 18 GiB: (19,327,352,832 - 2,149,861,888) / 5,348,352 = 3,211.7.
        assert_eq!(lora.tokens_within(18 << 30), 3_211);
        assert_eq!(lora.bytes_for(3_211), 2_149_861_888 + 3_211 * 5_348_352);
        assert!(lora.bytes_for(3_212) > 18 << 30);
    }

    #[test]
    fn checkpointed_layers_keep_one_vector_a_layer_and_one_layer() {
        let cfg = ModelConfig::smollm2_135m();
        let ck = UpdateMemory::estimate(&cfg, true, TrainMemory::Checkpointed);
        // 30 x 576 + 16 x (576 + 1,536) + 4 x 49,152 = 17,280 + 33,792 + 196,608 = 247,680.
        assert_eq!(ck.per_token, 990_720);
        assert_eq!(ck.fixed, 134_515_008 * 8 + (1 << 30));
        // 18 GiB: (19,327,352,832 - 2,149,861,888) / 990,720 = 17,338.4.
        assert_eq!(ck.tokens_within(18 << 30), 17_338);
    }

    #[test]
    fn saved_layers_keep_what_each_layers_backward_reads() {
        let cfg = ModelConfig::smollm2_135m();
        // 2 x 576 + 2 x 576 + 2 x 192 + 9 + 2 x 1,536 + 64 = 5,833 a layer.
        assert_eq!(saved_layer_floats(&cfg), 5_833);
        let saved = UpdateMemory::estimate(&cfg, true, TrainMemory::Saved);
        // 30 x 5,833 + 6 x (576 + 1,536) + 4 x 49,152 = 174,990 + 12,672 + 196,608 = 384,270.
        assert_eq!(saved.per_token, 1_537_080);
        assert_eq!(saved.fixed, 134_515_008 * 8 + (1 << 30));
    }

    #[test]
    fn a_budget_below_the_fixed_part_holds_no_token() {
        let m = UpdateMemory {
            fixed: 100,
            per_token: 10,
        };
        assert_eq!(m.tokens_within(99), 0);
        assert_eq!(m.tokens_within(109), 0);
        assert_eq!(m.tokens_within(110), 1);
    }
}
