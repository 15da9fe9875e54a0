//! What counts as new behaviour in a fuzzing campaign: the features of a call's outcome that
//! snapshot fuzzing (`spade fuzz --fork`) keeps states for, and that both campaigns count as
//! distinct states reached.
//!
//! A call's features are its observation's shape (the text with every run of digits written
//! as one `#`, so that "3 left" and "12 left" are one shape and "won" another), its reward
//! (exactly, by its bits), its error kind, and the set of its info dict's top-level keys. A
//! call whose features include one the campaign has not seen before reached new behaviour.

use std::collections::HashSet;

use sha2::{Digest, Sha256};
use spade_sandbox::{CallError, ErrorKind, Step};

/// One feature of a call's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Feature {
    /// The observation's shape (a hash of it, [`shape`]).
    Shape(u64),
    /// The reward's bits.
    Reward(u64),
    /// The kind of the error the call ended with.
    Error(ErrorKind),
    /// The info dict's keys (a hash of them, sorted).
    InfoKeys(u64),
}

/// The observation with every run of ASCII digits written as one `#`.
pub fn shape(observation: &str) -> String {
    let mut shaped = String::with_capacity(observation.len());
    let mut in_digits = false;
    for c in observation.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                shaped.push('#');
            }
            in_digits = true;
        } else {
            shaped.push(c);
            in_digits = false;
        }
    }
    shaped
}

fn hash(text: &str) -> u64 {
    let digest = Sha256::digest(text.as_bytes());
    u64::from_le_bytes(digest[..8].try_into().expect("8 bytes"))
}

/// The top-level keys of an info dict (JSON text), sorted; none for text that is not an object.
fn info_keys(info: &str) -> Vec<String> {
    match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(info) {
        Ok(map) => map.keys().cloned().collect(),
        Err(_) => Vec::new(),
    }
}

/// The features of a step's outcome.
pub fn step_features(step: &Result<Step, CallError>) -> Vec<Feature> {
    match step {
        Ok(step) => vec![
            Feature::Shape(hash(&shape(&step.observation))),
            Feature::Reward(step.reward.to_bits()),
            Feature::InfoKeys(hash(&info_keys(&step.info).join("\u{0}"))),
        ],
        Err(err) => vec![Feature::Error(err.kind())],
    }
}

/// The features a campaign has seen (only inserted and counted: no decision depends on the
/// set's order).
#[derive(Debug, Clone, Default)]
pub struct Seen {
    features: HashSet<Feature>,
}

impl Seen {
    /// Notes `features`; whether any was new.
    pub fn note(&mut self, features: &[Feature]) -> bool {
        let mut new = false;
        for feature in features {
            new |= self.features.insert(*feature);
        }
        new
    }

    /// Distinct features seen.
    pub fn len(&self) -> usize {
        self.features.len()
    }

    /// Whether nothing was seen.
    pub fn is_empty(&self) -> bool {
        self.features.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(observation: &str, reward: f64, info: &str) -> Result<Step, CallError> {
        Ok(Step {
            observation: observation.to_owned(),
            reward,
            terminated: false,
            truncated: false,
            info: info.to_owned(),
        })
    }

    #[test]
    fn numbers_do_not_make_a_shape_new_and_words_do() {
        assert_eq!(shape("3 left, 12 tries"), "# left, # tries");
        assert_eq!(shape("x1y22"), "x#y#");
        let mut seen = Seen::default();
        assert!(seen.note(&step_features(&step("3 left", 0.0, "{}"))));
        assert!(!seen.note(&step_features(&step("12 left", 0.0, "{}"))));
        assert!(seen.note(&step_features(&step("won", 0.0, "{}"))));
        assert_eq!(seen.len(), 4, "two shapes, one reward, one key set");
    }

    #[test]
    fn a_new_reward_error_or_info_key_is_new() {
        let mut seen = Seen::default();
        seen.note(&step_features(&step("a", 0.0, r#"{"x": 1}"#)));
        assert!(!seen.note(&step_features(&step("a", 0.0, r#"{"x": 2}"#))));
        assert!(seen.note(&step_features(&step("a", 0.5, r#"{"x": 2}"#))));
        assert!(seen.note(&step_features(&step("a", 0.0, r#"{"x": 2, "y": 3}"#))));
        let failed = Err(CallError::Exception("ZeroDivisionError".into()));
        assert!(seen.note(&step_features(&failed)));
        assert!(!seen.note(&step_features(&failed)));
        // -0.0 and 0.0 are different rewards (their bits differ).
        assert!(seen.note(&step_features(&step("a", -0.0, r#"{"x": 2}"#))));
    }
}
