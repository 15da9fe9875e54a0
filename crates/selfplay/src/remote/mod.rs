//! Sampling on an OpenAI-compatible inference server (vLLM, SGLang, llama.cpp's server) instead
//! of in-process: [`RemotePolicy`] is a [`Policy`] whose completions come from
//! `/v1/completions`, on the exact prompt text the in-process path renders.
//!
//! [`RemotePolicy`] samples and does not learn (`spade eval --inference URL`);
//! [`ServerPolicy`] samples on the server, trains LoRA adapters in-process and loads them into
//! the server after each update (`spade train --inference URL`, [`adapters`]).
//! [`InferenceConfig`] is a training config's `[inference]` section.

pub mod adapters;
pub mod client;
pub mod trained;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use spade_model::chat::Message;
use spade_model::error::ModelError;
use spade_model::grpo::{GrpoSample, UpdateStats};
use spade_model::load::LoadedModel;

pub use adapters::AdapterServer;
pub use client::{ClientConfig, Completion, CompletionRequest, CompletionsClient, InferenceError};
pub use trained::ServerPolicy;

use crate::error::{Result, TrainError};
use crate::policy::{Policy, Role, Sampled, SamplingConfig, Temperatures};

/// The environment variable an inference server's API key is read from (never a flag).
pub const API_KEY_ENV: &str = "SPADE_INFERENCE_API_KEY";

/// `[inference]`: where every role samples when an inference server does, and how the trained
/// adapters reach it (docs/inference.md). The API key is never here: it is read from
/// `$SPADE_INFERENCE_API_KEY`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InferenceConfig {
    /// The server's base URL, `http://host:port`.
    pub url: String,
    /// The base model's name on the server (each request's `model` before the first update).
    pub model: String,
    /// Requests in flight at once (default 64).
    pub concurrency: usize,
    /// How adapters are loaded into the server after each update: `vllm`, `sglang` or
    /// `llama-cpp` (required to train).
    pub adapters: Option<AdapterServer>,
    /// Where spade writes the adapters it loads (default: `served-adapters` in the run
    /// directory).
    pub adapter_dir: Option<PathBuf>,
    /// The same directory as the server sees it, when the server runs elsewhere (default:
    /// `adapter_dir`, absolute).
    pub server_adapter_dir: Option<PathBuf>,
    /// Adapter names are `<prefix>-step<N>` (default: `spade-` and the run directory's name).
    pub adapter_prefix: Option<String>,
    /// `llama-cpp` only: the router's preset file (`llama-server --models-preset FILE`), which
    /// spade appends a preset to per adapter.
    pub llama_presets: Option<PathBuf>,
    /// `llama-cpp` only: the base GGUF as the server sees it (default: `--model`, when it is a
    /// `.gguf` file).
    pub llama_base_gguf: Option<PathBuf>,
}

impl Default for InferenceConfig {
    fn default() -> Self {
        Self {
            url: String::new(),
            model: "default".into(),
            concurrency: 64,
            adapters: None,
            adapter_dir: None,
            server_adapter_dir: None,
            adapter_prefix: None,
            llama_presets: None,
            llama_base_gguf: None,
        }
    }
}

impl InferenceConfig {
    /// Rejects settings training cannot run with.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.url.is_empty() {
            return Err("[inference] needs the server's url".into());
        }
        if self.concurrency == 0 {
            return Err("[inference] concurrency must be at least 1".into());
        }
        if self.adapters.is_none() {
            return Err(
                "training through an inference server needs to know how to load the trained \
                 adapters into it: set [inference] adapters (or --inference-adapters) to vllm, \
                 sglang or llama-cpp"
                    .into(),
            );
        }
        if self.adapters == Some(AdapterServer::LlamaCpp) && self.llama_presets.is_none() {
            return Err(adapters::LLAMA_CPP_NEEDS_PRESETS.into());
        }
        Ok(())
    }
}

/// A policy that samples on an inference server. The local model provides the chat template
/// and the tokenizer: prompts are rendered exactly as in-process; [`Sampled::tokens`] are the
/// server's token ids when it says them, else the completion text tokenized locally; the
/// log-probs are the server's.
pub struct RemotePolicy {
    model: LoadedModel,
    client: CompletionsClient,
    /// The async runtime the requests run on (its own, so that a caller inside another
    /// runtime can block on it from a scoped thread). Always `Some` but in `drop`.
    runtime: Option<tokio::runtime::Runtime>,
    temperatures: Temperatures,
    /// Each role's top-p and top-k.
    sampling: SamplingConfig,
}

impl std::fmt::Debug for RemotePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemotePolicy")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl Drop for RemotePolicy {
    /// Shuts the runtime down without waiting, so that a policy dropped inside another async
    /// runtime (a caller's `#[tokio::main]`) does not panic.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

impl RemotePolicy {
    /// A policy sampling on the server of `client`, with `model`'s chat template and tokenizer
    /// and `sampling`'s temperatures and top-p.
    pub fn new(
        model: LoadedModel,
        client: ClientConfig,
        sampling: &SamplingConfig,
    ) -> Result<Self> {
        let client = CompletionsClient::new(client)?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(TrainError::InferenceRuntime)?;
        Ok(RemotePolicy {
            model,
            client,
            runtime: Some(runtime),
            temperatures: sampling.temperatures,
            sampling: *sampling,
        })
    }

