//! `spade bench-model`: sampling and RL-update throughput, and peak memory.
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use spade_trainer::fetch;
use spade_trainer::grpo::{GrpoConfig, GrpoSample, GrpoTrainer};
use spade_trainer::model::{Config, Decoder, LoraConfig, lora};
use spade_trainer::optim::{AdamW, AdamWConfig};
use spade_trainer::prefix_cache::PrefixCache;
use spade_trainer::sample::{Sampler, SamplingParams};

/// Arguments of `spade bench-model`.
#[derive(Debug, Args)]
pub struct BenchModel {
    /// Model (default: the fetched SmolLM2-135M-Instruct; a random model of its shape if absent).
    #[arg(long)]
    model: Option<PathBuf>,
    /// New tokens per completion.
    #[arg(long, default_value_t = 32)]
    tokens: usize,
    /// Group size for the batched sampling measurement.
    #[arg(long, default_value_t = 8)]
    group: usize,
    /// Prompt length in tokens.
    #[arg(long, default_value_t = 32)]
    prompt: usize,
    /// Sequences per RL update.
    #[arg(long, default_value_t = 4)]
    batch: usize,
    /// Tokens per sequence in the RL update (prompt included).
    #[arg(long, default_value_t = 128)]
    seq: usize,
    /// LoRA rank for the LoRA update.
    #[arg(long, default_value_t = 8)]
    rank: usize,
    /// Episodes in the multi-turn agent measurement (0 skips it).
    #[arg(long, default_value_t = 8)]
    pub episodes: usize,
    /// Turns per episode in the multi-turn agent measurement.
    #[arg(long, default_value_t = 4)]
    pub turns: usize,
    /// Also time one full fine-tuning update.
    #[arg(long)]
    full: bool,
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|v| v.parse::<f64>().ok())
            })
        })
        .map_or(f64::NAN, |kib| kib / 1024.0)
}

impl BenchModel {
    /// Runs the benchmark and prints a table.
    pub fn execute(self) -> anyhow::Result<()> {
        let path = self.model.clone().or_else(|| {
            let p = fetch::default_model_path();
            p.exists().then_some(p)
        });
        let (model, what) = match &path {
            Some(p) => (super::load_model(Some(p))?.model, p.display().to_string()),
            None => {
                let cfg = Config::smollm2_135m();
                let (m, _vm) = Decoder::random(&cfg, 0, 0.02, &super::device()?)?;
                (
                    m,
                    "random init, SmolLM2-135M shape (model not fetched)".to_string(),
                )
            }
        };
        println!("model: {what}");
        println!("threads: {}", candle_core::utils::get_num_threads());
        let vocab = model.config().vocab_size as u32;
        let prompt: Vec<u32> = (0..self.prompt as u32)
            .map(|i| 100 + (i * 37) % (vocab - 100))
            .collect();
        let tokenizer = tokenizers::Tokenizer::new(tokenizers::models::bpe::BPE::default());
        let params = SamplingParams {
            temperature: 1.0,
            max_new_tokens: self.tokens,
            seed: 1,
            ..SamplingParams::default()
        };
        println!("| measurement | tokens | seconds | tokens/s |");
        println!("|---|---|---|---|");
        for g in [1, self.group] {
            let sampler = Sampler::new(&model, &tokenizer, &[]);
            let start = Instant::now();
            let out = sampler.sample(&prompt, g, &params, &mut |_, _| {})?;
            let secs = start.elapsed().as_secs_f64();
            let n: usize = out.iter().map(|c| c.tokens.len()).sum();
            println!(
                "| sampling G={g} (prompt {}) | {n} | {secs:.2} | {:.1} |",
                self.prompt,
                n as f64 / secs
            );
        }
        if self.episodes > 0 {
            multi_turn(
                &model,
                &tokenizer,
                &prompt,
                self.episodes,
                self.turns,
                &params,
            )?;
        }
        let half = self.seq / 4;
        let samples: Vec<GrpoSample> = (0..self.batch)
            .map(|i| {
                GrpoSample::new(
                    prompt.iter().cycle().take(half).copied().collect(),
                    (0..self.seq - half)
                        .map(|k| 200 + ((k * 7 + i) as u32 % 1000))
                        .collect(),
                    vec![-5.0; self.seq - half],
                    i as f64 - (self.batch as f64 - 1.0) / 2.0,
                )
            })
            .collect();
        let total_tokens = self.batch * self.seq;
        let grpo = GrpoConfig {
            micro_batch: self.batch,
            ..GrpoConfig::default()
        };
        let lcfg = LoraConfig {
            r: self.rank,
            ..LoraConfig::default()
        };
        let mut lora_model = model.clone();
        let adapters = lora::attach_new(&mut lora_model, &lcfg, 0)?;
        let opt = AdamW::new(adapters.all_vars(), AdamWConfig::default())?;
        let mut trainer = GrpoTrainer::new(&lora_model, None, opt, grpo.clone())?;
        let label = format!(
            "GRPO update, LoRA r={} ({}x{})",
            self.rank, self.batch, self.seq
        );
        time_updates(&label, total_tokens, || {
            Ok(trainer.step(&samples).map(|_| ())?)
        })?;
        if self.full {
            drop(trainer);
            drop(model);
            let (full_model, varmap) = model_vars(&path)?;
            let opt = AdamW::new(varmap.all_vars(), AdamWConfig::default())?;
            let mut trainer = GrpoTrainer::new(&full_model, None, opt, grpo)?;
            let label = format!("GRPO update, full ({}x{})", self.batch, self.seq);
            time_updates(&label, total_tokens, || {
                Ok(trainer.step(&samples).map(|_| ())?)
            })?;
            drop(trainer);
            optimizer_steps(&varmap)?;
        }
        println!("peak RSS: {:.0} MiB", peak_rss_mib());
        Ok(())
    }
}

