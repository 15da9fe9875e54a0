//! `spade generate`: sample completions of a chat prompt.
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::Args;
use spade_model::chat::Message;
use spade_model::checkpoint;
use spade_model::model::{DecodeActivations, DecodeWeights};
use spade_model::sample::{Sampler, SamplingParams};

/// Arguments of `spade generate`.
#[derive(Debug, Args)]
pub struct Generate {
    /// Model: a GGUF file or an HF directory (default: the fetched SmolLM2-135M-Instruct).
    #[arg(long)]
    model: Option<PathBuf>,
    /// LoRA adapter directory to apply.
    #[arg(long)]
    lora: Option<PathBuf>,
    /// The user message.
    #[arg(long)]
    prompt: String,
    /// A system message.
    #[arg(long)]
    system: Option<String>,
    /// Most new tokens per completion.
    #[arg(long, default_value_t = 256)]
    max_tokens: usize,
    /// Sampling temperature (0 = greedy).
    #[arg(long, default_value_t = 0.7)]
    temperature: f64,
    /// Nucleus sampling mass.
    #[arg(long, default_value_t = 1.0)]
    top_p: f64,
    /// Keep only the k most likely tokens (0 = off).
    #[arg(long, default_value_t = 0)]
    top_k: usize,
    /// Random seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Number of completions sampled from the shared prompt cache.
    #[arg(short = 'n', long = "n", default_value_t = 1)]
    n: usize,
    /// Stop string (repeatable).
    #[arg(long)]
    stop: Vec<String>,
    /// Base weights decoding reads: `gguf` (a GGUF's own blocks), `q8_0` or `f32`.
    #[arg(long, default_value_t = DecodeWeights::Gguf)]
    decode_weights: DecodeWeights,
    /// How products with quantised weights take their inputs: `f32` (equal to the training
    /// path within f32 summation order) or `q8` (8-bit, as llama.cpp; faster, less exact).
    #[arg(long, default_value_t = DecodeActivations::F32)]
    decode_activations: DecodeActivations,
}

impl Generate {
    /// Runs the subcommand.
    pub fn execute(self) -> anyhow::Result<()> {
        let mut loaded = super::load_model(self.model.as_deref())?;
        if let Some(dir) = &self.lora {
            checkpoint::load_lora(dir, &mut loaded.model)
                .with_context(|| format!("loading LoRA adapters from {}", dir.display()))?;
        }
        let decode = loaded
            .model
            .set_decode_weights(self.decode_weights, self.decode_activations)?;
        let mut messages = Vec::new();
        if let Some(system) = &self.system {
            messages.push(Message::new("system", system.clone()));
        }
        messages.push(Message::new("user", self.prompt.clone()));
        let text = loaded.chat.render(&messages, true);
        let sampler = Sampler::from_loaded(&loaded);
        let prompt = sampler.encode(&text)?;
        let params = SamplingParams {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            max_new_tokens: self.max_tokens,
            stop: self.stop.clone(),
            seed: self.seed,
            dry: None,
            python_guard: None,
        };
        let start = Instant::now();
        let stream = self.n == 1;
        let mut stdout = std::io::stdout();
        let completions = sampler.sample(&prompt, self.n, &params, &mut |_, delta| {
            if stream {
                print!("{delta}");
                let _ = stdout.flush();
            }
        })?;
        let secs = start.elapsed().as_secs_f64();
        if stream {
            println!();
        } else {
            for (i, c) in completions.iter().enumerate() {
                println!("--- completion {i} ({:?}) ---\n{}", c.finish, c.text);
            }
        }
        let tokens: usize = completions.iter().map(|c| c.tokens.len()).sum();
        // Said after sampling, beside the speed it explains (a bad parameter is then the only
        // thing printed).
        eprintln!(
            "[{} prompt tokens, {tokens} new tokens in {secs:.1}s, {:.1} tokens/s; decode weights {decode}]",
            prompt.len(),
            tokens as f64 / secs
        );
        Ok(())
    }
}
