//! Loading a GGUF file of a llama, qwen2 or qwen3 model: metadata to [`ModelConfig`], tensors
//! dequantised to f32 (a llama file's q/k rows un-permuted back to the HF rotate-half layout:
//! llama.cpp permutes them for llama only); the file's `Q8_0`/`Q4_1` blocks are kept beside them
//! for the quantised decode path ([`Decoder::set_native_blocks`]).
use std::collections::HashMap;
use std::fs::File;
use std::io::BufReader;
use std::path::Path;

use candle_core::quantized::GgmlDType;
use candle_core::quantized::gguf_file::{Content, Value};
use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};

use super::{LoadedModel, gguf_tokenizer, weights};
use crate::chat::ChatTemplate;
use crate::error::{ModelError, Result};
use crate::model::config::TokenIds;
use crate::model::quant::QuantWeight;
use crate::model::{Decoder, ModelConfig};

/// Quantisation types the loader dequantises.
const SUPPORTED: [GgmlDType; 11] = [
    GgmlDType::F32,
    GgmlDType::F16,
    GgmlDType::BF16,
    GgmlDType::Q4_0,
    GgmlDType::Q4_1,
    GgmlDType::Q5_0,
    GgmlDType::Q5_1,
    GgmlDType::Q8_0,
    GgmlDType::Q4K,
    GgmlDType::Q5K,
    GgmlDType::Q6K,
];

/// GGUF metadata lookups with errors that name the key.
pub struct Meta<'a>(pub &'a Content);

impl Meta<'_> {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Result<&Value> {
        self.0
            .metadata
            .get(key)
            .ok_or_else(|| ModelError::InvalidMetadata(format!("GGUF metadata lacks `{key}`")))
    }

    fn bad(key: &str, e: candle_core::Error) -> ModelError {
        ModelError::InvalidMetadata(format!("GGUF metadata `{key}`: {e}"))
    }

    /// An unsigned integer value.
    pub fn usize(&self, key: &str) -> Result<usize> {
        let v = self.get(key)?;
        v.to_u64()
            .or_else(|_| v.to_u32().map(u64::from))
            .or_else(|_| v.to_i32().map(|x| x.max(0) as u64))
            .map(|x| x as usize)
            .map_err(|e| Self::bad(key, e))
    }

    /// A float value, or `default` when absent.
    pub fn f64_or(&self, key: &str, default: f64) -> Result<f64> {
        match self.0.metadata.get(key) {
            None => Ok(default),
            Some(v) => v
                .to_f32()
                .map(f64::from)
                .or_else(|_| v.to_f64())
                .map_err(|e| Self::bad(key, e)),
        }
    }

    /// A string value.
    pub fn string(&self, key: &str) -> Result<&str> {
        self.get(key)?
            .to_string()
            .map(String::as_str)
            .map_err(|e| Self::bad(key, e))
    }

    /// A token id, if present.
    pub fn opt_u32(&self, key: &str) -> Option<u32> {
        let v = self.0.metadata.get(key)?;
        v.to_u32()
            .ok()
            .or_else(|| v.to_u64().ok().map(|x| x as u32))
    }
}

/// The architectures whose GGUF files load (`general.architecture`).
pub const ARCHITECTURES: [&str; 3] = ["llama", "qwen2", "qwen3"];

