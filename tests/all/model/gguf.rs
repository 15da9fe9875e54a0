//! GGUF loading: tiny llama, qwen2 and qwen3 GGUF files written in the test (Q4_1, Q8_0 and F32
//! tensors, tokenizer metadata), and the named errors for broken files.
use std::path::Path;

use candle_core::quantized::gguf_file::{self, Value};
use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::{Device, Tensor};
use spade_model::ModelError;
use spade_model::load::{
    self,
    gguf::{gguf_name, permute},
};
use spade_model::model::{Decoder, ModelConfig};

use super::common::{ids, max_diff, tiny_llama_with_vocab, tiny_vocab};
use super::reference::candle_transformers_config;

const TEMPLATE: &str = "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a tiny test model<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}";

/// Quantisation used for each GGUF tensor of the test file (vectors stay F32: biases and
/// norms are shorter than a block).
fn dtype_for(name: &str, rank: usize) -> GgmlDType {
    if rank < 2 || name.contains("norm") {
        GgmlDType::F32
    } else if name.contains("attn_k") || name.contains("ffn_up") || name.contains("attn_output") {
        GgmlDType::Q4_1
    } else if name.contains("token_embd") || name.contains("ffn_down") || name.contains("attn_v") {
        GgmlDType::Q8_0
    } else {
        GgmlDType::F32
    }
}

pub(super) struct Spec<'a> {
    arch: &'a str,
    ffn_len: usize,
    extra: Option<(&'a str, GgmlDType)>,
}

pub(super) const OK: Spec = Spec {
    arch: "llama",
    ffn_len: 64,
    extra: None,
};

/// Writes `model` as a GGUF of `spec.arch` at `path` (llama.cpp's layout: metadata keys under
/// the architecture's name, q/k rows permuted for llama only, Qwen's pre-tokenizer for qwen2
/// and qwen3); returns the dequantised HF tensors it holds.
pub(super) fn write_gguf(
    path: &Path,
    model_vm: &candle_nn::VarMap,
    cfg: &ModelConfig,
    spec: Spec,
) -> Vec<(String, Tensor)> {
    let (tokens, merges, types) = tiny_vocab();
    let s = |x: &str| Value::String(x.to_string());
    let u = |x: usize| Value::U32(x as u32);
    let key = |k: &str| format!("{}.{k}", spec.arch);
    let qwen = spec.arch.starts_with("qwen");
    let mut metadata: Vec<(String, Value)> = vec![
        ("general.architecture".into(), s(spec.arch)),
        (key("context_length"), u(cfg.max_position_embeddings)),
        (key("embedding_length"), u(cfg.hidden_size)),
        (key("block_count"), u(cfg.num_hidden_layers)),
        (key("feed_forward_length"), u(spec.ffn_len)),
        (key("attention.head_count"), u(cfg.num_attention_heads)),
        (key("attention.head_count_kv"), u(cfg.kv_heads())),
        (key("rope.freq_base"), Value::F32(cfg.rope_theta as f32)),
        (
            key("attention.layer_norm_rms_epsilon"),
            Value::F32(cfg.rms_norm_eps as f32),
        ),
        ("tokenizer.ggml.model".into(), s("gpt2")),
        (
            "tokenizer.ggml.pre".into(),
            s(if qwen { "qwen2" } else { "smollm" }),
        ),
        (
            "tokenizer.ggml.tokens".into(),
            Value::Array(tokens.iter().map(|t| s(t)).collect()),
        ),
        (
            "tokenizer.ggml.merges".into(),
            Value::Array(merges.iter().map(|t| s(t)).collect()),
        ),
        (
            "tokenizer.ggml.token_type".into(),
            Value::Array(types.iter().map(|&t| Value::I32(t)).collect()),
        ),
        ("tokenizer.ggml.bos_token_id".into(), Value::U32(1)),
        ("tokenizer.ggml.eos_token_id".into(), Value::U32(2)),
        ("tokenizer.chat_template".into(), s(TEMPLATE)),
    ];
    if cfg.head_dim.is_some() {
        // llama.cpp writes the head width of qwen3 (and any model whose heads are not
        // hidden / heads wide) as the key length.
        metadata.push((key("attention.key_length"), u(cfg.head_dim())));
    }
    let data = model_vm.data().lock().unwrap();
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    let mut qtensors = Vec::new();
    let mut expected = Vec::new();
    for hf in names {
        let g = gguf_name(hf).unwrap();
        let w = data[hf].as_tensor().clone();
        let dtype = dtype_for(&g, w.rank());
        let stored = if qwen || w.rank() < 2 {
            w.clone()
        } else if g.contains("attn_q") {
            permute(&w, cfg.num_attention_heads).unwrap()
        } else if g.contains("attn_k") {
            permute(&w, cfg.kv_heads()).unwrap()
        } else {
            w.clone()
        };
        let q = QTensor::quantize(&stored, dtype).unwrap();
        // Q4/Q8 blocks run along rows, so quantising permuted rows equals permuting quantised rows.
        let deq = QTensor::quantize(&w, dtype)
            .unwrap()
            .dequantize(&Device::Cpu)
            .unwrap();
        expected.push((hf.clone(), deq));
        qtensors.push((g, q));
    }
    if let Some((name, dtype)) = spec.extra {
        let t = Tensor::ones((1, 256), candle_core::DType::F32, &Device::Cpu).unwrap();
        qtensors.push((name.to_string(), QTensor::quantize(&t, dtype).unwrap()));
    }
    let meta_refs: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> =
        qtensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    let mut file = std::fs::File::create(path).unwrap();
    gguf_file::write(&mut file, &meta_refs, &tensor_refs).unwrap();
    expected
}

