//! A fuzzing campaign: many seeded episodes of generated actions against one environment,
//! every oracle applied, failures kept as replayable trajectories, deduplicated by kind.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;
use spade_sandbox::Runtime;
use spade_sandbox::{CallError, ErrorKind};

use crate::actions::{ActionGen, Style, parse_tools};
use crate::episode::{Episode, check_replay};
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
}

/// Plays one fuzz episode: load, reset, generated actions until the episode ends (or
/// `max_turns`), then `solution`.
async fn episode(runtime: Runtime, source: Arc<str>, seed: u64, max_steps: u32) -> EpisodeResult {
    let mut recording = Episode::probe(&runtime, &source, seed, "fuzz").await;
    let mut violations = Vec::new();
    let mut steps = 0;
    let mut step_fuel = Vec::new();
    let info = recording.info().cloned().map_err(|e| e.clone());
    let class_name = info.as_ref().ok().map(|i| i.class_name.clone());
    match info {
        Err(err) => violations.push(call_failed("load", &err)),
        Ok(info) => {
            let mut generator = ActionGen::new(seed, parse_tools(info.tools.as_deref()));
            match recording.reset(Some(seed)).await.sandboxed() {
                Err(err) => violations.push(call_failed("reset", &err)),
                Ok(reset) => {
                    let mut observation = reset.observation;
                    let limit = info.max_turns.unwrap_or(max_steps).min(1000);
                    let mut ended = false;
                    let mut failed: Option<CallError> = None;
                    while steps < limit as u64 {
                        let action = generator.next(&observation, Style::Any);
                        steps += 1;
                        let step = recording.step(&action).await;
                        step_fuel.push(step.cost.fuel);
                        match step.sandboxed() {
                            Ok(step) => {
                                if let Some(v) = check_step(&step) {
                                    violations.push(v);
                                }
                                observation = step.observation;
                                if step.terminated || step.truncated {
                                    ended = true;
                                    break;
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
                        if let Err(err) = recording.solution().await.sandboxed() {
                            violations.push(call_failed("solution", &err));
                        }
                    }
                }
            }
        }
    }
    let max_fuel = recording.spent().max_fuel;
    let (trajectory, trace_sha256) = recording.finish_probe();
    EpisodeResult {
        violations,
        trajectory,
        trace_sha256,
        steps,
        step_fuel,
        max_fuel,
        class_name,
    }
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
        findings: Vec::new(),
    };
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
        // Each episode runs in its own task: a panic in the host is caught and reported.
        let task = tokio::spawn(episode(
            runtime.clone(),
            source.clone(),
            seed,
            options.max_steps,
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
            },
        };
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
    report.findings = findings.into_values().collect();
    report
        .findings
        .sort_by_key(|f| (f.episode, f.code.clone(), f.signature.clone()));
    report
}
