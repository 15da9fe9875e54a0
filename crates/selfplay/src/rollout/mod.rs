//! The self-play loop, one rollout as a list of phases, one file each: design
//! ([`design`]), validate and repair ([`validate`]), hint ([`hint`]), play with and without the
//! hint ([`play`]), score (regret, memory, what each game scored: [`score`]), delay (the
//! designer samples due now leave the buffer with rewards recomputed over their window:
//! [`delay`]), update (credit assignment and GRPO: [`update`]) and persist (metrics line and
//! checkpoint: [`persist`]). Fixed-env training ([`fixed`]) replaces the phases before the
//! update: choose environments, draw one problem each from the difficulty controller, play,
//! and record the outcomes in the controller.
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use spade_sandbox::Runtime;

use super::config::TrainConfig;
use super::corpus::Corpus;
use super::designer::DesignOutcome;
use super::error::{Result, TrainError};
use super::policy::Policy;
use super::progress::{Progress, Silent};
use super::seeds::derive;
use super::starter_envs::{STARTER_ORIGIN, STARTER_SKILL};
use super::state::{self, PoolEnv, RunState};

mod delay;
mod design;
mod fixed;
mod hint;
mod metrics;
mod persist;
mod play;
mod score;
mod update;
mod validate;

pub use metrics::{EnvMetrics, FixedEnvMetrics, Metrics, PhaseTimes};

/// A running self-play training.
pub struct Run<'p> {
    cfg: TrainConfig,
    dir: PathBuf,
    corpus: Corpus,
    runtime: Runtime,
    policy: &'p mut dyn Policy,
    /// The state after the last completed rollout.
    pub state: RunState,
    progress: Arc<dyn Progress>,
    /// `spade check` verdicts by source, for this process: a check is deterministic, so a
    /// source seen again (a repair that reproduces an earlier design) is not checked twice.
    verdicts: HashMap<String, validate::Verdict>,
}

/// A failed file operation: `what` (`creating`, `writing`, ...) on `p`.
fn io_err(what: &'static str, p: &Path) -> impl FnOnce(std::io::Error) -> TrainError {
    move |e| TrainError::file(what, p, e)
}

impl<'p> Run<'p> {
    /// Starts a run in `dir` (created; must not hold a run already): saves the config, adds
    /// `starter_envs` (name, source) to the pool unvalidated, and writes checkpoint 0.
    pub fn create(
        dir: &Path,
        cfg: TrainConfig,
        corpus: Corpus,
        runtime: Runtime,
        policy: &'p mut dyn Policy,
        starter_envs: Vec<(String, String)>,
    ) -> Result<Self> {
        cfg.validate()?;
        if dir.join("config.json").exists() {
            return Err(TrainError::RunExists {
                dir: dir.to_path_buf(),
            });
        }
        std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        state::write_atomic(&dir.join("config.json"), cfg.to_json().as_bytes())?;
        File::create(dir.join("metrics.jsonl")).map_err(io_err("creating metrics in", dir))?;
        let mut st = RunState::default();
        for (name, source) in starter_envs {
            let id = format!("env{:05}", st.next_env);
            st.next_env += 1;
            let class_name = source
                .lines()
                .filter_map(|l| l.strip_prefix("class "))
                .map(|l| l.split(['(', ':']).next().unwrap_or("").trim().to_string())
                .find(|n| n.ends_with("Env"))
                .unwrap_or_else(|| name.clone());
            let fixed = cfg.is_fixed();
            st.pool.push(PoolEnv {
                id,
                class_name,
                tool_use: source.contains("ToolUseBaseEnv"),
                source,
                skill: if fixed {
                    name.clone()
                } else {
                    STARTER_SKILL.into()
                },
                difficulty: "medium".into(),
                variant: None,
                doc_id: None,
                hint: None,
                created: 0,
                origin: if fixed {
                    format!("fixed:{name}")
                } else {
                    format!("{STARTER_ORIGIN}{name}")
                },
                design_file: None,
                banned: false,
            });
        }
        let run = Self {
            cfg,
            dir: dir.to_path_buf(),
            corpus,
            runtime,
            policy,
            state: st,
            progress: Arc::new(Silent),
            verdicts: HashMap::new(),
        };
        let p = &mut *run.policy;
        state::save_checkpoint(&run.dir, &run.state, |d| p.save(d))?;
        Ok(run)
    }

