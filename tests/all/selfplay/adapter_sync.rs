//! Training while an inference server samples (`spade_selfplay::remote::ServerPolicy`,
//! `spade train --inference`): after every update the adapters are written where the server
//! reads them, loaded under a new name per optimiser step with each server's own calls (vLLM,
//! SGLang, llama.cpp's router), and sampling moves to that name; a resumed run loads its
//! checkpoint's adapters again; a server that goes away stops the rollout with its reason and
//! leaves the last checkpoint whole.
//!
//! The server is an in-process fake that implements the documented calls and checks what they
//! name: an adapter it is asked to load must be on disk in the right format, a request must
//! name a loaded adapter. It plays the level environment of `fixed_envs`: a request with an
//! even seed answers the level, an odd one 9, so groups mix wins and losses and every
//! rollout updates.
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{Method, StatusCode, Uri};
use serde_json::{Value, json};
use spade_selfplay::config::InferenceConfig;
use spade_selfplay::remote::ServerPolicy;
use spade_selfplay::remote::adapters::AdapterServer;
use spade_selfplay::{Corpus, Run, TrainConfig};

use super::fixed_envs::LEVEL_ENV;
use crate::common::{runtime, tiny_chat_model};

/// The fake server's state.
struct Fake {
    kind: AdapterServer,
    tokenizer: tokenizers::Tokenizer,
    /// Adapters (vLLM, SGLang) or presets (llama.cpp) loaded now.
    loaded: Mutex<BTreeSet<String>>,
    /// llama.cpp: the presets read at the last `GET /models?reload=1` (name -> lora file).
    presets: Mutex<BTreeMap<String, String>>,
    presets_file: PathBuf,
    /// Every management call, as `"METHOD /path"` and its body.
    calls: Mutex<Vec<(String, Value)>>,
    /// Every completion request's body.
    requests: Mutex<Vec<Value>>,
    /// Completions answer 503 from this many on.
    fail_from: usize,
    seen: AtomicUsize,
}

fn err(status: StatusCode, message: &str) -> (StatusCode, String) {
    (status, json!({"error": {"message": message}}).to_string())
}

impl Fake {
    fn new(kind: AdapterServer, presets_file: PathBuf) -> Self {
        Fake {
            kind,
            tokenizer: tiny_chat_model(1, None).tokenizer,
            loaded: Mutex::default(),
            presets: Mutex::default(),
            presets_file,
            calls: Mutex::default(),
            requests: Mutex::default(),
            fail_from: usize::MAX,
            seen: AtomicUsize::new(0),
        }
    }

    fn handle(&self, method: &Method, uri: &Uri, body: &[u8]) -> (StatusCode, String) {
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let path = uri.path();
        if path == "/v1/completions" {
            return self.complete(body);
        }
        self.calls
            .lock()
            .unwrap()
            .push((format!("{method} {}", uri), body.clone()));
        let name = body["lora_name"].as_str().unwrap_or_default().to_owned();
        let mut loaded = self.loaded.lock().unwrap();
        match (self.kind, path) {
            (AdapterServer::Vllm, "/v1/load_lora_adapter")
            | (AdapterServer::Sglang, "/load_lora_adapter") => {
                let dir = Path::new(body["lora_path"].as_str().unwrap());
                for file in ["adapter_config.json", "adapter_model.safetensors"] {
                    if !dir.join(file).exists() {
                        return err(StatusCode::BAD_REQUEST, &format!("no {file} in {dir:?}"));
                    }
                }
                if !loaded.insert(name.clone()) {
                    return err(
                        StatusCode::BAD_REQUEST,
                        &format!("The lora adapter '{name}' has already been loaded."),
                    );
                }
                (StatusCode::OK, "Success".into())
            }
            (AdapterServer::Vllm, "/v1/unload_lora_adapter")
            | (AdapterServer::Sglang, "/unload_lora_adapter") => {
                if loaded.remove(&name) {
                    (StatusCode::OK, "Success".into())
                } else {
                    err(StatusCode::NOT_FOUND, "no such adapter")
                }
            }
            (AdapterServer::LlamaCpp, "/models") => {
                if uri.query() == Some("reload=1") {
                    *self.presets.lock().unwrap() = read_presets(&self.presets_file);
                }
                let data: Vec<Value> = self
                    .presets
                    .lock()
                    .unwrap()
                    .keys()
                    .map(|id| {
                        let status = if loaded.contains(id) {
                            "loaded"
                        } else {
                            "unloaded"
                        };
                        json!({"id": id, "status": {"value": status}})
                    })
                    .collect();
                (StatusCode::OK, json!({"data": data}).to_string())
            }
            (AdapterServer::LlamaCpp, "/models/load") => {
                let model = body["model"].as_str().unwrap().to_owned();
                let Some(lora) = self.presets.lock().unwrap().get(&model).cloned() else {
                    return err(StatusCode::NOT_FOUND, "model is not found");
                };
                let mut file = std::fs::File::open(&lora).unwrap();
                let content = candle_core::quantized::gguf_file::Content::read(&mut file).unwrap();
                assert!(content.tensor_infos.keys().any(|k| k.ends_with(".lora_a")));
                loaded.insert(model);
                (StatusCode::OK, json!({"success": true}).to_string())
            }
            (AdapterServer::LlamaCpp, "/models/unload") => {
                loaded.remove(body["model"].as_str().unwrap());
                (StatusCode::OK, json!({"success": true}).to_string())
            }
            _ => err(StatusCode::NOT_FOUND, "no such route"),
        }
    }