/// The GGUF tensor name of an HF tensor name (llama.cpp's names for llama, qwen2 and qwen3).
pub fn gguf_name(hf: &str) -> Option<String> {
    let fixed = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        _ => None,
    };
    if let Some(f) = fixed {
        return Some(f.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, leaf) = rest.split_once('.')?;
    let leaf = match leaf {
        "self_attn.q_proj.weight" => "attn_q.weight",
        "self_attn.k_proj.weight" => "attn_k.weight",
        "self_attn.v_proj.weight" => "attn_v.weight",
        "self_attn.o_proj.weight" => "attn_output.weight",
        "self_attn.q_proj.bias" => "attn_q.bias",
        "self_attn.k_proj.bias" => "attn_k.bias",
        "self_attn.v_proj.bias" => "attn_v.bias",
        "self_attn.o_proj.bias" => "attn_output.bias",
        "self_attn.q_norm.weight" => "attn_q_norm.weight",
        "self_attn.k_norm.weight" => "attn_k_norm.weight",
        "input_layernorm.weight" => "attn_norm.weight",
        "post_attention_layernorm.weight" => "ffn_norm.weight",
        "mlp.gate_proj.weight" => "ffn_gate.weight",
        "mlp.up_proj.weight" => "ffn_up.weight",
        "mlp.down_proj.weight" => "ffn_down.weight",
        _ => return None,
    };
    Some(format!("blk.{layer}.{leaf}"))
}

/// llama.cpp's conversion permutes q/k rows from rotate-half to interleaved pairs per head;
/// `permute` redoes that (for writing files), [`unpermute`] undoes it.
pub fn permute(w: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let (rows, cols) = w.dims2()?;
    w.reshape((heads, 2, rows / heads / 2, cols))?
        .transpose(1, 2)?
        .reshape((rows, cols))
}

/// Inverse of [`permute`].
pub fn unpermute(w: &Tensor, heads: usize) -> candle_core::Result<Tensor> {
    let (rows, cols) = w.dims2()?;
    w.reshape((heads, rows / heads / 2, 2, cols))?
        .transpose(1, 2)?
        .reshape((rows, cols))
}

fn config_from_meta(meta: &Meta, has_output: bool, vocab: usize) -> Result<ModelConfig> {
    let arch = meta.string("general.architecture")?;
    if !ARCHITECTURES.contains(&arch) {
        return Err(ModelError::UnsupportedArchitecture(arch.to_string()));
    }
    // Keys are prefixed with the architecture's name (`qwen3.block_count`, ...).
    let k = |s: &str| format!("{arch}.{s}");
    let heads = meta.usize(&k("attention.head_count"))?;
    let hidden = meta.usize(&k("embedding_length"))?;
    // The per-head width: `attention.key_length` (qwen3 writes it; its heads are not
    // hidden / heads wide), else the rotary width.
    let head_dim = ["attention.key_length", "rope.dimension_count"]
        .into_iter()
        .find(|key| meta.0.metadata.contains_key(&k(key)))
        .map(|key| meta.usize(&k(key)))
        .transpose()?;
    let cfg = ModelConfig {
        model_type: arch.into(),
        vocab_size: vocab,
        hidden_size: hidden,
        intermediate_size: meta.usize(&k("feed_forward_length"))?,
        num_hidden_layers: meta.usize(&k("block_count"))?,
        num_attention_heads: heads,
        num_key_value_heads: match meta.0.metadata.get(&k("attention.head_count_kv")) {
            Some(_) => Some(meta.usize(&k("attention.head_count_kv"))?),
            None => None,
        },
        head_dim: head_dim.filter(|&d| d != hidden / heads.max(1)),
        rms_norm_eps: meta.f64_or(&k("attention.layer_norm_rms_epsilon"), 1e-5)?,
        rope_theta: meta.f64_or(&k("rope.freq_base"), 10_000.0)?,
        max_position_embeddings: meta.usize(&k("context_length")).unwrap_or(4096),
        tie_word_embeddings: !has_output,
        attention_bias: false,
        bos_token_id: meta.opt_u32("tokenizer.ggml.bos_token_id"),
        eos_token_id: meta
            .opt_u32("tokenizer.ggml.eos_token_id")
            .map(TokenIds::One),
        rope_scaling: None,
    };
    cfg.validate()?;
    Ok(cfg)
}

