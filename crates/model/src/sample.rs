//! Seeded sampling: temperature, top-k, top-p, stop strings, EOS, and groups of completions
//! that share one prefilled KV cache.
use candle_core::{Device, Tensor};
use rand::{Rng, SeedableRng, rngs::StdRng};
use tokenizers::Tokenizer;

use crate::dry::Dry;
use crate::error::{ModelError, Result};
use crate::load::LoadedModel;
use crate::model::{Decoder, KvCache};
use crate::pyguard::PythonGuard;

/// Sampling settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplingParams {
    /// Softmax temperature; 0 means greedy.
    pub temperature: f64,
    /// Nucleus mass in (0, 1]; 1 disables it.
    pub top_p: f64,
    /// Keep only the k most likely tokens; 0 disables it.
    pub top_k: usize,
    /// Most tokens generated per completion.
    pub max_new_tokens: usize,
    /// Strings that end a completion (excluded from its text).
    pub stop: Vec<String>,
    /// Seed; completion `i` of a group draws from its own stream derived from it.
    pub seed: u64,
    /// The DRY penalty against loops ([`crate::dry`]); `None`: off.
    pub dry: Option<Dry>,
    /// The lexical guard over Python in the completion ([`crate::pyguard`]), in its starting
    /// state; `None`: off. A token it refuses is masked and redrawn from the same stream, up to
    /// [`MAX_GUARD_REDRAWS`] times a token.
    pub python_guard: Option<PythonGuard>,
}

/// Most redraws of one token that the Python guard refuses. After them the most likely token
/// the guard allows is taken (the whole vocabulary searched, in order of logit); only if none
/// is allowed is the last draw kept, which ends the guarding ([`PythonGuard::feed`]). A
/// guard never stalls a completion.
pub const MAX_GUARD_REDRAWS: usize = 32;

impl Default for SamplingParams {
    fn default() -> Self {
        Self {
            temperature: 1.0,
            top_p: 1.0,
            top_k: 0,
            max_new_tokens: 128,
            stop: Vec::new(),
            seed: 0,
            dry: None,
            python_guard: None,
        }
    }
}

/// Why a completion ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-sequence token was sampled (it is the last token).
    Eos,
    /// A stop string appeared in the text.
    Stop,
    /// `max_new_tokens` was reached.
    Length,
}

/// One sampled completion.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// Sampled token ids, including a final EOS token if one ended it, and the token that
    /// completed a stop string (whose text may extend past the cut).
    pub tokens: Vec<u32>,
    /// Decoded text without special tokens, cut before a stop string.
    pub text: String,
    /// Log-probability of each token under the model's untempered distribution (temperature 1,
    /// no truncation): the quantity the training path recomputes for importance ratios.
    pub logprobs: Vec<f32>,
    /// Why it ended.
    pub finish: FinishReason,
}

