//! `spade train`: the self-play loop.
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, bail};
use clap::Args;
use spade_sandbox::Config;
use spade_selfplay::corpus::DEFAULT_CORPUS;
use spade_selfplay::starter_envs::starter_envs;
use spade_selfplay::{CandlePolicy, Corpus, Policy, Run, TrainConfig};

/// Arguments of `spade train`.
#[derive(Debug, Args)]
pub struct TrainArgs {
    /// Config file (TOML if it ends in .toml, else JSON); every field has a default.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Run directory (config, metrics.jsonl, trajectories, designs, checkpoints).
    #[arg(long, default_value = "runs/train")]
    out: PathBuf,
    /// Corpus (JSONL with `text` or `orig_doc`); default: the bundled corpus.
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Model: a GGUF file or an HF directory (default: the fetched SmolLM2-135M-Instruct).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Continue the run in --out from its last complete checkpoint (its saved config wins).
    #[arg(long)]
    resume: bool,
    /// Start the pool with the environments in DIR (<name>/env.py, not validated). Default:
    /// the six bundled starter environments (three at the default model's edge, and a
    /// single-answer, a multi-turn and a tool-use game).
    // `--seed-envs` and `--no-seed-envs` are the flags' old names, hidden aliases so that
    // scripts keep working; in spade "seed" otherwise means an RNG seed.
    #[arg(
        long,
        value_name = "DIR",
        conflicts_with = "no_starter_envs",
        alias = "seed-envs"
    )]
    starter_envs: Option<PathBuf>,
    /// Start with an empty pool: every environment played comes from the designer.
    #[arg(long, alias = "no-seed-envs")]
    no_starter_envs: bool,
    /// Rollouts to run now (default: the config's `rollouts`; 0 = until interrupted).
    #[arg(long)]
    rollouts: Option<u64>,
    /// Fixed-environment training: train the agent alone on these environments, with the
    /// config's difficulty controller. A comma-separated list or a file with one per line
    /// (`#` starts a comment); each is `rlve:NAME` or an environment file. Overrides the
    /// config's `fixed_envs`.
    #[arg(
        long,
        value_name = "LIST|FILE",
        conflicts_with_all = ["starter_envs", "no_starter_envs", "resume"]
    )]
    fixed_envs: Option<String>,
    /// Start the policy's LoRA adapters from the adapter in DIR (`spade sft`'s adapter/, or a
    /// run's checkpoints/*/policy/) instead of fresh ones: a warm start (docs/warm-start.md).
    /// Its rank, alpha and modules must be the config's; a new run only.
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    init_adapter: Option<PathBuf>,
    #[command(flatten)]
    inference: super::inference::InferenceArgs,
}

/// The environment specs of `--fixed-envs`: a file's lines, or a comma-separated list (an
/// environment file, `.py`, is a list of one, not a list file).
fn fixed_env_specs(arg: &str) -> anyhow::Result<Vec<String>> {
    let path = Path::new(arg);
    let text = if path.is_file() && path.extension().is_none_or(|e| e != "py") {
        super::read_text(path, "--fixed-envs file")?
    } else {
        arg.replace(',', "\n")
    };
    let specs: Vec<String> = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect();
    if specs.is_empty() {
        bail!("--fixed-envs names no environment");
    }
    let mut seen = std::collections::BTreeSet::new();
    for s in &specs {
        if !seen.insert(s) {
            bail!("--fixed-envs names '{s}' twice");
        }
    }
    Ok(specs)
}

/// Each fixed environment's (name, source), resolved from its spec.
fn resolve_fixed_envs(specs: &[String]) -> anyhow::Result<Vec<(String, String)>> {
    specs
        .iter()
        .map(|spec| {
            let parsed = spade_envtools::package::EnvSpec::parse(spec, None)?;
            let source = super::env_arg::spec_source(&parsed, spec, "fixed environment")?;
            Ok((spec.clone(), source))
        })
        .collect()
}

fn read_starter_envs(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let rd = std::fs::read_dir(dir)
        .with_context(|| format!("reading --starter-envs directory {}", dir.display()))?;
    for entry in rd.flatten() {
        let p = entry.path().join("env.py");
        if p.is_file() {
            let name = entry.file_name().to_string_lossy().into_owned();
            out.push((name, super::read_text(&p, "starter environment")?));
        }
    }
    out.sort();
    if out.is_empty() {
        bail!(
            "--starter-envs directory {} holds no <name>/env.py",
            dir.display()
        );
    }
    Ok(out)
}