    fn complete(&self, body: Value) -> (StatusCode, String) {
        self.requests.lock().unwrap().push(body.clone());
        if self.seen.fetch_add(1, Ordering::SeqCst) >= self.fail_from {
            return err(StatusCode::SERVICE_UNAVAILABLE, "the server is going away");
        }
        let adapter = match self.kind {
            AdapterServer::Sglang => {
                assert_eq!(body["model"], "tiny");
                body["lora_path"].as_str()
            }
            _ => body["model"].as_str().filter(|m| *m != "tiny"),
        };
        if let Some(name) = adapter
            && !self.loaded.lock().unwrap().contains(name)
        {
            return err(StatusCode::NOT_FOUND, &format!("{name} is not loaded"));
        }
        let prompt = body["prompt"].as_str().unwrap();
        let level = prompt
            .rsplit("Level ")
            .next()
            .and_then(|r| r.split(' ').next())
            .unwrap();
        let answer = if body["seed"].as_u64().unwrap().is_multiple_of(2) {
            format!("\\boxed{{{level}}}")
        } else {
            "\\boxed{9}".to_owned()
        };
        let ids = self
            .tokenizer
            .encode(answer.as_str(), false)
            .unwrap()
            .get_ids()
            .to_vec();
        let logprobs = match self.kind {
            AdapterServer::Vllm => {
                assert_eq!(body["return_tokens_as_token_ids"], true);
                json!({
                    "tokens": ids.iter().map(|i| format!("token_id:{i}")).collect::<Vec<_>>(),
                    "token_logprobs": vec![-0.5; ids.len()],
                })
            }
            AdapterServer::Sglang => json!({
                "tokens": answer.chars().map(String::from).collect::<Vec<_>>(),
                "token_logprobs": vec![-0.5; ids.len()],
            }),
            AdapterServer::LlamaCpp => json!({
                "content": ids.iter().map(|i| json!({"id": i, "logprob": -0.5})).collect::<Vec<_>>(),
            }),
        };
        let answer = json!({"choices": [{"text": answer, "logprobs": logprobs}]});
        (StatusCode::OK, answer.to_string())
    }
}

/// `[name]` sections of a llama.cpp preset file and their `lora` paths.
fn read_presets(path: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut out = BTreeMap::new();
    let mut section = None;
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.to_owned());
        } else if let (Some(s), Some(lora)) = (&section, line.strip_prefix("lora = ")) {
            out.insert(s.clone(), lora.to_owned());
        }
    }
    out
}

