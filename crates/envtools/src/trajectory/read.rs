//! Reading trajectory files back, and the tamper check.
//!
//! A file is read line by line (never as one string), under a size cap checked before reading
//! and again while reading; each line's text is kept once, beside the few fields a replay and
//! the tamper check need. Results are not parsed into values: they stay in the line text, which
//! a replay compares byte for byte, so any number a guest wrote (integers of any size) reads back.

use std::io::BufRead;
use std::path::Path;

use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use spade_sandbox::{ErrorKind, ExtraFields};

use super::format::{
    CallKind, FORMAT_VERSION, Footer, Header, ReadCall, StepSummary, sha256_hex, unsigned_footer,
};
use super::raw;
use super::tally::Tally;

/// Largest trajectory file [`Trajectory::open`] reads unless told otherwise: 1 GiB. An episode
/// of 25 turns with megabyte observations is tens of MiB; a file of gigabytes is an attack on
/// the reader's memory more likely than a recording.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1 << 30;

fn too_large(size: Option<u64>, limit: u64) -> String {
    let bytes = |n: u64| format!("{n} bytes ({:.1} MiB)", n as f64 / f64::from(1 << 20));
    let (what, how) = match size {
        Some(size) => (
            format!("the file is {}, more than", bytes(size)),
            "it was refused without reading it into memory",
        ),
        None => (
            "the input is longer than".to_owned(),
            "reading stopped there",
        ),
    };
    format!(
        "{what} the {} a trajectory may have here; {how} (raise the cap with --max-file-size if \
         you trust the file)",
        bytes(limit)
    )
}

/// Why a trajectory could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrajectoryError {
    #[error("not a spade trajectory: {0}")]
    NotATrajectory(String),
    #[error("unsupported trajectory format version {found} (this spade reads version {supported})")]
    UnsupportedVersion { found: String, supported: u32 },
    #[error(
        "trajectory format version {found} was written by an older spade: its trace hash does not \
         cover the footer, and it cannot hold an overflowing total reward; this spade reads version \
         {supported} only, so record the episode again"
    )]
    OutdatedVersion { found: u32, supported: u32 },
    /// `size` is the file's size when known before reading; `None` when the input turned out
    /// longer than `limit` while it was read.
    #[error("{}", too_large(*size, *limit))]
    TooLarge { size: Option<u64>, limit: u64 },
    #[error("cannot read the trajectory: {0}")]
    Io(String),
    #[error("line {line} is corrupt: {message}")]
    Corrupt { line: usize, message: String },
    #[error("tampered: {0}")]
    Tampered(String),
    #[error(
        "the trajectory was recorded with guest {recorded}, but this build's guest is {this}: a replay \
         would not be bit-exact (pass --allow-guest-mismatch to replay anyway)"
    )]
    GuestMismatch { recorded: String, this: String },
    #[error(
        "the environment source differs from the recorded one (recorded sha256 {recorded}, given source \
         sha256 {given})"
    )]
    EnvMismatch { recorded: String, given: String },
    /// The trajectory is a fork, and its parent's prefix could not be replayed: the file is
    /// missing or unreadable, its lines before the fork differ from the ones the fork was made
    /// from, or their replay diverged.
    #[error("the fork's parent {parent}: {message}")]
    ForkParent { parent: String, message: String },
}

/// How a trajectory file ends when its writer was interrupted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Truncation {
    /// The file ends inside line `line` (no newline): that line was dropped.
    PartialLine { line: usize },
    /// All lines are complete but there is no footer.
    NoFooter,
}

impl std::fmt::Display for Truncation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Truncation::PartialLine { line } => {
                write!(
                    f,
                    "the file ends in the middle of line {line} (the recording process was interrupted)"
                )
            }
            Truncation::NoFooter => write!(
                f,
                "the file has no footer (the recording process was interrupted)"
            ),
        }
    }
}

/// A parsed trajectory: the exact text of every line beside its parsed form.
#[derive(Debug, Clone)]
pub struct Trajectory {
    pub header: Header,
    pub header_text: String,
    pub calls: Vec<(String, ReadCall)>,
    pub footer: Option<(String, Footer)>,
    pub truncated: Option<Truncation>,
}

/// What the tamper check found on an intact file.
#[derive(Debug, Clone, PartialEq)]
pub struct Verified {
    pub calls: usize,
    pub trace_sha256: String,
}

/// A call line as written: the fields [`ReadCall`] keeps, the result left as raw text.
#[derive(Deserialize)]
struct CallLine<'a> {
    index: u64,
    call: CallKind,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    fields: Option<ExtraFields>,
    #[serde(default)]
    action: Option<String>,
    #[serde(default, borrow)]
    ok: Option<&'a RawValue>,
    #[serde(default)]
    error: Option<ErrorLine>,
    fuel: u64,
    prev_sha256: String,
}

#[derive(Deserialize)]
struct ErrorLine {
    kind: ErrorKind,
}

/// The `type` (and, for a header, `format`) of a line, read before the rest.
#[derive(Deserialize)]
struct LineType<'a> {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default, borrow)]
    format: Option<&'a RawValue>,
}

