//! Loading a Hugging Face model directory.
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{DType, Device, Tensor};
use candle_nn::{VarBuilder, VarMap};
use tokenizers::Tokenizer;

use super::{LoadedModel, weights};
use crate::chat::ChatTemplate;
use crate::error::{ModelError, Result};
use crate::model::{Decoder, ModelConfig};

fn require(path: PathBuf) -> Result<PathBuf> {
    if path.exists() {
        Ok(path)
    } else {
        Err(ModelError::MissingFile { path })
    }
}

fn read_json(path: &Path) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| ModelError::io(format!("reading {}", path.display()), e))?;
    serde_json::from_str(&text).map_err(|source| ModelError::Json {
        context: format!("parsing {}", path.display()),
        source,
    })
}

/// The safetensors files of `dir`: `model.safetensors`, or the shards named by the index.
fn weight_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let single = dir.join("model.safetensors");
    if single.exists() {
        return Ok(vec![single]);
    }
    let index =
        require(dir.join("model.safetensors.index.json")).map_err(|_| ModelError::MissingFile {
            path: single.clone(),
        })?;
    let index = read_json(&index)?;
    let map = index["weight_map"].as_object().ok_or_else(|| {
        ModelError::InvalidMetadata("model.safetensors.index.json has no weight_map".into())
    })?;
    let mut files: Vec<String> = map
        .values()
        .filter_map(|v| v.as_str().map(String::from))
        .collect();
    files.sort();
    files.dedup();
    files.into_iter().map(|f| require(dir.join(f))).collect()
}

/// Loads all tensors of the safetensors files of `dir`.
pub fn load_tensors(dir: &Path, device: &Device) -> Result<HashMap<String, Tensor>> {
    let mut all = HashMap::new();
    for file in weight_files(dir)? {
        all.extend(candle_core::safetensors::load(&file, device)?);
    }
    Ok(all)
}

/// The chat template string of `tokenizer_config.json` (a string or a list of named templates).
fn chat_template(tok_cfg: &serde_json::Value) -> Option<String> {
    match &tok_cfg["chat_template"] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(list) => list
            .iter()
            .find(|t| t["name"] == "default")
            .or(list.first())
            .and_then(|t| t["template"].as_str().map(String::from)),
        _ => None,
    }
}

/// Loads `dir` (config.json, weights, tokenizer.json, optional tokenizer_config.json) in f32.
pub fn load_hf_dir(dir: &Path, device: &Device) -> Result<LoadedModel> {
    let config_path = require(dir.join("config.json"))?;
    let text = std::fs::read_to_string(&config_path)
        .map_err(|e| ModelError::io(format!("reading {}", config_path.display()), e))?;
    let config = ModelConfig::from_json(&text)?;
    let tokenizer_path = require(dir.join("tokenizer.json"))?;
    let tokenizer = Tokenizer::from_file(&tokenizer_path)
        .map_err(|e| ModelError::Tokenizer(format!("{}: {e}", tokenizer_path.display())))?;
    let tok_cfg_path = dir.join("tokenizer_config.json");
    let tok_cfg = if tok_cfg_path.exists() {
        read_json(&tok_cfg_path)?
    } else {
        serde_json::Value::Null
    };
    let chat = ChatTemplate::from_jinja(chat_template(&tok_cfg).as_deref())?;
    let mut tensors = load_tensors(dir, device)?;
    let varmap = VarMap::new();
    let model = Decoder::new(
        &config,
        VarBuilder::from_varmap(&varmap, DType::F32, device),
    )?;
    weights::assign(&varmap, |name| Ok(tensors.remove(name)))?;
    let mut eos_ids = config.eos_ids();
    if let Some(eos) = tok_cfg["eos_token"]
        .as_str()
        .and_then(|t| tokenizer.token_to_id(t))
    {
        eos_ids.push(eos);
    }
    Ok(LoadedModel::new(
        config, model, varmap, tokenizer, chat, eos_ids,
    ))
}
