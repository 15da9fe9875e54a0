//! LoRA configuration and adapter creation.
use candle_nn::{Init, VarBuilder};
use serde::{Deserialize, Serialize};

use super::linear::{Linear, LoraAdapter};

/// LoRA hyper-parameters (PEFT's `adapter_config.json` field names).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoraConfig {
    /// Rank `r` of the update.
    pub r: usize,
    /// Scaling numerator: the update is multiplied by `lora_alpha / r`.
    pub lora_alpha: f64,
    /// Projection names that get an adapter, e.g. `q_proj`, `v_proj`.
    pub target_modules: Vec<String>,
}

impl Default for LoraConfig {
    fn default() -> Self {
        Self {
            r: 8,
            lora_alpha: 16.0,
            target_modules: [
                "q_proj",
                "k_proj",
                "v_proj",
                "o_proj",
                "gate_proj",
                "up_proj",
                "down_proj",
            ]
            .map(String::from)
            .to_vec(),
        }
    }
}

impl LoraConfig {
    /// Whether the projection at `path` (e.g. `model.layers.0.self_attn.q_proj`) is targeted.
    pub fn targets(&self, path: &str) -> bool {
        let leaf = path.rsplit('.').next().unwrap_or(path);
        self.target_modules.iter().any(|m| m == leaf)
    }

    /// Creates the adapter for `linear` in `vb` as `<path>.lora_A.weight` / `lora_B.weight`.
    ///
    /// `A` gets a Kaiming-uniform init from the var builder (seed it with
    /// [`crate::model::init::randomize`] for determinism); `B` starts at zero so the adapted
    /// model equals the base model.
    pub(crate) fn adapter(
        &self,
        linear: &Linear,
        vb: &VarBuilder,
    ) -> candle_core::Result<LoraAdapter> {
        let (out_dim, in_dim) = linear.dims()?;
        let vb = vb.pp(linear.name());
        let a = vb.get_with_hints((self.r, in_dim), "lora_A.weight", Init::Const(0.0))?;
        let b = vb.get_with_hints((out_dim, self.r), "lora_B.weight", Init::Const(0.0))?;
        Ok(LoraAdapter {
            a,
            b,
            scale: self.lora_alpha / self.r as f64,
        })
    }
}

/// Creates fresh adapters for `cfg` on `model` in a new `VarMap`, seeded: `A ~ N(0, 1/hidden)`
/// (std `1/sqrt(hidden_size)`), `B = 0`. The base weights become frozen.
pub fn attach_new(
    model: &mut super::Decoder,
    cfg: &LoraConfig,
    seed: u64,
) -> crate::error::Result<candle_nn::VarMap> {
    if cfg.r == 0 {
        return Err(crate::error::ModelError::InvalidParameter(
            "LoRA rank must be at least 1".into(),
        ));
    }
    let varmap = candle_nn::VarMap::new();
    let vb = VarBuilder::from_varmap(&varmap, candle_core::DType::F32, model.device());
    model.attach_lora(cfg, &vb)?;
    let std = 1.0 / (model.config().hidden_size as f64).sqrt();
    super::init::randomize(&varmap, seed, std, |_| true)?;
    Ok(varmap)
}
