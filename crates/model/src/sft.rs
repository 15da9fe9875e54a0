//! Supervised fine-tuning: one optimiser step of mean token negative log-likelihood on
//! (prompt, completion) sequences, with the same pieces as the GRPO update — the samples are
//! [`GrpoSample`]s whose `spans` mark the scored completion positions (the prompt is context
//! only, exactly as GRPO marks it), [`micro_batches`] splits them, gradients accumulate across
//! micro-batches, the global norm is clipped and [`AdamW`] steps.
//!
//! The loss is exact rather than GRPO's surrogate with advantage 1 (whose value is `-ratio`,
//! not the NLL, and whose ratio clipping acts once the weights move): the mean over every
//! scored token of the batch of `-log p(token | everything before it)`. A sample weighs by its
//! length, as a token mean should ([`LossAggregation::TokenMean`] in GRPO's terms).
use candle_core::Tensor;

use crate::error::{ModelError, Result};
use crate::grpo::{GrpoSample, accumulate, micro_batches};
use crate::logprob::{Spans, span_logprobs, span_logprobs_and_entropy_for_update};
use crate::model::Decoder;
use crate::optim::AdamW;

#[cfg(doc)]
use crate::grpo::LossAggregation;

/// How one SFT step runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SftConfig {
    /// Global gradient-norm clip (0 disables it).
    pub max_grad_norm: f64,
    /// Samples per forward/backward pass; gradients are accumulated across micro-batches.
    pub micro_batch: usize,
    /// Most padded tokens per micro-batch, 0 for no limit (see [`micro_batches`]).
    pub micro_batch_tokens: usize,
}

impl Default for SftConfig {
    /// GRPO's defaults: clip at norm 1, micro-batches of 4, no token limit.
    fn default() -> Self {
        Self {
            max_grad_norm: 1.0,
            micro_batch: 4,
            micro_batch_tokens: 0,
        }
    }
}

/// What one SFT step did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SftStats {
    /// Mean token NLL (nats) of the scored tokens before the step.
    pub loss: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// The learning rate of the step.
    pub lr: f64,
    /// Tokens scored (the loss is their mean).
    pub tokens: usize,
}

fn rows<'a>(samples: &[&'a GrpoSample]) -> Vec<Spans<'a>> {
    samples
        .iter()
        .map(|s| Spans {
            prompt: &s.prompt,
            completion: &s.completion,
            spans: &s.spans,
        })
        .collect()
}

fn scored_tokens(samples: &[GrpoSample]) -> Result<usize> {
    let total: usize = samples.iter().map(GrpoSample::trained_tokens).sum();
    if total == 0 {
        return Err(ModelError::InvalidParameter(
            "an SFT batch needs at least one completion token".into(),
        ));
    }
    Ok(total)
}

/// The mean token NLL of `samples`' scored tokens under `model`, without a graph.
pub fn sft_loss(model: &Decoder, samples: &[GrpoSample], cfg: &SftConfig) -> Result<f64> {
    let total = scored_tokens(samples)?;
    let model = model.without_grad();
    let mut sum = 0.0;
    for (_, chunk) in micro_batches(samples, cfg.micro_batch, cfg.micro_batch_tokens) {
        let chunk: Vec<&GrpoSample> = chunk.iter().filter(|s| s.trained_tokens() > 0).collect();
        if chunk.is_empty() {
            continue;
        }
        let lp = span_logprobs(&model, &rows(&chunk))?;
        sum -= f64::from(lp.sum_all()?.to_scalar::<f32>()?);
    }
    Ok(sum / total as f64)
}

/// One optimiser step of `optimizer` (over `model`'s trainable variables: LoRA adapters or
/// every weight) on the mean token NLL of `samples`' scored tokens.
pub fn sft_step(
    model: &Decoder,
    optimizer: &mut AdamW,
    samples: &[GrpoSample],
    cfg: &SftConfig,
) -> Result<SftStats> {
    crate::model::on_workers(|| sft_step_on_workers(model, optimizer, samples, cfg))
}

