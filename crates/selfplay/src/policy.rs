//! The policy behind every role: "sample n completions of a chat + their log-probs" and "one
//! GRPO update". [`CandlePolicy`] is the real model; [`Scripted`] is a test double whose text
//! comes from a script (optionally scored and trained by a real model).
use std::collections::HashMap;
use std::path::Path;

use candle_core::{Tensor, Var};
use candle_nn::VarMap;
use spade_model::chat::Message;
use spade_model::checkpoint;
use spade_model::dry::Dry;
use spade_model::grpo::{GrpoConfig, GrpoSample, GrpoTrainer, UpdateStats};
use spade_model::load::LoadedModel;
use spade_model::logprob::{Pair, completion_logprobs};
use spade_model::model::{DecodeActivations, DecodePath, DecodeWeights, LoraConfig, TrainMemory};
use spade_model::optim::{AdamW, AdamWConfig};
use spade_model::prefix_cache::PrefixCache;
use spade_model::pyguard::PythonGuard;
use spade_model::sample::{Sampler, SamplingParams};
use spade_model::sft::{self, SftConfig, SftStats};

use super::error::{Result, TrainError};

/// Who is asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Writes environments.
    Designer,
    /// Repairs an environment that failed validation.
    Repair,
    /// Writes a hint from the source.
    Hint,
    /// Plays.
    Agent,
}

impl Role {
    /// The role's name in metrics and GRPO batches.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Designer => "designer",
            Role::Repair => "repair",
            Role::Hint => "hint",
            Role::Agent => "agent",
        }
    }
}

/// One sampled completion with what training needs (kept in the run state while a designer
/// sample waits in the delay buffer).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sampled {
    /// Prompt token ids (the rendered chat).
    pub prompt: Vec<u32>,
    /// Completion token ids.
    pub tokens: Vec<u32>,
    /// Log-probability of each completion token when sampled.
    pub logprobs: Vec<f32>,
    /// Completion text.
    pub text: String,
}

/// Receives the number of tokens each decode step sampled.
pub type TokenHook = std::sync::Arc<dyn Fn(u64) + Send + Sync>;

/// A policy.
pub trait Policy {
    /// `n` completions of `messages`, seeded.
    fn sample(
        &mut self,
        role: Role,
        messages: &[Message],
        n: usize,
        max_new_tokens: usize,
        seed: u64,
    ) -> Result<Vec<Sampled>>;

    /// One completion for each chat, chat `i` seeded with `seeds[i]`: the agent's next action
    /// in every live episode. A policy may decode them as one batch and reuse what it
    /// computed for earlier turns of the same conversation; the default samples them one by
    /// one.
    fn sample_each(
        &mut self,
        role: Role,
        chats: &[&[Message]],
        max_new_tokens: usize,
        seeds: &[u64],
    ) -> Result<Vec<Sampled>> {
        let mut out = Vec::with_capacity(chats.len());
        for (chat, &seed) in chats.iter().zip(seeds) {
            let s = self.sample(role, chat, 1, max_new_tokens, seed)?;
            out.push(s.into_iter().next().ok_or_else(|| {
                TrainError::Policy("the policy returned no completion for a chat".into())
            })?);
        }
        Ok(out)
    }

    /// Drops state kept between [`Policy::sample_each`] calls (the conversations ended).
    fn forget(&mut self) {}

    /// What sampling reads (weights, formats, kernel), for the metrics; `None` for a policy
    /// without a model.
    fn decode_path(&self) -> Option<String> {
        None
    }

    /// Calls `hook(n)` after each decode step with the number of tokens it sampled (for
    /// progress bars); `None` stops it.
    fn set_token_hook(&mut self, _hook: Option<TokenHook>) {}

    /// The model's context length and the tokens of `messages` rendered as a prompt (for a
    /// design budget up to the context); `None` for a policy that cannot tell.
    fn measure(&self, _messages: &[Message]) -> Result<Option<(usize, usize)>> {
        Ok(None)
    }

