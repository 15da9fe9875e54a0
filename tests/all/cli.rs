//! `spade run`: output, and a clear message for every kind of bad input.

use crate::common::{env_dir, fails_with, spade, spade_with_stdin, stderr, stdout};

fn path(name: &str, file: &str) -> String {
    env_dir(name).join(file).to_str().unwrap().to_owned()
}

#[test]
fn run_prints_observations_rewards_and_flags() {
    let output = spade(&[
        "run",
        &path("arithmetic_puzzle", "env.py"),
        "--seed",
        "7",
        "--actions",
        &path("arithmetic_puzzle", "actions.txt"),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("== reset (seed 7)\nCompute 43 * 21 + 405."),
        "{text}"
    );
    assert!(
        text.contains(
            "== step 3: \\boxed{1308}\nCorrect!\nreward 1  terminated true  truncated false"
        ),
        "{text}"
    );
    assert!(
        text.contains("== episode terminated after 3 steps, total reward 0.9"),
        "{text}"
    );
}

#[test]
fn actions_can_come_from_stdin() {
    let env = path("arithmetic_puzzle", "env.py");
    let piped = spade_with_stdin(
        &["run", &env, "--seed", "7", "--actions", "-", "--json"],
        Some(b"\\boxed{1308}\n"),
    );
    assert!(piped.status.success(), "{}", stderr(&piped));
    assert!(
        stdout(&piped).contains(r#""reward":1.0,"terminated":true"#),
        "{}",
        stdout(&piped)
    );
    let interactive = spade_with_stdin(&["run", &env, "--seed", "7"], Some(b"\\boxed{1}\n"));
    assert!(interactive.status.success(), "{}", stderr(&interactive));
    assert!(
        stdout(&interactive).contains("no more actions after 1 steps"),
        "{}",
        stdout(&interactive)
    );
}

#[test]
fn bad_input_gives_one_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let not_utf8 = dir.path().join("binary.py");
    std::fs::write(&not_utf8, b"abc\xff\xfe").unwrap();
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "\n\n").unwrap();
    let env = path("arithmetic_puzzle", "env.py");
    fails_with(
        &["run", "no/such/env.py"],
        None,
        1,
        "error: environment file 'no/such/env.py' does not exist",
    );
    let dir_str = dir.path().to_str().unwrap();
    fails_with(&["run", dir_str], None, 1, "is a directory, not a file");
    fails_with(
        &["run", not_utf8.to_str().unwrap()],
        None,
        1,
        "is not valid UTF-8 text (invalid byte at offset 3)",
    );
    fails_with(
        &["run", &env, "--actions", empty.to_str().unwrap()],
        None,
        1,
        "is empty (expected one action per line)",
    );
    fails_with(
        &["run", &env, "--actions", "missing.txt"],
        None,
        1,
        "error: actions file 'missing.txt' does not exist",
    );
    fails_with(
        &["run", &env, "--actions", not_utf8.to_str().unwrap()],
        None,
        1,
        "actions file",
    );
    fails_with(
        &["run", &env, "--actions", "-"],
        Some(b""),
        1,
        "no actions on standard input",
    );
    fails_with(
        &["run", &env, "--seed", "minus-one"],
        None,
        1,
        "invalid value 'minus-one' for '--seed <SEED>'",
    );
}

#[test]
fn environment_errors_print_their_kind_and_detail() {
    fails_with(
        &["run", &path("fault_import_numpy", "env.py")],
        None,
        2,
        "error in load: load: import failed: No module named 'numpy'",
    );
    fails_with(
        &["run", &path("fault_reset_raises", "env.py")],
        None,
        2,
        "error in reset: exception: Traceback",
    );
    let output = spade_with_stdin(
        &[
            "run",
            &path("fault_step_four_tuple", "env.py"),
            "--actions",
            "-",
            "--json",
        ],
        Some(b"go\n"),
    );
    assert_eq!(output.status.code(), Some(2));
    let last: serde_json::Value =
        serde_json::from_str(stdout(&output).lines().last().unwrap()).unwrap();
    assert_eq!(last["call"], "step");
    assert_eq!(last["error"]["kind"], "contract");
    assert_eq!(last["action"], "go");
}

