//! Trajectory files: record → replay is bit-exact, recordings agree across processes, tampering
//! and divergence are reported precisely.

use serde_json::Value;
use spade_runtime::SandboxOptions;
use spade_runtime::trajectory::{
    RecordMeta, Recorder, ReplayOptions, Trajectory, TrajectoryError, Truncation, replay,
    sha256_hex,
};

use crate::common::{env_actions, env_dir, env_source, fixtures, runtime, spade, stderr, stdout};

/// Records fixture `name` with `seed`: reset, then its actions until the episode ends, then
/// `solution`.
async fn record(name: &str, seed: u64) -> String {
    let runtime = runtime();
    let meta = RecordMeta {
        hint: Some("try the obvious".to_owned()),
        ..RecordMeta::default()
    };
    let mut recorder = Recorder::start(
        &runtime,
        &env_source(name),
        SandboxOptions::seeded(seed),
        meta,
        Vec::new(),
    )
    .await
    .unwrap();
    recorder.reset(Some(seed)).await.unwrap();
    for action in env_actions(name) {
        let step = recorder.step(&action).await.unwrap();
        if step.terminated || step.truncated {
            break;
        }
    }
    recorder.solution().await.unwrap();
    let (_, bytes) = recorder.finish().unwrap();
    String::from_utf8(bytes).unwrap()
}

async fn replay_text(text: &str) -> spade_runtime::trajectory::ReplayReport {
    let trajectory = Trajectory::parse(text).unwrap();
    replay(&runtime(), &trajectory, &ReplayOptions::default())
        .await
        .unwrap()
}

#[tokio::test]
async fn record_then_replay_is_identical_for_every_fixture() {
    for name in fixtures(false) {
        for seed in [1, 2, 3] {
            let text = record(&name, seed).await;
            let trajectory = Trajectory::parse(&text).unwrap();
            trajectory.verify().unwrap();
            let report = replay(&runtime(), &trajectory, &ReplayOptions::default())
                .await
                .unwrap();
            assert_eq!(report.divergence, None, "{name} seed {seed}");
            assert_eq!(report.truncated, None);
            let footer: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
            assert_eq!(footer["trace_sha256"], report.trace_sha256.as_str());
        }
    }
}

