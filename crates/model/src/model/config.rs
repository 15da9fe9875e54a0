//! Model configuration, read from a Hugging Face `config.json`.
use serde::{Deserialize, Serialize};

use crate::error::{ModelError, Result};

/// The decoder families this crate implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Llama (and SmolLM2): no attention bias, no q/k norm.
    Llama,
    /// Qwen2: q/k/v projections carry a bias.
    Qwen2,
    /// Qwen3: RMSNorm over each head of q and k before RoPE.
    Qwen3,
}

/// One or several token ids, as `eos_token_id` appears in configs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TokenIds {
    /// A single id.
    One(u32),
    /// Several ids.
    Many(Vec<u32>),
}

impl TokenIds {
    /// The ids as a list.
    pub fn to_vec(&self) -> Vec<u32> {
        match self {
            Self::One(id) => vec![*id],
            Self::Many(ids) => ids.clone(),
        }
    }
}

fn default_rope_theta() -> f64 {
    10_000.0
}
fn default_eps() -> f64 {
    1e-6
}
fn default_max_pos() -> usize {
    4096
}

/// Decoder hyper-parameters with the field names of HF `config.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    /// `llama`, `qwen2` or `qwen3`.
    pub model_type: String,
    /// Vocabulary size (rows of the embedding).
    pub vocab_size: usize,
    /// Width of the residual stream.
    pub hidden_size: usize,
    /// Width of the SwiGLU hidden layer.
    pub intermediate_size: usize,
    /// Number of decoder layers.
    pub num_hidden_layers: usize,
    /// Number of query heads.
    pub num_attention_heads: usize,
    /// Number of key/value heads (grouped-query attention); defaults to the query heads.
    #[serde(default)]
    pub num_key_value_heads: Option<usize>,
    /// Per-head width; defaults to `hidden_size / num_attention_heads`.
    #[serde(default)]
    pub head_dim: Option<usize>,
    /// RMSNorm epsilon.
    #[serde(default = "default_eps")]
    pub rms_norm_eps: f64,
    /// RoPE base frequency.
    #[serde(default = "default_rope_theta")]
    pub rope_theta: f64,
    /// Longest sequence the RoPE tables cover.
    #[serde(default = "default_max_pos")]
    pub max_position_embeddings: usize,
    /// Whether the LM head reuses the token embedding.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Whether q/k/v/o projections carry a bias (Llama, Qwen3); Qwen2 always has q/k/v bias.
    #[serde(default)]
    pub attention_bias: bool,
    /// Beginning-of-sequence token.
    #[serde(default)]
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token(s).
    #[serde(default)]
    pub eos_token_id: Option<TokenIds>,
    /// RoPE scaling (Llama 3.1 and others); not implemented, so a config that sets it is
    /// rejected rather than run with wrong positions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rope_scaling: Option<serde_json::Value>,
}

impl ModelConfig {
    /// Parses a `config.json` text and checks it.
    pub fn from_json(text: &str) -> Result<Self> {
        let cfg: Self = serde_json::from_str(text).map_err(|source| ModelError::Json {
            context: "parsing config.json".into(),
            source,
        })?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks the family is supported and the head arithmetic is consistent.
    pub fn validate(&self) -> Result<()> {
        self.family()?;
        if let Some(scaling) = self.rope_scaling.as_ref().filter(|v| !v.is_null()) {
            return Err(ModelError::InvalidMetadata(format!(
                "rope_scaling is not supported: {scaling}"
            )));
        }
        let kv = self.kv_heads();
        if self.num_attention_heads == 0 || kv == 0 || !self.num_attention_heads.is_multiple_of(kv)
        {
            return Err(ModelError::InvalidMetadata(format!(
                "{} attention heads are not a multiple of {kv} key/value heads",
                self.num_attention_heads
            )));
        }
        if self.head_dim.is_none() && !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(ModelError::InvalidMetadata(format!(
                "hidden size {} is not divisible by {} heads",
                self.hidden_size, self.num_attention_heads
            )));
        }
        if !self.head_dim().is_multiple_of(2) {
            return Err(ModelError::InvalidMetadata(format!(
                "head dim {} must be even for RoPE",
                self.head_dim()
            )));
        }
        Ok(())
    }

