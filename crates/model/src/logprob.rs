//! Log-probabilities of completions given prompts, on the training path.
use std::ops::Range;

use candle_core::Tensor;

use crate::error::{ModelError, Result};
use crate::model::{Decoder, LayerCheckpoints, TrainMemory, TrainOps, train_ops};

/// One (prompt, completion) pair of token ids.
#[derive(Debug, Clone, Copy)]
pub struct Pair<'a> {
    /// Prompt ids (at least one).
    pub prompt: &'a [u32],
    /// Completion ids whose log-probabilities are wanted.
    pub completion: &'a [u32],
}

/// Per-token log-probabilities of the completion tokens only, concatenated in batch order:
/// a tensor `(sum of completion lengths,)` that stays on the autograd graph.
///
/// Rows are right-padded to a common length and run as one batch; only the hidden states that
/// predict completion tokens go through the LM head, so prompt tokens cost no vocabulary-sized
/// work.
pub fn completion_logprobs(model: &Decoder, batch: &[Pair]) -> Result<Tensor> {
    let whole: Vec<Range<usize>> = batch.iter().map(|p| 0..p.completion.len()).collect();
    let rows: Vec<Spans> = batch
        .iter()
        .zip(&whole)
        .map(|(p, w)| Spans {
            prompt: p.prompt,
            completion: p.completion,
            spans: std::slice::from_ref(w),
        })
        .collect();
    span_logprobs(model, &rows)
}

/// A (prompt, completion) pair of which only some ranges of the completion are scored: a
/// multi-turn episode as one sequence, where observation tokens are context only.
#[derive(Debug, Clone, Copy)]
pub struct Spans<'a> {
    /// Prompt ids (at least one).
    pub prompt: &'a [u32],
    /// Everything after the prompt.
    pub completion: &'a [u32],
    /// Ranges of `completion` to score, in order and not overlapping.
    pub spans: &'a [Range<usize>],
}

/// Log-probabilities of the tokens in each row's spans, concatenated in batch and span order:
/// a tensor `(sum of span lengths,)` on the autograd graph. Only the hidden states that predict
/// a scored token go through the LM head.
pub fn span_logprobs(model: &Decoder, batch: &[Spans]) -> Result<Tensor> {
    Ok(span_logprobs_and_entropy(model, batch)?.0)
}

/// [`span_logprobs`] and, beside it, the entropy in nats of the policy's whole next-token
/// distribution at each scored position, `-sum_v p(v) log p(v)`: two tensors `(sum of span
/// lengths,)`, both on the autograd graph.
pub fn span_logprobs_and_entropy(model: &Decoder, batch: &[Spans]) -> Result<(Tensor, Tensor)> {
    let (ids, targets) = span_ids(model, batch)?;
    let hidden = model.hidden_train(&ids)?;
    logprobs_and_entropy(model, batch, &hidden, &targets)
}

/// [`span_logprobs_and_entropy`] for a model's own update, with the model's
/// [`TrainMemory`]: with [`TrainMemory::Checkpointed`] (or [`TrainMemory::Saved`]) the two
/// tensors' graph reaches back to the last layer's output only, and the checkpoints returned
/// beside them carry the gradient on through the layers ([`Decoder::backward_layers`]); with
/// [`TrainMemory::Kept`] there are none, and the graph is whole.
pub fn span_logprobs_and_entropy_for_update(
    model: &Decoder,
    batch: &[Spans],
) -> Result<(Tensor, Tensor, Option<LayerCheckpoints>)> {
    let (ids, targets) = span_ids(model, batch)?;
    let (hidden, ck) = match model.train_memory() {
        TrainMemory::Checkpointed | TrainMemory::Saved => {
            let (hidden, ck) = model.hidden_train_checkpointed(&ids)?;
            (hidden, Some(ck))
        }
        TrainMemory::Kept => (model.hidden_train(&ids)?, None),
    };
    let (lp, entropy) = logprobs_and_entropy(model, batch, &hidden, &targets)?;
    Ok((lp, entropy, ck))
}

/// The log-probabilities of `targets` and the entropies at the positions of `batch`'s spans
/// in `hidden`.
fn logprobs_and_entropy(
    model: &Decoder,
    batch: &[Spans],
    hidden: &Tensor,
    targets: &[u32],
) -> Result<(Tensor, Tensor)> {
    let logits = span_logits(model, batch, hidden)?;
    if model.train_ops() == TrainOps::Fused {
        return Ok(train_ops::target_logprob_entropy(&logits, targets)?);
    }
    let logp = train_ops::log_softmax(&logits)?;
    let ids = Tensor::from_slice(targets, (targets.len(), 1), logits.device())?;
    let lp = logp.gather(&ids, candle_core::D::Minus1)?.squeeze(1)?;
    let entropy = logp.exp()?.mul(&logp)?.sum(candle_core::D::Minus1)?.neg()?;
    Ok((lp, entropy))
}

/// The rows of `batch` right-padded to one length `(b, width)`, and the scored tokens in
/// batch and span order (`n`).
fn span_ids(model: &Decoder, batch: &[Spans]) -> Result<(Tensor, Vec<u32>)> {
    let device = model.device();
    let width = batch
        .iter()
        .map(|p| p.prompt.len() + p.completion.len())
        .max()
        .unwrap_or(0);
    let mut ids = Vec::with_capacity(batch.len() * width);
    let mut targets = Vec::new();
    for p in batch {
        if p.prompt.is_empty() {
            return Err(ModelError::InvalidParameter("a prompt is empty".into()));
        }
        let mut end = 0;
        for r in p.spans {
            if r.start < end || r.end > p.completion.len() || r.start > r.end {
                return Err(ModelError::InvalidParameter(format!(
                    "span {r:?} is out of order or outside a completion of {} tokens",
                    p.completion.len()
                )));
            }
            end = r.end;
            targets.extend_from_slice(&p.completion[r.clone()]);
        }
        ids.extend_from_slice(p.prompt);
        ids.extend_from_slice(p.completion);
        ids.resize(ids.len() + width - p.prompt.len() - p.completion.len(), 0);
    }
    if targets.is_empty() {
        return Err(ModelError::InvalidParameter(
            "every completion is empty".into(),
        ));
    }
    Ok((
        Tensor::from_vec(ids, (batch.len(), width), device)?,
        targets,
    ))
}

/// The logits over the vocabulary at every position of `hidden` `(b, width, hidden)` that
/// predicts a scored token of `batch`, `(n, vocab)`.
fn span_logits(model: &Decoder, batch: &[Spans], hidden: &Tensor) -> Result<Tensor> {
    let mut rows = Vec::new();
    for (r, p) in batch.iter().enumerate() {
        let row = hidden.get(r)?;
        for span in p.spans.iter().filter(|s| !s.is_empty()) {
            rows.push(row.narrow(0, p.prompt.len() - 1 + span.start, span.len())?);
        }
    }
    let picked = Tensor::cat(&rows, 0)?;
    Ok(model.lm_head_train(&picked)?)
}
