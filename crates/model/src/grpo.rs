//! GRPO: a clipped policy-gradient update on samples whose advantages were assigned by the
//! caller (see `selfplay::credit`), with optional KL to a frozen reference, gradient clipping,
//! accumulation over micro-batches, several optimiser steps per batch and a learning-rate
//! schedule.
//!
//! The loss is aggregated as the SPADE reference does (slime's `loss.py`): the token mean
//! within each sample, then the mean over samples ([`LossAggregation::SampleMean`]), and each
//! token's policy-gradient term is weighted by truncated importance sampling,
//! `min(clamp, exp(logp_train - logp_rollout))` ([`GrpoConfig::tis_clamp`]), which corrects for
//! a sampler that read other weights than training, or an older policy. An optional entropy
//! bonus ([`GrpoConfig::entropy_coef`]) pushes the policy's next-token distributions to stay
//! spread.
use std::ops::Range;

use candle_core::Tensor;

use crate::error::{ModelError, Result};
use crate::logprob::{Spans, span_logprobs, span_logprobs_and_entropy_for_update};
use crate::model::{Decoder, LayerCheckpoints};
use crate::optim::AdamW;
use crate::schedule::LrSchedule;

/// One trained sequence with its advantage.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpoSample {
    /// Prompt ids.
    pub prompt: Vec<u32>,
    /// Everything after the prompt: one completion, or a multi-turn episode's completions with
    /// the observations between them.
    pub completion: Vec<u32>,
    /// The ranges of `completion` that the policy sampled and that are trained; the rest is
    /// context only.
    pub spans: Vec<Range<usize>>,
    /// Log-probabilities recorded when sampling, one per trained token, in order.
    pub old_logprobs: Vec<f32>,
    /// The advantage every trained token of this sequence gets.
    pub advantage: f64,
}

impl GrpoSample {
    /// A sample whose whole completion is trained.
    pub fn new(
        prompt: Vec<u32>,
        completion: Vec<u32>,
        old_logprobs: Vec<f32>,
        advantage: f64,
    ) -> Self {
        let spans = if completion.is_empty() {
            Vec::new()
        } else {
            std::iter::once(0..completion.len()).collect()
        };
        Self {
            prompt,
            completion,
            spans,
            old_logprobs,
            advantage,
        }
    }

    /// Tokens trained (the spans' total length).
    pub fn trained_tokens(&self) -> usize {
        self.spans.iter().map(|r| r.len()).sum()
    }

    /// This sample's first `max_tokens` tokens (prompt and completion together): the
    /// completion past them goes, with the trained tokens there and their old log-probs.
    /// `None` when no trained token is left (the prompt alone fills `max_tokens`). A sample
    /// that fits is returned whole.
    pub fn cut_to(&self, max_tokens: usize) -> Option<GrpoSample> {
        let keep = max_tokens.checked_sub(self.prompt.len())?;
        if keep >= self.completion.len() {
            return (self.trained_tokens() > 0).then(|| self.clone());
        }
        let spans: Vec<Range<usize>> = self
            .spans
            .iter()
            .filter(|r| r.start < keep)
            .map(|r| r.start..r.end.min(keep))
            .collect();
        let trained: usize = spans.iter().map(|r| r.len()).sum();
        (trained > 0).then(|| GrpoSample {
            prompt: self.prompt.clone(),
            completion: self.completion[..keep].to_vec(),
            spans,
            old_logprobs: self.old_logprobs[..trained].to_vec(),
            advantage: self.advantage,
        })
    }
}

/// How per-token losses become the step's loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LossAggregation {
    /// The token mean within each sample, then the mean over samples (the reference's, slime
    /// `loss.py` with per-sample means): a 25-turn episode weighs as much as a 1-turn one.
    #[default]
    SampleMean,
    /// The mean over every trained token of the step: a sample weighs by its length.
    TokenMean,
}

