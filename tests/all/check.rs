//! `spade check`: accepts the good fixtures, rejects faulty ones with the right finding codes,
//! warns about reward hacks, and every finding's trajectory replays.

use serde_json::Value;
use spade_runtime::check::{CheckOptions, CheckReport, check};
use spade_runtime::fuzz::Severity;
use spade_runtime::trajectory::{ReplayOptions, Trajectory, replay};
use spade_runtime::{ErrorKind, Runtime};

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