    /// One GRPO update (its configured optimiser steps) on sequences whose advantages credit
    /// assignment set; `None` when the policy does not learn.
    fn update(&mut self, batch: &[GrpoSample]) -> Result<Option<UpdateStats>>;

    /// Writes the trainable state (weights or adapters, optimizer) into `dir`.
    fn save(&self, dir: &Path) -> Result<()>;

    /// Restores what [`Policy::save`] wrote.
    fn load(&mut self, dir: &Path) -> Result<()>;
}

/// The sampling temperature of each role (repairs sample as the designer).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Temperatures {
    /// The designer's and repairs'.
    pub designer: f64,
    /// The hint writer's.
    pub hint: f64,
    /// The agent's.
    pub agent: f64,
}

impl Temperatures {
    /// The temperature of `role`.
    pub fn get(&self, role: Role) -> f64 {
        match role {
            Role::Designer | Role::Repair => self.designer,
            Role::Hint => self.hint,
            Role::Agent => self.agent,
        }
    }
}

/// How every role samples, in-process or on an inference server.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SamplingConfig {
    /// Each role's temperature.
    pub temperatures: Temperatures,
    /// Nucleus mass of the hint and agent roles (and of the designer's without its own).
    pub top_p: f64,
    /// The designer's (and repairs') nucleus mass.
    pub designer_top_p: f64,
    /// The designer's (and repairs') top-k (0: off).
    pub designer_top_k: usize,
    /// A designer completion may use all the context its prompt leaves (at least half of
    /// it), not just half.
    pub designer_fill_context: bool,
    /// The designer's (and repairs') DRY penalty (`None`: off).
    pub designer_dry: Option<Dry>,
    /// The designer's (and repairs') Python guard ([`spade_model::pyguard`]).
    pub designer_python_guard: bool,
}

impl SamplingConfig {
    /// The nucleus mass of `role`.
    pub fn top_p(&self, role: Role) -> f64 {
        match role {
            Role::Designer | Role::Repair => self.designer_top_p,
            Role::Hint | Role::Agent => self.top_p,
        }
    }

    /// The top-k of `role` (0: off).
    pub fn top_k(&self, role: Role) -> usize {
        match role {
            Role::Designer | Role::Repair => self.designer_top_k,
            Role::Hint | Role::Agent => 0,
        }
    }

    /// The DRY penalty of `role` (`None`: off).
    pub fn dry(&self, role: Role) -> Option<Dry> {
        match role {
            Role::Designer | Role::Repair => self.designer_dry,
            Role::Hint | Role::Agent => None,
        }
    }

    /// The Python guard of `role`, in its starting state (`None`: off): the designer's and
    /// repairs' code is the completion's first ```` ```python ```` fence.
    pub fn python_guard(&self, role: Role) -> Option<PythonGuard> {
        match role {
            Role::Designer | Role::Repair => self.designer_python_guard.then(PythonGuard::fenced),
            Role::Hint | Role::Agent => None,
        }
    }
}

/// What [`CandlePolicy`] trains and how it samples (the config's LoRA, optimiser, GRPO,
/// decoding and sampling settings).
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyConfig {
    /// Fresh LoRA adapters to attach and train (`None`: every weight trains).
    pub lora: Option<LoraConfig>,
    /// RNG seed of the fresh adapters' initial weights.
    pub lora_seed: u64,
    /// Base weights that sampling reads (f32 whatever this says when every weight trains).
    pub decode_weights: DecodeWeights,
    /// How sampling's quantised products take their inputs.
    pub decode_activations: DecodeActivations,
    /// The optimiser.
    pub adam: AdamWConfig,
    /// The GRPO update (clip, loss, KL, entropy, micro-batches, epochs, schedule).
    pub grpo: GrpoConfig,
    /// Temperatures and top-p.
    pub sampling: SamplingConfig,
    /// What an update keeps for its backward (checkpointed layers, every activation, or what
    /// each layer's own backward reads).
    pub train_memory: TrainMemory,
}