    /// Continues the run in `dir` from its last complete checkpoint, with its saved config.
    pub fn resume(
        dir: &Path,
        corpus: Corpus,
        runtime: Runtime,
        policy: &'p mut dyn Policy,
    ) -> Result<Self> {
        let cfg = TrainConfig::from_file(&dir.join("config.json"))?;
        let ckpt = state::latest_checkpoint(dir).ok_or_else(|| TrainError::NoCheckpoint {
            dir: dir.to_path_buf(),
        })?;
        let st = state::load_state(&ckpt).map_err(|e| e.in_checkpoint("loading", &ckpt))?;
        policy
            .load(&ckpt.join("policy"))
            .map_err(|e| e.in_checkpoint("loading", &ckpt))?;
        // Drop metrics lines of a rollout that did not reach its checkpoint.
        let metrics = dir.join("metrics.jsonl");
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(&metrics)
            .map_err(io_err("opening", &metrics))?;
        f.set_len(st.metrics_len)
            .map_err(io_err("truncating", &metrics))?;
        Ok(Self {
            cfg,
            dir: dir.to_path_buf(),
            corpus,
            runtime,
            policy,
            state: st,
            progress: Arc::new(Silent),
            verdicts: HashMap::new(),
        })
    }

    /// A run that only designs (`spade eval --designer`): `dir` (created) receives
    /// `designs/` and `rejected/`; no config, checkpoint or metrics are written, and the pool
    /// and memory start empty.
    pub fn for_designs(
        dir: &Path,
        cfg: TrainConfig,
        corpus: Corpus,
        runtime: Runtime,
        policy: &'p mut dyn Policy,
    ) -> Result<Self> {
        cfg.validate()?;
        std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        Ok(Self {
            cfg,
            dir: dir.to_path_buf(),
            corpus,
            runtime,
            policy,
            state: RunState::default(),
            progress: Arc::new(Silent),
            verdicts: HashMap::new(),
        })
    }

    /// One design round outside training, through the rollout's own design and validate
    /// phases: `designs_per_round` prompts of `designer_group` completions, each checked,
    /// repaired and redrawn as in a rollout, every design recorded in `designs/` or
    /// `rejected/`. Returns what each completion came to, in order.
    pub async fn design_round(&mut self) -> Result<Vec<DesignOutcome>> {
        let mut m = Metrics::default();
        let designed = self.design(0, &mut m)?;
        let results = self.validate_designs(0, designed, &mut m).await?;
        Ok(results.into_iter().map(|d| d.outcome).collect())
    }

    /// Sets where progress goes (phases with their size; tokens as they are sampled).
    pub fn on_progress(&mut self, progress: Arc<dyn Progress>) {
        self.progress = progress;
    }

    /// Starts a sampling phase: its budget in tokens, each decode step reported.
    fn start_sampling(&mut self, r: u64, phase: &str, tokens: usize) {
        self.progress.start(r, phase, tokens as u64, "tokens");
        let p = Arc::clone(&self.progress);
        self.policy
            .set_token_hook(Some(Arc::new(move |n| p.advance(n))));
    }

    /// Ends a phase (and the token reports of a sampling phase).
    fn end_phase(&mut self) {
        self.policy.set_token_hook(None);
        self.progress.finish();
    }

    /// The config.
    pub fn config(&self) -> &TrainConfig {
        &self.cfg
    }

    fn seed(&self, tag: &str, parts: &[u64]) -> u64 {
        derive(self.cfg.seed, tag, parts)
    }

    /// Runs `n` rollouts (0 = forever).
    pub async fn run(&mut self, n: u64) -> Result<Vec<Metrics>> {
        let mut out = Vec::new();
        let mut k = 0;
        while n == 0 || k < n {
            out.push(self.rollout().await?);
            k += 1;
        }
        Ok(out)
    }

    /// One rollout, phase by phase; appends its metrics line and writes a checkpoint.
    pub async fn rollout(&mut self) -> Result<Metrics> {
        let t0 = Instant::now();
        let r = self.state.rollouts_done;
        let mut m = Metrics {
            rollout: r,
            decode_path: self.policy.decode_path(),
            ..Metrics::default()
        };
        if self.cfg.is_fixed() {
            let games = self.choose_fixed_games(r);
            let problems = self.draw_problems(r, &games);
            let episodes = self.play_fixed(r, &problems, &mut m).await?;
            self.score_fixed(&games, &problems, &episodes, &mut m);
            let episodes = self.credit_episodes(episodes);
            self.update(r, Vec::new(), episodes, &mut m)?;
        } else {
            let designed = self.design(r, &mut m)?;
            let designs = self.validate_designs(r, designed, &mut m).await?;
            self.hint_phase(r, &designs, &mut m)?;
            let games = self.choose_games(r, &designs);
            let episodes = self.play(r, &games, &mut m).await?;
            let scores = self.score(&games, &episodes, &designs, &mut m);
            let released = self.delay(r, designs, &scores, &mut m);
            let episodes = self.credit_episodes(episodes);
            self.update(r, released, episodes, &mut m)?;
        }
        m.pool_size = self.playable();
        m.time.total = t0.elapsed().as_secs_f64();
        self.persist(r, &m)?;
        Ok(m)
    }

    /// Environments in the pool that may still be played.
    fn playable(&self) -> usize {
        self.state.pool.iter().filter(|e| !e.banned).count()
    }
}
