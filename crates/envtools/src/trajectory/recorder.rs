//! Recording an episode: a [`Recording`] turns each call of an [`crate::Episode`] and its
//! result into a trajectory line. It never touches a sandbox: the episode makes the call and
//! hands over what came back with what it cost.

use std::collections::BTreeMap;
use std::io::{self, Write};

use spade_sandbox::GUEST_SHA256;
use spade_sandbox::{CallError, ExtraFields};
use spade_sandbox::{CallOutput, EnvInfo, Limits, Reset, SandboxOptions, Step};

use super::format::{
    CallKind, CallRecord, CallResult, FORMAT_VERSION, Footer, ForkOrigin, Header, RecordedError,
    StepSummary, raw_json, sha256_hex,
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

/// Summary of a finished recording.
pub type RecordSummary = Footer;

/// Where a recording's lines go.
pub enum Sink {
    /// Kept in memory (check and fuzz keep every finding's trajectory).
    Memory(Vec<u8>),
    /// Written to a stream, usually a buffered file; flushed after every line.
    Stream(Box<dyn Write + Send>),
}

impl Write for Sink {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Sink::Memory(bytes) => bytes.write(buf),
            Sink::Stream(out) => out.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Sink::Memory(bytes) => bytes.write_all(buf),
            Sink::Stream(out) => out.write_all(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Sink::Memory(_) => Ok(()),
            Sink::Stream(out) => out.flush(),
        }
    }
}

/// The trajectory of one episode being written: the header first, then one line per call.
pub(crate) struct Recording {
    header: Header,
    writer: TrajectoryWriter<Sink>,
    next_index: u64,
    tally: Tally,
}

/// A call's result as the recording needs it: the value or the error.
pub(crate) type Seen<'a, T> = Result<&'a T, &'a CallError>;

impl Recording {
    /// Writes the header of an episode of `source` under `limits`.
    pub(crate) fn start(
        limits: &Limits,
        source: &str,
        options: SandboxOptions,
        meta: RecordMeta,
        sink: Sink,
    ) -> io::Result<Recording> {
        let header = Header {
            format: FORMAT_VERSION,
            spade_version: env!("CARGO_PKG_VERSION").to_owned(),
            guest_sha256: GUEST_SHA256.to_owned(),
            env_sha256: sha256_hex(source.as_bytes()),
            env_source: source.to_owned(),
            options: options.into(),
            limits: limits.into(),
            hint: meta.hint,
            metadata: meta.metadata,
            fork: None,
        };
        Ok(Recording {
            writer: TrajectoryWriter::new(sink, &header)?,
            header,
            next_index: 0,
            tally: Tally::default(),
        })
    }

    /// The recording of a fork of this episode taken now: the same environment, options and
    /// limits, `meta`'s hint and metadata, and a header naming `parent` (this recording's
    /// file), the calls so far and their hash. Its calls go on from this one's index.
    pub(crate) fn fork(
        &self,
        parent: &str,
        reseed: Option<u64>,
        meta: RecordMeta,
        sink: Sink,
    ) -> io::Result<Recording> {
        let header = Header {
            hint: meta.hint,
            metadata: meta.metadata,
            fork: Some(ForkOrigin {
                parent: parent.to_owned(),
                at: self.next_index,
                prefix_sha256: self.writer.prefix_sha256(),
                reseed,
            }),
            ..self.header.clone()
        };
        Ok(Recording {
            writer: TrajectoryWriter::new(sink, &header)?,
            header,
            next_index: self.next_index,
            tally: Tally::default(),
        })
    }

    /// The header line as written.
    pub(crate) fn header_text(&self) -> &str {
        self.writer.header_text()
    }

    /// The last call line written.
    pub(crate) fn last_line(&self) -> &str {
        self.writer.last_line()
    }

    fn record(&mut self, call: CallKind, fuel: u64, output: &CallOutput) -> CallRecord {
        let record = CallRecord::new(self.next_index, call, fuel, output);
        self.next_index += 1;
        record
    }

    /// Records the `load` call.
    pub(crate) fn load(
        &mut self,
        fuel: u64,
        output: &CallOutput,
        seen: Seen<'_, EnvInfo>,
    ) -> io::Result<()> {
        let mut record = self.record(CallKind::Load, fuel, output);
        match seen {
            Ok(info) => {
                record.ok = Some(CallResult::Load {
                    class_name: info.class_name.clone(),
                    max_turns: info.max_turns,
                    tools: info.tools.as_deref().map(raw_json),
                });
            }
            Err(err) => {
                self.tally.call(CallKind::Load, None, Some(err.kind()));
                record.error = Some(RecordedError::from(err));
            }
        }
        self.writer.call(record)
    }

    /// Records a `reset`; `fields` are the extra fields it was called with (`None` for a plain
    /// reset), and the result carries the names of those it dropped.
    pub(crate) fn reset(
        &mut self,
        seed: Option<u64>,
        fields: Option<&ExtraFields>,
        fuel: u64,
        output: &CallOutput,
        seen: Seen<'_, (Reset, Vec<String>)>,
    ) -> io::Result<()> {
        let mut record = self.record(CallKind::Reset, fuel, output);
        record.seed = seed;
        record.fields = fields.cloned();
        let ok = seen.map(|(r, dropped)| CallResult::Reset {
            observation: r.observation.clone(),
            info: raw_json(&r.info),
            dropped: dropped.clone(),
        });
        self.finish_call(record, ok)
    }

    /// Records a `step`.
    pub(crate) fn step(
        &mut self,
        action: &str,
        fuel: u64,
        output: &CallOutput,
        seen: Seen<'_, Step>,
    ) -> io::Result<()> {
        let mut record = self.record(CallKind::Step, fuel, output);
        record.action = Some(action.to_owned());
        let ok = seen.map(|s| CallResult::Step {
            observation: s.observation.clone(),
            reward: s.reward,
            terminated: s.terminated,
            truncated: s.truncated,
            info: raw_json(&s.info),
        });
        self.finish_call(record, ok)
    }

    /// Records a `solution`.
    pub(crate) fn solution(
        &mut self,
        fuel: u64,
        output: &CallOutput,
        seen: Seen<'_, String>,
    ) -> io::Result<()> {
        let record = self.record(CallKind::Solution, fuel, output);
        let ok = seen.map(|s| CallResult::Solution {
            solution: s.clone(),
        });
        self.finish_call(record, ok)
    }

    /// Records a `close`.
    pub(crate) fn close(
        &mut self,
        fuel: u64,
        output: &CallOutput,
        seen: Seen<'_, ()>,
    ) -> io::Result<()> {
        let record = self.record(CallKind::Close, fuel, output);
        self.finish_call(record, seen.map(|_| CallResult::Close {}))
    }

    fn finish_call(
        &mut self,
        mut record: CallRecord,
        ok: Result<CallResult, &CallError>,
    ) -> io::Result<()> {
        match ok {
            Ok(result) => record.ok = Some(result),
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
        self.writer.call(record)
    }

    /// Writes the footer and returns it with the sink.
    pub(crate) fn finish(self) -> io::Result<(RecordSummary, Sink)> {
        self.writer.finish(self.tally.footer())
    }
}
