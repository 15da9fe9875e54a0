//! Helpers shared by the test modules: the fixtures (shared with the sandbox's own tests), the
//! `spade` binary, and tiny models.

use std::process::{Command, Output};

use spade_model::load::LoadedModel;
use spade_selfplay::eval::PlaySettings;

#[path = "../support/fixtures.rs"]
mod fixtures;
pub use fixtures::*;

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
    use spade_model::chat::ChatTemplate;
    use spade_model::model::{Decoder, ModelConfig};
    let mut tokens: Vec<String> = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
        .map(String::from)
        .to_vec();
    let mut bytes: Vec<char> = tokenizers::pre_tokenizers::byte_level::ByteLevel::alphabet()
        .into_iter()
        .collect();
    bytes.sort();
    tokens.extend(bytes.iter().map(|c| c.to_string()));
    let tok = byte_level_tokenizer(&tokens, Vec::new());
    let mut cfg = ModelConfig::tiny("llama");
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

/// Serves `app` on a free loopback port from its own thread and runtime (an in-process fake
/// server for the inference tests); returns its `http://` URL.
pub fn serve_on_loopback(app: axum::Router) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            listener.set_nonblocking(true).unwrap();
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, app).await.unwrap();
        });
    });
    url
}

/// The whole numbers in an observation, in order.
pub fn numbers_in(obs: &str) -> Vec<u64> {
    obs.split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect()
}

/// Evaluation play settings without worked examples.
pub fn play_settings(max_turns: u32, max_new_tokens: usize) -> PlaySettings<'static> {
    PlaySettings {
        max_turns,
        max_new_tokens,
        examples: &[],
    }
}
