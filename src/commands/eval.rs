//! `spade eval`: win rate per skill on held-out environments.
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use spade_envtools::package::EnvSpec;
use spade_model::checkpoint;
use spade_model::model::{DecodeActivations, DecodeWeights};
use spade_sandbox::{Config, Runtime};
use spade_selfplay::eval::{EVAL_SEED_LIMIT, EvalEnv, PlaySettings, evaluate, load_envs};
use spade_selfplay::prompts::AgentExample;
use spade_selfplay::remote::{ClientConfig, RemotePolicy, api_key_from_env};
use spade_selfplay::{CandlePolicy, Policy, TrainConfig};

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
    /// A `spade train` config (TOML or JSON) whose `agent_examples` the agent is shown before
    /// each first observation, as training showed them (e.g. configs/fixed-rlve.toml). Only
    /// that key is used.
    #[arg(long, value_name = "CONFIG")]
    agent_examples: Option<PathBuf>,
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
    /// Sample on an OpenAI-compatible inference server (vLLM, SGLang, llama.cpp's server) at
    /// this URL, `http://host:port`, instead of in-process. --model still gives the chat
    /// template and the tokenizer, so the server must serve the same model; an API key, if the
    /// server wants one, is read from $SPADE_INFERENCE_API_KEY.
    #[arg(long, value_name = "URL")]
    inference: Option<String>,
    /// The model name the inference server serves (each request's `model`).
    #[arg(long, value_name = "NAME", requires = "inference")]
    inference_model: Option<String>,
    /// Requests in flight at once on the inference server.
    #[arg(long, value_name = "N", requires = "inference")]
    inference_concurrency: Option<usize>,
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

    /// The worked examples of --agent-examples (none without it), checked as the config is.
    fn agent_examples(&self) -> anyhow::Result<Vec<AgentExample>> {
        let Some(path) = &self.agent_examples else {
            return Ok(Vec::new());
        };
        let cfg = TrainConfig::from_file(path)
            .with_context(|| format!("reading --agent-examples {}", path.display()))?;
        if cfg.agent_examples.is_empty() {
            anyhow::bail!(
                "--agent-examples {} has no agent_examples: give a config with \
                 [[agent_examples]] tables (`user` and `assistant`)",
                path.display()
            );
        }
        Ok(cfg.agent_examples)
    }

    /// The policy that plays: the model in-process, or the inference server (greedy either
    /// way, as evaluation is).
    fn policy(&self) -> anyhow::Result<Box<dyn Policy>> {
        if self.inference.is_some() && self.lora.is_some() {
            anyhow::bail!(
                "--lora with --inference: the server samples, so load the adapters into the \
                 server and name them with --inference-model"
            );
        }
        let mut loaded = super::load_model(self.model.as_deref())?;
        let cfg = TrainConfig {
            lora: false,
            temperature: 0.0,
            ..TrainConfig::default()
        };
        if let Some(url) = &self.inference {
            let mut client = ClientConfig::new(
                url.clone(),
                self.inference_model
                    .clone()
                    .unwrap_or_else(|| "default".into()),
            );
            client.api_key = api_key_from_env();
            if let Some(n) = self.inference_concurrency {
                client.max_concurrency = n;
            }
            return Ok(Box::new(RemotePolicy::new(
                loaded,
                client,
                &cfg.sampling(),
            )?));
        }
        if let Some(dir) = &self.lora {
            checkpoint::load_lora(dir, &mut loaded.model)
                .with_context(|| format!("loading LoRA adapters from {}", dir.display()))?;
        }
        Ok(Box::new(CandlePolicy::for_inference(
            loaded,
            &cfg.policy(),
            self.decode_weights,
            self.decode_activations,
        )?))
    }

    /// Runs the subcommand.
    pub fn execute(self) -> anyhow::Result<()> {
        let envs = self.load_envs()?;
        let examples = self.agent_examples()?;
        let mut policy = self.policy()?;
        if let Some(path) = policy.decode_path() {
            eprintln!("decode weights {path}");
        }
        let runtime = Runtime::new(Config::default()).context("starting the sandbox runtime")?;
        let executor = super::executor()?;
        let (scores, per_skill) = executor.block_on(evaluate(
            &runtime,
            policy.as_mut(),
            &envs,
            self.plays,
            self.seed,
            PlaySettings {
                max_turns: self.max_turns,
                max_new_tokens: self.max_tokens,
                examples: &examples,
            },
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
