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

/// Saves LoRA adapters (`adapter_model.safetensors` and `adapter_config.json`).
pub fn save_lora(dir: &Path, cfg: &LoraConfig, adapters: &VarMap) -> Result<()> {
    create_dir(dir)?;
    write_json(&dir.join(ADAPTER_CONFIG), cfg)?;
    adapters.save(dir.join(ADAPTER_WEIGHTS))?;
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
    weights::assign(&varmap, |name| Ok(tensors.remove(name)))?;
    Ok((cfg, varmap))
}

/// Loads a directory written by [`save_full`].
pub fn load_full(dir: &Path, device: &candle_core::Device) -> Result<LoadedModel> {
    hf::load_hf_dir(dir, device)
}
