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

/// Why an adapter directory cannot initialise a policy's adapters ([`assign_lora`]).
#[derive(Debug, thiserror::Error)]
pub enum AdapterInitError {
    /// The directory does not exist, or lacks one of the adapter's two files.
    #[error(
        "{} is not an adapter directory: {} is missing (an adapter is adapter_config.json + adapter_model.safetensors, as `spade sft` and `spade train` checkpoints write them)",
        dir.display(),
        missing
    )]
    Missing {
        /// The directory named.
        dir: std::path::PathBuf,
        /// The file (or the directory itself) that is not there.
        missing: String,
    },
    /// The adapter's rank, scaling or target modules differ from the policy's.
    #[error(
        "the adapter in {} has LoRA rank {} (alpha {}, modules {}), but this run trains rank {} (alpha {}, modules {}): set lora_rank / lora_alpha to match",
        dir.display(),
        found.r,
        found.lora_alpha,
        found.target_modules.join(","),
        expected.r,
        expected.lora_alpha,
        expected.target_modules.join(",")
    )]
    ConfigMismatch {
        /// The directory named.
        dir: std::path::PathBuf,
        /// The policy's adapter configuration.
        expected: LoraConfig,
        /// The directory's.
        found: LoraConfig,
    },
    /// The adapter's tensors do not fit this model: it was trained on another one.
    #[error("the adapter in {} was made for another model: {why}", dir.display())]
    OtherModel {
        /// The directory named.
        dir: std::path::PathBuf,
        /// The first tensor that does not fit, and how.
        why: String,
    },
    /// Reading or parsing the adapter failed.
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Sets the adapters in `varmap` (attached to a model with `cfg`) to the ones saved in `dir`
/// by [`save_lora`], bit for bit, keeping the variables themselves (an optimiser built over
/// them stays valid). The directory's configuration must equal `cfg`, and its tensors must be
/// exactly `varmap`'s names with their shapes; anything else is an error that says which.
pub fn assign_lora(
    dir: &Path,
    cfg: &LoraConfig,
    varmap: &VarMap,
) -> std::result::Result<(), AdapterInitError> {
    if !dir.is_dir() {
        return Err(AdapterInitError::Missing {
            dir: dir.to_path_buf(),
            missing: "the directory".into(),
        });
    }
    for file in [ADAPTER_CONFIG, ADAPTER_WEIGHTS] {
        if !dir.join(file).is_file() {
            return Err(AdapterInitError::Missing {
                dir: dir.to_path_buf(),
                missing: file.into(),
            });
        }
    }
    let cfg_path = dir.join(ADAPTER_CONFIG);
    let text = std::fs::read_to_string(&cfg_path)
        .map_err(|e| ModelError::io(format!("reading {}", cfg_path.display()), e))?;
    let found: LoraConfig = serde_json::from_str(&text).map_err(|source| ModelError::Json {
        context: format!("parsing {}", cfg_path.display()),
        source,
    })?;
    let same_modules = {
        let mut a = found.target_modules.clone();
        let mut b = cfg.target_modules.clone();
        a.sort();
        b.sort();
        a == b
    };
    if found.r != cfg.r || found.lora_alpha != cfg.lora_alpha || !same_modules {
        return Err(AdapterInitError::ConfigMismatch {
            dir: dir.to_path_buf(),
            expected: cfg.clone(),
            found,
        });
    }
    let mut tensors: std::collections::HashMap<String, candle_core::Tensor> =
        candle_core::safetensors::load(dir.join(ADAPTER_WEIGHTS), &candle_core::Device::Cpu)
            .map_err(ModelError::from)?
            .into_iter()
            .map(|(k, v)| (k.strip_prefix(PEFT_PREFIX).unwrap_or(&k).to_string(), v))
            .collect();
    let other = |why: String| AdapterInitError::OtherModel {
        dir: dir.to_path_buf(),
        why,
    };
    let data = varmap
        .data()
        .lock()
        .map_err(|_| ModelError::InvalidParameter("the adapters' lock is poisoned".into()))?;
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    let mut assigned = Vec::with_capacity(names.len());
    for name in names {
        let var = &data[name];
        let t = tensors
            .remove(name.as_str())
            .ok_or_else(|| other(format!("it has no tensor `{name}`")))?;
        if t.dims() != var.dims() {
            return Err(other(format!(
                "tensor `{name}` has shape {:?}, this model's is {:?}",
                t.dims(),
                var.dims()
            )));
        }
        assigned.push((var, t));
    }
    if let Some(extra) = tensors.keys().min() {
        return Err(other(format!(
            "it has tensor `{extra}`, which this model has no place for ({} such)",
            tensors.len()
        )));
    }
    for (var, t) in assigned {
        let t = t
            .to_dtype(var.dtype())
            .and_then(|t| t.to_device(var.device()))
            .map_err(ModelError::from)?;
        var.set(&t).map_err(ModelError::from)?;
    }
    Ok(())
}
