//! What can go wrong when reporting on a run directory.
use std::path::PathBuf;

use crate::error::TrainError;

/// Errors of [`write_report`](super::write_report), each naming the file at fault.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The run directory does not exist.
    #[error("run directory '{}' does not exist", path.display())]
    MissingRunDir {
        /// The directory that was named.
        path: PathBuf,
    },
    /// The run path is a file, not a directory.
    #[error(
        "'{}' is not a directory: pass a run directory (the --out of `spade train`)",
        path.display()
    )]
    NotADirectory {
        /// The path that was named.
        path: PathBuf,
    },
    /// The directory holds no `metrics.jsonl`.
    #[error(
        "'{}' is not a run directory: it has no metrics.jsonl (a run directory is the --out of `spade train`)",
        path.display()
    )]
    NotARunDir {
        /// The directory that was named.
        path: PathBuf,
    },
    /// A line of `metrics.jsonl` is not a metrics record.
    #[error("{} line {line}: not a metrics record: {source}", path.display())]
    MalformedMetrics {
        /// The metrics file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// The parse error.
        source: serde_json::Error,
    },
    /// `metrics.jsonl` holds no rollout yet.
    #[error(
        "no rollouts yet: {} is empty (the run has not finished its first rollout)",
        path.display()
    )]
    NoRollouts {
        /// The metrics file.
        path: PathBuf,
    },
    /// Reading or writing a file failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Writing a report file (or reading the run's state) failed.
    #[error(transparent)]
    Write(#[from] TrainError),
}

impl ReportError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