pub(super) fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-gguf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn quantised_llama_gguf_loads_with_tokenizer() {
    let cfg = tiny_llama_with_vocab();
    let (_m, vm) = Decoder::random(&cfg, 5, 0.2, &Device::Cpu).unwrap();
    let path = tmp("ok.gguf");
    let expected = write_gguf(&path, &vm, &cfg, OK);
    let loaded = load::load(&path, &Device::Cpu).unwrap();
    assert_eq!(loaded.config.vocab_size, cfg.vocab_size);
    assert!(loaded.config.tie_word_embeddings);
    let data = loaded.varmap.data().lock().unwrap();
    for (name, want) in &expected {
        let got = data[name].as_tensor();
        let d = max_diff(got, want);
        assert!(d < 1e-6, "{name} differs by {d}");
    }
    // F32 q_proj survives the permutation round trip bit for bit.
    let q = "model.layers.0.self_attn.q_proj.weight";
    let orig = vm.data().lock().unwrap()[q].as_tensor().clone();
    assert_eq!(max_diff(data[q].as_tensor(), &orig), 0.0);
    drop(data);
    // Logits equal a model holding the same dequantised weights.
    let reference = candle_nn::VarMap::new();
    let rmodel = Decoder::new(
        &cfg,
        candle_nn::VarBuilder::from_varmap(&reference, candle_core::DType::F32, &Device::Cpu),
    )
    .unwrap();
    let mut map: std::collections::HashMap<String, Tensor> = expected.into_iter().collect();
    load::weights::assign(&reference, |n| Ok(map.remove(n))).unwrap();
    let x = ids(1, 8, cfg.vocab_size, 3);
    assert!(
        max_diff(
            &loaded.model.forward_train(&x).unwrap(),
            &rmodel.forward_train(&x).unwrap()
        ) < 1e-4
    );
    // Tokenizer: special tokens are single ids and text round-trips.
    let text = "<|im_start|>user\nthe winter in the north<|im_end|>\n";
    let enc = loaded.tokenizer.encode(text, false).unwrap();
    assert_eq!(enc.get_ids()[0], 1);
    assert_eq!(loaded.tokenizer.decode(enc.get_ids(), false).unwrap(), text);
    assert!(enc.get_tokens().contains(&"Ġthe".to_string()));
    assert_eq!(loaded.eos_ids, vec![2]);
    let spade_model::chat::ChatTemplate::ChatMl { default_system } = &loaded.chat;
    assert_eq!(default_system.as_deref(), Some("You are a tiny test model"));
}

