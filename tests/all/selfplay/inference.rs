//! Sampling on an inference server (`spade_selfplay::remote`, `spade eval --inference`),
//! against an in-process HTTP server that implements OpenAI's documented completion shape
//! (`POST /v1/completions` -> `choices[0].text` and `choices[0].logprobs.token_logprobs`).
//! The server is scripted: it answers `\boxed{W}` where W is the last word of the last user
//! message, can fail its first requests with a status, and counts requests in flight.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{Value, json};
use spade_model::chat::Message;
use spade_selfplay::remote::{ClientConfig, RemotePolicy};
use spade_selfplay::{Policy as _, Role, TrainConfig};

use crate::common::{spade, stderr, stdout, tiny_chat_model};

/// What the fake server does and saw.
#[derive(Default)]
struct Script {
    /// Answer this status to the first `fail_first` requests.
    fail_status: u16,
    fail_first: usize,
    /// Hold every answer this long (so that requests overlap).
    delay: Duration,
    /// Requests received.
    seen: AtomicUsize,
    /// Requests in flight now, and the most at once.
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    /// Every request body, with its Authorization header.
    bodies: Mutex<Vec<(Value, Option<String>)>>,
}

/// The last word of the last user message in a ChatML prompt.
fn last_user_word(prompt: &str) -> String {
    let user = prompt
        .rsplit("<|im_start|>user\n")
        .next()
        .unwrap_or_default();
    let content = user.split("<|im_end|>").next().unwrap_or_default();
    content
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .trim_matches(|c: char| !c.is_alphanumeric())
        .to_owned()
}

async fn completions(
    State(script): State<Arc<Script>>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let n = script.seen.fetch_add(1, Ordering::SeqCst);
    let now = script.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    script.peak.fetch_max(now, Ordering::SeqCst);
    let auth = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_owned());
    script.bodies.lock().unwrap().push((body.clone(), auth));
    tokio::time::sleep(script.delay).await;
    script.in_flight.fetch_sub(1, Ordering::SeqCst);
    if n < script.fail_first {
        let status = StatusCode::from_u16(script.fail_status).unwrap();
        return (status, Json(json!({"error": "scripted failure"})));
    }
    let word = last_user_word(body["prompt"].as_str().unwrap_or_default());
    (
        StatusCode::OK,
        Json(json!({
            "object": "text_completion",
            "choices": [{
                "index": 0,
                "text": format!("\\boxed{{{word}}}"),
                "finish_reason": "stop",
                "logprobs": {"tokens": ["\\boxed{", word, "}"], "token_logprobs": [-0.25, -0.5, -0.125]},
            }],
        })),
    )
}

/// Starts the fake server on loopback in its own thread; returns its URL.
fn serve(script: Arc<Script>) -> String {
    crate::common::serve_on_loopback(
        Router::new()
            .route("/v1/completions", post(completions))
            .with_state(script),
    )
}

fn client(url: &str, concurrency: usize, attempts: u32) -> ClientConfig {
    let mut config = ClientConfig::new(url, "tiny");
    config.max_concurrency = concurrency;
    config.attempts = attempts;
    config.first_backoff = Duration::from_millis(10);
    config
}

fn chat(word: &str) -> Vec<Message> {
    vec![
        Message::new("system", "Play."),
        Message::new("user", format!("Say {word}")),
    ]
}