/// The candle model: LoRA adapters (default) or all weights, fused AdamW, GRPO with the
/// advantages credit assignment gave, optional KL to the frozen base and a learning-rate
/// schedule.
pub struct CandlePolicy {
    base: LoadedModel,
    model: LoadedModel,
    lora: Option<(LoraConfig, VarMap)>,
    optimizer: Option<AdamW>,
    adam: AdamWConfig,
    grpo: GrpoConfig,
    /// Sampling temperature of each role (the config's per-role ones, else `temperature`).
    temperatures: Temperatures,
    /// Each role's top-p and top-k.
    sampling: SamplingConfig,
    prefixes: PrefixCache,
    token_hook: Option<TokenHook>,
    /// What sampling reads.
    decode: DecodePath,
    /// What an update keeps for its backward, set on the model before each.
    train_memory: TrainMemory,
}

/// Cached positions kept for multi-turn reuse (SmolLM2-135M: 46 KB each, so about 1.5 GB).
const PREFIX_CACHE_TOKENS: usize = 32_768;

impl std::fmt::Debug for CandlePolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CandlePolicy")
            .field("lora", &self.lora.as_ref().map(|l| &l.0))
            .finish_non_exhaustive()
    }
}

/// Variables of `varmap` sorted by name (a stable optimizer order across processes).
fn sorted_vars(varmap: &VarMap) -> Vec<(String, Var)> {
    let data = varmap.data().lock().expect("varmap lock");
    let mut vars: Vec<(String, Var)> = data.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    vars.sort_by(|a, b| a.0.cmp(&b.0));
    vars
}

const OPT_FILE: &str = "optimizer.safetensors";
const OPT_META: &str = "optimizer.json";
const FULL_FILE: &str = "model.safetensors";

impl CandlePolicy {
    /// Wraps `loaded`, attaching fresh LoRA adapters (seeded with `cfg.lora_seed`) unless
    /// `cfg.lora` is `None`, in which case every weight trains.
    pub fn new(loaded: LoadedModel, cfg: &PolicyConfig) -> Result<Self> {
        let base = loaded.clone();
        let mut model = loaded;
        let (lora, decode_weights) = if let Some(lc) = &cfg.lora {
            let vm = spade_model::model::lora::attach_new(&mut model.model, lc, cfg.lora_seed)?;
            (Some((lc.clone(), vm)), cfg.decode_weights)
        } else {
            // Full fine-tuning moves the base weights: quantised copies would go stale.
            model.model.set_train_base(true);
            (None, DecodeWeights::F32)
        };
        let decode = model
            .model
            .set_decode_weights(decode_weights, cfg.decode_activations)?;
        let mut p = Self {
            base,
            model,
            lora,
            optimizer: None,
            adam: cfg.adam,
            grpo: cfg.grpo.clone(),
            temperatures: cfg.sampling.temperatures,
            sampling: cfg.sampling,
            prefixes: PrefixCache::new(PREFIX_CACHE_TOKENS),
            token_hook: None,
            decode,
            train_memory: cfg.train_memory,
        };
        p.optimizer = Some(p.new_optimizer()?);
        Ok(p)
    }

    /// Wraps `loaded` (adapters already attached, if any) for sampling only, as `spade eval`
    /// plays: nothing is attached or trained, so sampling reads `weights`, its products
    /// taking their inputs as `activations` (quantised blocks stay valid because the base
    /// weights never move). Updating such a policy would train
    /// every weight while sampling kept reading the blocks: use [`Self::new`] to train.
    pub fn for_inference(
        loaded: LoadedModel,
        cfg: &PolicyConfig,
        weights: DecodeWeights,
        activations: DecodeActivations,
    ) -> Result<Self> {
        let cfg = PolicyConfig {
            lora: None,
            ..cfg.clone()
        };
        let mut p = Self::new(loaded, &cfg)?;
        p.model.model.set_train_base(false);
        p.decode = p.model.model.set_decode_weights(weights, activations)?;
        Ok(p)
    }

