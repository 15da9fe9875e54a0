//! Saving and loading full weights and LoRA adapters as safetensors with their configs.
use std::path::Path;

use candle_nn::{VarBuilder, VarMap};

use crate::error::{ModelError, Result};
use crate::load::{LoadedModel, hf, weights};
use crate::model::{Decoder, LoraConfig};

const ADAPTER_WEIGHTS: &str = "adapter_model.safetensors";
const ADAPTER_CONFIG: &str = "adapter_config.json";

fn write_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|source| ModelError::Json {
        context: format!("serialising {}", path.display()),
        source,
    })?;
    std::fs::write(path, text).map_err(|e| ModelError::io(format!("writing {}", path.display()), e))
}

fn create_dir(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)
        .map_err(|e| ModelError::io(format!("creating {}", dir.display()), e))
}

/// Saves `model` as an HF directory: `config.json`, `model.safetensors`, `tokenizer.json` and a
/// `tokenizer_config.json` carrying the chat template; [`crate::load::load`] reads it back.
pub fn save_full(dir: &Path, model: &LoadedModel) -> Result<()> {
    create_dir(dir)?;
    write_json(&dir.join("config.json"), &model.config)?;
    model.varmap.save(dir.join("model.safetensors"))?;
    model
        .tokenizer
        .save(dir.join("tokenizer.json"), false)
        .map_err(|e| ModelError::Tokenizer(format!("saving tokenizer.json: {e}")))?;
    let eos = model
        .eos_ids
        .iter()
        .filter_map(|&id| model.tokenizer.id_to_token(id))
        .next_back();
    let tok_cfg = serde_json::json!({
        "chat_template": model.chat.to_jinja(),
        "eos_token": eos,
    });
    write_json(&dir.join("tokenizer_config.json"), &tok_cfg)
}

/// The prefix PEFT puts before the base model's parameter names in `adapter_model.safetensors`
/// (`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`).
pub const PEFT_PREFIX: &str = "base_model.model.";

/// `adapter_config.json` as PEFT writes it for a LoRA adapter: spade's [`LoraConfig`] fields and
/// PEFT's own, so that `peft.PeftModel.from_pretrained(base, dir)` loads a spade adapter.
#[derive(serde::Serialize)]
struct PeftAdapterConfig<'a> {
    peft_type: &'static str,
    task_type: &'static str,
    #[serde(flatten)]
    lora: &'a LoraConfig,
    lora_dropout: f64,
    bias: &'static str,
    fan_in_fan_out: bool,
    use_rslora: bool,
    inference_mode: bool,
    base_model_name_or_path: Option<String>,
}

/// Saves LoRA adapters in PEFT's format: `adapter_config.json` (PEFT's fields, `peft_type`
/// `LORA`) and `adapter_model.safetensors` (PEFT's tensor names: [`PEFT_PREFIX`] before the
/// base model's, `lora_A` of shape `(r, in)`, `lora_B` of shape `(out, r)`, scaled by
/// `lora_alpha / r` as PEFT scales them).
pub fn save_lora(dir: &Path, cfg: &LoraConfig, adapters: &VarMap) -> Result<()> {
    create_dir(dir)?;
    let config = PeftAdapterConfig {
        peft_type: "LORA",
        task_type: "CAUSAL_LM",
        lora: cfg,
        lora_dropout: 0.0,
        bias: "none",
        fan_in_fan_out: false,
        use_rslora: false,
        inference_mode: true,
        base_model_name_or_path: None,
    };
    write_json(&dir.join(ADAPTER_CONFIG), &config)?;
    let tensors: std::collections::HashMap<String, candle_core::Tensor> = adapters
        .data()
        .lock()
        .map_err(|_| ModelError::InvalidParameter("the adapters' lock is poisoned".into()))?
        .iter()
        .map(|(name, var)| (format!("{PEFT_PREFIX}{name}"), var.as_tensor().clone()))
        .collect();
    candle_core::safetensors::save(&tensors, dir.join(ADAPTER_WEIGHTS))?;
    Ok(())
}

/// Loads adapters saved by [`save_lora`] onto `model`, freezing its base weights.
pub fn load_lora(dir: &Path, model: &mut Decoder) -> Result<(LoraConfig, VarMap)> {
    let cfg_path = dir.join(ADAPTER_CONFIG);
    let weights_path = dir.join(ADAPTER_WEIGHTS);
    for p in [&cfg_path, &weights_path] {
        if !p.exists() {
            return Err(ModelError::MissingFile { path: p.clone() });
        }
    }
    let text = std::fs::read_to_string(&cfg_path)
        .map_err(|e| ModelError::io(format!("reading {}", cfg_path.display()), e))?;
    let cfg: LoraConfig = serde_json::from_str(&text).map_err(|source| ModelError::Json {
        context: format!("parsing {}", cfg_path.display()),
        source,
    })?;
    let varmap = VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, candle_core::DType::F32, model.device());
    model.attach_lora(&cfg, &vb)?;
    let mut tensors = candle_core::safetensors::load(&weights_path, model.device())?;
    // PEFT's names (what `save_lora` writes), or the bare names of adapters saved before.
    weights::assign(&varmap, |name| {
        Ok(tensors
            .remove(&format!("{PEFT_PREFIX}{name}"))
            .or_else(|| tensors.remove(name)))
    })?;
    Ok((cfg, varmap))
}

/// Loads a directory written by [`save_full`].
pub fn load_full(dir: &Path, device: &candle_core::Device) -> Result<LoadedModel> {
    hf::load_hf_dir(dir, device)
}
