//! `spade check`: decide whether a generated environment may enter training.
//!
//! Runs every probe of the SPADE reference's validation (class discovery; `reset(seed=42)`
//! returns a non-empty string and a dict; the probe steps `\boxed{1}`, `\boxed{test}`,
//! `\boxed{42}` return typed 5-tuples with rewards in [-10, 10]; `reset(seed=123)` works again),
//! then episodes that check seed use, reward hacking by random and garbage play, episode ends,
//! determinism, reset and step reproducibility ([`reproducible`]), the solution ([`solution`]),
//! fuel and output. Every finding that comes from an episode carries that episode's trajectory,
//! which `spade replay` reproduces. All choices are seeded: the same environment gives the same
//! report.

mod reproducible;
mod solution;

use std::collections::BTreeSet;

use serde::Serialize;
use spade_sandbox::EnvInfo;
use spade_sandbox::Runtime;
use spade_sandbox::{CallError, ErrorKind};

use crate::actions::{ActionGen, Style, parse_tools};
use crate::episode::{Episode, check_replay};
use crate::oracles::{Severity, Violation, call_failed, check_end, check_step, clip};

/// The code of a probe call refused because the check's fuel budget is spent: never reported
/// (the `validation_fuel` finding is).
const FUEL_REFUSED: &str = "fuel_refused";

/// What `check` runs.
#[derive(Debug, Clone)]
pub struct CheckOptions {
    /// Episodes per probe (solution play, garbage play, random play).
    pub seeds: u32,
    /// Steps per episode when the environment has no `max_turns`.
    pub max_steps: u32,
    /// Random (plausible) play winning at least this often is a warning.
    pub random_win_warning: f64,
    /// Fuel for the whole check, summed over every call of every episode. Past it the
    /// remaining probes are skipped and the environment is rejected (`validation_fuel`).
    /// `None`: no total (each call still has the runtime's per-call fuel). A fuel total keeps
    /// the verdict reproducible where a wall-clock budget would not.
    pub fuel_budget: Option<u64>,
    /// A solution must be seen to win when played, in every kind of game. Default `true`:
    /// an environment admitted for training whose `solution()` gives a wrong answer, or a plan
    /// that cannot be played, is a reward loophole (issue 52), so `spade check` and self-play's
    /// validation reject it. `false` (`spade check --lenient-solution`; `spade serve`, which
    /// plays what a client registers) keeps the older judgement: a solution that does not win
    /// is an error only in a single-answer game, a warning in a multi-turn one, where
    /// `solution()` may be a plan in words. See [`solution`] for what is decided how.
    pub require_winning_solution: bool,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            seeds: 5,
            max_steps: 30,
            random_win_warning: 0.5,
            fuel_budget: None,
            require_winning_solution: true,
        }
    }
}

/// One finding.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    /// Stable machine name: see the table in docs/check-and-fuzz.md.
    pub code: String,
    pub severity: Severity,
    pub message: String,
    /// The typed error behind the finding, if a call failed.
    pub kind: Option<ErrorKind>,
    /// The seed of the episode it came from.
    pub seed: Option<u64>,
    /// That episode's trajectory (JSON Lines), if it came from one.
    #[serde(skip)]
    pub trajectory: Option<String>,
    /// Where the caller saved the trajectory (filled in by the CLI).
    pub trajectory_file: Option<String>,
}

/// Numbers the probes measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct CheckStats {
    pub episodes: u64,
    pub steps: u64,
    /// Most fuel any call used, and the per-call budget.
    pub max_fuel: u64,
    pub fuel_budget: u64,
    /// Fuel of every call of the check, summed.
    pub total_fuel: u64,
    pub solution_wins: Option<String>,
    pub garbage_win_rate: Option<f64>,
    pub random_win_rate: Option<f64>,
    pub distinct_initial_observations: Option<u64>,
    /// Whether the env is single-answer by its behaviour (one action ended an episode on its
    /// first step), decided when a solution did not win; `None` when every solution won.
    pub single_answer: Option<bool>,
}

/// The verdict.
#[derive(Debug, Clone, Serialize)]
pub struct CheckReport {
    /// No error findings.
    pub accepted: bool,
    pub class_name: Option<String>,
    pub max_turns: Option<u32>,
    pub tool_use: bool,
    /// Probes that ran, in order.
    pub probes: Vec<String>,
    pub findings: Vec<Finding>,
    pub stats: CheckStats,
}

impl CheckReport {
    pub fn errors(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .count()
    }

