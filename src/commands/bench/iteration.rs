//! `spade bench-model --inference URL`: one default self-play iteration (`spade train`'s
//! default config, one rollout: design, validation, hint, play, update) sampled in-process,
//! then the same iteration, on the same seed, sampled on the inference server with the
//! adapters synced after the update. Both run in this process, one after the other, so the
//! server sits idle while spade samples and the other way round.
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context as _;
use spade_sandbox::Config;
use spade_selfplay::corpus::DEFAULT_CORPUS;
use spade_selfplay::starter_envs::starter_envs;
use spade_selfplay::{CandlePolicy, Corpus, Metrics, Policy, Run, TrainConfig};

use crate::commands::inference::{InferenceArgs, server_policy};

/// One rollout of `cfg` with `policy` in a fresh run directory `dir`.
fn one_rollout(dir: &Path, cfg: TrainConfig, policy: &mut dyn Policy) -> anyhow::Result<Metrics> {
    let _ = std::fs::remove_dir_all(dir);
    let corpus = Corpus::parse(DEFAULT_CORPUS, cfg.max_doc_words).context("reading the corpus")?;
    let runtime = crate::commands::common::start_runtime(Config::default())?;
    let executor = crate::commands::executor()?;
    executor.block_on(async {
        let mut run = Run::create(dir, cfg, corpus, runtime, policy, starter_envs())?;
        anyhow::Ok(run.rollout().await?)
    })
}

/// A row of the table: a phase, its seconds in-process and on the server.
fn row(name: &str, local: f64, server: f64) {
    let ratio = if local > 0.0 {
        format!("{:.2}x", server / local)
    } else {
        "-".into()
    };
    say!("| {name} | {local:.1} | {server:.1} | {ratio} |");
}

/// Runs both iterations and prints the table.
pub fn compare(model: Option<&Path>, inference: &InferenceArgs, seed: u64) -> anyhow::Result<()> {
    let loaded = crate::commands::load_model(model)?;
    let mut cfg = TrainConfig {
        seed,
        rollouts: 1,
        ..TrainConfig::default()
    };
    // The update's tokens as `spade train` chooses them on this machine.
    cfg.resolve_update_memory(&loaded.config, spade_serve::admission::machine_memory())?;
    let mut server_cfg = cfg.clone();
    inference.apply(&mut server_cfg);
    server_cfg.validate().context("the --inference settings")?;
    let section = server_cfg.inference.clone().expect("--inference was given");
    let root: PathBuf =
        std::env::temp_dir().join(format!("spade-bench-iteration-{}", std::process::id()));

    eprintln!("bench-model: one default iteration sampled in-process (seed {seed}) ...");
    let start = Instant::now();
    let mut local = CandlePolicy::new(loaded.clone(), &cfg.policy())?;
    let here = one_rollout(&root.join("in-process"), cfg, &mut local)?;
    let here_wall = start.elapsed().as_secs_f64();
    drop(local);

    eprintln!(
        "bench-model: the same iteration sampled on {} ...",
        section.url
    );
    let start = Instant::now();
    let server_dir = root.join("server");
    let mut server = server_policy(loaded, &server_cfg, &section, &server_dir, model)?;
    let there = one_rollout(&server_dir, server_cfg, &mut server)?;
    let there_wall = start.elapsed().as_secs_f64();
    let _ = std::fs::remove_dir_all(&root);

    let sampling = |m: &Metrics| m.time.design + m.time.hint + m.time.play_model;
    say!(
        "one default iteration (seed {seed}), in-process against {} (model {}, adapters: {})",
        section.url,
        section.model,
        section.adapters.map_or("-", |a| a.as_str())
    );
    say!("| phase | in-process s | server s | server / in-process |");
    say!("|---|---|---|---|");
    row(
        "design (and repair) sampling",
        here.time.design,
        there.time.design,
    );
    row("validation", here.time.validate, there.time.validate);
    row("hint sampling", here.time.hint, there.time.hint);
    row(
        "agent sampling",
        here.time.play_model,
        there.time.play_model,
    );
    row(
        "play in the sandbox",
        here.time.play_sandbox,
        there.time.play_sandbox,
    );
    row(
        "update (and adapter sync)",
        here.time.update,
        there.time.update,
    );
    row("sampling, all roles", sampling(&here), sampling(&there));
    row("whole iteration", here_wall, there_wall);
    let per_token = |m: &Metrics| {
        if m.tokens_sampled == 0 {
            "-".to_string()
        } else {
            format!("{:.2}", 1000.0 * sampling(m) / m.tokens_sampled as f64)
        }
    };
    say!(
        "tokens sampled: {} in-process, {} on the server (ms per token: {} and {}); the two \
         paths sample different text from the same seeds, so compare per token as well",
        here.tokens_sampled,
        there.tokens_sampled,
        per_token(&here),
        per_token(&there)
    );
    say!(
        "valid designs {}/{} and {}/{}; server/trainer log-prob gap {}",
        here.valid,
        here.designs,
        there.valid,
        there.designs,
        there
            .logprob_gap
            .map_or("-".to_string(), |g| format!("{g:.4} per token"))
    );
    Ok(())
}
