//! LoRA adapters as llama.cpp's GGUF adapter files (what its `convert_lora_to_gguf.py` writes
//! from a PEFT adapter), so that llama.cpp's server samples with adapters spade trained.
//!
//! The file holds `general.type = adapter`, `adapter.type = lora`, `adapter.lora.alpha` and
//! the base's `general.architecture`; each adapted weight `blk.N.attn_q.weight` gets
//! `blk.N.attn_q.weight.lora_a` (PEFT's `lora_A`, `(r, in)`) and `.lora_b` (`lora_B`,
//! `(out, r)`), in f32. llama.cpp scales the product by `alpha / r`, as PEFT does. For a
//! `llama` base, llama.cpp's converter permutes q/k rows; an adapter's rows are `lora_B`'s, so
//! `lora_B` of `q_proj`/`k_proj` is permuted the same way and `lora_A` is left alone.
use std::path::Path;

use candle_core::quantized::{GgmlDType, QTensor, gguf_file};
use candle_nn::VarMap;

use crate::error::{ModelError, Result};
use crate::load::gguf::{gguf_name, permute};
use crate::model::LoraConfig;
use crate::model::config::ModelConfig;

/// The GGUF name of an adapter variable (`model.layers.0.self_attn.q_proj.lora_A.weight` ->
/// `blk.0.attn_q.weight.lora_a`), and whether it is a `lora_B`.
fn adapter_name(var: &str) -> Option<(String, bool)> {
    let (base, is_b) = if let Some(b) = var.strip_suffix(".lora_A.weight") {
        (b, false)
    } else {
        (var.strip_suffix(".lora_B.weight")?, true)
    };
    let weight = gguf_name(&format!("{base}.weight"))?;
    let suffix = if is_b { "lora_b" } else { "lora_a" };
    Some((format!("{weight}.{suffix}"), is_b))
}

