//! The fixture environments in the reference format, played through `spade run --json` and
//! compared with the transcripts beside them (`expected.jsonl`; fuel is left out of the
//! comparison so that guest changes do not churn them, and checked by the determinism tests).
//! Regenerate with `SPADE_BLESS=1 cargo test --test all envs::`.

use serde_json::Value;
use spade_sandbox::SandboxOptions;

use crate::common::{env_dir, env_source, fixtures, runtime, spade, stdout};

/// Fixtures whose transcript is compared. print_flood's output is tested on its own;
/// nondeterminism shows `id()` values, which depend on the guest build's heap layout (its
/// determinism across processes is tested in `determinism`).
fn transcript_fixtures() -> Vec<String> {
    fixtures(false)
        .into_iter()
        .filter(|n| n != "print_flood" && n != "nondeterminism")
        .collect()
}

fn without_fuel(line: &str) -> Value {
    let mut value: Value = serde_json::from_str(line).unwrap();
    value.as_object_mut().unwrap().remove("fuel");
    value
}

#[test]
fn fixtures_match_their_expected_transcripts() {
    let bless = std::env::var_os("SPADE_BLESS").is_some();
    for name in transcript_fixtures() {
        let dir = env_dir(&name);
        let env = dir.join("env.py");
        let actions = dir.join("actions.txt");
        let output = spade(&[
            "run",
            env.to_str().unwrap(),
            "--seed",
            "7",
            "--actions",
            actions.to_str().unwrap(),
            "--json",
        ]);
        assert!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let got: Vec<Value> = stdout(&output).lines().map(without_fuel).collect();
        let expected_path = dir.join("expected.jsonl");
        if bless {
            let text: String = got.iter().map(|v| format!("{v}\n")).collect();
            std::fs::write(&expected_path, text).unwrap();
            continue;
        }
        let expected: Vec<Value> = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|_| panic!("{name}: no expected.jsonl (run with SPADE_BLESS=1)"))
            .lines()
            .map(without_fuel)
            .collect();
        assert_eq!(got.len(), expected.len(), "{name}: number of calls");
        for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
            assert_eq!(g, e, "{name}: call {i} differs");
        }
    }
}