/// [`sft_step`] on one of rayon's threads ([`crate::model::on_workers`]).
fn sft_step_on_workers(
    model: &Decoder,
    optimizer: &mut AdamW,
    samples: &[GrpoSample],
    cfg: &SftConfig,
) -> Result<SftStats> {
    if cfg.micro_batch == 0 {
        return Err(ModelError::InvalidParameter(
            "micro_batch must be at least 1".into(),
        ));
    }
    let total = scored_tokens(samples)?;
    let mut loss_sum = 0.0;
    let mut acc: Option<Vec<Option<Tensor>>> = None;
    for (_, chunk) in micro_batches(samples, cfg.micro_batch, cfg.micro_batch_tokens) {
        let chunk: Vec<&GrpoSample> = chunk.iter().filter(|s| s.trained_tokens() > 0).collect();
        if chunk.is_empty() {
            continue;
        }
        let (lp, _, ck) = span_logprobs_and_entropy_for_update(model, &rows(&chunk))?;
        // Each token weighs 1 / (the batch's scored tokens): the micro-batches' losses add
        // up to the batch's token mean, and so do their gradients.
        let loss = (lp.sum_all()?.neg()? / total as f64)?;
        loss_sum += f64::from(loss.to_scalar::<f32>()?);
        let head = loss.backward()?;
        accumulate(&mut acc, optimizer.collect(&head))?;
        let layers = ck.and_then(|ck| Some((head.get(ck.output())?.clone(), ck)));
        // The loss's graph is freed before the layers' backward, which runs a layer at a time.
        drop((head, loss, lp));
        if let Some((grad, ck)) = layers {
            let opt = &*optimizer;
            model.backward_layers(ck, grad, |g| accumulate(&mut acc, opt.collect(g)))?;
        }
    }
    let grads = acc.unwrap_or_default();
    let grad_norm = AdamW::norm(&grads)?;
    let scale = if cfg.max_grad_norm > 0.0 && grad_norm > cfg.max_grad_norm {
        cfg.max_grad_norm / grad_norm
    } else {
        1.0
    };
    let lr = optimizer.lr();
    optimizer.step_collected(&grads, scale)?;
    Ok(SftStats {
        loss: loss_sum,
        grad_norm,
        lr,
        tokens: total,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelConfig;
    use crate::optim::AdamWConfig;
    use candle_core::{D, Device};

    fn tiny() -> Decoder {
        Decoder::random(&ModelConfig::tiny("llama"), 7, 0.2, &Device::Cpu)
            .unwrap()
            .0
    }

    fn sample(prompt: &[u32], completion: &[u32]) -> GrpoSample {
        GrpoSample::new(
            prompt.to_vec(),
            completion.to_vec(),
            vec![0.0; completion.len()],
            1.0,
        )
    }

    /// The expected loss by hand: the full sequence's logits, a log-softmax at each position,
    /// and the mean of `-logp(next token)` over the positions that predict a completion token
    /// (position `p + j - 1` predicts completion token `j`), nothing else.
    fn by_hand(model: &Decoder, samples: &[GrpoSample]) -> f64 {
        let mut sum = 0.0;
        let mut n = 0;
        for s in samples {
            let ids: Vec<u32> = s.prompt.iter().chain(&s.completion).copied().collect();
            let len = ids.len();
            let t = Tensor::from_vec(ids.clone(), (1, len), &Device::Cpu).unwrap();
            let logits = model.forward_train(&t).unwrap().get(0).unwrap();
            let logp: Vec<Vec<f32>> = candle_nn::ops::log_softmax(&logits, D::Minus1)
                .unwrap()
                .to_vec2()
                .unwrap();
            for j in 0..s.completion.len() {
                let pos = s.prompt.len() + j - 1;
                sum -= f64::from(logp[pos][ids[pos + 1] as usize]);
                n += 1;
            }
        }
        sum / n as f64
    }

    fn batch() -> Vec<GrpoSample> {
        vec![
            sample(&[5, 9, 11, 40, 41], &[12, 13, 14]),
            sample(&[7, 8], &[20, 21, 22, 23, 24, 25]),
            sample(&[3, 100, 90, 80], &[30]),
        ]
    }

    #[test]
    fn the_loss_is_the_mean_nll_of_the_completion_tokens_only() {
        let model = tiny();
        let samples = batch();
        let expected = by_hand(&model, &samples);
        // Micro-batches of 1 and of 4 sum to the same token mean.
        for micro_batch in [1, 4] {
            let cfg = SftConfig {
                micro_batch,
                ..SftConfig::default()
            };
            let got = sft_loss(&model, &samples, &cfg).unwrap();
            assert!((got - expected).abs() < 1e-5, "{got} vs {expected}");
            let mut opt = AdamW::new(Vec::new(), AdamWConfig::default()).unwrap();
            let stats = sft_step(&model, &mut opt, &samples, &cfg).unwrap();
            assert!(
                (stats.loss - expected).abs() < 1e-5,
                "{stats:?} vs {expected}"
            );
            assert_eq!(stats.tokens, 10);
        }
        // The prompt's own next-token terms are not in it: the loss over prompt and
        // completion positions together differs.
        let whole: Vec<GrpoSample> = samples
            .iter()
            .map(|s| {
                sample(
                    &s.prompt[..1],
                    &[&s.prompt[1..], &s.completion[..]].concat(),
                )
            })
            .collect();
        let with_prompt = by_hand(&model, &whole);
        assert!((with_prompt - expected).abs() > 1e-3);
    }

    #[test]
    fn steps_lower_the_loss_and_an_empty_batch_is_an_error() {
        let (mut model, varmap) =
            Decoder::random(&ModelConfig::tiny("llama"), 3, 0.2, &Device::Cpu).unwrap();
        model.set_train_base(true);
        let vars = varmap.all_vars();
        let mut opt = AdamW::new(
            vars,
            AdamWConfig {
                lr: 1e-2,
                ..AdamWConfig::default()
            },
        )
        .unwrap();
        let samples = batch();
        let cfg = SftConfig::default();
        let before = sft_loss(&model, &samples, &cfg).unwrap();
        for _ in 0..10 {
            sft_step(&model, &mut opt, &samples, &cfg).unwrap();
        }
        let after = sft_loss(&model, &samples, &cfg).unwrap();
        assert!(after < before * 0.8, "{before} -> {after}");
        let empty = vec![sample(&[1, 2], &[])];
        let err = sft_step(&model, &mut opt, &empty, &cfg).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid parameter: an SFT batch needs at least one completion token"
        );
    }
}
