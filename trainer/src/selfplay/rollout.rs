//! The self-play loop: design → validate → repair → hint → play (with and without the hint)
//! → rewards → one GRPO step → memory → metrics → checkpoint.
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use spade_runtime::check::{CheckOptions, check};
use spade_runtime::trajectory::{RecordMeta, Recorder};
use spade_runtime::{ErrorKind, Runtime, SandboxOptions};

use super::config::TrainConfig;
use super::corpus::Corpus;
use super::extract;
use super::memory::MemoryRecord;
use super::policy::{Policy, Role, Sampled};
use super::progress::{Progress, Silent};
use super::prompts::{self, DIFFICULTIES, DesignSpec, SKILLS, VARIANTS};
use super::rewards::{self, PlayOutcome};
use super::seeds::derive;
use super::state::{self, PoolEnv, RunState};
use crate::chat::Message;
use crate::error::{Result, TrainerError};
use crate::grpo::GrpoSample;

/// One rollout's metrics line.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Metrics {
    /// Rollout index (0-based).
    pub rollout: u64,
    /// Whether the design phase ran.
    pub designed: bool,
    /// Designer completions sampled.
    pub designs: usize,
    /// Designs that validated (first try or after repair).
    pub valid: usize,
    /// `valid / designs` (0 when nothing was designed).
    pub validity_rate: f64,
    /// Designs that validated only after repair.
    pub repaired: usize,
    /// `repaired / designs`.
    pub repair_rate: f64,
    /// Repair prompts sent.
    pub repair_attempts: usize,
    /// Playable pool size after the rollout.
    pub pool_size: usize,
    /// Environments played.
    pub games: usize,
    /// Episodes played.
    pub episodes: usize,
    /// Win rate without the hint over all played games.
    pub win_rate: f64,
    /// Win rate with the hint.
    pub win_rate_hint: f64,
    /// Mean return without / with the hint.
    pub mean_return: f64,
    /// Mean return with the hint.
    pub mean_return_hint: f64,
    /// Mean regret over played games.
    pub regret: f64,
    /// Games whose play hit a fuel or deadline limit.
    pub timeouts: usize,
    /// Hints that failed.
    pub hint_failures: usize,
    /// Per played env: id, win rate, regret.
    pub envs: Vec<EnvMetrics>,
    /// Designer rewards before centring, in sample order.
    pub designer_rewards: Vec<f64>,
    /// Designer samples in the update.
    pub designer_samples: usize,
    /// Agent samples in the update.
    pub agent_samples: usize,
    /// Tokens sampled by the policy.
    pub tokens_sampled: usize,
    /// GRPO loss (absent when no update ran).
    pub loss: Option<f64>,
    /// Tokens trained on.
    pub tokens_trained: usize,
    /// Seconds per phase.
    pub time: PhaseTimes,
}

/// One played env in the metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct EnvMetrics {
    /// Pool id.
    pub id: String,
    /// Skill.
    pub skill: String,
    /// Win rate without the hint.
    pub win_rate: f64,
    /// Win rate with the hint.
    pub win_rate_hint: f64,
    /// Regret.
    pub regret: f64,
    /// Whether a play timed out.
    pub timeout: bool,
}

/// Seconds per phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct PhaseTimes {
    /// Designer sampling (and repairs' sampling).
    pub design: f64,
    /// Validation in the sandbox.
    pub validate: f64,
    /// Hint sampling.
    pub hint: f64,
    /// Agent sampling during play.
    pub play_model: f64,
    /// Sandbox calls during play.
    pub play_sandbox: f64,
    /// GRPO update.
    pub update: f64,
    /// The whole rollout.
    pub total: f64,
}

/// A designer sample waiting for its reward.
struct DesignSample {
    sampled: Sampled,
    skill: String,
    group: usize,
    env: Option<String>,
}

/// A played episode.
struct Episode {
    game: usize,
    hint: bool,
    ret: f64,
    timeout: bool,
    samples: Vec<Sampled>,
}

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
}