#[test]
fn shape_mismatch_names_the_tensor() {
    let cfg = tiny_llama_with_vocab();
    let (_m, vm) = Decoder::random(&cfg, 5, 0.2, &Device::Cpu).unwrap();
    let path = tmp("mismatch.gguf");
    write_gguf(&path, &vm, &cfg, Spec { ffn_len: 96, ..OK });
    let err = load::load(&path, &Device::Cpu).unwrap_err();
    assert!(matches!(err, ModelError::ShapeMismatch { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("blk.0.ffn_down.weight (model.layers.0.mlp.down_proj.weight)"),
        "{msg}"
    );
    assert!(
        msg.contains("[32, 96]") && msg.contains("[32, 64]"),
        "{msg}"
    );
}

#[test]
fn unsupported_architecture_and_quantisation_are_named() {
    let cfg = tiny_llama_with_vocab();
    let (_m, vm) = Decoder::random(&cfg, 5, 0.2, &Device::Cpu).unwrap();
    let path = tmp("arch.gguf");
    write_gguf(&path, &vm, &cfg, Spec { arch: "gpt2", ..OK });
    let msg = load::load(&path, &Device::Cpu).unwrap_err().to_string();
    assert_eq!(
        msg,
        "unsupported architecture `gpt2` (supported: llama, qwen2, qwen3)"
    );
    let path = tmp("quant.gguf");
    write_gguf(
        &path,
        &vm,
        &cfg,
        Spec {
            extra: Some(("extra.weight", GgmlDType::Q8K)),
            ..OK
        },
    );
    let msg = load::load(&path, &Device::Cpu).unwrap_err().to_string();
    assert_eq!(
        msg,
        "tensor `extra.weight` uses unsupported quantisation type Q8K"
    );
}

#[test]
fn missing_and_corrupt_files_give_clear_errors() {
    let missing = tmp("nope.gguf");
    let msg = load::load(&missing, &Device::Cpu).unwrap_err().to_string();
    assert_eq!(msg, format!("missing file: {}", missing.display()));
    let junk = tmp("junk.gguf");
    std::fs::write(&junk, b"not a gguf file at all").unwrap();
    let msg = load::load(&junk, &Device::Cpu).unwrap_err().to_string();
    assert!(msg.starts_with("invalid model metadata:"), "{msg}");
    let dir = tmp("hfdir");
    std::fs::create_dir_all(&dir).unwrap();
    let msg = load::load(&dir, &Device::Cpu).unwrap_err().to_string();
    assert_eq!(
        msg,
        format!("missing file: {}", dir.join("config.json").display())
    );
}

/// A tiny random model of `arch` with the test vocabulary, written as GGUF, loads with its
/// config, weights and tokenizer; its logits equal (1) a model holding the same weights, (2) the
/// same weights loaded from a safetensors directory, and (3) candle-transformers' own model of
/// the architecture on them.
fn qwen_gguf_loads_and_matches(arch: &str) {
    use candle_core::IndexOp;
    use candle_transformers::models::{qwen2, qwen3};

    let mut cfg = ModelConfig::tiny(arch);
    cfg.vocab_size = tiny_vocab().0.len();
    if arch == "qwen3" {
        // Qwen3's heads are wider than hidden / heads: the file says so with its key length.
        cfg.head_dim = Some(16);
    }
    let (_m, vm) = Decoder::random(&cfg, 9, 0.2, &Device::Cpu).unwrap();
    let path = tmp(&format!("{arch}.gguf"));
    let expected = write_gguf(
        &path,
        &vm,
        &cfg,
        Spec {
            arch,
            ffn_len: cfg.intermediate_size,
            extra: None,
        },
    );
    let loaded = load::load(&path, &Device::Cpu).unwrap();
    assert_eq!(loaded.config.model_type, arch);
    assert_eq!(loaded.config.head_dim(), cfg.head_dim());
    assert_eq!(loaded.config.kv_heads(), cfg.kv_heads());
    assert_eq!(loaded.config.tie_word_embeddings, cfg.tie_word_embeddings);
    assert_eq!(loaded.config.qkv_bias(), arch == "qwen2");
    {
        let data = loaded.varmap.data().lock().unwrap();
        assert_eq!(
            data.len(),
            expected.len(),
            "every tensor of the model is in the file"
        );
        for (name, want) in &expected {
            let d = max_diff(data[name].as_tensor(), want);
            assert!(d < 1e-6, "{name} differs by {d}");
        }
    }
    let x = ids(1, 8, cfg.vocab_size, 4);
    let logits = loaded.model.forward_train(&x).unwrap();

    // (1) The same dequantised weights in a fresh model.
    let reference = candle_nn::VarMap::new();
    let rmodel = Decoder::new(
        &cfg,
        candle_nn::VarBuilder::from_varmap(&reference, candle_core::DType::F32, &Device::Cpu),
    )
    .unwrap();
    let mut map: std::collections::HashMap<String, Tensor> = expected.into_iter().collect();
    load::weights::assign(&reference, |n| Ok(map.remove(n))).unwrap();
    let d = max_diff(&logits, &rmodel.forward_train(&x).unwrap());
    assert!(d < 1e-5, "{arch}: GGUF against the same weights: {d}");

    // (2) The same weights as a Hugging Face directory (config.json, safetensors, tokenizer).
    let dir = tmp(&format!("{arch}-hf"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.json"),
        serde_json::to_string(&loaded.config).unwrap(),
    )
    .unwrap();
    loaded.varmap.save(dir.join("model.safetensors")).unwrap();
    loaded
        .tokenizer
        .save(dir.join("tokenizer.json"), false)
        .unwrap();
    let hf = load::load(&dir, &Device::Cpu).unwrap();
    assert_eq!(hf.config, loaded.config);
    let d = max_diff(&logits, &hf.model.forward_train(&x).unwrap());
    assert!(d < 1e-6, "{arch}: GGUF against safetensors: {d}");

    // (3) candle-transformers' model of the architecture, last position's logits.
    let vb =
        candle_nn::VarBuilder::from_varmap(&loaded.varmap, candle_core::DType::F32, &Device::Cpu);
    let config = candle_transformers_config(&loaded.config);
    let theirs = match arch {
        "qwen2" => {
            let qc: qwen2::Config = serde_json::from_value(config).unwrap();
            let mut m = qwen2::ModelForCausalLM::new(&qc, vb).unwrap();
            m.forward(&x, 0).unwrap()
        }
        _ => {
            let qc: qwen3::Config = serde_json::from_value(config).unwrap();
            let mut m = qwen3::ModelForCausalLM::new(&qc, vb).unwrap();
            m.forward(&x, 0).unwrap()
        }
    };
    let ours = logits.i((.., 7, ..)).unwrap();
    let d = max_diff(&ours, &theirs.i((.., 0, ..)).unwrap());
    assert!(d < 1e-4, "{arch}: against candle-transformers: {d}");

    // Qwen's pre-tokenizer (its regex, then bytes): a letter run keeps one leading non-letter,
    // digits split one by one, contractions apart; and text round-trips.
    use tokenizers::PreTokenizer as _;
    let mut pieces = tokenizers::PreTokenizedString::from("(the 2024 it's");
    loaded
        .tokenizer
        .get_pre_tokenizer()
        .unwrap()
        .pre_tokenize(&mut pieces)
        .unwrap();
    let pieces: Vec<String> = pieces
        .get_splits(
            tokenizers::OffsetReferential::Original,
            tokenizers::OffsetType::Char,
        )
        .into_iter()
        .map(|(s, _, _)| s.to_owned())
        .collect();
    assert_eq!(
        pieces,
        ["(the", "\u{120}", "2", "0", "2", "4", "\u{120}it", "'s"]
    );
    let text = "<|im_start|>user\nsay the 2024 winter<|im_end|>\n";
    let enc = loaded.tokenizer.encode(text, false).unwrap();
    let tokens = enc.get_tokens();
    assert!(tokens.contains(&"\u{120}the".to_string()), "{tokens:?}");
    let digits: Vec<&str> = tokens
        .iter()
        .map(String::as_str)
        .filter(|t| t.chars().all(|c| c.is_ascii_digit()))
        .collect();
    assert_eq!(digits, ["2", "0", "2", "4"], "{tokens:?}");
    assert_eq!(loaded.tokenizer.decode(enc.get_ids(), false).unwrap(), text);
}

#[test]
fn qwen2_gguf_loads_and_matches_safetensors_and_candle_transformers() {
    qwen_gguf_loads_and_matches("qwen2");
}

#[test]
fn qwen3_gguf_loads_and_matches_safetensors_and_candle_transformers() {
    qwen_gguf_loads_and_matches("qwen3");
}