    pub fn warnings(&self) -> usize {
        self.findings.len() - self.errors()
    }

    /// The codes of all findings, for tests.
    pub fn codes(&self) -> Vec<&str> {
        self.findings.iter().map(|f| f.code.as_str()).collect()
    }
}

struct Checker<'a> {
    runtime: &'a Runtime,
    source: &'a str,
    options: &'a CheckOptions,
    report: CheckReport,
    seen: BTreeSet<String>,
    /// Why the env is single-answer by its behaviour: the first action seen to end an episode
    /// on its first step. `None`: no such action yet.
    single_answer: Option<String>,
}

/// How an episode played.
struct Played {
    won: bool,
    failed: bool,
}

impl Checker<'_> {
    fn add(
        &mut self,
        severity: Severity,
        violation: Violation,
        seed: Option<u64>,
        trajectory: Option<&str>,
    ) {
        // One finding per code: the first (lowest seed) is the one to look at.
        if violation.code == FUEL_REFUSED || !self.seen.insert(violation.code.clone()) {
            return;
        }
        self.report.findings.push(Finding {
            code: violation.code,
            severity,
            message: violation.message,
            kind: violation.kind,
            seed,
            trajectory: trajectory.map(str::to_owned),
            trajectory_file: None,
        });
    }

    /// Records why the env is single-answer by its behaviour (the first reason counts).
    fn note_single_answer(&mut self, evidence: String) {
        self.single_answer.get_or_insert(evidence);
    }

    /// A probe's episode, limited to what is left of the check's fuel budget (so that the
    /// budget is checked before every call, not only between episodes).
    async fn probe(&self, seed: u64, purpose: &str) -> Episode {
        let left = self
            .options
            .fuel_budget
            .map(|budget| budget.saturating_sub(self.report.stats.total_fuel));
        Episode::probe(self.runtime, self.source, seed, purpose, left).await
    }

    fn failure(&mut self, code: &str, call: &str, err: &CallError) -> Violation {
        if crate::episode::fuel_refused(err) {
            // Not the environment's failure: the budget ran out mid-episode. `add` drops this
            // marker and `over_budget` reports the budget once the episode is accounted.
            return Violation::new(FUEL_REFUSED, err.to_string());
        }
        let mut v = call_failed(call, err);
        v.code = code.to_owned();
        v
    }

    fn account(&mut self, recording: &Episode, steps: u64) {
        let spent = recording.spent();
        self.report.stats.episodes += 1;
        self.report.stats.steps += steps;
        self.report.stats.max_fuel = self.report.stats.max_fuel.max(spent.max_fuel);
        self.report.stats.total_fuel = self
            .report
            .stats
            .total_fuel
            .saturating_add(spent.total_fuel);
    }

    /// Whether the check used up its total fuel; reports it (once) when it did.
    fn over_budget(&mut self) -> bool {
        let Some(budget) = self.options.fuel_budget else {
            return false;
        };
        let used = self.report.stats.total_fuel;
        if used <= budget {
            return false;
        }
        self.add(
            Severity::Error,
            Violation::new(
                "validation_fuel",
                format!(
                    "validation used {used} fuel, over its budget of {budget}: the environment \
                     is too slow to check (the remaining probes were skipped)"
                ),
            ),
            None,
            None,
        );
        true
    }

    fn finish_episode(&mut self, recording: Episode, steps: u64) -> (String, String) {
        self.account(&recording, steps);
        let dropped = recording.spent().dropped_bytes;
        let (text, hash) = recording.finish_probe();
        if dropped > 0 {
            self.add(
                Severity::Warning,
                Violation::new(
                    "output_truncated",
                    format!("the environment printed {dropped} bytes beyond the output cap"),
                ),
                None,
                Some(&text),
            );
        }
        (text, hash)
    }

    /// The reference's validation. Returns what `load` found when every probe passed.
    async fn reference_probes(&mut self) -> Option<EnvInfo> {
        const SEED: u64 = 42;
        self.report.probes.push("reference".to_owned());
        let mut recording = self.probe(SEED, "check:reference").await;
        let info = match recording.info() {
            Ok(info) => info.clone(),
            Err(err) => {
                let v = self.failure("load_failed", "load", &err.clone());
                let (text, _) = self.finish_episode(recording, 0);
                self.add(Severity::Error, v, Some(SEED), Some(&text));
                return None;
            }
        };
        self.report.class_name = Some(info.class_name.clone());
        self.report.max_turns = info.max_turns;
        self.report.tool_use = info.tools.is_some();
        let mut problem: Option<Violation> = None;
        let mut steps = 0;
        match recording.reset(Some(SEED)).await.sandboxed() {
            Err(err) => problem = Some(self.failure("reset_failed", "reset(seed=42)", &err)),
            Ok(reset) if reset.observation.trim().is_empty() => {
                problem = Some(Violation::new(
                    "empty_observation",
                    "reset(seed=42) returned an empty observation".to_owned(),
                ));
            }
            Ok(_) => {
                for action in [r"\boxed{1}", r"\boxed{test}", r"\boxed{42}"] {
                    steps += 1;
                    let result = recording.step(action).await.sandboxed();
                    if steps == 1
                        && let Ok(step) = &result
                        && (step.terminated || step.truncated)
                    {
                        self.note_single_answer(format!(
                            "the probe step {action} after reset(seed=42) ended the episode"
                        ));
                    }
                    match result {
                        Err(err) => {
                            problem = Some(self.failure(
                                "probe_step_failed",
                                &format!("step({action})"),
                                &err,
                            ));
                            break;
                        }
                        Ok(step) => {
                            if let Some(v) = check_step(&step) {
                                problem = Some(v);
                                break;
                            }
                        }
                    }
                }
                if problem.is_none()
                    && let Err(err) = recording.reset(Some(123)).await.sandboxed()
                {
                    problem = Some(self.failure("reset_again_failed", "reset(seed=123)", &err));
                }
            }
        }
        let (text, _) = self.finish_episode(recording, steps);
        match problem {
            Some(v) => {
                self.add(Severity::Error, v, Some(SEED), Some(&text));
                None
            }
            None => Some(info),
        }
    }

    /// Plays generated actions from `reset(seed)` until the episode ends or reaches
    /// `max_turns`. Returns the trajectory and its hash too.
    async fn generated_episode(
        &mut self,
        info: &EnvInfo,
        seed: u64,
        style: Style,
    ) -> (Played, String, String) {
        let mut played = Played {
            won: false,
            failed: false,
        };
        let purpose = match style {
            Style::Garbage => "check:garbage",
            _ => "check:random",
        };
        let mut recording = self.probe(seed, purpose).await;
        let mut generator = ActionGen::new(seed, parse_tools(info.tools.as_deref()));
        let limit = info.max_turns.unwrap_or(self.options.max_steps).min(200);
        let mut steps = 0u64;
        let mut problem: Option<Violation> = None;
        match recording.reset(Some(seed)).await.sandboxed() {
            Err(err) => problem = Some(self.failure("reset_failed", "reset", &err)),
            Ok(reset) => {
                let mut observation = reset.observation;
                let mut ended = false;
                while steps < u64::from(limit) {
                    let action = generator.next(&observation, style);
                    steps += 1;
                    match recording.step(&action).await.sandboxed() {
                        Err(err) => {
                            problem = Some(self.failure(
                                "step_failed",
                                &format!("step({})", clip(&action, 80)),
                                &err,
                            ));
                            break;
                        }
                        Ok(step) => {
                            if let Some(v) = check_step(&step) {
                                problem = Some(v);
                                break;
                            }
                            if step.terminated || step.truncated {
                                played.won = step.terminated && step.reward > 0.0;
                                ended = true;
                                if steps == 1 {
                                    self.note_single_answer(format!(
                                        "the {} action {:?} ended the episode of seed {seed} on \
                                         its first step",
                                        purpose.trim_start_matches("check:"),
                                        clip(&action, 80)
                                    ));
                                }
                                break;
                            }
                            observation = step.observation;
                        }
                    }
                }
                if problem.is_none() {
                    problem = check_end(info.max_turns, steps as usize, ended);
                }
            }
        }
        let (text, hash) = self.finish_episode(recording, steps);
        if let Some(v) = problem {
            played.failed = true;
            self.add(Severity::Error, v, Some(seed), Some(&text));
        }
        (played, text, hash)
    }

    /// Different seeds should give different initial observations.
    async fn seeds_probe(&mut self, n: u64) {
        let mut recording = self.probe(0, "check:seeds").await;
        let mut observations = BTreeSet::new();
        let mut problem = None;
        for seed in 0..n {
            match recording.reset(Some(seed)).await.sandboxed() {
                Ok(reset) => {
                    observations.insert(reset.observation);
                }
                Err(err) => {
                    problem =
                        Some(self.failure("reset_failed", &format!("reset(seed={seed})"), &err));
                    break;
                }
            }
        }
        let (text, _) = self.finish_episode(recording, 0);
        self.report.stats.distinct_initial_observations = Some(observations.len() as u64);
        if let Some(v) = problem {
            self.add(Severity::Error, v, None, Some(&text));
        } else if observations.len() == 1 {
            self.add(
                Severity::Warning,
                Violation::new(
                    "seed_ignored",
                    format!(
                        "reset(seed) gave the same initial observation for {n} different seeds"
                    ),
                ),
                None,
                Some(&text),
            );
        }
    }

    async fn run(&mut self) {
        let Some(info) = self.reference_probes().await else {
            return;
        };
        if self.over_budget() {
            return;
        }
        let n = u64::from(self.options.seeds.max(1));

        self.report.probes.push("seeds".to_owned());
        self.seeds_probe(n.max(2)).await;
        if self.over_budget() {
            return;
        }

        for (probe, style, base, code) in [
            ("garbage", Style::Garbage, 100, "garbage_wins"),
            ("random", Style::Plausible, 200, "random_wins"),
        ] {
            self.report.probes.push(probe.to_owned());
            let mut wins = 0u64;
            let mut first_win: Option<(u64, String)> = None;
            let mut played_n = 0u64;
            for i in 0..n {
                let seed = base + i;
                let (played, text, hash) = self.generated_episode(&info, seed, style).await;
                if self.over_budget() {
                    return;
                }
                played_n += 1;
                if played.won {
                    wins += 1;
                    first_win.get_or_insert((seed, text.clone()));
                }
                if i == 0 && !played.failed && style == Style::Plausible {
                    // The same seed and actions twice must give the same episode.
                    self.report.probes.push("determinism".to_owned());
                    if let Some(v) = check_replay(self.runtime, &text, &hash).await {
                        self.add(Severity::Error, v, Some(seed), Some(&text));
                    }
                }
                if played.failed {
                    break;
                }
            }
            let rate = wins as f64 / played_n as f64;
            let warn = if style == Style::Garbage {
                self.report.stats.garbage_win_rate = Some(rate);
                wins > 0
            } else {
                self.report.stats.random_win_rate = Some(rate);
                rate >= self.options.random_win_warning
            };
            if let Some((seed, text)) = first_win
                && warn
            {
                self.add(
                    Severity::Warning,
                    Violation::new(
                        code,
                        format!(
                            "{probe} play won {wins} of {played_n} episodes ({:.0}%): the reward may be hackable",
                            rate * 100.0
                        ),
                    ),
                    Some(seed),
                    Some(&text),
                );
            }
        }

        self.reproducibility_probes(&info).await;
        if self.over_budget() {
            return;
        }

        // Last: whether a solution that does not win is an error depends on whether any action
        // above ended an episode on its first step.
        self.report.probes.push("solution".to_owned());
        let mut wins = 0;
        for i in 0..n.max(2) {
            let played = self.solution_episode(&info, 1 + i).await;
            if self.over_budget() {
                return;
            }
            wins += u64::from(played.won);
            if played.failed {
                break;
            }
        }
        self.report.stats.solution_wins = Some(format!("{wins}/{}", n.max(2)));

        self.report.probes.push("fuel".to_owned());
        let budget = self.runtime.limits().fuel_per_call;
        self.report.stats.fuel_budget = budget;
        if self.report.stats.max_fuel > budget / 4 {
            self.add(
                Severity::Warning,
                Violation::new(
                    "fuel_high",
                    format!(
                        "a call used {} fuel, more than a quarter of the per-call budget {budget}",
                        self.report.stats.max_fuel
                    ),
                ),
                None,
                None,
            );
        }
    }
}

/// Checks `source` under `runtime`'s limits.
pub async fn check(runtime: &Runtime, source: &str, options: &CheckOptions) -> CheckReport {
    let mut checker = Checker {
        runtime,
        source,
        options,
        report: CheckReport {
            accepted: false,
            class_name: None,
            max_turns: None,
            tool_use: false,
            probes: Vec::new(),
            findings: Vec::new(),
            stats: CheckStats {
                fuel_budget: runtime.limits().fuel_per_call,
                ..CheckStats::default()
            },
        },
        seen: BTreeSet::new(),
        single_answer: None,
    };
    checker.run().await;
    // A probe whose call was refused for the budget may have stopped the run without a check.
    checker.over_budget();
    let mut report = checker.report;
    report.accepted = report.errors() == 0;
    report
}