/// GRPO hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpoConfig {
    /// Ratio clip range, low side: the ratio is clipped to `[1 - clip_eps, 1 + clip_eps_high]`.
    pub clip_eps: f64,
    /// Ratio clip range, high side (`None`: `clip_eps`; the reference uses 0.28 against 0.2).
    pub clip_eps_high: Option<f64>,
    /// How per-token losses are aggregated (default: the reference's per-sample mean).
    pub aggregation: LossAggregation,
    /// Truncated importance sampling: each token's policy-gradient term is weighted by
    /// `min(tis_clamp, exp(old - rollout))`, where `old` is the training path's log-prob at
    /// the start of the update and `rollout` the sampler's (reference: 2; 0 disables it).
    /// Without [`Self::recompute_old_logprobs`] the two are the same and every weight is 1.
    pub tis_clamp: f64,
    /// Weight of the KL penalty to the reference model (0 disables it).
    pub kl_coef: f64,
    /// Weight of the entropy bonus: each trained token's loss is lowered by `entropy_coef`
    /// times the policy's entropy (nats) at that position, so the update also pushes the
    /// next-token distribution to stay spread. Once a policy answers a problem the same way in
    /// every play, the group's advantages are all 0 and GRPO alone no longer moves it; this
    /// term still does. With it on, a zero-advantage sample is scored. 0 disables it (the
    /// reference's `--entropy-coef 0.00`).
    pub entropy_coef: f64,
    /// Global gradient-norm clip (0 disables it).
    pub max_grad_norm: f64,
    /// Samples per forward/backward pass; gradients are accumulated across micro-batches.
    pub micro_batch: usize,
    /// Most padded tokens (samples x longest sequence) per micro-batch, 0 for no limit: a
    /// micro-batch closes early when the next sample would pass it, so long sequences train
    /// in smaller groups (a sample longer than the limit trains alone).
    pub micro_batch_tokens: usize,
    /// Optimiser steps per batch ([`GrpoTrainer::update`]): from the second on, the policy
    /// differs from the one that sampled, so the importance ratio moves and clipping acts.
    pub epochs: usize,
    /// The learning rate per optimiser step (`None` leaves the optimiser's rate alone).
    pub schedule: Option<LrSchedule>,
    /// Replace the samples' old log-probabilities by the training path's at the start of
    /// [`GrpoTrainer::update`] (the first step's forward pass, before any optimiser step,
    /// is the sampling policy on the training path, so this costs no extra pass). Needed when
    /// sampling read other weights or kernels than training (quantised decoding): the
    /// importance ratio then compares the training path with itself and starts at exactly 1.
    pub recompute_old_logprobs: bool,
}

impl Default for GrpoConfig {
    fn default() -> Self {
        Self {
            clip_eps: 0.2,
            clip_eps_high: None,
            aggregation: LossAggregation::SampleMean,
            tis_clamp: 2.0,
            kl_coef: 0.0,
            entropy_coef: 0.0,
            max_grad_norm: 1.0,
            micro_batch: 4,
            micro_batch_tokens: 0,
            epochs: 1,
            schedule: None,
            recompute_old_logprobs: false,
        }
    }
}

/// What one optimiser step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    /// Loss, aggregated as [`GrpoConfig::aggregation`] says.
    pub loss: f64,
    /// Mean advantage per trained token.
    pub mean_advantage: f64,
    /// Mean importance ratio over the scored tokens (1 when none was scored).
    pub mean_ratio: f64,
    /// Fraction of the scored tokens whose ratio was outside the clip range.
    pub clip_fraction: f64,
    /// Mean KL estimate to the reference (0 without one).
    pub kl: f64,
    /// Mean entropy (nats) of the policy's next-token distribution per scored token (0 when
    /// none was scored). Without the entropy bonus or a KL term only samples with a nonzero
    /// advantage are scored, so this is their entropy.
    pub entropy: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// The learning rate of the step.
    pub lr: f64,
    /// Completion tokens trained on: the loss is their mean.
    pub tokens: usize,
    /// Trained tokens that went through the model. Without a KL term, a sample whose
    /// advantage is 0 has a surrogate of exactly 0 and no gradient, so it is left out of the
    /// forward and backward passes (it still counts in the loss's mean); the ratio,
    /// clip and gap figures are over these tokens.
    pub scored_tokens: usize,
    /// Mean |training-path log-prob - the sample's old log-prob| per scored token (0 when
    /// none was scored). In the first step of an update, before any optimiser step, this is
    /// the gap between the sampling path (quantised weights, fused kernels) and the training
    /// path.
    pub logprob_gap: f64,
    /// Mean truncated-importance weight per scored token (1 when none was scored or TIS is off).
    pub tis_mean: f64,
    /// Fraction of the scored tokens whose importance weight was cut at the clamp.
    pub tis_clamped_fraction: f64,
}

