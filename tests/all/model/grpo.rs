//! GRPO on a toy task, LoRA freezing, advantages, and the fused AdamW.
use candle_core::{Device, Tensor};
use candle_nn::VarMap;
use spade_trainer::grpo::{
    AdvantageNorm, GrpoConfig, GrpoSample, GrpoTrainer, advantages, micro_batches,
};
use spade_trainer::model::{Decoder, LoraConfig, lora};
use spade_trainer::optim::{AdamW, AdamWConfig};
use spade_trainer::sample::{Sampler, SamplingParams};

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
            for c in sampler.sample(prompt, 8, &p, &mut |_, _| {}).unwrap() {
                batch.push(GrpoSample {
                    prompt: prompt.clone(),
                    reward: reward(&c.tokens),
                    completion: c.tokens,
                    old_logprobs: c.logprobs,
                    group: g,
                    role: "agent".into(),
                });
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

fn sample(reward: f64, group: usize, role: &str) -> GrpoSample {
    GrpoSample {
        prompt: vec![1],
        completion: vec![2],
        old_logprobs: vec![-1.0],
        reward,
        group,
        role: role.into(),
    }
}

#[test]
fn advantages_are_normalised_per_group_or_per_role() {
    let batch = vec![
        sample(1.0, 0, "designer"),
        sample(3.0, 0, "designer"),
        sample(10.0, 1, "agent"),
        sample(30.0, 1, "agent"),
        sample(5.0, 2, "agent"),
        sample(5.0, 2, "agent"),
    ];
    let g = advantages(&batch, AdvantageNorm::Group);
    for (x, y) in g.iter().zip([-1.0, 1.0, -1.0, 1.0, 0.0, 0.0]) {
        assert!((x - y).abs() < 1e-4, "{g:?}");
    }
    let r = advantages(&batch, AdvantageNorm::Role);
    // Agent centred rewards: -10, 10, 0, 0 -> std sqrt(50).
    let s = 50f64.sqrt();
    for (x, y) in r.iter().zip([-1.0, 1.0, -10.0 / s, 10.0 / s, 0.0, 0.0]) {
        assert!((x - y).abs() < 1e-4, "{r:?}");
    }
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
    let mut s = sample(1.0, 0, "a");
    s.old_logprobs.clear();
    assert_eq!(
        t.step(&[s]).unwrap_err().to_string(),
        "invalid parameter: 0 old log-probs for 1 completion tokens"
    );
    let mut s = sample(1.0, 0, "a");
    s.completion.clear();
    s.old_logprobs.clear();
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
        sample(1.0, 0, "a"),
        sample(0.0, 0, "a"),
        GrpoSample {
            completion: vec![7, 8],
            old_logprobs: vec![-5.0, -5.0],
            ..sample(0.5, 1, "b")
        },
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
    let batch = vec![
        GrpoSample {
            completion: vec![7, 8, 9],
            old_logprobs: vec![-5.0, -5.5, -6.0],
            ..sample(1.0, 0, "a")
        },
        sample(0.0, 0, "a"),
        GrpoSample {
            prompt: vec![4, 5, 6, 7],
            completion: vec![10, 11],
            old_logprobs: vec![-5.0, -5.0],
            ..sample(2.0, 1, "b")
        },
        sample(0.5, 1, "b"),
        sample(0.7, 1, "b"),
    ];
    let run = |micro: usize| {
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
            ..GrpoConfig::default()
        };
        let stats = GrpoTrainer::new(&model, None, opt, grpo)
            .unwrap()
            .step(&batch)
            .unwrap();
        (stats, snapshot(&vm))
    };
    let (whole, w) = run(5);
    for micro in [1, 2] {
        let (stats, m) = run(micro);
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
            assert!(d < 1e-5, "micro-batch {micro}: {name} differs by {d}");
        }
    }
}

#[test]
fn micro_batches_close_at_the_sample_count_or_the_padded_token_budget() {
    let of_len = |n: usize| GrpoSample {
        prompt: vec![1; n - 1],
        completion: vec![2],
        old_logprobs: vec![-1.0],
        reward: 0.0,
        group: 0,
        role: "agent".into(),
    };
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
