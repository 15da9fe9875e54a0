//! Environments that are packages: a directory of modules with an entry point
//! (`--package DIR module:Class`, fixture `tests/packages/counting/`), and RLVE's environments
//! (`rlve:Name`), compared with RLVE itself under CPython (`tests/rlve/reference.py`, run by the
//! CI venv, which has `rlve-gym`).

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;
use spade_envtools::package::rlve;
use spade_sandbox::{Config, Runtime, SandboxOptions};

use crate::common::{fails_with, repo_root, spade, spade_with_stdin, stderr, stdout};
use crate::serve::harness::python;

const PKG: &str = "tests/packages/counting";
/// One action, from a file: a failing `spade run` may exit before it reads standard input.
const ACTIONS: &str = "tests/packages/one-action.txt";

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_package_entry_point_imports_its_modules_and_plays() {
    // `\boxed{2}` is below the smallest target (3), so the game says "higher"; the reset's
    // info names the entry module as the package names it.
    let out = spade_with_stdin(
        &[
            "run",
            "--package",
            PKG,
            "games.counter:Counter",
            "--seed",
            "4",
            "--json",
            "--actions",
            "-",
        ],
        Some(b"\\boxed{2}\nnot a number\n"),
    );
    let lines = json_lines(&stdout(&out));
    assert_eq!(lines[0]["class"], "CounterEnv", "{}", stderr(&out));
    assert_eq!(
        lines[1]["observation"],
        "counting: guess a number from 3 to 9"
    );
    assert_eq!(lines[1]["info"]["module"], "games.counter");
    assert_eq!(lines[2]["observation"], "higher");
    assert_eq!(lines[3]["observation"], "invalid");
    // Its solution wins: `spade check` accepts it.
    let check = spade(&[
        "check",
        "--package",
        PKG,
        "games.counter:Counter",
        "--out",
        "target/tmp/pkg-check",
    ]);
    assert!(
        check.status.success(),
        "{}{}",
        stdout(&check),
        stderr(&check)
    );
    assert!(
        stdout(&check).starts_with("ACCEPT games.counter:Counter (CounterEnv)"),
        "{}",
        stdout(&check)
    );
}

#[test]
fn a_package_plays_the_same_from_a_snapshot_and_replays_from_its_trajectory() {
    let dir = repo_root().join("target/tmp/packages-replay");
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("counter.jsonl");
    let args = |extra: &[&str]| {
        let mut a = vec![
            "run",
            "--package",
            PKG,
            "games.counter:Counter",
            "--seed",
            "9",
            "--json",
            "--actions",
            "-",
        ];
        a.extend_from_slice(extra);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let input = b"\\boxed{4}\n\\boxed{6}\n\\boxed{8}\n";
    let run = |a: Vec<String>| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let out = spade_with_stdin(&a, Some(input));
        stdout(&out)
    };
    let snap = run(args(&["--record", record.to_str().unwrap()]));
    let fresh = run(args(&["--no-snapshots"]));
    // Load fuel differs (a snapshot skips the load); every call after it is the same.
    assert_eq!(
        snap.lines().skip(1).collect::<Vec<_>>(),
        fresh.lines().skip(1).collect::<Vec<_>>()
    );
    // The trajectory holds the bundled source: it replays without the package directory.
    let replay = spade(&["replay", record.to_str().unwrap()]);
    assert!(
        replay.status.success(),
        "{}{}",
        stdout(&replay),
        stderr(&replay)
    );
}

#[test]
fn a_traceback_from_a_package_module_names_its_file() {
    let out = spade_with_stdin(
        &[
            "run",
            "--package",
            PKG,
            "games.broken:Broken",
            "--actions",
            "-",
        ],
        Some(b"x\n"),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("File \"games/broken.py\", line 2, in explode"),
        "{err}"
    );
    assert!(
        err.contains("ValueError: broken inside the package"),
        "{err}"
    );
}

