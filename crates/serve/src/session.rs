//! One session: at most one episode at a time, each in its own fresh sandbox, optionally
//! recorded as a trajectory file. Transport-independent (the WebSocket loop and the HTTP
//! endpoints both drive it).

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter};
use std::path::PathBuf;
use std::sync::Arc;

use serde_json::value::RawValue;
use serde_json::{Value, json};
use spade_envtools::trajectory::{RecordError, RecordMeta, Recorder};
use spade_sandbox::{CallError, EnvSource, ErrorKind, Runtime, Sandbox, SandboxOptions};

use crate::protocol::{
    ObservationMeta, ObservationPayload, ResetFields, SpadeAction, SpadeObservation,
};
use crate::registry::{Registration, Registry};
use crate::tools::{ToolCall, mcp_tools};

/// What every session of a server shares.
pub struct SessionContext {
    pub registry: Arc<Registry>,
    pub runtime: Runtime,
    /// Where trajectories are written (`<dir>/<episode_id>.jsonl`); `None`: not recorded.
    pub record_dir: Option<PathBuf>,
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

    fn from_record(err: RecordError, call: &str) -> SessionError {
        match err {
            RecordError::Call(err) => SessionError::from_call(err, call),
            RecordError::Io(err) => {
                SessionError::Internal(format!("writing the trajectory failed: {err}"))
            }
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

/// A sandbox, plain or recorded.
enum Driver {
    Plain(Box<Sandbox>),
    Recorded(Box<Recorder<BufWriter<File>>>),
}

impl Driver {
    fn fuel(&self) -> u64 {
        match self {
            Driver::Plain(s) => s.last_fuel(),
            Driver::Recorded(r) => r.sandbox().map(Sandbox::last_fuel).unwrap_or(0),
        }
    }

    fn finish(self) -> io::Result<()> {
        match self {
            Driver::Plain(_) => Ok(()),
            Driver::Recorded(r) => r.finish().map(|_| ()),
        }
    }
}

struct Episode {
    id: String,
    env_id: String,
    /// Held so that the registry does not evict an environment while it is played.
    registration: Arc<Registration>,
    seed: u64,
    steps: u64,
    /// Why the episode is over, once it is.
    ended: Option<&'static str>,
    /// `None` once the episode is over (the trajectory is finished then).
    driver: Option<Driver>,
}

/// One client's session.
pub struct Session {
    id: String,
    ctx: Arc<SessionContext>,
    episodes: u64,
    episode: Option<Episode>,
}

impl Session {
    /// A session with no episode yet.
    pub fn new(id: String, ctx: Arc<SessionContext>) -> Session {
        Session {
            id,
            ctx,
            episodes: 0,
            episode: None,
        }
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
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
        let mut driver = start_driver(&ctx, &source, options, &episode_id, &fields).await?;
        let plain = fields.extra.is_empty();
        let result = match &mut driver {
            Driver::Plain(s) => {
                let reset = if plain {
                    s.reset(Some(seed)).await.map(|r| (r, Vec::new()))
                } else {
                    s.reset_with(Some(seed), &fields.extra).await
                };
                reset.map_err(|e| SessionError::from_call(e, "reset"))
            }
            Driver::Recorded(r) => {
                let reset = if plain {
                    r.reset(Some(seed)).await.map(|r| (r, Vec::new()))
                } else {
                    r.reset_with(Some(seed), &fields.extra).await
                };
                reset.map_err(|e| SessionError::from_record(e, "reset"))
            }
        };
        let (reset, dropped) = match result {
            Ok(reset) => reset,
            Err(err) => {
                // The new episode never started: its trajectory (if recorded) is finished
                // with the failure, and the current episode goes on.
                let _ = driver.finish();
                return Err(err.for_failed_reset());
            }
        };
        let fuel = driver.fuel();
        let finished = self.finish();
        let episode = Episode {
            id: episode_id,
            env_id: registration.id.clone(),
            registration,
            seed,
            steps: 0,
            ended: None,
            driver: Some(driver),
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
            env_id: episode.env_id.clone(),
            episode_id: episode.id.clone(),
            step_count: 0,
            ignored_reset_fields: dropped,
            tool_name: None,
        };
        self.episode = Some(episode);
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
        let Some(driver) = &mut episode.driver else {
            return Err(SessionError::Invalid(format!(
                "episode '{}' is over ({}); send reset to start a new one",
                episode.id,
                episode.ended.unwrap_or("ended")
            )));
        };
        let result = match driver {
            Driver::Plain(s) => s
                .step(&action.message)
                .await
                .map_err(|e| SessionError::from_call(e, "step")),
            Driver::Recorded(r) => r
                .step(&action.message)
                .await
                .map_err(|e| SessionError::from_record(e, "step")),
        };
        let fuel = driver.fuel();
        episode.steps += 1;
        let step = match result {
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

    /// Ends the current episode, writing its trajectory's footer.
    pub fn finish(&mut self) -> Result<(), SessionError> {
        if let Some(mut episode) = self.episode.take() {
            episode.end("closed")?;
        }
        Ok(())
    }
}

/// A fresh sandbox for a new episode, recorded when the server records.
async fn start_driver(
    ctx: &SessionContext,
    source: &EnvSource,
    options: SandboxOptions,
    episode_id: &str,
    fields: &ResetFields,
) -> Result<Driver, SessionError> {
    let Some(dir) = &ctx.record_dir else {
        let sandbox = ctx
            .runtime
            .sandbox_from(source, options)
            .await
            .map_err(|e| SessionError::from_call(e, "load").for_failed_reset())?;
        return Ok(Driver::Plain(Box::new(sandbox)));
    };
    let path = dir.join(format!("{episode_id}.jsonl"));
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|err| match err.kind() {
            io::ErrorKind::AlreadyExists => SessionError::Invalid(format!(
                "episode id '{episode_id}' is already used by a recorded trajectory"
            )),
            _ => SessionError::Internal(format!(
                "cannot create the trajectory file '{}': {err}",
                path.display()
            )),
        })?;
    let meta = RecordMeta {
        hint: fields.hint.clone(),
        ..RecordMeta::default()
    };
    let recorder = Recorder::start(
        &ctx.runtime,
        source.text(),
        options,
        meta,
        BufWriter::new(file),
    )
    .await
    .map_err(|e| SessionError::Internal(format!("writing the trajectory: {e}")))?;
    if let Err(err) = recorder.info() {
        let err = SessionError::from_call(err.clone(), "load").for_failed_reset();
        let _ = recorder.finish();
        return Err(err);
    }
    Ok(Driver::Recorded(Box::new(recorder)))
}

impl Episode {
    fn end(&mut self, why: &'static str) -> Result<(), SessionError> {
        if let Some(driver) = self.driver.take() {
            self.ended = Some(why);
            driver.finish().map_err(|e| {
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
    let mut sandbox = ctx
        .runtime
        .sandbox_from(&source, SandboxOptions::seeded(seed))
        .await
        .map_err(|e| SessionError::from_call(e, "load"))?;
    let step = sandbox
        .step(&action.message)
        .await
        .map_err(|e| SessionError::from_call(e, "step"))?;
    Ok(Outcome {
        text: step.observation,
        info: step.info,
        reward: Some(step.reward),
        terminated: step.terminated,
        truncated: step.truncated,
        fuel: sandbox.last_fuel(),
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
