//! `spade sft`'s run: supervised fine-tuning of the designer role on the library's
//! (design prompt → environment) pairs ([`crate::library`]), a warm start for a model that
//! cannot design yet. The pairs are tokenized as sampling renders them, shuffled per epoch
//! with a seed, and trained in batches by [`CandlePolicy::sft_step`] (mean token NLL of the
//! completions only). A run directory holds:
//!
//! - `sft.json`: the settings ([`SftSettings`]);
//! - `pairs.jsonl`: the pairs trained on, one JSON [`DesignPair`] a line;
//! - `metrics.jsonl`: one [`SftStep`] a line;
//! - `checkpoints/step-NNNNNN/` (`policy/` as [`crate::Policy::save`] writes it, and
//!   `state.json`), the newest named in `checkpoints/latest`;
//! - `adapter/` at the end (LoRA: `adapter_config.json` + `adapter_model.safetensors`, what
//!   `spade train --init-adapter` reads), or `model/` (full fine-tuning: an HF directory that
//!   `--model` loads).
//!
//! The batch of step `k` is a function of the seed, the number of pairs, the epochs and the
//! batch size ([`batch_order`]), so a run resumed from its checkpoint at step `k` trains
//! exactly the batches an uninterrupted run trains after `k`: no pair is lost or repeated.
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use spade_model::chat::Message;
use spade_model::checkpoint;
use spade_model::grpo::GrpoSample;
use spade_model::model::{DecodeWeights, LoraConfig, ModelConfig};
use spade_model::sft::SftConfig;

use crate::error::{Result, TrainError};
use crate::library::DesignPair;
use crate::policy::{CandlePolicy, Policy, PolicyConfig};
use crate::seeds;
use crate::state::write_atomic;
use crate::update_memory::{self, UpdateMemoryConfig, UpdateMemoryPlan};

/// `spade sft`'s settings, saved in the run's `sft.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SftSettings {
    /// Passes over the pairs (default 3: a small library is seen a few times; more
    /// memorises it, which the held-out novelty measure would show).
    pub epochs: usize,
    /// Learning rate, constant (default 2e-4, the usual LoRA SFT rate; for full fine-tuning
    /// about 1e-5).
    pub lr: f64,
    /// Pairs per optimiser step (default 4; the last batch of an epoch may be smaller).
    pub batch_size: usize,
    /// Pairs per forward/backward pass within a step (default 1: a design pair is about
    /// 2,000 tokens, and gradients accumulate exactly across micro-batches).
    pub micro_batch: usize,
    /// Global gradient-norm clip (default 1.0, as GRPO's; 0 disables it).
    pub max_grad_norm: f64,
    /// Seed of the epochs' shuffles, the corpus documents of the prompts, the held-out split
    /// and the fresh adapters (default 0).
    pub seed: u64,
    /// A checkpoint every this many steps (default 10), and always after the last.
    pub checkpoint_every: u64,
    /// LoRA adapters to train (default: `spade train`'s, rank 8, alpha 16, every
    /// projection, so that `--init-adapter` takes the result as it is); `None`: every weight
    /// trains.
    pub lora: Option<LoraConfig>,
    /// The memory a step may take in all, in GiB (`None`: three quarters of the machine's),
    /// as `spade train`'s `train_memory_gib` ([`crate::update_memory`]).
    #[serde(default)]
    pub train_memory_gib: Option<f64>,
    /// Most padded tokens per micro-batch, and the longest pair trained (a longer one is
    /// skipped and reported): `None`, the most `train_memory_gib` holds. Resolved with the
    /// model at the start of a run ([`SftSettings::resolve_update_memory`]) and saved; a
    /// run never resolved has no limit.
    #[serde(default)]
    pub micro_batch_tokens: Option<usize>,
}

impl Default for SftSettings {
    fn default() -> Self {
        Self {
            epochs: 3,
            lr: 2e-4,
            batch_size: 4,
            micro_batch: 1,
            max_grad_norm: 1.0,
            seed: 0,
            checkpoint_every: 10,
            lora: crate::TrainConfig::default().policy().lora,
            train_memory_gib: None,
            micro_batch_tokens: None,
        }
    }
}

