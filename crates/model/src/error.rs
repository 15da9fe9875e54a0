//! Typed errors at the model library's boundary.
use std::path::PathBuf;

/// Errors returned by the model layer (loading, sampling, training, checkpoints).
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A file or directory the caller named does not exist.
    #[error("missing file: {}", path.display())]
    MissingFile {
        /// The path that was looked for.
        path: PathBuf,
    },
    /// The checkpoint's architecture is not one this decoder implements.
    #[error("unsupported architecture `{0}` (supported: llama, qwen2, qwen3)")]
    UnsupportedArchitecture(String),
    /// A GGUF tensor uses a quantisation type the loader does not dequantise.
    #[error("tensor `{tensor}` uses unsupported quantisation type {dtype}")]
    UnsupportedQuantization {
        /// The tensor's name in the file.
        tensor: String,
        /// The quantisation type as named by ggml.
        dtype: String,
    },
    /// A weight's shape in the file differs from the one the config implies.
    #[error(
        "shape mismatch for tensor `{tensor}`: config expects {expected:?}, file has {found:?}"
    )]
    ShapeMismatch {
        /// The tensor's name (HF naming).
        tensor: String,
        /// Shape implied by the config.
        expected: Vec<usize>,
        /// Shape found in the file.
        found: Vec<usize>,
    },
    /// A weight the config requires is absent from the file.
    #[error("tensor `{0}` is missing from the checkpoint")]
    MissingTensor(String),
    /// A metadata key or config field is missing or malformed.
    #[error("invalid model metadata: {0}")]
    InvalidMetadata(String),
    /// The tokenizer could not be built or used.
    #[error("tokenizer error: {0}")]
    Tokenizer(String),
    /// The chat template is not one the sampler can render.
    #[error("unsupported chat template: {0}")]
    ChatTemplate(String),
    /// Invalid sampling or training parameters.
    #[error("invalid parameter: {0}")]
    InvalidParameter(String),
    /// A downloaded file's checksum differs from the pinned one.
    #[error("checksum mismatch for {}: expected {expected}, got {found}", path.display())]
    ChecksumMismatch {
        /// The file that was checked.
        path: PathBuf,
        /// The pinned sha256.
        expected: String,
        /// The sha256 of the file on disk.
        found: String,
    },
    /// A tensor operation failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
    /// Reading or writing a file failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A JSON file could not be parsed.
    #[error("{context}: {source}")]
    Json {
        /// What was being parsed.
        context: String,
        /// The underlying error.
        source: serde_json::Error,
    },
}

/// Result alias for the model library.
pub type Result<T, E = ModelError> = std::result::Result<T, E>;

impl ModelError {
    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}