#[test]
fn package_errors_say_what_is_wrong() {
    let nope = [
        "run",
        "--package",
        PKG,
        "games.nope:X",
        "--actions",
        ACTIONS,
    ];
    fails_with(
        &nope,
        None,
        1,
        "the package has no module 'games.nope' (it has: games, games.broken, games.counter, games.rules, scoring)",
    );
    let no_colon = [
        "run",
        "--package",
        PKG,
        "games/counter.py",
        "--actions",
        ACTIONS,
    ];
    fails_with(
        &no_colon,
        None,
        1,
        "with --package, the environment is an entry point `module:Class`",
    );
    let missing = [
        "run",
        "--package",
        "tests/packages/none",
        "a:B",
        "--actions",
        ACTIONS,
    ];
    fails_with(&missing, None, 1, "cannot read 'tests/packages/none'");
    let file = [
        "run",
        "--package",
        "tests/packages/counting/scoring.py",
        "a:B",
        "--actions",
        ACTIONS,
    ];
    fails_with(
        &file,
        None,
        1,
        "is not a directory: --package takes the directory that holds the modules",
    );
    let both = ["check", "--package", PKG, "rlve:Sorting"];
    fails_with(&both, None, 1, "'rlve:Sorting' names an RLVE environment");
    // The package directory alone (`games/`): `scoring` beside it is not part of the bundle,
    // and the sandbox says it is missing as it does for any module it lacks.
    let alone = [
        "run",
        "--package",
        "tests/packages/counting/games",
        "games.counter:Counter",
        "--actions",
        ACTIONS,
    ];
    fails_with(
        &alone,
        None,
        2,
        "No module named 'scoring': the spade sandbox provides only the Python standard library",
    );
}

