//! The `--inference*` flags of `spade train` and `spade bench-model`, and the policy they
//! build: sampling on an OpenAI-compatible server, training in-process, adapters synced after
//! each update (docs/inference.md).
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use clap::Args;
use spade_model::fetch;
use spade_model::load::LoadedModel;
use spade_selfplay::TrainConfig;
use spade_selfplay::config::InferenceConfig;
use spade_selfplay::remote::ServerPolicy;
use spade_selfplay::remote::adapters::AdapterServer;

/// Sampling on an inference server while training in-process.
#[derive(Debug, Clone, Args)]
pub struct InferenceArgs {
    /// Sample every role on an OpenAI-compatible inference server (vLLM, SGLang, llama.cpp's
    /// server) at this URL, `http://host:port`, instead of in-process; train here and load the
    /// adapters into the server after each update. The server must serve --model; an API key,
    /// if it wants one, is read from $SPADE_INFERENCE_API_KEY. Overrides the config's
    /// [inference] url.
    #[arg(long, value_name = "URL")]
    pub inference: Option<String>,
    /// The base model's name on the inference server.
    #[arg(long, value_name = "NAME", requires = "inference")]
    pub inference_model: Option<String>,
    /// Requests in flight at once on the inference server (default 64).
    #[arg(long, value_name = "N", requires = "inference")]
    pub inference_concurrency: Option<usize>,
    /// How the trained adapters are loaded into the server: `vllm`, `sglang` or `llama-cpp`.
    #[arg(long, value_name = "SERVER", requires = "inference")]
    pub inference_adapters: Option<AdapterServer>,
    /// With `--inference-adapters llama-cpp`: the preset file llama-server was started with
    /// (`--models-preset FILE`, router mode); spade appends a preset per adapter.
    #[arg(long, value_name = "FILE", requires = "inference")]
    pub inference_llama_presets: Option<PathBuf>,
}

impl InferenceArgs {
    /// The config's `[inference]` with these flags over it (a flag alone starts a section).
    pub fn apply(&self, cfg: &mut TrainConfig) {
        let Some(url) = &self.inference else {
            return;
        };
        let section = cfg.inference.get_or_insert_with(InferenceConfig::default);
        section.url = url.clone();
        if let Some(model) = &self.inference_model {
            section.model = model.clone();
        }
        if let Some(n) = self.inference_concurrency {
            section.concurrency = n;
        }
        if let Some(kind) = self.inference_adapters {
            section.adapters = Some(kind);
        }
        if let Some(file) = &self.inference_llama_presets {
            section.llama_presets = Some(file.clone());
        }
    }
}

/// The policy of `[inference]` for a run in `run_dir`; `model_path` is `--model` (the base
/// GGUF that llama.cpp's presets name unless the config says another).
pub fn server_policy(
    loaded: LoadedModel,
    cfg: &TrainConfig,
    section: &InferenceConfig,
    run_dir: &Path,
    model_path: Option<&Path>,
) -> anyhow::Result<ServerPolicy> {
    let path: PathBuf = model_path
        .map(Path::to_path_buf)
        .unwrap_or_else(fetch::default_model_path);
    let base_gguf = (path.extension().is_some_and(|e| e == "gguf"))
        .then(|| std::path::absolute(&path).unwrap_or(path));
    ServerPolicy::from_config(loaded, &cfg.policy(), section, run_dir, base_gguf)
        .context("setting up sampling on the inference server")
}
