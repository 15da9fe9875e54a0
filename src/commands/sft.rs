//! `spade sft`: supervised fine-tuning of the designer role on (design prompt → environment)
//! pairs from the environment library, a warm start for `spade train --init-adapter`
//! (docs/warm-start.md).
use std::io::IsTerminal as _;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Args;
use spade_sandbox::Config;
use spade_selfplay::corpus::DEFAULT_CORPUS;
use spade_selfplay::library::{self, LibraryCheck};
use spade_selfplay::sft::{self, SftRun, SftSettings};
use spade_selfplay::{CandlePolicy, Corpus, TrainConfig};

use super::progress_bar::step_bar;

/// Arguments of `spade sft`.
#[derive(Debug, Args)]
pub struct SftArgs {
    /// Run directory (sft.json, pairs.jsonl, held_out.txt, library.json, metrics.jsonl,
    /// checkpoints/, and adapter/ or model/ at the end).
    #[arg(long, default_value = "runs/sft")]
    out: PathBuf,
    /// Model: a GGUF file or an HF directory (default: the fetched SmolLM2-135M-Instruct).
    #[arg(long)]
    model: Option<PathBuf>,
    /// A library directory of `<name>/env.py` (+ optional `<name>/skill.txt`), as
    /// eval_envs/ is laid out; repeatable. Added to the bundled starter environments.
    #[arg(long, value_name = "DIR")]
    library: Vec<PathBuf>,
    /// Leave the bundled starter environments out of the library.
    #[arg(long)]
    no_starter_envs: bool,
    /// Corpus the prompts' documents come from (default: the bundled corpus, as `spade train`).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Passes over the pairs.
    #[arg(long, default_value_t = SftSettings::default().epochs)]
    epochs: usize,
    /// Learning rate (constant). Default 2e-4 with LoRA; about 1e-5 suits --full.
    #[arg(long, default_value_t = SftSettings::default().lr)]
    lr: f64,
    /// Pairs per optimiser step.
    #[arg(long, default_value_t = SftSettings::default().batch_size)]
    batch_size: usize,
    /// Pairs per forward/backward pass (gradients accumulate over a step's micro-batches).
    #[arg(long, default_value_t = SftSettings::default().micro_batch)]
    micro_batch: usize,
    /// Seed of the shuffles, the prompts' documents, the held-out split and the adapters.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A checkpoint every N steps (and after the last).
    #[arg(long, default_value_t = SftSettings::default().checkpoint_every)]
    checkpoint_every: u64,
    /// Train every weight instead of LoRA adapters (the result is model/, for --model).
    #[arg(long)]
    full: bool,
    /// LoRA rank (default: `spade train`'s, so that --init-adapter takes the result).
    #[arg(long, conflicts_with = "full")]
    lora_rank: Option<usize>,
    /// LoRA alpha (default: `spade train`'s).
    #[arg(long, conflicts_with = "full")]
    lora_alpha: Option<f64>,
    /// The memory a step may take in all, in GiB (default: three quarters of the machine's):
    /// longer pairs are skipped and reported.
    #[arg(long)]
    train_memory_gib: Option<f64>,
    /// Continue the run in --out from its last checkpoint (its saved settings and pairs win).
    #[arg(long)]
    resume: bool,
    /// Stop after this many steps in this invocation (a checkpoint is written); continue
    /// later with --resume.
    #[arg(long)]
    max_steps: Option<u64>,
}

impl SftArgs {
    fn settings(&self) -> SftSettings {
        let mut s = SftSettings {
            epochs: self.epochs,
            lr: self.lr,
            batch_size: self.batch_size,
            micro_batch: self.micro_batch,
            seed: self.seed,
            checkpoint_every: self.checkpoint_every,
            train_memory_gib: self.train_memory_gib,
            ..SftSettings::default()
        };
        if self.full {
            s.lora = None;
        } else if let Some(l) = &mut s.lora {
            if let Some(r) = self.lora_rank {
                l.r = r;
            }
            if let Some(a) = self.lora_alpha {
                l.lora_alpha = a;
            }
        }
        s
    }

    /// Runs the subcommand.
    pub fn execute(self) -> anyhow::Result<()> {
        if self.resume && (!self.library.is_empty() || self.no_starter_envs) {
            bail!(
                "--resume trains the run's saved pairs; do not pass --library or --no-starter-envs with it"
            );
        }
        if self.resume && self.train_memory_gib.is_some() {
            bail!(
                "--resume keeps the run's saved train_memory_gib; do not pass --train-memory-gib with it"
            );
        }
        let mut settings = if self.resume {
            sft::read_settings(&self.out)?
        } else {
            let s = self.settings();
            s.validate().context("the settings")?;
            if self.out.join("sft.json").exists() {
                bail!(
                    "{} already holds a run: pass --resume to continue it, or choose another --out",
                    self.out.display()
                );
            }
            s
        };
        let loaded = super::load_model(self.model.as_deref())?;
        let plan = settings
            .resolve_update_memory(&loaded.config, spade_serve::admission::machine_memory())?;
        say!(
            "spade sft: steps take at most {} tokens a micro-batch, about {:.1} GiB of \
             train_memory_gib = {:.1}",
            plan.micro_batch_tokens,
            plan.peak_gib(),
            plan.budget_gib
        );
        let mut policy = CandlePolicy::new(loaded, &settings.policy())?;
        let mut run = if self.resume {
            SftRun::resume(&self.out, &mut policy)?
        } else {
            let pairs = self.build_pairs(&policy, &settings)?;
            SftRun::create(&self.out, settings, pairs, &mut policy)?
        };
        train(&mut run, self.max_steps)
    }

