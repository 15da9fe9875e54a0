//! Phase 4, play: the chosen games are played `plays_per_game` times without and `hint_plays`
//! times with the hint, every episode recorded to `trajectories/rNNNNN/`, all in lockstep
//! ([`crate::lockstep`], the loop `spade eval` uses too).
use std::fs::File;
use std::io::BufWriter;
use std::time::Instant;

use spade_envtools::trajectory::RecordMeta;
use spade_envtools::{Episode, EpisodeError, Record};
use spade_sandbox::{ErrorKind, SandboxOptions};

use super::validate::DesignResult;
use super::{Metrics, Run, io_err};
use crate::error::{Result, TrainError};
use crate::lockstep::{self, LiveEpisode};
use crate::policy::Sampled;
use crate::prompts;
use crate::seeds;

/// A finished episode.
#[derive(Debug, Clone)]
pub(super) struct Played {
    /// Pool index of its environment.
    pub pool: usize,
    /// Whether its first observation carried the hint.
    pub hint: bool,
    /// Its return (`failed_play_return` when a call failed).
    pub ret: f64,
    /// The error kind of a call that failed (reset or step), if one did.
    pub failure: Option<ErrorKind>,
    /// Fixed-env training: the difficulty its problem was generated at.
    pub difficulty: Option<u64>,
    /// The agent's turns.
    pub turns: Vec<Sampled>,
}

impl Played {
    /// Whether a call ran out of fuel or past its deadline (the designer pays the timeout
    /// reward and the env is banned).
    pub fn timed_out(&self) -> bool {
        matches!(
            self.failure,
            Some(ErrorKind::OutOfFuel | ErrorKind::Deadline)
        )
    }
}

/// One problem of fixed-env training: every play of a game in a rollout shares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Problem {
    /// The reset seed (and sandbox seed).
    pub seed: u64,
    /// The difficulty passed to `reset`.
    pub difficulty: u64,
}

/// An episode to start: play `i` of pool env `pool`, with or without the hint, on a fixed
/// problem or (self-play) on a seed of its own.
#[derive(Debug, Clone, Copy)]
pub(super) struct Start {
    pub pool: usize,
    pub hint: bool,
    pub i: usize,
    pub problem: Option<Problem>,
}

