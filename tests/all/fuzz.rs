//! `spade fuzz`: finds planted bugs, saves replayable trajectories, is reproducible from its
//! seed, and stays quiet on good environments.

use serde_json::Value;
use spade_envtools::fuzz::{FuzzOptions, fuzz};

use crate::common::{env_dir, env_source, runtime, spade, stdout};

fn options(seed: u64, episodes: u64) -> FuzzOptions {
    FuzzOptions {
        seed,
        episodes: Some(episodes),
        ..FuzzOptions::default()
    }
}

#[test]
fn finds_the_planted_bug_and_saves_a_replayable_trajectory() {
    let dir = tempfile::tempdir().unwrap();
    let env = env_dir("brace_crash").join("env.py");
    let out = dir.path().join("out");
    let output = spade(&[
        "fuzz",
        env.to_str().unwrap(),
        "--episodes",
        "30",
        "--seed",
        "1",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    assert_eq!(json["episodes"], 30);
    let findings = json["findings"].as_array().unwrap();
    let at = findings
        .iter()
        .position(|f| f["code"] == "exception" && f["signature"] == "KeyError")
        .unwrap_or_else(|| panic!("the planted KeyError was not found: {findings:?}"));
    let file = json["trajectory_files"][at].as_str().unwrap().to_owned();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains("{{"),
        "the failing action is in the trajectory"
    );
    let output = spade(&["replay", &file]);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let replayed = stdout(&output);
    assert!(replayed.contains("outcome error:exception"), "{replayed}");
    assert!(
        replayed.contains(findings[at]["trace_sha256"].as_str().unwrap()),
        "{replayed}"
    );
}

#[tokio::test]
async fn a_campaign_is_reproducible_from_its_seed() {
    let source = env_source("brace_crash");
    let a = fuzz(&runtime(), &source, &options(5, 12), &mut |_| {}).await;
    let b = fuzz(&runtime(), &source, &options(5, 12), &mut |_| {}).await;
    assert_eq!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&b).unwrap()
    );
    let trajectories = |r: &spade_envtools::fuzz::FuzzReport| -> Vec<String> {
        r.findings.iter().map(|f| f.trajectory.clone()).collect()
    };
    assert_eq!(trajectories(&a), trajectories(&b));
    let c = fuzz(&runtime(), &source, &options(6, 12), &mut |_| {}).await;
    assert_ne!(
        serde_json::to_string(&a).unwrap(),
        serde_json::to_string(&c).unwrap()
    );
}

#[tokio::test]
async fn good_fixtures_have_no_findings_and_endless_envs_do() {
    for name in ["grid_walk", "tool_inventory", "fraction_answer"] {
        let report = fuzz(&runtime(), &env_source(name), &options(2, 15), &mut |_| {}).await;
        assert_eq!(report.episodes, 15);
        assert!(
            report.replays >= 2,
            "{name}: clean episodes are replayed too"
        );
        let codes: Vec<&str> = report.findings.iter().map(|f| f.code.as_str()).collect();
        assert!(codes.is_empty(), "{name}: {codes:?}");
    }
    let report = fuzz(
        &runtime(),
        &env_source("never_ends"),
        &options(2, 4),
        &mut |_| {},
    )
    .await;
    let codes: Vec<&str> = report.findings.iter().map(|f| f.code.as_str()).collect();
    assert_eq!(codes, ["no_end"]);
    assert_eq!(report.findings[0].count, 4);
}

#[tokio::test]
async fn a_load_error_ends_the_campaign_with_one_finding() {
    let report = fuzz(
        &runtime(),
        &env_source("fault_syntax_error"),
        &options(0, 50),
        &mut |_| {},
    )
    .await;
    assert_eq!(report.episodes, 1);
    assert_eq!(report.findings.len(), 1);
    assert_eq!(report.findings[0].code, "load");
}