/// What [`GrpoTrainer::update`] did: one [`StepStats`] per optimiser step.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateStats {
    /// Each step, in order.
    pub steps: Vec<StepStats>,
}

impl UpdateStats {
    fn mean(&self, f: impl Fn(&StepStats) -> f64) -> f64 {
        self.steps.iter().map(f).sum::<f64>() / self.steps.len().max(1) as f64
    }

    /// The first step's loss (the surrogate at the sampling policy).
    pub fn loss(&self) -> f64 {
        self.steps.first().map_or(0.0, |s| s.loss)
    }

    /// Mean gradient norm over the steps.
    pub fn grad_norm(&self) -> f64 {
        self.mean(|s| s.grad_norm)
    }

    /// Mean KL to the reference over the steps.
    pub fn kl(&self) -> f64 {
        self.mean(|s| s.kl)
    }

    /// The first step's mean entropy per scored token, at the sampling policy (`None` if it
    /// scored no token).
    pub fn entropy(&self) -> Option<f64> {
        self.steps
            .first()
            .filter(|s| s.scored_tokens > 0)
            .map(|s| s.entropy)
    }

    /// Mean of `f` over the steps that scored tokens; `None` if none did.
    fn scored_mean(&self, f: impl Fn(&StepStats) -> f64) -> Option<f64> {
        let scored: Vec<f64> = self
            .steps
            .iter()
            .filter(|s| s.scored_tokens > 0)
            .map(f)
            .collect();
        (!scored.is_empty()).then(|| scored.iter().sum::<f64>() / scored.len() as f64)
    }

    /// Mean clipped fraction over the steps that scored tokens.
    pub fn clip_fraction(&self) -> Option<f64> {
        self.scored_mean(|s| s.clip_fraction)
    }

    /// Mean importance ratio over the steps that scored tokens.
    pub fn ratio_mean(&self) -> Option<f64> {
        self.scored_mean(|s| s.mean_ratio)
    }

    /// The last step's learning rate.
    pub fn lr(&self) -> f64 {
        self.steps.last().map_or(0.0, |s| s.lr)
    }

    /// The first step's mean |Δ log-prob| per token between the log-probs recorded when
    /// sampling and the training path's (see [`StepStats::logprob_gap`]); `None` if it scored
    /// no token.
    pub fn logprob_gap(&self) -> Option<f64> {
        self.steps
            .first()
            .filter(|s| s.scored_tokens > 0)
            .map(|s| s.logprob_gap)
    }

    /// The first step's mean truncated-importance weight (`None` if it scored no token).
    pub fn tis_mean(&self) -> Option<f64> {
        self.steps
            .first()
            .filter(|s| s.scored_tokens > 0)
            .map(|s| s.tis_mean)
    }

    /// The first step's fraction of importance weights cut at the clamp.
    pub fn tis_clamped_fraction(&self) -> Option<f64> {
        self.steps
            .first()
            .filter(|s| s.scored_tokens > 0)
            .map(|s| s.tis_clamped_fraction)
    }

    /// Tokens trained per step.
    pub fn tokens(&self) -> usize {
        self.steps.first().map_or(0, |s| s.tokens)
    }

    /// Tokens per step that went through the model (see [`StepStats::scored_tokens`]).
    pub fn scored_tokens(&self) -> usize {
        self.steps.first().map_or(0, |s| s.scored_tokens)
    }
}

