//! The episodes `spade check` and `spade fuzz` play: recorded in memory, so that whatever an
//! oracle finds comes with a trajectory that `spade replay` reproduces.

use spade_sandbox::{CallError, Runtime, SandboxOptions};

use super::{Costed, Episode, EpisodeError, Record};
use crate::trajectory::RecordMeta;

impl Episode {
    /// An episode of `source` seeded with `seed`, recorded in memory with its `purpose` in the
    /// trajectory's metadata.
    pub(crate) async fn probe(
        runtime: &Runtime,
        source: &str,
        seed: u64,
        purpose: &str,
        fuel_limit: Option<u64>,
    ) -> Self {
        let mut meta = RecordMeta::default();
        meta.metadata
            .insert("purpose".to_owned(), serde_json::Value::from(purpose));
        let options = SandboxOptions::seeded(seed);
        let mut episode = Episode::start(runtime, source, options, Record::Memory(meta))
            .await
            .expect("writing to memory cannot fail");
        episode.limit_fuel(fuel_limit);
        episode
    }

    /// Ends a probe: the trajectory's text and its trace hash.
    pub(crate) fn finish_probe(self) -> (String, String) {
        let finished = self.finish().expect("writing to memory cannot fail");
        let summary = finished.summary.expect("a probe is recorded");
        let text = finished.trajectory.expect("a probe is recorded in memory");
        (text, summary.trace_sha256)
    }
}

/// How a probe's call refused for its fuel limit starts (see [`Costed::sandboxed`]).
pub(crate) const FUEL_REFUSED: &str = "refused: the check's fuel budget is spent";

/// Whether `err` is a probe's call refused for the check's fuel budget.
pub(crate) fn fuel_refused(err: &CallError) -> bool {
    matches!(err, CallError::Usage(message) if message.starts_with(FUEL_REFUSED))
}

impl<T> Costed<T> {
    /// The sandbox's result of a probe's call (a recording in memory cannot fail to write).
    pub(crate) fn sandboxed(self) -> Result<T, CallError> {
        self.result.map_err(|err| match err {
            EpisodeError::Call(err) => err,
            EpisodeError::FuelLimit { .. } => CallError::Usage(format!("{FUEL_REFUSED}: {err}")),
            other => CallError::Usage(format!("recording the trajectory failed: {other}")),
        })
    }
}
