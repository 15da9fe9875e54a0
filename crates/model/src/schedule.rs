//! Learning-rate schedules: a linear warmup, then constant, cosine or linear decay, as a pure
//! function of the optimizer's step count (so a resumed run continues the same curve).
use serde::{Deserialize, Serialize};

/// The decay after warmup.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecayKind {
    /// The base rate from the end of warmup on.
    Constant,
    /// Half a cosine from the base rate down to `base * min_ratio` at `total_steps`.
    Cosine,
    /// A straight line from the base rate down to `base * min_ratio` at `total_steps`.
    Linear,
}

/// A learning-rate schedule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LrSchedule {
    /// The peak rate.
    pub base: f64,
    /// Steps of linear warmup: step `k < warmup` uses `base * (k + 1) / warmup`.
    pub warmup_steps: u64,
    /// What follows the warmup.
    pub decay: DecayKind,
    /// Steps over which the decay runs to its floor (warmup included); the floor holds after
    /// it. 0 means no decay (constant after warmup).
    pub total_steps: u64,
    /// The floor as a fraction of `base`.
    pub min_ratio: f64,
}

impl LrSchedule {
    /// A constant rate with no warmup.
    pub fn constant(base: f64) -> Self {
        Self {
            base,
            warmup_steps: 0,
            decay: DecayKind::Constant,
            total_steps: 0,
            min_ratio: 1.0,
        }
    }

    /// The rate of the optimizer step that follows `done` completed steps.
    pub fn at(&self, done: u64) -> f64 {
        if done < self.warmup_steps {
            return self.base * (done + 1) as f64 / self.warmup_steps as f64;
        }
        if self.decay == DecayKind::Constant || self.total_steps <= self.warmup_steps {
            return self.base;
        }
        let span = (self.total_steps - self.warmup_steps) as f64;
        let progress = ((done - self.warmup_steps) as f64 / span).min(1.0);
        let floor = self.base * self.min_ratio;
        let shape = match self.decay {
            DecayKind::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
            DecayKind::Linear => 1.0 - progress,
            DecayKind::Constant => 1.0,
        };
        floor + (self.base - floor) * shape
    }
}
