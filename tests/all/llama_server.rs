//! Tests against llama.cpp's real server (built by `scripts/build-llama-server.sh`, named by
//! `$LLAMA_SERVER`), serving the default model on loopback: all `#[ignore]`d, since CI has
//! neither. The server is started per test and killed when its guard drops.
//!
//! ```sh
//! cargo run --release -- model fetch
//! LLAMA_SERVER=$(scripts/build-llama-server.sh | tail -1) \
//!     cargo test --release -p spade --test all llama_server -- --ignored --nocapture
//! ```
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use candle_core::{Device, Tensor};
use spade_model::chat::Message;
use spade_model::fetch;
use spade_model::gguf_lora::save_gguf_lora;
use spade_model::logprob::{Pair, completion_logprobs};
use spade_selfplay::remote::adapters::{AdapterServer, AdapterSync, SyncConfig};
use spade_selfplay::remote::{ClientConfig, CompletionsClient, RemotePolicy};
use spade_selfplay::{CandlePolicy, Policy as _, Role, TrainConfig};

/// Won by any answer with a digit in it.
const DIGIT_ENV: &str = r#"
class DigitEnv:
    def __init__(self, max_turns=None):
        pass

    def reset(self, seed=None, difficulty=0):
        return "Name any number.", {}

    def step(self, action):
        won = any(c.isdigit() for c in action)
        return ("right" if won else "wrong"), (1.0 if won else 0.0), True, False, {}

    def solution(self):
        return "7"

    def close(self):
        pass
"#;

/// A running `llama-server`, killed on drop.
pub struct LlamaServer {
    child: std::process::Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The default model's GGUF (`spade model fetch`).
pub fn default_gguf() -> PathBuf {
    let gguf = fetch::default_model_path();
    assert!(
        gguf.exists(),
        "{} is missing: run `spade model fetch`",
        gguf.display()
    );
    gguf
}

impl LlamaServer {
    /// Starts `$LLAMA_SERVER` in router mode on a fresh directory `spade-llama-<tag>-PID` under
    /// the temporary directory, with a preset file that names `gguf` as `base`. Returns the
    /// directory, the preset file and the server.
    pub fn start_router(tag: &str, gguf: &Path) -> (PathBuf, PathBuf, LlamaServer) {
        let dir = std::env::temp_dir().join(format!("spade-llama-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let presets = dir.join("presets.ini");
        std::fs::write(
            &presets,
            format!("version = 1\n\n[base]\nmodel = {}\n", gguf.display()),
        )
        .unwrap();
        let server = LlamaServer::start(&["--models-preset", presets.to_str().unwrap()]);
        (dir, presets, server)
    }

    /// Starts `$LLAMA_SERVER` with `args` (2 threads, 4 slots, 8,192 positions) on a free
    /// loopback port and waits until `/health` answers 200 (one minute at most).
    pub fn start(args: &[&str]) -> LlamaServer {
        let bin = PathBuf::from(
            std::env::var("LLAMA_SERVER").expect("set LLAMA_SERVER to the llama-server binary"),
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new(&bin)
            .args(args)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["-t", "2", "-np", "4", "-c", "8192"])
            .env("LD_LIBRARY_PATH", bin.parent().unwrap())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let server = LlamaServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let healthy = (0..600).any(|_| {
            std::thread::sleep(Duration::from_millis(100));
            let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                return false;
            };
            let _ = s.write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut answer = String::new();
            let _ = s.read_to_string(&mut answer);
            answer.starts_with("HTTP/1.1 200")
        });
        assert!(healthy, "llama-server did not become healthy");
        server
    }
}

fn mean(a: &[f32]) -> f32 {
    a.iter().sum::<f32>() / a.len() as f32
}

fn mean_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).sum::<f32>() / a.len() as f32
}