impl SftSettings {
    /// Checks the ranges; the error names the setting.
    pub fn validate(&self) -> Result<()> {
        let bad = |what: &str| Err(TrainError::InvalidParameter(what.to_string()));
        if self.epochs == 0 {
            return bad("epochs must be at least 1");
        }
        if self.batch_size == 0 {
            return bad("batch size must be at least 1");
        }
        if self.micro_batch == 0 {
            return bad("micro batch must be at least 1");
        }
        if self.checkpoint_every == 0 {
            return bad("checkpoint every must be at least 1 step");
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return bad("the learning rate must be a positive number");
        }
        if self.lora.as_ref().is_some_and(|l| l.r == 0) {
            return bad("the LoRA rank must be at least 1");
        }
        Ok(())
    }

    /// The policy these settings train: `spade train`'s default policy with these adapters
    /// (or none), this learning rate, adapters seeded from [`Self::seed`], and f32 decode
    /// weights (an SFT run never samples).
    pub fn policy(&self) -> PolicyConfig {
        let mut p = crate::TrainConfig::default().policy();
        p.lora = self.lora.clone();
        p.lora_seed = seeds::derive(self.seed, "lora", &[]);
        p.adam.lr = self.lr;
        p.decode_weights = DecodeWeights::F32;
        p
    }

    /// Chooses the tokens a step holds for a model of `model`'s shape on a machine of
    /// `machine` bytes, as `spade train` does ([`update_memory::plan`]), and sets
    /// `train_memory_gib` and `micro_batch_tokens` to what it chose.
    pub fn resolve_update_memory(
        &mut self,
        model: &ModelConfig,
        machine: Option<u64>,
    ) -> Result<UpdateMemoryPlan> {
        let cfg = UpdateMemoryConfig {
            budget_gib: self.train_memory_gib,
            micro_batch_tokens: self.micro_batch_tokens,
            max_agent_train_tokens: None,
            lora: self.lora.is_some(),
            train_memory: self.policy().train_memory,
        };
        let plan = update_memory::plan(&cfg, model, machine)?;
        self.train_memory_gib = Some(plan.budget_gib);
        self.micro_batch_tokens = Some(plan.micro_batch_tokens);
        Ok(plan)
    }

    fn step_config(&self) -> SftConfig {
        SftConfig {
            max_grad_norm: self.max_grad_norm,
            micro_batch: self.micro_batch,
            micro_batch_tokens: self.micro_batch_tokens.unwrap_or(0),
        }
    }
}

/// Every step's batch, in order: `(epoch, pair indices)`. Each epoch is a permutation of
/// `0..n` (Fisher–Yates, seeded by the seed and the epoch) cut into batches of `batch_size`
/// (the last may be smaller), so every pair is trained once per epoch.
pub fn batch_order(
    n: usize,
    epochs: usize,
    batch_size: usize,
    seed: u64,
) -> Vec<(usize, Vec<usize>)> {
    let mut out = Vec::new();
    for epoch in 0..epochs {
        let mut perm: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let r = seeds::derive(seed, "sft-order", &[epoch as u64, i as u64]);
            perm.swap(i, (r % (i as u64 + 1)) as usize);
        }
        for chunk in perm.chunks(batch_size.max(1)) {
            out.push((epoch, chunk.to_vec()));
        }
    }
    out
}

/// One step of the run, as `metrics.jsonl` records it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SftStep {
    /// Steps done, this one included (from 1).
    pub step: u64,
    /// Its epoch (from 0).
    pub epoch: usize,
    /// Mean token NLL (nats) of the batch's completions before the step.
    pub loss: f64,
    /// Gradient norm before clipping.
    pub grad_norm: f64,
    /// Learning rate.
    pub lr: f64,
    /// Completion tokens in the loss.
    pub tokens: usize,
    /// The batch's pairs, by environment name.
    pub pairs: Vec<String>,
}

/// What a checkpoint records besides the policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SftState {
    /// Steps done.
    pub step: u64,
    /// Length in bytes of `metrics.jsonl` at this checkpoint.
    pub metrics_len: u64,
}

const SETTINGS: &str = "sft.json";
const PAIRS: &str = "pairs.jsonl";
const METRICS: &str = "metrics.jsonl";

fn json_err(context: String) -> impl FnOnce(serde_json::Error) -> TrainError {
    move |source| TrainError::Json { context, source }
}