/// Runs GRPO updates on a policy, with an optional frozen reference for the KL penalty.
///
/// With LoRA, a clone of the decoder taken before [`Decoder::attach_lora`] is a free reference:
/// it shares the frozen base weights' storage and has no adapters.
#[derive(Debug)]
pub struct GrpoTrainer<'a> {
    policy: &'a Decoder,
    reference: Option<&'a Decoder>,
    optimizer: AdamW,
    cfg: GrpoConfig,
}

impl<'a> GrpoTrainer<'a> {
    /// A trainer updating `optimizer`'s variables (LoRA adapters or all weights) of `policy`.
    pub fn new(
        policy: &'a Decoder,
        reference: Option<&'a Decoder>,
        optimizer: AdamW,
        cfg: GrpoConfig,
    ) -> Result<Self> {
        if cfg.micro_batch == 0 {
            return Err(ModelError::InvalidParameter(
                "micro_batch must be at least 1".into(),
            ));
        }
        if cfg.kl_coef > 0.0 && reference.is_none() {
            return Err(ModelError::InvalidParameter(
                "kl_coef > 0 needs a reference model".into(),
            ));
        }
        Ok(Self {
            policy,
            reference,
            optimizer,
            cfg,
        })
    }

    /// Gives the optimizer back (its state carries over to the next trainer).
    pub fn into_optimizer(self) -> AdamW {
        self.optimizer
    }

    /// The optimizer.
    pub fn optimizer_mut(&mut self) -> &mut AdamW {
        &mut self.optimizer
    }

    /// [`GrpoConfig::epochs`] optimiser steps on `samples`, each at the schedule's rate.
    /// With [`GrpoConfig::recompute_old_logprobs`], the first step's training-path
    /// log-probabilities become every step's old log-probabilities.
    pub fn update(&mut self, samples: &[GrpoSample]) -> Result<UpdateStats> {
        let mut steps = Vec::with_capacity(self.cfg.epochs.max(1));
        let mut recomputed: Option<Vec<GrpoSample>> = None;
        for epoch in 0..self.cfg.epochs.max(1) {
            if let Some(schedule) = self.cfg.schedule {
                let lr = schedule.at(self.optimizer.steps());
                self.optimizer.set_lr(lr);
            }
            let batch = recomputed.as_deref().unwrap_or(samples);
            let recompute = self.cfg.recompute_old_logprobs && epoch == 0;
            let (stats, fresh) = self.step_inner(batch, samples, recompute)?;
            if let Some(fresh) = fresh {
                recomputed = Some(with_old_logprobs(samples, fresh));
            }
            steps.push(stats);
        }
        Ok(UpdateStats { steps })
    }

    /// One optimiser step on `samples`, the loss aggregated as [`GrpoConfig::aggregation`]
    /// says. The samples' old log-probabilities are used as given (and are the rollout's, so
    /// every importance weight is 1).
    pub fn step(&mut self, samples: &[GrpoSample]) -> Result<StepStats> {
        Ok(self.step_inner(samples, samples, false)?.0)
    }

    /// Whether `s` goes through the model: it has trained tokens and, unless a KL term or the
    /// entropy bonus is on, a nonzero advantage (with advantage 0 the clipped surrogate is
    /// exactly 0 whatever the ratio, so its gradient is 0 too).
    fn scores(&self, s: &GrpoSample) -> bool {
        let kl = self.reference.is_some() && self.cfg.kl_coef > 0.0;
        let entropy = self.cfg.entropy_coef > 0.0;
        s.trained_tokens() > 0 && (kl || entropy || s.advantage != 0.0)
    }

    /// [`GrpoTrainer::step`]; `rollout` holds the same samples with the sampler's
    /// log-probabilities (the importance weights' denominators). With `recompute`, the old
    /// log-probabilities of every scored sample are this pass's own (detached), returned by
    /// sample index.
    fn step_inner(
        &mut self,
        samples: &[GrpoSample],
        rollout: &[GrpoSample],
        recompute: bool,
    ) -> Result<(StepStats, Option<Fresh>)> {
        crate::model::on_workers(|| self.step_on_workers(samples, rollout, recompute))
    }

