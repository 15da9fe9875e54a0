//! Training while an inference server samples: [`ServerPolicy`] samples every role on the
//! server ([`RemotePolicy`]) and trains LoRA adapters in-process ([`CandlePolicy`]); after
//! each update the adapters are written and loaded into the server under a new name
//! ([`AdapterSync`]), and sampling moves to it.
//!
//! Old log-probs are recomputed on the training path at the first GRPO step (the config must
//! keep `recompute_old_logprobs` on), so the server's own log-probs only measure the gap
//! between the two paths: `logprob_gap` in the metrics.
use std::path::{Path, PathBuf};
use std::time::Duration;

use spade_model::chat::Message;
use spade_model::checkpoint;
use spade_model::gguf_lora::save_gguf_lora;
use spade_model::grpo::{GrpoSample, UpdateStats};
use spade_model::load::LoadedModel;

use super::adapters::{AdapterSync, SyncConfig};
use super::{ClientConfig, InferenceConfig, InferenceError, RemotePolicy, api_key_from_env};
use crate::error::{Result, TrainError};
use crate::policy::{CandlePolicy, Policy, PolicyConfig, Role, Sampled};

/// Samples on an inference server, trains in-process, keeps the server's adapter in step.
#[derive(Debug)]
pub struct ServerPolicy {
    sampler: RemotePolicy,
    trainer: CandlePolicy,
    sync: AdapterSync,
}

impl ServerPolicy {
    /// Samples with `sampler`, trains `trainer` (which must train LoRA adapters: a server
    /// cannot follow full fine-tuning) and syncs its adapters as `sync` says.
    pub fn new(sampler: RemotePolicy, trainer: CandlePolicy, sync: SyncConfig) -> Result<Self> {
        if trainer.lora().is_none() {
            return Err(TrainError::InvalidParameter(
                "training through an inference server needs LoRA adapters (lora = true): the \
                 server loads adapters after each update, not whole models"
                    .into(),
            ));
        }
        let sync = AdapterSync::new(sync, sampler.client().clone())?;
        let mut policy = ServerPolicy {
            sampler,
            trainer,
            sync,
        };
        let target = policy.sync.target();
        policy.sampler.set_target(&target);
        Ok(policy)
    }

    /// The policy of a run's `[inference]` section, training and sampling as `cfg` says: a
    /// client with the section's URL, model,
    /// concurrency and `$SPADE_INFERENCE_API_KEY`; adapters written to its `adapter_dir`
    /// (default `run_dir/served-adapters`) and named `<adapter_prefix>-step<N>` (default
    /// `spade-<run directory name>`); `base_gguf` is what llama.cpp presets name when the
    /// section gives no `llama_base_gguf`.
    pub fn from_config(
        loaded: LoadedModel,
        cfg: &PolicyConfig,
        section: &InferenceConfig,
        run_dir: &Path,
        base_gguf: Option<PathBuf>,
    ) -> Result<Self> {
        section.validate().map_err(TrainError::InvalidParameter)?;
        let server = section.adapters.expect("validated");
        let mut client = ClientConfig::new(section.url.clone(), section.model.clone());
        client.api_key = api_key_from_env();
        client.max_concurrency = section.concurrency;
        let run_name = run_dir
            .file_name()
            .map_or("run".into(), |n| n.to_string_lossy().into_owned());
        let sync = SyncConfig {
            server,
            base_model: section.model.clone(),
            local_dir: section
                .adapter_dir
                .clone()
                .unwrap_or_else(|| run_dir.join("served-adapters")),
            server_dir: section.server_adapter_dir.clone(),
            prefix: section
                .adapter_prefix
                .clone()
                .unwrap_or_else(|| format!("spade-{run_name}")),
            llama_presets: section.llama_presets.clone(),
            llama_base_gguf: section.llama_base_gguf.clone().or(base_gguf),
            load_timeout: Duration::from_secs(300),
        };
        let trainer = CandlePolicy::new(loaded.clone(), cfg)?;
        let sampler = RemotePolicy::new(loaded, client, &cfg.sampling)?;
        Self::new(sampler, trainer, sync)
    }

