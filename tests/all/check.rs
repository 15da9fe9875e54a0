//! `spade check`: accepts the good fixtures, rejects faulty ones with the right finding codes,
//! warns about reward hacks, and every finding's trajectory replays.

use serde_json::Value;
use spade_envtools::Severity;
use spade_envtools::check::{CheckOptions, CheckReport, check};
use spade_envtools::trajectory::{ReplayOptions, Trajectory, replay};
use spade_sandbox::{ErrorKind, Runtime};

use crate::common::{env_dir, env_source, runtime, spade, stdout};

/// The test runtime with a smaller fuel budget, so that an endless loop ends quickly.
fn check_runtime() -> Runtime {
    let runtime = runtime();
    let mut limits = runtime.limits().clone();
    limits.fuel_per_call = 300_000_000;
    runtime.with_limits(limits)
}

async fn check_fixture(name: &str) -> CheckReport {
    check(
        &check_runtime(),
        &env_source(name),
        &CheckOptions::default(),
    )
    .await
}

#[tokio::test]
async fn accepts_the_good_fixtures_without_findings() {
    for name in [
        "arithmetic_puzzle",
        "grid_walk",
        "tool_inventory",
        "fraction_answer",
    ] {
        let report = check_fixture(name).await;
        assert!(report.accepted, "{name}: {:#?}", report.findings);
        assert!(report.findings.is_empty(), "{name}: {:#?}", report.findings);
        for probe in [
            "reference",
            "solution",
            "seeds",
            "garbage",
            "random",
            "determinism",
        ] {
            assert!(
                report.probes.iter().any(|p| p == probe),
                "{name}: {probe} did not run"
            );
        }
        assert!(report.stats.max_fuel > 0 && report.stats.max_fuel < report.stats.fuel_budget);
    }
}

