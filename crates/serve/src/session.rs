//! One session: at most one episode at a time, each in its own fresh sandbox, optionally
//! recorded as a trajectory file. Transport-independent (the WebSocket loop and the HTTP
//! endpoints both drive it).

use std::io::BufWriter;
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Value, json};
use spade_envtools::trajectory::RecordMeta;
use spade_envtools::{Branch, Episode, EpisodeError, Record};
use spade_sandbox::{CallError, EnvSource, ErrorKind, Runtime, SandboxOptions};

use crate::protocol::{
    ObservationMeta, ObservationPayload, ResetFields, SpadeAction, SpadeObservation,
};
use crate::recordings::Recordings;
use crate::registry::{Registration, Registry, Tenant};
use crate::tools::{ToolCall, mcp_tools};

/// What every session of a server shares.
pub struct SessionContext {
    pub registry: Arc<Registry>,
    pub runtime: Runtime,
    /// Where trajectories are written, each tenant's in its own directory (see
    /// [`crate::recordings`]); `None`: not recorded.
    pub recordings: Option<Recordings>,
}

impl SessionContext {
    /// The playable registration `env_id` (or the only one), or why there is none.
    pub fn playable(&self, env_id: Option<&str>) -> Result<Arc<Registration>, SessionError> {
        self.registry
            .playable(env_id)
            .map_err(|e| SessionError::Invalid(e.to_string()))
    }
}

/// Why a session call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SessionError {
    /// The request was malformed or named something that does not exist.
    #[error("{0}")]
    Invalid(String),
    /// The environment failed (exception, contract, load); the session goes on.
    #[error("{message}")]
    Env { kind: ErrorKind, message: String },
    /// The sandbox hit a host limit and is dead; the session ends.
    #[error("{message}")]
    Dead { kind: ErrorKind, message: String },
    /// A step in a session that never had an episode: usually a client that reconnected
    /// after its session was closed (idle timeout, server restart) and lost its episode.
    #[error("{0}")]
    NoEpisodeYet(String),
    /// The server could not write the trajectory.
    #[error("{0}")]
    Internal(String),
    /// The session's tenant holds `--max-record-bytes` of recordings: the call was refused
    /// before it ran (the episode is as it was).
    #[error("{0}")]
    RecordQuota(String),
}

impl SessionError {
    /// The sandbox error kind, if the environment or the sandbox failed.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            SessionError::Env { kind, .. } | SessionError::Dead { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    fn from_call(err: CallError, call: &str) -> SessionError {
        let kind = err.kind();
        if err.kills_sandbox() {
            SessionError::Dead {
                kind,
                message: format!(
                    "the sandbox died in {call}: {kind}: {}; this session is closed",
                    err.detail()
                ),
            }
        } else {
            SessionError::Env {
                kind,
                message: format!("{call} failed: {kind}: {}", err.detail()),
            }
        }
    }

    /// A failure of a reset's new sandbox: the session and its current episode go on, even
    /// when the new sandbox died (it was never the session's).
    fn for_failed_reset(self) -> SessionError {
        match self {
            SessionError::Dead { kind, message } => SessionError::Env {
                kind,
                message: message.replace(
                    "; this session is closed",
                    "; the reset failed and the session's current episode, if any, goes on",
                ),
            },
            other => other,
        }
    }

    fn from_episode(err: EpisodeError, call: &str) -> SessionError {
        match err {
            EpisodeError::Call(err) => SessionError::from_call(err, call),
            EpisodeError::Record(err) => {
                SessionError::Internal(format!("writing the trajectory failed: {err}"))
            }
            EpisodeError::NoDifficulty
            | EpisodeError::Fork(_)
            | EpisodeError::UnrecordedParent
            | EpisodeError::FuelLimit { .. } => SessionError::Invalid(err.to_string()),
        }
    }
}

/// The result of a reset or a step, before it is put on the wire.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub text: String,
    /// The info dict as compact JSON.
    pub info: String,
    /// `None` after reset.
    pub reward: Option<f64>,
    pub terminated: bool,
    pub truncated: bool,
    pub fuel: u64,
    pub env_id: String,
    pub episode_id: String,
    pub step_count: u64,
    /// Reset fields that the environment's `reset` does not take, dropped (see
    /// [`ResetFields::extra`]).
    pub ignored_reset_fields: Vec<String>,
    /// The tool, when the step was a tool call by name (OpenEnv's `CallToolAction`): the
    /// observation then also carries `tool_name` and `result` (the observation text), where
    /// OpenEnv's MCP clients read them.
    pub tool_name: Option<String>,
}