fn io_err(what: &str, p: &Path) -> impl FnOnce(std::io::Error) -> TrainerError {
    let ctx = format!("{what} {}", p.display());
    move |e| TrainerError::io(ctx, e)
}

impl<'p> Run<'p> {
    /// Starts a run in `dir` (created; must not hold a run already): saves the config, adds
    /// `seed_envs` (name, source) to the pool unvalidated, and writes checkpoint 0.
    pub fn create(
        dir: &Path,
        cfg: TrainConfig,
        corpus: Corpus,
        runtime: Runtime,
        policy: &'p mut dyn Policy,
        seed_envs: Vec<(String, String)>,
    ) -> Result<Self> {
        cfg.validate()?;
        if dir.join("config.json").exists() {
            return Err(TrainerError::InvalidParameter(format!(
                "{} already holds a run: pass --resume to continue it, or choose another --out",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir).map_err(io_err("creating", dir))?;
        state::write_atomic(&dir.join("config.json"), cfg.to_json().as_bytes())?;
        File::create(dir.join("metrics.jsonl")).map_err(io_err("creating metrics in", dir))?;
        let mut st = RunState::default();
        for (name, source) in seed_envs {
            let id = format!("env{:05}", st.next_env);
            st.next_env += 1;
            let class_name = source
                .lines()
                .filter_map(|l| l.strip_prefix("class "))
                .map(|l| l.split(['(', ':']).next().unwrap_or("").trim().to_string())
                .find(|n| n.ends_with("Env"))
                .unwrap_or_else(|| name.clone());
            st.pool.push(PoolEnv {
                id,
                class_name,
                tool_use: source.contains("ToolUseBaseEnv"),
                source,
                skill: "Seed".into(),
                difficulty: "medium".into(),
                variant: None,
                doc_id: None,
                hint: None,
                created: 0,
                origin: format!("seed:{name}"),
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
        let ckpt = state::latest_checkpoint(dir).ok_or_else(|| {
            TrainerError::InvalidParameter(format!(
                "{} has no complete checkpoint to resume from",
                dir.display()
            ))
        })?;
        let st = state::load_state(&ckpt)?;
        policy.load(&ckpt.join("policy"))?;
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
        })
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

    fn hint_env(&mut self, i: usize) -> Result<usize> {
        let env = &self.state.pool[i];
        let msgs = [
            Message::new("system", prompts::DESIGNER_SYSTEM),
            Message::new("user", prompts::hint_prompt(&env.source, env.tool_use)),
        ];
        let seed = self.seed("hint", &[self.state.rollouts_done, i as u64]);
        let out = self
            .policy
            .sample(Role::Hint, &msgs, 1, self.cfg.hint_max_new_tokens, seed)?;
        let tokens = out.iter().map(|s| s.tokens.len()).sum();
        self.state.pool[i].hint = out
            .first()
            .and_then(|s| extract::hint(&s.text, self.cfg.hint_max_words));
        Ok(tokens)
    }

    async fn validate(&self, source: &str) -> std::result::Result<(String, bool), String> {
        let opts = CheckOptions {
            seeds: self.cfg.check_seeds,
            max_steps: self.cfg.check_max_steps,
            fuel_budget: Some(self.cfg.validation_fuel),
            ..CheckOptions::default()
        };
        let report = check(&self.runtime, source, &opts).await;
        if report.accepted {
            Ok((report.class_name.unwrap_or_default(), report.tool_use))
        } else {
            let errors: Vec<String> = report
                .findings
                .iter()
                .filter(|f| f.severity == spade_runtime::fuzz::oracles::Severity::Error)
                .map(|f| format!("- {}: {}", f.code, f.message))
                .collect();
            Err(errors.join("\n"))
        }
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

    /// One rollout; appends its metrics line and writes a checkpoint.
    pub async fn rollout(&mut self) -> Result<Metrics> {
        let t0 = Instant::now();
        let r = self.state.rollouts_done;
        let cfg = self.cfg.clone();
        let mut m = Metrics {
            rollout: r,
            ..Metrics::default()
        };
        let playable = |st: &RunState| st.pool.iter().filter(|e| !e.banned).count();
        let due = r.is_multiple_of(cfg.regen_interval) || playable(&self.state) < cfg.min_games;
        let mut designs: Vec<DesignSample> = Vec::new();
        let mut new_envs: Vec<usize> = Vec::new();
        if due && cfg.designs_per_round > 0 {
            m.designed = true;
            for d in 0..cfg.designs_per_round {
                let pick =
                    |tag: &str, n: usize| (self.seed(tag, &[r, d as u64]) % n as u64) as usize;
                let doc = self.corpus.sample(self.seed("doc", &[r, d as u64])).clone();
                let spec = DesignSpec {
                    skill: SKILLS[pick("skill", SKILLS.len())].to_string(),
                    difficulty: DIFFICULTIES[pick("difficulty", DIFFICULTIES.len())].to_string(),
                    variant: VARIANTS[pick("variant", VARIANTS.len())],
                    doc_id: doc.id,
                };
                let seeds = self
                    .state
                    .memory
                    .seeds(&cfg, self.seed("memory", &[r, d as u64]));
                let user = prompts::designer_prompt(&spec, &doc.text, &seeds);
                let msgs = [
                    Message::new("system", prompts::DESIGNER_SYSTEM),
                    Message::new("user", user),
                ];
                let ts = Instant::now();
                self.start_sampling(
                    r,
                    &format!(
                        "design {}/{} ({} completions)",
                        d + 1,
                        cfg.designs_per_round,
                        cfg.designer_group
                    ),
                    cfg.designer_group * cfg.designer_max_new_tokens,
                );
                let samples = self.policy.sample(
                    Role::Designer,
                    &msgs,
                    cfg.designer_group,
                    cfg.designer_max_new_tokens,
                    self.seed("design", &[r, d as u64]),
                )?;
                self.end_phase();
                m.time.design += ts.elapsed().as_secs_f64();
                for (g, s) in samples.into_iter().enumerate() {
                    m.designs += 1;
                    m.tokens_sampled += s.tokens.len();
                    let mut code = extract::python_block(&s.text);
                    let mut log = vec![serde_json::json!({"completion": s.text})];
                    let mut attempt = 0;
                    let accepted = loop {
                        let tv = Instant::now();
                        self.progress
                            .start(r, &format!("validate design {}", g + 1), 1, "checks");
                        let verdict = match &code {
                            Some(c) => self.validate(c).await,
                            None => Err("- no_code: the reply has no ```python code block".into()),
                        };
                        self.progress.advance(1);
                        self.progress.finish();
                        m.time.validate += tv.elapsed().as_secs_f64();
                        match verdict {
                            Ok(v) => break Some(v),
                            Err(errors) => {
                                log.push(serde_json::json!({"errors": errors}));
                                if attempt >= cfg.max_repair_attempts {
                                    break None;
                                }
                                attempt += 1;
                                m.repair_attempts += 1;
                                let prev = code.clone().unwrap_or_else(|| s.text.clone());
                                let msgs = [
                                    Message::new("system", prompts::DESIGNER_SYSTEM),
                                    Message::new("user", prompts::repair_prompt(&prev, &errors)),
                                ];
                                let ts = Instant::now();
                                self.start_sampling(
                                    r,
                                    &format!("repair design {} (attempt {attempt})", g + 1),
                                    cfg.designer_max_new_tokens,
                                );
                                let fix = self.policy.sample(
                                    Role::Repair,
                                    &msgs,
                                    1,
                                    cfg.designer_max_new_tokens,
                                    self.seed("repair", &[r, d as u64, g as u64, attempt as u64]),
                                )?;
                                self.end_phase();
                                m.time.design += ts.elapsed().as_secs_f64();
                                m.tokens_sampled +=
                                    fix.iter().map(|f| f.tokens.len()).sum::<usize>();
                                let fix =
                                    fix.into_iter().next().map(|f| f.text).unwrap_or_default();
                                log.push(serde_json::json!({"repair": fix}));
                                code = extract::python_block(&fix);
                            }
                        }
                    };
                    let mut env_id = None;
                    if let (Some((class_name, tool_use)), Some(source)) = (accepted, code.clone()) {
                        m.valid += 1;
                        if attempt > 0 {
                            m.repaired += 1;
                        }
                        let id = format!("env{:05}", self.state.next_env);
                        self.state.next_env += 1;
                        let design_file = format!("designs/{id}.json");
                        let record = serde_json::json!({
                            "spec": spec, "prompt": msgs[1].content, "attempts": log,
                        });
                        let path = self.dir.join(&design_file);
                        std::fs::create_dir_all(path.parent().expect("designs/"))
                            .map_err(io_err("creating", &path))?;
                        std::fs::write(
                            &path,
                            serde_json::to_string_pretty(&record).unwrap_or_default(),
                        )
                        .map_err(io_err("writing", &path))?;
                        self.state.pool.push(PoolEnv {
                            id: id.clone(),
                            source,
                            class_name,
                            skill: spec.skill.clone(),
                            difficulty: spec.difficulty.clone(),
                            variant: Some(spec.variant),
                            doc_id: Some(spec.doc_id),
                            tool_use,
                            hint: None,
                            created: r,
                            origin: "designed".into(),
                            design_file: Some(design_file),
                            banned: false,
                        });
                        new_envs.push(self.state.pool.len() - 1);
                        env_id = Some(id);
                    }
                    designs.push(DesignSample {
                        sampled: s,
                        skill: spec.skill.clone(),
                        group: d,
                        env: env_id,
                    });
                }
            }
            if m.designs > 0 {
                m.validity_rate = m.valid as f64 / m.designs as f64;
                m.repair_rate = m.repaired as f64 / m.designs as f64;
            }
        }
        // Hints for the new envs (and, in rollout 0, for the seed envs).
        let th = Instant::now();
        let mut to_hint: Vec<usize> = Vec::new();
        if r == 0 {
            to_hint.extend(
                (0..self.state.pool.len())
                    .filter(|&i| self.state.pool[i].origin.starts_with("seed:")),
            );
        }
        to_hint.extend(&new_envs);
        if !to_hint.is_empty() {
            self.start_sampling(
                r,
                &format!("hints for {} envs", to_hint.len()),
                to_hint.len() * cfg.hint_max_new_tokens,
            );
            for &i in &to_hint {
                m.tokens_sampled += self.hint_env(i)?;
            }
            self.end_phase();
        }
        m.time.hint = th.elapsed().as_secs_f64();
        // Choose games: the new envs, then other playable ones in seeded order.
        let mut games: Vec<usize> = new_envs.clone();
        let mut rest: Vec<usize> = (0..self.state.pool.len())
            .filter(|i| !self.state.pool[*i].banned && !new_envs.contains(i))
            .collect();
        let mut s = self.seed("games", &[r]);
        while games.len() < cfg.games_per_rollout && !rest.is_empty() {
            s = super::seeds::mix(s, 1);
            games.push(rest.remove((s % rest.len() as u64) as usize));
        }
        m.games = games.len();
        let episodes = self.play(r, &games, &mut m).await?;
        m.episodes = episodes.len();
        // Rewards per game.
        let mut outcome: BTreeMap<usize, (PlayOutcome, f64)> = BTreeMap::new();
        let (mut wins, mut wins_h, mut rets, mut rets_h) = (vec![], vec![], vec![], vec![]);
        for (gi, &pi) in games.iter().enumerate() {
            let eps: Vec<&Episode> = episodes.iter().filter(|e| e.game == gi).collect();
            let without: Vec<f64> = eps.iter().filter(|e| !e.hint).map(|e| e.ret).collect();
            let with: Vec<f64> = eps.iter().filter(|e| e.hint).map(|e| e.ret).collect();
            let win = |xs: &[f64]| {
                rewards::mean(
                    &xs.iter()
                        .map(|&x| f64::from(u8::from(rewards::is_win(x))))
                        .collect::<Vec<_>>(),
                )
            };
            let (w, wh) = (win(&without), win(&with));
            let env = &mut self.state.pool[pi];
            let hint_ok = env.hint.is_some();
            if !hint_ok {
                m.hint_failures += 1;
            }
            let timeout = eps.iter().any(|e| e.timeout);
            let o = if timeout {
                env.banned = true;
                m.timeouts += 1;
                PlayOutcome::Timeout
            } else {
                PlayOutcome::Played {
                    without: rewards::mean(&without),
                    with: rewards::mean(&with),
                    hint_ok,
                }
            };
            let regret = match o {
                PlayOutcome::Played {
                    without,
                    with,
                    hint_ok,
                } => rewards::regret(without, with, hint_ok),
                PlayOutcome::Timeout => 0.0,
            };
            outcome.insert(pi, (o, w));
            wins.push(w);
            wins_h.push(wh);
            rets.extend(&without);
            rets_h.extend(&with);
            m.envs.push(EnvMetrics {
                id: env.id.clone(),
                skill: env.skill.clone(),
                win_rate: w,
                win_rate_hint: wh,
                regret,
                timeout,
            });
            let record = MemoryRecord {
                env_id: env.id.clone(),
                class_name: env.class_name.clone(),
                skill: env.skill.clone(),
                code: env.source.clone(),
                win_rate: w,
                regret,
            };
            self.state
                .memory
                .add(record, cfg.memory_size, cfg.memory_code_chars);
        }
        m.win_rate = rewards::mean(&wins);
        m.win_rate_hint = rewards::mean(&wins_h);
        m.mean_return = rewards::mean(&rets);
        m.mean_return_hint = rewards::mean(&rets_h);
        m.regret = rewards::mean(&m.envs.iter().map(|e| e.regret).collect::<Vec<_>>());
        // Designer rewards, centred per skill.
        let raw: Vec<(String, f64)> = designs
            .iter()
            .map(|d| {
                let reward = match &d.env {
                    None => cfg.invalid_design_reward,
                    Some(id) => {
                        let pi = self
                            .state
                            .pool
                            .iter()
                            .position(|e| &e.id == id)
                            .expect("in pool");
                        match outcome.get(&pi) {
                            Some((o, w)) => rewards::designer_reward(&cfg, *o, *w),
                            None => 0.0,
                        }
                    }
                };
                (d.skill.clone(), reward)
            })
            .collect();
        m.designer_rewards = raw.iter().map(|(_, r)| *r).collect();
        let centred = rewards::centre_per_skill(&raw);
        // The GRPO batch.
        let mut batch: Vec<GrpoSample> = Vec::new();
        if r >= cfg.designer_start_rollout {
            for (d, reward) in designs.into_iter().zip(centred) {
                batch.push(GrpoSample {
                    prompt: d.sampled.prompt,
                    completion: d.sampled.tokens,
                    old_logprobs: d.sampled.logprobs,
                    reward,
                    group: d.group,
                    role: "designer".into(),
                });
            }
        }
        m.designer_samples = batch.len();
        let offset = cfg.designs_per_round + 1;
        for e in episodes {
            for s in e.samples {
                batch.push(GrpoSample {
                    prompt: s.prompt,
                    completion: s.tokens,
                    old_logprobs: s.logprobs,
                    reward: e.ret,
                    group: offset + e.game,
                    role: "agent".into(),
                });
            }
        }
        if cfg.max_update_samples > 0 && batch.len() > cfg.max_update_samples {
            let mut idx: Vec<usize> = (0..batch.len()).collect();
            let mut s = self.seed("subsample", &[r]);
            let mut keep = Vec::new();
            while keep.len() < cfg.max_update_samples {
                s = super::seeds::mix(s, 2);
                keep.push(idx.remove((s % idx.len() as u64) as usize));
            }
            keep.sort_unstable();
            let mut all: Vec<Option<GrpoSample>> = batch.into_iter().map(Some).collect();
            batch = keep
                .into_iter()
                .map(|i| all[i].take().expect("once"))
                .collect();
        }
        m.designer_samples = batch.iter().filter(|s| s.role == "designer").count();
        m.agent_samples = batch.len() - m.designer_samples;
        batch.retain(|s| !s.completion.is_empty());
        self.progress
            .start(r, &format!("update on {} samples", batch.len()), 1, "steps");
        let tu = Instant::now();
        if !batch.is_empty()
            && let Some(stats) = self.policy.update(&batch)?
        {
            m.loss = Some(stats.loss);
            m.tokens_trained = stats.tokens;
        }
        self.progress.advance(1);
        self.progress.finish();
        m.time.update = tu.elapsed().as_secs_f64();
        m.pool_size = playable(&self.state);
        // Metrics, then the checkpoint that makes them count (its own time is not in the line).
        m.time.total = t0.elapsed().as_secs_f64();
        let metrics_path = self.dir.join("metrics.jsonl");
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&metrics_path)
            .map_err(io_err("opening", &metrics_path))?;
        let line = serde_json::to_string(&m).expect("metrics serialise");
        writeln!(f, "{line}").map_err(io_err("writing", &metrics_path))?;
        drop(f);
        self.state.rollouts_done = r + 1;
        self.state.metrics_len = std::fs::metadata(&metrics_path)
            .map_err(io_err("reading", &metrics_path))?
            .len();
        self.progress.start(r, "checkpoint", 1, "writes");
        let p = &mut *self.policy;
        state::save_checkpoint(&self.dir, &self.state, |d| p.save(d))?;
        self.progress.advance(1);
        self.progress.finish();
        Ok(m)
    }

    /// Plays every game `plays_per_game` times without and `hint_plays` times with the hint,
    /// all episodes in lockstep: the model samples each active episode's next action, then
    /// every sandbox steps concurrently.
    async fn play(&mut self, r: u64, games: &[usize], m: &mut Metrics) -> Result<Vec<Episode>> {
        struct Live {
            ep: Episode,
            messages: Vec<Message>,
            tool_use: bool,
            rec: Option<Recorder<BufWriter<File>>>,
            last: Option<(f64, bool)>,
            done: bool,
        }
        let cfg = self.cfg.clone();
        let traj_dir = self.dir.join("trajectories").join(format!("r{r:05}"));
        std::fs::create_dir_all(&traj_dir).map_err(io_err("creating", &traj_dir))?;
        let mut live: Vec<Live> = Vec::new();
        let ts = Instant::now();
        for (gi, &pi) in games.iter().enumerate() {
            let env = self.state.pool[pi].clone();
            for (hint, k) in [(false, cfg.plays_per_game), (true, cfg.hint_plays)] {
                for i in 0..k {
                    let seed = self.seed("play", &[r, pi as u64, i as u64]);
                    let tag = if hint { "hint" } else { "nohint" };
                    let path = traj_dir.join(format!("{}-{tag}-{i:02}.jsonl", env.id));
                    let file = File::create(&path).map_err(io_err("creating", &path))?;
                    let hint_text = if hint { env.hint.clone() } else { None };
                    let mut meta = RecordMeta {
                        hint: hint_text.clone(),
                        ..RecordMeta::default()
                    };
                    meta.metadata.insert("role".into(), "agent".into());
                    meta.metadata.insert("rollout".into(), r.into());
                    meta.metadata.insert("env_id".into(), env.id.clone().into());
                    let opts = SandboxOptions {
                        seed,
                        max_turns: Some(cfg.max_turns),
                    };
                    let mut rec = Recorder::start(
                        &self.runtime,
                        &env.source,
                        opts,
                        meta,
                        BufWriter::new(file),
                    )
                    .await
                    .map_err(io_err("writing", &path))?;
                    let mut l = Live {
                        ep: Episode {
                            game: gi,
                            hint,
                            ret: 0.0,
                            timeout: false,
                            samples: vec![],
                        },
                        messages: vec![Message::new("system", prompts::agent_system(env.tool_use))],
                        tool_use: env.tool_use,
                        rec: None,
                        last: None,
                        done: false,
                    };
                    match rec.reset(Some(seed)).await {
                        Ok(reset) => {
                            l.messages.push(Message::new(
                                "user",
                                prompts::with_hint(&reset.observation, hint_text.as_deref()),
                            ));
                        }
                        Err(e) => {
                            l.done = true;
                            l.ep.timeout = is_timeout(e.call_error().map(|c| c.kind()));
                        }
                    }
                    l.rec = Some(rec);
                    live.push(l);
                }
            }
        }
        m.time.play_sandbox += ts.elapsed().as_secs_f64();
        self.progress.start(
            r,
            &format!("play {} games, {} episodes", games.len(), live.len()),
            u64::from(cfg.max_turns),
            "turns",
        );
        for turn in 0..cfg.max_turns {
            let active: Vec<usize> = (0..live.len()).filter(|&i| !live[i].done).collect();
            if active.is_empty() {
                break;
            }

            let tm = Instant::now();
            let seeds: Vec<u64> = active
                .iter()
                .map(|&i| self.seed("agent", &[r, i as u64, u64::from(turn)]))
                .collect();
            let chats: Vec<&[Message]> = active.iter().map(|&i| &live[i].messages[..]).collect();
            let sampled =
                self.policy
                    .sample_each(Role::Agent, &chats, cfg.agent_max_new_tokens, &seeds)?;
            if sampled.len() != active.len() {
                return Err(TrainerError::InvalidParameter(format!(
                    "the policy returned {} completions for {} episodes",
                    sampled.len(),
                    active.len()
                )));
            }
            let mut actions = Vec::with_capacity(active.len());
            for (&i, s) in active.iter().zip(sampled) {
                m.tokens_sampled += s.tokens.len();
                let action = extract::action(&s.text, live[i].tool_use);
                live[i]
                    .messages
                    .push(Message::new("assistant", s.text.clone()));
                live[i].ep.samples.push(s);
                actions.push(action);
            }
            m.time.play_model += tm.elapsed().as_secs_f64();
            let ts = Instant::now();
            let mut set = tokio::task::JoinSet::new();
            for (&i, action) in active.iter().zip(actions) {
                let mut rec = live[i].rec.take().expect("a recorder");
                set.spawn(async move {
                    let res = rec.step(&action).await;
                    (i, rec, res)
                });
            }
            let mut results = Vec::new();
            while let Some(j) = set.join_next().await {
                results.push(j.map_err(|e| {
                    TrainerError::InvalidParameter(format!("a play task failed: {e}"))
                })?);
            }
            results.sort_by_key(|(i, _, _)| *i);
            for (i, rec, res) in results {
                let l = &mut live[i];
                l.rec = Some(rec);
                match res {
                    Ok(step) => {
                        l.last = Some((step.reward, step.terminated));
                        if step.terminated || step.truncated {
                            l.done = true;
                        } else {
                            l.messages.push(Message::new("user", step.observation));
                        }
                    }
                    Err(e) => {
                        l.done = true;
                        l.last = None;
                        l.ep.timeout = is_timeout(e.call_error().map(|c| c.kind()));
                    }
                }
            }
            m.time.play_sandbox += ts.elapsed().as_secs_f64();
            self.progress.advance(1);
        }
        self.policy.forget();
        self.progress.finish();
        let mut out = Vec::with_capacity(live.len());
        for mut l in live {
            if let Some(rec) = l.rec.take() {
                rec.finish()
                    .map_err(|e| TrainerError::io("finishing a trajectory", e))?;
            }
            l.ep.ret = match l.last {
                Some((reward, term)) => rewards::episode_return(Some(reward), term),
                None => 0.0,
            };
            out.push(l.ep);
        }
        Ok(out)
    }
}

fn is_timeout(kind: Option<ErrorKind>) -> bool {
    matches!(kind, Some(ErrorKind::OutOfFuel | ErrorKind::Deadline))
}
