//! Oracles: properties every call and every episode of a well-behaved environment has.

use serde::Serialize;
use spade_sandbox::Step;
use spade_sandbox::{CallError, ErrorKind};

/// Rewards outside `[-REWARD_BOUND, REWARD_BOUND]` are findings (the SPADE reference rejects
/// them in validation).
pub const REWARD_BOUND: f64 = 10.0;

/// How bad a finding is: errors reject an environment, warnings do not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
}

/// One violated property.
#[derive(Debug, Clone, PartialEq)]
pub struct Violation {
    /// Stable machine name (`exception`, `reward_out_of_range`, `no_end`, ...).
    pub code: String,
    /// The typed error behind it, if a call failed.
    pub kind: Option<ErrorKind>,
    /// What distinguishes violations of the same code (the exception type, ...), for
    /// deduplication.
    pub signature: String,
    pub message: String,
}

impl Violation {
    pub fn new(code: &str, message: String) -> Violation {
        Violation {
            code: code.to_owned(),
            kind: None,
            signature: String::new(),
            message,
        }
    }
}

/// Checks a step result: a finite reward within bounds. (The flags and the info dict are typed
/// by the sandbox contract; a wrongly typed one arrives as a `contract` error.)
pub fn check_step(step: &Step) -> Option<Violation> {
    if !step.reward.is_finite() {
        return Some(Violation::new(
            "reward_not_finite",
            format!("step returned reward {}", step.reward),
        ));
    }
    if step.reward.abs() > REWARD_BOUND {
        return Some(Violation::new(
            "reward_out_of_range",
            format!(
                "step returned reward {} outside [-{REWARD_BOUND}, {REWARD_BOUND}]",
                step.reward
            ),
        ));
    }
    None
}

/// The violation a failed call stands for; its code is the error kind (`exception`,
/// `contract`, `out_of_fuel`, `guest_trap`, ...), its signature the exception type or the
/// first line of the message.
pub fn call_failed(call: &str, err: &CallError) -> Violation {
    let detail = err.detail();
    let signature = match err {
        CallError::Exception(traceback) => exception_type(traceback),
        CallError::Contract(message) | CallError::Load(message) => first_words(message),
        _ => String::new(),
    };
    Violation {
        code: err.kind().as_str().to_owned(),
        kind: Some(err.kind()),
        signature,
        message: format!("{call} failed with {}: {}", err.kind(), clip(&detail, 2000)),
    }
}

/// The exception type named on the last line of a Python traceback (`KeyError`, ...).
pub fn exception_type(traceback: &str) -> String {
    let last = traceback
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    last.split(':').next().unwrap_or("").trim().to_owned()
}

fn first_words(message: &str) -> String {
    let line = message.lines().next().unwrap_or("");
    line.split_whitespace()
        .take(6)
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text`, cut to at most `max` characters.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}... ({} more bytes)", &text[..at], text.len() - at),
        None => text.to_owned(),
    }
}

/// The median of `values` (0 when empty).
pub fn median(values: &[u64]) -> u64 {
    if values.is_empty() {
        return 0;
    }
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    sorted[sorted.len() / 2]
}

/// Checks that an episode ended by `max_turns`: after `steps` steps, of which none ended the
/// episode, it must not have reached `max_turns`.
pub fn check_end(max_turns: Option<u32>, steps: usize, ended: bool) -> Option<Violation> {
    match max_turns {
        Some(m) if !ended && steps >= m as usize => Some(Violation::new(
            "no_end",
            format!(
                "the episode neither terminated nor was truncated after {steps} steps (max_turns is {m})"
            ),
        )),
        _ => None,
    }
}

/// A call that used more than `factor` times the median fuel of a step.
pub fn check_fuel(fuel: u64, median: u64, factor: u64) -> Option<Violation> {
    (median > 0 && fuel > median.saturating_mul(factor)).then(|| {
        Violation::new(
            "fuel_outlier",
            format!(
                "a call used {fuel} fuel, {:.0} times the median step ({median})",
                fuel as f64 / median as f64
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(reward: f64) -> Step {
        Step {
            observation: String::new(),
            reward,
            terminated: false,
            truncated: false,
            info: "{}".into(),
        }
    }

    #[test]
    fn step_oracles() {
        assert_eq!(check_step(&step(1.0)), None);
        assert_eq!(check_step(&step(-10.0)), None);
        assert_eq!(check_step(&step(10.5)).unwrap().code, "reward_out_of_range");
        assert_eq!(
            check_step(&step(f64::NAN)).unwrap().code,
            "reward_not_finite"
        );
        assert_eq!(check_end(Some(3), 3, false).unwrap().code, "no_end");
        assert_eq!(check_end(Some(3), 3, true), None);
        assert_eq!(check_end(None, 300, false), None);
        assert_eq!(check_fuel(1000, 10, 50).unwrap().code, "fuel_outlier");
        assert_eq!(check_fuel(400, 10, 50), None);
        assert_eq!(median(&[5, 1, 3]), 3);
    }

    #[test]
    fn failed_calls_are_classified() {
        let err = CallError::Exception(
            "Traceback (most recent call last):\n  File \"env.py\", line 3\nKeyError: 'x'\n".into(),
        );
        let v = call_failed("step", &err);
        assert_eq!(
            (v.code.as_str(), v.signature.as_str()),
            ("exception", "KeyError")
        );
        assert_eq!(
            call_failed("step", &CallError::OutOfFuel { budget: 1 }).code,
            "out_of_fuel"
        );
    }
}