    /// Samples from now on with `target` (a newly loaded adapter), keeping the client's
    /// concurrency bound.
    pub fn set_target(&mut self, target: &adapters::Target) {
        self.client = self.client.with_target(&target.model, target.extra.clone());
    }

    /// The client's configuration (the model requests name now, among others).
    pub fn client(&self) -> &CompletionsClient {
        &self.client
    }

    /// The local model (chat template, tokenizer).
    pub fn model(&self) -> &LoadedModel {
        &self.model
    }

    /// Runs `future` to its end on the policy's runtime, from a scoped thread (the caller
    /// may itself be inside an async runtime).
    pub fn block_on<T: Send>(&self, future: impl std::future::Future<Output = T> + Send) -> T {
        let runtime = self.runtime.as_ref().expect("the runtime lives until drop");
        std::thread::scope(|scope| {
            scope
                .spawn(move || runtime.block_on(future))
                .join()
                .expect("the inference client's thread panicked")
        })
    }

    fn temperature(&self, role: Role) -> f64 {
        self.temperatures.get(role)
    }

    fn encode(&self, text: &str) -> Result<Vec<u32>> {
        self.model
            .tokenizer
            .encode(text, false)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| ModelError::Tokenizer(e.to_string()).into())
    }

    /// Sends every request together and waits for all answers, on the policy's runtime from a
    /// scoped thread (the caller may itself be inside an async runtime).
    fn complete_all(&self, requests: Vec<CompletionRequest>) -> Result<Vec<Completion>> {
        let client = self.client.clone();
        Ok(self.block_on(async move { client.complete_all(requests).await })?)
    }

    /// The record of a completion: the server's token ids when it gave them, else the text
    /// tokenized locally.
    fn sampled(&self, prompt_text: &str, done: Completion) -> Result<Sampled> {
        let tokens = match done.token_ids {
            Some(ids) => ids,
            None => self.encode(&done.text)?,
        };
        Ok(Sampled {
            prompt: self.encode(prompt_text)?,
            tokens,
            logprobs: done.logprobs,
            text: done.text,
        })
    }
}

impl Policy for RemotePolicy {
    fn sample(
        &mut self,
        role: Role,
        messages: &[Message],
        n: usize,
        max_new_tokens: usize,
        seed: u64,
    ) -> Result<Vec<Sampled>> {
        let prompt = self.model.chat.render(messages, true);
        // One request per completion, each with its own seed (`n` > 1 with one seed would
        // not be reproducible on every server).
        let requests = (0..n as u64)
            .map(|i| CompletionRequest {
                prompt: prompt.clone(),
                max_tokens: max_new_tokens,
                temperature: self.temperature(role),
                top_p: self.sampling.top_p(role),
                top_k: self.sampling.top_k(role),
                seed: crate::seeds::derive(seed, "remote", &[i]),
                stop: Vec::new(),
            })
            .collect();
        self.complete_all(requests)?
            .into_iter()
            .map(|done| self.sampled(&prompt, done))
            .collect()
    }

    fn sample_each(
        &mut self,
        role: Role,
        chats: &[&[Message]],
        max_new_tokens: usize,
        seeds: &[u64],
    ) -> Result<Vec<Sampled>> {
        let prompts: Vec<String> = chats
            .iter()
            .map(|c| self.model.chat.render(c, true))
            .collect();
        let requests = prompts
            .iter()
            .zip(seeds)
            .map(|(prompt, &seed)| CompletionRequest {
                prompt: prompt.clone(),
                max_tokens: max_new_tokens,
                temperature: self.temperature(role),
                top_p: self.sampling.top_p(role),
                top_k: self.sampling.top_k(role),
                seed,
                stop: Vec::new(),
            })
            .collect();
        self.complete_all(requests)?
            .into_iter()
            .zip(&prompts)
            .map(|(done, prompt)| self.sampled(prompt, done))
            .collect()
    }

    fn decode_path(&self) -> Option<String> {
        let config = self.client.config();
        Some(format!(
            "inference server {} (model {}, {} requests in flight at most)",
            config.url, config.model, config.max_concurrency
        ))
    }

    fn update(&mut self, _batch: &[GrpoSample]) -> Result<Option<UpdateStats>> {
        Err(TrainError::Policy(
            "a policy that only samples on an inference server does not learn: train with \
             ServerPolicy, which syncs its adapters to the server"
                .into(),
        ))
    }

    fn save(&self, _dir: &Path) -> Result<()> {
        Err(TrainError::Policy(
            "a policy sampling on an inference server has no trainable state to save".into(),
        ))
    }

    fn load(&mut self, _dir: &Path) -> Result<()> {
        Err(TrainError::Policy(
            "a policy sampling on an inference server cannot load adapters: load them into \
             the server"
                .into(),
        ))
    }
}

/// The API key from [`API_KEY_ENV`], if set and not empty.
pub fn api_key_from_env() -> Option<String> {
    std::env::var(API_KEY_ENV).ok().filter(|k| !k.is_empty())
}
