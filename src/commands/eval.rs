//! `spade eval`: win rate per skill on held-out environments; with `--designer`, the
//! designer's valid rate, failure causes and novelty over held-out design prompts.
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use spade_envtools::package::EnvSpec;
use spade_model::checkpoint;
use spade_model::model::{DecodeActivations, DecodeWeights};
use spade_sandbox::{Config, Runtime};
use spade_selfplay::corpus::HELDOUT_CORPUS;
use spade_selfplay::designer::{self, DEFAULT_NOVELTY_THRESHOLD, DesignerReport};
use spade_selfplay::eval::{EVAL_SEED_LIMIT, EvalEnv, PlaySettings, evaluate, load_envs};
use spade_selfplay::prompts::AgentExample;
use spade_selfplay::remote::{ClientConfig, RemotePolicy, api_key_from_env};
use spade_selfplay::{CandlePolicy, Corpus, Policy, Run, TrainConfig};

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
    #[arg(long, required_unless_present_any = ["env", "designer"])]
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
    /// Measure the designer instead of the agent: sample --prompts design prompts over a
    /// held-out corpus, check each through training's own design and validate phases, and
    /// report the valid rates, the failure causes and novelty with 95% Wilson intervals
    /// (docs/selfplay.md, "Measuring the designer").
    #[arg(long, requires = "out", conflicts_with_all = ["envs", "env"])]
    designer: bool,
    /// With --designer: design prompts to sample.
    #[arg(long, default_value_t = 64, value_name = "N", requires = "designer")]
    prompts: usize,
    /// With --designer: the corpus the prompts are grounded in (JSONL, `text` or `orig_doc`;
    /// default: the bundled held-out corpus, 66 documents never in the training corpus).
    #[arg(long, value_name = "FILE", requires = "designer")]
    corpus: Option<PathBuf>,
    /// With --designer: a `spade train` config whose designer settings apply (redraws,
    /// repairs, the example environment, temperature, top-p, top-k, the design budget).
    #[arg(long, value_name = "CONFIG", requires = "designer")]
    config: Option<PathBuf>,
    /// With --designer: where every design is kept (`designs/`, `rejected/`) with the report
    /// (`report.json`); must not hold an earlier measurement.
    #[arg(long, value_name = "DIR", requires = "designer")]
    out: Option<PathBuf>,
    /// With --designer: environments a novel design must not be a near-copy of (the training
    /// library): `<name>/env.py` folders.
    #[arg(long, value_name = "DIR", requires = "designer")]
    reference_envs: Option<PathBuf>,
    /// With --designer: 5-gram Jaccard similarity at or above which a valid design is a
    /// near-copy.
    #[arg(long, default_value_t = DEFAULT_NOVELTY_THRESHOLD, value_name = "J", requires = "designer")]
    novelty_threshold: f64,
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
        let cfg = TrainConfig {
            lora: false,
            temperature: 0.0,
            ..TrainConfig::default()
        };
        self.policy_with(&cfg)
    }

    /// The policy, sampling as `cfg` says.
    fn policy_with(&self, cfg: &TrainConfig) -> anyhow::Result<Box<dyn Policy>> {
        if self.inference.is_some() && self.lora.is_some() {
            anyhow::bail!(
                "--lora with --inference: the server samples, so load the adapters into the \
                 server and name them with --inference-model"
            );
        }
        let mut loaded = super::load_model(self.model.as_deref())?;
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
        if self.designer {
            return self.execute_designer();
        }
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

/// The `--designer` measurement's settings: `base` (the --config, or the defaults) with
/// `prompts` design prompts of one completion each, in one design round.
pub fn designer_config(base: TrainConfig, prompts: usize) -> anyhow::Result<TrainConfig> {
    if prompts == 0 {
        anyhow::bail!("--prompts must be at least 1");
    }
    Ok(TrainConfig {
        designs_per_round: prompts,
        designer_group: 1,
        regen_interval: 1,
        lora: false,
        ..base
    })
}

/// Refuses an --out that already holds a measurement's designs.
fn check_out(out: &Path) -> anyhow::Result<()> {
    for sub in ["designs", "rejected", "report.json"] {
        if out.join(sub).exists() {
            anyhow::bail!(
                "--out {} already holds {sub} from an earlier measurement: give a new folder",
                out.display()
            );
        }
    }
    Ok(())
}

/// The sources of the `<name>/env.py` folders in `dir`.
fn reference_sources(dir: Option<&Path>) -> anyhow::Result<Vec<String>> {
    let Some(dir) = dir else {
        return Ok(Vec::new());
    };
    let envs =
        load_envs(dir).with_context(|| format!("reading --reference-envs {}", dir.display()))?;
    if envs.is_empty() {
        anyhow::bail!(
            "--reference-envs {} holds no <name>/env.py environment",
            dir.display()
        );
    }
    Ok(envs.into_iter().map(|e| e.source).collect())
}

impl EvalArgs {
    /// `--designer`: one design round over the held-out corpus, then the report.
    fn execute_designer(&self) -> anyhow::Result<()> {
        let out = self.out.as_deref().context("--designer needs --out DIR")?;
        check_out(out)?;
        if !(self.novelty_threshold > 0.0 && self.novelty_threshold <= 1.0) {
            anyhow::bail!(
                "--novelty-threshold must be in (0, 1], not {}",
                self.novelty_threshold
            );
        }
        let base = match &self.config {
            Some(p) => TrainConfig::from_file(p)
                .with_context(|| format!("reading --config {}", p.display()))?,
            None => TrainConfig::default(),
        };
        let cfg = designer_config(base, self.prompts)?;
        cfg.validate().context("checking --config")?;
        let references = reference_sources(self.reference_envs.as_deref())?;
        let corpus_text = match &self.corpus {
            Some(p) => std::fs::read_to_string(p)
                .with_context(|| format!("reading --corpus {}", p.display()))?,
            None => HELDOUT_CORPUS.to_string(),
        };
        let corpus =
            Corpus::parse(&corpus_text, cfg.max_doc_words).context("reading the corpus")?;
        let mut policy = self.policy_with(&cfg)?;
        let runtime = Runtime::new(Config::default()).context("starting the sandbox runtime")?;
        let executor = super::executor()?;
        let threshold = self.novelty_threshold;
        let report = executor.block_on(async {
            let mut run = Run::for_designs(out, cfg, corpus, runtime, policy.as_mut())?;
            run.on_progress(super::progress_bar::phases());
            let outcomes = run.design_round().await?;
            anyhow::Ok(designer::report(&outcomes, &references, threshold))
        })?;
        let json = serde_json::to_string_pretty(&report)?;
        let path = out.join("report.json");
        std::fs::write(&path, &json).with_context(|| format!("writing {}", path.display()))?;
        if self.json {
            say!("{json}");
        } else {
            print_designer_report(&report);
        }
        Ok(())
    }
}

/// The report as a table.
fn print_designer_report(r: &DesignerReport) {
    let row = |name: &str, x: &designer::Rate| {
        say!(
            "{name:<28} {:>4}/{:<4} {:.3} [{:.3}, {:.3}] 95% CI",
            x.count,
            x.total,
            x.rate,
            x.ci_low,
            x.ci_high
        );
    };
    say!("{} design prompts, {} draws", r.prompts, r.draws);
    row("valid at the first attempt", &r.first_attempt);
    row("valid within the budget", &r.within_budget);
    say!("first attempts that failed, by cause:");
    for (cause, x) in &r.failures {
        row(&format!("  {cause}"), x);
    }
    row(&format!("novel (J < {})", r.novelty_threshold), &r.novel);
}
