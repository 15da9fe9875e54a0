//! Reset and step reproducibility, as Gymnasium's `check_env` tests them.
//!
//! Within one instance, `reset(seed)` after other episodes must give the same observation and
//! info as the first `reset(seed)`, and the same actions from it the same results (state that
//! survives `reset` breaks every comparison of episodes that share a seed). A fresh instance
//! with another sandbox seed must give the same first observation too: `reset(seed)` alone
//! decides the task, not randomness drawn before it (in `__init__`, or from the unseeded
//! module-global RNG).

use spade_sandbox::CallError;
use spade_sandbox::{EnvInfo, Reset, Step};

use super::Checker;
use crate::actions::{ActionGen, Style, parse_tools};
use crate::episode::Episode;
use crate::oracles::{Severity, Violation, clip};

/// The seed whose episode is reset and replayed.
const SEED: u64 = 300;
/// The seed of the episode played in between, and the sandbox seed of the second instance.
const OTHER_SEED: u64 = 301;
/// Steps per probe episode at most: enough to expose state kept across episodes, cheap in fuel.
const MAX_STEPS: u32 = 20;

/// Characters of each side shown in a message.
const SHOWN: usize = 160;

/// One step of the first episode, to replay.
struct Played {
    action: String,
    step: Step,
}

impl Checker<'_> {
    /// Runs the reset- and step-reproducibility probes.
    pub(super) async fn reproducibility_probes(&mut self, info: &EnvInfo) {
        self.report.probes.push("reset_reproducibility".to_owned());
        let limit = info
            .max_turns
            .unwrap_or(self.options.max_steps)
            .min(MAX_STEPS);
        let mut recording = self.probe(SEED, "check:reproducibility").await;
        let mut steps = 0u64;
        let outcome = self
            .within_instance(&mut recording, info, limit, &mut steps)
            .await;
        let (text, _) = self.finish_episode(recording, steps);
        let first = match outcome {
            Ok((first, None)) => first,
            Ok((_, Some((severity, v)))) | Err((severity, v)) => {
                self.add(severity, v, Some(SEED), Some(&text));
                return;
            }
        };
        if self.over_budget() {
            return;
        }

        // A second instance, with another sandbox seed.
        let mut recording = self.probe(OTHER_SEED, "check:reproducibility").await;
        let problem = match recording.reset(Some(SEED)).await.sandboxed() {
            Err(err) => Some(self.failure("reset_failed", &format!("reset(seed={SEED})"), &err)),
            Ok(again) => compare_resets(&first, &again).map(|d| {
                Violation::new(
                    "reset_not_reproducible",
                    format!(
                        "reset(seed={SEED}) in a new instance (sandbox seed {OTHER_SEED}) gave \
                         a different {} than in the first instance (sandbox seed {SEED}): {}. \
                         The task depends on randomness drawn outside reset(seed) (in \
                         __init__, or from the module-global random without random.seed(seed))",
                        d.field, d.sides
                    ),
                )
            }),
        };
        let (text, _) = self.finish_episode(recording, 0);
        if let Some(v) = problem {
            self.add(Severity::Error, v, Some(SEED), Some(&text));
        }
    }

    /// First episode, another episode, then `reset(SEED)` and the first episode's actions
    /// again. Returns the first reset and the finding, if any; `Err` for a failed call.
    async fn within_instance(
        &mut self,
        recording: &mut Episode,
        info: &EnvInfo,
        limit: u32,
        steps: &mut u64,
    ) -> Result<(Reset, Option<(Severity, Violation)>), (Severity, Violation)> {
        let tools = parse_tools(info.tools.as_deref());
        let first = self.reset(recording, SEED).await?;
        let episode = self
            .play(
                recording,
                &first.observation,
                ActionGen::new(SEED, tools.clone()),
                limit,
                steps,
            )
            .await?;
        let other = self.reset(recording, OTHER_SEED).await?;
        self.play(
            recording,
            &other.observation,
            ActionGen::new(OTHER_SEED, tools),
            limit,
            steps,
        )
        .await?;
        let again = self.reset(recording, SEED).await?;
        if let Some(d) = compare_resets(&first, &again) {
            let v = Violation::new(
                "reset_not_reproducible",
                format!(
                    "reset(seed={SEED}) after other episodes in the same instance gave a \
                     different {} than the first reset(seed={SEED}): {}. State survives reset \
                     (a reset must depend only on its seed)",
                    d.field, d.sides
                ),
            );
            return Ok((first, Some((Severity::Error, v))));
        }

        self.report.probes.push("step_reproducibility".to_owned());
        for (index, recorded) in episode.iter().enumerate() {
            *steps += 1;
            let step = recording
                .step(&recorded.action)
                .await
                .sandboxed()
                .map_err(|err| self.step_failed(&recorded.action, &err))?;
            if let Some(d) = compare_steps(&recorded.step, &step) {
                let v = Violation::new(
                    "step_not_reproducible",
                    format!(
                        "after reset(seed={SEED}) again, step {} ({:?}) gave a different {} \
                         than the same step of the first episode from reset(seed={SEED}) in \
                         this instance: {}. The same seed and actions must give the same \
                         results (state survives reset)",
                        index + 1,
                        clip(&recorded.action, 80),
                        d.field,
                        d.sides
                    ),
                );
                return Ok((first, Some((Severity::Error, v))));
            }
        }
        Ok((first, None))
    }

    async fn reset(
        &mut self,
        recording: &mut Episode,
        seed: u64,
    ) -> Result<Reset, (Severity, Violation)> {
        recording
            .reset(Some(seed))
            .await
            .sandboxed()
            .map_err(|err| {
                (
                    Severity::Error,
                    self.failure("reset_failed", &format!("reset(seed={seed})"), &err),
                )
            })
    }

    fn step_failed(&mut self, action: &str, err: &CallError) -> (Severity, Violation) {
        (
            Severity::Error,
            self.failure("step_failed", &format!("step({})", clip(action, 80)), err),
        )
    }

    /// Plausible actions from `observation` until the episode ends or `limit` steps.
    async fn play(
        &mut self,
        recording: &mut Episode,
        observation: &str,
        mut generator: ActionGen,
        limit: u32,
        steps: &mut u64,
    ) -> Result<Vec<Played>, (Severity, Violation)> {
        let mut played = Vec::new();
        let mut observation = observation.to_owned();
        for _ in 0..limit {
            let action = generator.next(&observation, Style::Plausible);
            *steps += 1;
            let step = recording
                .step(&action)
                .await
                .sandboxed()
                .map_err(|err| self.step_failed(&action, &err))?;
            let ended = step.terminated || step.truncated;
            observation.clone_from(&step.observation);
            played.push(Played { action, step });
            if ended {
                break;
            }
        }
        Ok(played)
    }
}

