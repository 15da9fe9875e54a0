//! A fuzzing campaign: many seeded episodes of generated actions against one environment,
//! every oracle applied, failures kept as replayable trajectories, deduplicated by kind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use spade_sandbox::Runtime;
use spade_sandbox::{CallError, ErrorKind};

use super::novelty::{Seen, step_features};
use crate::actions::{ActionGen, Style, parse_tools};
use crate::episode::{Branch, Episode, check_replay};
use crate::oracles::{Violation, call_failed, check_end, check_fuel, check_step, median};
use crate::rng::derive_seed;

/// How long a campaign runs and what it checks.
#[derive(Debug, Clone)]
pub struct FuzzOptions {
    /// Master seed: episode `i` uses `derive_seed(seed, i)` for its sandbox, reset and actions.
    pub seed: u64,
    /// Stop after this many episodes (reproducible)...
    pub episodes: Option<u64>,
    /// ...or after this much wall-clock time (each episode is still reproducible on its own).
    pub time: Option<Duration>,
    /// A call using more than this many times the median step fuel is a finding.
    pub fuel_factor: u64,
    /// Replay every n-th clean episode (and every episode with a finding) to check that it
    /// reproduces its trace hash.
    pub replay_every: u64,
    /// Steps per episode when the environment has no `max_turns`.
    pub max_steps: u32,
    /// Snapshot fuzzing: keep a copy of every state that reached new behaviour
    /// ([`super::novelty`]), and start every other episode from one of them (chosen by the
    /// episode's seed) instead of from a reset.
    pub fork: bool,
}

impl Default for FuzzOptions {
    fn default() -> Self {
        FuzzOptions {
            seed: 0,
            episodes: Some(100),
            time: None,
            fuel_factor: 1000,
            replay_every: 10,
            max_steps: 30,
            fork: false,
        }
    }
}

/// A distinct failure, with the first episode that showed it.
#[derive(Debug, Clone, Serialize)]
pub struct FuzzFinding {
    pub code: String,
    pub kind: Option<ErrorKind>,
    pub signature: String,
    pub message: String,
    /// How many episodes showed it.
    pub count: u64,
    /// The first episode's index and seed.
    pub episode: u64,
    pub episode_seed: u64,
    /// That episode's trajectory (JSON Lines).
    #[serde(skip)]
    pub trajectory: String,
    /// The trajectory's trace hash, reproduced by a replay.
    pub trace_sha256: String,
}

/// What a campaign found.
#[derive(Debug, Clone, Serialize)]
pub struct FuzzReport {
    pub class_name: Option<String>,
    pub seed: u64,
    pub episodes: u64,
    pub steps: u64,
    pub replays: u64,
    pub median_step_fuel: u64,
    pub max_fuel: u64,
    /// Distinct features of call outcomes reached (observation shapes, rewards, error kinds,
    /// info key sets: [`super::novelty`]).
    pub states: u64,
    /// Episodes that started from a kept state (snapshot fuzzing).
    pub forked_episodes: u64,
    pub findings: Vec<FuzzFinding>,
}

/// Progress, for a progress bar.
#[derive(Debug, Clone, Copy)]
pub struct Progress {
    pub episodes: u64,
    pub steps: u64,
    pub findings: usize,
    pub elapsed: Duration,
}

/// An episode's outcome before deduplication.
struct EpisodeResult {
    violations: Vec<Violation>,
    trajectory: String,
    trace_sha256: String,
    steps: u64,
    step_fuel: Vec<u64>,
    max_fuel: u64,
    class_name: Option<String>,
    /// The states that reached new behaviour, kept for snapshot fuzzing.
    kept: Vec<Kept>,
}

/// A state snapshot fuzzing keeps: a live, unrecorded copy of an episode right after a step
/// that reached new behaviour, and the calls that reach it from a fresh sandbox (its seed, a
/// reset with that seed, the actions), which rebuild a finding's trajectory.
struct Kept {
    episode: Episode,
    seed: u64,
    actions: Vec<String>,
    observation: String,
}

/// The most states snapshot fuzzing keeps alive (the oldest goes first): each is a live
/// sandbox, a few MiB.
pub const MAX_KEPT_STATES: usize = 64;

/// Where an episode starts: a reset of a fresh sandbox, or a copy of a kept state.
enum Start {
    Reset,
    From(Box<Kept>),
}

/// What an episode did, to rebuild its trajectory from a fresh sandbox.
struct Calls {
    /// The sandbox's and the reset's seed.
    seed: u64,
    actions: Vec<String>,
    solution: bool,
}

