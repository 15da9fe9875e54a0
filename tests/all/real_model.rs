//! Tests on the real default model (SmolLM2-135M-Instruct). Ignored by default: run
//! `spade model fetch`, then `cargo test -p spade --test all real_model -- --ignored`.
use candle_core::Device;
use spade_model::chat::Message;
use spade_model::fetch;
use spade_model::load::{self, LoadedModel};
use spade_model::sample::{FinishReason, Sampler, SamplingParams};

fn default_model() -> LoadedModel {
    let path = fetch::default_model_path();
    load::load(&path, &Device::Cpu)
        .unwrap_or_else(|e| panic!("{e}: run `spade model fetch` first ({})", path.display()))
}

#[test]
#[ignore = "needs the default model: run `spade model fetch` first"]
fn answers_the_capital_of_france() {
    let m = default_model();
    let text = m.chat.render(
        &[Message::new("user", "What is the capital of France?")],
        true,
    );
    let s = Sampler::from_loaded(&m);
    let prompt = s.encode(&text).unwrap();
    let greedy = SamplingParams {
        temperature: 0.0,
        max_new_tokens: 40,
        ..SamplingParams::default()
    };
    let out = s.sample(&prompt, 1, &greedy, &mut |_, _| {}).unwrap();
    assert!(out[0].text.contains("Paris"), "{:?}", out[0].text);
    assert_eq!(out[0].finish, FinishReason::Eos);
    // A sampled group shares the prompt cache, is reproducible, and finds Paris too (the 135M
    // model puts nearly as much mass on a French "L'..." opening as on "The", so not always).
    let warm = SamplingParams {
        temperature: 0.3,
        seed: 1,
        ..greedy
    };
    let group = s.sample(&prompt, 4, &warm, &mut |_, _| {}).unwrap();
    assert_eq!(group, s.sample(&prompt, 4, &warm, &mut |_, _| {}).unwrap());
    assert!(group.iter().any(|c| c.text.contains("Paris")), "{group:?}");
}

#[test]
#[ignore = "needs the default model: run `spade model fetch` first"]
fn tokenizer_round_trips_python_source() {
    let m = default_model();
    let source = r#"import json, random
from dataclasses import dataclass


@dataclass
class Env:
    """A toy environment."""
    seed: int = 0

    def reset(self) -> dict:
        self.rng = random.Random(self.seed)
        return {"obs": [1, 2, 3], "text": 'héllo\twörld ✓'}

    def step(self, action):
        if action not in (0, 1):
            raise ValueError(f"bad action {action!r}")
        return json.dumps({"reward": 1.0 * action}), False
"#;
    let enc = m.tokenizer.encode(source, false).unwrap();
    assert!(enc.get_ids().len() > 50);
    assert_eq!(m.tokenizer.decode(enc.get_ids(), false).unwrap(), source);
    let chat = m.chat.render(&[Message::new("user", "hi")], true);
    let ids = m.tokenizer.encode(chat.as_str(), false).unwrap();
    assert_eq!(ids.get_ids()[0], 1, "<|im_start|> is one special token");
    let spade_model::chat::ChatTemplate::ChatMl { default_system } = &m.chat;
    assert_eq!(
        default_system.as_deref(),
        Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face")
    );
}

#[test]
#[ignore = "needs the default model: run `spade model fetch` first"]
fn logits_agree_with_candle_quantized_llama_on_the_gguf() {
    use candle_transformers::models::quantized_llama::ModelWeights;
    let m = default_model();
    let path = fetch::default_model_path();
    let mut file = std::fs::File::open(&path).unwrap();
    let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
    let mut reference = ModelWeights::from_gguf(content, &mut file, &Device::Cpu).unwrap();
    let text = m.chat.render(
        &[Message::new("user", "What is the capital of France?")],
        true,
    );
    let ids = Sampler::from_loaded(&m).encode(&text).unwrap();
    let input = candle_core::Tensor::new(ids.as_slice(), &Device::Cpu)
        .unwrap()
        .unsqueeze(0)
        .unwrap();
    let ours: Vec<f32> = m
        .model
        .forward(&input, &mut m.model.new_cache())
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec1()
        .unwrap();
    let theirs: Vec<f32> = reference
        .forward(&input, 0)
        .unwrap()
        .squeeze(0)
        .unwrap()
        .to_vec1()
        .unwrap();
    // By default the reference multiplies Q4_1 weights by Q8-quantised activations, so agreement
    // is approximate (measured: 0.44 over the top 20, and the first two tokens swap places). With
    // CANDLE_DEQUANTIZE_ALL=1 it dequantises to f32 like our loader, and agreement is exact up to
    // float rounding (measured: 1e-5).
    let exact = std::env::var("CANDLE_DEQUANTIZE_ALL").is_ok_and(|v| !v.is_empty() && v != "0");
    let tolerance = if exact { 1e-3 } else { 0.6 };
    let log_softmax = |v: &[f32]| {
        let max = v.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let lse = max + v.iter().map(|x| (x - max).exp()).sum::<f32>().ln();
        v.iter().map(|x| x - lse).collect::<Vec<f32>>()
    };
    let (lo, lt) = (log_softmax(&ours), log_softmax(&theirs));
    let top = |v: &[f32], k: usize| {
        let mut idx: Vec<usize> = (0..v.len()).collect();
        idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
        idx.truncate(k);
        idx
    };
    let (mut a, mut b) = (top(&lo, 5), top(&lt, 5));
    a.sort_unstable();
    b.sort_unstable();
    assert_eq!(a, b);
    let diff = top(&lo, 20)
        .into_iter()
        .map(|i| (lo[i] - lt[i]).abs())
        .fold(0.0f32, f32::max);
    eprintln!("largest log-prob difference over the top 20: {diff}");
    assert!(
        diff < tolerance,
        "log-prob difference {diff} (tolerance {tolerance})"
    );
}