/// Writes `adapters` (attached with `cfg` to a model of `config`) as a llama.cpp GGUF LoRA
/// adapter at `path`, through a temporary file renamed into place (a reader never sees half a
/// file).
pub fn save_gguf_lora(
    path: &Path,
    config: &ModelConfig,
    cfg: &LoraConfig,
    adapters: &VarMap,
) -> Result<()> {
    let permuted = config.model_type == "llama";
    let mut tensors: Vec<(String, QTensor)> = Vec::new();
    {
        let data = adapters
            .data()
            .lock()
            .map_err(|_| ModelError::InvalidParameter("the adapters' lock is poisoned".into()))?;
        let mut names: Vec<&String> = data.keys().collect();
        names.sort();
        for var in names {
            let (name, is_b) = adapter_name(var).ok_or_else(|| {
                ModelError::InvalidParameter(format!(
                    "adapter variable {var} has no llama.cpp tensor name"
                ))
            })?;
            let mut t = data[var].as_tensor().clone();
            if permuted && is_b {
                if var.contains(".q_proj.") {
                    t = permute(&t, config.num_attention_heads)?;
                } else if var.contains(".k_proj.") {
                    t = permute(&t, config.kv_heads())?;
                }
            }
            tensors.push((name, QTensor::quantize(&t, GgmlDType::F32)?));
        }
    }
    use gguf_file::Value;
    let metadata: Vec<(&str, Value)> = vec![
        (
            "general.architecture",
            Value::String(config.model_type.clone()),
        ),
        ("general.type", Value::String("adapter".into())),
        ("adapter.type", Value::String("lora".into())),
        ("adapter.lora.alpha", Value::F32(cfg.lora_alpha as f32)),
    ];
    let meta_refs: Vec<(&str, &Value)> = metadata.iter().map(|(k, v)| (*k, v)).collect();
    let tensor_refs: Vec<(&str, &QTensor)> = tensors.iter().map(|(k, v)| (k.as_str(), v)).collect();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| ModelError::io(format!("creating {}", dir.display()), e))?;
    }
    let tmp = path.with_extension("gguf.partial");
    let mut file = std::fs::File::create(&tmp)
        .map_err(|e| ModelError::io(format!("creating {}", tmp.display()), e))?;
    gguf_file::write(&mut file, &meta_refs, &tensor_refs)?;
    file.sync_all()
        .map_err(|e| ModelError::io(format!("writing {}", tmp.display()), e))?;
    std::fs::rename(&tmp, path)
        .map_err(|e| ModelError::io(format!("renaming {} into place", tmp.display()), e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adapter_variables_get_llama_cpp_names() {
        assert_eq!(
            adapter_name("model.layers.3.self_attn.q_proj.lora_A.weight"),
            Some(("blk.3.attn_q.weight.lora_a".into(), false))
        );
        assert_eq!(
            adapter_name("model.layers.0.mlp.down_proj.lora_B.weight"),
            Some(("blk.0.ffn_down.weight.lora_b".into(), true))
        );
        assert_eq!(adapter_name("model.layers.0.mlp.down_proj.weight"), None);
    }
}

#[cfg(test)]
mod file_tests {
    use candle_core::Device;

    use super::*;
    use crate::load::gguf::unpermute;
    use crate::model::{Decoder, lora};

    /// A written adapter reads back with llama.cpp's names, its metadata, every tensor equal
    /// to the variable it came from, and `lora_B` of q/k permuted as llama.cpp permutes rows.
    #[test]
    fn a_written_adapter_reads_back_as_llama_cpp_expects() {
        let cfg = ModelConfig::tiny("llama");
        let (mut model, _) = Decoder::random(&cfg, 3, 0.2, &Device::Cpu).unwrap();
        let lc = LoraConfig::default();
        let adapters = lora::attach_new(&mut model, &lc, 9).unwrap();
        // B starts at zero: give it values so that the permutation shows.
        for (name, var) in adapters.data().lock().unwrap().iter() {
            if name.contains("lora_B") {
                let n = var.elem_count();
                let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
                var.set(&candle_core::Tensor::from_vec(values, var.dims(), &Device::Cpu).unwrap())
                    .unwrap();
            }
        }
        let path =
            std::env::temp_dir().join(format!("spade-gguf-lora-{}.gguf", std::process::id()));
        save_gguf_lora(&path, &cfg, &lc, &adapters).unwrap();
        let mut file = std::fs::File::open(&path).unwrap();
        let content = gguf_file::Content::read(&mut file).unwrap();
        let meta = |k: &str| content.metadata[k].clone();
        assert_eq!(meta("general.type").to_string().unwrap(), "adapter");
        assert_eq!(meta("adapter.type").to_string().unwrap(), "lora");
        assert_eq!(meta("general.architecture").to_string().unwrap(), "llama");
        assert_eq!(meta("adapter.lora.alpha").to_f32().unwrap(), 16.0);
        let data = adapters.data().lock().unwrap();
        assert_eq!(content.tensor_infos.len(), data.len());
        for (var, value) in data.iter() {
            let (name, is_b) = adapter_name(var).unwrap();
            let read = content
                .tensor(&mut file, &name, &Device::Cpu)
                .unwrap()
                .dequantize(&Device::Cpu)
                .unwrap();
            let read = match (is_b, var.contains(".q_proj."), var.contains(".k_proj.")) {
                (true, true, _) => unpermute(&read, cfg.num_attention_heads).unwrap(),
                (true, _, true) => unpermute(&read, cfg.kv_heads()).unwrap(),
                _ => read,
            };
            let want = value.as_tensor();
            assert_eq!(read.dims(), want.dims(), "{name}");
            let diff = (read - want).unwrap().abs().unwrap().max_all().unwrap();
            assert_eq!(diff.to_scalar::<f32>().unwrap(), 0.0, "{name}");
        }
        // The q rows really moved (the check above is not vacuous).
        let q_b = "model.layers.0.self_attn.q_proj.lora_B.weight";
        let written = content
            .tensor(&mut file, "blk.0.attn_q.weight.lora_b", &Device::Cpu)
            .unwrap()
            .dequantize(&Device::Cpu)
            .unwrap();
        let moved = (written - data[q_b].as_tensor())
            .unwrap()
            .abs()
            .unwrap()
            .max_all()
            .unwrap();
        assert!(moved.to_scalar::<f32>().unwrap() > 0.0);
        let _ = std::fs::remove_file(&path);
    }
}