/// Reads a run's settings (to build its policy before [`SftRun::resume`]).
pub fn read_settings(dir: &Path) -> Result<SftSettings> {
    let p = dir.join(SETTINGS);
    if !p.exists() {
        return Err(TrainError::InvalidParameter(format!(
            "nothing to resume: {} does not exist",
            p.display()
        )));
    }
    let text = std::fs::read_to_string(&p).map_err(|e| TrainError::file("reading", &p, e))?;
    serde_json::from_str(&text).map_err(json_err(format!("parsing {}", p.display())))
}

/// The chat a pair's prompt is.
pub fn pair_messages(pair: &DesignPair) -> [Message; 2] {
    [
        Message::new("system", pair.system.clone()),
        Message::new("user", pair.user.clone()),
    ]
}

/// Splits `pairs` into those the policy can train on and, for the others, the name and why
/// not (a completion longer than half the model's context, or a pair longer than
/// `max_tokens`, the most a step holds in its memory budget; `None`: no such limit).
pub fn fitting_pairs(
    policy: &CandlePolicy,
    pairs: Vec<DesignPair>,
    max_tokens: Option<usize>,
) -> (Vec<DesignPair>, Vec<(String, String)>) {
    let mut ok = Vec::new();
    let mut skipped = Vec::new();
    for pair in pairs {
        match policy.sft_sample(&pair_messages(&pair), &pair.completion) {
            Ok(s) => match max_tokens {
                Some(max) if s.prompt.len() + s.completion.len() > max => skipped.push((
                    pair.name.clone(),
                    format!(
                        "{} tokens with its prompt, more than the {max} a step holds in \
                         train_memory_gib",
                        s.prompt.len() + s.completion.len()
                    ),
                )),
                _ => ok.push(pair),
            },
            Err(e) => skipped.push((pair.name.clone(), e.to_string())),
        }
    }
    (ok, skipped)
}

/// A supervised run over a fixed list of pairs.
pub struct SftRun<'p> {
    dir: PathBuf,
    settings: SftSettings,
    pairs: Vec<DesignPair>,
    samples: Vec<GrpoSample>,
    order: Vec<(usize, Vec<usize>)>,
    policy: &'p mut CandlePolicy,
    /// Steps done and the metrics' length.
    pub state: SftState,
}