#[test]
#[ignore = "needs the default model: run `spade model fetch` first"]
fn sampled_logprobs_match_the_training_path_and_a_lora_grpo_step_runs() {
    use spade_model::grpo::{GrpoConfig, GrpoSample, GrpoTrainer};
    use spade_model::logprob::{Pair, completion_logprobs};
    use spade_model::model::{LoraConfig, lora};
    use spade_model::optim::{AdamW, AdamWConfig};
    let mut m = default_model();
    let reference = m.model.clone();
    let adapters = lora::attach_new(&mut m.model, &LoraConfig::default(), 0).unwrap();
    let text = m
        .chat
        .render(&[Message::new("user", "Name a fruit.")], true);
    let s = Sampler::from_loaded(&m);
    let prompt = s.encode(&text).unwrap();
    let params = SamplingParams {
        temperature: 1.0,
        max_new_tokens: 12,
        seed: 2,
        ..SamplingParams::default()
    };
    let group = s.sample(&prompt, 4, &params, &mut |_, _| {}).unwrap();
    let pairs: Vec<Pair> = group
        .iter()
        .map(|c| Pair {
            prompt: &prompt,
            completion: &c.tokens,
        })
        .collect();
    let lp: Vec<f32> = completion_logprobs(&m.model, &pairs)
        .unwrap()
        .to_vec1()
        .unwrap();
    let sampled: Vec<f32> = group.iter().flat_map(|c| c.logprobs.clone()).collect();
    let worst = lp
        .iter()
        .zip(&sampled)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(
        worst < 1e-3,
        "sampling and training log-probs differ by {worst}"
    );
    let batch: Vec<GrpoSample> = group
        .into_iter()
        .enumerate()
        .map(|(i, c)| GrpoSample::new(prompt.clone(), c.tokens, c.logprobs, i as f64 - 1.5))
        .collect();
    let opt = AdamW::new(adapters.all_vars(), AdamWConfig::default()).unwrap();
    let cfg = GrpoConfig {
        kl_coef: 0.05,
        micro_batch: 2,
        ..GrpoConfig::default()
    };
    let stats = GrpoTrainer::new(&m.model, Some(&reference), opt, cfg)
        .unwrap()
        .step(&batch)
        .unwrap();
    assert!((stats.mean_ratio - 1.0).abs() < 1e-3, "{stats:?}");
    assert!(
        stats.kl.abs() < 1e-4,
        "fresh adapters equal the reference: {stats:?}"
    );
    assert!(
        stats.grad_norm > 0.0 && stats.grad_norm.is_finite(),
        "{stats:?}"
    );
}

/// One default `spade train` iteration on the real model, seeded with the bundled examples (as
/// `spade train` is) so the play and update phases run even if nothing valid is designed.
/// Prints the metrics line.
#[test]
#[ignore = "needs the default model and minutes: run `spade model fetch`, then `cargo test --release -p spade --test all real_model::one_default_rollout -- --ignored --nocapture`"]
fn one_default_rollout_finishes_in_under_15_minutes() {
    use spade_selfplay::{CandlePolicy, Corpus, Run, TrainConfig, corpus};
    let cfg = TrainConfig::default();
    let mut policy = CandlePolicy::new(default_model(), &cfg.policy()).unwrap();
    let dir = std::env::temp_dir().join(format!("spade-real-rollout-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The pool `spade train` starts with: the bundled examples (not the held-out eval envs).
    let starters = spade_selfplay::starter_envs::starter_envs();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let runtime = spade_sandbox::Runtime::new(spade_sandbox::Config::default()).unwrap();
    let corpus = Corpus::parse(corpus::DEFAULT_CORPUS, cfg.max_doc_words).unwrap();
    let start = std::time::Instant::now();
    let m = rt.block_on(async {
        let mut run = Run::create(&dir, cfg, corpus, runtime, &mut policy, starters).unwrap();
        run.on_progress(spade_selfplay::progress::Lines::new());
        run.rollout().await.unwrap()
    });
    println!("{}", serde_json::to_string(&m).unwrap());
    assert!(
        start.elapsed().as_secs() < 900,
        "took {:?}",
        start.elapsed()
    );
}
