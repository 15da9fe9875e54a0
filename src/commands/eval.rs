//! `spade eval`: win rate per skill on held-out environments.
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use spade_envtools::package::EnvSpec;
use spade_model::checkpoint;
use spade_model::model::{DecodeActivations, DecodeWeights};
use spade_sandbox::{Config, Runtime};
use spade_selfplay::eval::{EVAL_SEED_LIMIT, EvalEnv, evaluate, load_envs};
use spade_selfplay::{CandlePolicy, Policy as _, TrainConfig};

use super::env_arg::spec_source;

/// Arguments of `spade eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// Model: a GGUF file or an HF directory (default: the fetched SmolLM2-135M-Instruct).
    #[arg(long)]
    model: Option<PathBuf>,
    /// LoRA adapters to apply (e.g. RUN/checkpoints/rollout-000004/policy).
    #[arg(long)]
    lora: Option<PathBuf>,
    /// Directory of held-out environments: <name>/env.py and <name>/skill.txt.
    #[arg(long, required_unless_present = "env")]
    envs: Option<PathBuf>,
    /// An environment to evaluate besides (or instead of) --envs: `rlve:NAME` or an
    /// environment file; repeat for more. Its skill is its name.
    #[arg(long = "env", value_name = "ENV")]
    env: Vec<String>,
    /// Difficulty passed to `reset` of every --env environment (RLVE's level, from 0).
    #[arg(long, value_name = "N")]
    difficulty: Option<u64>,
    /// Plays per environment.
    #[arg(long, default_value_t = 4)]
    plays: usize,
    /// Most turns per episode.
    #[arg(long, default_value_t = 25)]
    max_turns: u32,
    /// Agent tokens per turn.
    #[arg(long, default_value_t = 48)]
    max_tokens: usize,
    /// Seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Base weights the agent samples from: `gguf` (a GGUF's own blocks), `q8_0` or `f32`.
    #[arg(long, default_value_t = DecodeWeights::Gguf)]
    decode_weights: DecodeWeights,
    /// How products with quantised weights take their inputs: `f32` (equal to the training
    /// path within f32 summation order) or `q8` (8-bit, as llama.cpp; faster, less exact).
    #[arg(long, default_value_t = DecodeActivations::F32)]
    decode_activations: DecodeActivations,
}

impl EvalArgs {
    /// The environments of --envs, then those of --env.
    fn load_envs(&self) -> anyhow::Result<Vec<EvalEnv>> {
        let mut envs = match &self.envs {
            Some(dir) => load_envs(dir).context("reading --envs")?,
            None => Vec::new(),
        };
        for spec in &self.env {
            let source = spec_source(&EnvSpec::parse(spec, None)?, spec, "environment")?;
            envs.push(EvalEnv {
                name: spec.clone(),
                skill: spec.clone(),
                source,
                difficulty: self.difficulty,
            });
        }
        Ok(envs)
    }

    /// Runs the subcommand.
    pub fn execute(self) -> anyhow::Result<()> {
        let envs = self.load_envs()?;
        let mut loaded = super::load_model(self.model.as_deref())?;
        if let Some(dir) = &self.lora {
            checkpoint::load_lora(dir, &mut loaded.model)
                .with_context(|| format!("loading LoRA adapters from {}", dir.display()))?;
        }
        let cfg = TrainConfig {
            lora: false,
            temperature: 0.0,
            ..TrainConfig::default()
        };
        let mut policy = CandlePolicy::for_inference(
            loaded,
            &cfg,
            self.decode_weights,
            self.decode_activations,
        )?;
        if let Some(path) = policy.decode_path() {
            eprintln!("decode weights {path}");
        }
        let runtime = Runtime::new(Config::default()).context("starting the sandbox runtime")?;
        let executor = super::executor()?;
        let (scores, per_skill) = executor.block_on(evaluate(
            &runtime,
            &mut policy,
            &envs,
            self.plays,
            self.seed,
            self.max_turns,
            self.max_tokens,
            |l| eprintln!("{l}"),
        ))?;
        if self.json {
            say!(
                "{}",
                serde_json::json!({"envs": scores, "per_skill": per_skill})
            );
        } else {
            say!(
                "held-out seeds (below {EVAL_SEED_LIMIT}; fixed-env training draws from [2^30, 2^31))"
            );
            for s in &scores {
                let difficulty = s.difficulty.map(|d| format!(" d{d}")).unwrap_or_default();
                say!(
                    "{:<28} {:<24} win {:.3} [{:.3}, {:.3}] 95% CI  {}/{} plays  mean return {:.2}",
                    format!("{}{difficulty}", s.name),
                    s.skill,
                    s.win_rate,
                    s.ci_low,
                    s.ci_high,
                    s.wins,
                    s.plays,
                    s.mean_return
                );
            }
            say!("win rate per skill:");
            for (skill, w) in &per_skill {
                say!("  {skill:<24} {w:.2}");
            }
        }
        Ok(())
    }
}
