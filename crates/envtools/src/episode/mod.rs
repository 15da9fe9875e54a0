//! [`Episode`]: the one door through which every caller plays an environment (`spade run`,
//! `spade serve`, the Python package, self-play and `spade eval`, `spade check` and
//! `spade fuzz`, `spade replay`).
//!
//! An episode owns one sandbox and, when asked, the recording of its trajectory. Each call
//! returns its value with what it cost ([`Costed`]: fuel, output, time), the same whether it is
//! recorded or not, and the episode keeps the running totals ([`Spent`]). The rules every
//! caller shares live here once: a load that fails is recorded and then reported by
//! [`Episode::info`], a call on an environment that never loaded is refused without running,
//! and a reset at a difficulty ([`Episode::reset_at`]) is refused when the environment's
//! `reset` drops the field.
//!
//! Callers keep only what is theirs: serve its sessions, Python its GIL and exceptions,
//! self-play its lockstep, check and fuzz their oracles.
//!
//! Per-episode state is all here (the sandbox, the recording's index, hash chain and tally,
//! the running totals), apart from the per-source state the runtime keeps: an episode fork
//! ([`Episode::fork`], in `fork.rs`) copies the sandbox's state and starts a recording that
//! names this one's.

mod cost;
mod fork;
mod probe;
mod replay_check;

use std::io::{self, Write};
use std::time::Instant;

use spade_sandbox::{
    CallError, EnvInfo, EnvSource, ErrorKind, ExtraFields, Reset, Runtime, Sandbox, SandboxOptions,
    Step,
};

use crate::trajectory::recorder::{Recording, Sink};
use crate::trajectory::{RecordMeta, RecordSummary};

pub use cost::{Cost, Costed, EpisodeError, Spent};
pub use fork::Branch;
pub(crate) use probe::fuel_refused;
pub use replay_check::check_replay;

/// The environment source an episode loads: text (compiled on first use, then cached by the
/// runtime), or a source the caller already prepared ([`Runtime::prepare`]).
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// Python source text.
    Text(&'a str),
    /// A compiled source.
    Prepared(&'a EnvSource),
}

impl Source<'_> {
    fn text(&self) -> &str {
        match self {
            Source::Text(text) => text,
            Source::Prepared(source) => source.text(),
        }
    }
}

impl<'a> From<&'a str> for Source<'a> {
    fn from(text: &'a str) -> Self {
        Source::Text(text)
    }
}

impl<'a> From<&'a String> for Source<'a> {
    fn from(text: &'a String) -> Self {
        Source::Text(text)
    }
}

impl<'a> From<&'a EnvSource> for Source<'a> {
    fn from(source: &'a EnvSource) -> Self {
        Source::Prepared(source)
    }
}

/// Whether and where an episode's trajectory is written.
pub enum Record {
    /// Not recorded.
    Off,
    /// Recorded in memory: [`Finished::trajectory`] hands the text back.
    Memory(RecordMeta),
    /// Recorded to a stream (a buffered file, usually), one line per call, flushed per line so
    /// that a killed process leaves every finished call readable.
    Stream(Box<dyn Write + Send>, RecordMeta),
}

impl Record {
    /// Recorded to `out`.
    pub fn to(out: impl Write + Send + 'static, meta: RecordMeta) -> Record {
        Record::Stream(Box::new(out), meta)
    }
}

/// What is left of a finished episode.
pub struct Finished {
    /// The trajectory's footer, when the episode was recorded.
    pub summary: Option<RecordSummary>,
    /// The trajectory's text, when it was recorded in memory.
    pub trajectory: Option<String>,
    /// The sandbox (`None` when the load failed), for a caller that hands it to the process's
    /// exit instead of dropping it.
    pub sandbox: Option<Sandbox>,
}

/// One episode of one environment: its sandbox, optionally recorded.
///
/// Calls take `&mut self` and run one at a time; move an episode into its own task to play
/// many at once. After a host limit the sandbox is dead ([`Episode::dead`]) and every further
/// call is refused with [`CallError::Dead`] (and recorded, as the sandbox refuses it).
pub struct Episode {
    /// The runtime the sandbox came from (forks are made by it).
    runtime: Runtime,
    sandbox: Result<Sandbox, CallError>,
    recording: Option<Recording>,
    load: Cost,
    spent: Spent,
    /// Fuel the episode may spend in all, its load included ([`Episode::limit_fuel`]).
    fuel_limit: Option<u64>,
}

impl std::fmt::Debug for Episode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Episode")
            .field("info", &self.info())
            .field("dead", &self.dead())
            .field("recorded", &self.recorded())
            .field("spent", &self.spent)
            .finish_non_exhaustive()
    }
}

