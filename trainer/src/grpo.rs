//! GRPO: group-normalised advantages and a clipped policy-gradient update with optional KL to a
//! frozen reference, gradient clipping and accumulation over micro-batches.
use std::collections::HashMap;

use candle_core::Tensor;

use crate::error::{Result, TrainerError};
use crate::logprob::{Pair, completion_logprobs};
use crate::model::Decoder;
use crate::optim::AdamW;

/// One sampled completion with its reward.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpoSample {
    /// Prompt ids.
    pub prompt: Vec<u32>,
    /// Completion ids.
    pub completion: Vec<u32>,
    /// Log-probabilities recorded when sampling (one per completion token).
    pub old_logprobs: Vec<f32>,
    /// Scalar reward.
    pub reward: f64,
    /// Completions of the same prompt share a group id.
    pub group: usize,
    /// Who produced it (e.g. `designer`, `agent`), for per-role normalisation.
    pub role: String,
}

/// How rewards become advantages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdvantageNorm {
    /// `(r - mean_group) / (std_group + eps)`: the GRPO default.
    Group,
    /// `(r - mean_group) / (std_role + eps)`, with the std of the group-centred rewards over all
    /// samples of the same role in the batch, so roles with different reward scales contribute
    /// comparably and a constant-reward group does not blow up.
    Role,
}

/// GRPO hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct GrpoConfig {
    /// Ratio clip range: the ratio is clipped to `[1 - clip_eps, 1 + clip_eps]`.
    pub clip_eps: f64,
    /// Weight of the KL penalty to the reference model (0 disables it).
    pub kl_coef: f64,
    /// Global gradient-norm clip (0 disables it).
    pub max_grad_norm: f64,
    /// Samples per forward/backward pass; gradients are accumulated across micro-batches.
    pub micro_batch: usize,
    /// Most padded tokens (samples x longest sequence) per micro-batch, 0 for no limit: a
    /// micro-batch closes early when the next sample would pass it, so long sequences train
    /// in smaller groups (a sample longer than the limit trains alone).
    pub micro_batch_tokens: usize,
    /// Advantage normalisation.
    pub norm: AdvantageNorm,
}

impl Default for GrpoConfig {
    fn default() -> Self {
        Self {
            clip_eps: 0.2,
            kl_coef: 0.0,
            max_grad_norm: 1.0,
            micro_batch: 4,
            micro_batch_tokens: 0,
            norm: AdvantageNorm::Group,
        }
    }
}

/// What one update did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepStats {
    /// Loss (token mean).
    pub loss: f64,
    /// Mean reward of the batch.
    pub mean_reward: f64,
    /// Mean importance ratio.
    pub mean_ratio: f64,
    /// Fraction of tokens whose ratio was clipped.
    pub clip_fraction: f64,
    /// Mean KL estimate to the reference (0 without one).
    pub kl: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Completion tokens trained on.
    pub tokens: usize,
}

const EPS: f64 = 1e-6;

fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