    /// [`GrpoTrainer::step_inner`] on one of rayon's threads ([`crate::model::on_workers`]).
    fn step_on_workers(
        &mut self,
        samples: &[GrpoSample],
        rollout: &[GrpoSample],
        recompute: bool,
    ) -> Result<(StepStats, Option<Fresh>)> {
        let total: usize = samples.iter().map(GrpoSample::trained_tokens).sum();
        if total == 0 {
            return Err(ModelError::InvalidParameter(
                "no completion tokens to train on".into(),
            ));
        }
        let trained_samples = samples.iter().filter(|s| s.trained_tokens() > 0).count();
        for s in samples {
            if s.old_logprobs.len() != s.trained_tokens() {
                return Err(ModelError::InvalidParameter(format!(
                    "{} old log-probs for {} trained tokens",
                    s.old_logprobs.len(),
                    s.trained_tokens()
                )));
            }
            if !s.advantage.is_finite() {
                return Err(ModelError::InvalidParameter(format!(
                    "an advantage is not finite: {}",
                    s.advantage
                )));
            }
        }
        let scored: Vec<usize> = (0..samples.len())
            .filter(|&i| self.scores(&samples[i]))
            .collect();
        let lens: Vec<usize> = scored
            .iter()
            .map(|&i| samples[i].prompt.len() + samples[i].completion.len())
            .collect();
        let mut pass = StepSums::default();
        let mut fresh = Vec::new();
        for range in batch_bounds(&lens, self.cfg.micro_batch, self.cfg.micro_batch_tokens) {
            let chunk: Vec<(usize, &GrpoSample)> =
                scored[range].iter().map(|&i| (i, &samples[i])).collect();
            let norm = Norm {
                tokens: total,
                samples: trained_samples,
            };
            let (lp, layers) = self.chunk(&chunk, rollout, norm, recompute, &mut pass)?;
            if let Some((ck, grad)) = layers {
                // The loss's graph is freed; the layers' backward runs one layer at a time.
                let optimizer = &self.optimizer;
                let grads = &mut pass.grads;
                self.policy
                    .backward_layers(ck, grad, |g| accumulate(grads, optimizer.collect(g)))?;
            }
            if recompute {
                let mut rest = lp.as_slice();
                for (i, s) in chunk {
                    let (mine, tail) = rest.split_at(s.trained_tokens());
                    fresh.push((i, mine.to_vec()));
                    rest = tail;
                }
            }
        }
        let grads = match pass.grads.take() {
            Some(grads) => grads,
            // Nothing scored: every gradient is 0, and the optimiser still takes its step
            // (its moments and weight decay move the weights as they would have).
            None => self
                .optimizer
                .vars()
                .map(|v| Ok(Some(v.as_tensor().zeros_like()?)))
                .collect::<Result<Vec<_>>>()?,
        };
        let grad_norm = AdamW::norm(&grads)?;
        let scale = if self.cfg.max_grad_norm > 0.0 && grad_norm > self.cfg.max_grad_norm {
            self.cfg.max_grad_norm / grad_norm
        } else {
            1.0
        };
        let lr = self.optimizer.lr();
        self.optimizer.step_collected(&grads, scale)?;
        let t = total as f64;
        let adv_tokens: f64 = samples
            .iter()
            .map(|s| s.advantage * s.trained_tokens() as f64)
            .sum();
        let n = pass.scored_tokens;
        let per_scored = |x: f64, none: f64| if n == 0 { none } else { x / n as f64 };
        let stats = StepStats {
            loss: pass.loss,
            mean_advantage: adv_tokens / t,
            mean_ratio: per_scored(pass.ratio, 1.0),
            clip_fraction: per_scored(pass.clipped, 0.0),
            kl: pass.kl / t,
            entropy: per_scored(pass.entropy, 0.0),
            grad_norm,
            lr,
            tokens: total,
            scored_tokens: n,
            logprob_gap: per_scored(pass.gap, 0.0),
            tis_mean: per_scored(pass.tis, 1.0),
            tis_clamped_fraction: per_scored(pass.tis_clamped, 0.0),
        };
        Ok((stats, recompute.then_some(fresh)))
    }

