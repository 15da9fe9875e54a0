//! Helpers shared by the model-layer tests.
use candle_core::{DType, Device, Tensor};
use candle_nn::VarMap;
use rand::{Rng, SeedableRng, rngs::StdRng};
use spade_model::model::{Decoder, ModelConfig};

/// The three families, as `model_type` strings.
pub const FAMILIES: [&str; 3] = ["llama", "qwen2", "qwen3"];

/// A tiny config of `family`; Qwen3 gets an explicit head dim different from hidden/heads.
pub fn tiny(family: &str) -> ModelConfig {
    let mut cfg = ModelConfig::tiny(family);
    if family == "qwen3" {
        cfg.head_dim = Some(16);
    }
    cfg
}

/// A seeded random tiny model in f32.
pub fn model(cfg: &ModelConfig, seed: u64) -> (Decoder, VarMap) {
    Decoder::random(cfg, seed, 0.2, &Device::Cpu).expect("random model")
}

/// Seeded random token ids `(b, t)` below `vocab`.
pub fn ids(b: usize, t: usize, vocab: usize, seed: u64) -> Tensor {
    let mut rng = StdRng::seed_from_u64(seed);
    let v: Vec<u32> = (0..b * t)
        .map(|_| rng.random_range(0..vocab as u32))
        .collect();
    Tensor::from_vec(v, (b, t), &Device::Cpu).unwrap()
}

/// Largest absolute value of a tensor.
pub fn max_abs(t: &Tensor) -> f32 {
    t.to_dtype(DType::F32)
        .unwrap()
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// Largest absolute difference between two tensors.
pub fn max_diff(a: &Tensor, b: &Tensor) -> f32 {
    (a.to_dtype(DType::F32).unwrap() - b.to_dtype(DType::F32).unwrap())
        .unwrap()
        .abs()
        .unwrap()
        .flatten_all()
        .unwrap()
        .max(0)
        .unwrap()
        .to_scalar::<f32>()
        .unwrap()
}

/// A tiny byte-level BPE vocabulary: three special tokens, the 256 byte symbols, and a few
/// merges. Returns (tokens, merges, token types as in GGUF: 3 = control, 1 = normal).
pub fn tiny_vocab() -> (Vec<String>, Vec<String>, Vec<i32>) {
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .map(String::from)
        .to_vec();
    let mut bytes: Vec<char> = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet()
        .into_iter()
        .collect();
    bytes.sort();
    tokens.extend(bytes.iter().map(|c| c.to_string()));
    let merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ w"]
        .map(String::from)
        .to_vec();
    for m in &merges {
        tokens.push(m.replace(' ', ""));
    }
    let types = tokens
        .iter()
        .enumerate()
        .map(|(i, _)| if i < 3 { 3 } else { 1 })
        .collect();
    (tokens, merges, types)
}

/// The tokenizer of [`tiny_vocab`], built directly with `tokenizers`.
pub fn tiny_tokenizer() -> tokenizers::Tokenizer {
    let (tokens, merges, _) = tiny_vocab();
    let merges = merges
        .iter()
        .map(|m| {
            let (a, b) = m.split_once(' ').unwrap();
            (a.to_string(), b.to_string())
        })
        .collect();
    crate::common::byte_level_tokenizer(&tokens, merges)
}

/// A tiny llama config whose vocabulary matches [`tiny_vocab`].
pub fn tiny_llama_with_vocab() -> ModelConfig {
    let mut cfg = ModelConfig::tiny("llama");
    cfg.vocab_size = tiny_vocab().0.len();
    cfg.eos_token_id = Some(spade_model::model::config::TokenIds::One(2));
    cfg
}
