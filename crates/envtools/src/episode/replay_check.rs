//! The replay oracle: a recorded episode must replay to the same trace.

use spade_sandbox::Runtime;

use crate::oracles::Violation;
use crate::trajectory::{ReplayOptions, Trajectory, replay};

/// Replays a recorded episode: it must reproduce its trace hash.
pub async fn check_replay(runtime: &Runtime, text: &str, trace_sha256: &str) -> Option<Violation> {
    let trajectory = match Trajectory::parse(text) {
        Ok(t) => t,
        Err(err) => {
            return Some(Violation::new(
                "trajectory_unreadable",
                format!("the recorded trajectory does not parse: {err}"),
            ));
        }
    };
    match replay(runtime, &trajectory, &ReplayOptions::default()).await {
        Ok(report) => match report.divergence {
            Some(d) => Some(Violation::new(
                "nondeterministic",
                format!("replaying the episode diverged at {d}"),
            )),
            None if report.trace_sha256 != trace_sha256 => Some(Violation::new(
                "nondeterministic",
                format!(
                    "the replay's trace hash {} differs from the recording's {trace_sha256}",
                    report.trace_sha256
                ),
            )),
            None => None,
        },
        Err(err) => Some(Violation::new(
            "nondeterministic",
            format!("the episode could not be replayed: {err}"),
        )),
    }
}
