//! What can go wrong in self-play training: [`TrainError`] names the part that failed (the
//! model, a setting, the config text, a run file, a trajectory, a play task, a checkpoint, the
//! inference server, an environment, the policy), so a message says what to fix.
//! `spade report`'s own errors are [`crate::report::ReportError`].
use std::path::{Path, PathBuf};

use spade_model::error::ModelError;

use crate::remote::InferenceError;
use crate::remote::adapters::SyncError;

/// Errors of the self-play loop, its policies and its files.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// The model failed: loading, tokenizing, sampling, a GRPO step, saving or loading weights
    /// and adapters.
    #[error(transparent)]
    Model(#[from] ModelError),
    /// `--init-adapter` names no adapter, or one that does not fit the run's LoRA settings or
    /// its model.
    #[error("--init-adapter: {0}")]
    InitAdapter(#[from] spade_model::checkpoint::AdapterInitError),
    /// A setting is out of range or contradicts another one (`regen_interval = 0`, `kl_coef`
    /// without `lora`, ...): change it in the config or on the command line.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// The config text is not a config: malformed TOML or JSON, an unknown or retired key, a
    /// value of the wrong type, an unknown preset.
    #[error("{0}")]
    Config(String),
    /// Reading, writing, creating or renaming a file or directory failed (the run's files,
    /// the config, held-out environments).
    #[error("{action} {}: {source}", path.display())]
    File {
        /// What was being done (`reading`, `writing`, `creating`, ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A run file holds JSON that does not parse (or state that does not serialise).
    #[error("{context}: {source}")]
    Json {
        /// What was being read or written.
        context: String,
        /// The underlying error.
        source: serde_json::Error,
    },
    /// The corpus cannot be used: a line that is not a JSON document with a `text`, or no
    /// documents at all.
    #[error("{0}")]
    Corpus(String),
    /// The run directory already holds a run, and this was asked to start a new one.
    #[error(
        "{} already holds a run: pass --resume to continue it, or choose another --out",
        dir.display()
    )]
    RunExists {
        /// The run directory.
        dir: PathBuf,
    },
    /// The run directory has no complete checkpoint, and this was asked to resume it.
    #[error("{} has no complete checkpoint to resume from", dir.display())]
    NoCheckpoint {
        /// The run directory.
        dir: PathBuf,
    },
    /// Writing or loading a checkpoint failed; `source` says which part.
    #[error("{action} checkpoint {}: {source}", path.display())]
    Checkpoint {
        /// `writing` or `loading`.
        action: &'static str,
        /// The checkpoint's directory.
        path: PathBuf,
        /// What failed inside it.
        source: Box<TrainError>,
    },
    /// A checkpoint file is readable but incomplete (written by another model or cut short).
    #[error("checkpoint file {}: {why}", path.display())]
    BadCheckpoint {
        /// The file.
        path: PathBuf,
        /// What is missing.
        why: String,
    },
    /// Recording an episode's trajectory failed (its file could not be started, written or
    /// finished): play stops, since a run keeps every episode it trains on.
    #[error("recording {}: {source}", trajectory_name(path))]
    Trajectory {
        /// The trajectory file, where the caller knows it.
        path: Option<PathBuf>,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A task that stepped an environment panicked or was cancelled.
    #[error("a play task failed (it panicked or was cancelled): {0}")]
    PlayTask(#[source] tokio::task::JoinError),
    /// The inference server could not be reached, refused a request, or answered something
    /// training cannot use.
    #[error(transparent)]
    Inference(#[from] InferenceError),
    /// The trained adapters could not be loaded into the inference server.
    #[error(transparent)]
    AdapterSync(#[from] SyncError),
    /// The inference client's own async runtime did not start.
    #[error("starting the inference client's async runtime: {0}")]
    InferenceRuntime(#[source] std::io::Error),
    /// An environment cannot be played as asked (a difficulty given to a `reset()` that takes
    /// none, a directory without environments).
    #[error("{0}")]
    Environment(String),
    /// The policy broke its contract (a different number of completions than asked) or was
    /// asked for what it cannot do (a sampling-only policy asked to train).
    #[error("{0}")]
    Policy(String),
}

/// Result alias for self-play.
pub type Result<T, E = TrainError> = std::result::Result<T, E>;

fn trajectory_name(path: &Option<PathBuf>) -> String {
    match path {
        Some(p) => format!("the trajectory {}", p.display()),
        None => "a trajectory".into(),
    }
}

impl TrainError {
    /// A failed file operation: `action` (`reading`, `writing`, ...) on `path`.
    pub fn file(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        Self::File {
            action,
            path: path.to_path_buf(),
            source,
        }
    }

    /// A failed write of the trajectory at `path`.
    pub fn trajectory(path: &Path, source: std::io::Error) -> Self {
        Self::Trajectory {
            path: Some(path.to_path_buf()),
            source,
        }
    }

    /// `self` as a failure of `action` (`writing`, `loading`) on the checkpoint at `path`.
    pub fn in_checkpoint(self, action: &'static str, path: &Path) -> Self {
        Self::Checkpoint {
            action,
            path: path.to_path_buf(),
            source: Box::new(self),
        }
    }
}

impl From<candle_core::Error> for TrainError {
    fn from(e: candle_core::Error) -> Self {
        Self::Model(e.into())
    }
}
