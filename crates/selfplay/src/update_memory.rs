//! How many tokens an update takes at once, chosen from a memory budget: the micro-batch's
//! padded tokens (`micro_batch_tokens`), the longest agent sequence (`max_agent_train_tokens`)
//! and the longest sequence of any role, from the model's shape and
//! [`spade_model::memory::UpdateMemory`]'s estimate of an update's peak.
//!
//! A pure function of the settings, the model's shape and the machine's memory: `spade train`
//! resolves it once, at the start of a run, and writes what it chose into the run's
//! `config.json`, so a resumed run trains with the same numbers on any machine.
use spade_model::memory::UpdateMemory;
use spade_model::model::{ModelConfig, TrainMemory};

use crate::error::{Result, TrainError};

/// The longest agent sequence when the budget holds more: a 25-turn chat reaches about 3,000
/// tokens at 10-30 ms per trained token on two cores, so the bound is also one of time.
pub const DEFAULT_MAX_AGENT_TRAIN_TOKENS: usize = 1024;
/// What a config never resolved against a model trains with (a library caller's, a test's):
/// the fixed numbers every run used before the budget. `spade train` always resolves.
pub const UNRESOLVED_MICRO_BATCH_TOKENS: usize = 2048;

const GIB: f64 = (1u64 << 30) as f64;

/// The settings the plan reads (each `None` is chosen by the plan).
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateMemoryConfig {
    /// The memory an update may take in all, in GiB (`None`: three quarters of the machine's).
    pub budget_gib: Option<f64>,
    /// Most padded tokens per micro-batch (`None`: the most the budget holds).
    pub micro_batch_tokens: Option<usize>,
    /// Longest agent sequence (`None`: [`DEFAULT_MAX_AGENT_TRAIN_TOKENS`] or what the budget
    /// holds, the smaller).
    pub max_agent_train_tokens: Option<usize>,
    /// LoRA adapters (true) or every weight.
    pub lora: bool,
    /// What the update keeps for its backward.
    pub train_memory: TrainMemory,
}

/// What the plan chose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdateMemoryPlan {
    /// The budget in GiB.
    pub budget_gib: f64,
    /// The estimate it was divided by.
    pub estimate: UpdateMemory,
    /// Most padded tokens per micro-batch; also the longest sequence of any role (a longer
    /// one would train alone, past the budget), so designer sequences are cut to it.
    pub micro_batch_tokens: usize,
    /// Longest agent sequence.
    pub max_agent_train_tokens: usize,
}

impl UpdateMemoryPlan {
    /// The estimated peak of an update at the plan's micro-batch, in GiB.
    pub fn peak_gib(&self) -> f64 {
        self.estimate.bytes_for(self.micro_batch_tokens) as f64 / GIB
    }
}

/// Three quarters of `machine` bytes in GiB: the rest is the operating system's, and the other
/// processes'.
pub fn default_budget_gib(machine: u64) -> f64 {
    (machine / 4 * 3) as f64 / GIB
}