#[tokio::test]
async fn single_answer_puzzle_rewards_the_solution() {
    let mut sandbox = runtime()
        .sandbox(&env_source("arithmetic_puzzle"), SandboxOptions::seeded(3))
        .await
        .unwrap();
    assert_eq!(sandbox.info().class_name, "ArithmeticPuzzleEnv");
    assert_eq!(sandbox.info().max_turns, Some(3));
    sandbox.reset(Some(3)).await.unwrap();
    let answer = sandbox.solution().await.unwrap();
    let wrong = sandbox.step("\\boxed{-1}").await.unwrap();
    assert_eq!((wrong.reward, wrong.terminated), (0.0, false));
    let right = sandbox.step(&format!("\\boxed{{{answer}}}")).await.unwrap();
    assert_eq!(
        (right.observation.as_str(), right.reward, right.terminated),
        ("Correct!", 1.0, true)
    );
    assert_eq!(right.info, r#"{"valid":true}"#);
}

#[tokio::test]
async fn multi_turn_game_keeps_state_and_truncates_at_max_turns() {
    let options = SandboxOptions {
        seed: 7,
        max_turns: Some(2),
    };
    let mut sandbox = runtime()
        .sandbox(&env_source("grid_walk"), options)
        .await
        .unwrap();
    assert_eq!(sandbox.info().max_turns, Some(2));
    let reset = sandbox.reset(Some(7)).await.unwrap();
    assert!(reset.observation.contains('P') && reset.observation.contains('G'));
    let first = sandbox.step("\\boxed{right}").await.unwrap();
    assert_eq!((first.reward, first.truncated), (0.1, false));
    assert!(first.info.contains(r#""distance":7"#), "{}", first.info);
    let second = sandbox.step("\\boxed{left}").await.unwrap();
    assert_eq!(
        (second.reward, second.terminated, second.truncated),
        (0.0, false, true)
    );
}

#[tokio::test]
async fn tool_use_env_follows_the_base_class_contract() {
    let mut sandbox = runtime()
        .sandbox(&env_source("tool_inventory"), SandboxOptions::seeded(7))
        .await
        .unwrap();
    let info = sandbox.info().clone();
    assert_eq!(info.class_name, "InventoryValueEnv");
    let tools: Value = serde_json::from_str(info.tools.as_deref().unwrap()).unwrap();
    assert_eq!(tools[0]["type"], "function");
    assert_eq!(tools[0]["function"]["name"], "get_price");
    sandbox.reset(Some(7)).await.unwrap();
    let call = sandbox
        .step(r#"<tool_call>{"name": "get_price", "arguments": {"item": "plum"}}</tool_call>"#)
        .await
        .unwrap();
    assert!(
        call.observation.starts_with("Tool result:\n"),
        "{}",
        call.observation
    );
    assert_eq!(call.reward, 0.0);
    let unknown = sandbox
        .step(r#"<tool_call>{"name": "fly", "arguments": {}}</tool_call>"#)
        .await
        .unwrap();
    assert_eq!(
        unknown.observation,
        "Unknown tool 'fly'. Available tools: get_price, get_stock."
    );
    let bad_json = sandbox
        .step("<tool_call>{not json}</tool_call>")
        .await
        .unwrap();
    assert_eq!(bad_json.reward, -0.1);
    assert!(
        bad_json.observation.starts_with("Format error"),
        "{}",
        bad_json.observation
    );
    let raised = sandbox
        .step(r#"<tool_call>{"name": "get_price", "arguments": {"item": "durian"}}</tool_call>"#)
        .await
        .unwrap();
    assert_eq!(
        raised.observation,
        "Error calling get_price: \"unknown item 'durian'\""
    );
    let no_tag = sandbox.step("just text").await.unwrap();
    assert_eq!(no_tag.reward, -0.1);
    let wrong = sandbox.step("<answer>1</answer>").await.unwrap();
    assert_eq!(
        (wrong.observation.as_str(), wrong.reward, wrong.terminated),
        ("Incorrect answer.", 0.0, false)
    );
    let answer = sandbox.solution().await.unwrap();
    let right = sandbox
        .step(&format!("<answer>${answer}</answer>"))
        .await
        .unwrap();
    assert_eq!(
        (
            right.observation.as_str(),
            right.reward,
            right.terminated,
            right.truncated
        ),
        ("Correct!", 1.0, true, false)
    );
}

#[tokio::test]
async fn wrong_final_answer_reveals_the_solution_when_truncated() {
    let options = SandboxOptions {
        seed: 7,
        max_turns: Some(1),
    };
    let mut sandbox = runtime()
        .sandbox(&env_source("tool_inventory"), options)
        .await
        .unwrap();
    sandbox.reset(Some(7)).await.unwrap();
    let answer = sandbox.solution().await.unwrap();
    let step = sandbox.step("<answer>0</answer>").await.unwrap();
    assert!(step.truncated);
    assert_eq!(
        step.observation,
        format!("Incorrect answer.\nThe correct answer was: {answer}")
    );
}

#[tokio::test]
async fn math_verify_decides_equivalent_answers() {
    let mut sandbox = runtime()
        .sandbox(&env_source("fraction_answer"), SandboxOptions::seeded(7))
        .await
        .unwrap();
    sandbox.reset(Some(7)).await.unwrap();
    assert_eq!(sandbox.solution().await.unwrap(), "5/1");
    let latex = sandbox.step("\\boxed{\\frac{10}{2}}").await.unwrap();
    assert_eq!(
        (latex.reward, latex.terminated),
        (1.0, true),
        "{}",
        latex.observation
    );
    let source = r#"
from math_verify import parse, verify
CASES = [("3/4", "\\frac{3}{4}"), ("0.75", "75%"), ("$\\boxed{42}$", "42"), ("(1, 2)", "(1,2)"), ("1,000", "1000")]
class CheckEnv:
    def reset(self, seed=None):
        good = all(verify(parse(a), parse(b)) for a, b in CASES)
        bad = verify(parse("2"), parse("3")) or verify(parse(None), parse("{"))
        return f"{good} {bad}", {}
    def step(self, action):
        return "", 0.0, True, False, {}
"#;
    let mut sandbox = runtime()
        .sandbox(source, SandboxOptions::seeded(0))
        .await
        .unwrap();
    assert_eq!(sandbox.reset(None).await.unwrap().observation, "True False");
}