impl Outcome {
    /// The OpenEnv result payload (`{observation, reward, done, metadata}`), serialised.
    pub fn with_payload<R>(&self, f: impl FnOnce(&ObservationPayload<'_>) -> R) -> R {
        let info = RawValue::from_string(self.info.clone())
            .unwrap_or_else(|_| RawValue::from_string("{}".to_owned()).expect("valid JSON"));
        let meta = ObservationMeta {
            env_id: &self.env_id,
            episode_id: &self.episode_id,
            step_count: self.step_count,
            fuel: self.fuel,
            ignored_reset_fields: &self.ignored_reset_fields,
        };
        let payload = ObservationPayload {
            observation: SpadeObservation {
                tool_name: self.tool_name.as_deref(),
                result: self.tool_name.as_ref().map(|_| self.text.as_str()),
                text: &self.text,
                info: &info,
                terminated: self.terminated,
                truncated: self.truncated,
                metadata: meta.clone(),
            },
            reward: self.reward,
            done: self.terminated || self.truncated,
            metadata: &meta,
        };
        f(&payload)
    }
}

/// The session's current episode.
struct Current {
    id: String,
    env_id: String,
    /// Held so that the registry does not evict an environment while it is played.
    registration: Arc<Registration>,
    seed: u64,
    steps: u64,
    /// Why the episode is over, once it is.
    ended: Option<&'static str>,
    /// `None` once the episode is over (the trajectory is finished then).
    episode: Option<Episode>,
}

/// One client's session.
pub struct Session {
    id: String,
    ctx: Arc<SessionContext>,
    /// The tenant whose session it is: its episodes are recorded in its directory, against
    /// its quota.
    owner: Tenant,
    episodes: u64,
    episode: Option<Current>,
}

impl Session {
    /// A session of `owner` with no episode yet.
    pub fn new(id: String, ctx: Arc<SessionContext>, owner: Tenant) -> Session {
        Session {
            id,
            ctx,
            owner,
            episodes: 0,
            episode: None,
        }
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The current episode's id, if there is an episode.
    pub fn episode_id(&self) -> Option<&str> {
        self.episode.as_ref().map(|e| e.id.as_str())
    }

    /// Resets `env_id` with `seed` in a fresh sandbox; once that succeeded, ends the current
    /// episode (if any) and makes the new one current. A reset that fails (a bad request, an
    /// unknown or rejected environment, an exception in the environment, a sandbox limit)
    /// leaves the current episode as it was.
    pub async fn reset(&mut self, fields: ResetFields) -> Result<Outcome, SessionError> {
        let registration = self.ctx.playable(fields.env_id.as_deref())?;
        let source = registration
            .source
            .clone()
            .expect("playable sources are compiled");
        let seed = fields.seed.unwrap_or(0);
        let options = SandboxOptions {
            seed,
            max_turns: fields.max_turns,
        };
        let episode_id = match &fields.episode_id {
            Some(id) => id.clone(),
            None => format!("{}-{}", self.id, self.episodes),
        };
        self.episodes += 1;
        let ctx = self.ctx.clone();
        let mut episode =
            start_episode(&ctx, self.owner, &source, options, &episode_id, &fields).await?;
        let costed = if fields.extra.is_empty() {
            episode.reset(Some(seed)).await.map(|r| (r, Vec::new()))
        } else {
            episode.reset_with(Some(seed), &fields.extra).await
        };
        let fuel = costed.cost.fuel;
        let (reset, dropped) = match costed.result {
            Ok(reset) => reset,
            Err(err) => {
                // The new episode never started: its trajectory (if recorded) is finished
                // with the failure, and the current episode goes on.
                let _ = episode.finish();
                return Err(SessionError::from_episode(err, "reset").for_failed_reset());
            }
        };
        let finished = self.finish();
        let current = Current {
            id: episode_id,
            env_id: registration.id.clone(),
            registration,
            seed,
            steps: 0,
            ended: None,
            episode: Some(episode),
        };
        let text = match &fields.hint {
            Some(hint) if !hint.is_empty() => format!("{}\n\nHINT: {hint}", reset.observation),
            _ => reset.observation,
        };
        let outcome = Outcome {
            text,
            info: reset.info,
            reward: None,
            terminated: false,
            truncated: false,
            fuel,
            env_id: current.env_id.clone(),
            episode_id: current.id.clone(),
            step_count: 0,
            ignored_reset_fields: dropped,
            tool_name: None,
        };
        self.episode = Some(current);
        finished?;
        Ok(outcome)
    }

    /// Steps the current episode with the model's reply. The trajectory is finished as soon as
    /// the episode terminates or is truncated; later steps are errors until the next reset.
    pub async fn step(&mut self, action: SpadeAction) -> Result<Outcome, SessionError> {
        let Some(episode) = &mut self.episode else {
            if self.episodes == 0 {
                return Err(SessionError::NoEpisodeYet(format!(
                    "session '{}' is new and has no episode: send reset before step (a client that reconnected after its session was closed, for example after the idle timeout, is in a new session)",
                    self.id
                )));
            }
            return Err(SessionError::Invalid(
                "no episode is running: send reset before step".to_owned(),
            ));
        };
        let Some(playing) = &mut episode.episode else {
            return Err(SessionError::Invalid(format!(
                "episode '{}' is over ({}); send reset to start a new one",
                episode.id,
                episode.ended.unwrap_or("ended")
            )));
        };
        if let Some(recordings) = &self.ctx.recordings
            && playing.recorded()
        {
            recordings.check_quota(self.owner)?;
        }
        let costed = playing.step(&action.message).await;
        let fuel = costed.cost.fuel;
        episode.steps += 1;
        let step = match costed
            .result
            .map_err(|e| SessionError::from_episode(e, "step"))
        {
            Ok(step) => step,
            Err(err) => {
                if matches!(err, SessionError::Dead { .. }) {
                    episode.end("the sandbox died")?;
                }
                return Err(err);
            }
        };
        if step.terminated || step.truncated {
            episode.end(if step.terminated {
                "terminated"
            } else {
                "truncated"
            })?;
        }
        Ok(Outcome {
            text: step.observation,
            info: step.info,
            reward: Some(step.reward),
            terminated: step.terminated,
            truncated: step.truncated,
            fuel,
            env_id: episode.env_id.clone(),
            episode_id: episode.id.clone(),
            step_count: episode.steps,
            ignored_reset_fields: Vec::new(),
            tool_name: None,
        })
    }

    /// Calls a tool of the running episode's tool-use environment by name: the step of the
    /// reply [`ToolCall::reply`] makes of it.
    pub async fn call_tool(&mut self, call: &ToolCall) -> Result<Outcome, SessionError> {
        let reply = match &self.episode {
            Some(episode) => {
                let tools = tool_schemas(&episode.registration)?;
                call.reply(tools).map_err(SessionError::Invalid)?
            }
            // No episode: `step` says why.
            None => String::new(),
        };
        let mut outcome = self.step(SpadeAction { message: reply }).await?;
        outcome.tool_name = Some(call.name.clone());
        Ok(outcome)
    }

    /// The tools (as MCP lists them) of the running episode's environment, or, with no
    /// episode, of `env_id` (or the only environment); with the environment's id.
    pub fn tools(&self, env_id: Option<&str>) -> Result<(String, Vec<Value>), SessionError> {
        match &self.episode {
            Some(episode) => env_tools(&episode.registration),
            None => {
                let registration = self.ctx.playable(env_id)?;
                env_tools(&registration)
            }
        }
    }

    /// Whether the current episode is over (`false` with no episode).
    pub fn episode_over(&self) -> bool {
        self.episode.as_ref().is_some_and(|e| e.ended.is_some())
    }

    /// OpenEnv's state: episode id and step count, plus spade's fields.
    pub fn state(&self) -> Value {
        match &self.episode {
            None => json!({
                "episode_id": null, "step_count": 0, "env_id": null, "seed": null,
                "done": false, "session_id": self.id,
            }),
            Some(e) => json!({
                "episode_id": e.id, "step_count": e.steps, "env_id": e.env_id, "seed": e.seed,
                "done": e.ended.is_some(), "session_id": self.id,
            }),
        }
    }

    /// New sessions whose episodes are copies of this one's running episode, one per
    /// `(session id, reseed)` (a reseed seeds the copy's WASI entropy and module-global
    /// `random` anew; `None` copies them exactly). Each copy's episode id is `<session id>-0`;
    /// when the server records, its trajectory names this episode's as its parent, so
    /// `spade replay` replays both. Refused (nothing created) when no episode is running or
    /// its state cannot be copied.
    pub async fn fork(
        &mut self,
        copies: &[(String, Option<u64>)],
    ) -> Result<Vec<Session>, SessionError> {
        let Some(current) = &mut self.episode else {
            return Err(SessionError::Invalid(
                "no episode is running: send reset before fork".to_owned(),
            ));
        };
        let Some(playing) = &mut current.episode else {
            return Err(SessionError::Invalid(format!(
                "episode '{}' is over ({}); only a running episode can be forked",
                current.id,
                current.ended.unwrap_or("ended")
            )));
        };
        if let Some(recordings) = &self.ctx.recordings
            && playing.recorded()
        {
            recordings.check_quota(self.owner)?;
        }
        let mut branches = Vec::with_capacity(copies.len());
        for (session_id, reseed) in copies {
            let record = match (&self.ctx.recordings, playing.recorded()) {
                (Some(recordings), true) => {
                    let file = recordings.create(self.owner, &format!("{session_id}-0"))?;
                    Record::to(BufWriter::new(file), RecordMeta::default())
                }
                _ => Record::Off,
            };
            branches.push(Branch {
                reseed: *reseed,
                record,
                parent: format!("{}.jsonl", current.id),
            });
        }
        let forked = playing
            .fork_n(branches)
            .await
            .result
            .map_err(|e| SessionError::from_episode(e, "fork"))?;
        Ok(copies
            .iter()
            .zip(forked)
            .map(|((session_id, _), episode)| Session {
                id: session_id.clone(),
                ctx: self.ctx.clone(),
                owner: self.owner,
                episodes: 1,
                episode: Some(Current {
                    id: format!("{session_id}-0"),
                    env_id: current.env_id.clone(),
                    registration: current.registration.clone(),
                    seed: current.seed,
                    steps: current.steps,
                    ended: None,
                    episode: Some(episode),
                }),
            })
            .collect())
    }

    /// Ends the current episode, writing its trajectory's footer.
    pub fn finish(&mut self) -> Result<(), SessionError> {
        if let Some(mut episode) = self.episode.take() {
            episode.end("closed")?;
        }
        Ok(())
    }
}

/// A fresh episode, recorded when the server records. A load that fails is the reset's
/// failure (its trajectory, if recorded, is finished with it).
async fn start_episode(
    ctx: &SessionContext,
    owner: Tenant,
    source: &EnvSource,
    options: SandboxOptions,
    episode_id: &str,
    fields: &ResetFields,
) -> Result<Episode, SessionError> {
    let record = match &ctx.recordings {
        None => Record::Off,
        Some(recordings) => {
            let meta = RecordMeta {
                hint: fields.hint.clone(),
                ..RecordMeta::default()
            };
            Record::to(BufWriter::new(recordings.create(owner, episode_id)?), meta)
        }
    };
    let episode = Episode::start(&ctx.runtime, source, options, record)
        .await
        .map_err(|e| SessionError::Internal(format!("writing the trajectory: {e}")))?;
    if let Err(err) = episode.info() {
        let err = SessionError::from_call(err.clone(), "load").for_failed_reset();
        let _ = episode.finish();
        return Err(err);
    }
    Ok(episode)
}

impl Current {
    fn end(&mut self, why: &'static str) -> Result<(), SessionError> {
        if let Some(episode) = self.episode.take() {
            self.ended = Some(why);
            episode.finish().map(drop).map_err(|e| {
                SessionError::Internal(format!("writing the trajectory failed: {e}"))
            })?;
        }
        Ok(())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

/// OpenEnv's stateless `POST /step`: a fresh sandbox of `env_id` (seeded with `seed`, no
/// reset), one step, then the sandbox is dropped.
pub async fn stateless_step(
    ctx: &SessionContext,
    env_id: Option<&str>,
    seed: u64,
    action: SpadeAction,
) -> Result<Outcome, SessionError> {
    let registration = ctx.playable(env_id)?;
    let source = registration
        .source
        .clone()
        .expect("playable sources are compiled");
    let options = SandboxOptions::seeded(seed);
    let mut episode = Episode::start(&ctx.runtime, &source, options, Record::Off)
        .await
        .map_err(|e| SessionError::Internal(format!("starting an episode: {e}")))?;
    if let Err(err) = episode.info() {
        return Err(SessionError::from_call(err.clone(), "load"));
    }
    let (step, cost) = episode
        .step(&action.message)
        .await
        .with_cost()
        .map_err(|e| SessionError::from_episode(e, "step"))?;
    Ok(Outcome {
        text: step.observation,
        info: step.info,
        reward: Some(step.reward),
        terminated: step.terminated,
        truncated: step.truncated,
        fuel: cost.fuel,
        env_id: registration.id.clone(),
        episode_id: String::new(),
        step_count: 1,
        ignored_reset_fields: Vec::new(),
        tool_name: None,
    })
}

/// The tool schemas of a tool-use environment, or why it has none.
pub fn tool_schemas(registration: &Registration) -> Result<&Value, SessionError> {
    registration.tools.as_ref().ok_or_else(|| {
        SessionError::Invalid(format!(
            "Environment does not support MCP: '{}' is not a tool-use environment (its class has no get_tools()); play it with step messages {{\"message\": \"...\"}}",
            registration.id
        ))
    })
}

/// A tool-use environment's id and its tools as MCP lists them.
pub fn env_tools(registration: &Registration) -> Result<(String, Vec<Value>), SessionError> {
    let tools = tool_schemas(registration)?;
    Ok((registration.id.clone(), mcp_tools(tools)))
}