/// Reads the GGUF header, turning candle's "unknown dtype" into a typed error.
fn read_content(path: &Path, reader: &mut BufReader<File>) -> Result<Content> {
    Content::read(reader).map_err(|e| {
        let msg = e.to_string();
        if msg.contains("unknown dtype") {
            ModelError::UnsupportedQuantization {
                tensor: "(header)".into(),
                dtype: msg,
            }
        } else {
            ModelError::InvalidMetadata(format!("{}: {msg}", path.display()))
        }
    })
}

/// Loads a llama, qwen2 or qwen3 GGUF file in f32, with its tokenizer and chat template.
pub fn load_gguf(path: &Path, device: &Device) -> Result<LoadedModel> {
    let file = File::open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ModelError::MissingFile {
            path: path.to_path_buf(),
        },
        _ => ModelError::io(format!("opening {}", path.display()), e),
    })?;
    let mut reader = BufReader::new(file);
    let content = read_content(path, &mut reader)?;
    let meta = Meta(&content);
    let tokenizer = gguf_tokenizer::tokenizer_from_gguf(&meta)?;
    let has_output = content.tensor_infos.contains_key("output.weight");
    let config = config_from_meta(&meta, has_output, tokenizer.get_vocab_size(true))?;
    for (name, info) in &content.tensor_infos {
        if !SUPPORTED.contains(&info.ggml_dtype) {
            return Err(ModelError::UnsupportedQuantization {
                tensor: name.clone(),
                dtype: format!("{:?}", info.ggml_dtype),
            });
        }
    }
    let chat_src = meta
        .0
        .metadata
        .get("tokenizer.chat_template")
        .and_then(|v| v.to_string().ok());
    let chat = ChatTemplate::from_jinja(chat_src.map(String::as_str))?;
    let varmap = VarMap::new();
    let mut model = Decoder::new(
        &config,
        VarBuilder::from_varmap(&varmap, DType::F32, device),
    )?;
    let (heads, kv_heads) = (config.num_attention_heads, config.kv_heads());
    // llama.cpp's converter permutes q/k rows for llama only; qwen2/qwen3 keep HF's layout.
    let permuted = config.model_type == "llama";
    // The file's own blocks of each 2-D weight, kept for the quantised decode path.
    let mut blocks: HashMap<String, QuantWeight> = HashMap::new();
    weights::assign(&varmap, |hf| {
        let Some(name) = gguf_name(hf) else {
            return Ok(None);
        };
        if !content.tensor_infos.contains_key(&name) {
            return Ok(None);
        }
        let q = content.tensor(&mut reader, &name, device)?;
        let t = q.dequantize(device)?;
        let heads = if !permuted {
            None
        } else if name.ends_with("attn_q.weight") {
            Some(heads)
        } else if name.ends_with("attn_k.weight") {
            Some(kv_heads)
        } else {
            None
        };
        let t = match heads {
            Some(h) => unpermute(&t, h)?,
            None => t,
        };
        if q.shape().rank() == 2
            && let Some(b) = QuantWeight::from_qtensor(&q)?
        {
            let b = match heads {
                Some(h) => b.unpermute_rows(h)?,
                None => b,
            };
            blocks.insert(hf.to_string(), b);
        }
        Ok(Some(t))
    })
    .map_err(|e| match e {
        ModelError::MissingTensor(hf) => {
            ModelError::MissingTensor(gguf_name(&hf).map_or(hf.clone(), |g| format!("{g} ({hf})")))
        }
        ModelError::ShapeMismatch {
            tensor,
            expected,
            found,
        } => ModelError::ShapeMismatch {
            tensor: gguf_name(&tensor).map_or(tensor.clone(), |g| format!("{g} ({tensor})")),
            expected,
            found,
        },
        other => other,
    })?;
    model.set_native_blocks(|hf| blocks.remove(hf))?;
    let eos_ids = config.eos_ids();
    Ok(LoadedModel::new(
        config, model, varmap, tokenizer, chat, eos_ids,
    ))
}
