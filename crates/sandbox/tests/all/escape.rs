//! The escape and abuse corpus (`tests/escape/*.py`): hostile programs, each as an environment.
//! Every one ends in the outcome written by hand beside it (`tests/escape/<name>.expected`)
//! within small limits and its time bound, no host file is read or written, nothing of the host
//! leaks into what the sandbox returns, and the next sandbox in the same process behaves
//! exactly like a fresh one.

use std::path::Path;
use std::time::{Duration, Instant};

use spade_sandbox::{Limits, Runtime, SandboxOptions};

use crate::common::{env_source, escape_programs, runtime};

const CANARY_DIR: &str = "/tmp/spade-escape-canary";
const CANARY: &str = "CANARY-e5c4pe-7f3a91";
const WRITTEN: &str = "/tmp/spade-escape-written";
/// Wall-clock bound of a program unless its expectation says otherwise.
const DEFAULT_SECONDS: f64 = 20.0;

/// A program's expected outcome, from `<name>.expected` (`key: value` lines).
#[derive(Debug, Clone, PartialEq)]
struct Expected {
    /// `load`, `reset`, `step` or `solution`: the call where the program ends (its first
    /// failing call, or `step` when every call succeeds; `solution` is called only when it
    /// is the expected call).
    call: String,
    /// The error kind (`exception`, `out_of_fuel`, ...), or `ok`.
    kind: String,
    /// A substring of the error message, or of the step's observation when `ok`.
    contains: String,
    /// The most wall-clock seconds the whole program may take.
    seconds: f64,
}

impl Expected {
    fn parse(name: &str, text: &str) -> Expected {
        let field = |key: &str| {
            text.lines()
                .find_map(|line| line.strip_prefix(key)?.strip_prefix(": "))
                .map(str::to_owned)
        };
        let required = |value: Option<String>, key: &str| {
            value.unwrap_or_else(|| panic!("{name}.expected lacks `{key}: ...`"))
        };
        Expected {
            call: required(field("call"), "call"),
            kind: required(field("kind"), "kind"),
            contains: required(field("contains"), "contains"),
            seconds: field("seconds").map_or(DEFAULT_SECONDS, |s| s.parse().unwrap()),
        }
    }
}

/// How a program actually ended.
#[derive(Debug)]
struct Outcome {
    call: &'static str,
    kind: String,
    text: String,
}

fn escape_limits() -> Limits {
    Limits {
        fuel_per_call: 300_000_000,
        load_fuel: 4_000_000_000,
        memory_limit: 128 << 20,
        call_deadline: Duration::from_secs(30),
        output_limit: 64 << 10,
        ..Limits::default()
    }
}

/// Runs one program: load, `reset(seed=1)`, `step("\boxed{1}")`, and `solution()` when that is
/// the expected call. Returns the outcome and all the text the sandbox gave back.
async fn run_program(runtime: &Runtime, source: &str, with_solution: bool) -> (Outcome, String) {
    let mut all_text = String::new();
    let failed = |call: &'static str, err: spade_sandbox::CallError| Outcome {
        call,
        kind: err.kind().as_str().to_owned(),
        text: err.to_string(),
    };
    let mut sandbox = match runtime.sandbox(source, SandboxOptions::seeded(1)).await {
        Ok(s) => s,
        Err(err) => {
            let outcome = failed("load", err);
            let text = outcome.text.clone();
            return (outcome, text);
        }
    };
    match sandbox.reset(Some(1)).await {
        Ok(reset) => all_text.push_str(&reset.observation),
        Err(err) => {
            let outcome = failed("reset", err);
            let text = outcome.text.clone();
            return (outcome, text);
        }
    }
    let result = sandbox.step("\\boxed{1}").await;
    let output = sandbox.last_output().clone();
    all_text.push_str(&output.stdout);
    all_text.push_str(&output.stderr);
    let step = match result {
        Ok(step) => step,
        Err(err) => {
            let outcome = failed("step", err);
            all_text.push_str(&outcome.text);
            return (outcome, all_text);
        }
    };
    all_text.push_str(&step.observation);
    all_text.push_str(&step.info);
    if with_solution && let Err(err) = sandbox.solution().await {
        let outcome = failed("solution", err);
        all_text.push_str(&outcome.text);
        return (outcome, all_text);
    }
    let outcome = Outcome {
        call: "step",
        kind: "ok".to_owned(),
        text: step.observation,
    };
    (outcome, all_text)
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

#[tokio::test]
async fn every_hostile_program_ends_in_its_expected_outcome() {
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
    let programs = escape_programs();
    assert!(programs.len() >= 70, "only {} programs", programs.len());
    let mut failures = Vec::new();
    for (name, path) in &programs {
        let source = std::fs::read_to_string(path).unwrap();
        let expected_path = path.with_extension("expected");
        let Ok(expected) = std::fs::read_to_string(&expected_path) else {
            failures.push(format!("{name}: no {name}.expected beside it"));
            continue;
        };
        let want = Expected::parse(name, &expected);
        let started = Instant::now();
        let (outcome, text) = run_program(&runtime, &source, want.call == "solution").await;
        let seconds = started.elapsed().as_secs_f64();
        if seconds > want.seconds {
            failures.push(format!(
                "{name}: took {seconds:.1}s, more than its {}s",
                want.seconds
            ));
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
        if want.call != outcome.call || want.kind != outcome.kind {
            failures.push(format!(
                "{name}: expected {} at {}, got {} at {}: {}",
                want.kind,
                want.call,
                outcome.kind,
                outcome.call,
                short(&outcome.text)
            ));
        } else if !outcome.text.contains(&want.contains) {
            failures.push(format!(
                "{name}: outcome lacks {:?}:\n{}",
                want.contains,
                short(&outcome.text)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// At most 2,000 characters of `text`, for failure messages.
fn short(text: &str) -> String {
    text.chars().take(2000).collect()
}