    /// Forward and backward through one micro-batch of scored samples; adds its gradients
    /// and sums to `pass` and returns its training-path log-probabilities (detached), in
    /// order, and with checkpointed layers ([`crate::model::TrainMemory::Checkpointed`]) what the backward
    /// through them needs: the checkpoints and the gradient of the last layer's output. Each token's loss is weighted by [`token_weights`] over the step (`norm`) and
    /// its policy-gradient term by its importance weight against `rollout[i]`'s sampled
    /// log-probabilities. With `recompute`, the training-path log-probabilities are the old
    /// ones too (the ratio is 1).
    fn chunk(
        &self,
        chunk: &[(usize, &GrpoSample)],
        rollout: &[GrpoSample],
        norm: Norm,
        recompute: bool,
        pass: &mut StepSums,
    ) -> Result<(Vec<f32>, Option<LayersLeft>)> {
        let device = self.policy.device().clone();
        let high = self.cfg.clip_eps_high.unwrap_or(self.cfg.clip_eps);
        let (lo, hi) = (1.0 - self.cfg.clip_eps, 1.0 + high);
        let rows: Vec<Spans> = chunk
            .iter()
            .map(|(_, s)| Spans {
                prompt: &s.prompt,
                completion: &s.completion,
                spans: &s.spans,
            })
            .collect();
        let n: usize = chunk.iter().map(|(_, s)| s.trained_tokens()).sum();
        let old: Vec<f32> = chunk
            .iter()
            .flat_map(|(_, s)| s.old_logprobs.iter().copied())
            .collect();
        let a: Vec<f32> = chunk
            .iter()
            .flat_map(|(_, s)| std::iter::repeat_n(s.advantage as f32, s.trained_tokens()))
            .collect();
        let sampled: Vec<f32> = chunk
            .iter()
            .flat_map(|(i, _)| rollout[*i].old_logprobs.iter().copied())
            .collect();
        let weights: Vec<f32> = chunk
            .iter()
            .flat_map(|(_, s)| {
                let w = token_weight(self.cfg.aggregation, s.trained_tokens(), norm);
                std::iter::repeat_n(w as f32, s.trained_tokens())
            })
            .collect();
        let old = Tensor::from_vec(old, n, &device)?;
        let a = Tensor::from_vec(a, n, &device)?;
        let (lp, entropy, ck) = span_logprobs_and_entropy_for_update(self.policy, &rows)?;
        pass.entropy += f64::from(entropy.sum_all()?.to_scalar::<f32>()?);
        let now = lp.detach();
        pass.gap += f64::from((&now - &old)?.abs()?.sum_all()?.to_scalar::<f32>()?);
        let old = if recompute { now.clone() } else { old };
        let old_values: Vec<f32> = old.to_vec1()?;
        let tis = tis_weights(&old_values, &sampled, self.cfg.tis_clamp);
        pass.tis += tis.weights.iter().map(|&w| f64::from(w)).sum::<f64>();
        pass.tis_clamped += tis.clamped as f64;
        let tis = Tensor::from_vec(tis.weights, n, &device)?;
        let weights = Tensor::from_vec(weights, n, &device)?;
        let ratio = (&lp - &old)?.exp()?;
        let surr1 = ratio.mul(&a)?;
        let surr2 = ratio.clamp(lo, hi)?.mul(&a)?;
        let mut per_tok = surr1.minimum(&surr2)?.neg()?.mul(&tis)?;
        if let (Some(reference), true) = (self.reference, self.cfg.kl_coef > 0.0) {
            let ref_lp = span_logprobs(&reference.without_grad(), &rows)?;
            // k3 estimator: exp(ref - lp) - (ref - lp) - 1 >= 0.
            let d = (ref_lp - &lp)?;
            let kl = ((d.exp()? - &d)? - 1.0)?;
            pass.kl += f64::from(kl.sum_all()?.to_scalar::<f32>()?);
            per_tok = (per_tok + (kl * self.cfg.kl_coef)?)?;
        }
        if self.cfg.entropy_coef > 0.0 {
            per_tok = (per_tok - (entropy * self.cfg.entropy_coef)?)?;
        }
        let loss = per_tok.mul(&weights)?.sum_all()?;
        pass.loss += f64::from(loss.to_scalar::<f32>()?);
        let r: Vec<f32> = ratio.to_vec1()?;
        pass.ratio += r.iter().map(|&x| f64::from(x)).sum::<f64>();
        pass.clipped += r
            .iter()
            .filter(|&&x| f64::from(x) < lo || f64::from(x) > hi)
            .count() as f64;
        pass.scored_tokens += n;
        let head = loss.backward()?;
        accumulate(&mut pass.grads, self.optimizer.collect(&head))?;
        let layers = ck.and_then(|ck| {
            let grad = head.get(ck.output())?.clone();
            Some((ck, grad))
        });
        Ok((now.to_vec1::<f32>()?, layers))
    }
}

