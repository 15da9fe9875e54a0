//! Which base weights the inference path reads: f32, or quantised blocks.
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The base weights that decoding (and prefill) reads. Training always reads f32.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecodeWeights {
    /// The f32 weights (what the training path reads).
    F32,
    /// Every projection quantised to `Q8_0` at load time (a quarter of the f32 bytes).
    #[serde(rename = "q8_0")]
    Q8_0,
    /// A GGUF file's own `Q8_0`/`Q4_1` blocks where it has them, f32 elsewhere (so a model
    /// that is not a GGUF decodes in f32, exactly as it trains).
    #[default]
    Gguf,
}

impl DecodeWeights {
    /// The name used in configs and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Q8_0 => "q8_0",
            Self::Gguf => "gguf",
        }
    }
}

impl FromStr for DecodeWeights {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(Self::F32),
            "q8_0" => Ok(Self::Q8_0),
            "gguf" => Ok(Self::Gguf),
            other => Err(format!(
                "unknown decode weights `{other}` (expected f32, q8_0 or gguf)"
            )),
        }
    }
}

impl fmt::Display for DecodeWeights {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the quantised products of the inference path take their input rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecodeActivations {
    /// As they are, in f32: the weights are dequantised in registers and the product equals
    /// the training path's within the order of f32 summation (the sampled policy is the
    /// trained one).
    #[default]
    F32,
    /// Rounded to 8-bit blocks first, as llama.cpp does: integer dot products, faster, but
    /// up to `max|x| / 254` of error per input value, enough to change greedy tokens.
    Q8,
}

impl DecodeActivations {
    /// The name used in configs and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::Q8 => "q8",
        }
    }
}

impl FromStr for DecodeActivations {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "f32" => Ok(Self::F32),
            "q8" => Ok(Self::Q8),
            other => Err(format!(
                "unknown decode activations `{other}` (expected f32 or q8)"
            )),
        }
    }
}

impl fmt::Display for DecodeActivations {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the inference path reads after [`crate::model::Decoder::set_decode_weights`]: the
/// format of every projection, the bytes one token reads from them, and the kernel.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecodePath {
    /// The requested weights.
    pub weights: DecodeWeights,
    /// How the quantised products take their inputs (unused where every projection is f32).
    #[serde(default)]
    pub activations: DecodeActivations,
    /// Projections per format (`f32`, `q8_0`, `q4_1`).
    pub formats: BTreeMap<String, usize>,
    /// Bytes of projection weights one decode step reads.
    pub weight_bytes: usize,
    /// The inner loops of the products: `f32/avx2-fma` or `f32/portable` for f32 weights,
    /// `quant-f32act/{avx512,avx2,portable}` or `quant-q8act/{avx512vnni,avx2,portable}`
    /// for blocks. Different kernels round differently, so the same seed can sample
    /// different tokens on a CPU that picks another one.
    pub kernel: String,
}

impl fmt::Display for DecodePath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let formats: Vec<String> = self
            .formats
            .iter()
            .map(|(k, n)| format!("{n} {k}"))
            .collect();
        let act = if self.formats.keys().any(|k| k != "f32") {
            format!(", {} activations", self.activations)
        } else {
            String::new()
        };
        write!(
            f,
            "{}{act} ({}; {:.1} MB per token; {} kernel)",
            self.weights,
            formats.join(", "),
            self.weight_bytes as f64 / 1e6,
            self.kernel
        )
    }
}
