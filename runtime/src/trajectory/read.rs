//! Reading trajectory files back, and the tamper check.

use serde_json::Value;

use super::format::{CallKind, FORMAT_VERSION, Footer, Header, ReadCall, ReadLine, sha256_hex};

/// Why a trajectory could not be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TrajectoryError {
    #[error("not a spade trajectory: {0}")]
    NotATrajectory(String),
    #[error("unsupported trajectory format version {found} (this spade reads version {supported})")]
    UnsupportedVersion { found: String, supported: u32 },
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

impl Trajectory {
    /// Parses a trajectory file's text.
    pub fn parse(text: &str) -> Result<Trajectory, TrajectoryError> {
        if text.trim().is_empty() {
            return Err(TrajectoryError::NotATrajectory(
                "the file is empty".to_owned(),
            ));
        }
        let mut lines: Vec<&str> = text.split('\n').collect();
        let mut truncated = None;
        let last = lines.pop().unwrap_or_default();
        if !last.is_empty() {
            truncated = Some(Truncation::PartialLine {
                line: lines.len() + 1,
            });
        }
        let Some(first) = lines.first() else {
            return Err(TrajectoryError::NotATrajectory(
                "the file ends before its header line is complete".to_owned(),
            ));
        };
        let value: Value = serde_json::from_str(first)
            .map_err(|_| TrajectoryError::NotATrajectory("line 1 is not JSON".to_owned()))?;
        if value.get("type").and_then(Value::as_str) != Some("header") {
            return Err(TrajectoryError::NotATrajectory(
                "line 1 is not a trajectory header".to_owned(),
            ));
        }
        match value.get("format").and_then(Value::as_u64) {
            Some(v) if v == u64::from(FORMAT_VERSION) => {}
            other => {
                let found = other.map(|v| v.to_string()).unwrap_or_else(|| {
                    value
                        .get("format")
                        .map(|v| v.to_string())
                        .unwrap_or_else(|| "(missing)".to_owned())
                });
                return Err(TrajectoryError::UnsupportedVersion {
                    found,
                    supported: FORMAT_VERSION,
                });
            }
        }
        let header = match serde_json::from_str::<ReadLine>(first) {
            Ok(ReadLine::Header(h)) => h,
            Ok(_) => unreachable!("type checked above"),
            Err(e) => {
                return Err(TrajectoryError::Corrupt {
                    line: 1,
                    message: e.to_string(),
                });
            }
        };
        let mut calls = Vec::new();
        let mut footer = None;
        for (i, text) in lines.iter().enumerate().skip(1) {
            let line = i + 1;
            if footer.is_some() {
                return Err(TrajectoryError::Corrupt {
                    line,
                    message: "a line follows the footer".to_owned(),
                });
            }
            match serde_json::from_str::<ReadLine>(text) {
                Ok(ReadLine::Call(call)) => calls.push((text.to_string(), call)),
                Ok(ReadLine::Footer(f)) => footer = Some((text.to_string(), f)),
                Ok(ReadLine::Header(_)) => {
                    return Err(TrajectoryError::Corrupt {
                        line,
                        message: "a second header".to_owned(),
                    });
                }
                Err(e) => {
                    return Err(TrajectoryError::Corrupt {
                        line,
                        message: e.to_string(),
                    });
                }
            }
        }
        if footer.is_none() && truncated.is_none() {
            truncated = Some(Truncation::NoFooter);
        }
        Ok(Trajectory {
            header,
            header_text: first.to_string(),
            calls,
            footer,
            truncated,
        })
    }

    /// Checks, without executing anything, that no line was edited, removed or reordered since
    /// recording: the embedded source against its hash, call indices, the hash chain between
    /// lines, and the footer's trace hash and summary.
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
        let mut trace = format!("{}\n", self.header_text);
        for (i, (text, call)) in self.calls.iter().enumerate() {
            let line = i + 2;
            if call.index != i as u64 {
                let why = if call.index > i as u64 {
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
            trace.push_str(text);
            trace.push('\n');
        }
        let trace_sha256 = sha256_hex(trace.as_bytes());
        if let Some((_, footer)) = &self.footer {
            let lines = 1 + self.calls.len();
            if footer.lines != lines as u64 {
                return tampered(format!(
                    "the footer counts {} lines before it, the file has {lines}",
                    footer.lines
                ));
            }
            if footer.trace_sha256 != trace_sha256 {
                return tampered(format!(
                    "line {lines} was modified after recording: the lines hash to {trace_sha256}, the footer records {}",
                    footer.trace_sha256
                ));
            }
            let steps = self
                .calls
                .iter()
                .filter(|(_, c)| c.call == CallKind::Step)
                .count() as u64;
            let total: f64 = self
                .calls
                .iter()
                .filter_map(|(_, c)| {
                    c.ok.as_ref()
                        .and_then(|ok| ok.get("reward"))
                        .and_then(Value::as_f64)
                })
                .sum();
            if footer.steps != steps || footer.total_reward != total {
                return tampered(format!(
                    "the footer was modified: it records {} steps and total reward {}, the lines give {steps} and {total}",
                    footer.steps, footer.total_reward
                ));
            }
        }
        Ok(Verified {
            calls: self.calls.len(),
            trace_sha256,
        })
    }
}
