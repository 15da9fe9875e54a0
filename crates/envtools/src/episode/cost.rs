//! What a call cost: every [`super::Episode`] call returns its value with its [`Cost`], as one
//! [`Costed`] value, and the episode keeps the running [`Spent`] totals.

use std::time::Duration;

use spade_sandbox::{CallError, CallOutput, ErrorKind};

/// What one call cost.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Cost {
    /// Fuel the call used (its whole budget if it ran out; 0 for a call refused before it ran).
    pub fuel: u64,
    /// What the environment printed during the call.
    pub output: CallOutput,
    /// Wall-clock time of the call (reported only: nothing in an episode depends on it).
    pub time: Duration,
}

/// Why an episode's call gave no value.
#[derive(Debug, thiserror::Error)]
pub enum EpisodeError {
    /// The sandbox call failed: an environment error, or a host limit that killed the sandbox.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The call ran, but its line could not be written to the trajectory.
    #[error("writing the trajectory: {0}")]
    Record(#[source] std::io::Error),
    /// A reset at a difficulty ([`super::Episode::reset_at`]) ran, but the environment's
    /// `reset` takes no `difficulty` and dropped it: the problem is not the one asked for.
    #[error("this environment's reset() takes no `difficulty` argument")]
    NoDifficulty,
    /// The sandbox's state could not be copied ([`super::Episode::fork`]).
    #[error(transparent)]
    Fork(#[from] spade_sandbox::ForkError),
    /// A fork was to be recorded, but its parent is not: a fork's recording is replayed from
    /// its parent's.
    #[error(
        "cannot record a fork of an episode that is not recorded: a fork's trajectory is \
         replayed from its parent's"
    )]
    UnrecordedParent,
    /// The episode had spent its fuel limit ([`super::Episode::limit_fuel`]): the call was
    /// refused without running.
    #[error("the episode has spent {spent} fuel, its limit is {limit}: no further call runs")]
    FuelLimit { spent: u64, limit: u64 },
}

impl EpisodeError {
    /// The sandbox error, if this is one.
    pub fn call_error(&self) -> Option<&CallError> {
        match self {
            EpisodeError::Call(err) => Some(err),
            _ => None,
        }
    }

    /// The sandbox error's kind, if this is one.
    pub fn kind(&self) -> Option<ErrorKind> {
        self.call_error().map(CallError::kind)
    }
}

/// A call's result together with what it cost.
#[derive(Debug)]
#[must_use = "a call's result says whether it failed"]
pub struct Costed<T> {
    /// The value, or why there is none.
    pub result: Result<T, EpisodeError>,
    /// What the call cost, whether it succeeded or not.
    pub cost: Cost,
}

impl<T> Costed<T> {
    /// The result, leaving the cost.
    pub fn into_result(self) -> Result<T, EpisodeError> {
        self.result
    }

    /// Maps the value, keeping the cost.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Costed<U> {
        Costed {
            result: self.result.map(f),
            cost: self.cost,
        }
    }

    /// Chains a fallible step on the value, keeping the cost.
    pub fn and_then<U>(self, f: impl FnOnce(T) -> Result<U, EpisodeError>) -> Costed<U> {
        Costed {
            result: self.result.and_then(f),
            cost: self.cost,
        }
    }

    /// The value and its cost, or the error.
    pub fn with_cost(self) -> Result<(T, Cost), EpisodeError> {
        let Costed { result, cost } = self;
        result.map(|value| (value, cost))
    }
}

/// What an episode's calls cost so far, the load included.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    /// Calls that ran (the load included; calls refused before they ran are not counted).
    pub calls: u64,
    /// Fuel of every call, summed.
    pub total_fuel: u64,
    /// Most fuel any one call used.
    pub max_fuel: u64,
    /// Output bytes dropped over the cap, summed.
    pub dropped_bytes: u64,
}

impl Spent {
    pub(super) fn add(&mut self, cost: &Cost) {
        self.calls += 1;
        self.total_fuel = self.total_fuel.saturating_add(cost.fuel);
        self.max_fuel = self.max_fuel.max(cost.fuel);
        self.dropped_bytes = self.dropped_bytes.saturating_add(cost.output.dropped_bytes);
    }
}