/// The cargo-fuzz targets' bodies, with fixed inputs (the fuzzers themselves need nightly).
#[test]
fn fuzz_target_bodies_accept_fixed_inputs() {
    use spade_envtools::fuzz::targets::{Harness, trajectory_parser};
    let harness = Harness::with_runtime(&runtime());
    for source in [
        &b""[..],
        b"\xff\xfe not utf-8",
        b"class XEnv:\n    def reset(self, seed=None):\n        return 'x', {}\n",
        b"class XEnv:\n    def reset(self, seed=None):\n        while True: pass\n",
        b"class XEnv:\n    def reset(self, seed=None):\n        return 'x', {}\n    def step(self, a):\n        return 'y' * 10**9, 0, 1, 0, {}\n",
        env_source("grid_walk").as_bytes(),
    ] {
        harness.python_source(source);
    }
    for name in [
        "arithmetic_puzzle",
        "grid_walk",
        "tool_inventory",
        "fraction_answer",
    ] {
        let source = env_source(name);
        harness.actions(&source, b"");
        harness.actions(
            &source,
            b"12345678\\boxed{1}\n{{{{\n\n<answer>3</answer>\n\xf0\x9f",
        );
    }
    let recorded = std::fs::read_to_string(env_dir("grid_walk").join("actions.txt")).unwrap();
    for text in [
        &b""[..],
        b"{\"type\":\"header\"}\n",
        b"\x00\x01",
        recorded.as_bytes(),
    ] {
        trajectory_parser(text);
    }
}

/// Two exception classes whose names (Cyrillic, the same length) spell alike in ASCII.
const TWO_ERRORS_ENV: &str = "class Ошибка(Exception):
    pass


class Помеха(Exception):
    pass


class TwoErrorsEnv:
    def reset(self, seed=None):
        return 'go', {}

    def step(self, action):
        if len(action) % 2:
            raise Ошибка('odd')
        raise Помеха('even')
";

#[test]
fn findings_whose_signatures_spell_alike_get_separate_files() {
    use spade_envtools::trajectory::sha256_hex;
    let dir = tempfile::tempdir().unwrap();
    let env = dir.path().join("env.py");
    std::fs::write(&env, TWO_ERRORS_ENV).unwrap();
    let out = dir.path().join("out");
    let output = spade(&[
        "fuzz",
        env.to_str().unwrap(),
        "--episodes",
        "20",
        "--seed",
        "1",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    let mut signatures: Vec<&str> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["signature"].as_str().unwrap())
        .collect();
    signatures.sort_unstable();
    assert_eq!(signatures, ["Ошибка", "Помеха"]);
    let mut files: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    files.sort();
    let mut expected: Vec<String> = ["Ошибка", "Помеха"]
        .iter()
        .map(|s| format!("exception-______-{}.jsonl", &sha256_hex(s.as_bytes())[..8]))
        .collect();
    expected.sort();
    assert_eq!(files, expected);
    for file in files {
        let replayed = spade(&["replay", out.join(file).to_str().unwrap()]);
        assert_eq!(replayed.status.code(), Some(0));
    }
}

/// `tests/fuzz_deep/<name>.py`: environments whose bug lies deep in an episode.
fn deep_source(name: &str) -> String {
    let path = crate::common::repo_root()
        .join("tests")
        .join("fuzz_deep")
        .join(format!("{name}.py"));
    std::fs::read_to_string(path).unwrap()
}

#[tokio::test]
async fn snapshot_fuzzing_reaches_a_deep_bug_from_kept_states_and_reproduces() {
    // deep_lock divides by zero once 8 actions in a row have the right length mod 4, and any
    // wrong one starts over; every depth is a new observation shape.
    let source = deep_source("deep_lock");
    let forked = FuzzOptions {
        fork: true,
        ..options(0, 300)
    };
    let report = fuzz(&runtime(), &source, &forked, &mut |_| {}).await;
    assert_eq!(
        report.forked_episodes, 150,
        "every other episode starts from a kept state"
    );
    let finding = report
        .findings
        .iter()
        .find(|f| f.signature == "ZeroDivisionError")
        .unwrap_or_else(|| panic!("the deep bug was not found: {:?}", report.findings));
    // Its trajectory starts from a fresh sandbox (load, reset) and reproduces.
    let trajectory = spade_envtools::trajectory::Trajectory::parse(&finding.trajectory).unwrap();
    assert!(trajectory.header.fork.is_none());
    assert_eq!(
        trajectory.calls[0].1.call,
        spade_envtools::trajectory::CallKind::Load
    );
    assert_eq!(
        trajectory.calls[1].1.call,
        spade_envtools::trajectory::CallKind::Reset
    );
    let checked =
        spade_envtools::check_replay(&runtime(), &finding.trajectory, &finding.trace_sha256).await;
    assert!(checked.is_none(), "{checked:?}");
    // Every feature of the lock was reached: the shapes "pins zero open" to "pins seven
    // open" (8), the error (1), the one reward 0.0 and the one (empty) set of info keys.
    assert_eq!(report.states, 11);
    // The same seed gives the same campaign.
    let again = fuzz(&runtime(), &source, &forked, &mut |_| {}).await;
    assert_eq!(
        serde_json::to_string(&report).unwrap(),
        serde_json::to_string(&again).unwrap()
    );
}