fn serve(fake: Arc<Fake>) -> String {
    crate::common::serve_on_loopback(
        Router::new()
            .fallback(
                |State(fake): State<Arc<Fake>>, method: Method, uri: Uri, body: Bytes| async move {
                    fake.handle(&method, &uri, &body)
                },
            )
            .with_state(fake),
    )
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("spade-sync-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn cfg(kind: AdapterServer, url: &str, dir: &Path) -> TrainConfig {
    TrainConfig {
        seed: 5,
        fixed_envs: vec!["level".into()],
        plays_per_game: 4,
        max_turns: 1,
        agent_max_new_tokens: 8,
        ppo_epochs: 2,
        inference: Some(InferenceConfig {
            url: url.to_owned(),
            model: "tiny".into(),
            adapters: Some(kind),
            adapter_prefix: Some("t".into()),
            llama_presets: Some(dir.join("presets.ini")),
            llama_base_gguf: Some("/models/base.gguf".into()),
            ..InferenceConfig::default()
        }),
        ..TrainConfig::default()
    }
}

fn policy(cfg: &TrainConfig, run: &Path) -> ServerPolicy {
    let section = cfg.inference.clone().unwrap();
    ServerPolicy::from_config(tiny_chat_model(1, None), &cfg.policy(), &section, run, None).unwrap()
}

/// A new run of `cfg` in `run_dir` on the level environment.
fn create<'p>(run_dir: &Path, cfg: &TrainConfig, server: &'p mut ServerPolicy) -> Run<'p> {
    Run::create(run_dir, cfg.clone(), corpus(), runtime(), server, envs()).unwrap()
}

fn corpus() -> Corpus {
    Corpus::parse("{\"text\": \"unused\"}", 100).unwrap()
}

fn envs() -> Vec<(String, String)> {
    vec![("level".into(), LEVEL_ENV.into())]
}

/// The model each completion request sampled with (SGLang's adapter is its `lora_path`).
fn sampled_with(fake: &Fake) -> Vec<String> {
    fake.requests
        .lock()
        .unwrap()
        .iter()
        .map(|b| {
            b["lora_path"]
                .as_str()
                .or(b["model"].as_str())
                .unwrap()
                .to_owned()
        })
        .collect()
}