/// Chooses the tokens of an update for a model of `model`'s shape (see the module docs);
/// `machine` is the machine's memory in bytes, read only when the budget is not set.
pub fn plan(
    cfg: &UpdateMemoryConfig,
    model: &ModelConfig,
    machine: Option<u64>,
) -> Result<UpdateMemoryPlan> {
    let bad = |m: String| Err(TrainError::InvalidParameter(m));
    let budget_gib = match (cfg.budget_gib, machine) {
        (Some(gib), _) if !(gib.is_finite() && gib > 0.0) => {
            return bad(format!(
                "train_memory_gib must be a positive number of GiB, got {gib}"
            ));
        }
        (Some(gib), _) => gib,
        (None, Some(machine)) => default_budget_gib(machine),
        (None, None) => {
            return bad(
                "train_memory_gib is not set and the machine's memory cannot be read from \
                 /proc/meminfo: set train_memory_gib to the GiB an update may take"
                    .into(),
            );
        }
    };
    let estimate = UpdateMemory::estimate(model, cfg.lora, cfg.train_memory);
    let holds = estimate.tokens_within((budget_gib * GIB) as u64);
    let per_token_mib = estimate.per_token as f64 / (1u64 << 20) as f64;
    if holds == 0 {
        return bad(format!(
            "train_memory_gib = {budget_gib:.2} holds no token of an update: this model's \
             update needs {:.2} GiB before its first token (weights, optimiser state, the \
             process) and {per_token_mib:.2} MiB a token; raise train_memory_gib",
            estimate.fixed as f64 / GIB
        ));
    }
    let too_many = |key: &str, tokens: usize| {
        format!(
            "{key} = {tokens} needs about {:.2} GiB in an update ({:.2} GiB before the first \
             token, {per_token_mib:.2} MiB a token), more than train_memory_gib = \
             {budget_gib:.2} holds ({holds} tokens): lower it, raise train_memory_gib, or \
             leave {key} out to have it chosen",
            estimate.bytes_for(tokens) as f64 / GIB,
            estimate.fixed as f64 / GIB,
        )
    };
    let micro_batch_tokens = match cfg.micro_batch_tokens {
        Some(0) => return bad("micro_batch_tokens must be at least 1".into()),
        Some(t) if t > holds => return bad(too_many("micro_batch_tokens", t)),
        Some(t) => t,
        None => holds,
    };
    let max_agent_train_tokens = match cfg.max_agent_train_tokens {
        Some(0) => return bad("max_agent_train_tokens must be at least 1".into()),
        Some(t) if t > micro_batch_tokens => {
            return bad(format!(
                "max_agent_train_tokens = {t} is more than micro_batch_tokens = \
                 {micro_batch_tokens}: a sequence that long would train alone, past the \
                 micro-batch's memory"
            ));
        }
        Some(t) => t,
        None => DEFAULT_MAX_AGENT_TRAIN_TOKENS.min(micro_batch_tokens),
    };
    Ok(UpdateMemoryPlan {
        budget_gib,
        estimate,
        micro_batch_tokens,
        max_agent_train_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(budget_gib: Option<f64>) -> UpdateMemoryConfig {
        UpdateMemoryConfig {
            budget_gib,
            micro_batch_tokens: None,
            max_agent_train_tokens: None,
            lora: true,
            train_memory: TrainMemory::Kept,
        }
    }

    fn message(r: Result<UpdateMemoryPlan>) -> String {
        r.err().map(|e| e.to_string()).unwrap_or_default()
    }

    #[test]
    fn the_default_budget_is_three_quarters_of_the_machine() {
        let smol = ModelConfig::smollm2_135m();
        // A 24 GiB machine: 18 GiB, which holds 3,211 tokens of SmolLM2-135M's LoRA update
        // (worked by hand in spade_model::memory's tests).
        let p = plan(&cfg(None), &smol, Some(24 << 30)).unwrap();
        assert_eq!(p.budget_gib, 18.0);
        assert_eq!(p.micro_batch_tokens, 3_211);
        assert_eq!(p.max_agent_train_tokens, 1_024);
        assert!(p.peak_gib() <= 18.0);
        // An explicit budget is the budget, whatever the machine.
        let p = plan(&cfg(Some(18.0)), &smol, None).unwrap();
        assert_eq!(p.micro_batch_tokens, 3_211);
    }

    #[test]
    fn checkpointed_layers_hold_more_tokens_in_the_same_budget() {
        let smol = ModelConfig::smollm2_135m();
        let mut c = cfg(None);
        c.train_memory = TrainMemory::Checkpointed;
        // 18 GiB hold 17,338 tokens of the checkpointed LoRA update (spade_model::memory's
        // tests work it out).
        let p = plan(&c, &smol, Some(24 << 30)).unwrap();
        assert_eq!(
            (p.micro_batch_tokens, p.max_agent_train_tokens),
            (17_338, 1_024)
        );
    }

    #[test]
    fn a_small_budget_shortens_the_agent_sequences_too() {
        let smol = ModelConfig::smollm2_135m();
        // 2.5 GiB: (2,684,354,560 - 2,149,861,888) / 5,348,352 = 99.9 tokens.
        let p = plan(&cfg(Some(2.5)), &smol, None).unwrap();
        assert_eq!((p.micro_batch_tokens, p.max_agent_train_tokens), (99, 99));
    }

    #[test]
    fn explicit_values_that_the_budget_cannot_hold_are_refused() {
        let smol = ModelConfig::smollm2_135m();
        let mut c = cfg(Some(18.0));
        c.micro_batch_tokens = Some(4_096);
        assert_eq!(
            message(plan(&c, &smol, None)),
            "invalid parameter: micro_batch_tokens = 4096 needs about 22.40 GiB in an update \
             (2.00 GiB before the first token, 5.10 MiB a token), more than train_memory_gib = \
             18.00 holds (3211 tokens): lower it, raise train_memory_gib, or leave \
             micro_batch_tokens out to have it chosen"
        );
        c.micro_batch_tokens = Some(2_048);
        c.max_agent_train_tokens = Some(3_000);
        assert_eq!(
            message(plan(&c, &smol, None)),
            "invalid parameter: max_agent_train_tokens = 3000 is more than micro_batch_tokens \
             = 2048: a sequence that long would train alone, past the micro-batch's memory"
        );
        c.max_agent_train_tokens = Some(2_048);
        let p = plan(&c, &smol, None).unwrap();
        assert_eq!(
            (p.micro_batch_tokens, p.max_agent_train_tokens),
            (2_048, 2_048)
        );
        c.micro_batch_tokens = Some(0);
        assert_eq!(
            message(plan(&c, &smol, None)),
            "invalid parameter: micro_batch_tokens must be at least 1"
        );
    }

    #[test]
    fn a_budget_that_holds_nothing_or_cannot_be_known_is_an_error() {
        let smol = ModelConfig::smollm2_135m();
        assert_eq!(
            message(plan(&cfg(Some(2.0)), &smol, None)),
            "invalid parameter: train_memory_gib = 2.00 holds no token of an update: this \
             model's update needs 2.00 GiB before its first token (weights, optimiser state, \
             the process) and 5.10 MiB a token; raise train_memory_gib"
        );
        assert!(message(plan(&cfg(None), &smol, None)).contains(
            "train_memory_gib is not set and the machine's memory cannot be read from /proc/meminfo"
        ));
        assert_eq!(
            message(plan(&cfg(Some(-1.0)), &smol, None)),
            "invalid parameter: train_memory_gib must be a positive number of GiB, got -1"
        );
    }
}