/// Derives the stream seed of completion `i` (SplitMix64 of `seed + i`).
fn stream_seed(seed: u64, i: usize) -> u64 {
    let mut z = seed.wrapping_add((i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Picks a token from `logits`; returns it with its untempered log-probability.
pub fn pick(logits: &[f32], params: &SamplingParams, rng: &mut StdRng) -> (u32, f32) {
    let tok = choose(logits, params, rng);
    (tok, model_logprob(logits, tok))
}

/// The token that temperature, top-k and top-p draw from `logits`.
fn choose(logits: &[f32], params: &SamplingParams, rng: &mut StdRng) -> u32 {
    let max = max_of(logits);
    let argmax = || {
        let mut best = 0;
        for (i, &l) in logits.iter().enumerate() {
            if l > logits[best] {
                best = i;
            }
        }
        best
    };
    let chosen = if params.temperature <= 0.0 {
        argmax()
    } else {
        let inv_t = 1.0 / params.temperature as f32;
        let weight_of = |l: f32| f64::from((l - max) * inv_t).exp();
        let cut_k = params.top_k > 0 && params.top_k < logits.len();
        if !cut_k && params.top_p >= 1.0 {
            // Every token, in vocabulary order: the weights are read where they are computed.
            let weights = map_each(logits, weight_of);
            let total: f64 = weights.iter().sum();
            draw(&weights, total, rng).unwrap_or(logits.len() - 1)
        } else {
            let mut cand: Vec<usize> = (0..logits.len()).collect();
            let order = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
            if cut_k {
                cand.select_nth_unstable_by(params.top_k - 1, order);
                cand.truncate(params.top_k);
            }
            // Every token's weight is read when no top-k cut comes first.
            let every = (!cut_k).then(|| map_each(logits, weight_of));
            let weight = |i: usize| {
                every
                    .as_ref()
                    .map_or_else(|| weight_of(logits[i]), |w| w[i])
            };
            let (weights, total, keep) = if params.top_p < 1.0 {
                nucleus(&mut cand, params.top_p, order, weight)
            } else {
                let weights: Vec<f64> = cand.iter().map(|&i| weight(i)).collect();
                let total: f64 = weights.iter().sum();
                let keep = weights.len();
                (weights, total, keep)
            };
            cand[draw(&weights[..keep], total, rng).unwrap_or(keep - 1)]
        }
    };
    chosen as u32
}

/// [`pick`] after subtracting each `(token, penalty)` of `penalties` from its logit; the
/// log-probability returned is still the model's, of the unpenalised logits.
pub fn pick_penalised(
    logits: &[f32],
    penalties: &[(u32, f32)],
    params: &SamplingParams,
    rng: &mut StdRng,
) -> (u32, f32) {
    if penalties.is_empty() {
        return pick(logits, params, rng);
    }
    let tok = choose(&penalise(logits, penalties), params, rng);
    (tok, model_logprob(logits, tok))
}

/// `logits` with each `(token, penalty)` of `penalties` subtracted.
fn penalise(logits: &[f32], penalties: &[(u32, f32)]) -> Vec<f32> {
    let mut penalised = logits.to_vec();
    for &(t, p) in penalties {
        if let Some(l) = penalised.get_mut(t as usize) {
            *l -= p;
        }
    }
    penalised
}

/// The log-probability of `tok` under the untempered `logits`.
fn model_logprob(logits: &[f32], tok: u32) -> f32 {
    logits[tok as usize] - log_sum_exp(logits, max_of(logits))
}

/// The largest logit.
fn max_of(logits: &[f32]) -> f32 {
    logits.iter().copied().fold(f32::NEG_INFINITY, f32::max)
}

/// `log(sum(exp(logits)))`, shifted by their `max`.
fn log_sum_exp(logits: &[f32], max: f32) -> f32 {
    max + map_each(logits, |l| (l - max).exp())
        .iter()
        .sum::<f32>()
        .ln()
}

/// The index that a uniform draw in `[0, total)` lands on when `weights` are laid end to
/// end; `None` when rounding leaves it past the last (the caller takes the last).
fn draw(weights: &[f64], total: f64, rng: &mut StdRng) -> Option<usize> {
    let mut u = rng.random::<f64>() * total;
    for (n, w) in weights.iter().enumerate() {
        if u < *w {
            return Some(n);
        }
        u -= w;
    }
    None
}

/// `f` of every logit, computed on the decode threads (a vocabulary's `exp`s were most of a
/// token's sampling): each value is the one a sequential pass gives, and callers sum them in
/// order, so the results do not change.
fn map_each<T: Send + Default + Clone>(logits: &[f32], f: impl Fn(f32) -> T + Sync) -> Vec<T> {
    const CHUNK: usize = 4096;
    let mut out = vec![T::default(); logits.len()];
    crate::model::kernels::decode_pool::for_each_chunk_mut(&mut out, CHUNK, |c, chunk| {
        for (o, &l) in chunk.iter_mut().zip(&logits[c * CHUNK..]) {
            *o = f(l);
        }
    });
    out
}

/// The nucleus of `cand`: sorts its most likely tokens to the front (by `order`) until their
/// weights reach `top_p` of the total, without sorting the whole vocabulary (the front is
/// grown by doubling, each round one selection over the candidates). Returns the weights of
/// the sorted front, the total weight of the kept tokens and how many are kept; the kept
/// tokens and their order are those a full sort gives.
fn nucleus(
    cand: &mut [usize],
    top_p: f64,
    order: impl Fn(&usize, &usize) -> std::cmp::Ordering + Copy,
    weight: impl Fn(usize) -> f64,
) -> (Vec<f64>, f64, usize) {
    let all: f64 = cand.iter().map(|&i| weight(i)).sum();
    let mut front = 64.min(cand.len());
    loop {
        if front < cand.len() {
            cand.select_nth_unstable_by(front - 1, order);
        }
        cand[..front].sort_unstable_by(order);
        let weights: Vec<f64> = cand[..front].iter().map(|&i| weight(i)).collect();
        let mut acc = 0.0;
        for (n, w) in weights.iter().enumerate() {
            acc += w;
            if acc >= top_p * all {
                return (weights[..=n].to_vec(), weights[..=n].iter().sum(), n + 1);
            }
        }
        if front == cand.len() {
            let total = weights.iter().sum();
            return (weights, total, front);
        }
        front = (2 * front).min(cand.len());
    }
}

/// Samples from a decoder with its tokenizer.
#[derive(Clone, Copy)]
pub struct Sampler<'a> {
    model: &'a Decoder,
    tokenizer: &'a Tokenizer,
    eos_ids: &'a [u32],
    on_step: Option<&'a (dyn Fn(u64) + Send + Sync)>,
}

impl std::fmt::Debug for Sampler<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("eos_ids", &self.eos_ids)
            .field("step_hook", &self.on_step.is_some())
            .finish_non_exhaustive()
    }
}