    /// The in-process trainer.
    pub fn trainer(&self) -> &CandlePolicy {
        &self.trainer
    }

    /// The model requests name now.
    pub fn served_model(&self) -> &str {
        &self.sampler.client().config().model
    }

    /// Writes the trainer's adapters where the server reads them and loads them into it
    /// (nothing before the first optimiser step: the base is the policy then).
    fn publish(&mut self) -> Result<()> {
        let step = self.trainer.optimizer_steps();
        if step == 0 {
            return Ok(());
        }
        let name = self.sync.name(step);
        let path = self.sync.local_path(&name);
        let (cfg, adapters) = self.trainer.lora().expect("checked in new");
        if self.sync.server().wants_gguf() {
            save_gguf_lora(&path, &self.trainer.loaded().config, cfg, adapters)?;
        } else {
            // Written beside, then renamed into place: the server never reads half an adapter.
            let partial = path.with_extension("partial");
            let _ = std::fs::remove_dir_all(&partial);
            checkpoint::save_lora(&partial, cfg, adapters)?;
            if path.exists() {
                std::fs::remove_dir_all(&path)
                    .map_err(|e| TrainError::file("replacing", &path, e))?;
            }
            std::fs::rename(&partial, &path)
                .map_err(|e| TrainError::file("moving into place", &path, e))?;
        }
        let sync = &mut self.sync;
        let target = self.sampler.block_on(sync.publish(&name))?;
        self.sampler.set_target(&target);
        Ok(())
    }

    /// Every completion's log-probs must line up with its tokens, or training would pair
    /// them wrongly.
    fn aligned(&self, sampled: Vec<Sampled>) -> Result<Vec<Sampled>> {
        for s in &sampled {
            if s.tokens.len() != s.logprobs.len() {
                return Err(InferenceError::BadAnswer {
                    url: self.sampler.client().config().url.clone(),
                    why: format!(
                        "{} log-probs for a completion that is {} tokens here and no token \
                         ids, so training cannot tell which token each belongs to: use a \
                         server that returns token ids (llama.cpp's server does; vLLM does \
                         with return_tokens_as_token_ids, which spade asks for)",
                        s.logprobs.len(),
                        s.tokens.len()
                    ),
                }
                .into());
            }
        }
        Ok(sampled)
    }
}

impl Policy for ServerPolicy {
    fn sample(
        &mut self,
        role: Role,
        messages: &[Message],
        n: usize,
        max_new_tokens: usize,
        seed: u64,
    ) -> Result<Vec<Sampled>> {
        let out = self
            .sampler
            .sample(role, messages, n, max_new_tokens, seed)?;
        self.aligned(out)
    }

    fn sample_each(
        &mut self,
        role: Role,
        chats: &[&[Message]],
        max_new_tokens: usize,
        seeds: &[u64],
    ) -> Result<Vec<Sampled>> {
        let out = self
            .sampler
            .sample_each(role, chats, max_new_tokens, seeds)?;
        self.aligned(out)
    }

    fn decode_path(&self) -> Option<String> {
        let sampling = self.sampler.decode_path().unwrap_or_default();
        Some(format!(
            "{sampling}; adapters trained here and loaded into it after each update ({})",
            self.sync.server()
        ))
    }

    fn update(&mut self, batch: &[GrpoSample]) -> Result<Option<UpdateStats>> {
        let stats = self.trainer.update(batch)?;
        if stats.is_some() {
            self.publish()?;
        }
        Ok(stats)
    }

    fn save(&self, dir: &Path) -> Result<()> {
        self.trainer.save(dir)
    }

    fn load(&mut self, dir: &Path) -> Result<()> {
        self.trainer.load(dir)?;
        self.publish()
    }
}
