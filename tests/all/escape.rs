//! The escape and abuse corpus (`tests/escape/*.py`): hostile programs, each as an environment.
//! Every one ends in its expected typed outcome (`tests/escape/expected.json`) within small
//! limits, no host file is read or written, nothing of the host leaks into what the sandbox
//! returns, and the next sandbox in the same process behaves exactly like a fresh one.
//! Regenerate the table with `SPADE_BLESS=1 cargo test --test all escape::` and review it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use spade_runtime::{Limits, Runtime, SandboxOptions};

use crate::common::{env_source, repo_root, runtime};

const CANARY_DIR: &str = "/tmp/spade-escape-canary";
const CANARY: &str = "CANARY-e5c4pe-7f3a91";
const WRITTEN: &str = "/tmp/spade-escape-written";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Expected {
    /// `load`, `reset` or `step`: the call where the program ends (its first failing call,
    /// or `step` when every call succeeds).
    call: String,
    /// The error kind (`exception`, `out_of_fuel`, ...), or `ok`.
    kind: String,
    /// A substring of the error message, or of the step's observation when `ok`.
    contains: String,
}

fn escape_dir() -> PathBuf {
    repo_root().join("tests").join("escape")
}

fn escape_limits() -> Limits {
    Limits {
        fuel_per_call: 300_000_000,
        load_fuel: 4_000_000_000,
        memory_limit: 128 << 20,
        call_deadline: Duration::from_secs(30),
        output_limit: 64 << 10,
    }
}

/// Runs one program: load, `reset(seed=1)`, `step("\boxed{1}")`. Returns the outcome and all
/// the text the sandbox gave back.
async fn run_program(runtime: &Runtime, source: &str) -> (Expected, String) {
    let mut all_text = String::new();
    let outcome = |call: &str, kind: &str, text: &str| Expected {
        call: call.to_owned(),
        kind: kind.to_owned(),
        contains: text.to_owned(),
    };
    let mut sandbox = match runtime.sandbox(source, SandboxOptions::seeded(1)).await {
        Ok(s) => s,
        Err(err) => {
            let message = err.to_string();
            return (outcome("load", err.kind().as_str(), &message), message);
        }
    };
    match sandbox.reset(Some(1)).await {
        Ok(reset) => all_text.push_str(&reset.observation),
        Err(err) => {
            let message = err.to_string();
            return (outcome("reset", err.kind().as_str(), &message), message);
        }
    }
    let result = sandbox.step("\\boxed{1}").await;
    let output = sandbox.last_output().clone();
    all_text.push_str(&output.stdout);
    all_text.push_str(&output.stderr);
    match result {
        Ok(step) => {
            all_text.push_str(&step.observation);
            all_text.push_str(&step.info);
            (outcome("step", "ok", &step.observation), all_text)
        }
        Err(err) => {
            let message = err.to_string();
            all_text.push_str(&message);
            (outcome("step", err.kind().as_str(), &message), all_text)
        }
    }
}

/// What a fresh sandbox of a good environment returns; every sandbox after a hostile one must
/// return exactly this.
async fn baseline(runtime: &Runtime) -> (String, String, f64, u64) {
    let mut sandbox = runtime
        .sandbox(&env_source("arithmetic_puzzle"), SandboxOptions::seeded(3))
        .await
        .unwrap();
    let reset = sandbox.reset(Some(3)).await.unwrap();
    let step = sandbox.step("\\boxed{100}").await.unwrap();
    (
        reset.observation,
        step.observation,
        step.reward,
        sandbox.last_fuel(),
    )
}

/// The shortest stable part of an outcome to expect: the last line of an error, the start of
/// an observation.
fn summary(outcome: &Expected) -> String {
    let text = if outcome.kind == "ok" {
        outcome.contains.lines().next().unwrap_or("")
    } else {
        outcome
            .contains
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
    };
    text.chars().take(60).collect()
}

fn programs() -> Vec<(String, PathBuf)> {
    let mut names: Vec<(String, PathBuf)> = std::fs::read_dir(escape_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .map(|p| (p.file_stem().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn every_hostile_program_ends_in_its_expected_outcome() {
    let bless = std::env::var_os("SPADE_BLESS").is_some();
    std::fs::create_dir_all(CANARY_DIR).unwrap();
    std::fs::write(Path::new(CANARY_DIR).join("secret.txt"), CANARY).unwrap();
    std::fs::write(
        Path::new(CANARY_DIR).join("secret.py"),
        format!("SECRET = {CANARY:?}\n"),
    )
    .unwrap();
    let _ = std::fs::remove_file(WRITTEN);
    let _ = std::fs::remove_dir(WRITTEN);
    let host_path = std::env::var("PATH").unwrap_or_default();

    let runtime = runtime().with_limits(escape_limits());
    let fresh = baseline(&runtime).await;
    let expected_path = escape_dir().join("expected.json");
    let expected: BTreeMap<String, Expected> = if bless {
        BTreeMap::new()
    } else {
        serde_json::from_str(&std::fs::read_to_string(&expected_path).unwrap()).unwrap()
    };
    let programs = programs();
    assert!(programs.len() >= 40, "only {} programs", programs.len());
    let mut blessed = BTreeMap::new();
    let mut failures = Vec::new();
    for (name, path) in &programs {
        let source = std::fs::read_to_string(path).unwrap();
        let started = Instant::now();
        let (outcome, text) = run_program(&runtime, &source).await;
        let seconds = started.elapsed().as_secs_f64();
        if seconds > 20.0 {
            failures.push(format!("{name}: took {seconds:.1}s"));
        }
        if text.contains(CANARY) {
            failures.push(format!("{name}: ESCAPE: the host canary file was read"));
        }
        if !host_path.is_empty() && text.contains(&host_path) {
            failures.push(format!("{name}: ESCAPE: the host PATH leaked"));
        }
        if Path::new(WRITTEN).exists() {
            failures.push(format!("{name}: ESCAPE: wrote {WRITTEN} on the host"));
            let _ = std::fs::remove_file(WRITTEN);
            let _ = std::fs::remove_dir(WRITTEN);
        }
        // The next sandbox in the same process is unaffected.
        if baseline(&runtime).await != fresh {
            failures.push(format!("{name}: the next sandbox behaves differently"));
        }
        if bless {
            blessed.insert(
                name.clone(),
                Expected {
                    contains: summary(&outcome),
                    ..outcome
                },
            );
            continue;
        }
        match expected.get(name) {
            None => failures.push(format!("{name}: not in expected.json (bless and review)")),
            Some(want) => {
                if want.call != outcome.call || want.kind != outcome.kind {
                    failures.push(format!(
                        "{name}: expected {} at {}, got {} at {}: {}",
                        want.kind, want.call, outcome.kind, outcome.call, outcome.contains
                    ));
                } else if !outcome.contains.contains(&want.contains) {
                    failures.push(format!(
                        "{name}: outcome lacks {:?}:\n{}",
                        want.contains, outcome.contains
                    ));
                }
            }
        }
    }
    if bless {
        let text = serde_json::to_string_pretty(&blessed).unwrap();
        std::fs::write(&expected_path, text + "\n").unwrap();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