async fn sync_through(kind: AdapterServer) {
    let dir = tmp(kind.as_str());
    let fake = Arc::new(Fake::new(kind, dir.join("presets.ini")));
    let url = serve(fake.clone());
    let cfg = cfg(kind, &url, &dir);
    let run_dir = dir.join("run");
    let mut server = policy(&cfg, &run_dir);
    let mut run = create(&run_dir, &cfg, &mut server);
    let ms = run.run(2).await.unwrap();
    drop(run);
    // ppo_epochs 2: rollout 0's update ends at optimiser step 2, rollout 1's at step 4.
    assert!(ms.iter().all(|m| m.agent_samples_trained > 0), "{ms:?}");
    let per_rollout = cfg.plays_per_game;
    let used = sampled_with(&fake);
    assert_eq!(used.len(), 2 * per_rollout);
    assert!(used[..per_rollout].iter().all(|m| m == "tiny"), "{used:?}");
    assert!(
        used[per_rollout..].iter().all(|m| m == "t-step2"),
        "{used:?}"
    );
    assert_eq!(
        server.served_model(),
        if kind == AdapterServer::Sglang {
            "tiny"
        } else {
            "t-step4"
        }
    );
    // The gap between the server's log-probs (-0.5 for every token) and training's is measured.
    for m in &ms {
        let gap = m.logprob_gap.expect("a gap");
        assert!(gap.is_finite() && gap > 0.0, "{gap}");
    }
    let adapters = run_dir.join("served-adapters");
    let calls: Vec<String> = fake
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(c, _)| c.clone())
        .collect();
    let abs = |p: PathBuf| std::path::absolute(p).unwrap().display().to_string();
    match kind {
        AdapterServer::Vllm | AdapterServer::Sglang => {
            let (load, unload) = if kind == AdapterServer::Vllm {
                ("POST /v1/load_lora_adapter", "POST /v1/unload_lora_adapter")
            } else {
                ("POST /load_lora_adapter", "POST /unload_lora_adapter")
            };
            assert_eq!(calls, [load, load, unload]);
            let bodies: Vec<Value> = fake
                .calls
                .lock()
                .unwrap()
                .iter()
                .map(|(_, b)| b.clone())
                .collect();
            assert_eq!(
                bodies,
                [
                    json!({"lora_name": "t-step2", "lora_path": abs(adapters.join("t-step2"))}),
                    json!({"lora_name": "t-step4", "lora_path": abs(adapters.join("t-step4"))}),
                    json!({"lora_name": "t-step2"}),
                ]
            );
            // The served adapter is the trainer's, in PEFT's format.
            let mut fresh = tiny_chat_model(1, None);
            let (_, served) =
                spade_model::checkpoint::load_lora(&adapters.join("t-step4"), &mut fresh.model)
                    .unwrap();
            let (_, trained) = server.trainer().lora().unwrap();
            let served = served.data().lock().unwrap();
            for (name, var) in trained.data().lock().unwrap().iter() {
                let diff = (var.as_tensor() - served[name].as_tensor())
                    .unwrap()
                    .abs()
                    .unwrap()
                    .max_all()
                    .unwrap()
                    .to_scalar::<f32>()
                    .unwrap();
                assert_eq!(diff, 0.0, "{name}");
            }
        }
        AdapterServer::LlamaCpp => {
            let presets = std::fs::read_to_string(dir.join("presets.ini")).unwrap();
            assert_eq!(
                presets,
                format!(
                    "version = 1\n\n[t-step2]\nmodel = /models/base.gguf\nlora = {}\n\n[t-step4]\nmodel = /models/base.gguf\nlora = {}\n",
                    abs(adapters.join("t-step2.gguf")),
                    abs(adapters.join("t-step4.gguf"))
                )
            );
            assert!(calls.contains(&"POST /models/load".to_owned()), "{calls:?}");
            assert_eq!(calls.last().unwrap(), "POST /models/unload");
            assert_eq!(
                fake.calls.lock().unwrap().last().unwrap().1,
                json!({"model": "t-step2"})
            );
        }
    }
    assert_eq!(
        *fake.loaded.lock().unwrap(),
        BTreeSet::from(["t-step4".to_owned()])
    );

    // Resumed, the run loads its checkpoint's adapters again (vLLM and SGLang say they are
    // loaded already: unloaded and loaded again) and samples with them.
    fake.calls.lock().unwrap().clear();
    let mut server = policy(&cfg, &run_dir);
    let mut run = Run::resume(&run_dir, corpus(), runtime(), &mut server).unwrap();
    run.run(1).await.unwrap();
    drop(run);
    let used = sampled_with(&fake);
    assert!(
        used[2 * per_rollout..].iter().all(|m| m == "t-step4"),
        "{used:?}"
    );
    let calls: Vec<String> = fake
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|(c, _)| c.clone())
        .collect();
    if kind == AdapterServer::Vllm {
        assert_eq!(
            calls[..3],
            [
                "POST /v1/load_lora_adapter",
                "POST /v1/unload_lora_adapter",
                "POST /v1/load_lora_adapter"
            ]
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn vllm_loads_each_steps_adapter_and_sampling_names_it() {
    sync_through(AdapterServer::Vllm).await;
}

#[tokio::test]
async fn sglang_loads_each_steps_adapter_and_sampling_names_it() {
    sync_through(AdapterServer::Sglang).await;
}

#[tokio::test]
async fn llama_cpp_routers_load_each_steps_gguf_adapter_as_a_preset() {
    sync_through(AdapterServer::LlamaCpp).await;
}

#[tokio::test]
async fn a_server_that_goes_away_stops_the_rollout_and_the_run_resumes() {
    let dir = tmp("away");
    let mut fake = Fake::new(AdapterServer::Vllm, dir.join("presets.ini"));
    // Rollout 0 plays 4 requests; rollout 1 fails at its third.
    fake.fail_from = 6;
    let fake = Arc::new(fake);
    let url = serve(fake.clone());
    let cfg = cfg(AdapterServer::Vllm, &url, &dir);
    let run_dir = dir.join("run");
    let mut server = policy(&cfg, &run_dir);
    let mut run = create(&run_dir, &cfg, &mut server);
    run.run(1).await.unwrap();
    let err = run.run(1).await.unwrap_err().to_string();
    drop(run);
    assert!(
        err.contains(&format!("the inference server at {url} answered 503")),
        "{err}"
    );
    // The last checkpoint is rollout 1's start, whole; rollout 1 left nothing behind.
    let mut checkpoints: Vec<String> = std::fs::read_dir(run_dir.join("checkpoints"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    checkpoints.sort();
    assert_eq!(checkpoints, ["latest", "rollout-000000", "rollout-000001"]);
    // A healthy server again: the run resumes from there.
    let fake2 = Arc::new(Fake::new(AdapterServer::Vllm, dir.join("presets.ini")));
    let url2 = serve(fake2.clone());
    let mut cfg2 = cfg.clone();
    cfg2.inference.as_mut().unwrap().url = url2;
    let mut server = policy(&cfg2, &run_dir);
    let mut run = Run::resume(&run_dir, corpus(), runtime(), &mut server).unwrap();
    let ms = run.run(1).await.unwrap();
    assert_eq!(ms[0].rollout, 1);
    assert!(sampled_with(&fake2).iter().all(|m| m == "t-step2"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `spade train --inference` end to end: flags, the default adapter names and places, the gap
/// in `metrics.jsonl`.
#[test]
fn spade_train_samples_on_the_server_and_loads_its_adapters() {
    let dir = tmp("cli");
    let fake = Arc::new(Fake::new(AdapterServer::Vllm, dir.join("presets.ini")));
    let url = serve(fake.clone());
    let model = dir.join("model");
    spade_model::checkpoint::save_full(&model, &tiny_chat_model(1, None)).unwrap();
    let env = dir.join("level.py");
    std::fs::write(&env, LEVEL_ENV).unwrap();
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        "seed = 5\nplays_per_game = 4\nmax_turns = 1\nagent_max_new_tokens = 8\nppo_epochs = 2\n",
    )
    .unwrap();
    let out = dir.join("myrun");
    let output = crate::common::spade(&[
        "train",
        "--config",
        config.to_str().unwrap(),
        "--model",
        model.to_str().unwrap(),
        "--fixed-envs",
        env.to_str().unwrap(),
        "--rollouts",
        "2",
        "--out",
        out.to_str().unwrap(),
        "--inference",
        &url,
        "--inference-model",
        "tiny",
        "--inference-adapters",
        "vllm",
    ]);
    let err = crate::common::stderr(&output);
    assert!(output.status.success(), "{err}");
    assert!(
        err.contains(&format!(
            "sampling reads inference server {url} (model tiny, 64 requests in flight at most); adapters trained here and loaded into it after each update (vllm)"
        )),
        "{err}"
    );
    assert_eq!(
        *fake.loaded.lock().unwrap(),
        BTreeSet::from(["spade-myrun-step4".to_owned()])
    );
    assert!(
        out.join("served-adapters/spade-myrun-step4/adapter_model.safetensors")
            .exists()
    );
    // The saved config keeps the section, so that --resume samples on the same server.
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("config.json")).unwrap()).unwrap();
    assert_eq!(saved["inference"]["url"], url.as_str());
    assert_eq!(saved["inference"]["adapters"], "vllm");
    let metrics = std::fs::read_to_string(out.join("metrics.jsonl")).unwrap();
    for line in metrics.lines() {
        let m: Value = serde_json::from_str(line).unwrap();
        assert!(m["logprob_gap"].as_f64().unwrap() > 0.0, "{line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn inference_training_errors_are_clear() {
    use crate::common::fails_with;
    let out = "target/tmp/inference-cli";
    let base = [
        "train",
        "--fixed-envs",
        "tests/envs/grid_walk/env.py",
        "--out",
        out,
        "--inference",
        "http://127.0.0.1:9",
    ];
    fails_with(
        &base,
        None,
        1,
        "set [inference] adapters (or --inference-adapters) to vllm, sglang or llama-cpp",
    );
    fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = base.to_vec();
        args.extend_from_slice(extra);
        args
    }
    fails_with(
        &with(&base, &["--inference-adapters", "ollama"]),
        None,
        1,
        "unknown adapter server 'ollama' (known: vllm, sglang, llama-cpp)",
    );
    fails_with(
        &with(&base, &["--inference-adapters", "llama-cpp"]),
        None,
        1,
        "llama.cpp adapter sync needs the router's preset file",
    );
    fails_with(
        &["train", "--inference-model", "m", "--out", out],
        None,
        1,
        "--inference <URL>",
    );
    let config = std::env::temp_dir().join(format!("spade-inference-{}.toml", std::process::id()));
    std::fs::write(&config, "lora = false\n").unwrap();
    fails_with(
        &with(
            &base,
            &[
                "--inference-adapters",
                "vllm",
                "--config",
                config.to_str().unwrap(),
            ],
        ),
        None,
        1,
        "training through an inference server needs lora = true",
    );
    std::fs::write(
        &config,
        "recompute_old_logprobs = false\n[inference]\nurl = \"http://127.0.0.1:9\"\nadapters = \"sglang\"\n",
    )
    .unwrap();
    fails_with(
        &["train", "--config", config.to_str().unwrap(), "--out", out],
        None,
        1,
        "training through an inference server needs recompute_old_logprobs = true",
    );
    let _ = std::fs::remove_file(&config);
}