impl Run<'_> {
    /// The games of this rollout: its new environments, then other playable ones in a seeded
    /// order, up to `games_per_rollout` (new environments are always played).
    pub(super) fn choose_games(&self, r: u64, designs: &[DesignResult]) -> Vec<usize> {
        let new: Vec<usize> = designs.iter().filter_map(|d| d.env).collect();
        let mut games = new.clone();
        let mut rest: Vec<usize> = (0..self.state.pool.len())
            .filter(|i| !self.state.pool[*i].banned && !new.contains(i))
            .collect();
        let mut s = self.seed("games", &[r]);
        while games.len() < self.cfg.games_per_rollout && !rest.is_empty() {
            s = seeds::mix(s, 1);
            games.push(rest.remove((s % rest.len() as u64) as usize));
        }
        games
    }

    /// Plays every game with and without its hint.
    pub(super) async fn play(
        &mut self,
        r: u64,
        games: &[usize],
        m: &mut Metrics,
    ) -> Result<Vec<Played>> {
        let mut starts = Vec::new();
        for &pool in games {
            for (hint, plays) in [
                (false, self.cfg.plays_per_game),
                (true, self.cfg.hint_plays),
            ] {
                starts.extend((0..plays).map(|i| Start {
                    pool,
                    hint,
                    i,
                    problem: None,
                }));
            }
        }
        self.play_starts(r, games.len(), starts, m).await
    }

    /// Plays every start in lockstep, each recorded.
    pub(super) async fn play_starts(
        &mut self,
        r: u64,
        games: usize,
        starts: Vec<Start>,
        m: &mut Metrics,
    ) -> Result<Vec<Played>> {
        m.games = games;
        let traj_dir = self.dir.join("trajectories").join(format!("r{r:05}"));
        std::fs::create_dir_all(&traj_dir).map_err(io_err("creating", &traj_dir))?;
        let ts = Instant::now();
        let mut live: Vec<LiveEpisode> = Vec::new();
        // Episodes that ended at reset, and where every live one came from.
        let mut played: Vec<Played> = Vec::new();
        let mut origin: Vec<Start> = Vec::new();
        for start in starts {
            match self.start_episode(r, &start, &traj_dir).await? {
                Ok(episode) => {
                    live.push(episode);
                    origin.push(start);
                }
                Err((failure, rec)) => {
                    finish(rec)?;
                    played.push(Played {
                        pool: start.pool,
                        hint: start.hint,
                        ret: self.cfg.failed_play_return,
                        failure: Some(failure),
                        difficulty: start.problem.map(|p| p.difficulty),
                        turns: Vec::new(),
                    });
                }
            }
        }
        m.time.play_sandbox += ts.elapsed().as_secs_f64();
        self.progress.start(
            r,
            &format!("play {games} games, {} episodes", live.len() + played.len()),
            u64::from(self.cfg.max_turns),
            "turns",
        );
        let progress = std::sync::Arc::clone(&self.progress);
        let (seed, max_turns, max_new) = (
            self.cfg.seed,
            self.cfg.max_turns,
            self.cfg.agent_max_new_tokens,
        );
        let times = lockstep::play(
            &mut *self.policy,
            &mut live,
            max_turns,
            max_new,
            |i, turn| seeds::derive(seed, "agent", &[r, i as u64, u64::from(turn)]),
            || progress.advance(1),
        )
        .await;
        self.progress.finish();
        let times = times?;
        m.time.play_model += times.model;
        m.time.play_sandbox += times.env;
        m.tokens_sampled += times.tokens;
        for (e, start) in live.into_iter().zip(origin) {
            // A failed play scores `failed_play_return` (the reference: -1).
            let failure = e.failure;
            let ret = match failure {
                Some(_) => self.cfg.failed_play_return,
                None => e.ret(),
            };
            let (rec, turns) = e.into_parts();
            if let Some(rec) = rec {
                finish(rec)?;
            }
            played.push(Played {
                pool: start.pool,
                hint: start.hint,
                ret,
                failure,
                difficulty: start.problem.map(|p| p.difficulty),
                turns,
            });
        }
        m.episodes = played.len();
        Ok(played)
    }

    /// Opens episode `i` of pool env `pi` (hinted or not): a recorded episode and its reset. A
    /// reset that fails gives the error kind and the episode back.
    async fn start_episode(
        &self,
        r: u64,
        start: &Start,
        traj_dir: &std::path::Path,
    ) -> Result<std::result::Result<LiveEpisode, (ErrorKind, Episode)>> {
        let Start {
            pool: pi,
            hint,
            i,
            problem,
        } = *start;
        let env = &self.state.pool[pi];
        let seed = match problem {
            Some(p) => p.seed,
            None => self.seed("play", &[r, pi as u64, i as u64]),
        };
        let tag = match (problem, hint) {
            (Some(p), _) => format!("d{}", p.difficulty),
            (None, true) => "hint".to_owned(),
            (None, false) => "nohint".to_owned(),
        };
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
            max_turns: Some(self.cfg.max_turns),
        };
        let record = Record::to(BufWriter::new(file), meta);
        let mut rec = Episode::start(&self.runtime, &env.source, opts, record)
            .await
            .map_err(|e| TrainError::trajectory(&path, e))?;
        let system = prompts::agent_system(env.tool_use);
        let difficulty = problem.map(|p| p.difficulty);
        let reset = rec.reset_at(Some(seed), difficulty).await.result;
        Ok(match reset {
            Ok(reset) => {
                let obs = prompts::with_hint(&reset.observation, hint_text.as_deref());
                Ok(LiveEpisode::new(
                    rec,
                    &system,
                    &self.cfg.agent_examples,
                    obs,
                    env.tool_use,
                ))
            }
            Err(EpisodeError::Call(c)) => Err((c.kind(), rec)),
            Err(EpisodeError::NoDifficulty) => {
                return Err(TrainError::Environment(format!(
                    "fixed environment {} ({}) takes no `difficulty` in reset(): \
                     fixed-env training needs one (RLVE's environments take it)",
                    env.id, env.origin
                )));
            }
            Err(EpisodeError::Record(io)) => return Err(TrainError::trajectory(&path, io)),
            Err(
                other @ (EpisodeError::Fork(_)
                | EpisodeError::UnrecordedParent
                | EpisodeError::FuelLimit { .. }),
            ) => {
                unreachable!("a reset does not fork and this episode has no fuel limit: {other}")
            }
        })
    }
}

/// Writes a finished episode's footer.
fn finish(rec: Episode) -> Result<()> {
    rec.finish()
        .map(|_| ())
        .map_err(|source| TrainError::Trajectory { path: None, source })
}
