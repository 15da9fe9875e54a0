//! The episode summary a footer records, computed call by call: the recorder keeps one while it
//! writes, and the tamper check recomputes one from the lines it reads, so both agree by
//! construction.

use spade_sandbox::ErrorKind;

use super::format::{CallKind, Footer, StepSummary};

/// Steps, total reward, last step and first error of an episode so far.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    steps: u64,
    total_reward: f64,
    last_step: Option<StepSummary>,
    failed: Option<ErrorKind>,
}

impl Tally {
    /// Counts one call: `step` is the result of a successful step, `error` the kind of a
    /// failed call.
    pub(crate) fn call(
        &mut self,
        call: CallKind,
        step: Option<StepSummary>,
        error: Option<ErrorKind>,
    ) {
        match call {
            CallKind::Reset => self.last_step = None,
            CallKind::Step => {
                self.steps += 1;
                if let Some(step) = step {
                    self.total_reward += step.reward;
                    self.last_step = Some(step);
                }
            }
            CallKind::Load | CallKind::Solution | CallKind::Close => {}
        }
        if let Some(kind) = error {
            self.failed.get_or_insert(kind);
        }
    }

    /// The footer so far, without its line count and trace hash: outcome `error:<kind>` after
    /// any failed call, else `terminated` (return: the last reward clipped to [-1, 1]),
    /// `truncated` or `open` (return 0).
    pub(crate) fn footer(&self) -> Footer {
        let (outcome, spade_return) = match (self.failed, self.last_step) {
            (Some(kind), _) => (format!("error:{kind}"), 0.0),
            (None, Some(step)) if step.terminated => {
                ("terminated".to_owned(), step.reward.clamp(-1.0, 1.0))
            }
            (None, Some(step)) if step.truncated => ("truncated".to_owned(), 0.0),
            _ => ("open".to_owned(), 0.0),
        };
        Footer {
            steps: self.steps,
            total_reward: self.total_reward,
            spade_return,
            outcome,
            lines: 0,
            trace_sha256: String::new(),
        }
    }
}