/// The agent's play loop: `episodes` conversations of `turns` turns, each turn adding the
/// completion and a 48-token observation. The baseline samples each episode alone and
/// prefills its whole chat every turn; spade decodes all episodes as one batch and prefills
/// only what each turn added. Prints both and their ratio.
fn multi_turn(
    model: &Decoder,
    tokenizer: &tokenizers::Tokenizer,
    prompt: &[u32],
    episodes: usize,
    turns: usize,
    params: &SamplingParams,
) -> anyhow::Result<()> {
    let sampler = Sampler::new(model, tokenizer, &[]);
    let observation = |e: usize, t: usize| -> Vec<u32> {
        (0..48u32)
            .map(|k| 300 + ((k * 13 + e as u32 * 7 + t as u32) % 5000))
            .collect()
    };
    let start_chats = || -> Vec<Vec<u32>> {
        (0..episodes)
            .map(|e| {
                let mut c = prompt.to_vec();
                c.extend(observation(e, 0));
                c
            })
            .collect()
    };
    let mut results = Vec::new();
    for batched in [false, true] {
        let mut chats = start_chats();
        let mut prefixes = PrefixCache::new(usize::MAX);
        let mut tokens = 0;
        let start = Instant::now();
        for turn in 0..turns {
            let seeds: Vec<u64> = (0..episodes).map(|e| (e * 1000 + turn) as u64).collect();
            let outs: Vec<Vec<u32>> = if batched {
                let mut rows = Vec::with_capacity(episodes);
                for (chat, &seed) in chats.iter().zip(&seeds) {
                    rows.push((sampler.prefill(chat, prefixes.take(chat))?, seed));
                }
                let out = sampler.sample_rows(rows, params, true, &mut |_, _| {})?;
                let mut toks = Vec::new();
                for (chat, (c, cache)) in chats.iter().zip(out) {
                    prefixes.insert_completed(chat, &c.tokens, cache.expect("kept"));
                    toks.push(c.tokens);
                }
                toks
            } else {
                let mut toks = Vec::new();
                for (chat, &seed) in chats.iter().zip(&seeds) {
                    let p = SamplingParams {
                        seed,
                        ..params.clone()
                    };
                    toks.push(
                        sampler
                            .sample(chat, 1, &p, &mut |_, _| {})?
                            .remove(0)
                            .tokens,
                    );
                }
                toks
            };
            for (e, (chat, out)) in chats.iter_mut().zip(outs).enumerate() {
                tokens += out.len();
                chat.extend(out);
                chat.extend(observation(e, turn + 1));
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let label = if batched {
            "batched, prefix reused"
        } else {
            "one by one, full prefill"
        };
        println!(
            "| agent turns {episodes}x{turns}, {label} | {tokens} | {secs:.2} | {:.1} |",
            tokens as f64 / secs
        );
        results.push(secs);
    }
    println!(
        "| agent turns speed-up (one by one / batched) | - | {:.2}x | - |",
        results[0] / results[1]
    );
    Ok(())
}

/// Times two updates (the first one pays for first-touch allocations) and prints both.
fn time_updates(
    label: &str,
    tokens: usize,
    mut step: impl FnMut() -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for run in ["first", "second"] {
        let start = Instant::now();
        step()?;
        let secs = start.elapsed().as_secs_f64();
        println!(
            "| {label}, {run} | {tokens} | {secs:.2} | {:.1} |",
            tokens as f64 / secs
        );
    }
    Ok(())
}

/// Times one step of the fused AdamW against `candle_nn::AdamW` over all weights.
fn optimizer_steps(varmap: &candle_nn::VarMap) -> anyhow::Result<()> {
    use candle_nn::Optimizer;
    let vars = varmap.all_vars();
    let params: usize = vars.iter().map(|v| v.elem_count()).sum();
    // Gradients of sum(0.001 * w^2), one per weight.
    let mut loss = candle_core::Tensor::new(0f32, vars[0].device())?;
    for v in &vars {
        loss = (loss + (v.as_tensor().sqr()?.sum_all()? * 1e-3)?)?;
    }
    let grads = loss.backward()?;
    let mut fused = AdamW::new(vars.clone(), AdamWConfig::default())?;
    let mut stock = candle_nn::AdamW::new(vars, candle_nn::ParamsAdamW::default())?;
    for (name, mut step) in [
        (
            "fused AdamW",
            Box::new(|| Ok(fused.step(&grads, 1.0)?)) as Box<dyn FnMut() -> anyhow::Result<()>>,
        ),
        ("candle_nn::AdamW", Box::new(|| Ok(stock.step(&grads)?))),
    ] {
        step()?;
        let start = Instant::now();
        step()?;
        let secs = start.elapsed().as_secs_f64();
        println!(
            "| {name} step ({:.0}M params) | - | {secs:.2} | - |",
            params as f64 / 1e6
        );
    }
    Ok(())
}

/// A fresh copy of the benchmarked model with its `VarMap` (for full fine-tuning).
fn model_vars(path: &Option<PathBuf>) -> anyhow::Result<(Decoder, candle_nn::VarMap)> {
    Ok(match path {
        Some(p) => {
            let l = super::load_model(Some(p))?;
            (l.model, l.varmap)
        }
        None => Decoder::random(&Config::smollm2_135m(), 0, 0.02, &super::device()?)?,
    })
}