impl TrainArgs {
    /// Runs the subcommand.
    pub fn execute(self) -> anyhow::Result<()> {
        if self.resume && self.config.is_some() {
            bail!("--resume uses the run's saved config; do not pass --config with it");
        }
        let cfg = match (&self.config, self.resume) {
            (_, true) => {
                let p = self.out.join("config.json");
                if !p.exists() {
                    bail!("nothing to resume: {} does not exist", p.display());
                }
                TrainConfig::from_file(&p).with_context(|| format!("reading {}", p.display()))?
            }
            (Some(p), false) => {
                let text = super::read_text(p, "config file")?;
                let toml = p.extension().is_some_and(|e| e == "toml");
                TrainConfig::parse(&text, toml)
                    .with_context(|| format!("reading config file {}", p.display()))?
            }
            (None, false) => TrainConfig::default(),
        };
        let mut cfg = cfg;
        self.inference.apply(&mut cfg);
        cfg.validate().context("the settings")?;
        if let Some(arg) = &self.fixed_envs {
            cfg.fixed_envs = fixed_env_specs(arg)?;
        }
        let fixed = if cfg.is_fixed() && !self.resume {
            if self.starter_envs.is_some() || self.no_starter_envs {
                bail!(
                    "fixed-env training plays its fixed_envs: --starter-envs and --no-starter-envs do not apply"
                );
            }
            Some(resolve_fixed_envs(&cfg.fixed_envs)?)
        } else {
            None
        };
        let corpus_text = match &self.corpus {
            Some(p) => super::read_text(p, "corpus file")?,
            None => DEFAULT_CORPUS.to_string(),
        };
        let corpus =
            Corpus::parse(&corpus_text, cfg.max_doc_words).context("reading the corpus")?;
        let starter_envs = match &self.starter_envs {
            _ if fixed.is_some() => fixed.unwrap_or_default(),
            Some(d) => read_starter_envs(d)?,
            None if self.no_starter_envs => Vec::new(),
            None => starter_envs(),
        };
        if !self.resume && self.out.join("config.json").exists() {
            bail!(
                "{} already holds a run: pass --resume to continue it, or choose another --out",
                self.out.display()
            );
        }
        let loaded = super::load_model(self.model.as_deref())?;
        let plan =
            cfg.resolve_update_memory(&loaded.config, spade_serve::admission::machine_memory())?;
        say!(
            "spade train: updates take at most {} tokens a micro-batch and {} an agent \
             sequence, about {:.1} GiB of train_memory_gib = {:.1}",
            plan.micro_batch_tokens,
            plan.max_agent_train_tokens,
            plan.peak_gib(),
            plan.budget_gib
        );
        let mut policy: Box<dyn Policy> = match &cfg.inference {
            None => {
                let mut p = CandlePolicy::new(loaded, &cfg.policy())?;
                if let Some(dir) = &self.init_adapter {
                    p.init_adapter(dir)?;
                    say!("spade train: adapters start from {}", dir.display());
                }
                Box::new(p)
            }
            Some(_) if self.init_adapter.is_some() => bail!(
                "--init-adapter works with in-process sampling; this config samples on an \
                 inference server ([inference]), which does not take it yet"
            ),
            Some(section) => Box::new(super::inference::server_policy(
                loaded,
                &cfg,
                section,
                &self.out,
                self.model.as_deref(),
            )?),
        };
        if let Some(path) = policy.decode_path() {
            eprintln!("spade train: sampling reads {path}");
        }
        let runtime = super::common::start_runtime(Config::default())?;
        let rollouts = self.rollouts.unwrap_or(cfg.rollouts);
        let executor = super::executor()?;
        executor.block_on(async {
            let mut run = if self.resume {
                Run::resume(&self.out, corpus, runtime, policy.as_mut())?
            } else {
                say!("spade train: run directory {}", self.out.display());
                Run::create(&self.out, cfg, corpus, runtime, policy.as_mut(), starter_envs)?
            };
            let start = Instant::now();
            let first = run.state.rollouts_done;
            run.on_progress(super::progress_bar::phases());
            let mut done = 0u64;
            while rollouts == 0 || done < rollouts {
                let m = run.rollout().await?;
                done += 1;
                let per = start.elapsed().as_secs_f64() / done as f64;
                let eta = if rollouts == 0 {
                    "until interrupted".to_string()
                } else {
                    format!("ETA {:.0}s", per * (rollouts - done) as f64)
                };
                let opt = |x: Option<f64>| x.map_or("-".to_string(), |v| format!("{v:.4}"));
                if !m.fixed.is_empty() {
                    let envs: Vec<String> = m
                        .fixed
                        .iter()
                        .map(|f| format!("{} d{} win {:.2} [{}, {}]", f.env, f.difficulty, f.win_rate, f.low, f.high))
                        .collect();
                    say!(
                        "rollout {}: fixed envs: {}; win {:.2}, trained {} agent (zero advantage {:.0}%), loss {}, clipped {}, {:.1}s ({eta})",
                        m.rollout,
                        envs.join("; "),
                        m.win_rate,
                        m.agent_samples_trained,
                        100.0 * m.zero_advantage_fraction,
                        opt(m.loss),
                        opt(m.clip_fraction),
                        m.time.total
                    );
                    continue;
                }
                say!(
                    "rollout {}: valid {}/{} designs, pool {}, win {:.2} / hint {:.2}, regret {:.3}, \
                     trained {} designer + {} agent (zero advantage {:.0}%), loss {}, grad norm {}, \
                     clipped {}, {:.1}s ({eta})",
                    m.rollout,
                    m.valid,
                    m.designs,
                    m.pool_size,
                    m.win_rate,
                    m.win_rate_hint,
                    m.regret,
                    m.designer_samples_trained,
                    m.agent_samples_trained,
                    100.0 * m.zero_advantage_fraction,
                    opt(m.loss),
                    opt(m.grad_norm),
                    opt(m.clip_fraction),
                    m.time.total
                );
            }
            say!(
                "done: rollouts {}..{} in {}",
                first,
                run.state.rollouts_done,
                self.out.display()
            );
            anyhow::Ok(())
        })
    }
}
