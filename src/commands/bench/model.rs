//! `spade bench-model`: sampling throughput (prefill and decode, G=1 and G=N) for each decode
//! weights variant side by side, the log-prob gap to the training path, RL-update throughput,
//! peak memory, and llama.cpp on the same GGUF when given a server.
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use spade_model::fetch;
use spade_model::grpo::{GrpoConfig, GrpoSample, GrpoTrainer};
use spade_model::logprob::{Pair, completion_logprobs};
use spade_model::memory::UpdateMemory;
use spade_model::model::kernels::decode_quant_matmul::{self as quant_matmul, Kernel};
use spade_model::model::{
    DecodeWeights, Decoder, LoraConfig, ModelConfig, TrainAttention, TrainMemory, TrainOps, lora,
};

use super::variant::DecodeVariant;
use spade_model::optim::{AdamW, AdamWConfig};
use spade_model::prefix_cache::PrefixCache;
use spade_model::sample::{Sampler, SamplingParams};

use super::llama::{LlamaServer, LlamaTimings};

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
    /// Also time full fine-tuning updates.
    #[arg(long)]
    full: bool,
    /// Advantage of a one-sample update batch (`--batch 1`; a group's advantages are
    /// `i - (batch - 1) / 2`, and one sample alone would have advantage 0).
    #[arg(long, allow_hyphen_values = true)]
    advantage: Option<f64>,
    /// Updates timed per kind (LoRA, full); the first pays for first-touch allocations.
    #[arg(long, default_value_t = 2)]
    update_runs: usize,
    /// Time only the updates: skip the sampling, agreement and multi-turn measurements.
    #[arg(long)]
    update_only: bool,
    /// How the update computes attention: `blockwise` (the default: memory linear in the
    /// sequence length) or `plain` (every head's full score matrix; for comparison).
    #[arg(long, value_enum, default_value_t = AttentionArg::Blockwise)]
    train_attention: AttentionArg,
    /// The update's RMSNorm, SiLU·up and loss: `fused` (the default: one op each with its own
    /// backward, rows on every thread) or `composed` (candle's ops; for comparison).
    #[arg(long, value_enum, default_value_t = OpsArg::Fused)]
    train_ops: OpsArg,
    /// What the update keeps for its backward: `saved` (the default: what each layer's own
    /// backward reads), `checkpointed` (each layer's input, the layers recomputed one at a
    /// time in the backward) or `kept` (every activation; for comparison).
    #[arg(long, value_enum, default_value_t = MemoryArg::Saved)]
    train_memory: MemoryArg,
    /// Decode variants to measure, in order, each compared with the first: `f32`, or
    /// quantised weights (`q8_0`, `gguf`) with f32 or 8-bit inputs (`gguf:f32`, `gguf:q8`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "f32,q8_0:f32,q8_0:q8,gguf:f32,gguf:q8"
    )]
    decode_weights: Vec<DecodeVariant>,
    /// Quantised kernels to measure each quantised variant with (`avx512vnni`, `avx2`,
    /// `portable`), in order; default: the fastest this CPU runs.
    #[arg(long, value_delimiter = ',')]
    quant_kernels: Vec<String>,
    /// llama.cpp's `llama-server` binary (started here on the same GGUF) or the `http://`
    /// URL of one already serving it: measured on the same prompts and token counts.
    #[arg(long, value_name = "PATH|URL")]
    llama_server: Option<String>,
    /// Threads for llama-server (default: spade's). On a small shared machine one thread can
    /// beat two: llama.cpp's workers spin-wait for each other and stall when another process
    /// takes a core.
    #[arg(long)]
    llama_threads: Option<usize>,
    /// llama-server's `--poll` level (0: workers sleep instead of spinning); default: its own.
    #[arg(long)]
    llama_poll: Option<u32>,
    /// Rounds of the sampling measurements (llama.cpp's too), interleaved; each figure keeps
    /// its fastest round.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// New tokens of the greedy-agreement table (each decode-weights variant against the first
    /// on the written prompt set; needs a real model, not the random stand-in); 0 skips it.
    #[arg(long, default_value_t = 32, value_name = "N")]
    agreement_tokens: usize,
    /// Time one default iteration (`spade train`'s default config, one rollout) sampled
    /// in-process, then on this inference server, on the same seed (`--inference-adapters`
    /// says how the update's adapters are loaded into it). Only this is measured then.
    #[command(flatten)]
    inference: crate::commands::inference::InferenceArgs,
    /// The iteration's seed (with --inference).
    #[arg(long, default_value_t = 0, requires = "inference")]
    seed: u64,
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

