//! The grounding corpus: JSONL documents (`text` or `orig_doc`), truncated, sampled with a seed.
use crate::error::{Result, TrainError};

/// The corpus bundled with spade: short documents written for the project.
pub const DEFAULT_CORPUS: &str = include_str!("../assets/corpus/default.jsonl");

/// The held-out corpus of `spade eval --designer`: 66 short documents written for the project,
/// none of them in [`DEFAULT_CORPUS`].
pub const HELDOUT_CORPUS: &str = include_str!("../assets/corpus/heldout.jsonl");

/// One document.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// Its line number (0-based) in the corpus file: a stable id.
    pub id: usize,
    /// The text, truncated to the word budget.
    pub text: String,
}

/// A loaded corpus.
#[derive(Debug, Clone, PartialEq)]
pub struct Corpus {
    docs: Vec<Document>,
}

/// The first `max_words` whitespace-separated words of `text` (whitespace preserved).
pub fn truncate_words(text: &str, max_words: usize) -> &str {
    let mut words = 0;
    let mut in_word = false;
    for (i, c) in text.char_indices() {
        if c.is_whitespace() {
            in_word = false;
        } else if !in_word {
            if words == max_words {
                return text[..i].trim_end();
            }
            words += 1;
            in_word = true;
        }
    }
    text
}

impl Corpus {
    /// Parses JSONL; blank lines are skipped, other lines need a string `text` or `orig_doc`.
    pub fn parse(jsonl: &str, max_doc_words: usize) -> Result<Self> {
        let mut docs = Vec::new();
        for (n, line) in jsonl.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(line).map_err(|e| {
                TrainError::Corpus(format!("corpus line {} is not a JSON document: {e}", n + 1))
            })?;
            let text = ["text", "orig_doc"]
                .iter()
                .find_map(|k| value.get(*k).and_then(|v| v.as_str()))
                .ok_or_else(|| {
                    TrainError::Corpus(format!(
                        "corpus line {} has no string field `text` or `orig_doc`",
                        n + 1
                    ))
                })?;
            docs.push(Document {
                id: n,
                text: truncate_words(text, max_doc_words).to_string(),
            });
        }
        if docs.is_empty() {
            return Err(TrainError::Corpus("the corpus has no documents".into()));
        }
        Ok(Self { docs })
    }

    /// The documents.
    pub fn docs(&self) -> &[Document] {
        &self.docs
    }

    /// A document drawn uniformly with `seed`: the same seed gives the same document.
    pub fn sample(&self, seed: u64) -> &Document {
        &self.docs[(super::seeds::mix(seed, 0xC0) % self.docs.len() as u64) as usize]
    }

    /// A document drawn uniformly with `seed` among those whose id is not in `used` (a
    /// redraw's fresh document); when every document is in `used`, among all of them.
    pub fn sample_fresh(&self, seed: u64, used: &[usize]) -> &Document {
        let fresh: Vec<&Document> = self.docs.iter().filter(|d| !used.contains(&d.id)).collect();
        if fresh.is_empty() {
            return self.sample(seed);
        }
        fresh[(super::seeds::mix(seed, 0xC0) % fresh.len() as u64) as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heldout_corpus_has_64_documents_none_in_the_training_corpus() {
        let train = Corpus::parse(DEFAULT_CORPUS, usize::MAX).unwrap();
        let held = Corpus::parse(HELDOUT_CORPUS, usize::MAX).unwrap();
        assert!(held.docs().len() >= 64, "{} documents", held.docs().len());
        for h in held.docs() {
            for t in train.docs() {
                assert!(
                    !t.text.contains(&h.text) && !h.text.contains(&t.text),
                    "held-out document {} is in the training corpus (document {})",
                    h.id,
                    t.id
                );
            }
        }
        // No two held-out documents are the same either.
        let mut texts: Vec<&str> = held.docs().iter().map(|d| d.text.as_str()).collect();
        texts.sort_unstable();
        texts.dedup();
        assert_eq!(texts.len(), held.docs().len());
    }

    #[test]
    fn a_fresh_document_is_never_one_already_used() {
        let c = Corpus::parse(HELDOUT_CORPUS, usize::MAX).unwrap();
        let n = c.docs().len();
        for seed in 0..50 {
            let used: Vec<usize> = (0..n - 1)
                .filter(|i| i % 3 != (seed % 3) as usize)
                .collect();
            let d = c.sample_fresh(seed, &used);
            assert!(
                !used.contains(&d.id),
                "seed {seed} drew used document {}",
                d.id
            );
        }
        // Only one left: that one.
        let used: Vec<usize> = (1..n).collect();
        assert_eq!(c.sample_fresh(7, &used).id, 0);
    }
}