    fn trainable(&self) -> Vec<(String, Var)> {
        match &self.lora {
            Some((_, vm)) => sorted_vars(vm),
            None => sorted_vars(&self.model.varmap),
        }
    }

    fn new_optimizer(&self) -> Result<AdamW> {
        let vars = self.trainable().into_iter().map(|(_, v)| v).collect();
        Ok(AdamW::new(vars, self.adam)?)
    }

    /// A sampler over the current model that reports decode steps to the token hook.
    fn sampler(&self) -> Sampler<'_> {
        let s = Sampler::from_loaded(&self.model);
        match &self.token_hook {
            Some(h) => s.with_step_hook(h.as_ref()),
            None => s,
        }
    }

    /// The model with its current adapters.
    pub fn loaded(&self) -> &LoadedModel {
        &self.model
    }

    /// The trained adapters and their configuration; `None` when every weight trains.
    pub fn lora(&self) -> Option<(&LoraConfig, &VarMap)> {
        self.lora.as_ref().map(|(c, v)| (c, v))
    }

    /// Optimiser steps taken so far (restored by [`Policy::load`]).
    pub fn optimizer_steps(&self) -> u64 {
        self.optimizer.as_ref().map_or(0, AdamW::steps)
    }

    /// Renders and tokenizes a chat, cutting its middle when it would not leave
    /// `max_new_tokens` (at least 16) of context.
    fn prompt_ids(
        &self,
        messages: &[Message],
        max_new_tokens: usize,
        role: Option<Role>,
    ) -> Result<(Vec<u32>, usize)> {
        let text = self.model.chat.render(messages, true);
        let ids = Sampler::from_loaded(&self.model).encode(&text)?;
        let ctx = self.model.config.max_position_embeddings;
        let fill = self.sampling.designer_fill_context && role == Some(Role::Designer);
        let room = if fill {
            ctx.saturating_sub(ids.len()).max(ctx / 2)
        } else {
            ctx / 2
        };
        let max_new = max_new_tokens.min(room).max(1);
        if ids.len() + max_new <= ctx {
            return Ok((ids, max_new));
        }
        let keep = ctx - max_new;
        let head = keep / 2;
        let tail = keep - head;
        let mut cut = ids[..head].to_vec();
        cut.extend_from_slice(&ids[ids.len() - tail..]);
        Ok((cut, max_new))
    }

    /// A supervised sample of the designer: `messages` rendered and tokenized as the
    /// designer's sampling renders them (the middle of the prompt cut as [`Policy::sample`]
    /// cuts it for [`Role::Designer`] when the pair would not fit),
    /// and `completion`'s tokens followed by the model's first end-of-sequence id (so the
    /// model learns to stop where the reply ends; none when the model names no EOS). Only the
    /// completion is scored. A completion longer than half the context is an error, as the
    /// sampler could never write it.
    pub fn sft_sample(&self, messages: &[Message], completion: &str) -> Result<GrpoSample> {
        let sampler = Sampler::from_loaded(&self.model);
        let mut tokens = sampler.encode(completion)?;
        tokens.extend(self.model.eos_ids.first().copied());
        let ctx = self.model.config.max_position_embeddings;
        if tokens.len() > ctx / 2 {
            return Err(TrainError::InvalidParameter(format!(
                "a completion of {} tokens does not fit: the sampler writes at most half the \
                 model's context of {ctx} tokens",
                tokens.len()
            )));
        }
        let (prompt, _) = self.prompt_ids(messages, tokens.len(), Some(Role::Designer))?;
        let n = tokens.len();
        Ok(GrpoSample::new(prompt, tokens, vec![0.0; n], 1.0))
    }

    /// One supervised step on `batch` (see [`spade_model::sft`]): mean token NLL of the
    /// completions, this policy's optimiser over its trainable weights (adapters or all).
    pub fn sft_step(&mut self, batch: &[GrpoSample], cfg: &SftConfig) -> Result<SftStats> {
        self.prefixes.clear();
        self.model.model.set_train_memory(self.train_memory);
        let mut opt = match self.optimizer.take() {
            Some(o) => o,
            None => self.new_optimizer()?,
        };
        let stats = sft::sft_step(&self.model.model, &mut opt, batch, cfg);
        self.optimizer = Some(opt);
        Ok(stats?)
    }

    /// The mean token NLL of `batch`'s completions under the current weights (no update).
    pub fn sft_loss(&self, batch: &[GrpoSample], cfg: &SftConfig) -> Result<f64> {
        Ok(sft::sft_loss(&self.model.model, batch, cfg)?)
    }

    /// Sets this policy's LoRA adapters to the ones saved in `dir` (by `spade sft` or a
    /// `spade train` checkpoint's `policy/`), bit for bit: a warm start. The adapter must
    /// have this policy's rank, alpha and target modules and fit this model's shapes; a
    /// policy that trains every weight has no adapters to set.
    pub fn init_adapter(&mut self, dir: &Path) -> Result<()> {
        let Some((cfg, vm)) = &self.lora else {
            return Err(TrainError::InvalidParameter(format!(
                "--init-adapter {}: this run trains every weight (lora = false), so it has no \
                 adapters to start from; train with LoRA, or pass a full model with --model",
                dir.display()
            )));
        };
        checkpoint::assign_lora(dir, cfg, vm)?;
        self.prefixes.clear();
        // Fresh moments: the warm start's weights, an optimiser that has taken no step.
        self.optimizer = Some(self.new_optimizer()?);
        Ok(())
    }

    /// Log-probs of `completion` after `messages` under the current model (no graph).
    pub fn score(&self, messages: &[Message], completion: &str) -> Result<Sampled> {
        let sampler = Sampler::from_loaded(&self.model);
        let mut tokens = sampler.encode(completion)?;
        if tokens.is_empty() {
            tokens = self.model.eos_ids.first().copied().into_iter().collect();
        }
        let (prompt, _) = self.prompt_ids(messages, tokens.len(), None)?;
        let lp = completion_logprobs(
            &self.model.model.without_grad(),
            &[Pair {
                prompt: &prompt,
                completion: &tokens,
            }],
        )?;
        Ok(Sampled {
            prompt,
            logprobs: lp.to_vec1()?,
            tokens,
            text: completion.to_string(),
        })
    }
}

