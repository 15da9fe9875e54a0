//! GRPO on a toy task, LoRA freezing, advantages, and the fused AdamW.
use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use spade_model::grpo::{
    GrpoConfig, GrpoSample, GrpoTrainer, LossAggregation, Norm, micro_batches, tis_weights,
    token_weight,
};
use spade_model::logprob::{
    Pair, Spans, completion_logprobs, span_logprobs, span_logprobs_and_entropy,
};
use spade_model::model::{Decoder, LoraConfig, lora};
use spade_model::optim::{AdamW, AdamWConfig};
use spade_model::sample::{Sampler, SamplingParams};
use spade_selfplay::credit::{episode_sequences, zscore};
use spade_selfplay::policy::Sampled;

use super::common::{tiny_llama_with_vocab, tiny_tokenizer};

/// Reward: 1 if the completion contains a token of the target range.
fn reward(tokens: &[u32]) -> f64 {
    f64::from(u8::from(tokens.iter().any(|t| (100..130).contains(t))))
}

fn snapshot(vm: &VarMap) -> Snapshot {
    let data = vm.data().lock().unwrap();
    let mut out: Vec<(String, Vec<f32>)> = data
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.as_tensor().flatten_all().unwrap().to_vec1().unwrap(),
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn mean_reward(s: &Sampler, prompts: &[Vec<u32>], seed: u64) -> f64 {
    let p = SamplingParams {
        max_new_tokens: 6,
        seed,
        ..SamplingParams::default()
    };
    let mut total = 0.0;
    let mut n = 0.0;
    for (i, prompt) in prompts.iter().enumerate() {
        for c in s
            .sample(
                prompt,
                16,
                &SamplingParams {
                    seed: seed + i as u64,
                    ..p.clone()
                },
                &mut |_, _| {},
            )
            .unwrap()
        {
            total += reward(&c.tokens);
            n += 1.0;
        }
    }
    total / n
}

/// Variable values by name.
type Snapshot = Vec<(String, Vec<f32>)>;

/// What a toy training run produced.
struct Run {
    before: f64,
    after: f64,
    adapters: Snapshot,
    base_before: Snapshot,
    base_after: Snapshot,
}

/// Trains LoRA adapters for `steps` updates.
fn train(steps: usize) -> Run {
    let cfg = tiny_llama_with_vocab();
    let (mut model, base_vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
    let base_before = snapshot(&base_vm);
    let lcfg = LoraConfig {
        r: 4,
        lora_alpha: 8.0,
        ..LoraConfig::default()
    };
    let adapters = lora::attach_new(&mut model, &lcfg, 2).unwrap();
    let tok = tiny_tokenizer();
    let prompts = vec![vec![5u32, 60, 70], vec![9u32, 80, 3, 40]];
    let before = mean_reward(&Sampler::new(&model, &tok, &[]), &prompts, 1000);
    let opt = AdamW::new(
        adapters.all_vars(),
        AdamWConfig {
            lr: 2e-2,
            ..AdamWConfig::default()
        },
    )
    .unwrap();
    let mut trainer = GrpoTrainer::new(
        &model,
        None,
        opt,
        GrpoConfig {
            micro_batch: 6,
            ..GrpoConfig::default()
        },
    )
    .unwrap();
    let sampler = Sampler::new(&model, &tok, &[]);
    for step in 0..steps {
        let mut batch = Vec::new();
        for (g, prompt) in prompts.iter().enumerate() {
            let p = SamplingParams {
                max_new_tokens: 6,
                seed: (step * 10 + g) as u64,
                ..SamplingParams::default()
            };
            let group = sampler.sample(prompt, 8, &p, &mut |_, _| {}).unwrap();
            let rewards: Vec<f64> = group.iter().map(|c| reward(&c.tokens)).collect();
            for (c, adv) in group.into_iter().zip(zscore(&rewards)) {
                batch.push(GrpoSample::new(prompt.clone(), c.tokens, c.logprobs, adv));
            }
        }
        let stats = trainer.step(&batch).unwrap();
        assert!(stats.loss.is_finite() && stats.grad_norm.is_finite());
        assert!(
            (stats.mean_ratio - 1.0).abs() < 1e-3,
            "on-policy ratio is 1, got {}",
            stats.mean_ratio
        );
    }
    let after = mean_reward(&sampler, &prompts, 1000);
    Run {
        before,
        after,
        adapters: snapshot(&adapters),
        base_before,
        base_after: snapshot(&base_vm),
    }
}

#[test]
fn grpo_raises_reward_reproducibly_and_lora_keeps_base_bit_identical() {
    let a = train(30);
    eprintln!("mean reward {} -> {}", a.before, a.after);
    assert!(
        a.after > a.before + 0.2,
        "mean reward {} -> {}",
        a.before,
        a.after
    );
    assert_eq!(
        a.base_before, a.base_after,
        "base weights changed under LoRA"
    );
    let b = train(30);
    assert_eq!((a.before, a.after), (b.before, b.after));
    assert_eq!(a.adapters, b.adapters, "training is not reproducible");
}

fn sample(advantage: f64) -> GrpoSample {
    GrpoSample::new(vec![1], vec![2], vec![-1.0], advantage)
}

#[test]
fn zscore_normalises_a_group_and_leaves_a_constant_one_at_zero() {
    // Rewards 10 and 30: mean 20, std 10 -> -1, +1; a constant group -> 0, 0.
    let z = zscore(&[10.0, 30.0]);
    assert!(
        (z[0] + 1.0).abs() < 1e-6 && (z[1] - 1.0).abs() < 1e-6,
        "{z:?}"
    );
    assert_eq!(zscore(&[5.0, 5.0]), vec![0.0, 0.0]);
}

#[test]
fn span_logprobs_of_an_episode_equal_each_turns_own_logprobs() {
    // An episode as one sequence: prompt P, completion C1, observation O, completion C2.
    // Scoring the spans C1 and C2 must give exactly the log-probs of (P, C1) and of
    // (P + C1 + O, C2) scored alone: the policy's own contexts.
    let cfg = tiny_llama_with_vocab();
    let (model, _vm) = Decoder::random(&cfg, 4, 0.3, &Device::Cpu).unwrap();
    let p = vec![5u32, 60, 70];
    let c1 = vec![8u32, 9, 10];
    let o = vec![40u32, 41];
    let c2 = vec![12u32, 13];
    let mut completion = c1.clone();
    completion.extend(&o);
    completion.extend(&c2);
    let spans = [0..3, 5..7];
    let joined: Vec<f32> = span_logprobs(
        &model,
        &[Spans {
            prompt: &p,
            completion: &completion,
            spans: &spans,
        }],
    )
    .unwrap()
    .to_vec1()
    .unwrap();
    let mut ctx2 = p.clone();
    ctx2.extend(&c1);
    ctx2.extend(&o);
    let alone: Vec<f32> = completion_logprobs(
        &model,
        &[
            Pair {
                prompt: &p,
                completion: &c1,
            },
            Pair {
                prompt: &ctx2,
                completion: &c2,
            },
        ],
    )
    .unwrap()
    .to_vec1()
    .unwrap();
    assert_eq!(joined.len(), 5);
    for (a, b) in joined.iter().zip(&alone) {
        assert!((a - b).abs() < 1e-5, "{joined:?} vs {alone:?}");
    }
    let err = span_logprobs(
        &model,
        &[Spans {
            prompt: &p,
            completion: &c1,
            spans: std::slice::from_ref(&(0..9)),
        }],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid parameter: span 0..9 is out of order or outside a completion of 3 tokens"
    );
}

#[test]
fn fused_adamw_matches_reference_formula() {
    let vm = VarMap::new();
    let var = vm
        .get(
            (2, 3),
            "w",
            candle_nn::Init::Const(0.5),
            candle_core::DType::F32,
            &Device::Cpu,
        )
        .unwrap();
    let _ = var;
    let v = vm.all_vars().remove(0);
    let cfg = AdamWConfig {
        lr: 0.1,
        weight_decay: 0.01,
        ..AdamWConfig::default()
    };
    let mut opt = AdamW::new(vec![v.clone()], cfg).unwrap();
    let (mut p, mut m, mut s) = (vec![0.5f64; 6], vec![0.0f64; 6], vec![0.0f64; 6]);
    for t in 1..=3 {
        let loss = (v.as_tensor().sqr().unwrap() * f64::from(t))
            .unwrap()
            .sum_all()
            .unwrap();
        let grads = loss.backward().unwrap();
        opt.step(&grads, 0.5).unwrap();
        for i in 0..6 {
            let g = 2.0 * p[i] * f64::from(t) * 0.5;
            m[i] = 0.9 * m[i] + 0.1 * g;
            s[i] = 0.999 * s[i] + 0.001 * g * g;
            let mh = m[i] / (1.0 - 0.9f64.powi(t));
            let sh = s[i] / (1.0 - 0.999f64.powi(t));
            p[i] = p[i] * (1.0 - 0.1 * 0.01) - 0.1 * mh / (sh.sqrt() + 1e-8);
        }
    }
    let got: Vec<f32> = v.as_tensor().flatten_all().unwrap().to_vec1().unwrap();
    for (a, b) in got.iter().zip(&p) {
        assert!((f64::from(*a) - b).abs() < 1e-5, "{got:?} vs {p:?}");
    }
}

#[test]
fn grpo_rejects_bad_input() {
    let cfg = tiny_llama_with_vocab();
    let (model, vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
    let opt = || AdamW::new(vm.all_vars(), AdamWConfig::default()).unwrap();
    let err = GrpoTrainer::new(
        &model,
        None,
        opt(),
        GrpoConfig {
            kl_coef: 0.1,
            ..GrpoConfig::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid parameter: kl_coef > 0 needs a reference model"
    );
    let err = GrpoTrainer::new(
        &model,
        None,
        opt(),
        GrpoConfig {
            micro_batch: 0,
            ..GrpoConfig::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid parameter: micro_batch must be at least 1"
    );
    let mut t = GrpoTrainer::new(&model, None, opt(), GrpoConfig::default()).unwrap();
    let mut s = sample(1.0);
    s.old_logprobs.clear();
    assert_eq!(
        t.step(&[s]).unwrap_err().to_string(),
        "invalid parameter: 0 old log-probs for 1 trained tokens"
    );
    let s = GrpoSample::new(vec![1], vec![], vec![], 1.0);
    assert_eq!(
        t.step(&[s]).unwrap_err().to_string(),
        "invalid parameter: no completion tokens to train on"
    );
    let f64_var = candle_core::Var::from_tensor(
        &Tensor::zeros(2, candle_core::DType::F64, &Device::Cpu).unwrap(),
    )
    .unwrap();
    assert_eq!(
        AdamW::new(vec![f64_var], AdamWConfig::default())
            .unwrap_err()
            .to_string(),
        "invalid parameter: fused AdamW needs f32 parameters, found F64"
    );
}

#[test]
fn kl_penalty_and_full_finetuning_update_all_weights() {
    let cfg = tiny_llama_with_vocab();
    let (model, vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
    let (reference, _rvm) = Decoder::random(&cfg, 2, 0.3, &Device::Cpu).unwrap();
    let before = snapshot(&vm);
    let opt = AdamW::new(
        vm.all_vars(),
        AdamWConfig {
            lr: 1e-3,
            ..AdamWConfig::default()
        },
    )
    .unwrap();
    let mut t = GrpoTrainer::new(
        &model,
        Some(&reference),
        opt,
        GrpoConfig {
            kl_coef: 0.1,
            micro_batch: 1,
            ..GrpoConfig::default()
        },
    )
    .unwrap();
    let batch = vec![
        sample(0.5),
        sample(-0.5),
        GrpoSample::new(vec![1], vec![7, 8], vec![-5.0, -5.0], 0.0),
    ];
    let stats = t.step(&batch).unwrap();
    assert!(stats.kl > 0.0, "{stats:?}");
    assert_eq!(stats.tokens, 4);
    let after = snapshot(&vm);
    for ((name, a), (_, b)) in before.iter().zip(&after) {
        assert_ne!(a, b, "{name} was not updated");
    }
}

#[test]
fn micro_batches_accumulate_to_the_full_batch_update() {
    let cfg = tiny_llama_with_vocab();
    // Two groups' rewards, z-scored: [1, 0] and [2, 0.5, 0.7].
    let (a, b) = (zscore(&[1.0, 0.0]), zscore(&[2.0, 0.5, 0.7]));
    let batch = vec![
        GrpoSample::new(vec![1], vec![7, 8, 9], vec![-5.0, -5.5, -6.0], a[0]),
        sample(a[1]),
        GrpoSample::new(vec![4, 5, 6, 7], vec![10, 11], vec![-5.0, -5.0], b[0]),
        sample(b[1]),
        sample(b[2]),
    ];
    let run = |micro: usize, aggregation: LossAggregation| {
        let (model, vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
        let opt = AdamW::new(
            vm.all_vars(),
            AdamWConfig {
                lr: 1e-2,
                ..AdamWConfig::default()
            },
        )
        .unwrap();
        let grpo = GrpoConfig {
            micro_batch: micro,
            aggregation,
            ..GrpoConfig::default()
        };
        let stats = GrpoTrainer::new(&model, None, opt, grpo)
            .unwrap()
            .step(&batch)
            .unwrap();
        (stats, snapshot(&vm))
    };
    // Adam's first step moves a weight by about lr * sign(g), so a gradient near Adam's eps
    // turns summation-order rounding into up to a few thousandths of lr (1e-2 here): the
    // bound is 1% of lr.
    for aggregation in [LossAggregation::TokenMean, LossAggregation::SampleMean] {
        let (whole, w) = run(5, aggregation);
        for micro in [1, 2] {
            let (stats, m) = run(micro, aggregation);
            assert!(
                (stats.loss - whole.loss).abs() < 1e-5,
                "{stats:?} vs {whole:?}"
            );
            assert!((stats.grad_norm - whole.grad_norm).abs() < 1e-4 * whole.grad_norm);
            for ((name, a), (_, b)) in w.iter().zip(&m) {
                let d = a
                    .iter()
                    .zip(b)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0f32, f32::max);
                assert!(
                    d < 1e-4,
                    "{aggregation:?}, micro-batch {micro}: {name} differs by {d}"
                );
            }
        }
    }
}

#[test]
fn micro_batches_close_at_the_sample_count_or_the_padded_token_budget() {
    let of_len = |n: usize| GrpoSample::new(vec![1; n - 1], vec![2], vec![-1.0], 0.0);
    let samples: Vec<GrpoSample> = [10, 10, 10, 40, 10, 100, 5].map(of_len).to_vec();
    let sizes = |count, tokens| -> Vec<(usize, usize)> {
        micro_batches(&samples, count, tokens)
            .into_iter()
            .map(|(start, c)| (start, c.len()))
            .collect()
    };
    assert_eq!(sizes(4, 0), vec![(0, 4), (4, 3)], "count only");
    // 40 tokens: three of 10 fit; 40 alone; 10 then 100 would pad to 200; 100 then 5 too.
    assert_eq!(sizes(4, 40), vec![(0, 3), (3, 1), (4, 1), (5, 1), (6, 1)]);
    assert_eq!(sizes(2, 1000), vec![(0, 2), (2, 2), (4, 2), (6, 1)]);
    assert!(micro_batches(&[], 4, 40).is_empty());
}

/// The model's own log-probs of `completion` after `prompt` (on-policy old log-probs).
fn own_logprobs(model: &Decoder, prompt: &[u32], completion: &[u32]) -> Vec<f32> {
    completion_logprobs(&model.without_grad(), &[Pair { prompt, completion }])
        .unwrap()
        .to_vec1()
        .unwrap()
}

#[test]
fn later_epochs_move_the_ratio_the_clip_acts_and_the_schedule_sets_each_rate() {
    let cfg = tiny_llama_with_vocab();
    let (model, vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
    let (prompt, completion) = (vec![5u32, 60, 70], vec![8u32, 9, 10, 11]);
    let old = own_logprobs(&model, &prompt, &completion);
    let batch = vec![GrpoSample::new(prompt, completion, old, 1.0)];
    let opt = AdamW::new(vm.all_vars(), AdamWConfig::default()).unwrap();
    let grpo = GrpoConfig {
        epochs: 4,
        clip_eps: 0.05,
        max_grad_norm: 0.0,
        schedule: Some(spade_model::schedule::LrSchedule {
            warmup_steps: 2,
            ..spade_model::schedule::LrSchedule::constant(4e-2)
        }),
        ..GrpoConfig::default()
    };
    let mut t = GrpoTrainer::new(&model, None, opt, grpo).unwrap();
    let stats = t.update(&batch).unwrap();
    assert_eq!(stats.steps.len(), 4);
    // Step 1 is on-policy: ratio 1, nothing clipped.
    assert!((stats.steps[0].mean_ratio - 1.0).abs() < 1e-4, "{stats:?}");
    assert_eq!(stats.steps[0].clip_fraction, 0.0);
    // A positive advantage raised the completion's probability: by the last step the ratio
    // is past 1 + clip_eps on some tokens, which the clip then holds.
    let last = stats.steps[3];
    assert!(last.mean_ratio > 1.05, "{stats:?}");
    assert!(last.clip_fraction > 0.0, "{stats:?}");
    // Warmup over 2 steps: half the rate, then the full rate.
    let lrs: Vec<f64> = stats.steps.iter().map(|s| s.lr).collect();
    assert_eq!(lrs, vec![2e-2, 4e-2, 4e-2, 4e-2]);
}

#[test]
fn the_kl_term_pulls_the_policy_toward_the_reference() {
    let cfg = tiny_llama_with_vocab();
    let (prompt, completion) = (vec![5u32, 60, 70], vec![8u32, 9, 10, 11]);
    // Mean |log p_policy - log p_reference| over the completion after 10 on-policy steps with
    // a positive advantage, with and without the KL term (same seeds, same data).
    let divergence = |kl_coef: f64| -> f64 {
        let (model, vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
        // The same seed: identical weights in separate storage, frozen.
        let (reference, _) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
        let opt = AdamW::new(
            vm.all_vars(),
            AdamWConfig {
                lr: 1e-2,
                ..AdamWConfig::default()
            },
        )
        .unwrap();
        let grpo = GrpoConfig {
            kl_coef,
            max_grad_norm: 0.0,
            ..GrpoConfig::default()
        };
        let mut t = GrpoTrainer::new(&model, Some(&reference), opt, grpo).unwrap();
        for _ in 0..10 {
            let old = own_logprobs(&model, &prompt, &completion);
            let batch = [GrpoSample::new(
                prompt.clone(),
                completion.clone(),
                old,
                1.0,
            )];
            t.update(&batch).unwrap();
        }
        let p = own_logprobs(&model, &prompt, &completion);
        let r = own_logprobs(&reference, &prompt, &completion);
        p.iter()
            .zip(&r)
            .map(|(a, b)| f64::from((a - b).abs()))
            .sum::<f64>()
            / p.len() as f64
    };
    let free = divergence(0.0);
    let held = divergence(2.0);
    eprintln!("divergence without KL {free:.4}, with {held:.4}");
    assert!(free > 0.1, "the update moved the policy: {free}");
    assert!(
        held < 0.8 * free,
        "KL held the policy closer: {held} vs {free}"
    );
}

#[test]
fn recomputed_old_logprobs_replace_the_sampled_ones_and_the_gap_is_reported() {
    let cfg = tiny_llama_with_vocab();
    let (prompt, completion) = (vec![5u32, 60, 70], vec![8u32, 9, 10, 11]);
    // Sampled log-probs off by 0.5 per token (as if another kernel had sampled).
    let run = |recompute: bool| {
        let (model, vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
        let own = own_logprobs(&model, &prompt, &completion);
        let shifted: Vec<f32> = own.iter().map(|x| x - 0.5).collect();
        let batch = vec![GrpoSample::new(
            prompt.clone(),
            completion.clone(),
            shifted,
            1.0,
        )];
        let opt = AdamW::new(
            vm.all_vars(),
            AdamWConfig {
                lr: 1e-6,
                ..AdamWConfig::default()
            },
        )
        .unwrap();
        let grpo = GrpoConfig {
            epochs: 2,
            recompute_old_logprobs: recompute,
            ..GrpoConfig::default()
        };
        GrpoTrainer::new(&model, None, opt, grpo)
            .unwrap()
            .update(&batch)
            .unwrap()
    };
    let with = run(true);
    // The gap is measured against the sampled log-probs either way.
    assert!((with.logprob_gap().unwrap() - 0.5).abs() < 1e-5, "{with:?}");
    // Each token's importance weight is exp(0.5) = 1.65, under the clamp of 2.
    assert!(
        (with.tis_mean().unwrap() - 0.5f64.exp()).abs() < 1e-4,
        "{with:?}"
    );
    assert_eq!(with.tis_clamped_fraction(), Some(0.0));
    // Recomputed: the first step compares the training path with itself.
    assert_eq!(with.steps[0].mean_ratio, 1.0);
    assert_eq!(with.steps[0].clip_fraction, 0.0);
    // The second step's old log-probs are the recomputed ones, not the shifted ones: its gap
    // is how far one small step moved the policy, far below 0.5.
    assert!(with.steps[1].logprob_gap < 0.05, "{with:?}");
    let without = run(false);
    // As given: exp(0.5) on every token, all clipped.
    assert!(
        (without.steps[0].mean_ratio - 0.5f64.exp()).abs() < 1e-4,
        "{without:?}"
    );
    assert_eq!(without.steps[0].clip_fraction, 1.0);
    assert!((without.logprob_gap().unwrap() - 0.5).abs() < 1e-5);
    assert!(without.steps[1].logprob_gap > 0.45, "{without:?}");
}

#[test]
fn a_zero_advantage_sample_adds_no_gradient_but_counts_in_the_mean() {
    let cfg = tiny_llama_with_vocab();
    let scored = |model: &Decoder| {
        let (prompt, completion) = (vec![5u32, 60, 70], vec![8u32, 9, 10, 11]);
        let old = own_logprobs(model, &prompt, &completion);
        GrpoSample::new(prompt, completion, old, 1.0)
    };
    // Six trained tokens at advantage 0. Its old log-probs are absurd (a ratio of e^1000 if it
    // were scored), which a skipped sample never reads.
    let idle = GrpoSample::new(
        vec![3, 4],
        vec![20, 21, 22, 23, 24, 25],
        vec![-1000.0; 6],
        0.0,
    );
    let step = |batch: &[GrpoSample], aggregation: LossAggregation| {
        let (model, vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
        let mut batch = batch.to_vec();
        batch[0] = scored(&model);
        let opt = AdamW::new(vm.all_vars(), AdamWConfig::default()).unwrap();
        let grpo = GrpoConfig {
            max_grad_norm: 0.0,
            aggregation,
            ..GrpoConfig::default()
        };
        GrpoTrainer::new(&model, None, opt, grpo)
            .unwrap()
            .step(&batch)
            .unwrap()
    };
    let placeholder = sample(1.0);
    // Token mean: over all 10 trained tokens, so the scored sample's gradient is divided by
    // 10 instead of 4. Sample mean: over 2 samples instead of 1, so divided by 2.
    for (aggregation, factor) in [
        (LossAggregation::TokenMean, 4.0 / 10.0),
        (LossAggregation::SampleMean, 1.0 / 2.0),
    ] {
        let alone = step(std::slice::from_ref(&placeholder), aggregation);
        let both = step(&[placeholder.clone(), idle.clone()], aggregation);
        assert_eq!((alone.tokens, alone.scored_tokens), (4, 4));
        assert_eq!((both.tokens, both.scored_tokens), (10, 4));
        assert!(alone.grad_norm > 0.0);
        let expected = alone.grad_norm * factor;
        assert!(
            (both.grad_norm - expected).abs() < 1e-4 * expected,
            "{aggregation:?}: {} vs {expected}",
            both.grad_norm
        );
        assert!(
            (both.loss - alone.loss * factor).abs() < 1e-6,
            "{aggregation:?}"
        );
        // The ratio and gap figures are over the scored tokens: on-policy, exactly 1 and 0.
        assert!((both.mean_ratio - 1.0).abs() < 1e-5, "{both:?}");
        assert!(both.logprob_gap < 1e-5, "{both:?}");
    }
}

#[test]
fn per_sample_weights_give_every_sample_the_same_total_weight() {
    // A 1-token and a 25-token sample in one step.
    let norm = Norm {
        tokens: 26,
        samples: 2,
    };
    // Sample mean: 1 / (1 * 2) per token of the short one, 1 / (25 * 2) of the long one;
    // each sums to 1/2.
    assert_eq!(token_weight(LossAggregation::SampleMean, 1, norm), 0.5);
    assert_eq!(token_weight(LossAggregation::SampleMean, 25, norm), 0.02);
    // Token mean: 1/26 each, so the long sample weighs 25 times the short one.
    assert_eq!(
        token_weight(LossAggregation::TokenMean, 1, norm),
        1.0 / 26.0
    );
    assert_eq!(
        token_weight(LossAggregation::TokenMean, 25, norm),
        1.0 / 26.0
    );
}

/// An episode of `turns` turns whose contexts chain (one completion token per turn, one
/// observation token between turns), as credit assignment trains it.
fn chained_episode(turns: usize, advantage: f64) -> GrpoSample {
    let mut out = Vec::new();
    let mut ctx: Vec<u32> = vec![5, 6];
    for k in 0..turns {
        let tokens = vec![8 + (k % 20) as u32];
        out.push(Sampled {
            prompt: ctx.clone(),
            tokens: tokens.clone(),
            logprobs: vec![-1.0],
            text: String::new(),
        });
        ctx.extend(tokens);
        ctx.push(40);
    }
    let seqs = episode_sequences(&out, advantage, 0);
    assert_eq!(seqs.len(), 1);
    assert_eq!(seqs[0].trained_tokens(), turns);
    seqs.into_iter().next().unwrap()
}

#[test]
fn a_one_turn_win_and_a_25_turn_loss_cancel_under_the_per_sample_mean() {
    let cfg = tiny_llama_with_vocab();
    let batch = vec![chained_episode(1, 1.0), chained_episode(25, -1.0)];
    let loss = |aggregation: LossAggregation| {
        let (model, vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
        let opt = AdamW::new(vm.all_vars(), AdamWConfig::default()).unwrap();
        // On-policy (old log-probs recomputed, ratio exactly 1) and TIS off, so each token's
        // loss is -advantage: -1 for the win's token, +1 for each of the loss's 25.
        let grpo = GrpoConfig {
            aggregation,
            recompute_old_logprobs: true,
            tis_clamp: 0.0,
            epochs: 1,
            ..GrpoConfig::default()
        };
        let stats = GrpoTrainer::new(&model, None, opt, grpo)
            .unwrap()
            .update(&batch)
            .unwrap();
        assert_eq!(stats.steps[0].mean_ratio, 1.0);
        stats.steps[0].loss
    };
    // Per sample: (-1) / 2 + 25 * (1 / 25) / 2 = 0.
    let per_sample = loss(LossAggregation::SampleMean);
    assert!(per_sample.abs() < 1e-6, "{per_sample}");
    // Per token: (-1 + 25) / 26, the loss outweighing the win 25 to 1.
    let per_token = loss(LossAggregation::TokenMean);
    assert!((per_token - 24.0 / 26.0).abs() < 1e-5, "{per_token}");
}

#[test]
fn truncated_importance_weights_are_exp_of_the_gap_clamped() {
    // Gaps 0, 0.5, 1, -0.3: weights 1, e^0.5, min(2, e) = 2, e^-0.3 (below 1 is kept).
    let w = tis_weights(&[0.0, 0.0, 0.0, -0.3], &[0.0, -0.5, -1.0, 0.0], 2.0);
    let want = [1.0, 0.5f32.exp(), 2.0, (-0.3f32).exp()];
    for (g, w) in w.weights.iter().zip(want) {
        assert!((g - w).abs() < 1e-6, "{g} vs {w}");
    }
    assert_eq!(w.clamped, 1);
    // A huge gap (a stale or mis-sampled token) is cut, never infinite.
    let huge = tis_weights(&[0.0], &[-1000.0], 2.0);
    assert_eq!((huge.weights, huge.clamped), (vec![2.0], 1));
    // Clamp 0: off, every weight 1.
    let off = tis_weights(&[0.0, 0.0], &[-0.5, -5.0], 0.0);
    assert_eq!((off.weights, off.clamped), (vec![1.0, 1.0], 0));
}

#[test]
fn a_batch_of_zero_advantages_scores_nothing_and_still_steps_the_optimiser() {
    let cfg = tiny_llama_with_vocab();
    let (model, vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
    let batch = vec![sample(0.0), sample(0.0)];
    let opt = AdamW::new(vm.all_vars(), AdamWConfig::default()).unwrap();
    let grpo = GrpoConfig {
        epochs: 2,
        recompute_old_logprobs: true,
        ..GrpoConfig::default()
    };
    let mut t = GrpoTrainer::new(&model, None, opt, grpo).unwrap();
    let stats = t.update(&batch).unwrap();
    assert_eq!(stats.steps.len(), 2);
    assert_eq!((stats.tokens(), stats.scored_tokens()), (2, 0));
    assert_eq!(t.optimizer_mut().steps(), 2);
    for s in &stats.steps {
        assert_eq!((s.loss, s.grad_norm), (0.0, 0.0), "{s:?}");
    }
    // Nothing was measured, so nothing is reported as if it had been.
    assert_eq!(stats.ratio_mean(), None);
    assert_eq!(stats.clip_fraction(), None);
    assert_eq!(stats.logprob_gap(), None);
}

#[test]
fn with_a_kl_term_a_zero_advantage_sample_is_scored() {
    let cfg = tiny_llama_with_vocab();
    let (base, _) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
    let mut model = base.clone();
    let vm = VarMap::new();
    let vb = candle_nn::VarBuilder::from_varmap(&vm, candle_core::DType::F32, &Device::Cpu);
    model.attach_lora(&LoraConfig::default(), &vb).unwrap();
    let opt = AdamW::new(vm.all_vars(), AdamWConfig::default()).unwrap();
    let grpo = GrpoConfig {
        kl_coef: 0.1,
        ..GrpoConfig::default()
    };
    let mut t = GrpoTrainer::new(&model, Some(&base), opt, grpo).unwrap();
    let s = t.step(&[sample(0.0)]).unwrap();
    assert_eq!((s.tokens, s.scored_tokens), (1, 1));
}

#[test]
fn the_importance_weight_scales_each_tokens_loss_and_is_cut_at_the_clamp() {
    let cfg = tiny_llama_with_vocab();
    let (prompt, completion) = (vec![5u32, 60, 70], vec![8u32, 9, 10, 11]);
    // The sampler's log-probs lie `shift` below the training path's on every token.
    let run = |shift: f32, tis_clamp: f64| {
        let (model, vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
        let own = own_logprobs(&model, &prompt, &completion);
        let sampled: Vec<f32> = own.iter().map(|x| x - shift).collect();
        let batch = vec![GrpoSample::new(
            prompt.clone(),
            completion.clone(),
            sampled,
            1.0,
        )];
        let opt = AdamW::new(vm.all_vars(), AdamWConfig::default()).unwrap();
        let grpo = GrpoConfig {
            epochs: 1,
            recompute_old_logprobs: true,
            tis_clamp,
            ..GrpoConfig::default()
        };
        GrpoTrainer::new(&model, None, opt, grpo)
            .unwrap()
            .update(&batch)
            .unwrap()
    };
    // On the training path the ratio is 1, so each token's loss is -1 times its weight.
    let off = run(0.5, 0.0);
    assert!((off.steps[0].loss + 1.0).abs() < 1e-5, "{off:?}");
    assert_eq!(off.tis_mean(), Some(1.0));
    // Gap 0.5: weight e^0.5 on every token, none cut.
    let half = run(0.5, 2.0);
    assert!((half.steps[0].loss + 0.5f64.exp()).abs() < 1e-4, "{half:?}");
    assert_eq!(half.tis_clamped_fraction(), Some(0.0));
    // Gap 1: e^1 = 2.72 is cut to 2 on every token.
    let cut = run(1.0, 2.0);
    assert!((cut.steps[0].loss + 2.0).abs() < 1e-5, "{cut:?}");
    assert_eq!(cut.tis_mean(), Some(2.0));
    assert_eq!(cut.tis_clamped_fraction(), Some(1.0));
}

/// The entropy in nats of the model's next-token distribution after `context`, from the
/// log-probability of every vocabulary token as a one-token completion (no entropy code).
fn entropy_by_enumeration(model: &Decoder, context: &[u32], vocab: usize) -> f64 {
    let singles: Vec<[u32; 1]> = (0..vocab as u32).map(|v| [v]).collect();
    let pairs: Vec<Pair> = singles
        .iter()
        .map(|v| Pair {
            prompt: context,
            completion: v,
        })
        .collect();
    let lp: Vec<f32> = completion_logprobs(&model.without_grad(), &pairs)
        .unwrap()
        .to_vec1()
        .unwrap();
    let total: f64 = lp.iter().map(|&l| f64::from(l).exp()).sum();
    assert!(
        (total - 1.0).abs() < 1e-4,
        "a distribution sums to 1: {total}"
    );
    lp.iter().map(|&l| -f64::from(l).exp() * f64::from(l)).sum()
}

/// The mean entropy over the positions that predict each token of `completion`.
fn mean_entropy(model: &Decoder, prompt: &[u32], completion: &[u32], vocab: usize) -> f64 {
    (0..completion.len())
        .map(|k| {
            let context: Vec<u32> = prompt.iter().chain(&completion[..k]).copied().collect();
            entropy_by_enumeration(model, &context, vocab)
        })
        .sum::<f64>()
        / completion.len() as f64
}

#[test]
fn span_entropy_is_the_entropy_of_each_scored_positions_distribution() {
    let cfg = tiny_llama_with_vocab();
    let (model, _) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
    // Two rows; the second scores turns 0..2 and 3..4 of its completion (2 is an observation).
    let (p1, c1) = (vec![5u32, 60], vec![8u32, 9]);
    let (p2, c2) = (vec![7u32], vec![40u32, 41, 42, 43]);
    let spans1 = std::iter::once(0..2).collect::<Vec<_>>();
    let spans2 = [0..2, 3..4];
    let rows = [
        Spans {
            prompt: &p1,
            completion: &c1,
            spans: &spans1,
        },
        Spans {
            prompt: &p2,
            completion: &c2,
            spans: &spans2,
        },
    ];
    let (lp, entropy) = span_logprobs_and_entropy(&model.without_grad(), &rows).unwrap();
    let entropy: Vec<f32> = entropy.to_vec1().unwrap();
    assert_eq!(
        lp.to_vec1::<f32>().unwrap(),
        span_logprobs(&model.without_grad(), &rows)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap()
    );
    // Scored tokens, in order: c1[0], c1[1], c2[0], c2[1], c2[3]; each entropy is of the
    // distribution that predicted it.
    let contexts: Vec<Vec<u32>> = vec![
        p1.clone(),
        [p1.clone(), c1[..1].to_vec()].concat(),
        p2.clone(),
        [p2.clone(), c2[..1].to_vec()].concat(),
        [p2.clone(), c2[..3].to_vec()].concat(),
    ];
    assert_eq!(entropy.len(), contexts.len());
    for (h, context) in entropy.iter().zip(&contexts) {
        let want = entropy_by_enumeration(&model, context, cfg.vocab_size);
        assert!(
            (f64::from(*h) - want).abs() < 1e-4,
            "entropy after {context:?}: {h} against {want} by enumeration"
        );
        // A random tiny model is far from uniform or one-hot: the check is not trivial.
        assert!(
            want > 0.5 && want < (cfg.vocab_size as f64).ln() - 1e-3,
            "{want}"
        );
    }
}

#[test]
fn the_entropy_bonus_spreads_a_policy_that_zero_advantages_leave_alone() {
    let cfg = tiny_llama_with_vocab();
    let (prompt, completion) = (vec![5u32, 60, 70], vec![8u32, 9, 10]);
    // Three on-policy steps on two samples whose advantages are all 0 (a collapsed group).
    let run = |entropy_coef: f64| {
        let (model, vm) = Decoder::random(&cfg, 1, 0.3, &Device::Cpu).unwrap();
        let before = mean_entropy(&model, &prompt, &completion, cfg.vocab_size);
        let opt = AdamW::new(
            vm.all_vars(),
            AdamWConfig {
                lr: 1e-2,
                ..AdamWConfig::default()
            },
        )
        .unwrap();
        let grpo = GrpoConfig {
            entropy_coef,
            max_grad_norm: 0.0,
            ..GrpoConfig::default()
        };
        let mut t = GrpoTrainer::new(&model, None, opt, grpo).unwrap();
        let mut first = None;
        for _ in 0..3 {
            let old = own_logprobs(&model, &prompt, &completion);
            let batch = vec![
                GrpoSample::new(prompt.clone(), completion.clone(), old.clone(), 0.0),
                GrpoSample::new(prompt.clone(), completion.clone(), old, 0.0),
            ];
            let stats = t.update(&batch).unwrap();
            first.get_or_insert(stats);
        }
        let after = mean_entropy(&model, &prompt, &completion, cfg.vocab_size);
        (before, after, first.unwrap())
    };
    let (before, after, stats) = run(0.0);
    assert_eq!(
        after, before,
        "without the bonus, zero advantages move nothing"
    );
    assert_eq!((stats.tokens(), stats.scored_tokens()), (6, 0));
    assert_eq!(stats.entropy(), None, "nothing scored, nothing measured");

    let (before, after, stats) = run(0.5);
    assert_eq!((stats.tokens(), stats.scored_tokens()), (6, 6));
    let measured = stats.entropy().unwrap();
    assert!(
        (measured - before).abs() < 1e-4,
        "the first step reports the sampling policy's entropy: {measured} against {before}"
    );
    // The loss is the bonus alone: minus the weight times the mean entropy.
    assert!(
        (stats.loss() + 0.5 * before).abs() < 1e-4,
        "loss {} against {}",
        stats.loss(),
        -0.5 * before
    );
    assert!(
        after > before + 0.05,
        "the bonus raised the entropy: {before} -> {after}"
    );
}