impl Episode {
    /// Creates the sandbox and loads `source` into it, recording the load when `record` asks
    /// for it. A load that fails is not an error here: it is recorded, and [`Episode::info`]
    /// says why; every call then is refused. The only error is a trajectory that cannot be
    /// written (its header is written before the load runs).
    pub async fn start<'a>(
        runtime: &Runtime,
        source: impl Into<Source<'a>>,
        options: SandboxOptions,
        record: Record,
    ) -> io::Result<Episode> {
        let source = source.into();
        let recording = match record {
            Record::Off => None,
            Record::Memory(meta) => Some((meta, Sink::Memory(Vec::new()))),
            Record::Stream(out, meta) => Some((meta, Sink::Stream(out))),
        }
        .map(|(meta, sink)| Recording::start(runtime.limits(), source.text(), options, meta, sink))
        .transpose()?;
        let started = Instant::now();
        let sandbox = match source {
            Source::Text(text) => runtime.sandbox(text, options).await,
            Source::Prepared(prepared) => runtime.sandbox_from(prepared, options).await,
        };
        let time = started.elapsed();
        let load = match &sandbox {
            Ok(s) => Cost {
                fuel: s.last_fuel(),
                output: s.last_output().clone(),
                time,
            },
            Err(_) => Cost {
                time,
                ..Cost::default()
            },
        };
        let mut episode = Episode {
            runtime: runtime.clone(),
            sandbox,
            recording,
            load,
            spent: Spent::default(),
            fuel_limit: None,
        };
        if episode.sandbox.is_ok() {
            episode.spent.add(&episode.load);
        }
        if let Some(recording) = &mut episode.recording {
            let seen = episode.sandbox.as_ref().map(Sandbox::info);
            recording.load(episode.load.fuel, &episode.load.output, seen)?;
        }
        Ok(episode)
    }

    /// What `load` found (class name, `max_turns`, tool schemas), or why it failed.
    pub fn info(&self) -> Result<&EnvInfo, &CallError> {
        self.sandbox.as_ref().map(Sandbox::info)
    }

    /// What the load cost.
    pub fn load_cost(&self) -> &Cost {
        &self.load
    }

    /// What every call so far cost, the load included.
    pub fn spent(&self) -> &Spent {
        &self.spent
    }

    /// Why the sandbox is dead, if it is (`None` also when it never loaded).
    pub fn dead(&self) -> Option<ErrorKind> {
        self.sandbox.as_ref().ok().and_then(Sandbox::dead)
    }

    /// Whether the episode is recorded.
    pub fn recorded(&self) -> bool {
        self.recording.is_some()
    }

    /// The trajectory's header line as written (recorded episodes only).
    pub fn header_text(&self) -> Option<&str> {
        self.recording.as_ref().map(Recording::header_text)
    }

    /// The trajectory's last call line as written (recorded episodes only).
    pub fn last_line(&self) -> Option<&str> {
        self.recording.as_ref().map(Recording::last_line)
    }

    /// Limits the fuel the episode spends in all, its load included: once [`Episode::spent`]
    /// passes `limit`, every later call is refused with [`EpisodeError::FuelLimit`] without
    /// running (so it is not recorded either, and the trajectory replays as it is). The call
    /// that crosses the limit still runs to its end under the per-call fuel, so an episode
    /// spends at most `limit` plus one call's fuel. `None` (the default): no limit. A fork
    /// inherits what is left of it.
    pub fn limit_fuel(&mut self, limit: Option<u64>) {
        self.fuel_limit = limit;
    }

    /// The refusal of a call past the fuel limit, if the episode has spent it.
    fn over_fuel_limit<T>(&self) -> Option<Costed<T>> {
        let limit = self.fuel_limit?;
        let spent = self.spent.total_fuel;
        (spent > limit).then(|| Costed {
            result: Err(EpisodeError::FuelLimit { spent, limit }),
            cost: Cost::default(),
        })
    }

    /// The cost of the call that began at `started` (the sandbox's account of its last call),
    /// added to the totals.
    fn cost_since(&mut self, started: Instant) -> Cost {
        let sandbox = self
            .sandbox
            .as_ref()
            .expect("only a loaded sandbox runs calls");
        let cost = Cost {
            fuel: sandbox.last_fuel(),
            output: sandbox.last_output().clone(),
            time: started.elapsed(),
        };
        self.spent.add(&cost);
        cost
    }

    /// Calls `reset(seed=seed)` (or `reset()` when `seed` is `None`).
    pub async fn reset(&mut self, seed: Option<u64>) -> Costed<Reset> {
        self.reset_call(seed, None)
            .await
            .map(|(reset, _dropped)| reset)
    }

    /// Calls `reset(seed=seed, **passed)`, where `passed` are the `fields` that the
    /// environment's `reset` takes by keyword ([`Sandbox::reset_with`]). Returns the reset and
    /// the names of the fields it dropped; the trajectory keeps the fields and those names.
    pub async fn reset_with(
        &mut self,
        seed: Option<u64>,
        fields: &ExtraFields,
    ) -> Costed<(Reset, Vec<String>)> {
        self.reset_call(seed, Some(fields)).await
    }

    /// Calls `reset(seed=seed, difficulty=difficulty)` (a plain [`Episode::reset`] when
    /// `difficulty` is `None`), as RLVE's environments and fixed-env training take it. A reset
    /// whose environment dropped the field is [`EpisodeError::NoDifficulty`]: its problem is
    /// not at the difficulty asked for.
    pub async fn reset_at(&mut self, seed: Option<u64>, difficulty: Option<u64>) -> Costed<Reset> {
        let Some(difficulty) = difficulty else {
            return self.reset(seed).await;
        };
        let mut fields = serde_json::Map::new();
        fields.insert("difficulty".into(), difficulty.into());
        let fields = ExtraFields::from_map(&fields);
        let costed = self.reset_with(seed, &fields).await;
        costed.and_then(|(reset, dropped)| match dropped.is_empty() {
            true => Ok(reset),
            false => Err(EpisodeError::NoDifficulty),
        })
    }

    async fn reset_call(
        &mut self,
        seed: Option<u64>,
        fields: Option<&ExtraFields>,
    ) -> Costed<(Reset, Vec<String>)> {
        if let Some(refused) = self.over_fuel_limit() {
            return refused;
        }
        let started = Instant::now();
        let result = match (&mut self.sandbox, fields) {
            (Err(err), _) => return refused(err),
            (Ok(s), Some(fields)) => s.reset_with(seed, fields).await,
            (Ok(s), None) => s.reset(seed).await.map(|r| (r, Vec::new())),
        };
        let cost = self.cost_since(started);
        self.finish_call(result, cost, |rec, cost, seen| {
            rec.reset(seed, fields, cost.fuel, &cost.output, seen)
        })
    }

    /// Calls `step(action)`.
    pub async fn step(&mut self, action: &str) -> Costed<Step> {
        if let Some(refused) = self.over_fuel_limit() {
            return refused;
        }
        let started = Instant::now();
        let result = match &mut self.sandbox {
            Err(err) => return refused(err),
            Ok(s) => s.step(action).await,
        };
        let cost = self.cost_since(started);
        self.finish_call(result, cost, |rec, cost, seen| {
            rec.step(action, cost.fuel, &cost.output, seen)
        })
    }

    /// Calls `solution()`.
    pub async fn solution(&mut self) -> Costed<String> {
        if let Some(refused) = self.over_fuel_limit() {
            return refused;
        }
        let started = Instant::now();
        let result = match &mut self.sandbox {
            Err(err) => return refused(err),
            Ok(s) => s.solution().await,
        };
        let cost = self.cost_since(started);
        self.finish_call(result, cost, |rec, cost, seen| {
            rec.solution(cost.fuel, &cost.output, seen)
        })
    }

    /// Calls the environment's `close()`.
    pub async fn close(&mut self) -> Costed<()> {
        if let Some(refused) = self.over_fuel_limit() {
            return refused;
        }
        let started = Instant::now();
        let result = match &mut self.sandbox {
            Err(err) => return refused(err),
            Ok(s) => s.close().await,
        };
        let cost = self.cost_since(started);
        self.finish_call(result, cost, |rec, cost, seen| {
            rec.close(cost.fuel, &cost.output, seen)
        })
    }

    /// Records a call that ran and pairs its result with its cost.
    fn finish_call<T>(
        &mut self,
        result: Result<T, CallError>,
        cost: Cost,
        record: impl FnOnce(&mut Recording, &Cost, Result<&T, &CallError>) -> io::Result<()>,
    ) -> Costed<T> {
        if let Some(recording) = &mut self.recording
            && let Err(err) = record(recording, &cost, result.as_ref())
        {
            return Costed {
                result: Err(EpisodeError::Record(err)),
                cost,
            };
        }
        Costed {
            result: result.map_err(EpisodeError::Call),
            cost,
        }
    }

    /// Ends the episode: writes the trajectory's footer (when recorded) and hands back what is
    /// left. The environment's own `close()` is not called: call [`Episode::close`] first for
    /// that.
    pub fn finish(self) -> io::Result<Finished> {
        let (summary, trajectory) = match self.recording {
            None => (None, None),
            Some(recording) => {
                let (summary, sink) = recording.finish()?;
                let text = match sink {
                    Sink::Memory(bytes) => Some(
                        String::from_utf8(bytes)
                            .expect("trajectory lines are serialised from strings"),
                    ),
                    Sink::Stream(_) => None,
                };
                (Some(summary), text)
            }
        };
        Ok(Finished {
            summary,
            trajectory,
            sandbox: self.sandbox.ok(),
        })
    }
}

/// A call on an environment that never loaded: refused without running, neither recorded nor
/// costed.
fn refused<T>(load_error: &CallError) -> Costed<T> {
    let refusal = CallError::Usage(format!(
        "the environment failed to load ({}); nothing to call",
        load_error.kind()
    ));
    Costed {
        result: Err(refusal.into()),
        cost: Cost::default(),
    }
}