#[test]
fn every_chat_is_one_request_in_flight_together_within_the_bound() {
    for (bound, want_peak) in [(64, 16), (4, 4)] {
        let script = Arc::new(Script {
            delay: Duration::from_millis(150),
            ..Script::default()
        });
        let url = serve(script.clone());
        let cfg = TrainConfig::default();
        let mut policy = RemotePolicy::new(
            tiny_chat_model(1, None),
            client(&url, bound, 1),
            &cfg.sampling(),
        )
        .unwrap();
        let chats: Vec<Vec<Message>> = (0..16).map(|i| chat(&format!("w{i}"))).collect();
        let refs: Vec<&[Message]> = chats.iter().map(Vec::as_slice).collect();
        let seeds: Vec<u64> = (100..116).collect();
        let out = policy.sample_each(Role::Agent, &refs, 8, &seeds).unwrap();
        // Answers come back in chat order, with the server's log-probs.
        for (i, s) in out.iter().enumerate() {
            assert_eq!(s.text, format!("\\boxed{{w{i}}}"));
            assert_eq!(s.logprobs, vec![-0.25, -0.5, -0.125]);
            assert!(!s.tokens.is_empty() && !s.prompt.is_empty());
        }
        assert_eq!(script.seen.load(Ordering::SeqCst), 16);
        assert_eq!(
            script.peak.load(Ordering::SeqCst),
            want_peak,
            "bound {bound}"
        );
        // Each request carries the config's sampling settings and the chat's own seed.
        let bodies = script.bodies.lock().unwrap();
        let mut seen_seeds: Vec<u64> = bodies
            .iter()
            .map(|(b, _)| b["seed"].as_u64().unwrap())
            .collect();
        seen_seeds.sort();
        assert_eq!(seen_seeds, seeds);
        let (body, auth) = &bodies[0];
        assert_eq!(body["model"], "tiny");
        assert_eq!(body["temperature"], cfg.temperature_of(Role::Agent));
        assert_eq!(body["top_p"], cfg.top_p);
        assert_eq!(body["max_tokens"], 8);
        assert_eq!(body["logprobs"], 1);
        assert!(
            body["prompt"]
                .as_str()
                .unwrap()
                .ends_with("<|im_start|>assistant\n")
        );
        assert_eq!(auth, &None);
    }
}

#[test]
fn busy_and_failing_servers_are_retried_then_named() {
    // 503 twice, then answers: three requests, one completion.
    let script = Arc::new(Script {
        fail_status: 503,
        fail_first: 2,
        ..Script::default()
    });
    let url = serve(script.clone());
    let cfg = TrainConfig::default();
    let mut policy = RemotePolicy::new(
        tiny_chat_model(1, None),
        client(&url, 4, 3),
        &cfg.sampling(),
    )
    .unwrap();
    let out = policy
        .sample(Role::Designer, &chat("river"), 1, 8, 7)
        .unwrap();
    assert_eq!(out[0].text, "\\boxed{river}");
    assert_eq!(script.seen.load(Ordering::SeqCst), 3);

    // Always 500: the attempts run out, and the error says so.
    let script = Arc::new(Script {
        fail_status: 500,
        fail_first: usize::MAX,
        ..Script::default()
    });
    let url = serve(script.clone());
    let mut policy = RemotePolicy::new(
        tiny_chat_model(1, None),
        client(&url, 4, 2),
        &cfg.sampling(),
    )
    .unwrap();
    let err = policy
        .sample(Role::Agent, &chat("x"), 1, 8, 7)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "the inference server at {url} answered 500 (2 attempts): {{\"error\":\"scripted failure\"}}"
        )),
        "{err}"
    );
    assert_eq!(script.seen.load(Ordering::SeqCst), 2);

    // A client error is not retried.
    let script = Arc::new(Script {
        fail_status: 400,
        fail_first: usize::MAX,
        ..Script::default()
    });
    let url = serve(script.clone());
    let mut policy = RemotePolicy::new(
        tiny_chat_model(1, None),
        client(&url, 4, 5),
        &cfg.sampling(),
    )
    .unwrap();
    let err = policy
        .sample(Role::Agent, &chat("x"), 1, 8, 7)
        .unwrap_err()
        .to_string();
    assert!(err.contains("answered 400 (1 attempts)"), "{err}");
    assert_eq!(script.seen.load(Ordering::SeqCst), 1);

    // Nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let mut policy = RemotePolicy::new(
        tiny_chat_model(1, None),
        client(&url, 4, 2),
        &cfg.sampling(),
    )
    .unwrap();
    let err = policy
        .sample(Role::Agent, &chat("x"), 1, 8, 7)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&format!(
            "cannot reach the inference server at {url} after 2 attempts"
        )),
        "{err}"
    );
    // A remote policy does not train.
    let err = policy.update(&[]).unwrap_err().to_string();
    assert!(
        err.contains("a policy that only samples on an inference server does not learn"),
        "{err}"
    );
}