/// Plays one fuzz episode: from a fresh sandbox, load and reset, or from a copy of a kept
/// state; generated actions (seeded with `seed`) until the episode ends (or `max_turns`), then
/// `solution`. Every step's features are noted in `seen`; with `keep`, a copy of the state
/// after each step that reached new behaviour is kept.
async fn episode(
    runtime: Runtime,
    source: Arc<str>,
    seed: u64,
    max_steps: u32,
    start: Start,
    seen: Arc<std::sync::Mutex<Seen>>,
    keep: bool,
) -> EpisodeResult {
    let (mut recording, mut calls, mut observation) = match start {
        Start::Reset => {
            let calls = Calls {
                seed,
                actions: Vec::new(),
                solution: false,
            };
            (
                Episode::probe(&runtime, &source, seed, "fuzz", None).await,
                calls,
                None,
            )
        }
        Start::From(kept) => {
            let kept = *kept;
            let calls = Calls {
                seed: kept.seed,
                actions: kept.actions,
                solution: false,
            };
            (kept.episode, calls, Some(kept.observation))
        }
    };
    let forked = observation.is_some();
    let mut violations = Vec::new();
    let mut steps = calls.actions.len() as u64;
    let mut step_fuel = Vec::new();
    let mut kept = Vec::new();
    let info = recording.info().cloned().map_err(|e| e.clone());
    let class_name = info.as_ref().ok().map(|i| i.class_name.clone());
    match info {
        Err(err) => violations.push(call_failed("load", &err)),
        Ok(info) => {
            let mut generator = ActionGen::new(seed, parse_tools(info.tools.as_deref()));
            if observation.is_none() {
                match recording.reset(Some(seed)).await.sandboxed() {
                    Err(err) => violations.push(call_failed("reset", &err)),
                    Ok(reset) => observation = Some(reset.observation),
                }
            }
            if let Some(mut observation) = observation {
                let limit = info.max_turns.unwrap_or(max_steps).min(1000);
                let mut ended = false;
                let mut failed: Option<CallError> = None;
                while steps < limit as u64 {
                    let action = generator.next(&observation, Style::Any);
                    steps += 1;
                    let step = recording.step(&action).await;
                    calls.actions.push(action);
                    step_fuel.push(step.cost.fuel);
                    let step = step.sandboxed();
                    let new = seen.lock().expect("seen lock").note(&step_features(&step));
                    match step {
                        Ok(step) => {
                            if let Some(v) = check_step(&step) {
                                violations.push(v);
                            }
                            observation = step.observation;
                            if step.terminated || step.truncated {
                                ended = true;
                                break;
                            }
                            if keep
                                && new
                                && let Ok(copy) = recording.fork(Branch::exact()).await.result
                            {
                                kept.push(Kept {
                                    episode: copy,
                                    seed: calls.seed,
                                    actions: calls.actions.clone(),
                                    observation: observation.clone(),
                                });
                            }
                        }
                        Err(err) => {
                            violations.push(call_failed("step", &err));
                            failed = Some(err);
                            break;
                        }
                    }
                }
                if failed.is_none() {
                    if let Some(v) = check_end(info.max_turns, steps as usize, ended) {
                        violations.push(v);
                    }
                    calls.solution = true;
                    if let Err(err) = recording.solution().await.sandboxed() {
                        violations.push(call_failed("solution", &err));
                    }
                }
            }
        }
    }
    let max_fuel = recording.spent().max_fuel;
    let (trajectory, trace_sha256) = match forked {
        false => recording.finish_probe(),
        // A copy is not recorded: a finding's trajectory is rebuilt from a fresh sandbox.
        true if violations.is_empty() => (String::new(), String::new()),
        true => rebuild(&runtime, &source, &calls).await,
    };
    EpisodeResult {
        violations,
        trajectory,
        trace_sha256,
        steps,
        step_fuel,
        max_fuel,
        class_name,
        kept,
    }
}

/// The trajectory of `calls` played from a fresh sandbox (the same calls give the same lines:
/// a copy continues exactly where its state was reached), and its trace hash.
async fn rebuild(runtime: &Runtime, source: &str, calls: &Calls) -> (String, String) {
    let mut recording = Episode::probe(runtime, source, calls.seed, "fuzz", None).await;
    let _ = recording.reset(Some(calls.seed)).await;
    for action in &calls.actions {
        if recording.step(action).await.result.is_err() {
            break;
        }
    }
    if calls.solution {
        let _ = recording.solution().await;
    }
    recording.finish_probe()
}

/// A copy of a kept state chosen by `seed`, or a reset when none is kept (or the copy
/// cannot be made: that state is dropped).
async fn from_corpus(corpus: &mut std::collections::VecDeque<Kept>, seed: u64) -> Start {
    while !corpus.is_empty() {
        let pick = (derive_seed(seed, 1) % corpus.len() as u64) as usize;
        let kept = &mut corpus[pick];
        if let Ok(copy) = kept.episode.fork(Branch::exact()).await.result {
            return Start::From(Box::new(Kept {
                episode: copy,
                seed: kept.seed,
                actions: kept.actions.clone(),
                observation: kept.observation.clone(),
            }));
        }
        corpus.remove(pick);
    }
    Start::Reset
}