/// A prompt run through the model: its single-row cache and the logits of the next token.
#[derive(Debug)]
pub struct Prefilled {
    /// The prompt's keys and values.
    pub cache: KvCache,
    /// Logits of the token after the prompt.
    pub logits: Vec<f32>,
}

struct Row {
    rng: StdRng,
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    /// The text of `tokens[..read]`.
    text: String,
    /// Where the decoding window of [`Sampler::extend_text`] starts.
    prefix: usize,
    /// Tokens whose text is in `text`.
    read: usize,
    emitted: usize,
    finish: Option<FinishReason>,
    /// The Python guard after `text` (`None`: off, or nothing left to guard).
    guard: Option<PythonGuard>,
}

impl<'a> Sampler<'a> {
    /// A sampler over `model`, ending completions at any of `eos_ids`.
    pub fn new(model: &'a Decoder, tokenizer: &'a Tokenizer, eos_ids: &'a [u32]) -> Self {
        Self {
            model,
            tokenizer,
            eos_ids,
            on_step: None,
        }
    }

    /// Calls `hook(n)` after every decode step with the number of tokens it sampled.
    pub fn with_step_hook(mut self, hook: &'a (dyn Fn(u64) + Send + Sync)) -> Self {
        self.on_step = Some(hook);
        self
    }

    /// A sampler over a loaded model.
    pub fn from_loaded(m: &'a LoadedModel) -> Self {
        Self::new(&m.model, &m.tokenizer, &m.eos_ids)
    }

