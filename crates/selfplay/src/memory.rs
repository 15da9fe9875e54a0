//! Environment memory: a bounded FIFO of played environments that gives the designer
//! examples: positive ones (learnable, high regret) and lists of games that were too easy or
//! too hard.
use std::collections::VecDeque;
use std::path::Path;

use super::error::{Result, TrainError};
use serde::{Deserialize, Serialize};

/// One played environment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoryRecord {
    /// Pool id.
    pub env_id: String,
    /// Class name.
    pub class_name: String,
    /// Skill.
    pub skill: String,
    /// The first `memory_code_chars` characters of the source.
    pub code: String,
    /// Agent win rate (plays without the hint).
    pub win_rate: f64,
    /// Hint-based regret.
    pub regret: f64,
}

/// The memory's settings (`memory_*` in the config).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MemoryConfig {
    /// Most records kept, oldest dropped first.
    pub size: usize,
    /// Characters of code each record keeps.
    pub code_chars: usize,
    /// Positive examples put into each designer prompt.
    pub positive_examples: usize,
    /// Positive examples have a win rate in `[win_low, win_high]`.
    pub win_low: f64,
    /// Upper end of the positive win-rate band.
    pub win_high: f64,
    /// Listed as too easy above this win rate.
    pub too_easy: f64,
    /// Listed as too hard below this win rate.
    pub too_hard: f64,
    /// Class names per negative list.
    pub negative_examples: usize,
}

/// The examples from memory that go into a designer prompt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DesignerExamples {
    /// Positive examples.
    pub positive: Vec<MemoryRecord>,
    /// Class names of games that were too easy.
    pub too_easy: Vec<String>,
    /// Class names of games that were too hard.
    pub too_hard: Vec<String>,
}

/// The memory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvMemory {
    /// Records, oldest first.
    pub records: VecDeque<MemoryRecord>,
}

impl EnvMemory {
    /// Adds a record (code cut to `code_chars` characters), dropping the oldest beyond `cap`.
    pub fn add(&mut self, mut record: MemoryRecord, cap: usize, code_chars: usize) {
        if let Some((i, _)) = record.code.char_indices().nth(code_chars) {
            record.code.truncate(i);
        }
        self.records.push_back(record);
        while self.records.len() > cap {
            self.records.pop_front();
        }
    }

    /// Examples for a designer prompt: positives have a win rate in the band, the top
    /// `max(3n, 10)` by regret form the pool and `n` are drawn from it with the RNG seed
    /// `seed`; negatives are the most recent too-easy and too-hard class names.
    pub fn examples(&self, cfg: &MemoryConfig, seed: u64) -> DesignerExamples {
        let n = cfg.positive_examples;
        let mut band: Vec<&MemoryRecord> = self
            .records
            .iter()
            .filter(|r| r.win_rate >= cfg.win_low && r.win_rate <= cfg.win_high)
            .collect();
        // Stable: ties keep insertion order.
        band.sort_by(|a, b| b.regret.total_cmp(&a.regret));
        band.truncate((3 * n).max(10));
        let mut positive = Vec::new();
        let mut s = seed;
        while positive.len() < n && !band.is_empty() {
            s = super::seeds::mix(s, 0x5EED);
            let i = (s % band.len() as u64) as usize;
            positive.push(band.remove(i).clone());
        }
        let names = |pred: &dyn Fn(&MemoryRecord) -> bool| {
            let mut out: Vec<String> = Vec::new();
            for r in self.records.iter().rev().filter(|r| pred(r)) {
                if !out.contains(&r.class_name) {
                    out.push(r.class_name.clone());
                }
                if out.len() == cfg.negative_examples {
                    break;
                }
            }
            out
        };
        DesignerExamples {
            positive,
            too_easy: names(&|r| r.win_rate > cfg.too_easy),
            too_hard: names(&|r| r.win_rate < cfg.too_hard),
        }
    }

    /// Writes `env_memory.json` (pretty JSON list of records) atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        let text =
            serde_json::to_string_pretty(&self.records).map_err(|source| TrainError::Json {
                context: "serialising the memory".into(),
                source,
            })?;
        super::state::write_atomic(path, text.as_bytes())
    }

    /// Reads a file written by [`EnvMemory::save`].
    pub fn load(path: &Path) -> Result<Self> {
        let text =
            std::fs::read_to_string(path).map_err(|e| TrainError::file("reading", path, e))?;
        let records = serde_json::from_str(&text).map_err(|source| TrainError::Json {
            context: format!("parsing {}", path.display()),
            source,
        })?;
        Ok(Self { records })
    }
}
