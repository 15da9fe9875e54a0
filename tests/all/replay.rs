//! Trajectory files: record → replay is bit-exact, recordings agree across processes, tampering
//! and divergence are reported precisely.

use serde_json::Value;
use spade_envtools::trajectory::{
    RecordMeta, ReplayOptions, Trajectory, TrajectoryError, Truncation, replay, sha256_hex,
};
use spade_envtools::{Episode, Record};
use spade_sandbox::SandboxOptions;

use crate::common::{env_actions, env_dir, env_source, fixtures, runtime, spade, stderr, stdout};

/// Records fixture `name` with `seed`: reset, then its actions until the episode ends, then
/// `solution`.
async fn record(name: &str, seed: u64) -> String {
    let runtime = runtime();
    let meta = RecordMeta {
        hint: Some("try the obvious".to_owned()),
        ..RecordMeta::default()
    };
    let options = SandboxOptions::seeded(seed);
    let source = env_source(name);
    let mut recorder = Episode::start(&runtime, &source, options, Record::Memory(meta))
        .await
        .unwrap();
    recorder.reset(Some(seed)).await.result.unwrap();
    for action in env_actions(name) {
        let step = recorder.step(&action).await.result.unwrap();
        if step.terminated || step.truncated {
            break;
        }
    }
    recorder.solution().await.result.unwrap();
    recorder.finish().unwrap().trajectory.unwrap()
}

async fn replay_text(text: &str) -> spade_envtools::trajectory::ReplayReport {
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
        .fold(0.0, |a, b| a + b);
    let n = lines.len();
    lines[n - 1]["total_reward"] = Value::from(total);
    let mut texts: Vec<String> = lines
        .iter()
        .map(|l| serde_json::to_string(l).unwrap())
        .collect();
    for i in 1..n - 1 {
        lines[i]["prev_sha256"] = Value::String(sha256_hex(texts[i - 1].as_bytes()));
        texts[i] = serde_json::to_string(&lines[i]).unwrap();
    }
    texts[n - 1] = serde_json::to_string(&lines[n - 1]).unwrap();
    rechain_text(&mut texts);
    lines[n - 1] = serde_json::from_str(&texts[n - 1]).unwrap();
}

/// The value of `"field":"<hex>"` in `line`.
fn hex_field<'a>(line: &'a str, field: &str) -> &'a str {
    let key = format!("\"{field}\":\"");
    let at = line.find(&key).unwrap() + key.len();
    let end = at + line[at..].find('"').unwrap();
    &line[at..end]
}