    /// Token ids of `text`, special tokens (e.g. `<|im_start|>`) recognised.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        Ok(self
            .tokenizer
            .encode(text, false)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))?
            .get_ids()
            .to_vec())
    }

    fn decode(&self, ids: &[u32]) -> Result<String> {
        self.tokenizer
            .decode(ids, true)
            .map_err(|e| ModelError::Tokenizer(e.to_string()))
    }

    fn check(&self, prompt: &[u32], n: usize, p: &SamplingParams) -> Result<()> {
        let bad = |m: String| Err(ModelError::InvalidParameter(m));
        if prompt.is_empty() {
            return bad("the prompt is empty".into());
        }
        self.check_params(prompt.len(), n, p)?;
        let vocab = self.model.config().vocab_size as u32;
        if let Some(t) = prompt.iter().find(|&&t| t >= vocab) {
            return bad(format!(
                "prompt token {t} is outside the vocabulary of {vocab}"
            ));
        }
        Ok(())
    }

    fn check_params(&self, prompt_len: usize, n: usize, p: &SamplingParams) -> Result<()> {
        let bad = |m: String| Err(ModelError::InvalidParameter(m));
        if n == 0 {
            return bad("the group size must be at least 1".into());
        }
        if !(p.temperature >= 0.0 && p.temperature.is_finite()) {
            return bad(format!("temperature must be >= 0, got {}", p.temperature));
        }
        if !(p.top_p > 0.0 && p.top_p <= 1.0) {
            return bad(format!("top_p must be in (0, 1], got {}", p.top_p));
        }
        if let Some(Err(m)) = p.dry.map(|d| d.check()) {
            return bad(m);
        }
        let max = self.model.config().max_position_embeddings;
        if prompt_len + p.max_new_tokens > max {
            return bad(format!(
                "prompt ({prompt_len} tokens) plus max new tokens ({}) exceeds the context of {max}",
                p.max_new_tokens
            ));
        }
        Ok(())
    }

    /// Samples `n` completions of `prompt`, prefilling it once and sharing the cache.
    ///
    /// `on_text(i, delta)` receives completion `i`'s text as it grows (held back while it
    /// could be the start of a stop string). The same seed gives the same completions.
    pub fn sample(
        &self,
        prompt: &[u32],
        n: usize,
        params: &SamplingParams,
        on_text: &mut dyn FnMut(usize, &str),
    ) -> Result<Vec<Completion>> {
        self.check(prompt, n, params)?;
        let rngs = (0..n)
            .map(|i| StdRng::seed_from_u64(stream_seed(params.seed, i)))
            .collect();
        if params.max_new_tokens == 0 {
            return Ok(self
                .run_rows(KvCache::new(0), vec![], rngs, params, false, on_text)?
                .into_iter()
                .map(|(c, _)| c)
                .collect());
        }
        let first = self.prefill(prompt, None)?;
        let cache = if n > 1 {
            first.cache.expand(n)?
        } else {
            first.cache
        };
        Ok(self
            .run_rows(cache, vec![first.logits; n], rngs, params, false, on_text)?
            .into_iter()
            .map(|(c, _)| c)
            .collect())
    }

    /// Runs `prompt` through the model into a fresh single-row cache, or after `reuse`: a
    /// single-row cache (from [`Sampler::sample_rows`] or [`KvCache::truncate`]) that holds
    /// exactly the first `reuse.len()` tokens of `prompt`, fewer than all of them.
    pub fn prefill(&self, prompt: &[u32], reuse: Option<KvCache>) -> Result<Prefilled> {
        let mut cache = reuse.unwrap_or_else(|| self.model.new_cache());
        let done = cache.len();
        if cache.rows() > 1 || done >= prompt.len() {
            return Err(ModelError::InvalidParameter(format!(
                "a reused cache must be one row shorter than the prompt ({} rows, {done} of {} tokens)",
                cache.rows(),
                prompt.len()
            )));
        }
        let input = Tensor::new(&prompt[done..], self.model.device())?.unsqueeze(0)?;
        let logits = self
            .model
            .forward(&input, &mut cache)?
            .squeeze(0)?
            .to_vec1()?;
        Ok(Prefilled { cache, logits })
    }

    /// Samples one completion for each prefilled prompt, all rows decoding as one batch.
    /// Row `r` draws from the stream of `seeds[r]`, so it gets the completion that
    /// [`Sampler::sample`] gives for that prompt with `n = 1` and that seed (up to float
    /// rounding of the batched kernels). With `keep_caches`, each row also returns its cache
    /// (the prompt and every completion token but the last), ready to be reused by
    /// [`Sampler::prefill`] for a longer prompt that continues it.
    pub fn sample_rows(
        &self,
        rows: Vec<(Prefilled, u64)>,
        params: &SamplingParams,
        keep_caches: bool,
        on_text: &mut dyn FnMut(usize, &str),
    ) -> Result<Vec<(Completion, Option<KvCache>)>> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut caches = Vec::with_capacity(rows.len());
        let mut logits = Vec::with_capacity(rows.len());
        let mut rngs = Vec::with_capacity(rows.len());
        for (p, seed) in rows {
            let len = p.cache.positions().first().copied().unwrap_or(0);
            self.check_params(len, 1, params)?;
            caches.push(p.cache);
            logits.push(p.logits);
            rngs.push(StdRng::seed_from_u64(stream_seed(seed, 0)));
        }
        let cache = if caches.len() == 1 {
            caches.pop().expect("one cache")
        } else {
            KvCache::stack(caches)?
        };
        self.run_rows(cache, logits, rngs, params, keep_caches, on_text)
    }

    /// The decode loop shared by every entry point: row `i` starts from `logits[i]` and
    /// `cache` row `i`; finished rows leave the batch (keeping their cache when asked).
    fn run_rows(
        &self,
        mut cache: KvCache,
        mut logits: Vec<Vec<f32>>,
        rngs: Vec<StdRng>,
        params: &SamplingParams,
        keep_caches: bool,
        on_text: &mut dyn FnMut(usize, &str),
    ) -> Result<Vec<(Completion, Option<KvCache>)>> {
        let device: &Device = self.model.device();
        let n = rngs.len();
        let mut rows: Vec<Row> = rngs
            .into_iter()
            .map(|rng| Row {
                rng,
                tokens: Vec::new(),
                logprobs: Vec::new(),
                text: String::new(),
                prefix: 0,
                read: 0,
                emitted: 0,
                finish: None,
                guard: params.python_guard.clone(),
            })
            .collect();
        let mut kept: Vec<Option<KvCache>> = (0..n).map(|_| None).collect();
        if params.max_new_tokens == 0 {
            return Ok(rows
                .into_iter()
                .map(|r| (finish(r, FinishReason::Length), None))
                .collect());
        }
        let mut active: Vec<usize> = (0..n).collect();
        loop {
            for (slot, &i) in active.iter().enumerate() {
                let row = &mut rows[i];
                let penalties = params
                    .dry
                    .map(|d| d.penalties(&row.tokens))
                    .unwrap_or_default();
                let (tok, lp) = self.pick_guarded(&logits[slot], penalties, params, row)?;
                row.tokens.push(tok);
                row.logprobs.push(lp);
                self.update(i, row, params, on_text)?;
            }
            if let Some(hook) = self.on_step {
                hook(active.len() as u64);
            }
            let keep: Vec<u32> = active
                .iter()
                .enumerate()
                .filter(|(_, i)| rows[**i].finish.is_none())
                .map(|(slot, _)| slot as u32)
                .collect();
            if keep_caches {
                for (slot, &i) in active.iter().enumerate() {
                    if rows[i].finish.is_some() {
                        kept[i] = Some(cache.row(slot)?);
                    }
                }
            }
            if keep.is_empty() {
                break;
            }
            if keep.len() != active.len() {
                cache.select_rows(&keep)?;
                active = keep.iter().map(|&s| active[s as usize]).collect();
            }
            let next: Vec<u32> = active
                .iter()
                .map(|&i| *rows[i].tokens.last().expect("sampled"))
                .collect();
            let input = Tensor::new(next.as_slice(), device)?.unsqueeze(1)?;
            logits = self.model.forward(&input, &mut cache)?.to_vec2()?;
        }
        Ok(rows
            .into_iter()
            .zip(kept)
            .map(|(r, c)| {
                let f = r.finish.unwrap_or(FinishReason::Length);
                (finish(r, f), c)
            })
            .collect())
    }

    /// Picks the row's next token; while its Python guard is in the code, a token the guard
    /// refuses is masked and drawn again (the same stream), up to [`MAX_GUARD_REDRAWS`] times,
    /// then the most likely allowed token is taken.
    fn pick_guarded(
        &self,
        logits: &[f32],
        mut penalties: Vec<(u32, f32)>,
        params: &SamplingParams,
        row: &mut Row,
    ) -> Result<(u32, f32)> {
        let Some(guard) = row.guard.as_ref().filter(|g| g.in_code_now()) else {
            return Ok(pick_penalised(logits, &penalties, params, &mut row.rng));
        };
        // The text decoded so far: decoded once for every candidate of this pick.
        let read = self.read_text(row)?;
        let read = read.as_str();
        let mut redraws = 0;
        loop {
            let (tok, lp) = pick_penalised(logits, &penalties, params, &mut row.rng);
            if self.guard_allows(guard, row, read, tok)? {
                return Ok((tok, lp));
            }
            penalties.push((tok, f32::INFINITY));
            redraws += 1;
            if redraws == MAX_GUARD_REDRAWS {
                let best = self.most_likely_allowed(logits, &penalties, guard, row, read)?;
                return Ok(best.map_or((tok, lp), |t| (t, model_logprob(logits, t))));
            }
        }
    }

    /// Whether the row's guard allows `tok` next (an end-of-sequence token always: a guard
    /// does not keep a completion going).
    fn guard_allows(&self, guard: &PythonGuard, row: &Row, read: &str, tok: u32) -> Result<bool> {
        Ok(self.eos_ids.contains(&tok) || guard.allows(&self.candidate_text(row, read, tok)?))
    }

    /// The token of highest penalised logit (ties: lowest id) that the guard allows, if any.
    fn most_likely_allowed(
        &self,
        logits: &[f32],
        penalties: &[(u32, f32)],
        guard: &PythonGuard,
        row: &Row,
        read: &str,
    ) -> Result<Option<u32>> {
        let penalised = penalise(logits, penalties);
        let mut order: Vec<u32> = (0..logits.len() as u32)
            .filter(|&t| penalised[t as usize] > f32::NEG_INFINITY)
            .collect();
        order.sort_by(|&a, &b| {
            penalised[b as usize]
                .total_cmp(&penalised[a as usize])
                .then(a.cmp(&b))
        });
        for t in order {
            if self.guard_allows(guard, row, read, t)? {
                return Ok(Some(t));
            }
        }
        Ok(None)
    }

    /// The decoding of the row's window up to `read`: what [`Sampler::extend_text`] compares
    /// a new decoding with.
    fn read_text(&self, row: &Row) -> Result<String> {
        self.decode(&row.tokens[row.prefix..row.read])
    }

    /// The text that `tok` would add to the row (with any tokens still pending), as
    /// [`Sampler::extend_text`] would append it; `read` is [`Sampler::read_text`].
    fn candidate_text(&self, row: &Row, read: &str, tok: u32) -> Result<String> {
        let mut ids = row.tokens[row.prefix..].to_vec();
        ids.push(tok);
        let new = self.decode(&ids)?;
        Ok(new[common_prefix(read, &new)..].to_string())
    }

    /// Extends row `i`'s text by its new token, checks EOS, stop strings and length, and
    /// streams new text. The work per token does not grow with the completion: only a window
    /// of the last tokens is decoded ([`Sampler::extend_text`]) and only the text that the new
    /// token could have completed a stop string in is searched.
    fn update(
        &self,
        i: usize,
        row: &mut Row,
        params: &SamplingParams,
        on_text: &mut dyn FnMut(usize, &str),
    ) -> Result<()> {
        let last = *row.tokens.last().expect("a token was just pushed");
        let eos = self.eos_ids.contains(&last);
        let at_length = row.tokens.len() >= params.max_new_tokens;
        let before = row.text.len();
        self.extend_text(row, eos || at_length)?;
        if let Some(guard) = &mut row.guard {
            guard.feed(&row.text[before..]);
            if guard.done() {
                row.guard = None;
            }
        }
        if eos {
            row.finish = Some(FinishReason::Eos);
        } else if let Some(cut) = find_stop(&row.text, before, &params.stop) {
            row.text.truncate(cut);
            row.finish = Some(FinishReason::Stop);
        } else if at_length {
            row.finish = Some(FinishReason::Length);
        }
        let text = &row.text;
        // Stream what is final: not an incomplete UTF-8 sequence, not a possible stop prefix.
        let mut safe = text.len();
        if row.finish.is_none() {
            if text.ends_with('\u{FFFD}') {
                safe = text.trim_end_matches('\u{FFFD}').len();
            }
            for s in &params.stop {
                for k in (1..s.len()).rev() {
                    if s.is_char_boundary(k) && text[..safe].ends_with(&s[..k]) {
                        safe -= k;
                        break;
                    }
                }
            }
        }
        if safe > row.emitted && text.is_char_boundary(safe) && text.is_char_boundary(row.emitted) {
            on_text(i, &text[row.emitted..safe]);
            row.emitted = safe;
        }
        Ok(())
    }

    /// Appends the text of the row's tokens after `read` (decoded in a window that starts a
    /// few tokens earlier, at `prefix`, so that a tokenizer whose decoding of a token depends
    /// on its left neighbours gives the same text as decoding the whole row). While the new
    /// bytes end in an incomplete UTF-8 sequence the tokens wait, up to [`MAX_PENDING`] of
    /// them; `flush` appends whatever is pending (the completion ends).
    fn extend_text(&self, row: &mut Row, flush: bool) -> Result<()> {
        let window = &row.tokens[row.prefix..];
        let old = self.decode(&window[..row.read - row.prefix])?;
        let new = self.decode(window)?;
        let pending = row.tokens.len() - row.read;
        if !flush && new.ends_with('\u{FFFD}') && pending < MAX_PENDING {
            return Ok(());
        }
        row.text.push_str(&new[common_prefix(&old, &new)..]);
        row.prefix = row.read;
        row.read = row.tokens.len();
        Ok(())
    }
}

/// The length of the common prefix of two decodings, in whole characters.
fn common_prefix(old: &str, new: &str) -> usize {
    old.char_indices()
        .zip(new.chars())
        .find(|((_, a), b)| a != b)
        .map_or(old.len().min(new.len()), |((at, _), _)| at)
}

/// Most tokens held back while their bytes are not yet valid UTF-8 (a model can emit bytes
/// that never become valid; their replacement characters are then kept).
const MAX_PENDING: usize = 8;

/// The start of the first stop string in `text` that ends after `checked` (the length of the
/// text already searched without a match), searching only where such a match can start.
pub fn find_stop(text: &str, checked: usize, stop: &[String]) -> Option<usize> {
    stop.iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| {
            let mut from = checked.saturating_sub(s.len() - 1).min(text.len());
            while !text.is_char_boundary(from) {
                from -= 1;
            }
            text[from..].find(s.as_str()).map(|at| from + at)
        })
        .min()
}

fn finish(r: Row, f: FinishReason) -> Completion {
    Completion {
        tokens: r.tokens,
        text: r.text,
        logprobs: r.logprobs,
        finish: f,
    }
}