    /// The decoder family named by `model_type`.
    pub fn family(&self) -> Result<Family> {
        match self.model_type.as_str() {
            "llama" | "mistral" => Ok(Family::Llama),
            "qwen2" => Ok(Family::Qwen2),
            "qwen3" => Ok(Family::Qwen3),
            other => Err(ModelError::UnsupportedArchitecture(other.to_string())),
        }
    }

    /// Number of key/value heads.
    pub fn kv_heads(&self) -> usize {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Per-head width.
    pub fn head_dim(&self) -> usize {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Whether q/k/v carry a bias.
    pub fn qkv_bias(&self) -> bool {
        self.attention_bias || self.model_type == "qwen2"
    }

    /// End-of-sequence ids (possibly empty).
    pub fn eos_ids(&self) -> Vec<u32> {
        self.eos_token_id
            .as_ref()
            .map(TokenIds::to_vec)
            .unwrap_or_default()
    }

    /// A tiny configuration for tests and examples.
    pub fn tiny(model_type: &str) -> Self {
        Self {
            model_type: model_type.to_string(),
            vocab_size: 128,
            hidden_size: 32,
            intermediate_size: 64,
            num_hidden_layers: 2,
            num_attention_heads: 4,
            num_key_value_heads: Some(2),
            head_dim: None,
            rms_norm_eps: 1e-5,
            rope_theta: 10_000.0,
            max_position_embeddings: 256,
            tie_word_embeddings: model_type != "qwen2",
            attention_bias: false,
            bos_token_id: Some(1),
            eos_token_id: Some(TokenIds::One(2)),
            rope_scaling: None,
        }
    }

    /// The shape of SmolLM2-135M (llama, 30 layers, hidden 576, 9/3 heads, vocab 49152).
    pub fn smollm2_135m() -> Self {
        Self {
            model_type: "llama".into(),
            vocab_size: 49152,
            hidden_size: 576,
            intermediate_size: 1536,
            num_hidden_layers: 30,
            num_attention_heads: 9,
            num_key_value_heads: Some(3),
            head_dim: None,
            rms_norm_eps: 1e-5,
            rope_theta: 100_000.0,
            max_position_embeddings: 8192,
            tie_word_embeddings: true,
            attention_bias: false,
            bos_token_id: Some(1),
            eos_token_id: Some(TokenIds::One(2)),
            rope_scaling: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_hf_config_json_and_rejects_what_it_cannot_run() {
        let qwen = r#"{"model_type": "qwen2", "vocab_size": 151936, "hidden_size": 896,
            "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
            "num_key_value_heads": 2, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
            "max_position_embeddings": 32768, "tie_word_embeddings": true,
            "eos_token_id": 151643, "rope_scaling": null, "sliding_window": 32768}"#;
        let cfg = ModelConfig::from_json(qwen).unwrap();
        assert_eq!(
            (cfg.head_dim(), cfg.kv_heads(), cfg.qkv_bias()),
            (64, 2, true)
        );
        assert_eq!(cfg.eos_ids(), vec![151643]);
        let scaled = qwen.replace(
            "\"rope_scaling\": null",
            "\"rope_scaling\": {\"rope_type\": \"llama3\"}",
        );
        assert_eq!(
            ModelConfig::from_json(&scaled).unwrap_err().to_string(),
            "invalid model metadata: rope_scaling is not supported: {\"rope_type\":\"llama3\"}"
        );
        let odd = qwen.replace("\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3");
        assert_eq!(
            ModelConfig::from_json(&odd).unwrap_err().to_string(),
            "invalid model metadata: 14 attention heads are not a multiple of 3 key/value heads"
        );
        let eos_list = qwen.replace("\"eos_token_id\": 151643", "\"eos_token_id\": [1, 2]");
        assert_eq!(
            ModelConfig::from_json(&eos_list).unwrap().eos_ids(),
            vec![1, 2]
        );
        assert!(
            ModelConfig::from_json("{}")
                .unwrap_err()
                .to_string()
                .starts_with("parsing config.json: missing field")
        );
    }
}
