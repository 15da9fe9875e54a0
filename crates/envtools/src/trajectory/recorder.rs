//! Recording an episode: a [`Recorder`] wraps a [`Sandbox`] and writes every call.

use std::collections::BTreeMap;
use std::io::{self, Write};

use spade_sandbox::CallError;
use spade_sandbox::GUEST_SHA256;
use spade_sandbox::Runtime;
use spade_sandbox::{CallOutput, EnvInfo, Reset, Sandbox, SandboxOptions, Step};

use super::format::{
    CallKind, CallRecord, CallResult, FORMAT_VERSION, Footer, Header, RecordedError, StepSummary,
    raw_json, sha256_hex,
};
use super::tally::Tally;
use super::writer::TrajectoryWriter;

/// What a recording carries besides the episode itself.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecordMeta {
    /// The privileged hint shown to the agent, if any.
    pub hint: Option<String>,
    /// Caller metadata: role, model, run id, ...
    pub metadata: BTreeMap<String, serde_json::Value>,
}

/// A call failed, or the trajectory could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error(transparent)]
    Call(#[from] CallError),
    #[error("writing the trajectory: {0}")]
    Io(#[from] io::Error),
}

impl RecordError {
    /// The sandbox error, if this is one.
    pub fn call_error(&self) -> Option<&CallError> {
        match self {
            RecordError::Call(err) => Some(err),
            RecordError::Io(_) => None,
        }
    }
}

/// Summary of a finished recording.
pub type RecordSummary = Footer;

/// Plays an episode through a sandbox and writes every call to a trajectory.
pub struct Recorder<W: Write> {
    sandbox: Result<Sandbox, CallError>,
    writer: TrajectoryWriter<W>,
    next_index: u64,
    tally: Tally,
}

fn output_of(sandbox: &Result<Sandbox, CallError>) -> (u64, CallOutput) {
    match sandbox {
        Ok(s) => (s.last_fuel(), s.last_output().clone()),
        Err(_) => (0, CallOutput::default()),
    }
}

impl<W: Write> Recorder<W> {
    /// Writes the header, creates the sandbox and records the `load` call. A load error is
    /// recorded, not returned: see [`Recorder::info`].
    pub async fn start(
        runtime: &Runtime,
        source: &str,
        options: SandboxOptions,
        meta: RecordMeta,
        out: W,
    ) -> io::Result<Recorder<W>> {
        let header = Header {
            format: FORMAT_VERSION,
            spade_version: env!("CARGO_PKG_VERSION").to_owned(),
            guest_sha256: GUEST_SHA256.to_owned(),
            env_sha256: sha256_hex(source.as_bytes()),
            env_source: source.to_owned(),
            options: options.into(),
            limits: runtime.limits().into(),
            hint: meta.hint,
            metadata: meta.metadata,
        };
        let writer = TrajectoryWriter::new(out, &header)?;
        let sandbox = runtime.sandbox(source, options).await;
        let (fuel, output) = match &sandbox {
            Ok(s) => (s.last_fuel(), s.last_output().clone()),
            Err(_) => (0, CallOutput::default()),
        };
        let mut recorder = Recorder {
            sandbox,
            writer,
            next_index: 0,
            tally: Tally::default(),
        };
        let mut record = recorder.record(CallKind::Load, fuel, &output);
        match &recorder.sandbox {
            Ok(s) => {
                let info = s.info();
                record.ok = Some(CallResult::Load {
                    class_name: info.class_name.clone(),
                    max_turns: info.max_turns,
                    tools: info.tools.as_deref().map(raw_json),
                });
            }
            Err(err) => {
                recorder.tally.call(CallKind::Load, None, Some(err.kind()));
                record.error = Some(RecordedError::from(err));
            }
        }
        recorder.writer.call(record)?;
        Ok(recorder)
    }

    /// What `load` found, or why it failed.
    pub fn info(&self) -> Result<&EnvInfo, &CallError> {
        self.sandbox.as_ref().map(Sandbox::info)
    }

    /// The header line as written.
    pub fn header_text(&self) -> &str {
        self.writer.header_text()
    }

    /// The last call line written.
    pub fn last_line(&self) -> &str {
        self.writer.last_line()
    }

    /// The recorded sandbox (for fuel and output of the last call).
    pub fn sandbox(&self) -> Option<&Sandbox> {
        self.sandbox.as_ref().ok()
    }

    fn record(&mut self, call: CallKind, fuel: u64, output: &CallOutput) -> CallRecord {
        let record = CallRecord::new(self.next_index, call, fuel, output);
        self.next_index += 1;
        record
    }

    fn sandbox_mut(&mut self) -> Result<&mut Sandbox, CallError> {
        match &mut self.sandbox {
            Ok(s) => Ok(s),
            Err(err) => Err(CallError::Usage(format!(
                "the environment failed to load ({}); nothing to call",
                err.kind()
            ))),
        }
    }

    fn finish_call<T>(
        &mut self,
        mut record: CallRecord,
        result: Result<T, CallError>,
        ok: impl FnOnce(&T) -> CallResult,
    ) -> Result<T, RecordError> {
        match &result {
            Ok(value) => record.ok = Some(ok(value)),
            Err(err) => record.error = Some(RecordedError::from(err)),
        }
        let step = match &record.ok {
            Some(CallResult::Step {
                reward,
                terminated,
                truncated,
                ..
            }) => Some(StepSummary {
                reward: *reward,
                terminated: *terminated,
                truncated: *truncated,
            }),
            _ => None,
        };
        let error = record.error.as_ref().map(|e| e.kind);
        self.tally.call(record.call, step, error);
        self.writer.call(record)?;
        Ok(result?)
    }

    /// Calls and records `reset`.
    pub async fn reset(&mut self, seed: Option<u64>) -> Result<Reset, RecordError> {
        let result = self.sandbox_mut()?.reset(seed).await;
        let (fuel, output) = output_of(&self.sandbox);
        let mut record = self.record(CallKind::Reset, fuel, &output);
        record.seed = seed;
        self.finish_call(record, result, |r: &Reset| CallResult::Reset {
            observation: r.observation.clone(),
            info: raw_json(&r.info),
            dropped: Vec::new(),
        })
    }

    /// Calls and records `reset` with extra fields ([`Sandbox::reset_with`]): the line keeps
    /// the fields, and the names of those `reset` did not take.
    pub async fn reset_with(
        &mut self,
        seed: Option<u64>,
        fields: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<(Reset, Vec<String>), RecordError> {
        let result = self.sandbox_mut()?.reset_with(seed, fields).await;
        let (fuel, output) = output_of(&self.sandbox);
        let mut record = self.record(CallKind::Reset, fuel, &output);
        record.seed = seed;
        record.fields = Some(fields.clone());
        self.finish_call(record, result, |(r, dropped): &(Reset, Vec<String>)| {
            CallResult::Reset {
                observation: r.observation.clone(),
                info: raw_json(&r.info),
                dropped: dropped.clone(),
            }
        })
    }

    /// Calls and records `step`.
    pub async fn step(&mut self, action: &str) -> Result<Step, RecordError> {
        let result = self.sandbox_mut()?.step(action).await;
        let (fuel, output) = output_of(&self.sandbox);
        let mut record = self.record(CallKind::Step, fuel, &output);
        record.action = Some(action.to_owned());
        self.finish_call(record, result, |s: &Step| CallResult::Step {
            observation: s.observation.clone(),
            reward: s.reward,
            terminated: s.terminated,
            truncated: s.truncated,
            info: raw_json(&s.info),
        })
    }

    /// Calls and records `solution`.
    pub async fn solution(&mut self) -> Result<String, RecordError> {
        let result = self.sandbox_mut()?.solution().await;
        let (fuel, output) = output_of(&self.sandbox);
        let record = self.record(CallKind::Solution, fuel, &output);
        self.finish_call(record, result, |s: &String| CallResult::Solution {
            solution: s.clone(),
        })
    }

    /// Calls and records `close`.
    pub async fn close(&mut self) -> Result<(), RecordError> {
        let result = self.sandbox_mut()?.close().await;
        let (fuel, output) = output_of(&self.sandbox);
        let record = self.record(CallKind::Close, fuel, &output);
        self.finish_call(record, result, |_: &()| CallResult::Close {})
    }

    /// Writes the footer and returns it with the writer.
    pub fn finish(self) -> io::Result<(RecordSummary, W)> {
        self.finish_keeping_sandbox()
            .map(|(summary, writer, _)| (summary, writer))
    }

    /// [`Recorder::finish`], handing back the sandbox too (`None` when the load failed): for a
    /// caller that hands it to the process's exit rather than drop it.
    pub fn finish_keeping_sandbox(self) -> io::Result<(RecordSummary, W, Option<Sandbox>)> {
        let (summary, writer) = self.writer.finish(self.tally.footer())?;
        Ok((summary, writer, self.sandbox.ok()))
    }
}
