//! A recorded episode, as `spade check` and `spade fuzz` play one: every call goes through a
//! [`Recorder`] so that whatever an oracle finds comes with a trajectory file that
//! `spade replay` reproduces; and [`check_replay`], the oracle that such a file replays to the
//! same trace.

use spade_sandbox::CallError;
use spade_sandbox::Runtime;
use spade_sandbox::{EnvInfo, Reset, SandboxOptions, Step};

use crate::oracles::Violation;
use crate::trajectory::{RecordError, RecordMeta, Recorder, ReplayOptions, Trajectory, replay};

/// One recorded episode in memory, with the statistics the oracles need.
pub struct RecordedEpisode {
    recorder: Recorder<Vec<u8>>,
    /// Fuel of every `step` call, in order.
    pub step_fuel: Vec<u64>,
    /// Most fuel any call used (load included).
    pub max_fuel: u64,
    /// Fuel of every call summed (load included).
    pub total_fuel: u64,
    /// Output bytes dropped over the cap, summed over the calls.
    pub dropped_bytes: u64,
}

fn call_error(err: RecordError) -> CallError {
    match err {
        RecordError::Call(err) => err,
        RecordError::Io(err) => CallError::Usage(format!("recording the trajectory failed: {err}")),
    }
}

impl RecordedEpisode {
    /// Creates the sandbox (seeded with `seed`) and records the load.
    pub async fn start(
        runtime: &Runtime,
        source: &str,
        seed: u64,
        purpose: &str,
    ) -> RecordedEpisode {
        let mut meta = RecordMeta::default();
        meta.metadata
            .insert("purpose".to_owned(), serde_json::Value::from(purpose));
        let recorder = Recorder::start(
            runtime,
            source,
            SandboxOptions::seeded(seed),
            meta,
            Vec::new(),
        )
        .await
        .expect("writing to memory cannot fail");
        let mut recorded = RecordedEpisode {
            recorder,
            step_fuel: Vec::new(),
            max_fuel: 0,
            total_fuel: 0,
            dropped_bytes: 0,
        };
        recorded.account(false);
        recorded
    }

    /// What `load` found, or why it failed.
    pub fn info(&self) -> Result<&EnvInfo, &CallError> {
        self.recorder.info()
    }

    fn account(&mut self, step: bool) {
        if let Some(sandbox) = self.recorder.sandbox() {
            let fuel = sandbox.last_fuel();
            self.max_fuel = self.max_fuel.max(fuel);
            self.total_fuel = self.total_fuel.saturating_add(fuel);
            self.dropped_bytes += sandbox.last_output().dropped_bytes;
            if step {
                self.step_fuel.push(fuel);
            }
        }
    }

    pub async fn reset(&mut self, seed: Option<u64>) -> Result<Reset, CallError> {
        let result = self.recorder.reset(seed).await.map_err(call_error);
        self.account(false);
        result
    }

    pub async fn step(&mut self, action: &str) -> Result<Step, CallError> {
        let result = self.recorder.step(action).await.map_err(call_error);
        self.account(true);
        result
    }

    pub async fn solution(&mut self) -> Result<String, CallError> {
        let result = self.recorder.solution().await.map_err(call_error);
        self.account(false);
        result
    }

    /// Ends the recording: the trajectory text and its trace hash.
    pub fn finish(self) -> (String, String) {
        let (footer, bytes) = self
            .recorder
            .finish()
            .expect("writing to memory cannot fail");
        let text = String::from_utf8(bytes).expect("trajectories are UTF-8");
        (text, footer.trace_sha256)
    }
}

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
