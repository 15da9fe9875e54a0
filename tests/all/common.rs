//! Helpers shared by the test modules.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

use spade_runtime::{Config, Limits, Runtime};
use spade_trainer::load::LoadedModel;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `tests/envs/<name>`.
pub fn env_dir(name: &str) -> PathBuf {
    repo_root().join("tests").join("envs").join(name)
}

/// The source of fixture `name`.
pub fn env_source(name: &str) -> String {
    std::fs::read_to_string(env_dir(name).join("env.py")).unwrap()
}

/// The fixture's action lines.
pub fn env_actions(name: &str) -> Vec<String> {
    std::fs::read_to_string(env_dir(name).join("actions.txt"))
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Fixture names with the given prefix (or all good ones when `faults` is false).
pub fn fixtures(faults: bool) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(repo_root().join("tests").join("envs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("fault_") == faults)
        .collect();
    names.sort();
    names
}

/// Limits small enough that fault tests finish quickly.
pub fn test_limits() -> Limits {
    Limits {
        fuel_per_call: 1_000_000_000,
        load_fuel: 4_000_000_000,
        memory_limit: 128 << 20,
        call_deadline: Duration::from_secs(60),
        output_limit: 64 << 10,
        ..Limits::default()
    }
}

/// One runtime per test process (building it maps the cached artifact).
pub fn runtime() -> Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME
        .get_or_init(|| Runtime::new(Config::default()).expect("runtime"))
        .with_limits(test_limits())
}

/// Runs the `spade` binary with `args` from the repository root.
pub fn spade(args: &[&str]) -> Output {
    spade_with_stdin(args, None)
}

/// Runs `spade` and checks that it exits with `code` and says `message` on stderr.
pub fn fails_with(args: &[&str], stdin: Option<&[u8]>, code: i32, message: &str) {
    let output = spade_with_stdin(args, stdin);
    assert_eq!(
        output.status.code(),
        Some(code),
        "{args:?}: {}",
        stderr(&output)
    );
    assert!(
        stderr(&output).contains(message),
        "{args:?}: expected {message:?} in:\n{}",
        stderr(&output)
    );
}

/// Runs `spade` with `stdin` piped in.
pub fn spade_with_stdin(args: &[&str], stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_spade"))
        .args(args)
        .current_dir(repo_root())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning spade");
    if let Some(input) = stdin {
        child.stdin.take().unwrap().write_all(input).unwrap();
    }
    child.wait_with_output().unwrap()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// A tiny byte-level ChatML model with random weights (seeded), optionally with a longer context.
pub fn tiny_chat_model(seed: u64, max_position_embeddings: Option<usize>) -> LoadedModel {
    use candle_core::Device;
    use spade_trainer::chat::ChatTemplate;
    use spade_trainer::model::{Config, Decoder};
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .map(String::from)
        .to_vec();
    let mut bytes: Vec<char> = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet()
        .into_iter()
        .collect();
    bytes.sort();
    tokens.extend(bytes.iter().map(|c| c.to_string()));
    let tok = byte_level_tokenizer(&tokens, Vec::new());
    let mut cfg = Config::tiny("llama");
    cfg.vocab_size = tokens.len();
    if let Some(n) = max_position_embeddings {
        cfg.max_position_embeddings = n;
    }
    let (model, varmap) = Decoder::random(&cfg, seed, 0.2, &Device::Cpu).unwrap();
    let chat = ChatTemplate::ChatMl {
        default_system: None,
    };
    LoadedModel::new(cfg.clone(), model, varmap, tok, chat, cfg.eos_ids())
}

/// A byte-level BPE tokenizer over `tokens` (ids in order) with `merges` and the three ChatML
/// special tokens, as the tiny test models use.
pub fn byte_level_tokenizer(
    tokens: &[String],
    merges: Vec<(String, String)>,
) -> tokenizers::Tokenizer {
    use tokenizers::models::bpe::{BPE, Vocab};
    let vocab: Vocab = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), i as u32))
        .collect();
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, merges)
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
    tok
}
