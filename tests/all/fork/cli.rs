//! `spade run --from TRAJECTORY@N`: a recorded episode continued from its call N in a fork,
//! with other actions, recorded as a branch that `spade replay` replays.

use serde_json::Value;

use super::STATEFUL;
use crate::common::{fails_with, spade, spade_with_stdin, stderr, stdout};

/// The JSON objects `spade run --json` printed.
fn calls(out: &std::process::Output) -> Vec<Value> {
    stdout(out)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

#[test]
fn a_branch_goes_on_from_the_recorded_state_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_owned();
    std::fs::write(path("env.py"), STATEFUL).unwrap();
    let recorded = spade_with_stdin(
        &[
            "run",
            &path("env.py"),
            "--seed",
            "3",
            "--actions",
            "-",
            "--json",
            "--record",
            &path("parent.jsonl"),
        ],
        Some(b"add:a\nadd:b\nadd:c\n"),
    );
    assert!(recorded.status.success(), "{}", stderr(&recorded));
    let original = calls(&recorded);
    // After call 3 (load, reset, step 1): step 2 with the recorded action gives the recorded
    // step 2, every byte of the state included; another action goes its own way.
    let branched = spade_with_stdin(
        &[
            "run",
            "--from",
            &format!("{}@3", path("parent.jsonl")),
            "--actions",
            "-",
            "--json",
            "--record",
            &path("branch.jsonl"),
        ],
        Some(b"add:b\nadd:z\n"),
    );
    assert!(branched.status.success(), "{}", stderr(&branched));
    let branch = calls(&branched);
    assert_eq!(branch[0]["call"], "fork");
    assert_eq!(branch[0]["at"], 3);
    assert_eq!(branch[1]["observation"], original[3]["observation"]);
    assert_eq!(branch[1]["fuel"], original[3]["fuel"]);
    let obs = branch[2]["observation"].as_str().unwrap();
    assert!(obs.starts_with("count=3 items=['a', 'b', 'z']"), "{obs}");
    let header: Value = serde_json::from_str(
        std::fs::read_to_string(path("branch.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(header["fork"]["parent"], "parent.jsonl");
    let replayed = spade(&["replay", &path("branch.jsonl")]);
    assert!(replayed.status.success(), "{}", stderr(&replayed));
    assert!(
        stdout(&replayed).starts_with("identical:"),
        "{}",
        stdout(&replayed)
    );
}

#[test]
fn a_bad_from_is_refused_with_what_to_give() {
    let dir = tempfile::tempdir().unwrap();
    let parent = dir.path().join("parent.jsonl");
    let env = dir.path().join("env.py");
    std::fs::write(&env, STATEFUL).unwrap();
    let recorded = spade_with_stdin(
        &[
            "run",
            env.to_str().unwrap(),
            "--actions",
            "-",
            "--record",
            parent.to_str().unwrap(),
        ],
        Some(b"x\n"),
    );
    assert!(recorded.status.success(), "{}", stderr(&recorded));
    let parent = parent.to_str().unwrap();
    fails_with(
        &["run", "--from", parent, "--actions", "-"],
        Some(b"x\n"),
        1,
        "expected TRAJECTORY@N",
    );
    fails_with(
        &["run", "--from", &format!("{parent}@0"), "--actions", "-"],
        Some(b"x\n"),
        1,
        "it holds calls 0 to 2; a branch goes on after one of them (give 1 to 3)",
    );
    fails_with(
        &["run", "--from", "nowhere.jsonl@2", "--actions", "-"],
        Some(b"x\n"),
        1,
        "cannot read the trajectory",
    );
}