/// Advantages of `samples` (one per sample) under `norm`.
pub fn advantages(samples: &[GrpoSample], norm: AdvantageNorm) -> Vec<f64> {
    let mut groups: HashMap<usize, Vec<f64>> = HashMap::new();
    for s in samples {
        groups.entry(s.group).or_default().push(s.reward);
    }
    let stats: HashMap<usize, (f64, f64)> = groups.iter().map(|(g, r)| (*g, mean_std(r))).collect();
    let centred: Vec<f64> = samples
        .iter()
        .map(|s| s.reward - stats[&s.group].0)
        .collect();
    match norm {
        AdvantageNorm::Group => samples
            .iter()
            .zip(&centred)
            .map(|(s, c)| c / (stats[&s.group].1 + EPS))
            .collect(),
        AdvantageNorm::Role => {
            let mut roles: HashMap<&str, Vec<f64>> = HashMap::new();
            for (s, c) in samples.iter().zip(&centred) {
                roles.entry(s.role.as_str()).or_default().push(*c);
            }
            let role_std: HashMap<&str, f64> = roles
                .iter()
                .map(|(r, cs)| {
                    (
                        *r,
                        (cs.iter().map(|c| c * c).sum::<f64>() / cs.len() as f64).sqrt(),
                    )
                })
                .collect();
            samples
                .iter()
                .zip(&centred)
                .map(|(s, c)| c / (role_std[s.role.as_str()] + EPS))
                .collect()
        }
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
            return Err(TrainerError::InvalidParameter(
                "micro_batch must be at least 1".into(),
            ));
        }
        if cfg.kl_coef > 0.0 && reference.is_none() {
            return Err(TrainerError::InvalidParameter(
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

    /// One update on `samples`; the loss is the token mean over the whole batch.
    pub fn step(&mut self, samples: &[GrpoSample]) -> Result<StepStats> {
        let total: usize = samples.iter().map(|s| s.completion.len()).sum();
        if total == 0 {
            return Err(TrainerError::InvalidParameter(
                "no completion tokens to train on".into(),
            ));
        }
        for s in samples {
            if s.old_logprobs.len() != s.completion.len() {
                return Err(TrainerError::InvalidParameter(format!(
                    "{} old log-probs for {} completion tokens",
                    s.old_logprobs.len(),
                    s.completion.len()
                )));
            }
        }
        let adv = advantages(samples, self.cfg.norm);
        let device = self.policy.device().clone();
        let (lo, hi) = (1.0 - self.cfg.clip_eps, 1.0 + self.cfg.clip_eps);
        let mut acc: Option<Vec<Option<Tensor>>> = None;
        let (mut loss_sum, mut ratio_sum, mut clipped, mut kl_sum) = (0.0, 0.0, 0.0, 0.0);
        let chunks = micro_batches(samples, self.cfg.micro_batch, self.cfg.micro_batch_tokens);
        for (start, chunk) in chunks {
            let chunk: Vec<(usize, &GrpoSample)> = chunk
                .iter()
                .enumerate()
                .map(|(k, s)| (start + k, s))
                .filter(|(_, s)| !s.completion.is_empty())
                .collect();
            if chunk.is_empty() {
                continue;
            }
            let pairs: Vec<Pair> = chunk
                .iter()
                .map(|(_, s)| Pair {
                    prompt: &s.prompt,
                    completion: &s.completion,
                })
                .collect();
            let n: usize = pairs.iter().map(|p| p.completion.len()).sum();
            let old: Vec<f32> = chunk
                .iter()
                .flat_map(|(_, s)| s.old_logprobs.iter().copied())
                .collect();
            let a: Vec<f32> = chunk
                .iter()
                .flat_map(|(i, s)| std::iter::repeat_n(adv[*i] as f32, s.completion.len()))
                .collect();
            let old = Tensor::from_vec(old, n, &device)?;
            let a = Tensor::from_vec(a, n, &device)?;
            let lp = completion_logprobs(self.policy, &pairs)?;
            let ratio = (&lp - &old)?.exp()?;
            let surr1 = ratio.mul(&a)?;
            let surr2 = ratio.clamp(lo, hi)?.mul(&a)?;
            let mut per_tok = surr1.minimum(&surr2)?.neg()?;
            if let (Some(reference), true) = (self.reference, self.cfg.kl_coef > 0.0) {
                let ref_lp = completion_logprobs(&reference.without_grad(), &pairs)?;
                // k3 estimator: exp(ref - lp) - (ref - lp) - 1 >= 0.
                let d = (ref_lp - &lp)?;
                let kl = ((d.exp()? - &d)? - 1.0)?;
                kl_sum += f64::from(kl.sum_all()?.to_scalar::<f32>()?);
                per_tok = (per_tok + (kl * self.cfg.kl_coef)?)?;
            }
            let loss = (per_tok.sum_all()? / total as f64)?;
            loss_sum += f64::from(loss.to_scalar::<f32>()?);
            let r: Vec<f32> = ratio.to_vec1()?;
            ratio_sum += r.iter().map(|&x| f64::from(x)).sum::<f64>();
            clipped += r
                .iter()
                .filter(|&&x| f64::from(x) < lo || f64::from(x) > hi)
                .count() as f64;
            let grads = self.optimizer.collect(&loss.backward()?);
            acc = Some(match acc {
                None => grads,
                Some(acc) => acc
                    .into_iter()
                    .zip(grads)
                    .map(|(a, g)| match (a, g) {
                        (Some(a), Some(g)) => Ok(Some((a + g)?)),
                        (a, g) => Ok(a.or(g)),
                    })
                    .collect::<Result<Vec<_>>>()?,
            });
        }
        let grads = acc.expect("at least one chunk has tokens");
        let grad_norm = AdamW::norm(&grads)?;
        let scale = if self.cfg.max_grad_norm > 0.0 && grad_norm > self.cfg.max_grad_norm {
            self.cfg.max_grad_norm / grad_norm
        } else {
            1.0
        };
        self.optimizer.step_collected(&grads, scale)?;
        let t = total as f64;
        Ok(StepStats {
            loss: loss_sum,
            mean_reward: samples.iter().map(|s| s.reward).sum::<f64>() / samples.len() as f64,
            mean_ratio: ratio_sum / t,
            clip_fraction: clipped / t,
            kl: kl_sum / t,
            grad_norm,
            tokens: total,
        })
    }
}

/// Splits `samples` in order into micro-batches of at most `count` samples and, when
/// `tokens > 0`, at most `tokens` padded tokens; returns each with its first index.
pub fn micro_batches(
    samples: &[GrpoSample],
    count: usize,
    tokens: usize,
) -> Vec<(usize, &[GrpoSample])> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut longest = 0;
    for (i, s) in samples.iter().enumerate() {
        let len = s.prompt.len() + s.completion.len();
        let n = i - start;
        let full =
            n == count.max(1) || (tokens > 0 && n > 0 && longest.max(len) * (n + 1) > tokens);
        if full {
            out.push((start, &samples[start..i]));
            start = i;
            longest = 0;
        }
        longest = longest.max(len);
    }
    if start < samples.len() {
        out.push((start, &samples[start..]));
    }
    out
}