#[test]
fn separate_processes_record_the_same_trace_hash() {
    let dir = tempfile::tempdir().unwrap();
    let env = env_dir("nondeterminism");
    let mut hashes = Vec::new();
    for i in 0..2 {
        let path = dir.path().join(format!("run{i}.jsonl"));
        let output = spade(&[
            "run",
            env.join("env.py").to_str().unwrap(),
            "--seed",
            "4",
            "--actions",
            env.join("actions.txt").to_str().unwrap(),
            "--record",
            path.to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{}", stderr(&output));
        let text = std::fs::read_to_string(&path).unwrap();
        let footer: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
        hashes.push(footer["trace_sha256"].as_str().unwrap().to_owned());
        let replayed = spade(&["replay", path.to_str().unwrap()]);
        assert!(replayed.status.success(), "{}", stderr(&replayed));
        assert!(
            stdout(&replayed).starts_with("identical: 5 calls (3 steps), outcome open"),
            "{}",
            stdout(&replayed)
        );
    }
    assert_eq!(hashes[0], hashes[1]);
}

/// Recomputes the hash chain and the footer's totals and trace hash, as a careful forger would.
fn rechain(lines: &mut [Value]) {
    let total: f64 = lines
        .iter()
        .filter_map(|l| l["ok"]["reward"].as_f64())
        .sum();
    let n = lines.len();
    lines[n - 1]["total_reward"] = Value::from(total);
    let mut prev = serde_json::to_string(&lines[0]).unwrap();
    let mut trace = format!("{prev}\n");
    for line in lines.iter_mut().take(n - 1).skip(1) {
        line["prev_sha256"] = Value::String(sha256_hex(prev.as_bytes()));
        prev = serde_json::to_string(line).unwrap();
        trace.push_str(&prev);
        trace.push('\n');
    }
    lines[n - 1]["trace_sha256"] = Value::String(sha256_hex(trace.as_bytes()));
}

fn parse_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn join(lines: &[Value]) -> String {
    lines
        .iter()
        .map(|l| format!("{}\n", serde_json::to_string(l).unwrap()))
        .collect()
}

fn tamper_message(text: &str) -> String {
    match Trajectory::parse(text).and_then(|t| t.verify()) {
        Err(TrajectoryError::Tampered(message)) => message,
        other => panic!("tampering not detected: {other:?}"),
    }
}

#[tokio::test]
async fn tampering_is_detected_with_a_precise_message() {
    let text = record("grid_walk", 7).await;
    let lines = parse_lines(&text);
    // Lines: 1 header, 2 load, 3 reset, 4.. steps.
    let mut reward = lines.clone();
    reward[4]["ok"]["reward"] = Value::from(1.0);
    assert_eq!(
        tamper_message(&join(&reward)),
        "line 5 was modified after recording: its sha256 does not match prev_sha256 in line 6"
    );

    let mut observation = lines.clone();
    observation[3]["ok"]["observation"] = Value::from("a different board");
    assert_eq!(
        tamper_message(&join(&observation)),
        "line 4 was modified after recording: its sha256 does not match prev_sha256 in line 5"
    );

    let mut removed = lines.clone();
    removed.remove(5);
    assert_eq!(
        tamper_message(&join(&removed)),
        "line 6 holds call 5 where call 4 was expected: a line was removed or lines were reordered"
    );

    let mut swapped = lines.clone();
    swapped.swap(4, 5);
    assert_eq!(
        tamper_message(&join(&swapped)),
        "line 5 holds call 4 where call 3 was expected: a line was removed or lines were reordered"
    );

    let mut source = lines.clone();
    source[0]["env_source"] = Value::from(env_source("grid_walk").replace("0.1", "0.5"));
    assert!(
        tamper_message(&join(&source)).starts_with("the embedded environment source was altered")
    );

    let mut last = lines.clone();
    let n = last.len();
    last[n - 2]["fuel"] = Value::from(1);
    assert!(tamper_message(&join(&last)).starts_with(&format!(
        "line {} was modified after recording: the lines hash to",
        n - 1
    )));

    let mut footer = lines.clone();
    footer[n - 1]["total_reward"] = Value::from(9.0);
    assert!(tamper_message(&join(&footer)).starts_with("the footer was modified"));

    let mut forged = lines.clone();
    forged[4]["ok"]["reward"] = Value::from(0.75);
    rechain(&mut forged);
    let forged_text = join(&forged);
    Trajectory::parse(&forged_text)
        .unwrap()
        .verify()
        .expect("a consistent forgery passes the hash check");
    let report = replay_text(&forged_text).await;
    let divergence = report
        .divergence
        .expect("replay catches what the hash check cannot");
    assert_eq!(
        (
            divergence.line,
            divergence.what.as_str(),
            divergence.field.as_str()
        ),
        (5, "step 2", "ok.reward")
    );
    assert_eq!(
        (divergence.recorded.as_str(), divergence.replayed.as_str()),
        ("0.75", "0.1")
    );
}

#[tokio::test]
async fn a_behaviour_change_is_reported_at_the_right_line_and_field() {
    let text = record("arithmetic_puzzle", 7).await;
    let mut lines = parse_lines(&text);
    // The same environment, except that a malformed answer now costs 0.2 instead of 0.1 (a
    // change that leaves the cost of loading, and so the load line's fuel, unchanged).
    let changed = env_source("arithmetic_puzzle").replace("-0.1, False", "-0.2, False");
    assert_ne!(changed, env_source("arithmetic_puzzle"));
    lines[0]["env_source"] = Value::from(changed.clone());
    lines[0]["env_sha256"] = Value::from(sha256_hex(changed.as_bytes()));
    rechain(&mut lines);
    let report = replay_text(&join(&lines)).await;
    let divergence = report.divergence.unwrap();
    assert_eq!(
        (
            divergence.line,
            divergence.what.as_str(),
            divergence.field.as_str()
        ),
        (5, "step 2", "ok.reward")
    );
    assert_eq!(
        (divergence.recorded.as_str(), divergence.replayed.as_str()),
        ("-0.1", "-0.2")
    );
}

#[tokio::test]
async fn truncated_files_are_reported_as_truncated() {
    let text = record("grid_walk", 2).await;
    let cut = &text[..text.len() - 40];
    let trajectory = Trajectory::parse(cut).unwrap();
    let partial_line = cut.lines().count();
    assert_eq!(
        trajectory.truncated,
        Some(Truncation::PartialLine { line: partial_line })
    );
    let report = replay(&runtime(), &trajectory, &ReplayOptions::default())
        .await
        .unwrap();
    assert_eq!(report.divergence, None);
    assert!(report.truncated.is_some());
    let no_footer: String = text.lines().take(4).map(|l| format!("{l}\n")).collect();
    assert_eq!(
        Trajectory::parse(&no_footer).unwrap().truncated,
        Some(Truncation::NoFooter)
    );
}

#[test]
fn replay_rejects_bad_files_with_clear_messages() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    let check = |args: &[&str], code: i32, message: &str| {
        let output = spade(args);
        assert_eq!(
            output.status.code(),
            Some(code),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(message),
            "{args:?}: expected {message:?} in {}",
            stderr(&output)
        );
    };
    check(
        &["replay", &write("plain.txt", "hello\n")],
        1,
        "not a spade trajectory: line 1 is not JSON",
    );
    check(
        &["replay", &write("other.jsonl", "{\"type\":\"event\"}\n")],
        1,
        "not a spade trajectory: line 1 is not a trajectory header",
    );
    check(
        &[
            "replay",
            &write("future.jsonl", "{\"type\":\"header\",\"format\":99}\n"),
        ],
        1,
        "unsupported trajectory format version 99 (this spade reads version 1)",
    );
    check(
        &["replay", "missing.jsonl"],
        1,
        "trajectory file 'missing.jsonl' does not exist",
    );

    let recorded = dir.path().join("rec.jsonl");
    let env = env_dir("arithmetic_puzzle");
    let output = spade(&[
        "run",
        env.join("env.py").to_str().unwrap(),
        "--seed",
        "3",
        "--actions",
        env.join("actions.txt").to_str().unwrap(),
        "--record",
        recorded.to_str().unwrap(),
    ]);
    assert!(output.status.success());
    let text = std::fs::read_to_string(&recorded).unwrap();
    let other_env = write("other_env.py", &env_source("grid_walk"));
    check(
        &["replay", recorded.to_str().unwrap(), "--env", &other_env],
        1,
        "the environment source differs from the recorded one",
    );
    let same_env = env.join("env.py");
    let ok = spade(&[
        "replay",
        recorded.to_str().unwrap(),
        "--env",
        same_env.to_str().unwrap(),
    ]);
    assert!(ok.status.success(), "{}", stderr(&ok));

    let mut lines = parse_lines(&text);
    lines[0]["guest_sha256"] = Value::from("0".repeat(64));
    rechain(&mut lines);
    let mismatched = write("guest.jsonl", &join(&lines));
    check(
        &["replay", &mismatched],
        1,
        "pass --allow-guest-mismatch to replay anyway",
    );
    let anyway = spade(&["replay", &mismatched, "--allow-guest-mismatch"]);
    assert!(anyway.status.success(), "{}", stderr(&anyway));
    assert!(
        stderr(&anyway).contains("warning: recorded with guest 0000"),
        "{}",
        stderr(&anyway)
    );

    let truncated = write("cut.jsonl", &text[..text.len() - 10]);
    check(
        &["replay", &truncated],
        4,
        "truncated: the file ends in the middle of line",
    );
    let mut edited = parse_lines(&text);
    edited[3]["ok"]["reward"] = Value::from(1.0);
    let edited = write("edited.jsonl", &join(&edited));
    check(
        &["replay", &edited, "--verify-hash"],
        3,
        "tampered: line 4 was modified after recording",
    );
    let intact = spade(&["replay", recorded.to_str().unwrap(), "--verify-hash"]);
    assert!(
        stdout(&intact).starts_with("intact: "),
        "{}",
        stdout(&intact)
    );
}

#[test]
fn a_killed_recording_replays_as_truncated() {
    use std::io::{BufRead, BufReader, Write};
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("killed.jsonl");
    let env = env_dir("grid_walk").join("env.py");
    let mut child = Command::new(env!("CARGO_BIN_EXE_spade"))
        .args([
            "run",
            env.to_str().unwrap(),
            "--seed",
            "7",
            "--json",
            "--record",
            path.to_str().unwrap(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // load and reset, then two steps, each acknowledged before the next is sent.
    lines.next().unwrap().unwrap();
    lines.next().unwrap().unwrap();
    for action in ["\\boxed{right}", "\\boxed{down}"] {
        writeln!(stdin, "{action}").unwrap();
        stdin.flush().unwrap();
        let line = lines.next().unwrap().unwrap();
        assert!(line.contains("\"call\":\"step\""), "{line}");
    }
    child.kill().unwrap(); // SIGKILL: no destructor or footer runs
    child.wait().unwrap();
    let output = spade(&["replay", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(4), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("truncated: the file has no footer (the recording process was interrupted); the 4 complete calls (2 steps) replayed identically"),
        "{}",
        stderr(&output)
    );
}