impl std::fmt::Debug for SftRun<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SftRun")
            .field("dir", &self.dir)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl<'p> SftRun<'p> {
    /// Starts a run in `dir` (which must not hold one) on `pairs` with `policy` (built from
    /// [`SftSettings::policy`]).
    pub fn create(
        dir: &Path,
        settings: SftSettings,
        pairs: Vec<DesignPair>,
        policy: &'p mut CandlePolicy,
    ) -> Result<Self> {
        settings.validate()?;
        if dir.join(SETTINGS).exists() {
            return Err(TrainError::RunExists {
                dir: dir.to_path_buf(),
            });
        }
        if pairs.is_empty() {
            return Err(TrainError::InvalidParameter(
                "no pairs to train on: every library environment was rejected, held out or too long"
                    .into(),
            ));
        }
        std::fs::create_dir_all(dir).map_err(|e| TrainError::file("creating", dir, e))?;
        let mut lines = String::new();
        for p in &pairs {
            lines.push_str(
                &serde_json::to_string(p).map_err(json_err("serialising a pair".into()))?,
            );
            lines.push('\n');
        }
        write_atomic(&dir.join(PAIRS), lines.as_bytes())?;
        let metrics = dir.join(METRICS);
        std::fs::write(&metrics, "").map_err(|e| TrainError::file("creating", &metrics, e))?;
        let text = serde_json::to_string_pretty(&settings)
            .map_err(json_err("serialising the settings".into()))?;
        write_atomic(&dir.join(SETTINGS), text.as_bytes())?;
        Self::open(dir, settings, pairs, policy, SftState::default())
    }

    /// Continues the run in `dir` from its latest checkpoint (from the start if it has
    /// none): the policy (built from [`read_settings`]) is restored, `metrics.jsonl` cut back
    /// to the checkpoint's length, and the next step is the checkpoint's next.
    pub fn resume(dir: &Path, policy: &'p mut CandlePolicy) -> Result<Self> {
        let settings = read_settings(dir)?;
        let p = dir.join(PAIRS);
        let text = std::fs::read_to_string(&p).map_err(|e| TrainError::file("reading", &p, e))?;
        let pairs = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| {
                serde_json::from_str(l).map_err(json_err(format!(
                    "parsing line {} of {}",
                    i + 1,
                    p.display()
                )))
            })
            .collect::<Result<Vec<DesignPair>>>()?;
        let state = match latest(dir) {
            Some(ckpt) => {
                policy.load(&ckpt.join("policy"))?;
                let s = ckpt.join("state.json");
                let text =
                    std::fs::read_to_string(&s).map_err(|e| TrainError::file("reading", &s, e))?;
                serde_json::from_str(&text).map_err(json_err(format!("parsing {}", s.display())))?
            }
            None => SftState::default(),
        };
        let metrics = dir.join(METRICS);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&metrics)
            .map_err(|e| TrainError::file("opening", &metrics, e))?;
        file.set_len(state.metrics_len)
            .map_err(|e| TrainError::file("truncating", &metrics, e))?;
        Self::open(dir, settings, pairs, policy, state)
    }

    fn open(
        dir: &Path,
        settings: SftSettings,
        pairs: Vec<DesignPair>,
        policy: &'p mut CandlePolicy,
        state: SftState,
    ) -> Result<Self> {
        let samples = pairs
            .iter()
            .map(|p| {
                policy
                    .sft_sample(&pair_messages(p), &p.completion)
                    .map_err(|e| TrainError::InvalidParameter(format!("pair `{}`: {e}", p.name)))
            })
            .collect::<Result<Vec<_>>>()?;
        let order = batch_order(
            pairs.len(),
            settings.epochs,
            settings.batch_size,
            settings.seed,
        );
        Ok(Self {
            dir: dir.to_path_buf(),
            settings,
            pairs,
            samples,
            order,
            policy,
            state,
        })
    }

    /// Optimiser steps of the whole run.
    pub fn total_steps(&self) -> u64 {
        self.order.len() as u64
    }

    /// The tokenized pairs, in `pairs.jsonl`'s order.
    pub fn samples(&self) -> &[GrpoSample] {
        &self.samples
    }

    /// The policy.
    pub fn policy(&self) -> &CandlePolicy {
        self.policy
    }

    /// The mean token NLL of every pair's completion under the current weights.
    pub fn loss(&self) -> Result<f64> {
        self.policy
            .sft_loss(&self.samples, &self.settings.step_config())
    }

    /// Trains the next batch, appends its line to `metrics.jsonl` and checkpoints when due;
    /// `None` once every step is done.
    pub fn step(&mut self) -> Result<Option<SftStep>> {
        let Some((epoch, idx)) = self.order.get(self.state.step as usize).cloned() else {
            return Ok(None);
        };
        let batch: Vec<GrpoSample> = idx.iter().map(|&i| self.samples[i].clone()).collect();
        let stats = self.policy.sft_step(&batch, &self.settings.step_config())?;
        let record = SftStep {
            step: self.state.step + 1,
            epoch,
            loss: stats.loss,
            grad_norm: stats.grad_norm,
            lr: stats.lr,
            tokens: stats.tokens,
            pairs: idx.iter().map(|&i| self.pairs[i].name.clone()).collect(),
        };
        let metrics = self.dir.join(METRICS);
        let mut line =
            serde_json::to_string(&record).map_err(json_err("serialising a step".into()))?;
        line.push('\n');
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&metrics)
            .map_err(|e| TrainError::file("opening", &metrics, e))?;
        f.write_all(line.as_bytes())
            .map_err(|e| TrainError::file("writing", &metrics, e))?;
        self.state.step += 1;
        self.state.metrics_len += line.len() as u64;
        if self
            .state
            .step
            .is_multiple_of(self.settings.checkpoint_every)
            || self.state.step == self.total_steps()
        {
            self.checkpoint()?;
        }
        Ok(Some(record))
    }

    /// The run directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Writes `checkpoints/step-NNNNNN/` under a temporary name, renames it, names it in
    /// `checkpoints/latest`, and removes the checkpoint it replaces. [`Self::step`] calls it
    /// when one is due; call it to stop between checkpoints without losing steps.
    pub fn checkpoint(&self) -> Result<()> {
        let dir = self.dir.join("checkpoints");
        let name = format!("step-{:06}", self.state.step);
        let tmp = dir.join(format!("{name}.partial"));
        let _ = std::fs::remove_dir_all(&tmp);
        std::fs::create_dir_all(&tmp).map_err(|e| TrainError::file("creating", &tmp, e))?;
        self.policy.save(&tmp.join("policy"))?;
        let text = serde_json::to_string_pretty(&self.state)
            .map_err(json_err("serialising the SFT state".into()))?;
        write_atomic(&tmp.join("state.json"), text.as_bytes())?;
        let final_dir = dir.join(&name);
        let _ = std::fs::remove_dir_all(&final_dir);
        std::fs::rename(&tmp, &final_dir)
            .map_err(|e| TrainError::file("renaming to", &final_dir, e))?;
        let previous = latest(&self.dir);
        write_atomic(&dir.join("latest"), name.as_bytes())?;
        if let Some(prev) = previous.filter(|p| *p != final_dir) {
            let _ = std::fs::remove_dir_all(prev);
        }
        Ok(())
    }

    /// Writes the result: `adapter/` (LoRA, PEFT format, as `spade train` saves its
    /// adapters) or `model/` (full fine-tuning, an HF directory); returns its path.
    pub fn finish(&self) -> Result<PathBuf> {
        match self.policy.lora() {
            Some((cfg, vm)) => {
                let out = self.dir.join("adapter");
                checkpoint::save_lora(&out, cfg, vm)?;
                Ok(out)
            }
            None => {
                let out = self.dir.join("model");
                checkpoint::save_full(&out, self.policy.loaded())?;
                Ok(out)
            }
        }
    }
}