/// Adds `grads` (one entry per optimised variable) to the sums in `acc`.
pub(crate) fn accumulate(
    acc: &mut Option<Vec<Option<Tensor>>>,
    grads: Vec<Option<Tensor>>,
) -> Result<()> {
    *acc = Some(match acc.take() {
        None => grads,
        Some(sums) => sums
            .into_iter()
            .zip(grads)
            .map(|(a, g)| match (a, g) {
                (Some(a), Some(g)) => Ok(Some((a + g)?)),
                (a, g) => Ok(a.or(g)),
            })
            .collect::<Result<Vec<_>>>()?,
    });
    Ok(())
}

/// Recomputed old log-probabilities, by sample index.
type Fresh = Vec<(usize, Vec<f32>)>;

/// What the backward through checkpointed layers needs after the loss's own: the checkpoints
/// and the gradient of the last layer's output.
type LayersLeft = (LayerCheckpoints, Tensor);

/// What a step's loss is normalised by: its trained tokens and the samples that have any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Norm {
    /// Trained tokens of the step.
    pub tokens: usize,
    /// Samples of the step with at least one trained token.
    pub samples: usize,
}

/// The weight of each trained token of a sample with `tokens` trained tokens in the step's
/// loss: `1 / norm.tokens` for [`LossAggregation::TokenMean`], `1 / (tokens * norm.samples)`
/// for [`LossAggregation::SampleMean`] (so every sample's tokens weigh `1 / samples` in all).
pub fn token_weight(aggregation: LossAggregation, tokens: usize, norm: Norm) -> f64 {
    match aggregation {
        LossAggregation::TokenMean => 1.0 / norm.tokens.max(1) as f64,
        LossAggregation::SampleMean => 1.0 / (tokens.max(1) * norm.samples.max(1)) as f64,
    }
}

/// Truncated importance weights of one micro-batch's tokens.
#[derive(Debug, Clone, PartialEq)]
pub struct TisWeights {
    /// `min(clamp, exp(old - rollout))` per token (all 1 when the clamp is 0: TIS off).
    pub weights: Vec<f32>,
    /// Tokens whose weight was cut at the clamp.
    pub clamped: usize,
}

/// Truncated importance sampling (slime `loss.py`, `--use-tis`): per token,
/// `exp(old - rollout)` clamped to `[0, clamp]`; `clamp = 0` turns it off (every weight 1).
pub fn tis_weights(old: &[f32], rollout: &[f32], clamp: f64) -> TisWeights {
    if clamp <= 0.0 {
        return TisWeights {
            weights: vec![1.0; old.len()],
            clamped: 0,
        };
    }
    let mut clamped = 0;
    let weights = old
        .iter()
        .zip(rollout)
        .map(|(&o, &r)| {
            let w = (f64::from(o) - f64::from(r)).exp();
            if w > clamp {
                clamped += 1;
                clamp as f32
            } else {
                w as f32
            }
        })
        .collect();
    TisWeights { weights, clamped }
}

/// What the micro-batches of one step add up: accumulated gradients and the statistics' sums.
#[derive(Default)]
struct StepSums {
    grads: Option<Vec<Option<Tensor>>>,
    loss: f64,
    ratio: f64,
    clipped: f64,
    kl: f64,
    entropy: f64,
    gap: f64,
    tis: f64,
    tis_clamped: f64,
    scored_tokens: usize,
}