impl Trajectory {
    /// Parses a trajectory file's text.
    pub fn parse(text: &str) -> Result<Trajectory, TrajectoryError> {
        Trajectory::read(text.as_bytes(), u64::MAX)
    }

    /// Reads the trajectory file at `path`, refusing (before reading) a file larger than
    /// `max_bytes`.
    pub fn open(path: &Path, max_bytes: u64) -> Result<Trajectory, TrajectoryError> {
        let io = |e: std::io::Error| TrajectoryError::Io(e.to_string());
        let file = std::fs::File::open(path).map_err(io)?;
        let size = file.metadata().map_err(io)?.len();
        if size > max_bytes {
            return Err(TrajectoryError::TooLarge {
                size: Some(size),
                limit: max_bytes,
            });
        }
        Trajectory::read(std::io::BufReader::new(file), max_bytes)
    }

    /// Reads a trajectory from `reader`, line by line, failing once more than `max_bytes`
    /// have been read (for inputs whose size is not known in advance, or that grow).
    pub fn read(reader: impl BufRead, max_bytes: u64) -> Result<Trajectory, TrajectoryError> {
        let mut reader = reader.take(max_bytes.saturating_add(1));
        let mut lines = Lines {
            read: 0,
            max_bytes,
            number: 0,
        };
        let Some((first, complete)) = lines.next(&mut reader)? else {
            return Err(TrajectoryError::NotATrajectory(
                "the file is empty".to_owned(),
            ));
        };
        if first.trim().is_empty() && lines.rest_is_blank(&mut reader)? {
            return Err(TrajectoryError::NotATrajectory(
                "the file is empty".to_owned(),
            ));
        }
        let header = parse_header(&first, complete)?;
        let mut trajectory = Trajectory {
            header,
            header_text: first,
            calls: Vec::new(),
            footer: None,
            truncated: None,
        };
        while let Some((text, complete)) = lines.next(&mut reader)? {
            let line = lines.number;
            if !complete {
                trajectory.truncated = Some(Truncation::PartialLine { line });
                break;
            }
            if trajectory.footer.is_some() {
                return Err(corrupt(line, "a line follows the footer"));
            }
            let kind = serde_json::from_str::<LineType>(&text)
                .map_err(|e| corrupt(line, &e.to_string()))?
                .kind;
            match kind.as_deref() {
                Some("call") => {
                    let call = parse_call(&text).map_err(|m| corrupt(line, &m))?;
                    trajectory.calls.push((text, call));
                }
                Some("footer") => {
                    let footer = serde_json::from_str::<Footer>(&text)
                        .map_err(|e| corrupt(line, &e.to_string()))?;
                    trajectory.footer = Some((text, footer));
                }
                Some("header") => return Err(corrupt(line, "a second header")),
                Some(other) => {
                    return Err(corrupt(
                        line,
                        &format!("unknown line type {other:?} (expected call or footer)"),
                    ));
                }
                None => return Err(corrupt(line, "the line has no \"type\"")),
            }
        }
        if trajectory.footer.is_none() && trajectory.truncated.is_none() {
            trajectory.truncated = Some(Truncation::NoFooter);
        }
        Ok(trajectory)
    }

    /// Checks, without executing anything, that no line was edited, removed or reordered since
    /// recording: the embedded source against its hash, call indices, the hash chain between
    /// lines, the footer's summary against the calls, and the trace hash, which covers every
    /// byte of every line, the footer's own fields included. Hashes the lines where they lie.
    pub fn verify(&self) -> Result<Verified, TrajectoryError> {
        let tampered = |m: String| Err(TrajectoryError::Tampered(m));
        let source_hash = sha256_hex(self.header.env_source.as_bytes());
        if source_hash != self.header.env_sha256 {
            return tampered(format!(
                "the embedded environment source was altered: the header records sha256 {}, the source hashes to {source_hash}",
                self.header.env_sha256
            ));
        }
        let mut prev_text = self.header_text.as_str();
        let mut trace = Sha256::new();
        trace.update(self.header_text.as_bytes());
        trace.update(b"\n");
        let mut tally = Tally::default();
        // A fork's calls go on from its parent's.
        let first = self.header.fork.as_ref().map_or(0, |fork| fork.at);
        for (i, (text, call)) in self.calls.iter().enumerate() {
            let line = i + 2;
            let i = first + i as u64;
            if call.index != i {
                let why = if call.index > i {
                    "a line was removed or lines were reordered"
                } else {
                    "lines were reordered or duplicated"
                };
                return tampered(format!(
                    "line {line} holds call {} where call {i} was expected: {why}",
                    call.index
                ));
            }
            if call.prev_sha256 != sha256_hex(prev_text.as_bytes()) {
                return tampered(format!(
                    "line {} was modified after recording: its sha256 does not match prev_sha256 in line {line}",
                    line - 1
                ));
            }
            prev_text = text;
            trace.update(text.as_bytes());
            trace.update(b"\n");
            tally.call(call.call, call.step, call.error);
        }
        let Some((footer_text, footer)) = &self.footer else {
            return Ok(Verified {
                calls: self.calls.len(),
                trace_sha256: hex::encode(trace.finalize()),
            });
        };
        let lines = 1 + self.calls.len();
        if footer.lines != lines as u64 {
            return tampered(format!(
                "the footer counts {} lines before it, the file has {lines}",
                footer.lines
            ));
        }
        let mut derived = tally.footer();
        derived.lines = footer.lines;
        derived.trace_sha256.clone_from(&footer.trace_sha256);
        if unsigned_footer(&derived) != unsigned_footer(footer) {
            return tampered(format!(
                "the footer was modified: it records {}, the lines give {}",
                summary(footer),
                summary(&derived)
            ));
        }
        let unsigned =
            raw::replace_members(footer_text, &["trace_sha256"], |_| Some("\"\"".to_owned()))
                .unwrap_or_else(|| footer_text.clone());
        trace.update(unsigned.as_bytes());
        let trace_sha256 = hex::encode(trace.finalize());
        if footer.trace_sha256 != trace_sha256 {
            return tampered(format!(
                "line {lines} or the footer was modified after recording: the lines and the footer hash to {trace_sha256}, the footer records {}",
                footer.trace_sha256
            ));
        }
        Ok(Verified {
            calls: self.calls.len(),
            trace_sha256,
        })
    }
}