/// Recomputes the hash chain and the trace hash of lines edited as text (the forger's edits
/// keep their exact bytes): each call line's `prev_sha256`, then the footer's `trace_sha256`
/// over every line before it and the footer with that field empty.
fn rechain_text(lines: &mut [String]) {
    let n = lines.len();
    for i in 1..n - 1 {
        let old = hex_field(&lines[i], "prev_sha256").to_owned();
        let new = sha256_hex(lines[i - 1].as_bytes());
        lines[i] = lines[i].replace(&old, &new);
    }
    let old = hex_field(&lines[n - 1], "trace_sha256").to_owned();
    let unsigned = lines[n - 1].replace(&old, "");
    let mut trace: String = lines[..n - 1].iter().map(|l| format!("{l}\n")).collect();
    trace.push_str(&unsigned);
    lines[n - 1] = unsigned.replace(
        "\"trace_sha256\":\"\"",
        &format!("\"trace_sha256\":\"{}\"", sha256_hex(trace.as_bytes())),
    );
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
        "line {} or the footer was modified after recording: the lines and the footer hash to",
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
        "unsupported trajectory format version 99 (this spade reads version 2)",
    );
    check(
        &[
            "replay",
            &write("old.jsonl", "{\"type\":\"header\",\"format\":1}\n"),
        ],
        1,
        "trajectory format version 1 was written by an older spade: its trace hash does not \
         cover the footer, and it cannot hold an overflowing total reward; this spade reads \
         version 2 only, so record the episode again",
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

/// Records `source` with `limits`: reset, then `actions`, then the footer.
async fn record_source(source: &str, limits: spade_sandbox::Limits, actions: &[&str]) -> String {
    let runtime = runtime().with_limits(limits);
    let record = Record::Memory(RecordMeta::default());
    let mut recorder = Episode::start(&runtime, source, SandboxOptions::seeded(1), record)
        .await
        .unwrap();
    recorder.reset(Some(1)).await.result.unwrap();
    for action in actions {
        if recorder.step(action).await.result.is_err() {
            break;
        }
    }
    recorder.finish().unwrap().trajectory.unwrap()
}

fn text_lines(text: &str) -> Vec<String> {
    text.lines().map(str::to_owned).collect()
}

fn join_text(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}

#[tokio::test]
async fn a_trajectory_asking_for_unbounded_limits_replays_under_the_local_ones() {
    let local = spade_sandbox::Limits {
        fuel_per_call: 100_000_000,
        ..crate::common::test_limits()
    };
    let text = record_source(&env_source("fault_infinite_loop"), local.clone(), &["go"]).await;
    let mut lines = parse_lines(&text);
    assert_eq!(lines[3]["error"]["kind"], "out_of_fuel");
    let asked = serde_json::json!({
        "fuel_per_call": u64::MAX,
        "load_fuel": u64::MAX,
        "memory_limit": u64::MAX,
        "call_deadline_ms": u64::MAX,
        "output_limit": u64::MAX,
    });
    lines[0]["limits"] = asked.clone();
    rechain(&mut lines);
    let forged = join(&lines);
    let trajectory = Trajectory::parse(&forged).unwrap();
    trajectory
        .verify()
        .expect("a consistent forgery passes the hash check");
    // Under the file's limits this step would loop for 2^64 fuel; under the local ones it stops
    // at 10^8, as it did when it was recorded.
    let started = std::time::Instant::now();
    let report = replay(
        &runtime().with_limits(local.clone()),
        &trajectory,
        &ReplayOptions::default(),
    )
    .await
    .unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert_eq!(report.divergence, None);
    let (recorded, used) = report.clamped_limits.expect("the limits were clamped");
    assert_eq!(serde_json::to_value(recorded).unwrap(), asked);
    assert_eq!(
        used,
        spade_envtools::trajectory::RecordedLimits::from(&local)
    );
    assert_eq!(report.outcome.as_deref(), Some("error:out_of_fuel"));
}

#[test]
fn replay_clamps_limits_above_the_local_defaults_unless_trusted() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("generous.jsonl");
    let generous = spade_sandbox::Limits {
        fuel_per_call: 20_000_000_000,
        ..spade_sandbox::Limits::default()
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let text = runtime.block_on(record_source(
        &env_source("arithmetic_puzzle"),
        generous,
        &["\\boxed{1}"],
    ));
    std::fs::write(&path, &text).unwrap();
    let clamped = spade(&["replay", path.to_str().unwrap()]);
    assert_eq!(clamped.status.code(), Some(0), "{}", stderr(&clamped));
    assert!(
        stderr(&clamped).contains(
            "warning: the file asks for limits above the local ones (fuel 20000000000 per call, "
        ) && stderr(&clamped).contains("replayed under fuel 10000000000 per call, ")
            && stderr(&clamped).contains("(pass --trust-limits to use the file's)"),
        "{}",
        stderr(&clamped)
    );
    assert!(
        stdout(&clamped).starts_with("identical under the local limits: 3 calls (1 steps)"),
        "{}",
        stdout(&clamped)
    );
    let trusted = spade(&["replay", path.to_str().unwrap(), "--trust-limits"]);
    assert_eq!(trusted.status.code(), Some(0), "{}", stderr(&trusted));
    assert_eq!(stderr(&trusted), "");
    assert!(
        stdout(&trusted).starts_with("identical: 3 calls (1 steps)"),
        "{}",
        stdout(&trusted)
    );
}

#[test]
fn a_two_gib_trajectory_file_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.jsonl");
    // Sparse: two GiB of size, no data written.
    std::fs::File::create(&path)
        .unwrap()
        .set_len(2 << 30)
        .unwrap();
    let message = "the file is 2147483648 bytes (2048.0 MiB), more than the 1073741824 bytes \
                   (1024.0 MiB) a trajectory may have here; it was refused without reading it \
                   into memory (raise the cap with --max-file-size if you trust the file)";
    for extra in [None, Some("--verify-hash")] {
        let mut args = vec!["replay", path.to_str().unwrap()];
        args.extend(extra);
        let started = std::time::Instant::now();
        crate::common::fails_with(&args, None, 1, message);
        assert!(started.elapsed() < std::time::Duration::from_secs(30));
    }
    // A smaller cap applies to small files too, and a stream longer than the cap is cut off
    // while it is read.
    let small = dir.path().join("small.jsonl");
    std::fs::write(&small, "x".repeat(100)).unwrap();
    crate::common::fails_with(
        &["replay", small.to_str().unwrap(), "--max-file-size", "99"],
        None,
        1,
        "the file is 100 bytes (0.0 MiB), more than the 99 bytes (0.0 MiB)",
    );
    let endless = std::io::BufReader::new(std::io::repeat(b'\n'));
    let err = Trajectory::read(endless, 1 << 20).unwrap_err();
    assert_eq!(
        err,
        TrajectoryError::TooLarge {
            size: None,
            limit: 1 << 20
        }
    );
    assert_eq!(
        err.to_string(),
        "the input is longer than the 1048576 bytes (1.0 MiB) a trajectory may have here; \
         reading stopped there (raise the cap with --max-file-size if you trust the file)"
    );
}