impl Policy for CandlePolicy {
    fn sample(
        &mut self,
        role: Role,
        messages: &[Message],
        n: usize,
        max_new_tokens: usize,
        seed: u64,
    ) -> Result<Vec<Sampled>> {
        let (prompt, max_new) = self.prompt_ids(messages, max_new_tokens, Some(role))?;
        let params = SamplingParams {
            temperature: self.temperatures.get(role),
            top_p: self.sampling.top_p(role),
            top_k: self.sampling.top_k(role),
            max_new_tokens: max_new,
            stop: Vec::new(),
            seed,
            dry: self.sampling.dry(role),
            python_guard: self.sampling.python_guard(role),
        };
        let out = self.sampler().sample(&prompt, n, &params, &mut |_, _| {})?;
        Ok(out
            .into_iter()
            .map(|c| Sampled {
                prompt: prompt.clone(),
                tokens: c.tokens,
                logprobs: c.logprobs,
                text: c.text,
            })
            .collect())
    }

    fn sample_each(
        &mut self,
        role: Role,
        chats: &[&[Message]],
        max_new_tokens: usize,
        seeds: &[u64],
    ) -> Result<Vec<Sampled>> {
        let keep = role == Role::Agent;
        let mut prompts = Vec::with_capacity(chats.len());
        let mut rows = Vec::with_capacity(chats.len());
        let mut max_new = max_new_tokens;
        for (chat, &seed) in chats.iter().zip(seeds) {
            let (prompt, n) = self.prompt_ids(chat, max_new_tokens, Some(role))?;
            max_new = n;
            let reuse = if keep {
                self.prefixes.take(&prompt)
            } else {
                None
            };
            let sampler = Sampler::from_loaded(&self.model);
            rows.push((sampler.prefill(&prompt, reuse)?, seed));
            prompts.push(prompt);
        }
        let params = SamplingParams {
            temperature: self.temperatures.get(role),
            top_p: self.sampling.top_p(role),
            top_k: self.sampling.top_k(role),
            max_new_tokens: max_new,
            stop: Vec::new(),
            seed: 0,
            dry: self.sampling.dry(role),
            python_guard: self.sampling.python_guard(role),
        };
        let out = self
            .sampler()
            .sample_rows(rows, &params, keep, &mut |_, _| {})?;
        let mut sampled = Vec::with_capacity(out.len());
        for (prompt, (c, cache)) in prompts.into_iter().zip(out) {
            if let Some(cache) = cache {
                self.prefixes.insert_completed(&prompt, &c.tokens, cache);
            }
            sampled.push(Sampled {
                prompt,
                tokens: c.tokens,
                logprobs: c.logprobs,
                text: c.text,
            });
        }
        Ok(sampled)
    }