    /// The library, checked, split, rendered as pairs that fit the model; writes
    /// `held_out.txt` and `library.json` and reports what it rejected or skipped.
    fn build_pairs(
        &self,
        policy: &CandlePolicy,
        settings: &SftSettings,
    ) -> anyhow::Result<Vec<library::DesignPair>> {
        let train_cfg = TrainConfig::default();
        let corpus_text = match &self.corpus {
            Some(p) => super::read_text(p, "corpus file")?,
            None => DEFAULT_CORPUS.to_string(),
        };
        let corpus =
            Corpus::parse(&corpus_text, train_cfg.max_doc_words).context("reading the corpus")?;
        let envs = library::gather(!self.no_starter_envs, &self.library)?;
        let total = envs.len();
        let runtime = super::common::start_runtime(Config::default())?;
        let check = LibraryCheck::from_train(&train_cfg);
        let (accepted, rejected) = super::executor()?
            .block_on(async { library::check_library(&runtime, envs, &check).await });
        for r in &rejected {
            eprintln!(
                "spade sft: rejected {} ({}): {}",
                r.name,
                r.origin,
                r.codes.join(", ")
            );
        }
        let (train, held) = library::split_held_out(accepted, settings.seed);
        let pairs = library::design_pairs(&train, &corpus, settings.seed);
        let (pairs, skipped) = sft::fitting_pairs(policy, pairs, settings.micro_batch_tokens);
        for (name, why) in &skipped {
            eprintln!("spade sft: skipped {name}: {why}");
        }
        std::fs::create_dir_all(&self.out)
            .with_context(|| format!("creating {}", self.out.display()))?;
        let held_names: Vec<&str> = held.iter().map(|e| e.env.name.as_str()).collect();
        let mut held_text = held_names.join("\n");
        held_text.push('\n');
        let held_path = self.out.join("held_out.txt");
        std::fs::write(&held_path, held_text)
            .with_context(|| format!("writing {}", held_path.display()))?;
        let summary = serde_json::json!({
            "environments": total,
            "accepted": total - rejected.len(),
            "rejected": rejected,
            "held_out": held_names,
            "trained": pairs.iter().map(|p| &p.name).collect::<Vec<_>>(),
            "skipped_too_long": skipped,
        });
        let lib_path = self.out.join("library.json");
        std::fs::write(&lib_path, serde_json::to_string_pretty(&summary)?)
            .with_context(|| format!("writing {}", lib_path.display()))?;
        say!(
            "spade sft: library of {total}: {} rejected, {} held out, {} skipped as too long, {} pairs to train",
            rejected.len(),
            held.len(),
            skipped.len(),
            pairs.len()
        );
        Ok(pairs)
    }
}

/// Trains until the run is done or `max_steps` steps were taken, with a progress bar on a
/// terminal (a line per step otherwise), then writes the result.
fn train(run: &mut SftRun<'_>, max_steps: Option<u64>) -> anyhow::Result<()> {
    let total = run.total_steps();
    let bar = std::io::stderr()
        .is_terminal()
        .then(|| step_bar(total, run.state.step));
    let mut done = 0u64;
    let mut epoch_losses: Vec<(usize, f64, usize)> = Vec::new();
    while max_steps.is_none_or(|m| done < m) {
        let Some(step) = run.step()? else { break };
        done += 1;
        match epoch_losses.last_mut() {
            Some((e, sum, n)) if *e == step.epoch => {
                *sum += step.loss;
                *n += 1;
            }
            _ => epoch_losses.push((step.epoch, step.loss, 1)),
        }
        match &bar {
            Some(b) => {
                b.set_message(format!("epoch {} loss {:.4}", step.epoch, step.loss));
                b.inc(1);
            }
            None => say!(
                "step {}/{total}: epoch {}, loss {:.4}, grad norm {:.3}, {} tokens",
                step.step,
                step.epoch,
                step.loss,
                step.grad_norm,
                step.tokens
            ),
        }
    }
    if let Some(b) = bar {
        b.finish();
    }
    for (e, sum, n) in &epoch_losses {
        say!("epoch {e}: mean loss {:.4} over {n} steps", sum / *n as f64);
    }
    if run.state.step < total {
        run.checkpoint()?;
        say!(
            "stopped at step {}/{total}: continue with `spade sft --out {} --resume`",
            run.state.step,
            run.dir().display()
        );
        return Ok(());
    }
    let out = run.finish()?;
    say!("done: {} steps; the result is in {}", total, out.display());
    Ok(())
}