/// Runs a campaign against `source`. `on_progress` is called after every episode.
pub async fn fuzz(
    runtime: &Runtime,
    source: &str,
    options: &FuzzOptions,
    on_progress: &mut dyn FnMut(Progress),
) -> FuzzReport {
    let started = Instant::now();
    let source: Arc<str> = Arc::from(source);
    let mut findings: BTreeMap<(String, String), FuzzFinding> = BTreeMap::new();
    let mut all_fuel: Vec<u64> = Vec::new();
    let mut report = FuzzReport {
        class_name: None,
        seed: options.seed,
        episodes: 0,
        steps: 0,
        replays: 0,
        median_step_fuel: 0,
        max_fuel: 0,
        states: 0,
        forked_episodes: 0,
        findings: Vec::new(),
    };
    let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
    let mut corpus: std::collections::VecDeque<Kept> = std::collections::VecDeque::new();
    let mut index = 0u64;
    loop {
        if let Some(n) = options.episodes
            && index >= n
        {
            break;
        }
        if let Some(t) = options.time
            && started.elapsed() >= t
        {
            break;
        }
        if options.episodes.is_none() && options.time.is_none() && index >= 100 {
            break;
        }
        let seed = derive_seed(options.seed, index) & 0xffff_ffff;
        let start = match options.fork && index % 2 == 1 {
            true => from_corpus(&mut corpus, seed).await,
            false => Start::Reset,
        };
        if matches!(start, Start::From(_)) {
            report.forked_episodes += 1;
        }
        // Each episode runs in its own task: a panic in the host is caught and reported.
        let task = tokio::spawn(episode(
            runtime.clone(),
            source.clone(),
            seed,
            options.max_steps,
            start,
            seen.clone(),
            options.fork,
        ));
        let mut result = match task.await {
            Ok(result) => result,
            Err(err) => EpisodeResult {
                violations: vec![Violation::new(
                    "host_panic",
                    format!("the host panicked while running episode {index}: {err}"),
                )],
                trajectory: String::new(),
                trace_sha256: String::new(),
                steps: 0,
                step_fuel: Vec::new(),
                max_fuel: 0,
                class_name: None,
                kept: Vec::new(),
            },
        };
        for kept in std::mem::take(&mut result.kept) {
            if corpus.len() >= MAX_KEPT_STATES {
                corpus.pop_front();
            }
            corpus.push_back(kept);
        }
        report.episodes += 1;
        report.steps += result.steps;
        report.max_fuel = report.max_fuel.max(result.max_fuel);
        if report.class_name.is_none() {
            report.class_name = result.class_name.clone();
        }
        // Fuel outliers are judged against the median of the steps before this episode.
        if all_fuel.len() >= 20 {
            let m = median(&all_fuel);
            if let Some(&worst) = result.step_fuel.iter().max()
                && let Some(v) = check_fuel(worst, m, options.fuel_factor)
            {
                result.violations.push(v);
            }
        }
        if all_fuel.len() < 100_000 {
            all_fuel.extend(&result.step_fuel);
        }
        let load_failed = result
            .violations
            .iter()
            .any(|v| v.kind == Some(ErrorKind::Load));
        let replay_due = !result.trajectory.is_empty()
            && (!result.violations.is_empty()
                || (options.replay_every > 0 && index.is_multiple_of(options.replay_every)));
        if replay_due {
            report.replays += 1;
            if let Some(v) = check_replay(runtime, &result.trajectory, &result.trace_sha256).await {
                result.violations.push(v);
            }
        }
        for v in result.violations {
            let key = (v.code.clone(), v.signature.clone());
            findings
                .entry(key)
                .and_modify(|f| f.count += 1)
                .or_insert_with(|| FuzzFinding {
                    code: v.code,
                    kind: v.kind,
                    signature: v.signature,
                    message: v.message,
                    count: 1,
                    episode: index,
                    episode_seed: seed,
                    trajectory: result.trajectory.clone(),
                    trace_sha256: result.trace_sha256.clone(),
                });
        }
        index += 1;
        on_progress(Progress {
            episodes: report.episodes,
            steps: report.steps,
            findings: findings.len(),
            elapsed: started.elapsed(),
        });
        if load_failed {
            break; // every episode would fail the same way
        }
    }
    report.median_step_fuel = median(&all_fuel);
    report.states = seen.lock().expect("seen lock").len() as u64;
    report.findings = findings.into_values().collect();
    report
        .findings
        .sort_by_key(|f| (f.episode, f.code.clone(), f.signature.clone()));
    report
}