/// `samples` with the old log-probabilities of the samples in `fresh` (by index) replaced.
fn with_old_logprobs(samples: &[GrpoSample], fresh: Fresh) -> Vec<GrpoSample> {
    let mut out = samples.to_vec();
    for (i, lp) in fresh {
        out[i].old_logprobs = lp;
    }
    out
}

/// Splits `samples` in order into micro-batches of at most `count` samples and, when
/// `tokens > 0`, at most `tokens` padded tokens; returns each with its first index.
pub fn micro_batches(
    samples: &[GrpoSample],
    count: usize,
    tokens: usize,
) -> Vec<(usize, &[GrpoSample])> {
    let lens: Vec<usize> = samples
        .iter()
        .map(|s| s.prompt.len() + s.completion.len())
        .collect();
    batch_bounds(&lens, count, tokens)
        .into_iter()
        .map(|r| (r.start, &samples[r]))
        .collect()
}

/// [`micro_batches`] over sequence lengths: the index range of each micro-batch.
fn batch_bounds(lens: &[usize], count: usize, tokens: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut longest = 0;
    for (i, &len) in lens.iter().enumerate() {
        let n = i - start;
        let full =
            n == count.max(1) || (tokens > 0 && n > 0 && longest.max(len) * (n + 1) > tokens);
        if full {
            out.push(start..i);
            start = i;
            longest = 0;
        }
        longest = longest.max(len);
    }
    if start < lens.len() {
        out.push(start..lens.len());
    }
    out
}

#[cfg(test)]
// A sample's spans are a list of ranges; one range is a list of one, not a range of numbers.
#[allow(clippy::single_range_in_vec_init)]
mod tests {
    use super::*;

    /// Prompt `[1, 2]`; completion of 6 tokens: a turn at 0..2, an observation at 2..4, a
    /// turn at 4..6, whose four old log-probs are -1, -2, -3, -4.
    fn two_turns() -> GrpoSample {
        GrpoSample {
            prompt: vec![1, 2],
            completion: vec![10, 11, 20, 21, 30, 31],
            spans: vec![0..2, 4..6],
            old_logprobs: vec![-1.0, -2.0, -3.0, -4.0],
            advantage: 0.5,
        }
    }

    #[test]
    fn a_cut_keeps_the_first_tokens_and_their_old_logprobs() {
        let s = two_turns();
        assert_eq!(s.cut_to(8), Some(s.clone()));
        assert_eq!(s.cut_to(100), Some(s.clone()));
        // 7 tokens: the completion's first 5, the second turn's first token.
        let cut = s.cut_to(7).unwrap();
        assert_eq!(cut.completion, vec![10, 11, 20, 21, 30]);
        assert_eq!(cut.spans, vec![0..2, 4..5]);
        assert_eq!(cut.old_logprobs, vec![-1.0, -2.0, -3.0]);
        assert_eq!(cut.advantage, 0.5);
        // 5 or 6 tokens: the first turn only (the observation is context).
        for max in [5, 6] {
            let cut = s.cut_to(max).unwrap();
            assert_eq!(cut.spans, vec![0..2]);
            assert_eq!(cut.old_logprobs, vec![-1.0, -2.0]);
            assert_eq!(cut.completion.len(), max - 2);
        }
        let cut = s.cut_to(3).unwrap();
        assert_eq!((cut.spans, cut.old_logprobs), (vec![0..1], vec![-1.0]));
    }

    #[test]
    fn a_cut_that_leaves_no_trained_token_drops_the_sample() {
        let s = two_turns();
        assert_eq!(s.cut_to(2), None);
        assert_eq!(s.cut_to(1), None);
        let mut context_first = s.clone();
        context_first.spans = vec![4..6];
        context_first.old_logprobs = vec![-3.0, -4.0];
        assert_eq!(context_first.cut_to(6), None);
        assert_eq!(context_first.cut_to(7).unwrap().old_logprobs, vec![-3.0]);
    }
}
