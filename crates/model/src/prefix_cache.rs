//! Reuse of computed prompt prefixes across the turns of multi-turn conversations.
//!
//! An agent's prompt at turn `k + 1` is its prompt at turn `k`, its completion and the next
//! observation. Keeping each conversation's KV cache lets the next turn prefill only what is
//! new instead of the whole chat again. Entries are matched by the longest common token
//! prefix, so nothing depends on the caller naming conversations, and a cache is only ever
//! used for the tokens it really holds.
use crate::model::KvCache;

/// Single-row caches keyed by the tokens they hold, oldest first.
#[derive(Debug, Default)]
pub struct PrefixCache {
    entries: Vec<(Vec<u32>, KvCache)>,
    max_tokens: usize,
}

impl PrefixCache {
    /// A store holding at most `max_tokens` cached positions in all (oldest dropped first).
    pub fn new(max_tokens: usize) -> Self {
        Self {
            entries: Vec::new(),
            max_tokens,
        }
    }

    /// Removes and returns the entry sharing the longest prefix with `prompt`, cut to that
    /// prefix and to at most `prompt.len() - 1` tokens (the last prompt token must run to give
    /// logits). `None` when no entry shares a token.
    pub fn take(&mut self, prompt: &[u32]) -> Option<KvCache> {
        let (best, lcp) = self
            .entries
            .iter()
            .enumerate()
            .map(|(i, (tokens, _))| (i, common_prefix(tokens, prompt)))
            .max_by_key(|&(i, n)| (n, i))?;
        let keep = lcp.min(prompt.len().saturating_sub(1));
        if keep == 0 {
            return None;
        }
        let (_, mut cache) = self.entries.remove(best);
        cache.truncate(keep).ok()?;
        Some(cache)
    }

    /// Stores `cache`, which holds exactly `tokens`; drops the oldest entries past the budget.
    pub fn insert(&mut self, tokens: Vec<u32>, cache: KvCache) {
        if tokens.len() != cache.len() || tokens.len() > self.max_tokens {
            return;
        }
        self.entries.push((tokens, cache));
        while self.tokens() > self.max_tokens {
            self.entries.remove(0);
        }
    }

    /// Stores the cache [`crate::sample::Sampler::sample_rows`] kept for a row: `prompt` and
    /// every `completion` token but the last (which was sampled, never run).
    pub fn insert_completed(&mut self, prompt: &[u32], completion: &[u32], cache: KvCache) {
        let mut held = prompt.to_vec();
        held.extend_from_slice(&completion[..completion.len().saturating_sub(1)]);
        self.insert(held, cache);
    }

    /// Positions held in all.
    pub fn tokens(&self) -> usize {
        self.entries.iter().map(|(t, _)| t.len()).sum()
    }

    /// Drops everything (the weights changed, or the conversations ended).
    pub fn clear(&mut self) {
        self.entries.clear();
    }
}

fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Decoder, ModelConfig};
    use candle_core::{Device, Tensor};

    fn cached(model: &Decoder, tokens: &[u32]) -> KvCache {
        let mut c = model.new_cache();
        let ids = Tensor::new(tokens, &Device::Cpu)
            .unwrap()
            .unsqueeze(0)
            .unwrap();
        model.forward(&ids, &mut c).unwrap();
        c
    }

    #[test]
    fn longest_prefix_wins_and_is_cut_to_leave_a_token() {
        let (model, _vm) =
            Decoder::random(&ModelConfig::tiny("llama"), 1, 0.2, &Device::Cpu).unwrap();
        let mut store = PrefixCache::new(100);
        store.insert(vec![1, 2, 3], cached(&model, &[1, 2, 3]));
        store.insert(vec![1, 2, 9, 9], cached(&model, &[1, 2, 9, 9]));
        assert!(store.take(&[7, 7]).is_none(), "no shared token");
        let c = store.take(&[1, 2, 3, 4, 5]).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(store.tokens(), 4, "the taken entry left the store");
        // The prompt equals the cached tokens: one token is left to run.
        let c = store.take(&[1, 2, 9, 9]).unwrap();
        assert_eq!(c.len(), 3);
        assert_eq!(store.tokens(), 0);
    }

    #[test]
    fn oldest_entries_leave_past_the_budget() {
        let (model, _vm) =
            Decoder::random(&ModelConfig::tiny("llama"), 1, 0.2, &Device::Cpu).unwrap();
        let mut store = PrefixCache::new(5);
        store.insert(vec![1, 2, 3], cached(&model, &[1, 2, 3]));
        store.insert(vec![4, 5, 6], cached(&model, &[4, 5, 6]));
        assert_eq!(store.tokens(), 3);
        assert!(store.take(&[1, 2, 3, 4]).is_none());
        assert_eq!(store.take(&[4, 5, 6, 7]).unwrap().len(), 3);
        store.insert(vec![1, 2], cached(&model, &[1, 2, 3]));
        assert_eq!(store.tokens(), 0, "a cache must hold exactly its tokens");
    }
}
