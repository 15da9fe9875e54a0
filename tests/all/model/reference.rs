//! Inference logits against candle-transformers' own models on the same weights.
use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::{llama, qwen2, qwen3};
use spade_model::model::ModelConfig;

use super::common::{ids, max_diff, model, tiny};

/// Our logits for the prompt's last position, then for one decode step.
fn ours(
    cfg: &ModelConfig,
    seed: u64,
    prompt: &Tensor,
    next: &Tensor,
) -> (
    spade_model::model::Decoder,
    candle_nn::VarMap,
    Tensor,
    Tensor,
) {
    let (m, vm) = model(cfg, seed);
    let mut cache = m.new_cache();
    let a = m.forward(prompt, &mut cache).unwrap();
    let b = m.forward(next, &mut cache).unwrap();
    (m, vm, a, b)
}

/// `cfg` as the config candle-transformers' models read (their required fields filled in).
pub(super) fn candle_transformers_config(cfg: &ModelConfig) -> serde_json::Value {
    let mut v = serde_json::to_value(cfg).unwrap();
    let o = v.as_object_mut().unwrap();
    o.insert("num_key_value_heads".into(), cfg.kv_heads().into());
    o.insert("head_dim".into(), cfg.head_dim().into());
    o.insert("sliding_window".into(), 4096.into());
    o.insert("max_window_layers".into(), 0.into());
    o.insert("use_sliding_window".into(), false.into());
    o.insert("hidden_act".into(), "silu".into());
    v
}

#[test]
fn llama_matches_candle_transformers() {
    let cfg = tiny("llama");
    let (prompt, next) = (ids(1, 7, cfg.vocab_size, 1), ids(1, 1, cfg.vocab_size, 2));
    let (_m, vm, a, b) = ours(&cfg, 21, &prompt, &next);
    let lc: llama::LlamaConfig = serde_json::from_value(candle_transformers_config(&cfg)).unwrap();
    let lc = lc.into_config(false);
    let vb = VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu);
    let reference = llama::Llama::load(vb, &lc).unwrap();
    let mut cache = llama::Cache::new(true, DType::F32, &lc, &Device::Cpu).unwrap();
    let ra = reference.forward(&prompt, 0, &mut cache).unwrap();
    let rb = reference.forward(&next, 7, &mut cache).unwrap();
    assert!(max_diff(&a, &ra) < 1e-4, "prefill {}", max_diff(&a, &ra));
    assert!(max_diff(&b, &rb) < 1e-4, "decode {}", max_diff(&b, &rb));
}

#[test]
fn qwen2_matches_candle_transformers() {
    let cfg = tiny("qwen2");
    let (prompt, next) = (ids(1, 7, cfg.vocab_size, 3), ids(1, 1, cfg.vocab_size, 4));
    let (_m, vm, a, b) = ours(&cfg, 22, &prompt, &next);
    let qc: qwen2::Config = serde_json::from_value(candle_transformers_config(&cfg)).unwrap();
    let vb = VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu);
    let mut reference = qwen2::ModelForCausalLM::new(&qc, vb).unwrap();
    let ra = reference
        .forward(&prompt, 0)
        .unwrap()
        .i((.., 0, ..))
        .unwrap();
    let rb = reference.forward(&next, 7).unwrap().i((.., 0, ..)).unwrap();
    assert!(max_diff(&a, &ra) < 1e-4, "prefill {}", max_diff(&a, &ra));
    assert!(max_diff(&b, &rb) < 1e-4, "decode {}", max_diff(&b, &rb));
}

#[test]
fn qwen3_matches_candle_transformers() {
    let cfg = tiny("qwen3");
    let (prompt, next) = (ids(1, 7, cfg.vocab_size, 5), ids(1, 1, cfg.vocab_size, 6));
    let (_m, vm, a, b) = ours(&cfg, 23, &prompt, &next);
    let qc: qwen3::Config = serde_json::from_value(candle_transformers_config(&cfg)).unwrap();
    let vb = VarBuilder::from_varmap(&vm, DType::F32, &Device::Cpu);
    let mut reference = qwen3::ModelForCausalLM::new(&qc, vb).unwrap();
    let ra = reference
        .forward(&prompt, 0)
        .unwrap()
        .i((.., 0, ..))
        .unwrap();
    let rb = reference.forward(&next, 7).unwrap().i((.., 0, ..)).unwrap();
    assert!(max_diff(&a, &ra) < 1e-4, "prefill {}", max_diff(&a, &ra));
    assert!(max_diff(&b, &rb) < 1e-4, "decode {}", max_diff(&b, &rb));
}
