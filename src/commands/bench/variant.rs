//! A decode variant that `bench-model` measures: the base weights decoding reads and, for
//! quantised weights, how their products take the input rows.
use std::fmt;
use std::str::FromStr;

use spade_model::model::{DecodeActivations, DecodeWeights};

/// `f32`, or quantised weights with f32 or 8-bit inputs (`gguf:f32`, `gguf:q8`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeVariant {
    /// The weights decoding reads.
    pub weights: DecodeWeights,
    /// How the quantised products take their inputs (ignored for f32 weights).
    pub activations: DecodeActivations,
}

impl FromStr for DecodeVariant {
    type Err = String;

    /// `WEIGHTS` or `WEIGHTS:ACTIVATIONS`; a quantised variant without activations takes f32
    /// inputs (the default), and `f32` weights take none.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (w, a) = match s.split_once(':') {
            Some((w, a)) => (w, Some(a)),
            None => (s, None),
        };
        let weights: DecodeWeights = w.parse()?;
        let activations = match (weights, a) {
            (DecodeWeights::F32, Some(_)) => {
                return Err(format!(
                    "`{s}`: f32 weights take no activation precision (use `f32`)"
                ));
            }
            (_, Some(a)) => a.parse()?,
            (_, None) => DecodeActivations::default(),
        };
        Ok(Self {
            weights,
            activations,
        })
    }
}

impl fmt::Display for DecodeVariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.weights {
            DecodeWeights::F32 => write!(f, "f32"),
            w => write!(f, "{w}:{}", self.activations),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variants_parse_and_print_back() {
        for s in ["f32", "q8_0:f32", "q8_0:q8", "gguf:f32", "gguf:q8"] {
            assert_eq!(s.parse::<DecodeVariant>().unwrap().to_string(), s);
        }
        assert_eq!(
            "gguf".parse::<DecodeVariant>().unwrap().to_string(),
            "gguf:f32"
        );
        assert_eq!(
            "f32:q8".parse::<DecodeVariant>().unwrap_err(),
            "`f32:q8`: f32 weights take no activation precision (use `f32`)"
        );
        assert_eq!(
            "gguf:int4".parse::<DecodeVariant>().unwrap_err(),
            "unknown decode activations `int4` (expected f32 or q8)"
        );
    }
}