#[test]
fn eval_plays_through_an_inference_server() {
    let script = Arc::new(Script::default());
    let url = serve(script.clone());
    let dir = std::env::temp_dir().join(format!("spade-inference-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    spade_model::checkpoint::save_full(&dir, &tiny_chat_model(1, None)).unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_spade"))
        .args([
            "eval",
            "--model",
            dir.to_str().unwrap(),
            "--env",
            "tests/envs/echo_word/env.py",
            "--plays",
            "4",
            "--json",
            "--inference",
            &url,
            "--inference-model",
            "tiny",
        ])
        .env("SPADE_INFERENCE_API_KEY", "sk-test")
        .current_dir(crate::common::repo_root())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    // echo_word is won by repeating its word in \boxed{}: the server's answers win every play.
    let env = &report["envs"][0];
    assert_eq!(env["plays"], 4, "{report}");
    assert_eq!(env["wins"], 4, "{report}");
    assert!(stderr(&output).contains(&format!("inference server {url} (model tiny")));
    let bodies = script.bodies.lock().unwrap();
    assert_eq!(bodies.len(), 4, "one request per play, one turn each");
    for (body, auth) in bodies.iter() {
        assert_eq!(body["temperature"], 0.0, "evaluation is greedy");
        assert_eq!(auth.as_deref(), Some("Bearer sk-test"));
    }
}

#[test]
fn inference_flags_are_checked() {
    let out = spade(&["eval", "--env", "x.py", "--inference-model", "m"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("the following required arguments were not provided")
            && stderr(&out).contains("--inference <URL>"),
        "{}",
        stderr(&out)
    );
    let out = spade(&[
        "eval",
        "--env",
        "tests/envs/echo_word/env.py",
        "--lora",
        "adapters",
        "--inference",
        "http://127.0.0.1:9",
    ]);
    assert_eq!(
        stderr(&out).trim(),
        "error: --lora with --inference: the server samples, so load the adapters into the \
         server and name them with --inference-model"
    );
    let err = RemotePolicy::new(
        tiny_chat_model(1, None),
        ClientConfig::new("https://example.org", "m"),
        &TrainConfig::default().sampling(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("inference URL 'https://example.org': https is not supported"),
        "{err}"
    );
}

/// `spade eval` through llama.cpp's real server serving the default model: the request shape,
/// llama.cpp's log-prob shape and the concurrency work against the real thing. Run:
///
/// ```sh
/// cargo run --release -- model fetch
/// LLAMA_SERVER=$(scripts/build-llama-server.sh | tail -1) \
///     cargo test -p spade --test all selfplay::inference::eval_through_llama_server -- --ignored --nocapture
/// ```
#[test]
#[ignore = "needs llama.cpp's server (scripts/build-llama-server.sh, $LLAMA_SERVER) and the default model (spade model fetch)"]
fn eval_through_llama_server() {
    let gguf = crate::llama_server::default_gguf();
    let server = crate::llama_server::LlamaServer::start(&["-m", gguf.to_str().unwrap()]);
    let url = server.url.clone();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_spade"))
        .args(["eval", "--env", "tests/envs/echo_word/env.py"])
        .args(["--env", "tests/envs/arithmetic_puzzle/env.py"])
        .args([
            "--plays",
            "4",
            "--max-tokens",
            "24",
            "--max-turns",
            "3",
            "--json",
        ])
        .args(["--inference", &url, "--inference-model", "smollm2"])
        .current_dir(crate::common::repo_root())
        .output()
        .unwrap();
    drop(server);
    assert!(output.status.success(), "{}", stderr(&output));
    let report: Value = serde_json::from_str(stdout(&output).trim()).unwrap();
    println!("{report}");
    for env in report["envs"].as_array().unwrap() {
        assert_eq!(env["plays"], 4, "{report}");
    }
}