    fn forget(&mut self) {
        self.prefixes.clear();
    }

    fn measure(&self, messages: &[Message]) -> Result<Option<(usize, usize)>> {
        let text = self.model.chat.render(messages, true);
        let ids = Sampler::from_loaded(&self.model).encode(&text)?;
        Ok(Some((self.model.config.max_position_embeddings, ids.len())))
    }

    fn set_token_hook(&mut self, hook: Option<TokenHook>) {
        self.token_hook = hook;
    }

    fn decode_path(&self) -> Option<String> {
        Some(self.decode.to_string())
    }

    fn update(&mut self, batch: &[GrpoSample]) -> Result<Option<UpdateStats>> {
        self.prefixes.clear();
        self.model.model.set_train_memory(self.train_memory);
        if batch.iter().all(|s| s.trained_tokens() == 0) {
            return Ok(None);
        }
        let opt = match self.optimizer.take() {
            Some(o) => o,
            None => self.new_optimizer()?,
        };
        // With LoRA the base is the decoder without adapters: a free frozen reference.
        let reference =
            (self.grpo.kl_coef > 0.0 && self.lora.is_some()).then_some(&self.base.model);
        let mut trainer = GrpoTrainer::new(&self.model.model, reference, opt, self.grpo.clone())?;
        let stats = trainer.update(batch);
        self.optimizer = Some(trainer.into_optimizer());
        Ok(Some(stats?))
    }

