//! A recorded episode: every call goes through a [`Recorder`] so that whatever an oracle finds
//! comes with a trajectory file that `spade replay` reproduces.

use crate::error::CallError;
use crate::runtime::Runtime;
use crate::sandbox::{EnvInfo, Reset, SandboxOptions, Step};
use crate::trajectory::{RecordError, RecordMeta, Recorder};

/// One recorded episode in memory, with the statistics the oracles need.
pub struct Session {
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

impl Session {
    /// Creates the sandbox (seeded with `seed`) and records the load.
    pub async fn start(runtime: &Runtime, source: &str, seed: u64, purpose: &str) -> Session {
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
        let mut session = Session {
            recorder,
            step_fuel: Vec::new(),
            max_fuel: 0,
            total_fuel: 0,
            dropped_bytes: 0,
        };
        session.account(false);
        session
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
