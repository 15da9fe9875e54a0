//! [`Episode::fork`]: copies of a live episode, each an episode of its own.
//!
//! The sandbox's state is copied by the runtime ([`Runtime::fork_n`]); what the episode adds is
//! the recording. A recorded fork's file names its parent's file, the number of calls before
//! the fork and the sha256 of the parent's lines up to there ([`ForkOrigin`]); its own calls go
//! on from the parent's index. A replay runs the parent's prefix from the parent's file, checks
//! its hash, forks, and replays the fork's calls (`trajectory::replay`).
//!
//! [`ForkOrigin`]: crate::trajectory::ForkOrigin
//! [`Runtime::fork_n`]: spade_sandbox::Runtime::fork_n

use std::time::Instant;

use spade_sandbox::CallError;

use super::{Cost, Costed, Episode, EpisodeError, Record, Spent};
use crate::trajectory::recorder::Sink;

/// How one fork of an episode is made.
pub struct Branch {
    /// `None`: an exact copy, which draws the parent's very numbers. `Some(seed)`: the copy's
    /// WASI entropy and Python's module-global `random` are seeded with `seed` at the fork.
    pub reseed: Option<u64>,
    /// Whether and where the fork is recorded. Only a recorded episode's forks can be.
    pub record: Record,
    /// The parent's trajectory file as the fork's header names it (a path relative to the
    /// directory of the fork's own file, or absolute): where a replay reads the prefix from.
    /// Unused when the fork is not recorded.
    pub parent: String,
}

impl Branch {
    /// An exact copy, not recorded.
    pub fn exact() -> Branch {
        Branch {
            reseed: None,
            record: Record::Off,
            parent: String::new(),
        }
    }

    /// A copy reseeded with `seed`, not recorded.
    pub fn reseeded(seed: u64) -> Branch {
        Branch {
            reseed: Some(seed),
            ..Branch::exact()
        }
    }
}

impl Episode {
    /// A copy of this episode in exactly its state: the same calls give byte-identical
    /// results and fuel in both, and neither sees the other's calls. Its cost is the time the
    /// copy took (a fork runs nothing of the environment's: no fuel). Refused when the
    /// environment never loaded, when the sandbox is dead, when the guest holds a host
    /// resource ([`spade_sandbox::ForkError`]), and when the fork is to be recorded but this
    /// episode is not ([`EpisodeError::UnrecordedParent`]).
    pub async fn fork(&mut self, branch: Branch) -> Costed<Episode> {
        self.fork_n(vec![branch])
            .await
            .map(|mut copies| copies.pop().expect("one copy per branch"))
    }

    /// One copy per branch, from one capture of the state (see [`Episode::fork`]).
    pub async fn fork_n(&mut self, branches: Vec<Branch>) -> Costed<Vec<Episode>> {
        let started = Instant::now();
        let result = self.fork_all(branches).await;
        Costed {
            result,
            cost: Cost {
                time: started.elapsed(),
                ..Cost::default()
            },
        }
    }

    async fn fork_all(&mut self, branches: Vec<Branch>) -> Result<Vec<Episode>, EpisodeError> {
        let sandbox = match &mut self.sandbox {
            Ok(sandbox) => sandbox,
            Err(load) => {
                return Err(EpisodeError::Call(CallError::Usage(format!(
                    "the environment failed to load ({}); nothing to fork",
                    load.kind()
                ))));
            }
        };
        let recorded = branches.iter().any(|b| !matches!(b.record, Record::Off));
        if recorded && self.recording.is_none() {
            return Err(EpisodeError::UnrecordedParent);
        }
        let reseeds: Vec<Option<u64>> = branches.iter().map(|b| b.reseed).collect();
        let sandboxes = self.runtime.fork_n(sandbox, &reseeds).await?;
        let mut copies = Vec::with_capacity(branches.len());
        for (branch, sandbox) in branches.into_iter().zip(sandboxes) {
            let sink = match branch.record {
                Record::Off => None,
                Record::Memory(meta) => Some((meta, Sink::Memory(Vec::new()))),
                Record::Stream(out, meta) => Some((meta, Sink::Stream(out))),
            };
            let recording = match (sink, &self.recording) {
                (Some((meta, sink)), Some(parent)) => Some(
                    parent
                        .fork(&branch.parent, branch.reseed, meta, sink)
                        .map_err(EpisodeError::Record)?,
                ),
                _ => None,
            };
            copies.push(Episode {
                runtime: self.runtime.clone(),
                sandbox: Ok(sandbox),
                recording,
                load: Cost::default(),
                spent: Spent::default(),
                fuel_limit: self
                    .fuel_limit
                    .map(|limit| limit.saturating_sub(self.spent.total_fuel)),
            });
        }
        Ok(copies)
    }
}
