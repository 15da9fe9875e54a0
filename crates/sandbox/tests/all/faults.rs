//! Faulty and hostile environments: each ends in its expected typed outcome and message, and
//! the next sandbox in the same process works normally.

use serde::Deserialize;
use spade_sandbox::{CallError, ErrorKind, SandboxOptions};

use crate::common::{env_dir, env_source, fixtures, runtime};

#[derive(Debug, Deserialize)]
struct Expected {
    note: String,
    call: String,
    kind: ErrorKind,
    contains: Vec<String>,
}

async fn failing_call(name: &str, expected: &Expected) -> CallError {
    let runtime = runtime();
    let source = env_source(name);
    let mut sandbox = match runtime.sandbox(&source, SandboxOptions::seeded(7)).await {
        Ok(sandbox) => sandbox,
        Err(err) if expected.call == "load" => return err,
        Err(err) => panic!("{name}: load failed unexpectedly: {err}"),
    };
    assert_ne!(
        expected.call, "load",
        "{name}: load succeeded, expected {:?}",
        expected.kind
    );
    let reset = sandbox.reset(Some(7)).await;
    if expected.call == "reset" {
        return reset.expect_err(&format!("{name}: reset succeeded"));
    }
    reset.unwrap_or_else(|err| panic!("{name}: reset failed unexpectedly: {err}"));
    let err = if expected.call == "solution" {
        sandbox
            .solution()
            .await
            .expect_err(&format!("{name}: solution succeeded"))
    } else {
        sandbox
            .step("\\boxed{1}")
            .await
            .expect_err(&format!("{name}: step succeeded"))
    };
    if err.kills_sandbox() {
        let again = sandbox.step("\\boxed{1}").await.unwrap_err();
        assert_eq!(
            again,
            CallError::Dead(err.kind()),
            "{name}: a dead sandbox must say so"
        );
        assert!(
            again
                .to_string()
                .contains("this sandbox is dead after an earlier"),
            "{again}"
        );
    }
    err
}

#[tokio::test]
async fn every_faulty_env_ends_in_its_typed_outcome() {
    let names = fixtures(true);
    assert!(names.len() >= 15, "fixtures missing: {names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let expected: Expected = serde_json::from_str(
            &std::fs::read_to_string(env_dir(name).join("expected.json")).unwrap(),
        )
        .unwrap();
        let err = failing_call(name, &expected).await;
        let message = err.to_string();
        if err.kind() != expected.kind {
            failures.push(format!(
                "{name} ({}): expected {:?}, got {:?}: {message}",
                expected.note,
                expected.kind,
                err.kind()
            ));
            continue;
        }
        for needle in &expected.contains {
            if !message.contains(needle.as_str()) {
                failures.push(format!("{name}: message lacks {needle:?}:\n{message}"));
            }
        }
        // The process is unharmed: a fresh sandbox of a good environment works.
        let mut fresh = runtime()
            .sandbox(&env_source("arithmetic_puzzle"), SandboxOptions::seeded(1))
            .await
            .unwrap();
        fresh.reset(Some(1)).await.unwrap();
        fresh.step("\\boxed{0}").await.unwrap();
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(
        !std::path::Path::new("/tmp/spade-escape-test").exists(),
        "the sandbox wrote a host file"
    );
}

#[tokio::test]
async fn output_floods_are_captured_and_capped() {
    let runtime = runtime();
    let mut sandbox = runtime
        .sandbox(&env_source("print_flood"), SandboxOptions::seeded(0))
        .await
        .unwrap();
    sandbox.reset(None).await.unwrap();
    assert_eq!(sandbox.last_output().stdout, "reset called\n");
    let step = sandbox.step("go").await.unwrap();
    assert_eq!(step.observation, "flooded");
    let output = sandbox.last_output();
    assert_eq!(output.stdout.len(), runtime.limits().output_limit);
    assert_eq!(
        output.dropped_bytes as usize,
        5000 * 1001 - runtime.limits().output_limit
    );
    assert!(output.stdout.starts_with("spam spam"));
}