/// One decode-weights variant's measurements.
struct Measured {
    label: String,
    /// (tokens, seconds) of prefill at G=1, decode at G=1, prefill at G=group, decode at G=group.
    runs: [(usize, f64); 4],
    /// Mean and largest |Δ log-prob| between sampling and the training path.
    gap: (f64, f64),
}

impl Measured {
    /// Keeps, per measurement, the faster of this and `other` (same variant and work).
    fn keep_fastest(&mut self, other: &Measured) {
        for (mine, theirs) in self.runs.iter_mut().zip(&other.runs) {
            if theirs.1 < mine.1 {
                *mine = *theirs;
            }
        }
    }
}

const RUN_NAMES: [&str; 4] = ["prefill G=1", "decode G=1", "prefill G=N", "decode G=N"];

impl BenchModel {
    /// Runs the benchmark and prints a table.
    pub fn execute(self) -> anyhow::Result<()> {
        if self.inference.inference.is_some() {
            return super::iteration::compare(self.model.as_deref(), &self.inference, self.seed);
        }
        let path = self.model.clone().or_else(|| {
            let p = fetch::default_model_path();
            p.exists().then_some(p)
        });
        let is_gguf = path
            .as_ref()
            .is_some_and(|p| p.extension().is_some_and(|e| e == "gguf"));
        if let Some(spec) = &self.llama_server {
            if !is_gguf {
                anyhow::bail!("--llama-server needs a GGUF model (--model FILE.gguf)");
            }
            super::llama::check_spec(spec)?;
        }
        let (model, what) = match &path {
            Some(p) => (
                crate::commands::load_model(Some(p))?.model,
                p.display().to_string(),
            ),
            None => {
                let cfg = ModelConfig::smollm2_135m();
                let (m, _vm) = Decoder::random(&cfg, 0, 0.02, &crate::commands::device()?)?;
                (
                    m,
                    "random init, SmolLM2-135M shape (model not fetched)".to_string(),
                )
            }
        };
        say!("model: {what}");
        say!("threads: {}", candle_core::utils::get_num_threads());
        say!(
            "cpu: {} (the kernel of each line is named in it)",
            super::cpu::describe()
        );
        say!("load average: {}", load_average());
        let vocab = model.config().vocab_size as u32;
        let prompts: Vec<Vec<u32>> = (0..self.group.max(1) as u32)
            .map(|e| {
                (0..self.prompt as u32)
                    .map(|i| 100 + (i * 37 + e * 101) % (vocab - 100))
                    .collect()
            })
            .collect();
        let prompt = prompts[0].clone();
        let tokenizer = tokenizers::Tokenizer::new(tokenizers::models::bpe::BPE::default());
        let params = SamplingParams {
            temperature: 1.0,
            max_new_tokens: self.tokens,
            seed: 1,
            ..SamplingParams::default()
        };
        // Sampling runs with LoRA adapters attached, as `spade train` samples.
        let lcfg = LoraConfig {
            r: self.rank,
            ..LoraConfig::default()
        };
        let mut lora_model = model.clone();
        let adapters = lora::attach_new(&mut lora_model, &lcfg, 0)?;
        let mut llama: Option<(LlamaTimings, LlamaTimings)> = None;
        let mut measured: Vec<Measured> = Vec::new();
        if !self.update_only {
            say!(
                "sampling: LoRA r={} on every projection; prompt {} tokens, {} new tokens, G=1 and G={}",
                self.rank,
                self.prompt,
                self.tokens,
                self.group
            );
            let kernels = self
                .quant_kernels
                .iter()
                .map(|name| {
                    Kernel::from_name(name)
                        .ok_or_else(|| anyhow::anyhow!("unknown quantised kernel `{name}`"))
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            // The llama.cpp server runs beside spade's measurements: each round measures it, then
            // every spade variant, and each figure keeps its fastest round (the machine is shared).
            let server = match (&self.llama_server, &path) {
                (Some(spec), Some(gguf)) => {
                    let threads = self
                        .llama_threads
                        .unwrap_or_else(candle_core::utils::get_num_threads);
                    let mut extra = Vec::new();
                    if let Some(poll) = self.llama_poll {
                        extra.extend(["--poll".to_string(), poll.to_string()]);
                    }
                    Some(start_llama(
                        spec,
                        gguf,
                        &prompts,
                        self.tokens,
                        threads,
                        &extra,
                    )?)
                }
                _ => None,
            };
            for round in 0..self.rounds.max(1) {
                if let Some(server) = &server {
                    let now = (
                        server.complete(&prompts[0], self.tokens, 1)?,
                        server.complete_all(&prompts, self.tokens)?,
                    );
                    llama = Some(match llama {
                        Some((one, all)) => (one.fastest(&now.0), all.fastest(&now.1)),
                        None => now,
                    });
                }
                let mut i = 0;
                for &v in &self.decode_weights {
                    let w = v.weights;
                    if w == DecodeWeights::Gguf && !is_gguf {
                        if round == 0 {
                            say!(
                                "decode weights gguf: skipped (not a GGUF model; it would equal q8_0)"
                            );
                        }
                        continue;
                    }
                    let runs: Vec<Option<Kernel>> = if w == DecodeWeights::F32 || kernels.is_empty()
                    {
                        vec![None]
                    } else {
                        kernels.iter().copied().map(Some).collect()
                    };
                    for kernel in runs {
                        quant_matmul::force_kernel(kernel)?;
                        let decode = lora_model.set_decode_weights(w, v.activations)?;
                        if round == 0 {
                            say!("decode weights {decode}");
                        }
                        let label = match kernel {
                            Some(k) => format!("{w} {}", k.loop_name(v.activations)),
                            None if w == DecodeWeights::F32 => v.to_string(),
                            None => {
                                format!("{w} {}", quant_matmul::kernel().loop_name(v.activations))
                            }
                        };
                        let m = measure(&lora_model, &tokenizer, &prompts, &params, &label)?;
                        match measured.get_mut(i) {
                            Some(best) => best.keep_fastest(&m),
                            None => measured.push(m),
                        }
                        i += 1;
                    }
                    quant_matmul::force_kernel(None)?;
                }
            }
            if self.rounds > 1 {
                say!("fastest of {} rounds per figure", self.rounds);
            }
            print_sampling(&measured, self.group);
            say!("peak RSS after sampling: {:.0} MiB", peak_rss_mib());
            match (&path, self.agreement_tokens) {
                (_, 0) => {}
                (None, _) => say!(
                    "greedy agreement: skipped (the model is not fetched; random weights answer nothing)"
                ),
                (Some(p), tokens) => {
                    let mut loaded = crate::commands::load_model(Some(p))?;
                    let variants: Vec<DecodeVariant> = self
                        .decode_weights
                        .iter()
                        .copied()
                        .filter(|v| is_gguf || v.weights != DecodeWeights::Gguf)
                        .collect();
                    super::agreement::run(&mut loaded, &variants, tokens)?;
                }
            }
            if self.episodes > 0 {
                say!("| measurement | tokens | seconds | tokens/s |");
                say!("|---|---|---|---|");
                multi_turn(
                    &lora_model,
                    &tokenizer,
                    &prompt,
                    self.episodes,
                    self.turns,
                    &params,
                )?;
            }
        }
        let half = self.seq / 4;
        let advantages = super::update::advantages(self.batch, self.advantage)?;
        let samples: Vec<GrpoSample> = (0..self.batch)
            .zip(advantages)
            .map(|(i, advantage)| {
                GrpoSample::new(
                    prompt.iter().cycle().take(half).copied().collect(),
                    (0..self.seq - half)
                        .map(|k| 200 + ((k * 7 + i) as u32 % 1000))
                        .collect(),
                    vec![-5.0; self.seq - half],
                    advantage,
                )
            })
            .collect();
        let total_tokens = self.batch * self.seq;
        let grpo = GrpoConfig {
            micro_batch: self.batch,
            ..GrpoConfig::default()
        };
        let attention = self.train_attention.get();
        lora_model.set_train_attention(attention);
        lora_model.set_train_ops(self.train_ops.get());
        lora_model.set_train_memory(self.train_memory.get());
        let opt = AdamW::new(adapters.all_vars(), AdamWConfig::default())?;
        let mut trainer = GrpoTrainer::new(&lora_model, None, opt, grpo.clone())?;
        let label = format!(
            "GRPO update, LoRA r={} ({}x{}, {} attention, {} ops, {} layers)",
            self.rank,
            self.batch,
            self.seq,
            self.train_attention.name(),
            self.train_ops.name(),
            self.train_memory.name()
        );
        super::update::print_header();
        super::update::time_updates(&label, total_tokens, self.update_runs, || {
            Ok(trainer.step(&samples).map(|_| ())?)
        })?;
        let shape = lora_model.config().clone();
        super::update::print_estimate(
            &UpdateMemory::estimate(&shape, true, self.train_memory.get()),
            total_tokens,
        );
        if self.full {
            drop(trainer);
            drop(model);
            let (mut full_model, varmap) = model_vars(&path)?;
            full_model.set_train_attention(attention);
            full_model.set_train_ops(self.train_ops.get());
            full_model.set_train_memory(self.train_memory.get());
            let opt = AdamW::new(varmap.all_vars(), AdamWConfig::default())?;
            let mut trainer = GrpoTrainer::new(&full_model, None, opt, grpo)?;
            let label = format!(
                "GRPO update, full ({}x{}, {} attention, {} ops, {} layers)",
                self.batch,
                self.seq,
                self.train_attention.name(),
                self.train_ops.name(),
                self.train_memory.name()
            );
            super::update::time_updates(&label, total_tokens, self.update_runs, || {
                Ok(trainer.step(&samples).map(|_| ())?)
            })?;
            super::update::print_estimate(
                &UpdateMemory::estimate(&shape, false, self.train_memory.get()),
                total_tokens,
            );
            drop(trainer);
            if !self.update_only {
                optimizer_steps(&varmap)?;
            }
        }
        if let (Some(spec), Some((one, all))) = (&self.llama_server, &llama) {
            llama_comparison(spec, prompts.len(), one, all, &measured);
        }
        say!("load average: {}", load_average());
        Ok(())
    }
}

/// `--train-ops`: the training path's [`TrainOps`].
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum OpsArg {
    /// [`TrainOps::Fused`].
    Fused,
    /// [`TrainOps::Composed`].
    Composed,
}

impl OpsArg {
    fn get(self) -> TrainOps {
        match self {
            Self::Fused => TrainOps::Fused,
            Self::Composed => TrainOps::Composed,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Fused => "fused",
            Self::Composed => "composed",
        }
    }
}

/// `--train-memory`: the training path's [`TrainMemory`].
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum MemoryArg {
    /// [`TrainMemory::Checkpointed`].
    Checkpointed,
    /// [`TrainMemory::Kept`].
    Kept,
    /// [`TrainMemory::Saved`].
    Saved,
}

impl MemoryArg {
    fn get(self) -> TrainMemory {
        match self {
            Self::Checkpointed => TrainMemory::Checkpointed,
            Self::Kept => TrainMemory::Kept,
            Self::Saved => TrainMemory::Saved,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Checkpointed => "checkpointed",
            Self::Kept => "kept",
            Self::Saved => "saved",
        }
    }
}

/// `--train-attention`: the training path's [`TrainAttention`].
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum AttentionArg {
    /// [`TrainAttention::Blockwise`].
    Blockwise,
    /// [`TrainAttention::Plain`].
    Plain,
}

impl AttentionArg {
    fn get(self) -> TrainAttention {
        match self {
            Self::Blockwise => TrainAttention::Blockwise,
            Self::Plain => TrainAttention::Plain,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::Blockwise => "blockwise",
            Self::Plain => "plain",
        }
    }
}

/// The first line of `/proc/loadavg` (benchmarks on a shared machine say how loaded it was).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into())
}

/// Prefill and decode at G=1 and G=`prompts.len()`, and the log-prob gap of the group's
/// completions against the training path.
fn measure(
    model: &Decoder,
    tokenizer: &tokenizers::Tokenizer,
    prompts: &[Vec<u32>],
    params: &SamplingParams,
    label: &str,
) -> anyhow::Result<Measured> {
    let sampler = Sampler::new(model, tokenizer, &[]);
    let mut runs = [(0, 0.0); 4];
    let mut group_out = Vec::new();
    for (k, g) in [1, prompts.len()].into_iter().enumerate() {
        let start = Instant::now();
        let mut rows = Vec::with_capacity(g);
        for (i, p) in prompts[..g].iter().enumerate() {
            rows.push((sampler.prefill(p, None)?, params.seed + i as u64));
        }
        runs[2 * k] = (g * prompts[0].len(), start.elapsed().as_secs_f64());
        let start = Instant::now();
        let out = sampler.sample_rows(rows, params, false, &mut |_, _| {})?;
        let secs = start.elapsed().as_secs_f64();
        let n: usize = out.iter().map(|(c, _)| c.tokens.len()).sum();
        runs[2 * k + 1] = (n, secs);
        group_out = out;
    }
    let pairs: Vec<Pair> = prompts
        .iter()
        .zip(&group_out)
        .map(|(p, (c, _))| Pair {
            prompt: p,
            completion: &c.tokens,
        })
        .collect();
    let train: Vec<f32> = completion_logprobs(&model.without_grad(), &pairs)?.to_vec1()?;
    let sampled = group_out
        .iter()
        .flat_map(|(c, _)| c.logprobs.iter().copied());
    let diffs: Vec<f64> = train
        .iter()
        .zip(sampled)
        .map(|(&a, b)| f64::from((a - b).abs()))
        .collect();
    let mean = diffs.iter().sum::<f64>() / diffs.len().max(1) as f64;
    let max = diffs.iter().copied().fold(0.0, f64::max);
    Ok(Measured {
        label: label.to_string(),
        runs,
        gap: (mean, max),
    })
}

/// The sampling table: each variant's rates, its speed-up over the first, and its gap.
fn print_sampling(measured: &[Measured], group: usize) {
    say!("| decode weights | measurement | tokens | seconds | tokens/s | vs first |");
    say!("|---|---|---|---|---|---|");
    let rate = |(n, s): (usize, f64)| n as f64 / s;
    for m in measured {
        for (k, name) in RUN_NAMES.iter().enumerate() {
            let name = name.replace('N', &group.to_string());
            let (n, s) = m.runs[k];
            let vs = rate(m.runs[k]) / rate(measured[0].runs[k]);
            say!(
                "| {} | {name} | {n} | {s:.2} | {:.1} | {vs:.2}x |",
                m.label,
                rate(m.runs[k])
            );
        }
    }
    say!("| decode weights | mean abs(Δ logprob) per token vs the training path | largest |");
    say!("|---|---|---|");
    for m in measured {
        say!("| {} | {:.4} | {:.4} |", m.label, m.gap.0, m.gap.1);
    }
}

/// Starts (or reaches) llama.cpp's server on `gguf` with one slot per prompt, and warms it up
/// (the first request pays for page faults and graph setup).
fn start_llama(
    spec: &str,
    gguf: &std::path::Path,
    prompts: &[Vec<u32>],
    tokens: usize,
    threads: usize,
    extra: &[String],
) -> anyhow::Result<LlamaServer> {
    let ctx = (prompts[0].len() + tokens + 64).next_multiple_of(256);
    let server = LlamaServer::start(spec, gguf, threads, prompts.len(), ctx, extra)?;
    say!("llama.cpp server: {threads} threads {}", extra.join(" "));
    server.complete(&prompts[0], 4, 0)?;
    server.complete_all(prompts, 4)?;
    Ok(server)
}

/// llama.cpp's figures on the same GGUF, prompts and token counts, and each spade variant's
/// ratio to them.
fn llama_comparison(
    spec: &str,
    slots: usize,
    one: &LlamaTimings,
    all: &LlamaTimings,
    spade: &[Measured],
) {
    say!(
        "llama.cpp server ({spec}), {slots} slots, load average {}:",
        load_average()
    );
    let mut head = "| measurement | llama.cpp tokens | seconds | llama.cpp tokens/s |".to_string();
    let mut rule = "|---|---|---|---|".to_string();
    for m in spade {
        head += &format!(" spade {} tokens/s (ratio) |", m.label);
        rule += "---|";
    }
    say!("{head}");
    say!("{rule}");
    let g = slots;
    let rows = [
        (
            "prefill G=1".to_string(),
            one.prompt_tokens,
            one.prompt_secs,
            0,
        ),
        (
            "decode G=1".to_string(),
            one.generated_tokens,
            one.generated_secs,
            1,
        ),
        (
            format!("prefill G={g}"),
            all.prompt_tokens,
            all.prompt_secs,
            2,
        ),
        (
            format!("decode G={g}"),
            all.generated_tokens,
            all.generated_secs,
            3,
        ),
    ];
    for (name, n, secs, k) in rows {
        let llama = n as f64 / secs;
        let mut line = format!("| {name} | {n} | {secs:.2} | {llama:.1} |");
        for m in spade {
            let (sn, ss) = m.runs[k];
            let ours = sn as f64 / ss;
            line += &format!(" {ours:.1} ({:.2}x) |", ours / llama);
        }
        say!("{line}");
    }
    say!(
        "llama.cpp G={g} wall clock, prompt and generation: {:.2} s for {} tokens generated",
        all.wall_secs,
        all.generated_tokens
    );
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
        say!(
            "| agent turns {episodes}x{turns}, {label} | {tokens} | {secs:.2} | {:.1} |",
            tokens as f64 / secs
        );
        results.push(secs);
    }
    say!(
        "| agent turns speed-up (one by one / batched) | - | {:.2}x | - |",
        results[0] / results[1]
    );
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
        say!(
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
            let l = crate::commands::load_model(Some(p))?;
            (l.model, l.varmap)
        }
        None => Decoder::random(
            &ModelConfig::smollm2_135m(),
            0,
            0.02,
            &crate::commands::device()?,
        )?,
    })
}