#[test]
fn actions_jsonl_plays_multi_line_code_answers_and_tool_calls_to_a_win() {
    let code = spade(&[
        "run",
        &path("code_answer", "env.py"),
        "--seed",
        "7",
        "--actions-jsonl",
        &path("code_answer", "actions.jsonl"),
        "--json",
    ]);
    assert!(code.status.success(), "{}", stderr(&code));
    let lines: Vec<serde_json::Value> = stdout(&code)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines[3]["action"],
        "```python\ndef f(x):\n    y = 7 * x\n    return y + 5\n```"
    );
    assert_eq!(lines[3]["observation"], "All tests pass.");
    assert_eq!(lines[4]["ended"], "terminated");

    let tools = spade(&[
        "run",
        &path("tool_inventory", "env.py"),
        "--seed",
        "7",
        "--actions-jsonl",
        &path("tool_inventory", "actions.jsonl"),
    ]);
    assert!(tools.status.success(), "{}", stderr(&tools));
    let text = stdout(&tools);
    assert!(
        text.contains("== step 1: <tool_call>\n{\n  \"name\": \"get_price\",\n  \"arguments\": {\n    \"item\": \"plum\"\n  }\n}\n</tool_call>\nTool result:\n"),
        "{text}"
    );
    assert!(
        text.contains("Correct!\nreward 1  terminated true  truncated false"),
        "{text}"
    );
    assert!(
        text.contains("== episode terminated after 3 steps, total reward 1"),
        "{text}"
    );

    // The same from standard input, with a blank line between actions.
    let jsonl = std::fs::read_to_string(path("code_answer", "actions.jsonl")).unwrap();
    let piped = spade_with_stdin(
        &[
            "run",
            &path("code_answer", "env.py"),
            "--seed",
            "7",
            "--actions-jsonl",
            "-",
        ],
        Some(jsonl.replacen('\n', "\n\n", 1).as_bytes()),
    );
    assert!(piped.status.success(), "{}", stderr(&piped));
    assert!(
        stdout(&piped).contains("== episode terminated after 2 steps, total reward 1"),
        "{}",
        stdout(&piped)
    );
}

#[test]
fn bad_jsonl_lines_are_reported_with_their_line_number() {
    let env = path("code_answer", "env.py");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("actions.jsonl");
    std::fs::write(&file, "\"\\\\boxed{1}\"\n\n\\boxed{2}\n").unwrap();
    let shown = file.display().to_string();
    fails_with(
        &["run", &env, "--actions-jsonl", &shown],
        None,
        1,
        &format!("error: JSONL actions file '{shown}', line 3: not valid JSON ("),
    );
    fails_with(
        &["run", &env, "--actions-jsonl", "-"],
        Some(b"\"a\"\n[\"b\"]\n"),
        1,
        "error: standard input, line 2: expected a JSON string (one action, e.g. \"\\\\boxed{1}\"), got an array",
    );
    fails_with(
        &["run", &env, "--actions-jsonl", "-"],
        Some(b"\"a\n"),
        1,
        "each line must be one JSON string, with newlines inside an action written as \\n",
    );
    fails_with(
        &["run", &env, "--actions-jsonl", "-"],
        Some(b"\n \n"),
        1,
        "no actions on standard input (expected one JSON string per line)",
    );
    fails_with(
        &["run", &env, "--actions-jsonl", "missing.jsonl"],
        None,
        1,
        "error: JSONL actions file 'missing.jsonl' does not exist",
    );
    fails_with(
        &["run", &env, "--actions", "-", "--actions-jsonl", "-"],
        None,
        1,
        "the argument '--actions <FILE|->' cannot be used with '--actions-jsonl <FILE|->'",
    );
}

#[test]
fn interactive_actions_take_several_lines_between_markers() {
    let env = path("code_answer", "env.py");
    let typed =
        "\\boxed{1}\n<<<\n```python\ndef f(x):\n    y = 7 * x\n    return y + 5\n```\n>>>\n";
    let output = spade_with_stdin(
        &["run", &env, "--seed", "7", "--json"],
        Some(typed.as_bytes()),
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let last: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(last[2]["action"], "\\boxed{1}");
    assert_eq!(
        last[3]["action"],
        "```python\ndef f(x):\n    y = 7 * x\n    return y + 5\n```"
    );
    assert_eq!(last[3]["reward"], 1.0);

    fails_with(
        &["run", &env, "--seed", "7"],
        Some(b"\\boxed{1}\n<<<\ndef f(x):\n"),
        1,
        "error: standard input ended inside the multi-line action started with <<< on line 2 \
         (end it with a line holding only >>>)",
    );
}