/// What differs between two results: the field, and both values (shortened).
#[derive(Debug, PartialEq)]
struct Difference {
    field: &'static str,
    /// `first X, then Y`.
    sides: String,
}

fn texts_differ(field: &'static str, first: &str, then: &str) -> Option<Difference> {
    (first != then).then(|| Difference {
        field,
        sides: format!("first {}, then {}", shown(first, then), shown(then, first)),
    })
}

/// What differs between two resets, or `None`.
fn compare_resets(first: &Reset, again: &Reset) -> Option<Difference> {
    texts_differ("observation", &first.observation, &again.observation)
        .or_else(|| texts_differ("info", &first.info, &again.info))
}

/// What differs between two step results, or `None`.
fn compare_steps(first: &Step, again: &Step) -> Option<Difference> {
    if let Some(d) = texts_differ("observation", &first.observation, &again.observation) {
        return Some(d);
    }
    if first.reward.to_bits() != again.reward.to_bits() {
        return Some(Difference {
            field: "reward",
            sides: format!("first {}, then {}", first.reward, again.reward),
        });
    }
    if (first.terminated, first.truncated) != (again.terminated, again.truncated) {
        return Some(Difference {
            field: "(terminated, truncated)",
            sides: format!(
                "first ({}, {}), then ({}, {})",
                first.terminated, first.truncated, again.terminated, again.truncated
            ),
        });
    }
    texts_differ("info", &first.info, &again.info)
}

/// `text`, quoted and shortened to about `SHOWN` characters around where it first differs
/// from `other`.
fn shown(text: &str, other: &str) -> String {
    let differs_at = text
        .chars()
        .zip(other.chars())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| text.chars().count().min(other.chars().count()));
    let start = differs_at.saturating_sub(SHOWN / 3);
    let tail: String = text.chars().skip(start).collect();
    let body = clip(&tail, SHOWN);
    if start > 0 {
        format!("{:?}", format!("...{body}"))
    } else {
        format!("{body:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reset(observation: &str, info: &str) -> Reset {
        Reset {
            observation: observation.to_owned(),
            info: info.to_owned(),
        }
    }

    #[test]
    fn resets_compare_observation_then_info() {
        assert_eq!(compare_resets(&reset("a", "{}"), &reset("a", "{}")), None);
        assert_eq!(
            compare_resets(&reset("round 1", "{}"), &reset("round 2", "{}")).unwrap(),
            Difference {
                field: "observation",
                sides: "first \"round 1\", then \"round 2\"".to_owned()
            }
        );
        assert_eq!(
            compare_resets(&reset("a", "{\"n\": 1}"), &reset("a", "{\"n\": 2}")).unwrap(),
            Difference {
                field: "info",
                sides: "first \"{\\\"n\\\": 1}\", then \"{\\\"n\\\": 2}\"".to_owned()
            }
        );
    }

    #[test]
    fn long_texts_are_shown_around_their_first_difference() {
        let a = format!("{}X{}", "a".repeat(1000), "b".repeat(1000));
        let b = format!("{}Y{}", "a".repeat(1000), "b".repeat(1000));
        let s = shown(&a, &b);
        assert!(s.starts_with("\"...aaa"), "{s}");
        assert!(s.contains("aX"), "{s}");
        assert!(s.len() < 260, "{s}");
    }
}