/// Adapters written by spade as a GGUF LoRA and loaded into llama.cpp's router move its
/// greedy sample, and the server's log-probs of that sample match spade's own forward pass
/// with the same adapters (so names, shapes, scale and llama's q/k row permutation are right),
/// while the base's are far from them. The adapters are set to random values (B spread over [-0.2, 0.2))
/// so that the change shows in one step; a GRPO update at this model's learning rates moves
/// far less.
#[test]
#[ignore = "needs llama.cpp's server ($LLAMA_SERVER) and the default model (spade model fetch)"]
fn a_gguf_lora_from_spade_moves_llama_servers_sample_as_spade_predicts() {
    let gguf = default_gguf();
    let (dir, presets, server) = LlamaServer::start_router("lora", &gguf);

    let loaded = spade_model::load::load(&gguf, &Device::Cpu).unwrap();
    let cfg = TrainConfig {
        temperature: 0.0,
        ..TrainConfig::default()
    };
    let trainer = CandlePolicy::new(loaded.clone(), &cfg.policy()).unwrap();
    let (lora_cfg, adapters) = trainer.lora().unwrap();
    for (name, var) in adapters.data().lock().unwrap().iter() {
        if name.contains("lora_B") {
            // Deterministic values spread over [-0.2, 0.2).
            let n = var.elem_count();
            let values: Vec<f32> = (0..n)
                .map(|i| ((i * 7919 + 13) % 1000) as f32 / 2500.0 - 0.2)
                .collect();
            let t = Tensor::from_vec(values, var.dims(), &Device::Cpu).unwrap();
            var.set(&t).unwrap();
        }
    }
    let client = ClientConfig::new(server.url.clone(), "base");
    let mut sampler = RemotePolicy::new(loaded.clone(), client.clone(), &cfg.sampling()).unwrap();
    let chat = vec![Message::new(
        "user",
        "What is the capital of France? Answer in one sentence.",
    )];
    let base = sampler
        .sample(Role::Agent, &chat, 1, 24, 1)
        .unwrap()
        .remove(0);

    let mut sync = AdapterSync::new(
        SyncConfig {
            server: AdapterServer::LlamaCpp,
            base_model: "base".into(),
            local_dir: dir.clone(),
            server_dir: None,
            prefix: "spade".into(),
            llama_presets: Some(presets.clone()),
            llama_base_gguf: Some(gguf.clone()),
            load_timeout: Duration::from_secs(120),
        },
        CompletionsClient::new(client).unwrap(),
    )
    .unwrap();
    let name = sync.name(1);
    save_gguf_lora(&sync.local_path(&name), &loaded.config, lora_cfg, adapters).unwrap();
    let target = sampler.block_on(sync.publish(&name)).unwrap();
    assert_eq!(target.model, "spade-step1");
    sampler.set_target(&target);
    let tuned = sampler
        .sample(Role::Agent, &chat, 1, 24, 1)
        .unwrap()
        .remove(0);
    println!("base:    {:?}\nadapted: {:?}", base.text, tuned.text);

    // spade's forward pass, with and without the adapters, on the server's own tokens.
    let score =
        |model: &spade_model::load::LoadedModel, s: &spade_selfplay::policy::Sampled| -> Vec<f32> {
            completion_logprobs(
                &model.model.without_grad(),
                &[Pair {
                    prompt: &s.prompt,
                    completion: &s.tokens,
                }],
            )
            .unwrap()
            .to_vec1()
            .unwrap()
        };
    let ours = score(trainer.loaded(), &tuned);
    let ours_base = score(&loaded, &tuned);
    let adapted_gap = mean_abs_diff(&ours, &tuned.logprobs);
    let base_gap = mean_abs_diff(&ours_base, &tuned.logprobs);
    println!(
        "mean |Δ log-prob| per token against the server's adapted sample: spade with the adapters {adapted_gap:.4}, spade's base {base_gap:.4}"
    );
    println!(
        "the base's sample: server base {:.4}, spade base {:.4}, spade adapted {:.4} (mean log-prob)",
        mean(&base.logprobs),
        mean(&score(&loaded, &base)),
        mean(&score(trainer.loaded(), &base)),
    );
    assert_ne!(
        base.text, tuned.text,
        "the adapters did not move the sample"
    );
    assert!(adapted_gap < 0.15, "{adapted_gap}");
    assert!(base_gap > 4.0 * adapted_gap, "{base_gap} vs {adapted_gap}");
    drop(server);
    let _ = std::fs::remove_dir_all(Path::new(&dir));
}

/// `spade train --inference` against llama.cpp's router, end to end on the default model:
/// two fixed-env rollouts on an environment won by any answer with a digit; after each update the adapter is written
/// as GGUF, added to the router's presets and loaded, and the next rollout samples with it.
/// Prints the server/trainer log-prob gap of each rollout.
#[test]
#[ignore = "needs llama.cpp's server ($LLAMA_SERVER) and the default model (spade model fetch)"]
fn spade_train_samples_on_llama_servers_router_with_each_updates_adapter() {
    let gguf = default_gguf();
    let (dir, presets, server) = LlamaServer::start_router("train", &gguf);
    // Won by any answer with a digit in it, so that a group of samples mixes wins and losses.
    let env = dir.join("digit.py");
    std::fs::write(&env, DIGIT_ENV).unwrap();
    // A high learning rate so that two updates move the adapters measurably.
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "seed = 3\nplays_per_game = 8\nmax_turns = 1\nagent_max_new_tokens = 16\nlr = 1e-3\nppo_epochs = 2\n",
    )
    .unwrap();
    let out = dir.join("run");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_spade"))
        .args(["train", "--config", config.to_str().unwrap()])
        .args(["--model", gguf.to_str().unwrap()])
        .args(["--fixed-envs", env.to_str().unwrap(), "--rollouts", "2"])
        .args(["--out", out.to_str().unwrap()])
        .args(["--inference", &server.url, "--inference-model", "base"])
        .args(["--inference-adapters", "llama-cpp"])
        .args(["--inference-llama-presets", presets.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{err}");
    println!("{}", String::from_utf8_lossy(&output.stdout));
    let written = std::fs::read_to_string(&presets).unwrap();
    println!("{written}");
    assert!(written.contains("[spade-run-step2]"), "{written}");
    assert!(written.contains("[spade-run-step4]"), "{written}");
    assert!(out.join("served-adapters/spade-run-step4.gguf").exists());
    let models = std::process::Command::new("curl")
        .args(["-s", &format!("{}/models", server.url)])
        .output()
        .unwrap();
    let models: serde_json::Value = serde_json::from_slice(&models.stdout).unwrap();
    let status = |id: &str| {
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["id"] == id)
            .map(|m| m["status"]["value"].as_str().unwrap().to_owned())
    };
    assert_eq!(status("spade-run-step4").as_deref(), Some("loaded"));
    assert_eq!(status("spade-run-step2").as_deref(), Some("unloaded"));
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    let mut gaps = Vec::new();
    for line in metrics.lines() {
        let m: serde_json::Value = serde_json::from_str(line).unwrap();
        println!(
            "rollout {}: win {}, logprob_gap {}, ratio_mean {}, clip {}",
            m["rollout"], m["win_rate"], m["logprob_gap"], m["ratio_mean"], m["clip_fraction"]
        );
        gaps.extend(m["logprob_gap"].as_f64());
    }
    assert!(!gaps.is_empty(), "no rollout scored a token:\n{metrics}");
    for gap in gaps {
        assert!(gap < 0.5, "server/trainer gap {gap}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}