/// The directory holding the CI venv's `Gym` (RLVE).
pub(crate) fn rlve_root() -> PathBuf {
    let out = Command::new(python())
        .args([
            "-c",
            "import Gym, os; print(os.path.dirname(os.path.dirname(Gym.__file__)))",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// The reference's fixed-env list (official16) less ShortestPath, which imports networkx.
const OFFICIAL: &[&str] = &[
    "Division",
    "EuclidGame",
    "GCDOne_Counting",
    "HamiltonianPath",
    "LampChanging",
    "LargestConvexPolygon",
    "Multiplication",
    "PCPPermutation",
    "Path_NoGoingBack_Counting",
    "SAT",
    "Sorting",
    "SpiralMatrix",
    "SubsequenceReversalLNDS",
    "UndamagedSubmatrixCounting",
    "WYRLevelingGround",
];

/// Environments whose problems differ from CPython's for the same seed, and why: all three
/// build a problem by iterating a `set` of tuples (remaining edges, points), whose order follows
/// the hash of a tuple. RustPython hashes tuples differently from CPython (`hash((1, 2))` is
/// -4718161289843938163 in the sandbox and -3550055125485641917 in CPython 3.11), so the same
/// draws land on other edges or points. The problems are still RLVE's (same generator, same
/// verdicts) and still deterministic in spade; they are other instances.
const KNOWN_DIFFERENCES: &[&str] = &[
    "HamiltonianPath",
    "LargestConvexPolygon",
    "Path_NoGoingBack_Counting",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlve_problems_and_verdicts_match_rlve_under_cpython() {
    let root = rlve_root();
    let specs: Vec<(String, u64, u64)> = OFFICIAL
        .iter()
        .flat_map(|n| [(0, 0), (7, 2), (123, 5)].map(|(s, d)| (n.to_string(), s, d)))
        .collect();
    let args: Vec<String> = specs
        .iter()
        .map(|(n, s, d)| format!("{n}:{s}:{d}"))
        .collect();
    let out = Command::new(python())
        .arg(repo_root().join("tests/rlve/reference.py"))
        .args(&args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reference = json_lines(&String::from_utf8(out.stdout).unwrap());
    let runtime = Runtime::new(Config::default()).unwrap();
    let mut differs = std::collections::BTreeSet::<&str>::new();
    for ((name, seed, difficulty), want) in specs.iter().zip(&reference) {
        let source = rlve::source(&root, name).unwrap();
        let mut fields = serde_json::Map::new();
        fields.insert("difficulty".into(), (*difficulty).into());
        let fields = spade_sandbox::ExtraFields::from_map(&fields);
        let play = |action: String| {
            let (runtime, source, fields) = (&runtime, &source, &fields);
            async move {
                let mut sb = runtime
                    .sandbox(source, SandboxOptions::seeded(*seed))
                    .await
                    .unwrap();
                let (reset, dropped) = sb.reset_with(Some(*seed), fields).await.unwrap();
                assert!(dropped.is_empty());
                let step = sb.step(&action).await.unwrap();
                (reset, step)
            }
        };
        let answer = want["answer"].as_str().unwrap();
        let (reset, step) = play(format!("So the answer is \\boxed{{{answer}}}.")).await;
        let spec = &want["spec"];
        if reset.observation != want["prompt"].as_str().unwrap() {
            differs.insert(name.as_str());
            continue;
        }
        let info: Value = serde_json::from_str(&reset.info).unwrap();
        assert_eq!(info["difficulty"], *difficulty, "{spec}");
        // RLVE's verdict on its own reference answer, as spade's reward (1 win, 0 otherwise).
        let wins = want["answer_wins"].as_bool().unwrap();
        assert_eq!(
            step.reward,
            if wins { 1.0 } else { 0.0 },
            "{spec}: {}",
            step.observation
        );
        assert!(step.terminated, "{spec}");
        let (_, wrong) = play("\\boxed{not the answer}".into()).await;
        assert_eq!(wrong.reward, 0.0, "{spec}");
        assert_eq!(
            wrong.observation,
            format!("Incorrect. The answer was: {answer}"),
            "{spec}"
        );
    }
    let expected: std::collections::BTreeSet<&str> = KNOWN_DIFFERENCES.iter().copied().collect();
    assert_eq!(
        differs, expected,
        "environments whose problems differ from CPython's"
    );
}

#[test]
fn rlve_check_accepts_an_official_environment_through_the_cli() {
    let out = Command::new(env!("CARGO_BIN_EXE_spade"))
        .args([
            "check",
            "rlve:Multiplication",
            "--out",
            "target/tmp/rlve-check",
        ])
        .env("SPADE_PYTHON", python())
        .env_remove(rlve::RLVE_DIR_ENV)
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(
        stdout(&out).starts_with("ACCEPT rlve:Multiplication (MultiplicationEnv)"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn rlve_errors_say_what_is_wrong() {
    let root = rlve_root();
    let e = rlve::source(&root, "Multiplcation")
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("RLVE has no environment 'Multiplcation' (it has 400 environments"),
        "{e}"
    );
    let e = rlve::source(&root, "Sort").unwrap_err().to_string();
    assert!(e.contains("similar: ") && e.contains("Sorting"), "{e}");
    // A directory that is not RLVE's, named by the environment variable.
    let out = Command::new(env!("CARGO_BIN_EXE_spade"))
        .args(["check", "rlve:Sorting"])
        .env(rlve::RLVE_DIR_ENV, "tests/packages")
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("SPADE_RLVE_DIR=tests/packages, but tests/packages holds no Gym/environments/__init__.py"), "{}", stderr(&out));
    // A Python that cannot import Gym (`false` exits 1), and one that does not exist.
    for (python, why) in [
        ("false", "false cannot import it"),
        ("no-such-python", "cannot run no-such-python"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_spade"))
            .args(["check", "rlve:Sorting"])
            .env("SPADE_PYTHON", python)
            .env_remove(rlve::RLVE_DIR_ENV)
            .current_dir(repo_root())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        let err = stderr(&out);
        assert!(
            err.contains(&format!("RLVE's `Gym` package was not found ({why}")),
            "{err}"
        );
        assert!(
            err.contains("install it with `pip install rlve-gym`"),
            "{err}"
        );
    }
    // `--difficulty` on an environment whose reset takes none.
    fails_with(
        &[
            "run",
            "tests/envs/grid_walk/env.py",
            "--difficulty",
            "1",
            "--actions",
            ACTIONS,
        ],
        None,
        1,
        "--difficulty: this environment's reset() takes no `difficulty` argument",
    );
}

#[tokio::test]
async fn rlve_adapter_refuses_a_bad_difficulty_and_names_numpy_when_an_env_needs_it() {
    let root = rlve_root();
    let runtime = Runtime::new(Config::default()).unwrap();
    let sorting = rlve::source(&root, "Sorting").unwrap();
    let mut sb = runtime
        .sandbox(&sorting, SandboxOptions::seeded(1))
        .await
        .unwrap();
    let mut fields = serde_json::Map::new();
    fields.insert("difficulty".into(), (-1).into());
    let e = sb
        .reset_with(Some(1), &spade_sandbox::ExtraFields::from_map(&fields))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("ValueError: difficulty must be an integer >= 0, not -1"),
        "{e}"
    );
    let magic = rlve::source(&root, "MagicSquarePuzzle").unwrap();
    let mut sb = runtime
        .sandbox(&magic, SandboxOptions::seeded(1))
        .await
        .unwrap();
    let e = sb.reset(Some(1)).await.unwrap_err().to_string();
    assert!(
        e.contains("AttributeError: numpy.zeros: numpy is not available in the spade sandbox"),
        "{e}"
    );
}