#[tokio::test]
async fn rejects_faulty_fixtures_with_the_right_codes() {
    let table: &[(&str, &str, Option<ErrorKind>)] = &[
        ("fault_syntax_error", "load_failed", Some(ErrorKind::Load)),
        ("fault_no_env_class", "load_failed", Some(ErrorKind::Load)),
        (
            "fault_two_env_classes",
            "load_failed",
            Some(ErrorKind::Load),
        ),
        ("fault_import_numpy", "load_failed", Some(ErrorKind::Load)),
        (
            "fault_reset_raises",
            "reset_failed",
            Some(ErrorKind::Exception),
        ),
        (
            "fault_step_four_tuple",
            "probe_step_failed",
            Some(ErrorKind::Contract),
        ),
        (
            "fault_nan_reward",
            "probe_step_failed",
            Some(ErrorKind::Contract),
        ),
        (
            "fault_info_not_dict",
            "reset_failed",
            Some(ErrorKind::Contract),
        ),
        (
            "fault_self_reference",
            "probe_step_failed",
            Some(ErrorKind::Contract),
        ),
        (
            "fault_open_passwd",
            "probe_step_failed",
            Some(ErrorKind::Exception),
        ),
        (
            "fault_infinite_loop",
            "probe_step_failed",
            Some(ErrorKind::OutOfFuel),
        ),
        (
            "fault_solution_not_str",
            "solution_failed",
            Some(ErrorKind::Contract),
        ),
        ("never_ends", "no_end", None),
        ("brace_crash", "step_failed", Some(ErrorKind::Exception)),
    ];
    let mut failures = Vec::new();
    for (name, code, kind) in table {
        let report = check_fixture(name).await;
        let finding = report.findings.iter().find(|f| f.code == *code);
        match finding {
            _ if report.accepted => {
                failures.push(format!("{name}: accepted: {:?}", report.codes()))
            }
            None => failures.push(format!("{name}: no {code} finding: {:?}", report.codes())),
            Some(f) if f.kind != *kind || f.severity != Severity::Error => failures.push(format!(
                "{name}: {code} has kind {:?}, severity {:?}",
                f.kind, f.severity
            )),
            Some(f) if f.trajectory.is_none() => {
                failures.push(format!("{name}: {code} has no trajectory"))
            }
            Some(_) => {}
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn warns_when_garbage_wins() {
    let report = check_fixture("reward_hack").await;
    assert!(
        report.accepted,
        "warnings do not reject: {:?}",
        report.codes()
    );
    let finding = report
        .findings
        .iter()
        .find(|f| f.code == "garbage_wins")
        .unwrap_or_else(|| panic!("no garbage_wins warning: {:?}", report.codes()));
    assert_eq!(finding.severity, Severity::Warning);
    assert!(
        finding.message.contains("5 of 5 episodes (100%)"),
        "{}",
        finding.message
    );
    assert_eq!(report.stats.garbage_win_rate, Some(1.0));
}

#[tokio::test]
async fn findings_replay_identically_and_reports_are_deterministic() {
    let first = check_fixture("brace_crash").await;
    let second = check_fixture("brace_crash").await;
    assert_eq!(
        serde_json::to_string(&first).unwrap(),
        serde_json::to_string(&second).unwrap()
    );
    for finding in &first.findings {
        let text = finding.trajectory.as_deref().unwrap();
        let trajectory = Trajectory::parse(text).unwrap();
        trajectory.verify().unwrap();
        let report = replay(&check_runtime(), &trajectory, &ReplayOptions::default())
            .await
            .unwrap();
        assert_eq!(report.divergence, None, "{}", finding.code);
    }
}

#[test]
fn cli_accepts_with_json_and_rejects_with_replayable_files() {
    let env = env_dir("arithmetic_puzzle").join("env.py");
    let output = spade(&["check", env.to_str().unwrap(), "--json", "--seeds", "2"]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(json["accepted"], true);
    assert_eq!(json["class_name"], "ArithmeticPuzzleEnv");
    for key in ["max_turns", "tool_use", "probes", "findings", "stats"] {
        assert!(json.get(key).is_some(), "--json lacks {key}");
    }

    let dir = tempfile::tempdir().unwrap();
    let env = env_dir("fault_nan_reward").join("env.py");
    let out = dir.path().join("findings");
    let output = spade(&[
        "check",
        env.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    let text = stdout(&output);
    assert!(text.starts_with("REJECT"), "{text}");
    assert!(text.contains("error [probe_step_failed]"), "{text}");
    let file = out.join("probe_step_failed.jsonl");
    assert!(
        text.contains(&format!("spade replay {}", file.display())),
        "{text}"
    );
    let output = spade(&["replay", file.to_str().unwrap()]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout(&output).starts_with("identical"));
}

#[tokio::test]
async fn a_total_fuel_budget_rejects_deterministically() {
    let runtime = check_runtime();
    let source = env_source("grid_walk");
    let full = check(&runtime, &source, &CheckOptions::default()).await;
    let total = full.stats.total_fuel;
    assert!(
        full.accepted && total > full.stats.max_fuel,
        "{:?}",
        full.stats
    );
    let again = check(&runtime, &source, &CheckOptions::default()).await;
    assert_eq!(again.stats.total_fuel, total, "fuel is deterministic");
    let enough = CheckOptions {
        fuel_budget: Some(total),
        ..CheckOptions::default()
    };
    assert!(check(&runtime, &source, &enough).await.accepted);
    let short = CheckOptions {
        fuel_budget: Some(total / 3),
        ..CheckOptions::default()
    };
    let report = check(&runtime, &source, &short).await;
    assert!(!report.accepted);
    assert_eq!(report.codes(), vec!["validation_fuel"]);
    let msg = &report.findings[0].message;
    assert!(
        msg.starts_with("validation used ")
            && msg.contains(&format!("over its budget of {}", total / 3))
            && msg.ends_with("(the remaining probes were skipped)"),
        "{msg}"
    );
    assert!(report.stats.total_fuel < total, "probes stopped early");
    let output = spade(&[
        "check",
        env_dir("grid_walk").join("env.py").to_str().unwrap(),
        "--total-fuel",
        "1000",
        "--out",
        tempfile::tempdir().unwrap().path().to_str().unwrap(),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stdout(&output).contains("error [validation_fuel] validation used "),
        "{}",
        stdout(&output)
    );
}

/// Issue 53/10: the total fuel budget was checked only between episodes, so one check used 37x
/// its budget. Every step here burns about a tenth of a call's fuel for 30 turns; with a budget
/// of about two steps the check stops within the step that crosses it: it spends at most the
/// budget plus one call's fuel (and the first episode's load), not an episode's 30 steps.
#[tokio::test]
async fn the_total_fuel_budget_is_checked_before_every_call() {
    let runtime = check_runtime();
    let source = "class SlowEnv:\n    def __init__(self, max_turns=30):\n        self.max_turns = max_turns\n\n    def reset(self, seed=None):\n        self.turns = 0\n        return 'Say anything.', {}\n\n    def step(self, action):\n        n = 0\n        for i in range(40000):\n            n += i\n        self.turns += 1\n        return 'again', 0.0, False, self.turns >= self.max_turns, {}\n\n    def solution(self):\n        return 'x'\n";
    let unbounded = check(
        &runtime,
        source,
        &CheckOptions {
            seeds: 1,
            ..CheckOptions::default()
        },
    )
    .await;
    let step = unbounded.stats.max_fuel;
    assert!(step > 0, "{:?}", unbounded.stats);
    let budget = 2 * step;
    let options = CheckOptions {
        seeds: 1,
        fuel_budget: Some(budget),
        ..CheckOptions::default()
    };
    let report = check(&runtime, source, &options).await;
    assert_eq!(
        report.codes(),
        vec!["validation_fuel"],
        "{:?}",
        report.findings
    );
    assert!(!report.accepted);
    let per_call = runtime.limits().fuel_per_call;
    assert!(
        report.stats.total_fuel <= budget + per_call.min(2 * step),
        "the check spent {} fuel on a budget of {budget} (one step: {step})",
        report.stats.total_fuel
    );
    let message = &report.findings[0].message;
    assert!(
        message.starts_with("validation used ")
            && message.contains(&format!("over its budget of {budget}")),
        "{message}"
    );
}

/// A fixture's verdict, written by hand from what the fixture plants (see its docstring).
struct Verdict {
    name: &'static str,
    accepted: bool,
    errors: &'static [&'static str],
    warnings: &'static [&'static str],
    /// `(code, text)`: the finding's message contains the text.
    says: &'static [(&'static str, &'static str)],
}

const VERDICTS: &[Verdict] = &[
    // A solution must win when played (require_winning_solution, the default): a short plan
    // in words is played as one answer and rejected. `--lenient-solution` keeps the older
    // warning (the_lenient_judgement_keeps_a_plan_in_words_as_a_warning).
    Verdict {
        name: "plan_in_words",
        accepted: false,
        errors: &["solution_does_not_win"],
        warnings: &[],
        says: &[(
            "solution_does_not_win",
            "solution() returned \"Toggle each lamp that is off, one per turn, from left to \
             right.\"; played as 1 action in the env's action format it did not end the \
             episode (seed 1). A solution must win when played (require_winning_solution): \
             return the answer, or in a multi-turn env the winning actions (one \\boxed{...} \
             or <tool_call>/<answer> element per step)",
        )],
    },
    Verdict {
        name: "wrong_single_answer",
        accepted: false,
        errors: &["solution_does_not_win"],
        warnings: &[],
        says: &[(
            "solution_does_not_win",
            "it ended without a win (seed 1). The env is single-answer by its behaviour (the \
             probe step \\boxed{1} after reset(seed=42) ended the episode), so its solution \
             must win",
        )],
    },
    Verdict {
        name: "reset_keeps_history",
        accepted: false,
        errors: &["reset_not_reproducible"],
        warnings: &[],
        says: &[(
            "reset_not_reproducible",
            "reset(seed=300) after other episodes in the same instance gave a different \
             observation than the first reset(seed=300): first \"Type the word apple reversed, \
             as \\\\boxed{...}.\", then \"Type the word cherry reversed, as \\\\boxed{...}.\". \
             State survives reset",
        )],
    },
    Verdict {
        name: "reset_init_random",
        accepted: false,
        errors: &["reset_not_reproducible"],
        warnings: &[],
        says: &[(
            "reset_not_reproducible",
            "reset(seed=300) in a new instance (sandbox seed 301) gave a different observation \
             than in the first instance (sandbox seed 300): first \"What is ",
        )],
    },
    Verdict {
        name: "step_keeps_history",
        accepted: false,
        errors: &["step_not_reproducible"],
        warnings: &[],
        says: &[
            (
                "step_not_reproducible",
                "after reset(seed=300) again, step 1 (",
            ),
            (
                "step_not_reproducible",
                "gave a different observation than the same step",
            ),
            ("step_not_reproducible", "(move 1).\", then \""),
        ],
    },
    Verdict {
        name: "empty_observation",
        accepted: false,
        errors: &["empty_observation"],
        warnings: &[],
        says: &[(
            "empty_observation",
            "reset(seed=42) returned an empty observation",
        )],
    },
    Verdict {
        name: "reward_too_large",
        accepted: false,
        errors: &["reward_out_of_range"],
        warnings: &[],
        says: &[(
            "reward_out_of_range",
            "step returned reward 100 outside [-10, 10]",
        )],
    },
    Verdict {
        name: "reset_once",
        accepted: false,
        errors: &["reset_again_failed"],
        warnings: &[],
        says: &[
            (
                "reset_again_failed",
                "reset(seed=123) failed with exception",
            ),
            ("reset_again_failed", "IndexError: pop from empty list"),
        ],
    },
    Verdict {
        name: "same_task_every_seed",
        accepted: true,
        errors: &[],
        warnings: &["seed_ignored"],
        says: &[(
            "seed_ignored",
            "reset(seed) gave the same initial observation for 5 different seeds",
        )],
    },
    Verdict {
        name: "echo_word",
        accepted: true,
        errors: &[],
        warnings: &["random_wins"],
        says: &[("random_wins", "random play won ")],
    },
    Verdict {
        name: "slow_solution",
        accepted: true,
        errors: &[],
        warnings: &["fuel_high"],
        says: &[(
            "fuel_high",
            "more than a quarter of the per-call budget 300000000",
        )],
    },
    Verdict {
        name: "chatty_solution",
        accepted: true,
        errors: &[],
        warnings: &["output_truncated"],
        says: &[("output_truncated", "bytes beyond the output cap")],
    },
    Verdict {
        name: "code_answer",
        accepted: true,
        errors: &[],
        warnings: &[],
        says: &[],
    },
];

fn codes_of(report: &CheckReport, severity: Severity) -> Vec<&str> {
    let mut codes: Vec<&str> = report
        .findings
        .iter()
        .filter(|f| f.severity == severity)
        .map(|f| f.code.as_str())
        .collect();
    codes.sort_unstable();
    codes
}

#[tokio::test]
async fn fixtures_written_for_each_finding_get_their_verdict() {
    let mut failures = Vec::new();
    for v in VERDICTS {
        let report = check_fixture(v.name).await;
        let got = (
            report.accepted,
            codes_of(&report, Severity::Error),
            codes_of(&report, Severity::Warning),
        );
        if got != (v.accepted, v.errors.to_vec(), v.warnings.to_vec()) {
            failures.push(format!("{}: got {got:?}: {:#?}", v.name, report.findings));
            continue;
        }
        for (code, text) in v.says {
            let message = &report
                .findings
                .iter()
                .find(|f| f.code == *code)
                .unwrap()
                .message;
            if !message.contains(text) {
                failures.push(format!("{}: {code} lacks {text:?}:\n{message}", v.name));
            }
        }
        for finding in &report.findings {
            let Some(text) = &finding.trajectory else {
                continue;
            };
            let trajectory = Trajectory::parse(text).unwrap();
            let replayed = replay(&check_runtime(), &trajectory, &ReplayOptions::default())
                .await
                .unwrap();
            if replayed.divergence.is_some() {
                failures.push(format!("{}: {} does not replay", v.name, finding.code));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[tokio::test]
async fn the_new_probes_run_and_pass_on_the_good_fixtures() {
    let report = check_fixture("grid_walk").await;
    for probe in ["reset_reproducibility", "step_reproducibility"] {
        assert!(
            report.probes.iter().any(|p| p == probe),
            "{probe}: {:?}",
            report.probes
        );
    }
    assert!(report.findings.is_empty(), "{:#?}", report.findings);
}

/// `nondeterministic` (a fresh sandbox replaying the same seed and actions gets another
/// trace) cannot come from an environment: the sandbox makes every call a function of the seed
/// and the calls before it (see `determinism`). Its oracle is checked on an episode whose
/// recorded result was changed, which is what a nondeterministic run would have recorded.
#[tokio::test]
async fn the_nondeterminism_oracle_reports_a_diverging_replay() {
    use spade_envtools::trajectory::RecordMeta;
    use spade_envtools::{Episode, Record, check_replay};
    let runtime = check_runtime();
    let source = env_source("arithmetic_puzzle");
    let options = spade_sandbox::SandboxOptions::seeded(5);
    let record = Record::Memory(RecordMeta::default());
    let mut recording = Episode::start(&runtime, &source, options, record)
        .await
        .unwrap();
    recording.reset(Some(5)).await.result.unwrap();
    recording.step("\\boxed{0}").await.result.unwrap();
    let finished = recording.finish().unwrap();
    let hash = finished.summary.unwrap().trace_sha256;
    let text = finished.trajectory.unwrap();
    assert_eq!(check_replay(&runtime, &text, &hash).await, None);
    let changed = text.replacen("\"reward\":0.0", "\"reward\":0.5", 1);
    assert_ne!(changed, text);
    let v = check_replay(&runtime, &changed, &hash).await.unwrap();
    assert_eq!(v.code, "nondeterministic");
    assert!(
        v.message.starts_with("replaying the episode diverged at "),
        "{}",
        v.message
    );
}

/// Codes of the `spade check` table in docs/check-and-fuzz.md.
fn documented_check_codes() -> Vec<String> {
    let page = std::fs::read_to_string(
        crate::common::repo_root()
            .join("docs")
            .join("check-and-fuzz.md"),
    )
    .unwrap();
    let table = page
        .split("## `spade check`")
        .nth(1)
        .unwrap()
        .split("\n\n")
        .find(|block| block.starts_with("| probe |"))
        .expect("the check table");
    let mut codes = Vec::new();
    for row in table.lines().skip(2) {
        let column = row.split(" | ").nth(1).unwrap_or("");
        for (i, piece) in column.split('`').enumerate() {
            if i % 2 == 1 && piece.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                codes.push(piece.to_owned());
            }
        }
    }
    codes
}

#[test]
fn every_documented_finding_code_has_a_fixture_with_a_verdict() {
    // Fixtures of the older tests above, each with the code it is rejected with.
    let older = [
        "load_failed",
        "reset_failed",
        "probe_step_failed",
        "solution_failed",
        "no_end",
        "step_failed",
        "garbage_wins",
        // grid_walk under --total-fuel (a_total_fuel_budget_rejects_deterministically).
        "validation_fuel",
        // An oracle test: no environment can be nondeterministic in the sandbox.
        "nondeterministic",
        // The kind of a `*_failed` finding (fault_infinite_loop's probe_step_failed).
        "out_of_fuel",
        // tests/solutions/plan_in_lines.py (a_plan_in_lines_cannot_be_played_and_is_rejected).
        "solution_plan_does_not_win",
    ];
    let covered: Vec<&str> = VERDICTS
        .iter()
        .flat_map(|v| v.errors.iter().chain(v.warnings))
        .copied()
        .chain(older)
        .collect();
    let codes = documented_check_codes();
    assert!(codes.len() >= 20, "{codes:?}");
    let missing: Vec<&String> = codes
        .iter()
        .filter(|c| !covered.contains(&c.as_str()))
        .collect();
    assert!(missing.is_empty(), "codes without a fixture: {missing:?}");
}

/// `spade check` from `dir` as the current directory.
fn check_in(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_spade"))
        .arg("check")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn without_out_trajectories_go_to_a_git_ignored_folder_and_it_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let git = |args: &[&str]| {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir.path())
            .output()
            .expect("git is needed for this test");
        assert!(out.status.success(), "git {args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    git(&["init", "-q"]);
    let good = env_dir("arithmetic_puzzle").join("env.py");
    let output = check_in(dir.path(), &[good.to_str().unwrap(), "--seeds", "2"]);
    assert_eq!(output.status.code(), Some(0));
    assert!(
        !dir.path().join(".spade").exists(),
        "no findings, no folder"
    );

    let bad = env_dir("fault_nan_reward").join("env.py");
    let findings = dir.path().join(".spade/check/fault_nan_reward");
    std::fs::create_dir_all(&findings).unwrap();
    std::fs::write(findings.join("stale_code.jsonl"), "old").unwrap();
    std::fs::write(findings.join("notes.txt"), "mine").unwrap();
    let output = check_in(dir.path(), &[bad.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains(
            "trajectories of the findings are in .spade/check/fault_nan_reward/ (replay one with \
             `spade replay FILE`)"
        ),
        "{err}"
    );
    assert!(
        stdout(&output)
            .contains("replay: spade replay .spade/check/fault_nan_reward/probe_step_failed.jsonl"),
        "{}",
        stdout(&output)
    );
    let mut files: Vec<String> = std::fs::read_dir(&findings)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    assert_eq!(files, ["notes.txt", "probe_step_failed.jsonl"]);
    assert_eq!(git(&["status", "--porcelain", "--untracked-files=all"]), "");
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries.len(), 2, "only .git and .spade: {entries:?}");

    // --json keeps stdout one object and names the file there.
    let output = check_in(dir.path(), &[bad.to_str().unwrap(), "--json"]);
    let json: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(
        json["findings"][0]["trajectory_file"],
        ".spade/check/fault_nan_reward/probe_step_failed.jsonl"
    );
}

#[test]
fn an_unusable_out_directory_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let bad = env_dir("fault_nan_reward").join("env.py");
    let output = check_in(
        dir.path(),
        &[bad.to_str().unwrap(), "--out", file.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(1));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(
        err.contains(&format!(
            "error: creating the output directory '{}'",
            file.display()
        )),
        "{err}"
    );
}

/// `tests/solutions/<name>.py`.
fn solution_fixture(name: &str) -> (String, String) {
    let path = crate::common::repo_root()
        .join("tests")
        .join("solutions")
        .join(format!("{name}.py"));
    let source = std::fs::read_to_string(&path).unwrap();
    (path.display().to_string(), source)
}

fn lenient() -> CheckOptions {
    CheckOptions {
        require_winning_solution: false,
        ..CheckOptions::default()
    }
}

/// One finding of `report`: its code, severity and message.
fn only_finding(report: &CheckReport) -> (&str, Severity, &str) {
    assert_eq!(report.findings.len(), 1, "{:#?}", report.findings);
    let f = &report.findings[0];
    (f.code.as_str(), f.severity, f.message.as_str())
}

/// Issue 52, item 5: a multi-turn env whose `solution()` gives a single wrong answer passed
/// `spade check` with a warning; under self-play's validation settings it is rejected.
#[tokio::test]
async fn self_play_rejects_a_multi_turn_env_whose_solution_gives_a_wrong_answer() {
    let (_, source) = solution_fixture("multi_turn_wrong_answer");
    let settings = spade_selfplay::TrainConfig::default().admission();
    let report = check(
        &check_runtime(),
        &source,
        &spade_selfplay::admission::check_options(&settings),
    )
    .await;
    assert!(!report.accepted);
    let (code, severity, message) = only_finding(&report);
    assert_eq!((code, severity), ("solution_does_not_win", Severity::Error));
    assert_eq!(
        message,
        "solution() returned \"12\"; played as 1 action in the env's action format it did not \
         end the episode (seed 1). A solution must win when played (require_winning_solution): \
         return the answer, or in a multi-turn env the winning actions (one \\boxed{...} or \
         <tool_call>/<answer> element per step)"
    );
    assert_eq!(report.stats.single_answer, Some(false));

    // The same under plain `spade check`'s default; the lenient judgement (the behaviour
    // before) only warns.
    let default = check(&check_runtime(), &source, &CheckOptions::default()).await;
    assert_eq!(default.codes(), vec!["solution_does_not_win"]);
    let before = check(&check_runtime(), &source, &lenient()).await;
    assert!(before.accepted);
    let (code, severity, _) = only_finding(&before);
    assert_eq!(
        (code, severity),
        ("solution_plan_does_not_win", Severity::Warning)
    );
}

#[tokio::test]
async fn a_plan_in_lines_cannot_be_played_and_is_rejected() {
    let (_, source) = solution_fixture("plan_in_lines");
    let report = check(&check_runtime(), &source, &CheckOptions::default()).await;
    assert!(!report.accepted);
    let (code, severity, message) = only_finding(&report);
    assert_eq!(
        (code, severity),
        ("solution_plan_does_not_win", Severity::Error)
    );
    assert_eq!(
        message,
        "solution() returned \"Climb 3 steps per turn\\nuntil fewer than 3 of the 12 remain,\\nthen \
         climb the rest.\", which is not one short answer (several lines or over 100 characters, \
         with no \\boxed{}, <tool_call> or <answer> in it), so it could not be played as given; \
         played as 1 action in the env's action format it did not end the episode (seed 1). \
         Whether a plan in words wins cannot be decided by playing it. A solution must win when \
         played (require_winning_solution): return the answer, or in a multi-turn env the \
         winning actions (one \\boxed{...} or <tool_call>/<answer> element per step)"
    );
    let before = check(&check_runtime(), &source, &lenient()).await;
    assert!(before.accepted);
    assert_eq!(
        only_finding(&before).1,
        Severity::Warning,
        "{:?}",
        before.codes()
    );
}

#[tokio::test]
async fn the_lenient_judgement_keeps_a_plan_in_words_as_a_warning() {
    let report = check(&check_runtime(), &env_source("plan_in_words"), &lenient()).await;
    assert!(report.accepted);
    let (code, severity, message) = only_finding(&report);
    assert_eq!(
        (code, severity),
        ("solution_plan_does_not_win", Severity::Warning)
    );
    assert!(
        message.contains(
            "which could not be played as given: played as 1 action in the env's action format \
             it did not end the episode (seed 1). The env is multi-turn by its behaviour"
        ) && message.ends_with("so this is a warning"),
        "{message}"
    );
    // A wrong answer in a single-answer env is an error either way.
    let wrong = check(
        &check_runtime(),
        &env_source("wrong_single_answer"),
        &lenient(),
    )
    .await;
    assert_eq!(wrong.codes(), vec!["solution_does_not_win"]);
}

#[test]
fn cli_is_strict_about_solutions_unless_told_to_be_lenient() {
    let (path, _) = solution_fixture("multi_turn_wrong_answer");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().to_str().unwrap();
    let strict = spade(&["check", &path, "--seeds", "2", "--out", out]);
    assert_eq!(strict.status.code(), Some(2));
    assert!(
        stdout(&strict).contains("error [solution_does_not_win] solution() returned \"12\""),
        "{}",
        stdout(&strict)
    );
    let lenient = spade(&[
        "check",
        &path,
        "--seeds",
        "2",
        "--out",
        out,
        "--lenient-solution",
    ]);
    assert_eq!(lenient.status.code(), Some(0));
    assert!(
        stdout(&lenient).contains("warning [solution_plan_does_not_win]"),
        "{}",
        stdout(&lenient)
    );
}
