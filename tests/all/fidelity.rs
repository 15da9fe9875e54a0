//! Fidelity with CPython: each fixture environment, played under the machine's `python3` with
//! the same prelude, seed and actions, gives the same observations, rewards, flags and infos as
//! in the sandbox. Known differences of RustPython are pinned in `known_differences`, and listed
//! in docs/fidelity.md.

use std::process::Command;

use serde_json::Value;
use spade_sandbox::{PRELUDE_MODULES, SandboxOptions};

use crate::common::{env_dir, fixtures, repo_root, runtime, spade, stderr, stdout};

fn python_transcript(name: &str, seed: u64) -> Vec<Value> {
    let prelude = tempfile::tempdir().unwrap();
    for (module, source) in PRELUDE_MODULES {
        std::fs::write(prelude.path().join(format!("{module}.py")), source).unwrap();
    }
    let dir = env_dir(name);
    let output = Command::new("python3")
        .arg(repo_root().join("tests/fidelity/driver.py"))
        .arg(prelude.path())
        .arg(dir.join("env.py"))
        .arg(seed.to_string())
        .arg(dir.join("actions.txt"))
        .output()
        .expect("python3 is needed for the fidelity tests");
    assert!(
        output.status.success(),
        "{name}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout(&output)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn sandbox_transcript(name: &str, seed: u64) -> Vec<Value> {
    let dir = env_dir(name);
    let seed = seed.to_string();
    let output = spade(&[
        "run",
        dir.join("env.py").to_str().unwrap(),
        "--seed",
        &seed,
        "--actions",
        dir.join("actions.txt").to_str().unwrap(),
        "--json",
    ]);
    assert!(output.status.success(), "{name}: {}", stderr(&output));
    stdout(&output)
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let object = v.as_object_mut().unwrap();
            object.remove("fuel");
            object.remove("stdout");
            v
        })
        .filter(|v| v["call"] != "end")
        .collect()
}

#[test]
fn fixture_envs_match_cpython() {
    for name in fixtures(false) {
        if name == "nondeterminism" || name == "print_flood" {
            continue; // covered by known_differences / prints only
        }
        for seed in [7, 8, 9] {
            let cpython = python_transcript(&name, seed);
            let sandbox = sandbox_transcript(&name, seed);
            assert_eq!(
                cpython.len(),
                sandbox.len(),
                "{name} seed {seed}: number of calls"
            );
            for (c, s) in cpython.iter().zip(&sandbox) {
                assert_eq!(c, s, "{name} seed {seed}: CPython and the sandbox differ");
            }
        }
    }
}

/// Evaluates `expr` under CPython (PYTHONHASHSEED=0, like the sandbox's fixed hash seed) and in
/// the sandbox.
async fn both(expr: &str) -> (String, String) {
    let program = format!("import random, json, math\nrandom.seed(7)\nprint(repr({expr}))");
    let output = Command::new("python3")
        .arg("-c")
        .arg(&program)
        .env("PYTHONHASHSEED", "0")
        .output()
        .unwrap();
    let cpython = String::from_utf8(output.stdout)
        .unwrap()
        .trim_end()
        .to_owned();
    let source = format!(
        "class ProbeEnv:\n    def reset(self, seed=None):\n        random.seed(7)\n        return repr({expr}), {{}}\n    def step(self, action):\n        return '', 0.0, True, False, {{}}\n"
    );
    let mut sandbox = runtime()
        .sandbox(&source, SandboxOptions::seeded(0))
        .await
        .unwrap();
    (cpython, sandbox.reset(None).await.unwrap().observation)
}

#[tokio::test]
async fn common_operations_match_cpython() {
    for expr in [
        "[random.random() for _ in range(3)]",
        "[random.randint(1, 100) for _ in range(5)]",
        "random.sample(range(100), 5)",
        "random.choice('abcdef') + str(random.uniform(0, 1)) + str(random.gauss(0, 1))",
        "(lambda l: (random.shuffle(l), l)[1])(list(range(10)))",
        "[0.1 + 0.2, 1e16, 1.5e-7, 2.0 ** 0.5, 10 / 3, round(2.675, 2), float('inf')]",
        "'{:.3f} {:e} {:g} {:,}'.format(math.pi, 12345.678, 0.0001, 1234567)",
        "json.dumps({'b': 1, 'a': [1.5, None, True], 'c': 'é'})",
        "sorted({'b': 2, 'a': 1}.items())",
        "' Hello World '.strip().title().swapcase().split()",
        "'abc'.center(9, '*') + 'x'.zfill(4) + 'a,b,,c'.split(',')[2] + 'ß'.upper()",
        "(7 // -2, -7 % 3, divmod(17, 5), 2 ** 100, int('0x1f', 16))",
        "list(dict.fromkeys([3, 1, 3, 2]))",
    ] {
        let (cpython, sandbox) = both(expr).await;
        assert_eq!(cpython, sandbox, "{expr}");
    }
}

#[tokio::test]
async fn known_differences() {
    // RustPython's str hash with a fixed seed differs from CPython's with PYTHONHASHSEED=0, so
    // iteration order of sets of strings differs. Environments that print a set of strings
    // (rather than sorting it) are not reproducible across the two; see docs/fidelity.md.
    let (cpython, sandbox) = both("hash('x')").await;
    assert_ne!(
        cpython, sandbox,
        "if this now matches, update docs/fidelity.md"
    );
    // RustPython's sets iterate in insertion order; CPython's in hash-table order.
    let (cpython, sandbox) = both("list(set(x for x in [5, 3, 1, 4]))").await;
    assert_eq!(
        (cpython.as_str(), sandbox.as_str()),
        ("[1, 3, 4, 5]", "[5, 3, 1, 4]")
    );
    // Sorting, or dicts (insertion-ordered in both), give the same result.
    let (cpython, sandbox) =
        both("(sorted({5, 3, 1, 4}), list(dict.fromkeys([5, 3, 1, 4])))").await;
    assert_eq!(cpython, sandbox);
}