const BIG_NUMBERS_ENV: &str = "class BigNumbersEnv:
    def reset(self, seed=None):
        return 'big', {'n': 10**399, 'neg': -(10**399) - 7, 'f': 1.5e308}

    def step(self, action):
        return 'x', 1e308, False, False, {'n': 2**64 + 1}
";

#[tokio::test]
async fn integers_of_400_digits_and_an_infinite_total_round_trip() {
    let text = record_source(BIG_NUMBERS_ENV, crate::common::test_limits(), &["a", "b"]).await;
    let lines = text_lines(&text);
    let big = format!("1{}", "0".repeat(399));
    let neg = format!("-1{}7", "0".repeat(398));
    assert!(
        lines[2].contains(&format!("\"info\":{{\"n\":{big},\"neg\":{neg},\"f\":")),
        "{}",
        lines[2]
    );
    assert!(lines[3].contains("\"reward\":1e+308"), "{}", lines[3]);
    assert!(
        lines[4].contains("\"info\":{\"n\":18446744073709551617}"),
        "{}",
        lines[4]
    );
    // 1e308 + 1e308 overflows: the total is infinite, written as JSON numbers cannot be.
    assert!(
        lines[5].contains("\"total_reward\":\"Infinity\""),
        "{}",
        lines[5]
    );
    let trajectory = Trajectory::parse(&text).unwrap();
    let (_, footer) = trajectory.footer.as_ref().unwrap();
    assert_eq!(footer.total_reward, f64::INFINITY);
    assert_eq!(footer.steps, 2);
    trajectory.verify().unwrap();
    let report = replay_text(&text).await;
    assert_eq!(report.divergence, None);
    assert_eq!(report.trace_sha256, footer.trace_sha256);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl");
    std::fs::write(&path, &text).unwrap();
    let output = spade(&["replay", path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let output = spade(&["replay", path.to_str().unwrap(), "--verify-hash"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

/// Replays `lines` after `edit` changed line `at` as text (and the chain was recomputed).
async fn divergence_after(
    lines: &[String],
    at: usize,
    edit: impl Fn(&str) -> String,
) -> spade_envtools::trajectory::Divergence {
    let mut edited = lines.to_vec();
    edited[at] = edit(&edited[at]);
    assert_ne!(edited[at], lines[at], "the edit changed nothing");
    rechain_text(&mut edited);
    let text = join_text(&edited);
    Trajectory::parse(&text).unwrap().verify().unwrap();
    replay_text(&text)
        .await
        .divergence
        .expect("any byte difference is a divergence")
}

#[tokio::test]
async fn replay_compares_bytes_number_spelling_and_key_order_included() {
    let text = record_source(BIG_NUMBERS_ENV, crate::common::test_limits(), &["a", "b"]).await;
    let lines = text_lines(&text);
    // Beyond 2^64, and beyond f64 precision: equal as f64, different numbers.
    let d = divergence_after(&lines, 4, |l| {
        l.replace("18446744073709551617", "18446744073709551616")
    })
    .await;
    assert_eq!(
        (d.line, d.what.as_str(), d.field.as_str()),
        (5, "step 2", "ok.info.n")
    );
    assert_eq!(
        (d.recorded.as_str(), d.replayed.as_str()),
        ("18446744073709551616", "18446744073709551617")
    );
    // The same number spelled differently.
    let d = divergence_after(&lines, 3, |l| {
        l.replace("\"reward\":1e+308", "\"reward\":1.0e308")
    })
    .await;
    assert_eq!(
        (
            d.line,
            d.field.as_str(),
            d.recorded.as_str(),
            d.replayed.as_str()
        ),
        (4, "ok.reward", "1.0e308", "1e+308")
    );
    // The same members in another order.
    let d = divergence_after(&lines, 2, |l| {
        l.replace(",\"f\":1.5e+308}", "}")
            .replace("\"info\":{\"n\":", "\"info\":{\"f\":1.5e+308,\"n\":")
    })
    .await;
    assert_eq!(
        (d.line, d.what.as_str(), d.field.as_str()),
        (3, "reset", "ok.info.f")
    );
    assert_eq!(d.recorded, "\"f\":1.5e+308");
    assert!(d.replayed.starts_with("\"n\":1000"), "{}", d.replayed);
    // A space between tokens.
    let d = divergence_after(&lines, 4, |l| l.replacen("\"fuel\":", "\"fuel\": ", 1)).await;
    assert_eq!((d.line, d.field.as_str()), (5, "(whole line)"));
}

#[test]
fn verify_hash_reports_an_edited_footer_outcome_and_return() {
    let dir = tempfile::tempdir().unwrap();
    let recorded = dir.path().join("rec.jsonl");
    let env = env_dir("arithmetic_puzzle");
    let output = spade(&[
        "run",
        env.join("env.py").to_str().unwrap(),
        "--seed",
        "7",
        "--actions",
        env.join("actions.txt").to_str().unwrap(),
        "--record",
        recorded.to_str().unwrap(),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let lines = text_lines(&std::fs::read_to_string(&recorded).unwrap());
    let n = lines.len();
    let footer: Value = serde_json::from_str(&lines[n - 1]).unwrap();
    let outcome = footer["outcome"].as_str().unwrap().to_owned();
    assert_eq!(outcome, "terminated");
    let write = |name: &str, lines: &[String]| {
        let path = dir.path().join(name);
        std::fs::write(&path, join_text(lines)).unwrap();
        path.to_str().unwrap().to_owned()
    };
    // Only the outcome edited.
    let mut edited = lines.clone();
    edited[n - 1] =
        edited[n - 1].replace("\"outcome\":\"terminated\"", "\"outcome\":\"truncated\"");
    let path = write("outcome.jsonl", &edited);
    crate::common::fails_with(
        &["replay", &path, "--verify-hash"],
        None,
        3,
        "tampered: the footer was modified: it records 3 steps, total reward 0.9, return 1 and \
         outcome \"truncated\", the lines give 3 steps, total reward 0.9, return 1 and outcome \
         \"terminated\"",
    );
    // Every footer field is in the trace hash: a forger who recomputes it the version-1 way
    // (over the lines before the footer only) is caught too, and so is a footer whose bytes
    // change while its values do not (`1.0` spelled `1.0e0`).
    let mut respelled = lines.clone();
    respelled[n - 1] = respelled[n - 1].replace("\"spade_return\":1.0", "\"spade_return\":1.0e0");
    assert_ne!(respelled[n - 1], lines[n - 1]);
    let path = write("respelled.jsonl", &respelled);
    crate::common::fails_with(
        &["replay", &path, "--verify-hash"],
        None,
        3,
        &format!(
            "tampered: line {} or the footer was modified after recording",
            n - 1
        ),
    );
    let mut old_style = edited.clone();
    let trace: String = old_style[..n - 1]
        .iter()
        .map(|l| format!("{l}\n"))
        .collect();
    let old_hash = hex_field(&old_style[n - 1], "trace_sha256").to_owned();
    old_style[n - 1] = old_style[n - 1].replace(&old_hash, &sha256_hex(trace.as_bytes()));
    let path = write("old_style.jsonl", &old_style);
    crate::common::fails_with(
        &["replay", &path, "--verify-hash"],
        None,
        3,
        "tampered: the footer was modified",
    );
    let intact = spade(&["replay", recorded.to_str().unwrap(), "--verify-hash"]);
    assert_eq!(intact.status.code(), Some(0), "{}", stderr(&intact));
}

#[tokio::test]
async fn corrupt_lines_are_named_with_their_number_and_reason() {
    let text = record("arithmetic_puzzle", 7).await;
    let lines = text_lines(&text);
    let n = lines.len();
    let with_line = |at: usize, line: &str| {
        let mut edited = lines.clone();
        edited[at] = line.to_owned();
        join_text(&edited)
    };
    let corrupt = |text: &str| match Trajectory::parse(text) {
        Err(TrajectoryError::Corrupt { line, message }) => (line, message),
        other => panic!("not reported as corrupt: {other:?}"),
    };
    assert_eq!(
        corrupt(&with_line(2, "{\"type\":\"event\"}")),
        (
            3,
            "unknown line type \"event\" (expected call or footer)".to_owned()
        )
    );
    assert_eq!(
        corrupt(&with_line(2, "{\"index\":1}")),
        (3, "the line has no \"type\"".to_owned())
    );
    assert_eq!(
        corrupt(&with_line(2, &lines[0])),
        (3, "a second header".to_owned())
    );
    let (line, message) = corrupt(&with_line(
        3,
        &lines[3].replace("\"reward\":", "\"reward\":\"x\",\"_\":"),
    ));
    assert_eq!(line, 4);
    assert!(
        message.starts_with("the step result: invalid type: string \"x\", expected f64"),
        "{message}"
    );
    let (line, message) = corrupt(&with_line(
        n - 1,
        &lines[n - 1].replace("\"total_reward\":0.9", "\"total_reward\":\"lots\""),
    ));
    assert_eq!(line, n);
    assert!(
        message.starts_with(
            "invalid value: string \"lots\", expected a number, \"Infinity\", \"-Infinity\" or \"NaN\""
        ),
        "{message}"
    );
    let mut text = text.clone();
    text.push_str("{\"type\":\"footer\"}\n");
    assert_eq!(
        corrupt(&text),
        (n + 1, "a line follows the footer".to_owned())
    );
    let mut bytes = join_text(&lines[..3]).into_bytes();
    bytes.extend_from_slice(b"{\"type\":\"call\",\xff}\n");
    match Trajectory::read(&bytes[..], u64::MAX) {
        Err(err) => assert_eq!(
            err.to_string(),
            "line 4 is corrupt: not valid UTF-8 (invalid byte at offset 15 of the line)"
        ),
        Ok(_) => panic!("invalid UTF-8 accepted"),
    }
    for blank in ["", "\n\n", "  \n \t\n"] {
        assert_eq!(
            Trajectory::parse(blank).unwrap_err(),
            TrajectoryError::NotATrajectory("the file is empty".to_owned())
        );
    }
    crate::common::fails_with(
        &["replay", "/proc/self/mem"],
        None,
        1,
        "error: /proc/self/mem: cannot read the trajectory: Input/output error",
    );
}