/// A footer's summary fields, for messages.
fn summary(footer: &Footer) -> String {
    format!(
        "{} steps, total reward {}, return {} and outcome {:?}",
        footer.steps, footer.total_reward, footer.spade_return, footer.outcome
    )
}

fn corrupt(line: usize, message: &str) -> TrajectoryError {
    TrajectoryError::Corrupt {
        line,
        message: message.to_owned(),
    }
}

/// Line-by-line reading under the byte cap.
struct Lines {
    read: u64,
    max_bytes: u64,
    number: usize,
}

impl Lines {
    /// The next line without its newline, and whether it had one; `None` at the end.
    fn next(
        &mut self,
        reader: &mut impl BufRead,
    ) -> Result<Option<(String, bool)>, TrajectoryError> {
        let mut bytes = Vec::new();
        let n = reader
            .read_until(b'\n', &mut bytes)
            .map_err(|e| TrajectoryError::Io(e.to_string()))?;
        self.read += n as u64;
        if self.read > self.max_bytes {
            return Err(TrajectoryError::TooLarge {
                size: None,
                limit: self.max_bytes,
            });
        }
        if n == 0 {
            return Ok(None);
        }
        self.number += 1;
        let complete = bytes.last() == Some(&b'\n');
        if complete {
            bytes.pop();
        }
        let text = String::from_utf8(bytes).map_err(|e| {
            corrupt(
                self.number,
                &format!(
                    "not valid UTF-8 (invalid byte at offset {} of the line)",
                    e.utf8_error().valid_up_to()
                ),
            )
        })?;
        Ok(Some((text, complete)))
    }

    /// True when every line left is blank (whitespace only).
    fn rest_is_blank(&mut self, reader: &mut impl BufRead) -> Result<bool, TrajectoryError> {
        while let Some((text, _)) = self.next(reader)? {
            if !text.trim().is_empty() {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

/// Parses line 1: a header of this format version.
fn parse_header(text: &str, complete: bool) -> Result<Header, TrajectoryError> {
    if !complete {
        return Err(TrajectoryError::NotATrajectory(
            "the file ends before its header line is complete".to_owned(),
        ));
    }
    let probe = serde_json::from_str::<LineType>(text)
        .map_err(|_| TrajectoryError::NotATrajectory("line 1 is not JSON".to_owned()))?;
    if probe.kind.as_deref() != Some("header") {
        return Err(TrajectoryError::NotATrajectory(
            "line 1 is not a trajectory header".to_owned(),
        ));
    }
    let found = probe.format.map(RawValue::get);
    match found.and_then(|f| f.parse::<u32>().ok()) {
        Some(FORMAT_VERSION) => {}
        Some(old) if (1..FORMAT_VERSION).contains(&old) => {
            return Err(TrajectoryError::OutdatedVersion {
                found: old,
                supported: FORMAT_VERSION,
            });
        }
        _ => {
            return Err(TrajectoryError::UnsupportedVersion {
                found: found.unwrap_or("(missing)").to_owned(),
                supported: FORMAT_VERSION,
            });
        }
    }
    serde_json::from_str::<Header>(text).map_err(|e| corrupt(1, &e.to_string()))
}

/// Parses a call line into the fields a replay and the tamper check use.
fn parse_call(text: &str) -> Result<ReadCall, String> {
    let line: CallLine = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let step = match (line.call, line.ok) {
        (CallKind::Step, Some(ok)) => Some(
            serde_json::from_str::<StepSummary>(ok.get())
                .map_err(|e| format!("the step result: {e}"))?,
        ),
        _ => None,
    };
    Ok(ReadCall {
        index: line.index,
        call: line.call,
        seed: line.seed,
        fields: line.fields,
        action: line.action,
        step,
        error: line.error.map(|e| e.kind),
        fuel: line.fuel,
        prev_sha256: line.prev_sha256,
    })
}