/// The checkpoint named by `checkpoints/latest`, if it is complete.
pub fn latest(dir: &Path) -> Option<PathBuf> {
    let ckpts = dir.join("checkpoints");
    let name = std::fs::read_to_string(ckpts.join("latest")).ok()?;
    let path = ckpts.join(name.trim());
    path.join("state.json").exists().then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_epoch_trains_every_pair_once_in_a_seeded_order() {
        let order = batch_order(7, 2, 3, 5);
        // ceil(7 / 3) = 3 batches per epoch, the last of 1.
        let sizes: Vec<(usize, usize)> = order.iter().map(|(e, b)| (*e, b.len())).collect();
        assert_eq!(sizes, [(0, 3), (0, 3), (0, 1), (1, 3), (1, 3), (1, 1)]);
        for epoch in 0..2 {
            let mut seen: Vec<usize> = order
                .iter()
                .filter(|(e, _)| *e == epoch)
                .flat_map(|(_, b)| b.clone())
                .collect();
            seen.sort();
            assert_eq!(seen, (0..7).collect::<Vec<_>>());
        }
        assert_eq!(order, batch_order(7, 2, 3, 5));
        let flat =
            |o: &[(usize, Vec<usize>)]| o.iter().flat_map(|(_, b)| b.clone()).collect::<Vec<_>>();
        assert_ne!(
            flat(&order[..3]),
            flat(&order[3..]),
            "epochs shuffle differently"
        );
        assert_ne!(flat(&order), flat(&batch_order(7, 2, 3, 6)));
    }

    #[test]
    fn bad_settings_name_the_setting() {
        let msg = |s: SftSettings| s.validate().unwrap_err().to_string();
        let d = SftSettings::default();
        assert!(d.validate().is_ok());
        assert_eq!(
            msg(SftSettings {
                epochs: 0,
                ..d.clone()
            }),
            "invalid parameter: epochs must be at least 1"
        );
        assert_eq!(
            msg(SftSettings {
                batch_size: 0,
                ..d.clone()
            }),
            "invalid parameter: batch size must be at least 1"
        );
        assert_eq!(
            msg(SftSettings {
                lr: 0.0,
                ..d.clone()
            }),
            "invalid parameter: the learning rate must be a positive number"
        );
        assert_eq!(
            msg(SftSettings {
                checkpoint_every: 0,
                ..d
            }),
            "invalid parameter: checkpoint every must be at least 1 step"
        );
    }

    #[test]
    fn the_default_adapters_are_spade_trains() {
        assert_eq!(
            SftSettings::default().lora,
            crate::TrainConfig::default().policy().lora
        );
        assert!(SftSettings::default().lora.is_some());
    }
}