    fn save(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| TrainError::file("creating", dir, e))?;
        match &self.lora {
            Some((cfg, vm)) => checkpoint::save_lora(dir, cfg, vm)?,
            None => self.model.varmap.save(dir.join(FULL_FILE))?,
        }
        let opt = self.optimizer.as_ref().expect("an optimizer");
        let (step, moments) = opt.export_state();
        let dev = self.model.model.device();
        let mut tensors: HashMap<String, Tensor> = HashMap::new();
        for (i, (m, v)) in moments.into_iter().enumerate() {
            let n = m.len();
            tensors.insert(format!("m.{i:05}"), Tensor::from_vec(m, n, dev)?);
            tensors.insert(format!("v.{i:05}"), Tensor::from_vec(v, n, dev)?);
        }
        candle_core::safetensors::save(&tensors, dir.join(OPT_FILE))?;
        let names: Vec<String> = self.trainable().into_iter().map(|(n, _)| n).collect();
        let meta = serde_json::json!({"step": step, "vars": names});
        let meta_path = dir.join(OPT_META);
        std::fs::write(&meta_path, meta.to_string())
            .map_err(|e| TrainError::file("writing", &meta_path, e))
    }

    fn load(&mut self, dir: &Path) -> Result<()> {
        self.prefixes.clear();
        if self.lora.is_some() {
            let mut model = self.base.clone();
            let (cfg, vm) = checkpoint::load_lora(dir, &mut model.model)?;
            self.decode = model
                .model
                .set_decode_weights(self.decode.weights, self.decode.activations)?;
            self.model = model;
            self.lora = Some((cfg, vm));
        } else {
            self.model.varmap.load(dir.join(FULL_FILE))?;
        }
        let mut opt = self.new_optimizer()?;
        let meta_path = dir.join(OPT_META);
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(&meta_path)
                .map_err(|e| TrainError::file("reading", &meta_path, e))?,
        )
        .map_err(|source| TrainError::Json {
            context: format!("parsing {}", meta_path.display()),
            source,
        })?;
        let step = meta["step"].as_u64().unwrap_or(0);
        let mut tensors =
            candle_core::safetensors::load(dir.join(OPT_FILE), &candle_core::Device::Cpu)?;
        let n = self.trainable().len();
        let mut moments = Vec::with_capacity(n);
        for i in 0..n {
            let get = |t: Option<Tensor>| -> Result<Vec<f32>> {
                t.ok_or_else(|| TrainError::BadCheckpoint {
                    path: dir.join(OPT_FILE),
                    why: format!(
                        "the optimizer state is incomplete: no moments for variable {} of {n} \
                         (was it saved with other adapters or another model?)",
                        i + 1
                    ),
                })?
                .to_vec1()
                .map_err(Into::into)
            };
            let m = get(tensors.remove(&format!("m.{i:05}")))?;
            let v = get(tensors.remove(&format!("v.{i:05}")))?;
            moments.push((m, v));
        }
        opt.import_state(step, moments)?;
        self.optimizer = Some(opt);
        Ok(())
    }
}

/// A script: the text a role writes for a chat.
pub type Script = Box<dyn FnMut(Role, &[Message]) -> String + Send>;

/// A test double: completions come from a script. With a model, tokens and log-probs are the
/// model's for the scripted text and updates train the model; without one, tokens are bytes
/// and nothing learns.
pub struct Scripted {
    script: Script,
    model: Option<CandlePolicy>,
}

impl std::fmt::Debug for Scripted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripted")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl Scripted {
    /// A scripted policy, optionally scored and trained by `model`.
    pub fn new(script: Script, model: Option<CandlePolicy>) -> Self {
        Self { script, model }
    }
}

impl Policy for Scripted {
    fn sample(
        &mut self,
        role: Role,
        messages: &[Message],
        n: usize,
        _max_new_tokens: usize,
        _seed: u64,
    ) -> Result<Vec<Sampled>> {
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let text = (self.script)(role, messages);
            out.push(match &self.model {
                Some(m) => m.score(messages, &text)?,
                None => {
                    let prompt: Vec<u32> = messages
                        .iter()
                        .flat_map(|m| m.content.bytes().map(u32::from))
                        .collect();
                    let tokens: Vec<u32> = text.bytes().map(u32::from).collect();
                    Sampled {
                        prompt,
                        logprobs: vec![-1.0; tokens.len()],
                        tokens,
                        text,
                    }
                }
            });
        }
        Ok(out)
    }

    fn update(&mut self, batch: &[GrpoSample]) -> Result<Option<UpdateStats>> {
        match &mut self.model {
            Some(m) => m.update(batch),
            None => Ok(None),
        }
    }

    fn measure(&self, messages: &[Message]) -> Result<Option<(usize, usize)>> {
        match &self.model {
            Some(m) => m.measure(messages),
            None => Ok(None),
        }
    }

    fn decode_path(&self) -> Option<String> {
        self.model.as_ref().and_then(|m| m.decode_path())
    }

    fn save(&self, dir: &Path) -> Result<()> {
        match &self.model {
            Some(m) => m.save(dir),
            None => std::fs::create_dir_all(dir).map_err(|e| TrainError::file("creating", dir, e)),
        }
    }

    fn load(&mut self, dir: &Path) -> Result<()> {
        match &mut self.model {
            Some(m) => m.load(dir),
            None => Ok(()),
        }
    }
}
